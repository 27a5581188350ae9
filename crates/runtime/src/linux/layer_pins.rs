//! Which layers live sandboxes use, for the layer collector. A start resolves its
//! layers while holding the layer store's collector lock (`layers/.lock-gc`) shared,
//! and writes their digests into its state dir (`layers`) before it lets go; a
//! collection holds the lock exclusively while it reads every state dir's list and
//! deletes. So no layer goes between a start's resolving it and its mount, and none
//! while a sandbox whose state dir lists it lives (its image record may go meanwhile).

use super::file_lock::{How, Locked};
use super::io;
use crate::RuntimeError;
use std::collections::HashSet;
use std::path::Path;

/// The collector lock's file in the layer store (pulls and imports share it too).
pub const GC_LOCK: &str = ".lock-gc";
/// The list of a sandbox's layer digests in its state dir.
const PIN_FILE: &str = "layers";

/// A start's layers, held against collection until written into its state dir.
pub struct LayerPin {
    digests: Vec<String>,
    _lock: Locked,
}

/// Takes the collector lock of the layer store `layers_root` shared (waiting while a
/// collection runs).
pub fn share_gc_lock(layers_root: &Path) -> Result<Locked, RuntimeError> {
    let path = layers_root.join(GC_LOCK);
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("opening the layer collector lock", &path))?;
    Locked::lock(file, How::Shared).map_err(|(_, source)| RuntimeError::Io {
        what: "locking the layer collector lock",
        path,
        source,
    })
}

impl LayerPin {
    /// Pins `digests`; `lock` is the collector lock, held shared.
    pub fn new(digests: Vec<String>, lock: Locked) -> Self {
        LayerPin {
            digests,
            _lock: lock,
        }
    }

    /// Records the layers in `state_dir` (removed with it), then releases the lock.
    pub fn write(self, state_dir: &Path) -> Result<(), RuntimeError> {
        self.record(state_dir)
    }

    /// Records the layers in `state_dir`, keeping the lock until the pin is dropped (a
    /// dir renamed after its pin is written stays pinned through the rename).
    /// A list there already as it would be written (a warm entry's, parked in the same
    /// image, taken by a start) is left as it is: rewritten, ext4 would start writing
    /// the file out at its close (`auto_da_alloc`), on the start's way.
    pub fn record(&self, state_dir: &Path) -> Result<(), RuntimeError> {
        let path = state_dir.join(PIN_FILE);
        let mut text = self.digests.join("\n");
        text.push('\n');
        if std::fs::read(&path).is_ok_and(|there| there == text.as_bytes()) {
            return Ok(());
        }
        std::fs::write(&path, text).map_err(io("writing the sandbox's layer list", &path))
    }
}

/// Every layer digest listed by a sandbox state dir under `sandboxes_dir` (warm
/// inits' dirs included).
pub fn pinned_layers(sandboxes_dir: &Path) -> HashSet<String> {
    pinned_where(sandboxes_dir, |_| true)
}

/// The layer digests listed by the state dirs of sandboxes only (not warm inits').
pub fn pinned_by_sandboxes(sandboxes_dir: &Path) -> HashSet<String> {
    pinned_where(sandboxes_dir, |dir| !is_warm(dir))
}

/// The layer digests listed by warm inits whose owner still runs: it drops an entry
/// whose image was removed within a moment (see `warm::images`), and an entry of a
/// dead owner is removed by the next runtime that opens the data dir.
pub fn pinned_by_live_warm_inits(sandboxes_dir: &Path) -> HashSet<String> {
    pinned_where(sandboxes_dir, |dir| {
        is_warm(dir)
            && std::fs::read_to_string(dir.join("owner"))
                .is_ok_and(|mark| super::refill::owner_alive(&mark))
    })
}

/// A warm entry's dir: the container tier's or the gVisor tier's.
fn is_warm(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| {
        let n = n.to_string_lossy();
        n.starts_with(super::warm::DIR_PREFIX) || n.starts_with(super::gvisor::WARM_DIR_PREFIX)
    })
}

fn pinned_where(sandboxes_dir: &Path, wanted: impl Fn(&Path) -> bool) -> HashSet<String> {
    let mut out = HashSet::new();
    let Ok(entries) = std::fs::read_dir(sandboxes_dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !wanted(&dir) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(dir.join(PIN_FILE)) {
            out.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn pin(layers: &Path, digests: &[&str]) -> LayerPin {
        let lock = share_gc_lock(layers).expect("lock");
        LayerPin::new(digests.iter().map(|d| d.to_string()).collect(), lock)
    }

    /// A start that takes an entry parked in its image finds the list it would write
    /// there already: the file is left as it is (not rewritten). Another list replaces
    /// it, and the collector reads what is there.
    #[test]
    fn the_same_list_is_left_as_it_is_and_another_replaces_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (layers, state) = (dir.path().join("layers"), dir.path().join("sandboxes/a"));
        std::fs::create_dir_all(&layers).expect("layers");
        std::fs::create_dir_all(&state).expect("state");
        pin(&layers, &["sha256:a", "sha256:b"])
            .record(&state)
            .expect("record");
        let file = state.join(PIN_FILE);
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(old))
            .expect("set mtime");
        pin(&layers, &["sha256:a", "sha256:b"])
            .record(&state)
            .expect("again");
        let meta = std::fs::metadata(&file).expect("stat");
        assert_eq!(meta.mtime(), 1, "rewritten");
        pin(&layers, &["sha256:c"]).record(&state).expect("another");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "sha256:c\n");
        let pinned = pinned_layers(&dir.path().join("sandboxes"));
        assert_eq!(pinned, HashSet::from(["sha256:c".to_string()]));
    }
}
