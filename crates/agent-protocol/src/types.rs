//! Serializable request, response and stream-frame types of the agent protocol.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Answer of `GET /v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Health {
    pub protocol: u32,
    /// The agent's own PID as seen inside the sandbox (always 1 in a real sandbox).
    pub pid: u32,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "UPPERCASE")]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// Lifecycle of a process inside the sandbox.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum ProcessState {
    Starting,
    Running,
    Exited,
    Killed,
    Failed,
    Lost,
}

impl ProcessState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, ProcessState::Starting | ProcessState::Running)
    }
}

/// `POST /v1/processes`: start a managed (background) process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartProcess {
    /// Chosen by the caller (the engine) before dispatch.
    pub id: Uuid,
    /// argv; `argv[0]` must be an absolute path.
    pub argv: Vec<String>,
    /// Replaces the whole environment when present; `None` means the agent's default
    /// environment (PATH, HOME, TERM, LANG).
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory, absolute; `None` means `/`.
    pub cwd: Option<String>,
    /// Keep every output byte until a reader with `hold=true` has read it: while that
    /// reader lags a ring behind, the agent stops draining the process's pipes (the
    /// process blocks on a full pipe) instead of dropping output. Released for good
    /// when that reader goes away. Until a holder comes, the first ring-full is kept.
    #[serde(default)]
    pub hold_output: bool,
    /// Run as this user instead of root (the image's `User`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserIds>,
}

/// One process as the agent knows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessInfo {
    pub id: Uuid,
    pub argv: Vec<String>,
    /// PID inside the sandbox's PID namespace.
    pub pid: u32,
    pub state: ProcessState,
    /// RFC 3339 with nanoseconds.
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Present only when `state == Exited`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Present only when `state == Killed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Whether its output ring is still retained.
    pub output_retained: bool,
    /// `argv` is a prefix of the command line it ran with: the agent keeps at most
    /// [`crate::limits::KEPT_ARGV_BYTES`] of it (the process got all of it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_truncated: bool,
}

/// `POST /v1/processes/{id}/signal`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// 1..=64
    pub signal: i32,
    /// Deliver to the process's whole process group.
    #[serde(default)]
    pub group: bool,
}

/// `POST /v1/exec`: run a command to completion and capture its output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    /// Kill the command's process group after this many milliseconds.
    pub timeout_ms: u64,
    /// Kill the command's process group once stdout+stderr exceed this many bytes.
    pub max_output_bytes: u64,
    /// Run as this user instead of root (the image's `User`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserIds>,
}

/// The ids a command runs as: uid, primary gid and supplementary groups (sandbox ids).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserIds {
    pub uid: u32,
    pub gid: u32,
    #[serde(default)]
    pub groups: Vec<u32>,
}

/// Answer of `POST /v1/exec`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecResult {
    /// base64
    pub stdout: String,
    /// base64
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Output passed `max_output_bytes`; the process group was killed.
    pub output_truncated: bool,
    /// PID the command had inside the sandbox.
    pub pid: u32,
}

/// One NDJSON line of an output or log stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Frame {
    /// A chunk of output exactly as read (not a line).
    Log {
        stream: StreamKind,
        /// base64
        data: String,
        /// RFC 3339 with nanoseconds, when the agent read it.
        at: String,
        /// The process it came from (sandbox-level log only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        process: Option<Uuid>,
        /// Offset of its first byte in all the output of its ring (stdout and stderr
        /// counted together): each chunk starts where the previous one ended unless a
        /// `Gap` frame comes between them.
        #[serde(default)]
        offset: u64,
    },
    /// The process ended (output streams with `follow=true` end after this frame).
    Exit { info: ProcessInfo },
    /// Output from offset `from` to `to` (exclusive) was dropped from the ring before
    /// this reader read it (a slow reader, or a start before the ring's oldest byte);
    /// the stream goes on at `to`.
    Gap { from: u64, to: u64 },
    /// A failure after the stream started.
    Error { code: String, message: String },
}

/// Answer of `PUT /v1/files`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileWritten {
    pub path: String,
    pub bytes_written: u64,
}

/// Metadata sent with a downloaded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    /// Permission bits, e.g. 0o640.
    pub mode: u32,
    /// Modification time, unix seconds.
    pub mtime: i64,
}

/// Every error the agent returns, as JSON with an HTTP status.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentError {
    pub code: AgentErrorCode,
    pub message: String,
}

/// Stable machine-readable error codes of the agent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AgentErrorCode {
    /// Malformed request or invalid argument (relative executable, NUL byte, bad signal…).
    InvalidArgument,
    ProcessNotFound,
    /// The process exists but its output ring was evicted.
    OutputNotRetained,
    /// A process id that is already in use.
    ProcessExists,
    WaitTimedOut,
    FileNotFound,
    /// Path exists but is a directory, symlink, device, socket or FIFO.
    NotARegularFile,
    FileTooLarge,
    /// The executable could not be started (missing, not executable…).
    SpawnFailed,
    /// The sandbox's disk (or the host's beneath it) is full or failed to store the data
    /// (ENOSPC, EDQUOT, EIO): the data is not stored.
    InsufficientStorage,
    Io,
}

impl AgentErrorCode {
    /// HTTP status the agent uses for this code.
    pub fn http_status(self) -> u16 {
        match self {
            AgentErrorCode::InvalidArgument | AgentErrorCode::NotARegularFile => 400,
            AgentErrorCode::ProcessNotFound
            | AgentErrorCode::OutputNotRetained
            | AgentErrorCode::FileNotFound => 404,
            AgentErrorCode::ProcessExists => 409,
            AgentErrorCode::WaitTimedOut => 408,
            AgentErrorCode::FileTooLarge => 413,
            AgentErrorCode::SpawnFailed => 422,
            AgentErrorCode::InsufficientStorage => 507,
            AgentErrorCode::Io => 500,
        }
    }
}
