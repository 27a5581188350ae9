//! Spreads the sandboxes' state dirs over the filesystem's block groups: the dir that
//! holds them is marked the top of directory hierarchies (`FS_TOPDIR_FL`, `chattr +T`),
//! so ext2/3/4 place each new dir in it as they place a new home dir (the Orlov
//! allocator: of the groups with more free inodes and blocks than average, the one
//! holding the fewest dirs) instead of beside its parent, and the files made in that
//! dir follow it.
//!
//! Why: every sandbox makes and later removes a dozen files and dirs (its dir and the
//! marks, mount points, log and socket in it). Packed into one group, an ext4 without a
//! journal (as on these hosts) makes every new inode walk past each inode of that group
//! freed in the last 60 s (360 s while its inode-table block is dirty;
//! `recently_deleted`: one inode-table read per inode skipped): a mkdir took ~90 µs
//! there under a run every few hundred ms, against ~20 µs after 35 s idle and 4 µs on
//! tmpfs, and a one-shot `sandboxd run` was ~1.1 ms longer than with the flag (README,
//! forty-third session). Usually spread, not always: on a small filesystem with few
//! eligible groups the same one comes back. Each sandbox's mkdir reads every flex
//! group's counters to choose (a few µs); with a journal the walk does not happen and
//! that is all the flag costs. Filesystems without the flag refuse or ignore it: the
//! dir is used as it is.

use rustix::fs::{ioctl_getflags, ioctl_setflags, open, IFlags, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Marks `dir` the top of directory hierarchies unless it is marked already. A
/// filesystem that has no such flag (tmpfs, xfs, btrfs…) or a symlink in `dir`'s place
/// (an operator's, never followed here) leaves it as it is, logged at debug; any other
/// failure is logged as a warning (the dir is used all the same).
pub fn mark_top(dir: &Path) {
    match try_mark_top(dir) {
        Ok(()) => {}
        Err(e) if [Errno::NOTTY, Errno::OPNOTSUPP, Errno::INVAL, Errno::LOOP].contains(&e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "the sandboxes' dirs are not spread: the filesystem has no such flag");
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "the sandboxes' dirs are not spread over the filesystem");
        }
    }
}

fn try_mark_top(dir: &Path) -> rustix::io::Result<()> {
    let opened = open_dir(dir)?;
    let flags = ioctl_getflags(&opened)?;
    match flags.contains(IFlags::TOPDIR) {
        true => Ok(()),
        false => ioctl_setflags(&opened, flags | IFlags::TOPDIR),
    }
}

/// `dir` itself, never through a symlink.
fn open_dir(dir: &Path) -> rustix::io::Result<OwnedFd> {
    let how = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    open(dir, how, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `dir` is marked the top of directory hierarchies (false where the
    /// filesystem has no such flag).
    fn is_top(dir: &Path) -> bool {
        open_dir(dir)
            .and_then(ioctl_getflags)
            .is_ok_and(|flags| flags.contains(IFlags::TOPDIR))
    }

    /// The filesystem `path` is on is ext2/3/4 (`statfs`'s magic).
    fn on_ext4(path: &Path) -> bool {
        nix::sys::statfs::statfs(path)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC)
    }

    /// On ext4 the dir is marked and keeps its other flags, also marked again; elsewhere
    /// (the temp dir on another filesystem) the call leaves it usable and unmarked.
    #[test]
    fn a_dir_is_marked_where_the_flag_exists_and_keeps_its_other_flags() {
        let dir = tempfile::tempdir().expect("temp dir");
        let before = open_dir(dir.path()).and_then(ioctl_getflags);
        mark_top(dir.path());
        mark_top(dir.path());
        assert!(dir.path().is_dir());
        if !on_ext4(dir.path()) {
            assert!(!is_top(dir.path()) || before.is_ok_and(|f| f.contains(IFlags::TOPDIR)));
            return;
        }
        let before = before.expect("ext4 has inode flags");
        assert!(
            !before.contains(IFlags::TOPDIR),
            "a new dir starts unmarked"
        );
        let after = open_dir(dir.path())
            .and_then(ioctl_getflags)
            .expect("flags");
        assert_eq!(
            after,
            before | IFlags::TOPDIR,
            "not marked, or other flags changed"
        );
    }

    #[test]
    fn tmpfs_refuses_the_flag_and_the_dir_stays_as_it_is() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        mark_top(dir.path());
        assert!(!is_top(dir.path()));
        assert!(dir.path().is_dir());
    }

    #[test]
    fn a_missing_dir_or_a_symlink_is_only_logged() {
        let dir = tempfile::tempdir().expect("temp dir");
        mark_top(&dir.path().join("gone"));
        assert!(!dir.path().join("gone").exists());
        let target = dir.path().join("target");
        std::fs::create_dir(&target).expect("target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        mark_top(&link);
        assert!(!is_top(&target), "marked through a symlink");
    }
}
