//! `create_queued`: a create that waits for capacity instead of failing at once.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{CreateSandbox, Sandbox, WorkspaceId};
use sandboxd_runtime::Requests;
use std::time::Duration;
use tokio::time::Instant;

/// How often a queued create retries admission.
const RETRY: Duration = Duration::from_millis(100);

impl Engine {
    /// Like [`Engine::create_with`], but while the server has no capacity it retries until
    /// `wait` has passed; then the `CapacityExhausted` error is returned. Sandboxes that
    /// end (destroyed, expired) free capacity for the waiting request.
    pub async fn create_queued(
        &self,
        ws: &WorkspaceId,
        req: CreateSandbox,
        requests: Option<Requests>,
        wait: Duration,
    ) -> Result<(Sandbox, bool), EngineError> {
        let deadline = Instant::now() + wait;
        loop {
            match self.create_with(ws, req.clone(), requests).await {
                Err(e) if e.code == ErrorCode::CapacityExhausted && Instant::now() < deadline => {
                    self.expire_due().await;
                    tokio::time::sleep(RETRY.min(deadline - Instant::now())).await;
                }
                other => return other,
            }
        }
    }
}
