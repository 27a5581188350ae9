//! Lifecycle verbs (one per file) and the guarded transition and teardown they share.

pub(crate) mod adopt;
pub(crate) mod create;
pub mod deadline;
pub(crate) mod destroy;
pub(crate) mod expiry;
pub(crate) mod listing;
pub(crate) mod pause;
pub(crate) mod query;
pub(crate) mod queue;
mod retention;
pub(crate) use retention::before_now;
mod stuck;
pub(crate) mod watch;

use crate::convert::Entry;
use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{EndReason, Sandbox};
use crate::state::SandboxStatus;
use time::OffsetDateTime;
use uuid::Uuid;

/// How the error of a sandbox whose teardown failed begins.
pub(crate) const TEARDOWN_FAILED: &str = "teardown failed: ";

/// The error for an operation the sandbox's state does not allow.
pub(crate) fn wrong_state(sb: &Sandbox, wanted: &str) -> EngineError {
    let mut err = EngineError::new(
        ErrorCode::WrongState,
        format!(
            "sandbox {} is {}; this needs it {wanted}",
            sb.id,
            sb.status.as_str()
        ),
    );
    err.state = Some((sb.status, sb.end_reason));
    err
}

/// Whether an active sandbox's timeout has passed.
pub(crate) fn is_due(sb: &Sandbox, now: OffsetDateTime) -> bool {
    sb.status.is_active() && sb.expires_at.is_some_and(|t| t <= now)
}

impl Engine {
    /// Moves the sandbox to `next` if the state machine allows it, and persists it.
    pub(crate) fn transition(&self, e: &mut Entry, next: SandboxStatus) -> Result<(), EngineError> {
        self.check_transition(e, next)?;
        e.sb.status = next;
        self.save(e)
    }

    /// [`Engine::transition`] whose write also appends `audit`, in one transaction: the
    /// operation's answer then waits for one store write, not two, and an operation on
    /// record as done always has its audit entry.
    pub(crate) fn transition_audited(
        &self,
        e: &mut Entry,
        next: SandboxStatus,
        audit: &sandboxd_store::AuditRecord,
    ) -> Result<(), EngineError> {
        self.check_transition(e, next)?;
        e.sb.status = next;
        self.save_audited(e, audit)
    }

    /// `WrongState` unless `e` may move to `next`.
    fn check_transition(&self, e: &Entry, next: SandboxStatus) -> Result<(), EngineError> {
        if !e.sb.status.can(next) {
            let mut err = EngineError::new(
                ErrorCode::WrongState,
                format!(
                    "sandbox {} cannot go from {} to {}",
                    e.sb.id,
                    e.sb.status.as_str(),
                    next.as_str()
                ),
            );
            err.state = Some((e.sb.status, e.sb.end_reason));
            return Err(err);
        }
        Ok(())
    }

    /// Ends an active sandbox: TERMINATING (persisted), teardown, TERMINATED with
    /// `reason`. The caller holds the sandbox's exclusive lock. A teardown that fails
    /// or misses its deadline leaves it FAILED with the error recorded (a later destroy
    /// tries the teardown again).
    pub(crate) async fn end(&self, e: &mut Entry, reason: EndReason) -> Result<(), EngineError> {
        if e.sb.status.is_terminal() {
            return Ok(());
        }
        if e.sb.status != SandboxStatus::Terminating {
            self.transition(e, SandboxStatus::Terminating)?;
        }
        e.sb.end_reason = Some(reason);
        e.sb.ended_at = Some(OffsetDateTime::now_utc());
        match self.tear_down(e).await? {
            Ok(()) => self.transition(e, SandboxStatus::Terminated),
            Err(err) => {
                tracing::warn!(sandbox = %e.sb.id, error = %err, "sandbox teardown failed");
                e.sb.error = Some(format!("{TEARDOWN_FAILED}{err}"));
                self.transition(e, SandboxStatus::Failed)
            }
        }
    }

    /// Removes what the sandbox holds on the host, within the destroy deadline; the
    /// error as text.
    pub(crate) async fn tear_down(&self, e: &Entry) -> Result<Result<(), String>, EngineError> {
        let Some(h) = e.handle.clone() else {
            return Ok(Ok(()));
        };
        let limit = self.limits.deadlines.destroy;
        Ok(
            match self
                .bounded(limit, move |rt| rt.destroy(&h), |_, _| {})
                .await?
            {
                Some(done) => done.map_err(|err| err.to_string()),
                None => Err(format!(
                    "it did not finish within {}",
                    deadline::seconds(limit)
                )),
            },
        )
    }

    /// Ends the sandbox with reason `timeout` when its expiry has passed, so that
    /// every operation sees an expired sandbox as terminated.
    pub(crate) async fn expire_if_due(&self, ws: &str, id: Uuid) -> Result<(), EngineError> {
        if !is_due(&self.load(ws, id)?.sb, OffsetDateTime::now_utc()) {
            return Ok(());
        }
        // A live run's sandbox beside this server: its run ends it.
        if self.runtime.owned_elsewhere(id) {
            return Ok(());
        }
        let _guard = self.locks.get(id).write_owned().await;
        let mut e = self.load(ws, id)?;
        if is_due(&e.sb, OffsetDateTime::now_utc()) {
            self.end(&mut e, EndReason::Timeout).await?;
        }
        Ok(())
    }

    /// [`Engine::expire_if_due`] for a caller holding `admission` (a named create): it
    /// never waits for the sandbox's lock, whose holder (a snapshot's or a pause's
    /// reservation) may itself be waiting for `admission`. A due sandbox an operation
    /// holds is a temporary shortage: `unavailable` with a Retry-After.
    pub(crate) async fn expire_if_due_under_admission(
        &self,
        ws: &str,
        id: Uuid,
    ) -> Result<(), EngineError> {
        if !is_due(&self.load(ws, id)?.sb, OffsetDateTime::now_utc()) {
            return Ok(());
        }
        if self.runtime.owned_elsewhere(id) {
            return Ok(());
        }
        let Ok(_guard) = self.locks.get(id).try_write_owned() else {
            return Err(EngineError::new(
                ErrorCode::Unavailable,
                format!(
                    "sandbox {id}, of the same name, reached its deadline while an operation \
                     holds it; try again in a moment"
                ),
            )
            .retry_after(std::time::Duration::from_secs(1)));
        };
        let mut e = self.load(ws, id)?;
        if is_due(&e.sb, OffsetDateTime::now_utc()) {
            self.end(&mut e, EndReason::Timeout).await?;
        }
        Ok(())
    }
}
