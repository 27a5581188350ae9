//! The dialect's rendering of engine values: Sandbox, its state and exit reason,
//! templates and list pages.

use crate::meta::Attributes;
use sandboxd_dialect_common::rfc3339_nanos;
use sandboxd_engine::{EndReason, Sandbox, SandboxStatus, Template};
use serde::Serialize;
use std::collections::BTreeMap;

/// A command's outcome in a create or exec answer.
#[derive(Debug, Clone, Serialize, Default, utoipa::ToSchema)]
#[schema(as = Result)]
#[serde(rename_all = "camelCase")]
pub struct ResultView {
    pub exec_id: String,
    /// The exit code, 128+N after signal N; null when the command did not end.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Output past the cap (4 MiB of stdout and stderr together) was dropped.
    pub truncated: bool,
    /// Why the command could not run or finish.
    #[schema(value_type = Option<crate::error::ErrorBody>)]
    pub error: Option<crate::error::ErrorBody>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = Sandbox)]
#[serde(rename_all = "camelCase")]
pub struct SandboxView {
    /// Opaque; do not parse it.
    pub id: String,
    pub template: String,
    #[schema(value_type = crate::openapi::State)]
    pub state: &'static str,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When its timeout ends it; absent for a sandbox that has none (made through
    /// another dialect without a timeout).
    #[schema(format = DateTime)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub ended_at: Option<String>,
    /// Why it ended; absent while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::openapi::ExitReason>)]
    pub exit_reason: Option<&'static str>,
    pub cpu: u32,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u32,
    pub cpu_request: f64,
    #[serde(rename = "memoryRequestMiB")]
    pub memory_request_mib: u32,
    #[schema(value_type = crate::body::Placement)]
    pub placement: &'static str,
    pub metadata: BTreeMap<String, String>,
    pub ephemeral: bool,
    pub auto_pause: bool,
    /// sandboxd's extension: since when the sandbox is on disk for memory (autoPause;
    /// its state stays `running`, the next operation wakes it); absent while resident.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub auto_paused_at: Option<String>,
    /// sandboxd's extension: its isolation tier, `container` or `gvisor`.
    #[schema(pattern = "^(container|gvisor)$")]
    pub isolation: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultView>,
}

/// `running` | `paused` | `exited`.
pub fn state(s: SandboxStatus) -> &'static str {
    use SandboxStatus::*;
    match s {
        Paused | Resuming => "paused",
        Terminated | Failed => "exited",
        _ => "running",
    }
}

pub fn exit_reason(r: EndReason) -> &'static str {
    match r {
        EndReason::Destroyed => "killed",
        EndReason::Timeout => "timeout",
        EndReason::Crashed => "guest_exit",
        EndReason::StartFailed => "error",
    }
}

pub fn sandbox(sb: &Sandbox) -> SandboxView {
    let metadata = sb.metadata.clone();
    let attrs = Attributes::of(sb).unwrap_or(Attributes {
        template: sb.image.clone(),
        ephemeral: false,
        pinned: false,
        cpu_request: f64::from(sb.resources.vcpu),
        memory_request_mib: sb.resources.memory_mb,
        auto_pause: false,
    });
    let ended = sb.status.is_terminal();
    SandboxView {
        id: sb.id.to_string(),
        template: attrs.template,
        state: state(sb.status),
        created_at: rfc3339_nanos(sb.created_at),
        expires_at: sb.expires_at.map(rfc3339_nanos),
        ended_at: sb.ended_at.filter(|_| ended).map(rfc3339_nanos),
        exit_reason: sb
            .end_reason
            .filter(|_| ended)
            .map(exit_reason)
            .or(ended.then_some("error")),
        cpu: sb.resources.vcpu,
        memory_mib: sb.resources.memory_mb,
        cpu_request: attrs.cpu_request,
        memory_request_mib: attrs.memory_request_mib,
        placement: if attrs.pinned { "pinned" } else { "shared" },
        metadata,
        ephemeral: attrs.ephemeral,
        auto_pause: attrs.auto_pause || sb.auto_pause,
        isolation: sb.isolation.as_str(),
        auto_paused_at: sb.auto_paused_at.filter(|_| !ended).map(rfc3339_nanos),
        result: None,
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = Template)]
#[serde(rename_all = "camelCase")]
pub struct TemplateView {
    pub id: String,
    pub description: String,
    pub builtin: bool,
    pub cpu: u32,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u32,
    /// sandboxd's extension: the disk of the template's sandboxes in MiB (0: no limit).
    #[serde(rename = "diskMiB")]
    pub disk_mib: u32,
    /// sandboxd's extension: whether the template keeps the memory of the sandbox it
    /// was made from (`fromSandbox` on gVisor), so that its sandboxes start as forks
    /// with that sandbox's processes running; `false`: its files only.
    pub memory: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub created_at: Option<String>,
    /// sandboxd's extension: the isolation tier its sandboxes run on, when it names one
    /// (absent: the workspace's default, else the server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(container|gvisor)$")]
    pub isolation: Option<&'static str>,
}

pub fn template(t: &Template) -> TemplateView {
    TemplateView {
        id: t.name.clone(),
        description: t.description.clone(),
        builtin: t.builtin,
        cpu: t.resources.vcpu,
        memory_mib: t.resources.memory_mb,
        disk_mib: t.disk_mb,
        memory: t.memory,
        created_at: t.created_at.map(rfc3339_nanos),
        isolation: t.isolation.map(|i| i.as_str()),
    }
}
