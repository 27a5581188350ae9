//! Room for writable layers: the data dir's free space and the blocks the layer images
//! under `sandboxes/` (sandboxes' and warm inits') already occupy, less what image
//! pulls, imports and builds under way have claimed and not written yet (`room_claims`).

use super::io;
use crate::{DiskSpace, RuntimeError};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Measures [`DiskSpace`] for the sandboxes of `data_dir`.
pub fn measure(data_dir: &Path) -> Result<DiskSpace, RuntimeError> {
    let sandboxes = data_dir.join("sandboxes");
    let at = if sandboxes.is_dir() {
        sandboxes.as_path()
    } else {
        data_dir
    };
    // Read before the free space: a claim shrinks only once what it stood for is
    // written, so what it held is counted once at least.
    let claimed =
        super::room_claims::total(data_dir).map_err(io("reading the room claims of", data_dir))?;
    let vfs = nix::sys::statvfs::statvfs(at).map_err(|source| RuntimeError::Sys {
        what: "measuring the data dir's free space",
        source,
    })?;
    let available = vfs
        .blocks_available()
        .saturating_mul(vfs.fragment_size())
        .saturating_sub(claimed.bytes);
    let root_only = vfs.blocks_free().saturating_sub(vfs.blocks_available());
    let total = vfs
        .blocks()
        .saturating_sub(root_only)
        .saturating_mul(vfs.fragment_size());
    Ok(DiskSpace {
        available,
        layers: layers_occupy(&sandboxes)?,
        total,
        inodes_available: inodes_available(vfs.files(), vfs.files_available())
            .saturating_sub(claimed.inodes),
    })
}

/// Free inodes from `statvfs`'s total and available counts: a filesystem that reports
/// no total (btrfs, an unlimited tmpfs) allocates inodes as it goes and has no limit to
/// run out of, so it is unlimited, never "0 free".
fn inodes_available(total: u64, available: u64) -> u64 {
    if total == 0 {
        u64::MAX
    } else {
        available
    }
}

/// Allocated bytes of every `*/layer.img` under `sandboxes` (a state dir that goes away
/// meanwhile counts nothing).
fn layers_occupy(sandboxes: &Path) -> Result<u64, RuntimeError> {
    let entries = match std::fs::read_dir(sandboxes) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io("listing the sandboxes dir", sandboxes)(e)),
    };
    let mut total = 0u64;
    for entry in entries.filter_map(Result::ok) {
        let img = entry.path().join(super::disk::IMAGE_NAME);
        if let Ok(meta) = std::fs::symlink_metadata(&img) {
            if meta.is_file() {
                total = total.saturating_add(meta.blocks().saturating_mul(512));
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filesystem_reporting_no_inode_total_has_no_inode_limit() {
        assert_eq!(inodes_available(0, 0), u64::MAX);
        assert_eq!(inodes_available(1000, 0), 0);
        assert_eq!(inodes_available(1000, 10), 10);
    }

    #[test]
    fn room_claimed_by_image_writers_is_not_available() {
        use super::super::room_claims::{lock, Claim, Claimed};
        let dir = tempfile::tempdir().expect("tempdir");
        let before = measure(dir.path()).expect("measure");
        let ex = lock(dir.path(), true).expect("lock");
        let mut claim = Claim::new(dir.path(), &ex).expect("claim");
        claim
            .set(
                Claimed {
                    bytes: 1 << 40,
                    inodes: 1 << 40,
                },
                &ex,
            )
            .expect("set");
        drop(ex);
        let during = measure(dir.path()).expect("measure");
        assert_eq!(during.available, before.available.saturating_sub(1 << 40));
        assert_eq!(
            during.inodes_available,
            before.inodes_available.saturating_sub(1 << 40)
        );
        drop(claim);
        let after = measure(dir.path()).expect("measure");
        assert!(after.available >= during.available, "{after:?}");
    }

    #[test]
    fn counts_allocated_blocks_of_layer_images_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("sandboxes").join("a");
        std::fs::create_dir_all(&a).expect("mkdir");
        let img = std::fs::File::create(a.join(super::super::disk::IMAGE_NAME)).expect("img");
        img.set_len(1 << 30).expect("sparse length");
        std::os::unix::fs::FileExt::write_at(&img, &[1u8; 1 << 20], 0).expect("write");
        img.sync_all().expect("sync");
        std::fs::write(a.join("other"), vec![0u8; 1 << 20]).expect("other file");
        let space = measure(dir.path()).expect("measure");
        assert!(
            (1 << 20..4 << 20).contains(&space.layers),
            "the 1 MiB written, not the 1 GiB length nor other files: {}",
            space.layers
        );
        assert!(space.available > 0);
        assert!(space.total >= space.available, "{space:?}");
        assert!(space.inodes_available > 0, "{space:?}");
    }
}
