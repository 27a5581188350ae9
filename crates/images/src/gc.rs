//! Removing images, and pruning the layers nothing uses. The caller (which knows the
//! store) names what snapshots, templates and live sandboxes use; every stored image's
//! layers are kept as well. A prune holds the layer store's prune lock exclusively, so
//! no pull or import runs meanwhile, and spares layers younger than a grace period
//! (one a snapshot just committed but has not yet recorded).

use crate::store::{walk_size, Images};
use crate::{io, ImageError};
use sandboxd_runtime::linux::file_lock::{How, Locked};
use sandboxd_runtime::linux::images as rt_images;
use sandboxd_runtime::linux::layers::remove_tree;
use std::collections::HashSet;
use std::time::Duration;

/// What a prune removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PruneReport {
    pub layers: Vec<String>,
    pub bytes: u64,
}

fn is_layer_name(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Images {
    /// Removes image `name`'s record (its layers stay until a prune); returns the name
    /// it was stored under.
    pub fn remove(&self, name: &str) -> Result<String, ImageError> {
        Ok(rt_images::remove_image(
            self.data_dir(),
            self.layer_store(),
            name,
        )?)
    }

    /// Deletes every stored layer that is not in `keep`, not used by a stored image and
    /// older than `grace`; drops blob-index entries of deleted layers.
    pub fn prune(
        &mut self,
        keep: &HashSet<String>,
        grace: Duration,
    ) -> Result<PruneReport, ImageError> {
        let _exclusive = self.exclusive_gc_lock()?;
        let mut keep = keep.clone();
        for image in self.list() {
            keep.extend(image.layers);
        }
        let dir = self.layers_dir();
        let entries = std::fs::read_dir(&dir).map_err(io("listing layers", &dir))?;
        let mut report = PruneReport::default();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_layer_name(&name) || keep.contains(&name) {
                continue;
            }
            let young = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age < grace);
            if young {
                continue;
            }
            let path = entry.path();
            report.bytes += walk_size(&path);
            remove_tree(&path);
            if !path.exists() {
                report.layers.push(name);
            }
        }
        self.drop_stale_index();
        report.layers.sort();
        Ok(report)
    }

    /// Trades this store's shared prune lock for the exclusive one, or says who holds it.
    fn exclusive_gc_lock(&mut self) -> Result<Locked, ImageError> {
        let busy = || {
            ImageError::Busy(
                "a pull, an import or a sandbox start is running (or another prune); try again when it is done".into(),
            )
        };
        let shared = self.gc_lock.take().ok_or_else(busy)?;
        let file = shared.unlock().map_err(|e| ImageError::Io {
            what: "unlocking the prune lock",
            path: self.layers_dir(),
            source: e,
        })?;
        Locked::lock(file, How::ExclusiveNow).map_err(|_| busy())
    }

    /// Removes blob-index entries whose layer is gone, and the blob locks (no pull can
    /// be waiting on one while the prune lock is held exclusively).
    fn drop_stale_index(&self) {
        let index = self.index_dir();
        if let Ok(entries) = std::fs::read_dir(&index) {
            for entry in entries.flatten() {
                let layer = std::fs::read_to_string(entry.path()).unwrap_or_default();
                if self.layer_store().path(layer.trim()).is_err() {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(self.layers_dir()) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                // Blob locks only: the prune lock itself is never unlinked (a waiter
                // on the old file would then not exclude a newer prune).
                if name.strip_prefix(".lock-").is_some_and(is_layer_name) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}
