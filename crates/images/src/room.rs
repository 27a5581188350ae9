//! Room in the data dir for what an image pull, import or build writes: never the room
//! promised to admitted sandboxes or kept as the reserve.
//!
//! Measured from the data dir alone (the CLI has no server to ask): the filesystem's
//! free bytes and inodes (`statvfs` of `sandboxes/`, as the runtime's `disk_space`),
//! less the configured reserve (the server's `disk_reserve_mb`, 64 MiB by default, as
//! the engine's disk policy), less what every sandbox's disk image
//! (`sandboxes/*/layer.img`, sized to its admitted `disk_mb`, sparse) may still grow by,
//! and for inodes less the engine's inode reserve and 256 per sandbox state dir. That is
//! the engine's disk admission at an overcommit of 1.0: each admitted layer can still
//! fill up.
//!
//! Pulls, imports and builds under way at once (in any process) share that room: each
//! takes it in grants from the runtime's `room_claims`, so what one was granted and has
//! not written yet is not free for another, nor for a sandbox's disk admission.

use crate::{io, ImageError};
use sandboxd_runtime::linux::room_claims::{self, Claim, Claimed, ClaimsLock};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MIB: u64 = 1 << 20;
/// Inodes never used by images (the engine's `INODE_RESERVE`).
const INODE_RESERVE: u64 = 8192;
/// Inodes a sandbox's state dir may still need (the engine's `INODES_PER_SANDBOX`).
const INODES_PER_SANDBOX: u64 = 256;

/// How much an image may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomPolicy {
    /// MiB of the data dir's free room never used by images (the server's reserve).
    pub reserve_mb: u64,
    /// Bytes of file content one image may unpack to, across its layers (sparse files
    /// at their full size): `SANDBOXD_IMAGE_MAX_MB`, 16 GiB by default.
    pub max_image_bytes: u64,
    /// Entries (files, directories, links…) one image may hold across its layers.
    pub max_image_entries: u64,
}

impl Default for RoomPolicy {
    fn default() -> Self {
        RoomPolicy {
            reserve_mb: 64,
            max_image_bytes: 16 << 30,
            max_image_entries: 2_000_000,
        }
    }
}

impl RoomPolicy {
    /// The defaults, with `SANDBOXD_DISK_RESERVE_MB` and `SANDBOXD_IMAGE_MAX_MB` when
    /// set (the server's and the CLI's environment).
    pub fn from_env() -> Result<Self, ImageError> {
        let mut policy = RoomPolicy::default();
        let number = |name: &str| -> Result<Option<u64>, ImageError> {
            match std::env::var(name) {
                Err(_) => Ok(None),
                Ok(v) => v.trim().parse().map(Some).map_err(|e| {
                    ImageError::Unsupported(format!("{name}={v:?} is not a number of MiB: {e}"))
                }),
            }
        };
        if let Some(mb) = number("SANDBOXD_DISK_RESERVE_MB")? {
            policy.reserve_mb = mb;
        }
        if let Some(mb) = number("SANDBOXD_IMAGE_MAX_MB")? {
            policy.max_image_bytes = mb.saturating_mul(MIB);
        }
        Ok(policy)
    }
}

/// What may still be written into the data dir now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub bytes: u64,
    pub inodes: u64,
}

/// Bytes a grant takes beyond what is asked when there is room (so a writer measures
/// once per this much, not once per block).
const GRANT_BYTES: u64 = 8 * MIB;
/// Inodes a grant takes beyond what is asked when there is room.
const GRANT_INODES: u64 = 4096;

/// Measures the [`Room`] of `data_dir` under `policy`, less what the claims of other
/// writers than `own` hold (under the claims `lock`).
fn measure(
    data_dir: &Path,
    policy: &RoomPolicy,
    own: Option<&Claim>,
    lock: &ClaimsLock,
) -> Result<Room, ImageError> {
    // Read before the free space (see `room_claims`).
    let others = room_claims::outstanding(data_dir, own, lock)
        .map_err(io("reading the room claims of", data_dir))?;
    let sandboxes = data_dir.join("sandboxes");
    let at = match sandboxes.is_dir() {
        true => sandboxes.as_path(),
        false => data_dir,
    };
    let vfs = nix::sys::statvfs::statvfs(at).map_err(|e| ImageError::Io {
        what: "measuring the free space of",
        path: at.to_path_buf(),
        source: e.into(),
    })?;
    let available = vfs.blocks_available().saturating_mul(vfs.fragment_size());
    let inodes = match vfs.files() {
        0 => u64::MAX, // no inode table (btrfs, an unlimited tmpfs)
        _ => vfs.files_available(),
    };
    let (grow, active) = promised(&sandboxes)?;
    Ok(Room {
        bytes: available
            .saturating_sub(policy.reserve_mb.saturating_mul(MIB))
            .saturating_sub(grow)
            .saturating_sub(others.bytes),
        inodes: inodes
            .saturating_sub(INODE_RESERVE)
            .saturating_sub(active.saturating_mul(INODES_PER_SANDBOX))
            .saturating_sub(others.inodes),
    })
}

/// Bytes the disk images of the sandboxes under `sandboxes` may still grow by (their
/// size less their allocated blocks) and how many sandbox state dirs there are.
fn promised(sandboxes: &Path) -> Result<(u64, u64), ImageError> {
    let entries = match std::fs::read_dir(sandboxes) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(io("listing the sandboxes of", sandboxes)(e)),
    };
    let (mut grow, mut active) = (0u64, 0u64);
    for entry in entries.filter_map(Result::ok) {
        // Warm inits (`.warm-…`, `.gvwarm-…`) hold disks no sandbox was admitted with
        // yet: the engine promises a disk only to a sandbox's record (named by its id),
        // when a create claims one.
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        active += 1;
        let img = entry.path().join(sandboxd_runtime::linux::DISK_IMAGE_NAME);
        if let Ok(meta) = std::fs::symlink_metadata(&img) {
            if meta.is_file() {
                let held = meta.blocks().saturating_mul(512);
                grow = grow.saturating_add(meta.size().saturating_sub(held));
            }
        }
    }
    Ok((grow, active))
}

/// One image's (or build's) share of the data dir's room: its claim in the shared
/// accounting, regranted as it writes; released when dropped.
pub struct RoomGrant {
    data_dir: PathBuf,
    policy: RoomPolicy,
    claim: Mutex<Claim>,
}

impl RoomGrant {
    /// A claim of nothing yet in `data_dir`'s accounting.
    pub fn new(data_dir: &Path, policy: RoomPolicy) -> Result<RoomGrant, ImageError> {
        let lock = room_claims::lock(data_dir, true)
            .map_err(io("locking the room claims of", data_dir))?;
        let claim = Claim::new(data_dir, &lock).map_err(io("claiming room in", data_dir))?;
        Ok(RoomGrant {
            data_dir: data_dir.to_path_buf(),
            policy,
            claim: Mutex::new(claim),
        })
    }

    fn grant(&self, bytes: u64, inodes: u64) -> Result<(u64, u64), ImageError> {
        let lock = room_claims::lock(&self.data_dir, true)
            .map_err(io("locking the room claims of", &self.data_dir))?;
        let mut claim = self
            .claim
            .lock()
            .map_err(|_| ImageError::Malformed("a room claim was poisoned".into()))?;
        let room = measure(&self.data_dir, &self.policy, Some(&claim), &lock)?;
        if bytes > room.bytes {
            return Err(no_room(format!(
                "{} MiB more are needed and the data dir has {} MiB left beside the reserve, \
                 the room promised to sandboxes and what other pulls, imports and builds \
                 under way claimed",
                bytes.div_ceil(MIB),
                room.bytes / MIB
            )));
        }
        if inodes > room.inodes {
            return Err(no_room(format!(
                "{inodes} more inodes are needed and the data dir has {} left beside the \
                 reserve, those sandboxes may still need and what other pulls, imports \
                 and builds under way claimed",
                room.inodes
            )));
        }
        let bytes = bytes.max(GRANT_BYTES.min(room.bytes));
        let inodes = inodes.max(GRANT_INODES.min(room.inodes));
        claim
            .set(Claimed { bytes, inodes }, &lock)
            .map_err(io("claiming room in", &self.data_dir))?;
        Ok((bytes, inodes))
    }
}

impl crate::unpack::Refill for RoomGrant {
    fn refill(&self, bytes: u64, inodes: u64) -> Result<(u64, u64), String> {
        self.grant(bytes, inodes).map_err(|e| match e {
            ImageError::NoRoom(why) => why,
            e => e.to_string(),
        })
    }
}

/// The error of a write that would take room promised to others.
pub fn no_room(what: impl std::fmt::Display) -> ImageError {
    ImageError::NoRoom(what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(dir: &Path, name: &str, size: u64) {
        let d = dir.join("sandboxes").join(name);
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::File::create(d.join(sandboxd_runtime::linux::DISK_IMAGE_NAME))
            .and_then(|f| f.set_len(size))
            .expect("img");
    }

    #[test]
    fn sandboxes_disks_are_promised_and_warm_inits_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        disk(dir.path(), "5b0c8e0e-0000-4000-8000-000000000001", 3 << 30);
        disk(
            dir.path(),
            ".warm-5b0c8e0e-0000-4000-8000-000000000002",
            1 << 40,
        );
        disk(dir.path(), ".gvwarm-x", 1 << 40);
        assert_eq!(
            promised(&dir.path().join("sandboxes")).expect("promised"),
            (3 << 30, 1)
        );
    }
}
