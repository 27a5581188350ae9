//! The background task that ends sandboxes whose timeout has passed, and settles
//! those left mid-transition (`lifecycle::stuck`).

use crate::engine::Engine;
use crate::state::ACTIVE_STATUSES;
use std::sync::Weak;
use std::time::Duration;
use time::OffsetDateTime;

/// How often expiry is checked.
const TICK: Duration = Duration::from_secs(1);

impl Engine {
    /// Ends every active sandbox whose `expires_at` has passed; returns how many.
    pub async fn expire_due(&self) -> usize {
        let now = OffsetDateTime::now_utc();
        let due = match self.store.sandboxes_in_status(&ACTIVE_STATUSES) {
            Ok(rows) => rows
                .into_iter()
                .filter(|r| r.expires_at.is_some_and(|t| t <= now)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list sandboxes for expiry");
                return 0;
            }
        };
        let mut ended = 0;
        for rec in due {
            match self.expire_if_due(&rec.workspace, rec.id).await {
                Ok(()) => ended += 1,
                Err(e) => tracing::warn!(sandbox = %rec.id, error = %e, "cannot expire sandbox"),
            }
        }
        ended
    }
}

/// Runs until the engine is dropped.
pub(crate) async fn run(engine: Weak<Engine>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(engine) = engine.upgrade() else {
            return;
        };
        engine.expire_due().await;
        engine.settle_stuck().await;
    }
}
