//! What the agent operations answer, in the engine's own types: managed processes, a
//! captured command's result, files. Dialects see these, never the agent's wire types.

use crate::output::ProcessExit;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use sandboxd_agent_protocol as wire;
use uuid::Uuid;

/// A stream of bytes in or out of a sandbox (file bodies); an I/O error ends it.
pub type ByteStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// Lifecycle of a managed process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    Starting,
    Running,
    Exited,
    Killed,
    Failed,
    /// The agent no longer knows how it ended.
    Lost,
}

impl ProcessState {
    /// Its stable upper-case name (`RUNNING`…).
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Starting => "STARTING",
            ProcessState::Running => "RUNNING",
            ProcessState::Exited => "EXITED",
            ProcessState::Killed => "KILLED",
            ProcessState::Failed => "FAILED",
            ProcessState::Lost => "LOST",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, ProcessState::Starting | ProcessState::Running)
    }
}

impl From<wire::ProcessState> for ProcessState {
    fn from(s: wire::ProcessState) -> Self {
        match s {
            wire::ProcessState::Starting => ProcessState::Starting,
            wire::ProcessState::Running => ProcessState::Running,
            wire::ProcessState::Exited => ProcessState::Exited,
            wire::ProcessState::Killed => ProcessState::Killed,
            wire::ProcessState::Failed => ProcessState::Failed,
            wire::ProcessState::Lost => ProcessState::Lost,
        }
    }
}

/// A managed process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub id: Uuid,
    pub argv: Vec<String>,
    /// PID inside the sandbox's PID namespace.
    pub pid: u32,
    pub state: ProcessState,
    /// RFC 3339 with nanoseconds.
    pub started_at: String,
    pub ended_at: Option<String>,
    /// How it ended: a code when EXITED, a signal when KILLED.
    pub exit: Option<ProcessExit>,
    /// Whether its output ring is still retained.
    pub output_retained: bool,
    /// `argv` is only a prefix of the command line (the agent keeps a bounded part).
    pub argv_truncated: bool,
}

impl From<wire::ProcessInfo> for ProcessInfo {
    fn from(p: wire::ProcessInfo) -> Self {
        let exit = match p.state {
            wire::ProcessState::Exited => p.exit_code.map(ProcessExit::Code),
            wire::ProcessState::Killed => p.signal.map(ProcessExit::Signal),
            _ => ProcessExit::from_parts(p.exit_code, p.signal),
        };
        ProcessInfo {
            id: p.id,
            argv: p.argv,
            pid: p.pid,
            state: p.state.into(),
            started_at: p.started_at,
            ended_at: p.ended_at,
            exit,
            output_retained: p.output_retained,
            argv_truncated: p.argv_truncated,
        }
    }
}

/// A captured command that ran to its end (a timeout or output past the cap is an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub stdout: Bytes,
    pub stderr: Bytes,
    /// `None` when the agent could not tell how it ended.
    pub exit: Option<ProcessExit>,
    /// PID the command had inside the sandbox.
    pub pid: u32,
    /// The room this output holds in the server's exec output budget: keep it until the
    /// answer is sent (a dialect ties it to the response body).
    pub hold: crate::OutputHold,
}

/// A regular file's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    /// Permission bits, e.g. 0o640.
    pub mode: u32,
    /// Modification time, unix seconds.
    pub mtime: i64,
}

impl From<wire::FileMeta> for FileMeta {
    fn from(m: wire::FileMeta) -> Self {
        FileMeta {
            size: m.size,
            mode: m.mode,
            mtime: m.mtime,
        }
    }
}

/// A file written by an upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileWritten {
    pub path: String,
    pub bytes_written: u64,
}

impl From<wire::FileWritten> for FileWritten {
    fn from(w: wire::FileWritten) -> Self {
        FileWritten {
            path: w.path,
            bytes_written: w.bytes_written,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_process(
        state: wire::ProcessState,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> wire::ProcessInfo {
        wire::ProcessInfo {
            id: Uuid::nil(),
            argv: vec!["/bin/true".into()],
            pid: 7,
            state,
            started_at: "t".into(),
            ended_at: None,
            exit_code: code,
            signal,
            output_retained: true,
            argv_truncated: false,
        }
    }

    #[test]
    fn a_process_ends_with_a_code_or_a_signal_by_its_state() {
        let exited = ProcessInfo::from(wire_process(wire::ProcessState::Exited, Some(3), None));
        assert_eq!(exited.exit, Some(ProcessExit::Code(3)));
        let killed = ProcessInfo::from(wire_process(wire::ProcessState::Killed, None, Some(9)));
        assert_eq!(killed.exit.map(ProcessExit::shell_code), Some(137));
        let running = ProcessInfo::from(wire_process(wire::ProcessState::Running, None, None));
        assert_eq!((running.state.as_str(), running.exit), ("RUNNING", None));
    }
}
