//! `exec`: run a command to completion and capture its output.

use super::Hold;
use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{ExecCommand, ExecResult, WorkspaceId};
use crate::output::ProcessExit;
use crate::validate;
use bytes::Bytes;
use sandboxd_agent_protocol::{ClientError, ExecRequest};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use uuid::Uuid;

/// How long past a command's own timeout the host waits for the agent's answer (the
/// agent ends the command at its timeout and answers at once; a frozen or hung agent
/// never does).
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_secs(5);

impl Engine {
    /// Reserves room in the server's exec output budget for a command whose captured
    /// output may reach `max_output_bytes`, for a dialect that folds a streamed command
    /// into one answer; `CapacityExhausted` (retryable) when none frees up soon.
    pub async fn reserve_output(
        &self,
        ws: &WorkspaceId,
        max_output_bytes: u64,
    ) -> Result<crate::OutputHold, EngineError> {
        self.output_budget.reserve(ws, max_output_bytes).await
    }

    /// `RateLimited` when workspace `ws` already has its cap of long-lived requests in
    /// flight: a front door for a dialect that answers a streamed command's start
    /// failure inside its result (the stream's own admission still counts it).
    pub fn check_in_flight(&self, ws: &WorkspaceId) -> Result<(), EngineError> {
        self.in_flight.acquire(ws).map(drop)
    }

    /// Runs `cmd` in a RUNNING sandbox. A timeout is `ExecTimedOut` (also when the agent
    /// does not answer within [`ANSWER_MARGIN`] of it), output past the cap is
    /// `ExecOutputTooLarge`. The answer holds room in the server's exec output budget
    /// (`CapacityExhausted` when none frees up soon) until its `hold` is dropped.
    pub async fn exec(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: ExecCommand,
    ) -> Result<ExecResult, EngineError> {
        let t0 = std::time::Instant::now();
        let ran = self.exec_steps(ws, id, cmd).await;
        self.metrics.exec(t0.elapsed());
        ran
    }

    async fn exec_steps(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: ExecCommand,
    ) -> Result<ExecResult, EngineError> {
        validate::command(&cmd.argv, cmd.env.as_ref(), cmd.cwd.as_deref())?;
        let timeout_ms = u64::try_from(cmd.timeout.as_millis()).unwrap_or(u64::MAX);
        // 0 is no timeout at all (the agent's meaning); then the host waits as long.
        let answer_limit = (timeout_ms > 0)
            .then(|| cmd.timeout.checked_add(ANSWER_MARGIN))
            .flatten();
        // Room for the answer in the server's budget, before anything is asked of the
        // agent: a shortage is a retryable 503, never a server out of memory.
        let hold = self.output_budget.reserve(ws, cmd.max_output_bytes).await?;
        let slot = self.in_flight.acquire(ws)?;
        // A revoke ends the request but leaves the command to finish (the call, and its
        // room in the budget, are kept by a task of their own until it does).
        let detached = Detached {
            revoked: slot.revocation(),
            hold: hold.clone(),
        };
        let called = self
            // Not held for the call: an exec may run for minutes, and destroy must not
            // wait for it (destroy ends the agent; the exec then fails as unavailable).
            .agent_call(ws, id, Hold::Check, |client, e| {
                let env = match cmd.env {
                    Some(env) => Some(env),
                    None => self.default_env(e)?,
                };
                let req = ExecRequest {
                    argv: cmd.argv,
                    env,
                    cwd: cmd.cwd.or_else(|| self.image_cwd(e)),
                    timeout_ms,
                    max_output_bytes: cmd.max_output_bytes,
                    user: self.image_user(e)?,
                };
                Ok(detached.run(async move {
                    let Some(limit) = answer_limit else {
                        return client.exec(&req).await.map(Some);
                    };
                    // Dropping the call closes its connection: the agent then ends the
                    // command (if it can still run at all).
                    match tokio::time::timeout(limit, client.exec(&req)).await {
                        Ok(answer) => answer.map(Some),
                        Err(_) => Ok(None),
                    }
                }))
            });
        let result = tokio::select! {
            biased;
            () = slot.revoked() => return Err(crate::revocations::key_revoked()),
            result = called => result?,
        };
        let Some(result) = result else {
            tracing::warn!(sandbox = %id, "the sandbox's agent did not answer an exec in time");
            return Err(EngineError::new(
                ErrorCode::ExecTimedOut,
                format!(
                    "the command did not finish within {timeout_ms} ms, and the sandbox did not \
                     answer within {} s after that (is it frozen or hung?)",
                    ANSWER_MARGIN.as_secs()
                ),
            ));
        };
        if result.timed_out {
            return Err(EngineError::new(
                ErrorCode::ExecTimedOut,
                format!("the command did not finish within {timeout_ms} ms"),
            ));
        }
        if result.output_truncated {
            return Err(EngineError::new(
                ErrorCode::ExecOutputTooLarge,
                format!("the command's output passed {} bytes", cmd.max_output_bytes),
            ));
        }
        let decode = |b64: &str| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(Bytes::from)
                .map_err(|_| {
                    EngineError::new(ErrorCode::Unavailable, "the sandbox agent answered badly")
                })
        };
        Ok(ExecResult {
            stdout: decode(&result.stdout)?,
            stderr: decode(&result.stderr)?,
            exit: ProcessExit::from_parts(result.exit_code, result.signal),
            pid: result.pid,
            hold,
        })
    }
}

/// What a captured exec's call keeps if its key is revoked mid-way: the call runs on in
/// a task of its own (so the command is not ended with the request), holding the
/// exec's room in the output budget until it ends.
struct Detached {
    revoked: tokio_util::sync::CancellationToken,
    hold: crate::OutputHold,
}

impl Detached {
    /// Runs `call` within the request (no task of its own, and no hand-over between
    /// worker threads, unless it must outlive the request); dropped before it ends (the
    /// client left, the agent did not answer), the call ends with it, unless the key was
    /// revoked: then it goes on in a task of its own.
    async fn run<T: Send + 'static>(
        self,
        call: impl Future<Output = Result<T, ClientError>> + Send + 'static,
    ) -> Result<T, ClientError> {
        let Detached { revoked, hold } = self;
        DetachOnRevoke {
            call: Some(holding(call, hold)),
            revoked,
        }
        .await
    }
}

type Call<T> = Pin<Box<dyn Future<Output = Result<T, ClientError>> + Send>>;

/// `call`, boxed, keeping `hold` until it ends; a panic in it becomes an error of the
/// call (as when it ran in a task of its own), never an unwind through the request.
fn holding<T: Send + 'static>(
    call: impl Future<Output = Result<T, ClientError>> + Send + 'static,
    hold: impl Send + 'static,
) -> Call<T> {
    use futures_util::FutureExt as _;
    Box::pin(async move {
        let answer = std::panic::AssertUnwindSafe(call)
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Protocol(
                    "the exec call failed: it panicked".into(),
                ))
            });
        drop(hold);
        answer
    })
}

/// A call polled in place; dropped unfinished after its key was revoked, it is handed
/// to a task of its own instead of being dropped.
struct DetachOnRevoke<T: Send + 'static> {
    call: Option<Call<T>>,
    revoked: tokio_util::sync::CancellationToken,
}

impl<T: Send + 'static> Future for DetachOnRevoke<T> {
    type Output = Result<T, ClientError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            return Poll::Ready(Err(ClientError::Protocol(
                "the exec call was polled after its end".into(),
            )));
        };
        let answer = std::task::ready!(call.as_mut().poll(cx));
        this.call = None;
        Poll::Ready(answer)
    }
}

impl<T: Send + 'static> Drop for DetachOnRevoke<T> {
    fn drop(&mut self) {
        if !self.revoked.is_cancelled() {
            return;
        }
        let Some(call) = self.call.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            // A runtime shutting down ends the task at once (the call is dropped).
            Ok(runtime) => drop(runtime.spawn(async move {
                let _ = call.await;
            })),
            Err(_) => tracing::warn!(
                "an exec whose key was revoked ended with its request: no runtime to go on in"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Sets its flag when dropped (with the call that owns it).
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A call that waits for `go`, then reports on `arrived`; it owns a [`Dropped`].
    fn waiting_call(
        dropped: &Arc<AtomicBool>,
    ) -> (
        DetachOnRevoke<()>,
        tokio::sync::oneshot::Sender<()>,
        tokio::sync::oneshot::Receiver<()>,
        tokio_util::sync::CancellationToken,
    ) {
        let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (arrived_tx, arrived) = tokio::sync::oneshot::channel::<()>();
        let flag = Dropped(dropped.clone());
        let call = async move {
            let _flag = flag;
            let _ = go_rx.await;
            let _ = arrived_tx.send(());
            Ok(())
        };
        let revoked = tokio_util::sync::CancellationToken::new();
        let detach = DetachOnRevoke {
            call: Some(holding(call, ())),
            revoked: revoked.clone(),
        };
        (detach, go, arrived, revoked)
    }

    /// Polls `f` once (it must be pending).
    async fn poll_once<F: Future + Unpin>(f: &mut F) {
        std::future::poll_fn(|cx| {
            assert!(Pin::new(&mut *f).poll(cx).is_pending(), "still waiting");
            Poll::Ready(())
        })
        .await
    }

    #[tokio::test]
    async fn a_call_dropped_with_its_request_ends_with_it() {
        let dropped = Arc::new(AtomicBool::new(false));
        let (mut detach, go, _arrived, _revoked) = waiting_call(&dropped);
        poll_once(&mut detach).await;
        drop(detach);
        assert!(dropped.load(Ordering::SeqCst), "the call ended at once");
        assert!(go.send(()).is_err(), "nobody waits for it any more");
    }

    #[tokio::test]
    async fn a_call_dropped_after_a_revoke_goes_on_to_its_end() {
        let dropped = Arc::new(AtomicBool::new(false));
        let (mut detach, go, arrived, revoked) = waiting_call(&dropped);
        poll_once(&mut detach).await;
        revoked.cancel();
        drop(detach);
        assert!(!dropped.load(Ordering::SeqCst), "the call goes on");
        go.send(()).expect("the call still waits");
        tokio::time::timeout(std::time::Duration::from_secs(60), arrived)
            .await
            .expect("the call went on to its end")
            .expect("it reported");
    }

    #[test]
    fn a_revoked_call_in_a_runtime_shutting_down_is_dropped_without_a_panic() {
        let dropped = Arc::new(AtomicBool::new(false));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (detach, _go, _arrived, revoked) = waiting_call(&dropped);
        rt.spawn(detach);
        // Let the task start and wait in its call.
        rt.block_on(tokio::task::yield_now());
        revoked.cancel();
        drop(rt);
        assert!(dropped.load(Ordering::SeqCst), "the call was dropped");
    }

    #[tokio::test]
    async fn a_panic_in_the_call_is_its_error() {
        let held = Arc::new(AtomicBool::new(false));
        let call = async {
            panic!("in the call");
            #[allow(unreachable_code)]
            Ok::<(), ClientError>(())
        };
        let detach = DetachOnRevoke {
            call: Some(holding(call, Dropped(held.clone()))),
            revoked: tokio_util::sync::CancellationToken::new(),
        };
        let answer = detach.await;
        assert!(
            matches!(&answer, Err(ClientError::Protocol(m)) if m.contains("panicked")),
            "{answer:?}"
        );
        assert!(held.load(Ordering::SeqCst), "its room in the budget freed");
    }
}
