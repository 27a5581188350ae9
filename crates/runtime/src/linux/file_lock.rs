//! An open file held under a `flock` until dropped. Dropping unlocks (`LOCK_UN`, so a
//! loop device still holding the file does not keep the lock) and never panics: an
//! unlock that fails is left to the close, which releases the lock anyway. nix's
//! `Flock`, used before, panics when its unlock fails.

use rustix::fs::{flock, FlockOperation};
use std::fs::File;
use std::io;

/// How to lock: shared or exclusive, waiting for it or not (`Err` of `WouldBlock`).
#[derive(Debug, Clone, Copy)]
pub enum How {
    Shared,
    Exclusive,
    SharedNow,
    ExclusiveNow,
}

/// `file`, locked.
#[derive(Debug)]
pub struct Locked(File);

impl Locked {
    /// Locks `file` as `how` says; gives the file back with the error.
    pub fn lock(file: File, how: How) -> Result<Locked, (File, io::Error)> {
        let op = match how {
            How::Shared => FlockOperation::LockShared,
            How::Exclusive => FlockOperation::LockExclusive,
            How::SharedNow => FlockOperation::NonBlockingLockShared,
            How::ExclusiveNow => FlockOperation::NonBlockingLockExclusive,
        };
        loop {
            match flock(&file, op) {
                Ok(()) => return Ok(Locked(file)),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err((file, e.into())),
            }
        }
    }
}

impl Locked {
    /// Unlocks and gives the file back (to lock it again another way). On an error the
    /// file is closed, which releases the lock.
    pub fn unlock(self) -> io::Result<File> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped (ManuallyDrop) nor used after this read, so
        // the file is moved out exactly once.
        let file = unsafe { std::ptr::read(&this.0) };
        flock(&file, FlockOperation::Unlock)?;
        Ok(file)
    }
}

/// Runs `read` holding the exclusive lock `dir/lock` that the writers of a host state
/// dir (`/run/sandboxd/ids`, `/run/sandboxd/net`) take: for reading their records from
/// outside the runtime (tests, tools). Those records are rewritten in place of a spare
/// file (see `whole_file::replace_through`), whole only for a reader under the lock.
/// `None` when the lock cannot be taken (no such dir).
pub fn with_dir_lock<T>(dir: &std::path::Path, read: impl FnOnce() -> T) -> Option<T> {
    let _held = super::sys::lock_exclusive(&dir.join("lock")).ok()?;
    Some(read())
}

impl std::ops::Deref for Locked {
    type Target = File;
    fn deref(&self) -> &File {
        &self.0
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut File {
        &mut self.0
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = flock(&self.0, FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> File {
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .expect("open")
    }

    /// Each open is its own lock holder: an exclusive lock keeps others out until it is
    /// dropped, shared ones share, and a descriptor still open elsewhere (a loop device
    /// holding the file) does not keep a dropped lock.
    #[test]
    fn locks_exclude_share_and_go_when_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let held = Locked::lock(open(&path), How::ExclusiveNow).expect("free");
        let dup = held.try_clone().expect("dup");
        let (_, e) = Locked::lock(open(&path), How::SharedNow).expect_err("held");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        let a = Locked::lock(open(&path), How::SharedNow).expect("free again, dup or not");
        let b = Locked::lock(open(&path), How::Shared).expect("shared");
        assert!(Locked::lock(open(&path), How::ExclusiveNow).is_err());
        drop((a, b, dup));
        let shared = Locked::lock(open(&path), How::Shared).expect("free");
        let file = shared.unlock().expect("unlocked");
        let _other = Locked::lock(open(&path), How::ExclusiveNow).expect("free after the unlock");
        let (_, e) = Locked::lock(file, How::SharedNow).expect_err("held by the other");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
