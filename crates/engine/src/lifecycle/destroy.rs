//! `destroy`: end a sandbox through the API.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{EndReason, Sandbox, WorkspaceId};
use uuid::Uuid;

impl Engine {
    /// Persists TERMINATING, tears the sandbox down, then TERMINATED with end reason
    /// `destroyed`. A terminal sandbox is returned unchanged.
    pub async fn destroy(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        let (_guard, mut e) = self.exclusive(ws, id).await?;
        self.end(&mut e, EndReason::Destroyed).await?;
        Ok(e.sb)
    }
}
