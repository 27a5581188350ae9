//! How much a capture of a sandbox's writable layer may store: the blocks its upper
//! dir's entries occupy (holes are not copied, so they count nothing) and the entries
//! themselves (each takes an inode of the layer store, an empty file as much as a big
//! one), which disk admission reserves before a snapshot writes.

use super::rootfs;
use crate::{CaptureBound, RuntimeError, SandboxHandle};
use std::os::unix::fs::MetadataExt;

/// Allocated bytes and number of every entry under the sandbox's upper dir (files,
/// dirs, links, whiteouts), the upper dir itself included.
pub fn measure(handle: &SandboxHandle) -> Result<CaptureBound, RuntimeError> {
    measure_dir(&rootfs::upper(&handle.state_dir))
}

fn measure_dir(upper: &std::path::Path) -> Result<CaptureBound, RuntimeError> {
    let mut bound = CaptureBound::default();
    for entry in walkdir::WalkDir::new(upper).follow_links(false) {
        let entry = match entry {
            Ok(entry) => entry,
            // A file the sandbox removed meanwhile counts nothing.
            Err(e) if e.io_error().map(|e| e.kind()) == Some(std::io::ErrorKind::NotFound) => {
                continue
            }
            Err(e) => {
                return Err(RuntimeError::Io {
                    what: "measuring a layer to capture",
                    path: upper.to_path_buf(),
                    source: e.into(),
                })
            }
        };
        bound.entries = bound.entries.saturating_add(1);
        if let Ok(meta) = entry.metadata() {
            bound.bytes = bound
                .bytes
                .saturating_add(meta.blocks().saturating_mul(512));
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_files_count_as_entries_though_they_occupy_no_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let upper = dir.path().join("upper");
        std::fs::create_dir_all(upper.join("d")).expect("mkdir");
        for i in 0..100 {
            std::fs::File::create(upper.join("d").join(i.to_string())).expect("touch");
        }
        std::os::unix::fs::symlink("nowhere", upper.join("link")).expect("symlink");
        let bound = measure_dir(&upper).expect("measure");
        assert_eq!(bound.entries, 103, "upper, d, 100 files, the link");
    }
}
