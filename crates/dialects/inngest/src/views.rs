//! How engine resources look on the wire: sandboxes, processes, snapshots, output chunks.

use sandboxd_dialect_common::rfc3339_nanos;
use sandboxd_engine::{
    ExecResult, FileWritten, OutputChunk, ProcessExit, ProcessInfo, ProcessState, Resources,
    Sandbox, Snapshot, StreamKind,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesView {
    vcpu: u32,
    memory_mb: u32,
}

impl From<Resources> for ResourcesView {
    fn from(r: Resources) -> Self {
        Self {
            vcpu: r.vcpu,
            memory_mb: r.memory_mb,
        }
    }
}

/// The sandbox resource.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxView {
    id: Uuid,
    name: String,
    pub(crate) status: &'static str,
    vpc_id: Uuid,
    image_ref: String,
    resources: ResourcesView,
    created_at: String,
    started_at: Option<String>,
    ended_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The informational VPC ID: stable per workspace (each workspace has one egress-only VPC).
pub fn vpc_id(workspace: &str) -> Uuid {
    Uuid::new_v5(
        &Uuid::NAMESPACE_URL,
        format!("sandboxd:vpc:{workspace}").as_bytes(),
    )
}

pub fn sandbox(s: &Sandbox) -> SandboxView {
    SandboxView {
        id: s.id,
        name: s.name.clone().unwrap_or_else(|| s.id.to_string()),
        status: s.status.as_str(),
        vpc_id: vpc_id(&s.workspace),
        image_ref: s.image.clone(),
        resources: s.resources.into(),
        created_at: rfc3339_nanos(s.created_at),
        started_at: s.started_at.map(rfc3339_nanos),
        ended_at: s.ended_at.map(rfc3339_nanos),
        error: s.error.clone().filter(|e| !e.is_empty()),
    }
}

/// The process resource (also the Wait answer).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessView {
    id: Uuid,
    command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    /// `RUNNING`, `EXITED` or `KILLED`.
    #[schema(value_type = String, example = "RUNNING")]
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    termination_signal: Option<i32>,
    started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_at: Option<String>,
    /// Extension, present (`true`) only when `command` is a prefix of the command line
    /// the process runs with: the server keeps at most 1 KiB and 64 arguments of it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    command_truncated: bool,
}

pub fn process(p: &ProcessInfo) -> ProcessView {
    let exited = p.state == ProcessState::Exited;
    let killed = p.state == ProcessState::Killed;
    ProcessView {
        id: p.id,
        command: p.argv.clone(),
        pid: (p.pid > 0).then_some(p.pid),
        state: p.state.as_str(),
        exit_code: exited.then_some(match p.exit {
            Some(ProcessExit::Code(c)) => c,
            _ => 0,
        }),
        termination_signal: killed.then_some(match p.exit {
            Some(ProcessExit::Signal(s)) => s,
            _ => 9,
        }),
        started_at: p.started_at.clone(),
        ended_at: p.ended_at.clone(),
        command_truncated: p.argv_truncated,
    }
}

/// A captured command's result.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecView {
    stdout: String,
    stderr: String,
    encoding: &'static str,
    exit_code: i32,
}

pub fn exec(r: &ExecResult) -> ExecView {
    use base64::Engine as _;
    // A command ended by a signal reports the shell convention 128+signal.
    let exit_code = r.exit.map(ProcessExit::shell_code).unwrap_or(-1);
    let b64 = base64::engine::general_purpose::STANDARD;
    ExecView {
        stdout: b64.encode(&r.stdout),
        stderr: b64.encode(&r.stderr),
        encoding: "base64",
        exit_code,
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileWrittenView {
    path: String,
    bytes_written: u64,
}

pub fn file_written(w: &FileWritten) -> FileWrittenView {
    FileWrittenView {
        path: w.path.clone(),
        bytes_written: w.bytes_written,
    }
}

/// One chunk of retained output (`data` is base64).
#[derive(Serialize, ToSchema)]
pub struct ChunkView {
    /// `STDOUT` or `STDERR`.
    #[schema(value_type = String, example = "STDOUT")]
    stream: StreamKind,
    data: String,
    encoding: &'static str,
    at: String,
}

/// A chunk of output as the API shows it.
pub fn chunk(c: &OutputChunk) -> ChunkView {
    use base64::Engine as _;
    ChunkView {
        stream: c.stream,
        data: base64::engine::general_purpose::STANDARD.encode(&c.data),
        encoding: "base64",
        at: c.at.clone(),
    }
}

/// The snapshot resource (the SDK's shape: READY snapshots carry a sha256 source image).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotView {
    id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    source_image_id: String,
    status: &'static str,
    compatibility_id: String,
    resources: ResourcesView,
    memory_pack_count: u32,
    disk_pack_count: u32,
    stored_bytes: u64,
    created_at: String,
    updated_at: String,
    expires_at: String,
    source_sandbox_id: Uuid,
    /// sandboxd's extension: whether it keeps the source's memory too (its running
    /// processes: gVisor sandboxes, with or without egress), so that sandboxes created from it
    /// start with them running (a fork); `false`: its filesystem only.
    memory: bool,
}

/// Snapshots that never expire report the largest RFC 3339 time.
const NEVER: &str = "9999-12-31T23:59:59.999999999Z";

pub fn snapshot(s: &Snapshot) -> SnapshotView {
    SnapshotView {
        id: s.id,
        name: s.name.clone(),
        source_image_id: sha256_id(&s.image),
        status: "READY",
        compatibility_id: format!("sandboxd-linux-overlay-v1:{}", sha256_id(&s.image)),
        resources: s.resources.into(),
        memory_pack_count: u32::from(s.has_memory()),
        disk_pack_count: s.layers.len() as u32,
        stored_bytes: s.size_bytes,
        created_at: rfc3339_nanos(s.created_at),
        updated_at: rfc3339_nanos(s.created_at),
        expires_at: s
            .expires_at
            .map(rfc3339_nanos)
            .unwrap_or_else(|| NEVER.to_owned()),
        source_sandbox_id: s.source_sandbox_id,
        memory: s.has_memory(),
    }
}

/// An image's ID as lowercase sha256 hex: the digest itself when it already is one.
fn sha256_id(image: &str) -> String {
    let bare = image.strip_prefix("sha256:").unwrap_or(image);
    if bare.len() == 64
        && bare
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return bare.to_owned();
    }
    hex::encode(Sha256::digest(image.as_bytes()))
}
