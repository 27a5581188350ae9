//! Settling records left in a transitional state that no operation works on any more:
//! every verb holds its sandbox's lock for the whole of a transition, so a PENDING,
//! STARTING, PAUSING, RESUMING or TERMINATING record whose lock is free was left so by
//! a store write that failed on the way (and whose undo failed too). The expiry tick
//! settles them, and so does a create looking for an active sandbox of its name.
//! Not a sandbox another live process owns (a `sandboxd run` beside a server on its
//! data dir: its lock is in that process, its owner mark says so); one whose owner
//! died is settled (or swept as a killed run's).

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::EndReason;
use crate::state::SandboxStatus;
use uuid::Uuid;

/// The transitional statuses, as stored names.
const TRANSITIONAL: [&str; 5] = ["PENDING", "STARTING", "PAUSING", "RESUMING", "TERMINATING"];

impl Engine {
    /// Settles sandbox `id` if it is transitional and no operation holds it: a start
    /// becomes FAILED (`start_failed`) with what it held removed, a pause or resume is
    /// finished (the freeze or thaw redone; FAILED if that fails too), a teardown is
    /// redone. Returns whether it settled it.
    pub(crate) async fn settle_if_stuck(&self, ws: &str, id: Uuid) -> Result<bool, EngineError> {
        use SandboxStatus::*;
        let Ok(_guard) = self.locks.get(id).try_write_owned() else {
            return Ok(false); // an operation is under way
        };
        // Checked before the load: a run ends its record before it gives up its mark.
        if self.runtime.owned_elsewhere(id) {
            return Ok(false); // a live run's start or teardown
        }
        let mut e = self.load(ws, id)?;
        let status = e.sb.status;
        if !TRANSITIONAL.contains(&status.as_str()) {
            return Ok(false);
        }
        tracing::warn!(sandbox = %id, status = status.as_str(), "settling a sandbox left mid-transition");
        match status {
            Pending | Starting => {
                let err = EngineError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "the start of sandbox {id} did not finish (left {})",
                        status.as_str()
                    ),
                );
                self.abandon_start(&mut e, &err).await;
            }
            Pausing | Resuming => {
                let Some(handle) = e.handle.clone() else {
                    return Ok(false);
                };
                let (to, verb) = match status {
                    Pausing => (Paused, "pause"),
                    _ => (Running, "resume"),
                };
                let limit = self.limits.deadlines.pause;
                let redo = move |rt: &dyn sandboxd_runtime::Runtime| match to {
                    Paused => rt.freeze(&handle),
                    _ => rt.thaw(&handle),
                };
                match self.bounded(limit, redo, |_, _| {}).await? {
                    Some(Ok(())) => self.transition(&mut e, to)?,
                    Some(Err(err)) => {
                        let err = crate::engine::runtime_error(
                            &format!("cannot {verb} sandbox {id}"),
                            err,
                        );
                        self.fail_sandbox(&mut e, &err).await?;
                    }
                    None => {
                        let err =
                            super::deadline::overdue(&format!("the {verb} of sandbox {id}"), limit);
                        self.fail_sandbox(&mut e, &err).await?;
                    }
                }
            }
            Terminating => {
                let reason = e.sb.end_reason.unwrap_or(EndReason::Destroyed);
                self.end(&mut e, reason).await?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Settles every transitional sandbox that no operation holds; returns how many.
    pub async fn settle_stuck(&self) -> usize {
        let rows = match self.store.sandboxes_in_status(&TRANSITIONAL) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list sandboxes left mid-transition");
                return 0;
            }
        };
        let mut settled = 0;
        for rec in rows {
            match self.settle_if_stuck(&rec.workspace, rec.id).await {
                Ok(true) => settled += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(sandbox = %rec.id, error = %e, "cannot settle a sandbox"),
            }
        }
        settled
    }
}
