//! Room kept for the database on a full disk: a file of allocated blocks beside it,
//! given up the first time a write finds the disk full, so that the writes that free
//! space (a DELETE, which removes a sandbox's layer image) and the records of what
//! happened still land. It is made again at the next open.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The reserve file's name, beside the database.
pub const FILE: &str = "sandboxd.db.reserve";
/// Its size: room for many WAL frames of small rows.
const SIZE: usize = 32 << 20;

/// The reserve of one database directory.
pub struct Reserve {
    path: PathBuf,
    held: AtomicBool,
}

impl Reserve {
    /// Keeps (making when missing, with real blocks) the reserve of `dir`; without room
    /// for it the store runs without one.
    pub fn keep(dir: &Path) -> Self {
        let path = dir.join(FILE);
        let held = match std::fs::metadata(&path) {
            Ok(m) if m.len() >= SIZE as u64 => true,
            _ => match fill(&path) {
                Ok(()) => true,
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    tracing::warn!(error = %e, path = %path.display(), "no room for the database's reserve");
                    false
                }
            },
        };
        Self {
            path,
            held: AtomicBool::new(held),
        }
    }

    /// Gives the reserve up (once); true when that freed room to retry a write.
    pub fn release(&self) -> bool {
        if !self.held.swap(false, Ordering::AcqRel) {
            return false;
        }
        tracing::error!(
            path = %self.path.display(),
            "the data directory's disk is full: released the database's reserve"
        );
        std::fs::remove_file(&self.path).is_ok()
    }
}

/// Writes the file with zeros (real blocks, unlike a sparse `set_len`) and syncs it.
fn fill(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    let block = vec![0u8; 1 << 20];
    for _ in 0..SIZE / block.len() {
        file.write_all(&block)?;
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_allocated_and_released_once() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = Reserve::keep(dir.path());
        let path = dir.path().join(FILE);
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 >= SIZE as u64, "allocated, not sparse");
        assert!(reserve.release());
        assert!(!path.exists());
        assert!(!reserve.release(), "only once");
        assert!(
            Reserve::keep(dir.path()).release(),
            "made again at the next open"
        );
    }
}
