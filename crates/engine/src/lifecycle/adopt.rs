//! Re-adoption at start-up: keep live sandboxes, end the ones that died meanwhile.

use crate::convert::{entry_from_record, Entry};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::EndReason;
use crate::state::{SandboxStatus, ACTIVE_STATUSES};
use sandboxd_runtime::Runtime;
use std::collections::HashSet;
use time::OffsetDateTime;

/// What to do with one stored active sandbox.
fn settle(rt: &dyn Runtime, e: &mut Entry) -> Option<EndReason> {
    use SandboxStatus::*;
    let Some(handle) = e.handle.clone() else {
        // Never got a handle: the server stopped while starting it.
        return Some(EndReason::Crashed);
    };
    if e.sb.status == Terminating {
        return Some(e.sb.end_reason.unwrap_or(EndReason::Destroyed));
    }
    if !rt.is_alive(&handle) {
        return Some(EndReason::Crashed);
    }
    // Finish an interrupted transition: freezing and thawing are idempotent, so redoing
    // the step leaves the cgroup freezer in the state the target status says.
    let settled = match e.sb.status {
        Pausing => rt.freeze(&handle).map(|()| Paused),
        Resuming => rt.thaw(&handle).map(|()| Running),
        Starting => Ok(Running),
        other => Ok(other),
    };
    match settled {
        Ok(status) => {
            e.sb.status = status;
            if e.sb.started_at.is_none() {
                e.sb.started_at = Some(OffsetDateTime::now_utc());
            }
            None
        }
        Err(_) => Some(EndReason::Crashed),
    }
}

impl Engine {
    /// For every stored active sandbox: alive → kept; dead → TERMINATED (`crashed`)
    /// with its leftovers destroyed; then whatever the runtime holds for no kept
    /// sandbox is removed.
    pub(crate) fn readopt(&self) -> Result<(), EngineError> {
        let (mut kept, mut ended) = (HashSet::new(), HashSet::new());
        for rec in self.store.sandboxes_in_status(&ACTIVE_STATUSES)? {
            let mut e = entry_from_record(rec)?;
            match settle(self.runtime.as_ref(), &mut e) {
                None => {
                    kept.insert(e.sb.id);
                    self.save(&e)?;
                    if let Some(handle) = &e.handle {
                        self.watch_agent(&e.sb.workspace, e.sb.id, handle);
                    }
                }
                Some(reason) => {
                    ended.insert(e.sb.id);
                    let torn_down = e
                        .handle
                        .as_ref()
                        .map_or(Ok(()), |h| self.runtime.destroy(h));
                    e.sb.end_reason = Some(reason);
                    e.sb.ended_at = Some(OffsetDateTime::now_utc());
                    e.sb.status = match torn_down {
                        Ok(()) => SandboxStatus::Terminated,
                        Err(err) => {
                            e.sb.error = Some(format!("teardown failed: {err}"));
                            SandboxStatus::Failed
                        }
                    };
                    self.save(&e)?;
                }
            }
            tracing::info!(sandbox = %e.sb.id, status = e.sb.status.as_str(), "re-adopted");
        }
        // What no live record claims (a start a crash interrupted) goes.
        for id in self.runtime.reconcile(&kept, &ended) {
            tracing::warn!(sandbox = %id, "removed a sandbox no live record claims");
        }
        Ok(())
    }
}
