//! Re-adoption at start-up: keep live sandboxes, end the ones that died meanwhile; every
//! status change goes through the guarded transition.

use crate::convert::{entry_from_record, Entry};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::EndReason;
use crate::state::{SandboxStatus, ACTIVE_STATUSES};
use sandboxd_runtime::Runtime;
use std::collections::HashSet;
use time::OffsetDateTime;

/// What to do with one stored active sandbox: the status to keep it in, or why it ended.
fn settle(rt: &dyn Runtime, e: &Entry) -> Result<SandboxStatus, EndReason> {
    use SandboxStatus::*;
    let Some(handle) = e.handle.clone() else {
        // Never got a handle: the server stopped while starting it.
        return Err(EndReason::Crashed);
    };
    if e.sb.status == Terminating {
        return Err(e.sb.end_reason.unwrap_or(EndReason::Destroyed));
    }
    if crate::templates::is_builder(&e.sb) {
        // A template's build sandbox: its build ran in the server that stopped, so no
        // one will snapshot or destroy it.
        return Err(EndReason::Destroyed);
    }
    if !rt.is_alive(&handle) {
        return Err(EndReason::Crashed);
    }
    // Finish an interrupted transition: freezing and thawing are idempotent, so redoing
    // the step leaves the cgroup freezer in the state the target status says.
    let settled = match e.sb.status {
        // On disk (gVisor): paused, whichever way it was going.
        Pausing | Resuming if rt.is_checkpointed(&handle) => Ok(Paused),
        Pausing => rt.freeze(&handle).map(|()| Paused),
        Resuming => rt.thaw(&handle).map(|()| Running),
        Pending | Starting => Ok(Running),
        // A snapshot's capture freezes a running sandbox for its copy, with no status
        // change: a kill in between left it frozen.
        Running if rt.is_frozen(&handle) => {
            tracing::warn!(sandbox = %e.sb.id, "thawing a running sandbox left frozen (a snapshot interrupted)");
            rt.thaw(&handle).map(|()| Running)
        }
        other => Ok(other),
    };
    settled.map_err(|_| EndReason::Crashed)
}

impl Engine {
    /// For every stored active sandbox: alive → kept; dead → TERMINATED (`crashed`)
    /// with its leftovers destroyed; then whatever the runtime holds for no kept
    /// sandbox is removed.
    pub(crate) fn readopt(&self) -> Result<(), EngineError> {
        let (mut kept, mut ended) = (HashSet::new(), HashSet::new());
        for rec in self.store.sandboxes_in_status(&ACTIVE_STATUSES)? {
            let mut e = entry_from_record(rec, self.limits.isolation)?;
            // A live run's beside this server (its owner mark held): the run's to end.
            if self.runtime.owned_elsewhere(e.sb.id) {
                kept.insert(e.sb.id);
                continue;
            }
            if crate::auto_pause::recover_on_disk(self.runtime.as_ref(), &mut e) {
                tracing::info!(sandbox = %e.sb.id, "found on disk: the next operation wakes it");
            } else if crate::auto_pause::recover_restored(self.runtime.as_ref(), &mut e) {
                tracing::info!(sandbox = %e.sb.id, "found restored: adopted running");
            }
            match settle(self.runtime.as_ref(), &e) {
                Ok(status) => {
                    kept.insert(e.sb.id);
                    if e.sb.started_at.is_none() {
                        e.sb.started_at = Some(OffsetDateTime::now_utc());
                    }
                    if e.sb.status == SandboxStatus::Pending {
                        self.transition(&mut e, SandboxStatus::Starting)?;
                    }
                    match e.sb.status == status {
                        true => self.save(&e)?,
                        false => self.transition(&mut e, status)?,
                    }
                    if let Some(handle) = &e.handle {
                        self.watch_agent(&e.sb.workspace, e.sb.id, handle);
                    }
                }
                Err(reason) => {
                    ended.insert(e.sb.id);
                    e.sb.end_reason = Some(reason);
                    e.sb.ended_at = Some(OffsetDateTime::now_utc());
                    if e.sb.status != SandboxStatus::Terminating {
                        self.transition(&mut e, SandboxStatus::Terminating)?;
                    }
                    let torn_down = e
                        .handle
                        .as_ref()
                        .map_or(Ok(()), |h| self.runtime.destroy(h));
                    let end = match torn_down {
                        Ok(()) => SandboxStatus::Terminated,
                        Err(err) => {
                            e.sb.error = Some(format!("teardown failed: {err}"));
                            SandboxStatus::Failed
                        }
                    };
                    self.transition(&mut e, end)?;
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
