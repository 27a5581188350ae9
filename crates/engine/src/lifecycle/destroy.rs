//! `destroy`: end a sandbox through the API.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::lifecycle::TEARDOWN_FAILED;
use crate::model::{EndReason, Sandbox, WorkspaceId};
use crate::state::SandboxStatus;
use uuid::Uuid;

impl Engine {
    /// Persists TERMINATING, tears the sandbox down, then TERMINATED with end reason
    /// `destroyed`. A terminal sandbox is returned unchanged, except that one left
    /// FAILED by a teardown that failed has its teardown tried again.
    pub async fn destroy(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        let destroyed = self.destroy_steps(ws, id).await;
        self.metrics
            .operation(crate::metrics::Operation::Destroy, &destroyed);
        self.audit(ws, "sandbox.destroy", Some(id.to_string()), &destroyed);
        destroyed
    }

    async fn destroy_steps(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        let (_guard, mut e) = self.exclusive(ws, id).await?;
        let failed_teardown = e.sb.status == SandboxStatus::Failed
            && e.sb
                .error
                .as_deref()
                .is_some_and(|m| m.starts_with(TEARDOWN_FAILED));
        if !failed_teardown {
            self.end(&mut e, EndReason::Destroyed).await?;
            return Ok(e.sb);
        }
        match self.tear_down(&e).await? {
            Ok(()) => {
                let error = e.sb.error.take().unwrap_or_default();
                e.sb.error = Some(format!("{error} (removed by a later destroy)"));
                self.save(&e)?;
            }
            Err(err) => {
                tracing::warn!(sandbox = %id, error = %err, "sandbox teardown failed again")
            }
        }
        Ok(e.sb)
    }
}
