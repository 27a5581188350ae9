//! `exec_stream`: a command run as a managed process whose output is streamed live,
//! with an output cap, a timeout plus kill grace, cancellation when the reader goes
//! away, and a per-sandbox limit on commands running at once.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{EndReason, Frame, ProcessInfo, StartCommand, StreamKind, WorkspaceId};
use crate::ops::FrameStream;
use crate::sessions::Session;
use crate::state::SandboxStatus;
use base64::Engine as _;
use futures_util::stream::{BoxStream, StreamExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use uuid::Uuid;

/// Exit code of a command cancelled because it timed out (as `timeout(1)` reports).
pub const TIMED_OUT_EXIT: i32 = 124;
/// Exit code of a command killed because its output passed the cap (128 + SIGKILL).
pub const KILLED_EXIT: i32 = 137;

const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// A command to stream.
#[derive(Debug, Clone)]
pub struct StreamCommand {
    pub argv: Vec<String>,
    /// Added on top of the sandbox's default environment.
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// SIGTERM to the process group after this long.
    pub timeout: Duration,
    /// SIGKILL to the process group this long after the SIGTERM.
    pub kill_grace: Duration,
    /// Output bytes (stdout + stderr) passed on; past them the group is killed.
    pub max_output_bytes: u64,
    /// Streamed commands allowed at once in the sandbox.
    pub max_sessions: usize,
}

/// One event of a streamed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    Output {
        stream: StreamKind,
        data: Vec<u8>,
    },
    /// Always the last event.
    Exit(ExecEnd),
}

/// How a streamed command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecEnd {
    /// The command's code; 128+N when signal N killed it; 124 when it timed out;
    /// 137 when its output was truncated or its sandbox ended under it.
    pub exit_code: i32,
    pub timed_out: bool,
    pub truncated: bool,
    /// Set when the sandbox ended (or was paused) while the command ran.
    pub sandbox_ended: Option<SandboxEnd>,
}

/// Why a command's sandbox went away under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxEnd {
    Stopped,
    Expired,
    Deleted,
}

/// The events of a streamed command; dropping it kills the command's process group.
pub type ExecStream = BoxStream<'static, ExecEvent>;

/// What the driver task of one command owns.
struct Driver {
    engine: Arc<Engine>,
    ws: WorkspaceId,
    sandbox: Uuid,
    process: Uuid,
    cmd: StreamCommand,
    tx: mpsc::Sender<ExecEvent>,
    _session: Session,
}

impl Engine {
    /// Starts `cmd` in a RUNNING sandbox and streams its output, then one `Exit`.
    /// `SessionLimitReached` when the sandbox already runs `max_sessions` commands.
    pub async fn exec_stream(
        self: &Arc<Self>,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: StreamCommand,
    ) -> Result<ExecStream, EngineError> {
        let session = self.sessions.acquire(id, cmd.max_sessions)?;
        let sb = self.get(ws, id).await?;
        let env = self.command_env(ws, id, &cmd.env)?;
        let start = StartCommand {
            argv: cmd.argv.clone(),
            env: Some(env),
            cwd: cmd.cwd.clone(),
        };
        let info = self.start_process(ws, sb.id, start).await?;
        let frames = match self.process_output(ws, id, info.id, 0, true).await {
            Ok(frames) => frames,
            Err(e) => {
                let _ = self.signal_process(ws, id, info.id, SIGKILL, true).await;
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel(16);
        let driver = Driver {
            engine: self.clone(),
            ws: ws.clone(),
            sandbox: id,
            process: info.id,
            cmd,
            tx,
            _session: session,
        };
        tokio::spawn(driver.run(frames));
        Ok(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
        .boxed())
    }
}

impl Driver {
    async fn run(self, mut frames: FrameStream) {
        let mut seen: u64 = 0;
        let mut truncated = false;
        let mut timed_out = false;
        let deadline = tokio::time::sleep(self.cmd.timeout);
        tokio::pin!(deadline);
        let hard = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(hard);
        let ended: Option<ProcessInfo> = loop {
            tokio::select! {
                frame = frames.next() => match frame {
                    Some(Ok(Frame::Log { stream, data, .. })) if !truncated => {
                        let Ok(mut bytes) = base64::engine::general_purpose::STANDARD.decode(data) else { continue };
                        let room = self.cmd.max_output_bytes.saturating_sub(seen);
                        if bytes.len() as u64 > room {
                            bytes.truncate(room as usize);
                            truncated = true;
                            self.signal(SIGKILL).await;
                        }
                        seen += bytes.len() as u64;
                        if !bytes.is_empty() && self.tx.send(ExecEvent::Output { stream, data: bytes }).await.is_err() {
                            return self.cancel().await;
                        }
                    }
                    Some(Ok(Frame::Exit { info })) => break Some(info),
                    Some(Ok(Frame::Lagged { skipped })) => {
                        tracing::warn!(sandbox = %self.sandbox, skipped, "streamed exec fell behind its output");
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break None,
                },
                _ = &mut deadline, if !timed_out => {
                    timed_out = true;
                    self.signal(SIGTERM).await;
                    hard.as_mut().reset(tokio::time::Instant::now() + self.cmd.kill_grace);
                }
                _ = &mut hard, if timed_out => {
                    self.signal(SIGKILL).await;
                    hard.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(3600));
                }
                _ = self.tx.closed() => return self.cancel().await,
            }
        };
        let end = self.end(ended, timed_out, truncated).await;
        let _ = self.tx.send(ExecEvent::Exit(end)).await;
    }

    /// The exit event: the process's own status, overridden by truncation or timeout,
    /// or the sandbox's end when the stream broke off without an exit.
    async fn end(&self, info: Option<ProcessInfo>, timed_out: bool, truncated: bool) -> ExecEnd {
        let sandbox_ended = match info {
            Some(_) => None,
            None => self.sandbox_end().await,
        };
        let own = info.map(|i| match (i.exit_code, i.signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => KILLED_EXIT,
        });
        let exit_code = if truncated {
            KILLED_EXIT
        } else if timed_out {
            TIMED_OUT_EXIT
        } else {
            own.unwrap_or(KILLED_EXIT)
        };
        ExecEnd {
            exit_code,
            timed_out,
            truncated,
            sandbox_ended,
        }
    }

    async fn sandbox_end(&self) -> Option<SandboxEnd> {
        // A lifecycle change in progress (destroy, pause) holds the lock: let it finish.
        drop(self.engine.locks.get(self.sandbox).read_owned().await);
        let sb = self.engine.get(&self.ws, self.sandbox).await.ok()?;
        match (sb.status, sb.end_reason) {
            (SandboxStatus::Running, _) => None,
            (_, Some(EndReason::Destroyed)) => Some(SandboxEnd::Deleted),
            (_, Some(EndReason::Timeout)) => Some(SandboxEnd::Expired),
            _ => Some(SandboxEnd::Stopped),
        }
    }

    async fn signal(&self, signal: i32) {
        let result = self
            .engine
            .signal_process(&self.ws, self.sandbox, self.process, signal, true)
            .await;
        if let Err(e) = result {
            tracing::debug!(sandbox = %self.sandbox, error = %e, "cannot signal a streamed command");
        }
    }

    /// The reader went away: kill the command's whole process group.
    async fn cancel(self) {
        self.signal(SIGKILL).await;
    }
}
