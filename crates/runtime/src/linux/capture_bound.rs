//! How many bytes a capture of a sandbox's writable layer may store: the blocks its
//! upper dir's entries occupy (holes are not copied, so they count nothing), which disk
//! admission reserves before a snapshot writes.

use super::rootfs;
use crate::{RuntimeError, SandboxHandle};
use std::os::unix::fs::MetadataExt;

/// Allocated bytes of every entry under the sandbox's upper dir (files, dirs, links).
pub fn upper_bytes(handle: &SandboxHandle) -> Result<u64, RuntimeError> {
    let upper = rootfs::upper(&handle.state_dir);
    let mut total = 0u64;
    for entry in walkdir::WalkDir::new(&upper).follow_links(false) {
        let entry = match entry {
            Ok(entry) => entry,
            // A file the sandbox removed meanwhile counts nothing.
            Err(e) if e.io_error().map(|e| e.kind()) == Some(std::io::ErrorKind::NotFound) => {
                continue
            }
            Err(e) => {
                return Err(RuntimeError::Io {
                    what: "measuring a layer to capture",
                    path: upper.clone(),
                    source: e.into(),
                })
            }
        };
        if let Ok(meta) = entry.metadata() {
            total = total.saturating_add(meta.blocks().saturating_mul(512));
        }
    }
    Ok(total)
}
