//! Deadlines of the transitional states: how long a runtime step of create (STARTING),
//! pause (PAUSING), resume (RESUMING), destroy (TERMINATING) and snapshot may take.
//! Past it the verb stops waiting and resolves the sandbox (FAILED with the reason);
//! the step, which cannot be cancelled, finishes in the background and what it made
//! late is removed then.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use sandboxd_runtime::Runtime;
use std::time::Duration;

/// The longest each transitional step may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// STARTING: the backend's start (a cold start with its disk takes well under a
    /// second; the first one of an image may build it).
    pub start: Duration,
    /// PAUSING and RESUMING: freezing or thawing the sandbox's cgroup.
    pub pause: Duration,
    /// TERMINATING: the teardown (its kill loop alone may take 10 s).
    pub destroy: Duration,
    /// Capturing a snapshot's layer (copies the writable layer).
    pub snapshot: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            start: Duration::from_secs(120),
            pause: Duration::from_secs(30),
            destroy: Duration::from_secs(60),
            snapshot: Duration::from_secs(600),
        }
    }
}

/// The error of a step that missed its deadline.
pub(crate) fn overdue(what: &str, limit: Duration) -> EngineError {
    EngineError::new(
        ErrorCode::Unavailable,
        format!("{what} did not finish within {}", seconds(limit)),
    )
}

/// `limit` for people: "30 s", "0.2 s".
pub(crate) fn seconds(limit: Duration) -> String {
    format!("{} s", limit.as_secs_f64())
}

impl Engine {
    /// Runs the blocking runtime call `f` for at most `limit`: `Ok(Some(value))` when it
    /// finished in time, `Ok(None)` when it did not. A call that did not goes on in the
    /// background, and `late` gets its value once it finishes (to undo what it made).
    pub(crate) async fn bounded<T: Send + 'static>(
        &self,
        limit: Duration,
        f: impl FnOnce(&dyn Runtime) -> T + Send + 'static,
        late: impl FnOnce(&dyn Runtime, T) + Send + 'static,
    ) -> Result<Option<T>, EngineError> {
        let runtime = self.runtime.clone();
        let mut call = tokio::task::spawn_blocking(move || f(runtime.as_ref()));
        let joined = match tokio::time::timeout(limit, &mut call).await {
            Ok(joined) => joined,
            Err(_) => {
                let runtime = self.runtime.clone();
                tokio::spawn(async move {
                    if let Ok(value) = call.await {
                        let _ = tokio::task::spawn_blocking(move || late(runtime.as_ref(), value))
                            .await;
                    }
                });
                return Ok(None);
            }
        };
        joined.map(Some).map_err(|e| {
            EngineError::with_source(ErrorCode::Internal, "a runtime call panicked", e)
        })
    }
}

impl Engine {
    /// Ends an active sandbox that cannot go on (a step missed its deadline, or could
    /// be neither done nor undone): TERMINATING, teardown, FAILED with `err` (end
    /// reason `crashed`). The caller holds the sandbox's exclusive lock.
    pub(crate) async fn fail_sandbox(
        &self,
        e: &mut crate::convert::Entry,
        err: &EngineError,
    ) -> Result<(), EngineError> {
        use crate::state::SandboxStatus;
        if e.sb.status.is_terminal() {
            return Ok(());
        }
        if e.sb.status != SandboxStatus::Terminating {
            self.transition(e, SandboxStatus::Terminating)?;
        }
        e.sb.end_reason = Some(crate::model::EndReason::Crashed);
        e.sb.ended_at = Some(time::OffsetDateTime::now_utc());
        e.sb.error = Some(match self.tear_down(e).await? {
            Ok(()) => err.message.clone(),
            Err(teardown) => format!(
                "{}{teardown} (after: {})",
                super::TEARDOWN_FAILED,
                err.message
            ),
        });
        self.transition(e, SandboxStatus::Failed)
    }
}
