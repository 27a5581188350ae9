//! Small files written whole (owner marks, leases): a reader finds such a file absent (or
//! its previous text) or complete, never created and not yet written.
//!
//! The text goes into an unnamed file in the target's dir (`O_TMPFILE`), which is then
//! linked in under its name: the dir shows nothing until the file is complete. A
//! replacement is linked in under a temporary name and put in the old file's place
//! ([`rename_over`]). Where the filesystem has no `O_TMPFILE`, the text goes into a
//! temporary name instead. Records whose every reader holds their writers' lock are
//! rewritten through a kept swap file instead ([`replace_through`]: no inode made or
//! freed); [`fill`] writes a file in place, for a file nobody reads until it is renamed.

use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A file written and not linked in yet (dropped: gone, or its temporary name removed).
pub(in crate::linux) struct Unlinked {
    file: File,
    /// The temporary name it has where the filesystem has no `O_TMPFILE`.
    named: Option<PathBuf>,
}

impl Unlinked {
    /// Writes `text` into a new unnamed file in `dir`.
    pub fn write(dir: &Path, text: &str) -> std::io::Result<Self> {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        let mut unlinked = match opened {
            Ok(file) => Unlinked { file, named: None },
            // No O_TMPFILE here (EISDIR: a kernel that ignores the flag).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                let path = temp_name(dir, "new");
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                Unlinked {
                    file,
                    named: Some(path),
                }
            }
            Err(e) => return Err(e),
        };
        unlinked.file.write_all(text.as_bytes())?;
        Ok(unlinked)
    }

    /// Links the file in as `path` (in the dir it was written in); fails if `path`
    /// exists, or its dir is gone.
    pub fn link(mut self, path: &Path) -> std::io::Result<()> {
        match self.named.take() {
            None => {
                let fd = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                let from = std::ffi::CString::new(fd)?;
                let to = std::ffi::CString::new(path.as_os_str().as_bytes())?;
                // SAFETY: both paths are NUL-terminated C strings that outlive the call;
                // AT_SYMLINK_FOLLOW makes linkat(2) link the file the /proc link names.
                let rc = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        from.as_ptr(),
                        libc::AT_FDCWD,
                        to.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if rc != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            }
            Some(temp) => {
                let linked = std::fs::hard_link(&temp, path);
                let _ = std::fs::remove_file(&temp);
                linked
            }
        }
    }
}

impl Drop for Unlinked {
    fn drop(&mut self) {
        if let Some(temp) = &self.named {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// Writes `text` to `path` whole; fails if `path` exists.
pub(in crate::linux) fn create(path: &Path, text: &str) -> std::io::Result<()> {
    Unlinked::write(parent(path), text)?.link(path)
}

/// Writes `text` over `path` whole: a reader finds the old text or the new one. A
/// process killed between the link and the rename leaves the temporary name (a dot
/// name ending in `.tmp`, see [`is_temp_name`]) with the new text, or, killed just
/// after an exchange (see [`rename_over`]), with the old one.
pub(in crate::linux) fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = parent(path);
    let temp = temp_name(dir, "old");
    Unlinked::write(dir, text)?.link(&temp)?;
    rename_over(&temp, path).map(drop).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// Writes `text` over `path` whole, through `spare`: a file on the same filesystem kept
/// for this (made on first use), which is filled (written at its start and cut to the
/// text's length) and exchanged with `path`; it then holds the old text, and is filled
/// again by the next replacement. No inode is made or freed: on ext4 each new one scans
/// the inodes of its dir's block group freed in the last minute or more, and warm
/// starts replace records on their way. Only for records whose readers and writers all
/// hold one lock (the host's lease dirs): a reader that opened the record before an
/// exchange and read on after it could see the next replacement fill what it holds.
/// (One spare serves all of a dir's records: such a reader could even read another
/// record's text whole.) Under the lock a reader finds the old text or the new one, and a
/// process killed while filling leaves the record as it was and `spare` cut, to be
/// filled again. A machine that loses power just after an exchange may find the record
/// with the spare's earlier text (another record's, whole) where [`replace`] would leave
/// it empty: the records this serves are under `/run`, a tmpfs after most reboots, and
/// their readers check the owner they name. Where `path` is no regular file (absent, a
/// dir in the way), `spare` cannot be filled, or the filesystem has no exchanges:
/// [`replace`], the spare untouched or left as it is.
pub(in crate::linux) fn replace_through(
    spare: &Path,
    path: &Path,
    text: &str,
) -> std::io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let is_file = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file());
    if !is_file || fill(spare, text).is_err() {
        return replace(path, text);
    }
    match renameat_with(CWD, spare, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(_) => replace(path, text),
    }
}

/// Puts `text` at the start of `path` (made if absent, never through a symlink) and cuts
/// it there. Not truncated to nothing first: ext4 starts writing out, at its close, a
/// file truncated to zero (even an empty one) and written again (`auto_da_alloc`).
pub(in crate::linux) fn fill(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all_at(text.as_bytes(), 0)?;
    file.set_len(text.len() as u64)
}

/// Renames `from` over `to` (in one dir): a reader of `to` finds its old file or the new
/// one. Where `to` exists, the two are exchanged (`renameat2(RENAME_EXCHANGE)`) and
/// `from`, now the old file, is removed: ext4 starts writing out a file renamed over
/// another before the rename returns (`auto_da_alloc`: ~0.12 ms and a disk write per
/// record on this machine, whose /run is ext4; ~0.02 ms exchanged). A process killed
/// between the two steps leaves `from` with the old text; an old file that cannot be
/// removed is left so too (logged: the new text is in place). Elsewhere (no `to`, or a
/// filesystem without exchanges) a plain rename. Which of the two it did.
///
/// What ext4's heuristic bought is kept for a killed process, not for a machine that
/// loses power just after: a record may then come back empty, which its readers take as
/// absent, the state every record under /run is in after any reboot where /run is a
/// tmpfs (the usual case), so the records are made to be lost (their owners are gone).
pub(in crate::linux) fn rename_over(from: &Path, to: &Path) -> std::io::Result<Put> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    if renameat_with(CWD, from, CWD, to, RenameFlags::EXCHANGE).is_err() {
        return std::fs::rename(from, to).map(|()| Put::Renamed);
    }
    match std::fs::remove_file(from) {
        // A dir was in the way, which a rename refuses: put it back, refused too.
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            if let Err(back) = renameat_with(CWD, from, CWD, to, RenameFlags::EXCHANGE) {
                let path = to.display();
                tracing::warn!(%path, error = %back, "putting back a dir a record was exchanged with");
            }
            Err(e)
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %from.display(), error = %e, "removing a replaced record");
            Ok(Put::Exchanged)
        }
        _ => Ok(Put::Exchanged),
    }
}

/// How [`rename_over`] put a file in place.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::linux) enum Put {
    /// Exchanged with the file it replaced, which was then removed.
    Exchanged,
    /// Renamed (nothing was there, or the filesystem has no exchanges).
    Renamed,
}

/// Whether `name` is a temporary name of this module's (a dot name ending in `.tmp`).
pub(in crate::linux) fn is_temp_name(name: &str) -> bool {
    name.starts_with(".whole-") && name.ends_with(".tmp")
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

fn temp_name(dir: &Path, what: &str) -> PathBuf {
    dir.join(format!(
        ".whole-{what}-{}.tmp",
        uuid::Uuid::new_v4().simple()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_absent_until_it_is_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("owner");
        let unlinked = Unlinked::write(dir.path(), "12 34").expect("write");
        // Written, not linked in: the dir shows nothing.
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
        unlinked.link(&path).expect("link");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "12 34");
        let again = create(&path, "56 78").expect_err("exists");
        assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn a_dropped_file_leaves_nothing_and_a_replacement_is_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Unlinked::write(dir.path(), "gone").expect("write"));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
        let path = dir.path().join("marker");
        create(&path, "1 2").expect("create");
        replace(&path, "1 2 claimable").expect("replace");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "1 2 claimable"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("marker")]);
        // The link fails cleanly once the dir is gone (a sweep took it).
        let sub = dir.path().join("entry");
        std::fs::create_dir(&sub).expect("entry dir");
        let unlinked = Unlinked::write(&sub, "3 4").expect("write");
        std::fs::remove_dir(&sub).expect("rmdir");
        let gone = unlinked.link(&sub.join("owner")).expect_err("dir gone");
        assert_eq!(gone.kind(), std::io::ErrorKind::NotFound);
    }

    /// A reader of a record being replaced over and over finds it every time, whole:
    /// never absent, never empty or cut; the replacement leaves no other name behind.
    #[test]
    fn a_record_replaced_over_and_over_is_always_there_and_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lease");
        create(&path, &"0".repeat(64)).expect("create");
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let text = std::fs::read_to_string(&path).expect("the record is there");
                    assert_eq!(text.len(), 64, "a cut record: {text:?}");
                    let first = text.as_bytes()[0];
                    assert!(text.bytes().all(|b| b == first), "a mixed record: {text:?}");
                    reads += 1;
                }
                reads
            });
            for i in 0..2000u32 {
                let digit = char::from(b'0' + (i % 10) as u8);
                let temp = temp_name(dir.path(), "old");
                Unlinked::write(dir.path(), &digit.to_string().repeat(64))
                    .and_then(|u| u.link(&temp))
                    .expect("write");
                // The test's dir is on a filesystem with exchanges (ext4, tmpfs).
                assert_eq!(rename_over(&temp, &path).expect("replace"), Put::Exchanged);
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(reader.join().expect("reader") > 0, "the reader never read");
        });
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "9".repeat(64)
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("lease")]);
        // Over nothing, a plain rename.
        let from = dir.path().join("from");
        std::fs::write(&from, "x").expect("write");
        let put = rename_over(&from, &dir.path().join("new")).expect("rename");
        assert_eq!(put, Put::Renamed);
        assert!(!from.exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("new")).expect("read"),
            "x"
        );
        // Over a dir, refused as a rename refuses it, and nothing moved.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).expect("dir");
        std::fs::write(&from, "y").expect("write");
        let refused = rename_over(&from, &blocked).expect_err("a dir in the way");
        assert_eq!(refused.raw_os_error(), Some(libc::EISDIR));
        assert!(blocked.is_dir(), "the dir was moved");
        assert_eq!(std::fs::read_to_string(&from).expect("read"), "y");
    }

    /// A record replaced through a spare is whole for a reader holding the writers' lock
    /// (each read between two replacements), ends with the last text however long the
    /// earlier ones were, and only ever has one of two inodes (the record's and the
    /// spare's): none made or freed after the first. (A reader without the lock can see
    /// a cut record: watched, the reason the lock is required.)
    #[test]
    fn a_record_replaced_through_a_spare_is_whole_and_takes_no_new_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (leases, spare) = (dir.path().join("leases"), dir.path().join("lease.swap"));
        std::fs::create_dir(&leases).expect("leases dir");
        let path = leases.join("7");
        // Absent: made as `replace` makes it (no spare made for it).
        replace_through(&spare, &path, "first").expect("made");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "first");
        assert!(!spare.exists());
        // There: the spare made, filled and exchanged (it then holds "first").
        replace_through(&spare, &path, "first").expect("replaced");
        assert_eq!(std::fs::read_to_string(&spare).expect("read"), "first");
        let inodes = [&path, &spare].map(|p| std::fs::metadata(p).expect("stat").ino());
        let done = std::sync::atomic::AtomicBool::new(false);
        let lock = std::sync::Mutex::new(());
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let held = lock.lock().expect("lock");
                    let text = std::fs::read_to_string(&path).expect("the record is there");
                    drop(held);
                    let first = text.as_bytes()[0];
                    assert!(
                        text == "first"
                            || (text.len() == usize::from(first - b'0') + 1
                                && text.bytes().all(|b| b == first)),
                        "a cut or mixed record: {text:?}"
                    );
                    reads += 1;
                }
                reads
            });
            for i in 0..2000u32 {
                // Lengths go up and down: a shorter text must not keep a longer one's tail.
                let digit = (i * 7 % 10) as u8;
                let text = char::from(b'0' + digit)
                    .to_string()
                    .repeat(usize::from(digit) + 1);
                let held = lock.lock().expect("lock");
                replace_through(&spare, &path, &text).expect("replace");
                drop(held);
                let now = std::fs::metadata(&path).expect("stat").ino();
                assert!(inodes.contains(&now), "a new inode {now} (had {inodes:?})");
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(reader.join().expect("reader") > 0, "the reader never read");
        });
        // The last text (i = 1999: digit 3) in place; the spare holds the one before.
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "3333");
        assert_eq!(std::fs::read_to_string(&spare).expect("read"), "6666666");
        let names: Vec<_> = std::fs::read_dir(&leases)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("7")]);
        // A symlink planted as the spare is not followed, nor does it stop the record's
        // rewrite (made as `replace` makes it).
        let elsewhere = dir.path().join("elsewhere");
        std::fs::remove_file(&spare).expect("rm spare");
        std::os::unix::fs::symlink(&elsewhere, &spare).expect("symlink");
        replace_through(&spare, &path, "x").expect("rewritten without the spare");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "x");
        assert!(!elsewhere.exists(), "written through a symlink");
        // A dir in the record's place is never exchanged into the spare's: refused as
        // `replace` refuses it, the dir and the spare where they were.
        std::fs::remove_file(&spare).expect("rm symlink");
        let blocked = leases.join("8");
        std::fs::create_dir(&blocked).expect("dir");
        assert!(replace_through(&spare, &blocked, "y").is_err());
        assert!(blocked.is_dir(), "the dir was moved");
        assert!(
            !spare.exists(),
            "the spare was made for a record it cannot replace"
        );
    }
}
