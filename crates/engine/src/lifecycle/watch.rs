//! Watching every sandbox's agent: when one exits on its own (killed, out of memory,
//! crashed), its sandbox ends as `crashed` within moments and its leftovers are
//! destroyed (the dead agent reaped with them).

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::EndReason;
use sandboxd_runtime::{ExitWatch, SandboxHandle};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use uuid::Uuid;

/// Tries at ending a sandbox whose agent exited while the database stays busy, and
/// the pause between them.
const BUSY_ATTEMPTS: u32 = 60;
const BUSY_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// What the sandbox's record says when its agent exits on its own.
const AGENT_EXITED: &str = "the sandbox's agent (PID 1) exited unexpectedly";

impl Engine {
    /// Watches the agent of sandbox `id` (just started, or re-adopted) until it exits,
    /// then ends the sandbox unless it ended already. Needs a Tokio runtime.
    pub(crate) fn watch_agent(&self, ws: &str, id: Uuid, handle: &SandboxHandle) {
        let watch = self.runtime.watch_exit(handle);
        let engine = self.me.clone();
        let ws = ws.to_owned();
        let agent = handle.agent_pid;
        tokio::spawn(async move {
            match watch {
                ExitWatch::Unsupported => return,
                ExitWatch::Exited => {}
                ExitWatch::Readable(fd) => {
                    // SAFETY: the AsyncFd owns the OwnedFd, which stays open and the same
                    // descriptor until the AsyncFd is dropped.
                    let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
                    match fd {
                        Ok(fd) => {
                            if fd.readable().await.is_err() {
                                return; // the Tokio runtime is shutting down
                            }
                        }
                        Err(e) => {
                            tracing::warn!(sandbox = %id, error = %e.into_parts().1, "cannot watch the agent");
                            return;
                        }
                    }
                }
            }
            // A busy database delays the ending; nothing else may lose it.
            for _ in 0..BUSY_ATTEMPTS {
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                match engine.agent_exited(&ws, id, agent).await {
                    Ok(()) => return,
                    Err(e) if e.code == ErrorCode::Unavailable => {
                        tracing::warn!(sandbox = %id, error = %e, "cannot end it yet; retrying");
                    }
                    Err(e) => {
                        tracing::warn!(sandbox = %id, error = %e, "cannot end a sandbox whose agent exited");
                        return;
                    }
                }
                drop(engine);
                tokio::time::sleep(BUSY_PAUSE).await;
            }
        });
    }

    /// Ends sandbox `id` as `crashed` if it is still active with agent `agent`, and
    /// that agent is gone.
    async fn agent_exited(&self, ws: &str, id: Uuid, agent: i32) -> Result<(), EngineError> {
        let _guard = self.locks.get(id).write_owned().await;
        let mut e = self.load(ws, id)?;
        let Some(handle) = e.handle.clone() else {
            return Ok(());
        };
        if e.sb.status.is_terminal() || handle.agent_pid != agent {
            return Ok(()); // destroyed through the API (or expired) meanwhile
        }
        if self.blocking(move |rt| rt.is_alive(&handle)).await? {
            return Ok(());
        }
        tracing::warn!(sandbox = %id, "the sandbox's agent exited; ending the sandbox");
        e.sb.error = Some(AGENT_EXITED.into());
        self.end(&mut e, EndReason::Crashed).await
    }
}
