//! The server's background layer collector: every `[layer_gc] interval_seconds` it
//! deletes the stored layers that no image, snapshot, template or live sandbox uses
//! and that are older than `grace_seconds` (the collection `images prune` runs). A
//! round that finds a pull, an import or a sandbox start holding the layer store's
//! lock leaves everything alone and waits for the next one.

use sandboxd_images::ImageError;
use sandboxd_server::config::LayerGc;
use std::path::PathBuf;
use std::time::Duration;

/// Starts the collector on the current tokio runtime (nothing when the interval is 0).
pub fn spawn(data_dir: PathBuf, gc: LayerGc) {
    if gc.interval_seconds == 0 {
        return;
    }
    let grace = Duration::from_secs(gc.grace_seconds);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(gc.interval_seconds));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is now: the first round comes an interval later
        loop {
            tick.tick().await;
            let dir = data_dir.clone();
            let round =
                tokio::task::spawn_blocking(move || crate::cli_images_gc::collect(&dir, grace))
                    .await;
            match round {
                Ok(Ok(report)) if !report.layers.is_empty() => tracing::info!(
                    layers = report.layers.len(),
                    bytes = report.bytes,
                    "unused layers deleted"
                ),
                Ok(Ok(_)) => {}
                Ok(Err(e))
                    if matches!(e.downcast_ref::<ImageError>(), Some(ImageError::Busy(_))) =>
                {
                    tracing::debug!("layer collection skipped: the layer store is in use");
                }
                Ok(Err(e)) => tracing::warn!(error = %format!("{e:#}"), "layer collection failed"),
                Err(e) => tracing::warn!(error = %e, "layer collection panicked"),
            }
        }
    });
}
