//! autoPause where the backend cannot checkpoint (the container tier's case): the
//! consent is kept, across a restart too, and nothing moves even when memory is short.

mod common;

use common::*;
use sandboxd_engine::{AutoPause, Limits, SandboxStatus};
use std::time::Duration;
use uuid::Uuid;

#[tokio::test]
async fn consent_is_kept_and_nothing_moves_where_the_backend_cannot_checkpoint() {
    let h = Harness::with_limits(Limits {
        auto_pause: AutoPause {
            memory_budget_mb: 0,
            // Always short: the host never has this much available.
            min_available_mb: u64::MAX,
            interval: Duration::ZERO,
        },
        ..limits()
    });
    let ws = h.ws();
    let mut req = request(None);
    req.auto_pause = true;
    let (willing, _) = h.engine.create(&ws, req).await.unwrap();
    let (unwilling, _) = h.engine.create(&ws, request(None)).await.unwrap();
    assert!(willing.auto_pause && !unwilling.auto_pause);
    assert_eq!(h.engine.auto_pause_sweep().await, Vec::<Uuid>::new());
    let again = h.reopen().get(&ws, willing.id).await.unwrap();
    assert!(
        again.auto_pause && again.auto_paused_at.is_none(),
        "{again:?}"
    );
    assert_eq!(again.status, SandboxStatus::Running);
}
