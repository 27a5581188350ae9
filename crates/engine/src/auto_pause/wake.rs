//! Waking a sandbox memory pressure moved to disk: the next operation on it restores
//! it first (waiting for the restore), under the sandbox's exclusive lock.

use crate::convert::Entry;
use crate::engine::{runtime_error, Engine};
use crate::error::{EngineError, ErrorCode};
use crate::lifecycle::deadline;
use crate::model::WorkspaceId;
use tokio::sync::OwnedRwLockReadGuard;
use uuid::Uuid;

impl Engine {
    /// [`Engine::shared`], after restoring the sandbox if memory pressure moved it to
    /// disk: for operations that reach its processes.
    pub(crate) async fn shared_awake(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
    ) -> Result<(OwnedRwLockReadGuard<()>, Entry), EngineError> {
        let (guard, e) = self.shared(ws, id).await?;
        if e.sb.auto_paused_at.is_none() {
            return Ok((guard, e));
        }
        drop(guard);
        // Busy from here on: the sweep does not move it back before this operation.
        let _busy = self.activity.begin(id);
        self.wake(ws, id).await?;
        self.shared(ws, id).await
    }

    /// Restores sandbox `id` if it is on disk for memory; concurrent callers wait
    /// for the first one's restore.
    async fn wake(&self, ws: &WorkspaceId, id: Uuid) -> Result<(), EngineError> {
        let (_guard, mut e) = self.exclusive(ws, id).await?;
        if e.sb.auto_paused_at.is_none() || e.sb.status.is_terminal() {
            return Ok(()); // woken meanwhile, or ended
        }
        let Some(handle) = e.handle.clone() else {
            return Err(EngineError::new(
                ErrorCode::Internal,
                format!("sandbox {id} has no handle"),
            ));
        };
        if !self.runtime.is_checkpointed(&handle) {
            e.sb.auto_paused_at = None;
            return self.save(&e);
        }
        let limit = self.limits.deadlines.snapshot;
        let step = move |rt: &dyn sandboxd_runtime::Runtime| rt.restore(&handle);
        let Some(done) = self.bounded(limit, step, |_, _| {}).await? else {
            let err = deadline::overdue(&format!("waking sandbox {id} from disk"), limit);
            self.fail_sandbox(&mut e, &err).await?;
            return Err(err);
        };
        let live =
            done.map_err(|err| runtime_error(&format!("cannot wake sandbox {id} from disk"), err))?;
        self.watch_agent(&e.sb.workspace, id, &live);
        e.handle = Some(live);
        e.sb.auto_paused_at = None;
        self.save(&e)?;
        tracing::info!(sandbox = %id, "autoPause: woken from disk");
        Ok(())
    }
}
