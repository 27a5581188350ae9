//! The gVisor warm pool watches the image records: when the image its entries are made
//! of is removed (`images rm`, from any process) or its name moves to other layers, the
//! pool forgets that shape and drains its entries at once, so that their layers are
//! released (a collection waits a moment for that) instead of held until a start of
//! another shape comes. As the container tier's warm images do (`linux/warm/images`).

use super::warm::Shared;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the watcher looks at the image records.
const WATCH_EVERY: Duration = Duration::from_millis(200);

fn modified(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// Starts the thread that checks the pool's shape whenever the image records change,
/// until the pool closes.
pub(super) fn watch(shared: &Arc<Shared>) {
    let shared = shared.clone();
    let dir = shared.data_dir().join("images");
    let spawned = std::thread::Builder::new()
        .name("gvisor-warm-images".into())
        .spawn(move || {
            let mut last = modified(&dir);
            while !shared.closed() {
                std::thread::sleep(WATCH_EVERY);
                let now = modified(&dir);
                // A refill running now may be making an entry of the old shape: it is
                // not kept once the shape is forgotten, and the next round looks again.
                if now != last && !shared.filling() {
                    last = now;
                    if shared.forget_removed_image() {
                        tracing::info!(
                            "the warm gVisor sandboxes' image was removed: draining them"
                        );
                        shared.refill();
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot watch the image records for the gVisor warm pool");
    }
}
