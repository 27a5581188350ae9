//! `exec_stream`: a command run as a managed process whose output is streamed live,
//! with an output cap, a timeout plus kill grace, cancellation when the reader goes
//! away, and a per-sandbox limit on commands running at once.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{EndReason, StartCommand, WorkspaceId};
use crate::output::{OutputEvent, OutputStream, ProcessExit, StreamKind};
use crate::sessions::Session;
use crate::state::SandboxStatus;
use crate::ErrorCode;
use bytes::Bytes;
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

/// How long a cut stream's reader has to take its last event.
const CUT_DELIVERY: Duration = Duration::from_secs(5);

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
    /// Output bytes (stdout + stderr) passed on, every one of them in order however
    /// slowly the stream is read (the command waits for its reader); past them the
    /// output is cut (`truncated`) and `on_cap` says what happens to the command.
    pub max_output_bytes: u64,
    pub on_cap: OnCap,
    /// Streamed commands allowed at once in the sandbox.
    pub max_sessions: usize,
}

/// What happens to a command whose output passes its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCap {
    /// SIGKILL to its process group; it ends with code 137.
    Kill,
    /// It runs on; the rest of its output is read and dropped.
    Discard,
}

/// One event of a streamed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    Output {
        stream: StreamKind,
        data: Bytes,
    },
    /// The last event when the command ended.
    Exit(ExecEnd),
    /// The last event when the stream ended before the command did, which runs on
    /// unread (no longer bound by the stream's timeout): the key that opened the stream
    /// was revoked (see [`crate::key_revoked`] for its error).
    KeyRevoked,
}

/// How a streamed command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecEnd {
    /// The command's code; 128+N when signal N killed it; 124 when it timed out;
    /// 137 when its output was truncated (`OnCap::Kill`) or its sandbox ended under it.
    pub exit_code: i32,
    /// How the process itself ended, when known.
    pub exit: Option<ProcessExit>,
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
    /// When the exec was asked for: its latency is observed at the stream's end.
    started: std::time::Instant,
    _session: Session,
    /// The workspace's place in flight, for as long as the command is driven.
    slot: crate::in_flight::InFlightSlot,
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
        Ok(self.exec_stream_with_id(ws, id, cmd).await?.1)
    }

    /// [`Engine::exec_stream`], with the id of the command's process.
    pub async fn exec_stream_with_id(
        self: &Arc<Self>,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: StreamCommand,
    ) -> Result<(Uuid, ExecStream), EngineError> {
        let started = std::time::Instant::now();
        // Begun on a task of its own: a caller that goes away while the agent answers
        // the start (a handler dropped with its client's connection) does not cut the
        // start off between its request and its driver, which would leave the command
        // running with no timeout, output cap or session count. The start is finished
        // and handed to its driver; its stream then has no reader, and the driver ends
        // the command as for any reader that went away. The task keeps the request's
        // context (its key: a revoke still ends the stream).
        let (engine, task_ws) = (self.clone(), ws.clone());
        let begun = crate::request::spawn_for_request(async move {
            engine.begin_stream(&task_ws, id, cmd, started).await
        })
        .await
        .unwrap_or_else(|e| {
            Err(EngineError::new(
                ErrorCode::Internal,
                format!("the streamed exec's start ended early: {e}"),
            ))
        });
        if begun.is_err() {
            self.metrics.exec_streamed(started.elapsed());
        }
        begun
    }

    async fn begin_stream(
        self: &Arc<Self>,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: StreamCommand,
        started: std::time::Instant,
    ) -> Result<(Uuid, ExecStream), EngineError> {
        let session = self.sessions.acquire(id, cmd.max_sessions)?;
        // Admitted before the command starts: a refusal leaves nothing running.
        let slot = self.in_flight.acquire(ws)?;
        let sb = self.get(ws, id).await?;
        let env = self.command_env(ws, id, &cmd.env)?;
        let start = StartCommand {
            argv: cmd.argv.clone(),
            env: Some(env),
            cwd: cmd.cwd.clone(),
        };
        // A start that cannot be followed keeps both until its kill is answered.
        let (process, frames, (session, slot)) = self
            .start_following(ws, sb.id, start, (session, slot))
            .await?;
        let (tx, rx) = mpsc::channel(16);
        let driver = Driver {
            engine: self.clone(),
            ws: ws.clone(),
            sandbox: id,
            process,
            cmd,
            tx,
            started,
            _session: session,
            slot,
        };
        tokio::spawn(driver.run(frames));
        let events = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
        .boxed();
        Ok((process, events))
    }
}

impl Driver {
    async fn run(self, mut events: OutputStream) {
        let mut seen: u64 = 0;
        let mut truncated = false;
        let mut timed_out = false;
        let deadline = tokio::time::sleep(self.cmd.timeout);
        tokio::pin!(deadline);
        let hard = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(hard);
        // An event waiting for the reader; the timers run on meanwhile.
        let mut pending: Option<ExecEvent> = None;
        let mut cancelled = false;
        let mut revoked = false;
        let ended: Option<Option<ProcessExit>> = loop {
            tokio::select! {
                () = self.slot.revoked() => {
                    revoked = true;
                    break None;
                }
                permit = self.tx.reserve(), if pending.is_some() => match (permit, pending.take()) {
                    (Ok(permit), Some(event)) => permit.send(event),
                    _ => {
                        cancelled = true;
                        break None;
                    }
                },
                event = events.next(), if pending.is_none() => match event {
                    Some(Ok(OutputEvent::Chunk(c))) if !truncated => {
                        let mut data = c.data;
                        let room = self.cmd.max_output_bytes.saturating_sub(seen);
                        if data.len() as u64 > room {
                            data.truncate(room as usize);
                            truncated = true;
                            if self.cmd.on_cap == OnCap::Kill {
                                self.signal(SIGKILL).await;
                            }
                        }
                        seen += data.len() as u64;
                        if !data.is_empty() {
                            pending = Some(ExecEvent::Output { stream: c.stream, data });
                        }
                    }
                    Some(Ok(OutputEvent::Exit(exit))) => break Some(exit),
                    Some(Ok(OutputEvent::Gap { from, to })) if !truncated => {
                        // The holder reads every byte, so this is a bug; never pass
                        // on output with a hole: end it here as a cut prefix.
                        tracing::error!(sandbox = %self.sandbox, from, to, "streamed exec output has a gap");
                        truncated = true;
                        if self.cmd.on_cap == OnCap::Kill {
                            self.signal(SIGKILL).await;
                        }
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
                _ = self.tx.closed(), if pending.is_none() => {
                    cancelled = true;
                    break None;
                }
            }
        };
        if cancelled {
            self.engine.metrics.exec_streamed(self.started.elapsed());
            return self.cancel().await;
        }
        if revoked {
            // Only the stream ends: dropping the held output lets the command run on.
            drop(events);
            self.engine.metrics.exec_streamed(self.started.elapsed());
            // A reader that does not take the last event soon is left without it.
            let cut = self.tx.send(ExecEvent::KeyRevoked);
            let _ = tokio::time::timeout(CUT_DELIVERY, cut).await;
            return;
        }
        let end = self.end(ended, timed_out, truncated).await;
        self.engine.metrics.exec_streamed(self.started.elapsed());
        let _ = self.tx.send(ExecEvent::Exit(end)).await;
    }

    /// The exit event: the process's own status, overridden by a kill at the cap or
    /// the timeout, or the sandbox's end when the stream broke off without an exit.
    async fn end(
        &self,
        ended: Option<Option<ProcessExit>>,
        timed_out: bool,
        truncated: bool,
    ) -> ExecEnd {
        let sandbox_ended = match ended {
            Some(_) => None,
            None => self.sandbox_end().await,
        };
        let exit = ended.flatten();
        let own = exit.map_or(KILLED_EXIT, ProcessExit::shell_code);
        let exit_code = if truncated && self.cmd.on_cap == OnCap::Kill {
            KILLED_EXIT
        } else if timed_out {
            TIMED_OUT_EXIT
        } else {
            own
        };
        ExecEnd {
            exit_code,
            exit,
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
