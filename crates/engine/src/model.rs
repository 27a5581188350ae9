//! The engine's typed resources and requests, independent of any HTTP dialect.

use crate::state::SandboxStatus;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

pub use crate::results::{ExecResult, FileMeta, FileWritten, ProcessInfo, ProcessState};

/// Identifies a workspace (the tenant boundary: one never sees another's resources).
pub type WorkspaceId = String;

/// The ids dialects know a workspace or sandbox by: dialect name -> its id there. Each
/// is unique within its dialect (and kind), and set once, at create.
pub type Aliases = BTreeMap<String, String>;

/// Each dialect's own attributes of a sandbox, by dialect name, as the JSON of a type
/// the dialect owns (see [`Sandbox::attributes_of`]); the engine never interprets them.
pub type Attributes = BTreeMap<String, serde_json::Value>;

/// Requested resources of a sandbox.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Resources {
    pub vcpu: u32,
    pub memory_mb: u32,
}

/// What a dialect asks the engine to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSandbox {
    /// Workspace-scoped name of an active sandbox; `None` = unnamed.
    pub name: Option<String>,
    pub resources: Resources,
    /// Image/template name; `None` = `default`.
    pub image: Option<String>,
    /// Start from this snapshot's filesystem (on top of its source image).
    pub snapshot_id: Option<Uuid>,
    /// Default environment for every command in the sandbox.
    pub environment: BTreeMap<String, String>,
    /// Names of workspace secrets to expose as environment variables.
    pub secrets: Vec<String>,
    /// Free-form labels a dialect keeps with the sandbox (stored, never interpreted).
    pub metadata: BTreeMap<String, String>,
    /// Ends the sandbox (status TERMINATED, end reason `timeout`) after this long.
    pub timeout: Option<std::time::Duration>,
    /// Consent to be moved to disk when memory runs short and woken by the next
    /// operation (autoPause; only where the backend can checkpoint the sandbox).
    pub auto_pause: bool,
    /// Egress or only loopback; `None` = the template's, else the server's default.
    pub network: Option<sandboxd_runtime::NetworkMode>,
    /// The sandbox's own policy layer, narrowing its workspace's (egress mode only).
    pub egress: Option<sandboxd_runtime::EgressPolicy>,
    /// Size of the writable layer in MiB (0: no limit); `None` = the source snapshot's
    /// (a workspace template's), else the server's default. Past the server's maximum:
    /// `InvalidArgument`.
    pub disk_mb: Option<u32>,
    /// The ids dialects will know the sandbox by; one already taken: `NameTaken`.
    pub aliases: Aliases,
    /// Dialects' own attributes, kept with the sandbox (see [`CreateSandbox::attribute`]).
    pub attributes: Attributes,
    /// The tier to run on; `None` = the workspace's default, else the server's (see
    /// [`crate::Engine::isolation_for`]).
    pub isolation: Option<sandboxd_runtime::Isolation>,
}

impl CreateSandbox {
    /// Keeps `value` as `dialect`'s attributes of the new sandbox.
    pub fn attribute<T: Serialize>(mut self, dialect: &str, value: &T) -> Self {
        // Serializing a dialect's plain attribute struct cannot fail.
        let json = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.attributes.insert(dialect.to_owned(), json);
        self
    }
}

/// Why a sandbox ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Destroyed through the API.
    Destroyed,
    /// Its timeout passed.
    Timeout,
    /// The agent (PID 1) died, e.g. killed by the OOM killer.
    Crashed,
    /// The backend could not start it.
    StartFailed,
}

/// A sandbox as the engine persists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: Uuid,
    pub workspace: WorkspaceId,
    pub name: Option<String>,
    pub status: SandboxStatus,
    pub image: String,
    pub resources: Resources,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub ended_at: Option<OffsetDateTime>,
    pub expires_at: Option<OffsetDateTime>,
    /// Consented to autoPause (see [`CreateSandbox::auto_pause`]).
    pub auto_pause: bool,
    /// When memory pressure moved it to disk; `None` while its memory is resident. Its
    /// status stays RUNNING meanwhile: the next operation wakes it.
    pub auto_paused_at: Option<OffsetDateTime>,
    pub end_reason: Option<EndReason>,
    /// Human-readable terminal error (FAILED).
    pub error: Option<String>,
    pub snapshot_id: Option<Uuid>,
    pub environment: BTreeMap<String, String>,
    pub secrets: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    /// Size of its writable layer in MiB chosen at create (0: no limit); `None` for
    /// sandboxes recorded before sizes were kept (they got the server's default).
    pub disk_mb: Option<u32>,
    /// The ids dialects know it by.
    pub aliases: Aliases,
    /// Dialects' own attributes.
    pub attributes: Attributes,
    /// The isolation tier it runs on.
    pub isolation: sandboxd_runtime::Isolation,
}

impl Sandbox {
    /// `dialect`'s attributes of this sandbox; `None` when it has none (another dialect
    /// made it) or they do not read as a `T`.
    pub fn attributes_of<T: DeserializeOwned>(&self, dialect: &str) -> Option<T> {
        let json = self.attributes.get(dialect)?;
        serde_json::from_value(json.clone()).ok()
    }

    /// The id `dialect` knows this sandbox by.
    pub fn alias(&self, dialect: &str) -> Option<&str> {
        self.aliases.get(dialect).map(String::as_str)
    }
}

/// A filesystem snapshot of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub id: Uuid,
    pub workspace: WorkspaceId,
    pub name: Option<String>,
    pub source_sandbox_id: Uuid,
    /// Image the source sandbox ran.
    pub image: String,
    /// Layers on top of `image`, lowest first; the last one is this snapshot's own.
    pub layers: Vec<String>,
    /// sha256 of the snapshot's own layer.
    pub digest: String,
    pub size_bytes: u64,
    pub resources: Resources,
    pub created_at: OffsetDateTime,
    pub expires_at: Option<OffsetDateTime>,
    /// The source sandbox's disk size in MiB (0: no limit), which sandboxes started from
    /// the snapshot inherit; `None` when it was not recorded.
    pub disk_mb: Option<u32>,
    /// Where the backend keeps its memory image when it holds the source's running
    /// processes too (gVisor); `None` for a filesystem-only snapshot. Sandboxes
    /// created from a memory snapshot start with those processes running (a fork).
    pub memory_image: Option<std::path::PathBuf>,
}

impl Snapshot {
    /// Whether it keeps the source's memory (processes), not only its filesystem.
    pub fn has_memory(&self) -> bool {
        self.memory_image.is_some()
    }
}

/// One page of a keyset-paginated list.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Opaque cursor for the next page; `None` when there is no more.
    pub next_cursor: Option<String>,
}

/// Asking for a page.
#[derive(Debug, Clone, Default)]
pub struct PageRequest {
    pub limit: u32,
    pub cursor: Option<String>,
}

/// A captured command.
#[derive(Debug, Clone)]
pub struct ExecCommand {
    pub argv: Vec<String>,
    /// Replaces the whole environment; `None` = the sandbox's default environment.
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    pub timeout: std::time::Duration,
    pub max_output_bytes: u64,
}

/// A managed process to start.
#[derive(Debug, Clone)]
pub struct StartCommand {
    pub argv: Vec<String>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
}
