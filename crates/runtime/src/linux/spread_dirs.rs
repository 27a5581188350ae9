//! Spreads the sandboxes' state dirs over the filesystem's block groups: the dir that
//! holds them is marked the top of directory hierarchies (`FS_TOPDIR_FL`, `chattr +T`),
//! so ext2/3/4 place each new dir in it as they place a new home dir (the Orlov
//! allocator: of the groups with more free inodes and blocks than average, the one
//! holding the fewest dirs) instead of beside its parent, and the files made in that
//! dir follow it.
//!
//! Why: every sandbox makes and later removes a dozen files and dirs (its entry dir, its
//! marks, mount points, log, socket). Packed into one group, an ext4 without a journal
//! (as on these hosts) makes every new inode walk past each inode of that group freed in
//! the last 30 s (180 s while its inode-table block is dirty; `recently_deleted`: one
//! inode-table read per inode skipped): a mkdir took ~90 µs there under a run every few
//! hundred ms, against ~20 µs after 35 s idle and 4 µs on tmpfs, and a one-shot
//! `sandboxd run` was ~1.1 ms longer than with the flag (README, forty-third session).
//! With a journal the walk does not happen and the spreading costs nothing. Filesystems
//! without the flag refuse or ignore it: the dir is used as it is.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// `FS_TOPDIR_FL` of `<linux/fs.h>`: "top of directory hierarchies".
const FS_TOPDIR_FL: libc::c_int = 0x0002_0000;

/// Marks `dir` the top of directory hierarchies unless it is marked already; a
/// filesystem that has no such flag (tmpfs, xfs, btrfs…) or refuses it leaves `dir` as
/// it is (logged at debug).
pub fn mark_top(dir: &Path) {
    if let Err(e) = try_mark_top(dir) {
        tracing::debug!(dir = %dir.display(), error = %e, "the sandboxes' dirs are not spread");
    }
}

fn try_mark_top(dir: &Path) -> std::io::Result<()> {
    let opened = File::open(dir)?;
    let flags = flags_of(&opened)?;
    if flags & FS_TOPDIR_FL != 0 {
        return Ok(());
    }
    let mut flags = flags | FS_TOPDIR_FL;
    // SAFETY: FS_IOC_SETFLAGS reads an int through the pointer, which lives for the call.
    match unsafe { libc::ioctl(opened.as_raw_fd(), libc::FS_IOC_SETFLAGS, &mut flags) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The inode flags of the open `file` (`lsattr`'s).
fn flags_of(file: &File) -> std::io::Result<libc::c_int> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int through the pointer, which lives for the call.
    match unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } {
        0 => Ok(flags),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Whether `dir` is marked the top of directory hierarchies (false where the filesystem
/// has no such flag).
#[cfg(test)]
fn is_top(dir: &Path) -> bool {
    File::open(dir)
        .and_then(|f| flags_of(&f))
        .is_ok_and(|flags| flags & FS_TOPDIR_FL != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filesystem `path` is on is ext2/3/4 (`statfs`'s magic).
    fn on_ext4(path: &Path) -> bool {
        nix::sys::statfs::statfs(path)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC)
    }

    #[test]
    fn a_dir_on_ext4_is_marked_once_and_keeps_its_other_flags() {
        let dir = tempfile::tempdir().expect("temp dir");
        if !on_ext4(dir.path()) {
            eprintln!("skipped: {} is not on ext4", dir.path().display());
            return;
        }
        let before = flags_of(&File::open(dir.path()).expect("open")).expect("flags");
        assert!(!is_top(dir.path()));
        mark_top(dir.path());
        assert!(is_top(dir.path()), "not marked");
        mark_top(dir.path());
        let after = flags_of(&File::open(dir.path()).expect("open")).expect("flags");
        assert_eq!(after, before | FS_TOPDIR_FL, "other flags changed");
    }

    #[test]
    fn a_dir_where_the_flag_does_not_exist_is_left_as_it_is() {
        // /dev/shm is a tmpfs: no inode flags at all.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        mark_top(dir.path());
        assert!(!is_top(dir.path()));
        assert!(dir.path().is_dir());
    }

    #[test]
    fn a_missing_dir_is_only_logged() {
        let dir = tempfile::tempdir().expect("temp dir");
        mark_top(&dir.path().join("gone"));
        assert!(!dir.path().join("gone").exists());
    }
}
