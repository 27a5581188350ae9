//! `pause` and `resume`: freeze and thaw a sandbox's processes, memory kept resident;
//! or, on a backend that can checkpoint (gVisor) and unless the server says
//! `pause_to_disk = false`, write its memory to disk and free it, and restore it. A
//! pause to disk is admitted against the data dir's room first (its memory limit is
//! reserved, see `pause_admission`); one that does not fit pauses in memory.

use crate::engine::{runtime_error, Engine};
use crate::error::EngineError;
use crate::lifecycle::{deadline, wrong_state};
use crate::metrics::Operation;
use crate::model::{Sandbox, WorkspaceId};
use crate::state::SandboxStatus::{self, *};
use uuid::Uuid;

/// Which way a freeze/thaw goes.
#[derive(Clone, Copy)]
enum Direction {
    Pause,
    Resume,
}

impl Direction {
    /// (from, via, to) statuses.
    fn path(self) -> (SandboxStatus, SandboxStatus, SandboxStatus) {
        match self {
            Direction::Pause => (Running, Pausing, Paused),
            Direction::Resume => (Paused, Resuming, Running),
        }
    }

    /// The verb of an error message: "cannot pause sandbox …".
    fn verb(self) -> &'static str {
        match self {
            Direction::Pause => "pause",
            Direction::Resume => "resume",
        }
    }
}

impl Engine {
    /// RUNNING → PAUSING → (freeze) → PAUSED; a PAUSED sandbox is returned unchanged.
    /// A freeze that fails leaves it RUNNING; one that misses the pause deadline
    /// ends it FAILED.
    pub async fn pause(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        let paused = self.freeze_or_thaw(ws, id, Direction::Pause).await;
        self.metrics.operation(Operation::Pause, &paused);
        self.audit(ws, "sandbox.pause", Some(id.to_string()), &paused);
        paused
    }

    /// PAUSED → RESUMING → (thaw) → RUNNING; a RUNNING sandbox is returned unchanged.
    /// A thaw that fails leaves it PAUSED; one that misses the deadline ends it FAILED.
    pub async fn resume(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        let resumed = self.freeze_or_thaw(ws, id, Direction::Resume).await;
        self.metrics.operation(Operation::Resume, &resumed);
        self.audit(ws, "sandbox.resume", Some(id.to_string()), &resumed);
        resumed
    }

    async fn freeze_or_thaw(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        dir: Direction,
    ) -> Result<Sandbox, EngineError> {
        let (from, via, to) = dir.path();
        let (_guard, mut e) = self.exclusive(ws, id).await?;
        if e.sb.status == to {
            return Ok(e.sb);
        }
        if e.sb.status != from {
            return Err(wrong_state(&e.sb, from.as_str()));
        }
        let Some(handle) = e.handle.clone() else {
            return Err(wrong_state(&e.sb, "started"));
        };
        self.transition(&mut e, via)?;
        // Pause to disk where the backend can and the data dir has room for the memory
        // image (reserved until it is written); resume restores what is on disk.
        let mut to_disk = matches!(dir, Direction::Pause)
            && self.limits.pause_to_disk
            && self.runtime.can_checkpoint(&handle)
            && !self.runtime.is_checkpointed(&handle);
        let mut _room = None;
        if to_disk {
            let memory_bytes = u64::from(e.sb.resources.memory_mb) << 20;
            match self.reserve_memory_image(memory_bytes).await {
                Ok(r) => _room = Some(r),
                Err(err) => {
                    tracing::info!(sandbox = %id, reason = %err.message, "pause: no room on disk for the memory image, paused in memory");
                    to_disk = false;
                }
            }
        }
        // Writing or reading a memory image takes as long as the memory is big: the
        // snapshot's deadline, not the freezer's.
        let moves_memory = match dir {
            Direction::Pause => to_disk,
            Direction::Resume => self.runtime.is_checkpointed(&handle),
        };
        let limit = match moves_memory {
            true => self.limits.deadlines.snapshot,
            false => self.limits.deadlines.pause,
        };
        let step = move |rt: &dyn sandboxd_runtime::Runtime| match dir {
            // Moved to disk for memory already (autoPause): it stays there, paused.
            Direction::Pause if rt.is_checkpointed(&handle) => Ok(Some(handle)),
            Direction::Pause if to_disk => rt.checkpoint(&handle).map(Some),
            // A freeze that fails is undone: the sandbox goes back to RUNNING, so it
            // must run (a freezer left FREEZING would stop it with no way back).
            Direction::Pause => rt.freeze(&handle).map(|()| None).inspect_err(|_| {
                let _ = rt.thaw(&handle);
            }),
            Direction::Resume if rt.is_checkpointed(&handle) => rt.restore(&handle).map(Some),
            Direction::Resume => rt.thaw(&handle).map(|()| None),
        };
        let Some(done) = self.bounded(limit, step, |_, _| {}).await? else {
            // Hung in the kernel: the sandbox cannot be trusted to be either.
            let verb = via.as_str().to_lowercase();
            let err = deadline::overdue(&format!("{verb} sandbox {id}"), limit);
            self.fail_sandbox(&mut e, &err).await?;
            return Err(err);
        };
        match done {
            Ok(moved) => {
                if let Some(handle) = moved {
                    // Restored: a new sentry to watch. On disk: none (the old one's
                    // exit is no crash, its watch sees the new handle).
                    if !self.runtime.is_checkpointed(&handle) {
                        self.watch_agent(&e.sb.workspace, id, &handle);
                    }
                    e.handle = Some(handle);
                }
                // Its owner's pause or resume from here on, not memory pressure's.
                e.sb.auto_paused_at = None;
                self.transition(&mut e, to)?;
                Ok(e.sb)
            }
            Err(err) => {
                self.transition(&mut e, from)?;
                Err(runtime_error(
                    &format!("cannot {} sandbox {id}", dir.verb()),
                    err,
                ))
            }
        }
    }
}
