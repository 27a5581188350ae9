//! The init's move into its sandbox's cgroups, made by the init itself between its fork
//! and its exec, through `tasks` files we opened for it.
//!
//! On cgroup v1 a write of a PID to `cgroup.procs` (or of another task's PID to `tasks`)
//! takes the global `cgroup_threadgroup_rwsem` for write, which waits for an RCU grace
//! period (5-24 ms on this 2-core host). A thread that writes `0` (itself) to a v1
//! `tasks` file skips that lock (`cgroup_procs_write_start` in this host's 6.18; a kernel
//! without that branch moves it just as well, only as slowly as before): the same move
//! costs ~0.1 ms. The child of a fork is single-threaded, so moving its one thread moves
//! the process, and everything it forks later is born inside. The kernel checks write
//! permission with the opener's credentials, so the files are opened here (as root)
//! before the spawn; they are close-on-exec and closed by the init's exec.
//!
//! cgroup v2 has no per-thread move into a domain cgroup: there the caller attaches the
//! init from a thread of its own, as before.

use super::cgroup::Cgroups;
use crate::RuntimeError;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use uuid::Uuid;

/// The `tasks` files of every v1 hierarchy of one sandbox's cgroup, open for writing.
#[derive(Debug)]
pub(super) struct SelfMove {
    files: Vec<OwnedFd>,
}

impl SelfMove {
    /// Opens the `tasks` file of each hierarchy of cgroup `id` (which must exist);
    /// `None` on v2.
    pub fn open(cgroups: &Cgroups, id: Uuid) -> Result<Option<Self>, RuntimeError> {
        if let Cgroups::V2 { .. } = cgroups {
            return Ok(None);
        }
        // A test's fault: the files opened read-only, so the init's own write fails.
        let write = !crate::faults::hit("start.self_move");
        let mut files = Vec::new();
        for dir in cgroups.dirs(id) {
            let path = dir.join("tasks");
            let file = std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(&path)
                .map_err(super::io("opening a sandbox cgroup's tasks file", &path))?;
            files.push(file.into());
        }
        Ok(Some(SelfMove { files }))
    }

    /// The raw descriptors, for the child's [`move_self`].
    pub fn raw(&self) -> Vec<RawFd> {
        self.files.iter().map(|f| f.as_raw_fd()).collect()
    }
}

/// Writes `0` to each of `files`: run in the forked child before its exec, while it is
/// single-threaded. Only `write(2)` runs here (async-signal-safe, no allocation).
pub(super) fn move_self(files: &[RawFd]) -> std::io::Result<()> {
    for &fd in files {
        // SAFETY: `fd` is a descriptor the parent opened and keeps open until the spawn
        // returns (inherited by this child); the buffer is a static one-byte string.
        let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        if n != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
