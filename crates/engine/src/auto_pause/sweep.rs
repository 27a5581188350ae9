//! The sweep: while memory is short (the server's budget for the sandboxes' resident
//! memory, or the host's `MemAvailable`), moves consenting idle sandboxes to disk, the
//! one idle the longest first; and the background task that runs it. A move is
//! admitted against the data dir's room like a pause to disk (its memory limit is
//! reserved while the image is written); one that does not fit stays in memory.

use crate::convert::{entry_from_record, Entry};
use crate::engine::{runtime_error, Engine};
use crate::error::EngineError;
use crate::lifecycle::deadline;
use crate::state::{SandboxStatus, ACTIVE_STATUSES};
use sandboxd_runtime::RuntimeError;
use std::collections::HashSet;
use std::sync::Weak;
use std::time::Instant;
use time::OffsetDateTime;
use uuid::Uuid;

impl Engine {
    /// Moves consenting idle sandboxes to disk, idle the longest first, while memory
    /// is short; returns the sandboxes moved, in the order they were moved.
    pub async fn auto_pause_sweep(&self) -> Vec<Uuid> {
        let mut moved = Vec::new();
        loop {
            let resident = match self.resident_sandboxes() {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "autoPause: cannot list sandboxes");
                    break;
                }
            };
            let Some(why) = self.memory_short(&resident).await else {
                break;
            };
            let mut candidates: Vec<(Instant, Entry)> = resident
                .into_iter()
                .filter(|e| e.sb.status == SandboxStatus::Running && e.sb.auto_pause)
                .filter(|e| !moved.contains(&e.sb.id) && !self.sessions.running(e.sb.id))
                .filter(|e| {
                    e.handle
                        .as_ref()
                        .is_some_and(|h| self.runtime.can_checkpoint(h))
                })
                .filter_map(|e| Some((self.activity.idle_since(e.sb.id)?, e)))
                .collect();
            candidates.sort_by_key(|(since, _)| *since);
            let mut one = false;
            for (_, e) in candidates {
                let id = e.sb.id;
                let pushed = self.auto_pause_one(&e.sb.workspace, id, &why).await;
                if !matches!(pushed, Ok(false)) {
                    let target = Some(id.to_string());
                    self.audit(&e.sb.workspace, "sandbox.auto_pause", target, &pushed);
                }
                match pushed {
                    Ok(true) => {
                        moved.push(id);
                        one = true;
                        break;
                    }
                    Ok(false) => {}
                    Err(err) => tracing::warn!(sandbox = %id, error = %err, "autoPause failed"),
                }
            }
            if !one {
                break;
            }
        }
        moved
    }

    /// Active sandboxes whose memory is on the host (not on disk).
    fn resident_sandboxes(&self) -> Result<Vec<Entry>, EngineError> {
        let mut resident = Vec::new();
        let mut live = HashSet::new();
        for rec in self.store.sandboxes_in_status(&ACTIVE_STATUSES)? {
            let e = entry_from_record(rec, self.limits.isolation)?;
            live.insert(e.sb.id);
            let on_disk = e
                .handle
                .as_ref()
                .is_some_and(|h| self.runtime.is_checkpointed(h));
            if e.handle.is_some() && e.sb.auto_paused_at.is_none() && !on_disk {
                resident.push(e);
            }
        }
        self.activity.retain(&live);
        Ok(resident)
    }

    /// Why memory is short now, or `None` when it is not.
    async fn memory_short(&self, resident: &[Entry]) -> Option<String> {
        let cfg = self.limits.auto_pause;
        if cfg.min_available_mb > 0 {
            if let Some(available) = super::host_available_mb() {
                if available < cfg.min_available_mb {
                    return Some(format!(
                        "the host has {available} MiB available (< {} MiB)",
                        cfg.min_available_mb
                    ));
                }
            }
        }
        if cfg.memory_budget_mb == 0 {
            return None;
        }
        let handles: Vec<_> = resident.iter().filter_map(|e| e.handle.clone()).collect();
        let used: u64 = self
            .blocking(move |rt| {
                handles
                    .iter()
                    .filter_map(|h| rt.usage(h).ok())
                    .map(|u| u.memory_bytes)
                    .sum()
            })
            .await
            .ok()?;
        let used_mb = used >> 20;
        (used_mb > cfg.memory_budget_mb).then(|| {
            format!(
                "the sandboxes use {used_mb} MiB (> the budget of {} MiB)",
                cfg.memory_budget_mb
            )
        })
    }

    /// Moves sandbox `id` to disk if it still may go: RUNNING, consenting, idle, not
    /// locked by an operation. `false`: it stays (busy, or it cannot be checkpointed).
    async fn auto_pause_one(&self, ws: &str, id: Uuid, why: &str) -> Result<bool, EngineError> {
        let Ok(_guard) = self.locks.get(id).try_write_owned() else {
            return Ok(false); // an operation holds it
        };
        let mut e = self.load(ws, id)?;
        let now = OffsetDateTime::now_utc();
        let may = e.sb.status == SandboxStatus::Running
            && e.sb.auto_pause
            && e.sb.auto_paused_at.is_none()
            && !crate::lifecycle::is_due(&e.sb, now)
            && self.activity.idle_since(id).is_some()
            && !self.sessions.running(id);
        let Some(handle) = e.handle.clone().filter(|_| may) else {
            return Ok(false);
        };
        if !self.runtime.can_checkpoint(&handle) || self.runtime.is_checkpointed(&handle) {
            return Ok(false);
        }
        let memory_bytes = u64::from(e.sb.resources.memory_mb) << 20;
        let _room = match self.reserve_memory_image(memory_bytes).await {
            Ok(r) => r,
            Err(err) => {
                // No room for its image: it keeps running; to the back of the line.
                self.activity.touch(id);
                tracing::info!(sandbox = %id, reason = %err.message, "autoPause: no room on disk, stays in memory");
                return Ok(false);
            }
        };
        let limit = self.limits.deadlines.snapshot;
        let step = move |rt: &dyn sandboxd_runtime::Runtime| rt.checkpoint(&handle);
        let Some(done) = self.bounded(limit, step, |_, _| {}).await? else {
            let err = deadline::overdue(&format!("moving sandbox {id} to disk"), limit);
            self.fail_sandbox(&mut e, &err).await?;
            return Err(err);
        };
        match done {
            Ok(on_disk) => {
                e.handle = Some(on_disk);
                e.sb.auto_paused_at = Some(now);
                self.save(&e)?;
                tracing::info!(sandbox = %id, reason = why, "autoPause: moved to disk");
                Ok(true)
            }
            Err(RuntimeError::CannotCheckpoint(reason)) => {
                // It keeps running; to the back of the line.
                self.activity.touch(id);
                tracing::info!(sandbox = %id, reason, "autoPause: stays in memory");
                Ok(false)
            }
            Err(err) => Err(runtime_error(
                &format!("cannot move sandbox {id} to disk"),
                err,
            )),
        }
    }
}

/// Runs the sweep every `interval` until the engine is dropped.
pub(crate) async fn run(engine: Weak<Engine>, interval: std::time::Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.shutdown.is_cancelled() {
            return;
        }
        engine.auto_pause_sweep().await;
    }
}
