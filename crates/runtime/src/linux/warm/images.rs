//! Warm entries for images other than the wanted shape's: the last few images that
//! starts used on their own (no snapshot layers on top) get one entry parked in their
//! root each, so their next start is as warm as one of `default`. The list is bounded
//! (`count`, the server's `warm_images`); an image that no longer resolves to the layers
//! it was started with (removed, or its name moved to other layers) leaves the list,
//! and the next refill discards its entry. A thread notices changes to the image
//! records (the directory's mtime) and starts that refill, so a removed image's layers
//! are released within a moment even when no start comes.

use super::{entry::Maker, Shape, Shared};
use crate::linux::layers::LayerStore;
use crate::linux::refill;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Images kept warm unless configured otherwise.
pub(in crate::linux) const DEFAULT_COUNT: usize = 2;
/// How often the watcher looks at the image records.
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// The recent images' shapes, most recent first.
pub(super) struct Recent {
    count: AtomicUsize,
    shapes: Mutex<Vec<Shape>>,
    watching: AtomicBool,
}

impl Recent {
    pub fn new(count: usize) -> Self {
        Recent {
            count: AtomicUsize::new(count),
            shapes: Mutex::new(Vec::new()),
            watching: AtomicBool::new(false),
        }
    }

    /// Keeps at most `count` images from now on.
    pub fn set_count(&self, count: usize) {
        self.count.store(count, Ordering::Release);
        if let Ok(mut s) = self.shapes.lock() {
            s.truncate(count);
        }
    }

    /// Makes `shape` (parked in an image's root) the most recent, replacing an older
    /// shape of the same root; `true` the first time (the caller starts watching).
    pub fn note(&self, shape: Shape) -> bool {
        let count = self.count.load(Ordering::Acquire);
        if count == 0 {
            return false;
        }
        if let Ok(mut s) = self.shapes.lock() {
            if s.first() != Some(&shape) {
                s.retain(|old| old.root != shape.root);
                s.insert(0, shape);
                s.truncate(count);
            }
        }
        !self.watching.swap(true, Ordering::AcqRel)
    }

    /// The shapes whose image still resolves to their layers (the others are forgotten).
    pub fn current(&self, maker: &Maker) -> Vec<Shape> {
        let Ok(mut s) = self.shapes.lock() else {
            return Vec::new();
        };
        s.retain(|shape| {
            shape
                .root
                .as_ref()
                .is_some_and(|(image, layers)| still_stacks(&maker.config.data_dir, image, layers))
        });
        s.clone()
    }
}

/// Whether image `name` in `data_dir` resolves to exactly `layers` (top first), read
/// from its records: the watchers ask this of data dirs that may be going away, so it
/// makes nothing (no store, no built-in image: a `default` whose record or layer was
/// removed by hand counts as gone, and the pool's entries of it are drained).
pub(in crate::linux) fn still_stacks(data_dir: &Path, name: &str, layers: &[PathBuf]) -> bool {
    let store = LayerStore::existing(data_dir);
    let Some(image) = crate::linux::images::recorded(data_dir, &store, name) else {
        return false;
    };
    let dirs: Result<Vec<PathBuf>, _> = image.layers.iter().rev().map(|d| store.path(d)).collect();
    dirs.is_ok_and(|d| d == layers)
}

/// Starts the thread that refills the pool whenever the image records change, until
/// the pool closes.
pub(super) fn watch(shared: &Arc<Shared>) {
    let shared = shared.clone();
    let dir = shared.maker.config.data_dir.join("images");
    let spawned = std::thread::Builder::new()
        .name("warm-images".into())
        .spawn(move || {
            let mut last = modified(&dir);
            while !shared.closed.load(Ordering::Acquire) {
                std::thread::sleep(WATCH_EVERY);
                let now = modified(&dir);
                // A refill running now may have looked before the change: try again on
                // the next round rather than lose it.
                if now != last && !shared.filling.load(Ordering::Acquire) {
                    last = now;
                    refill::spawn(&shared, |s| &s.filling, "warm-inits", Shared::fill);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot watch the image records for the warm pool");
    }
}

fn modified(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watchers ask this of data dirs that may be going away (a server's removed
    /// under it, a test's temp dir): the answer is read from the records, and nothing is
    /// made, least of all the built-in image. (It once built `default` into a data dir
    /// being removed, which then stayed behind.)
    #[test]
    fn asking_whether_an_image_still_stacks_makes_nothing() {
        let data = tempfile::tempdir().expect("tempdir");
        let layers = vec![data.path().join("layers").join("0".repeat(64))];
        for name in [crate::linux::DEFAULT_IMAGE, "python:3.12"] {
            assert!(!still_stacks(data.path(), name, &layers), "{name}");
        }
        let made: Vec<_> = std::fs::read_dir(data.path())
            .expect("read_dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert!(made.is_empty(), "made {made:?}");
        let gone = data.path().join("removed");
        assert!(!still_stacks(&gone, crate::linux::DEFAULT_IMAGE, &layers));
        assert!(!gone.exists(), "a removed data dir came back");
    }
}
