//! Async client for the agent protocol over a Unix socket (one HTTP/1.1 connection per call).

use crate::types::*;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use std::path::PathBuf;
use std::time::Duration;
use uuid::Uuid;

/// A stream of NDJSON frames decoded from the agent.
pub type FrameStream = BoxStream<'static, Result<Frame, ClientError>>;
/// A stream of raw bytes (file bodies).
pub type ByteStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// What can go wrong talking to an agent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent answered with a typed error.
    #[error("agent error {}: {}", .0.code_str(), .0.message)]
    Agent(AgentError),
    /// The socket could not be reached (agent gone, sandbox frozen…).
    #[error("cannot reach agent at {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The agent answered something that does not follow the protocol.
    #[error("agent protocol violation: {0}")]
    Protocol(String),
}

impl AgentError {
    /// The code as its wire string.
    pub fn code_str(&self) -> String {
        serde_json::to_value(self.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Client bound to one agent socket path.
#[derive(Debug, Clone)]
pub struct AgentClient {
    socket: PathBuf,
}

impl AgentClient {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self { socket: socket.into() }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    pub async fn health(&self) -> Result<Health, ClientError> {
        todo!()
    }

    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecResult, ClientError> {
        let _ = req;
        todo!()
    }

    pub async fn start_process(&self, req: &StartProcess) -> Result<ProcessInfo, ClientError> {
        let _ = req;
        todo!()
    }

    pub async fn list_processes(&self) -> Result<Vec<ProcessInfo>, ClientError> {
        todo!()
    }

    pub async fn get_process(&self, id: Uuid) -> Result<ProcessInfo, ClientError> {
        let _ = id;
        todo!()
    }

    pub async fn signal(&self, id: Uuid, req: &SignalRequest) -> Result<(), ClientError> {
        let _ = (id, req);
        todo!()
    }

    /// Waits until the process is terminal; `Agent(WaitTimedOut)` when `timeout` passes.
    pub async fn wait(&self, id: Uuid, timeout: Duration) -> Result<ProcessInfo, ClientError> {
        let _ = (id, timeout);
        todo!()
    }

    /// Retained output (whole chunks within `tail_bytes`, 0 = all), then live output when
    /// `follow`, ending with an `Exit` frame.
    pub async fn output(
        &self,
        id: Uuid,
        tail_bytes: u64,
        follow: bool,
    ) -> Result<FrameStream, ClientError> {
        let _ = (id, tail_bytes, follow);
        todo!()
    }

    /// The sandbox-level log ring, then live frames when `follow`.
    pub async fn logs(&self, follow: bool) -> Result<FrameStream, ClientError> {
        let _ = follow;
        todo!()
    }

    pub async fn read_file(&self, path: &str) -> Result<(FileMeta, ByteStream), ClientError> {
        let _ = path;
        todo!()
    }

    pub async fn write_file(
        &self,
        path: &str,
        mode: u32,
        body: ByteStream,
    ) -> Result<FileWritten, ClientError> {
        let _ = (path, mode, body);
        todo!()
    }
}
