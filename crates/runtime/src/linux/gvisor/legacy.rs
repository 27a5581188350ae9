//! Sandboxes of the old agent-dir layout (started by a sandboxd before the agent's
//! socket dir moved onto the sandbox's disk, see [`super::agent_dir`]), made safe when
//! a server adopts them, without ending them.
//!
//! In that layout the sandbox's `/.sandboxd/run` is the host dir `<state>/agent` on the
//! data dir, bound read-write under runsc's shared file access, and the host reached the
//! agent by the name `<state>/agent/agent.sock` there: the sandbox could put a symlink
//! in its place (the host's connect followed it into another sandbox) and fill the data
//! dir through that dir and through its output file `<state>/agent.log` (runsc's
//! stdout, which its PID 1's `/proc/1/fd/1` reaches). A running runsc keeps that dir by
//! its inode, so nothing can be mounted over it; instead, at adoption ([`secure`]):
//!
//! - the sandbox's dir is renamed to `<state>/agent.sandbox` (the gofer keeps it by its
//!   inode, the sandbox sees no change) and `<state>/agent` is made again as a host-only
//!   dir holding a hard link of the agent's socket (`linkat` without following, checked
//!   to be a socket on the host's name): the handle's unchanged `agent_socket` now names
//!   a name only the host changes, and reaches the agent's listener by its inode;
//! - the sandbox's dir, everything in it, every file of it its processes hold open
//!   (deleted ones too) and its output file are made immutable (`FS_IMMUTABLE_FL`): no
//!   write, no new name, no growth. The agent needs none of them once its socket is
//!   bound (its one other use, a pause's verdict file, is refused to this layout).
//!
//! A destroy clears those flags first ([`release`]). When the writes cannot be stopped
//! (a filesystem without inode flags, more than [`MAX_ENTRIES`] entries) the sandbox is
//! frozen instead, its files kept; when its socket is not in its dir (the sandbox
//! renamed or replaced it before the upgrade) its agent is not reached at all. Either
//! way it can be snapshotted and deleted.

use super::GvisorRuntime;
use crate::{RuntimeError, SandboxHandle};
use rustix::fs::{self, AtFlags, FileType, IFlags, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The failpoint under which a start makes the old layout (tests of adoption only).
pub(super) const FAULT: &str = "start.gvisor.legacy_layout";
/// The socket's name in the dirs.
const SOCKET_NAME: &str = "agent.sock";
/// At most this many entries of the sandbox's dir are made immutable; more fails.
const MAX_ENTRIES: usize = 100_000;

/// Whether a start is to make the old layout (a test asked for it).
pub(super) fn wanted() -> bool {
    crate::faults::hit(FAULT)
}

/// The old layout's socket dir (host-only once secured).
pub(super) fn socket_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("agent")
}

/// The old layout's handle `agent_socket`.
pub(super) fn socket(state_dir: &Path) -> PathBuf {
    socket_dir(state_dir).join(SOCKET_NAME)
}

/// The old layout's output file, on the data dir.
pub(super) fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join("agent.log")
}

/// Where [`secure`] moves the sandbox's own dir.
fn moved_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("agent.sandbox")
}

/// Whether `handle` is a gVisor sandbox of the old layout.
pub(super) fn is_legacy(handle: &SandboxHandle) -> bool {
    handle.isolation == crate::Isolation::Gvisor && handle.agent_socket == socket(&handle.state_dir)
}

/// Makes a running sandbox of the old layout safe (see the module doc); idempotent.
/// When its writes cannot be stopped the sandbox is frozen; when its socket cannot be
/// linked its agent is not reached at all (calls fail); either is logged.
pub(super) fn secure(rt: &GvisorRuntime, handle: &SandboxHandle) {
    if let Err(e) = stop_writes(rt, handle) {
        tracing::error!(sandbox = %handle.id, error = %e, "a gVisor sandbox of an earlier sandboxd's agent-dir layout cannot be kept from writing the data dir; frozen (snapshot and delete it)");
        if let Err(e) = rt.linux.cgroups.set_frozen(handle.id, true) {
            tracing::error!(sandbox = %handle.id, error = %e, "freezing it failed too");
        }
    } else if let Err(e) = link_socket(&handle.state_dir) {
        tracing::error!(sandbox = %handle.id, error = %e, "the agent of a gVisor sandbox of an earlier sandboxd's agent-dir layout cannot be reached (snapshot and delete it)");
    }
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(Errno) -> RuntimeError {
    let path = path.to_path_buf();
    move |e: Errno| RuntimeError::Io {
        what,
        path,
        source: e.into(),
    }
}

/// Moves the sandbox's dir away from the name the host connects by, makes that name a
/// host-only dir, and makes what the sandbox can write there (and its output) immutable.
fn stop_writes(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    let state = &handle.state_dir;
    let (old, moved) = (socket_dir(state), moved_dir(state));
    // The state dir and these names are the host's: the sandbox reaches only inside
    // the dir it was given.
    if fs::statat(fs::CWD, &moved, AtFlags::SYMLINK_NOFOLLOW).is_err() {
        fs::rename(&old, &moved).map_err(io_err("moving the sandbox's agent dir", &old))?;
    }
    match fs::mkdir(&old, Mode::RWXU) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io_err("making the host's agent dir", &old)(e)),
    }
    let sandbox = open_dir(&moved).map_err(io_err("opening the sandbox's agent dir", &moved))?;
    let mut budget = MAX_ENTRIES;
    set_tree(&sandbox, true, &mut budget)
        .map_err(io_err("making the agent dir immutable", &moved))?;
    if let Ok(log) = fs::open(
        log_path(state),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        set_file(&log, true).map_err(io_err("making the agent log immutable", &log_path(state)))?;
    }
    held_files(rt, handle)
}

/// Hard-links the agent's socket (never following a name of the sandbox's) into the
/// host-only dir, by the name the handle connects to.
fn link_socket(state: &Path) -> Result<(), RuntimeError> {
    let (old, moved) = (socket_dir(state), moved_dir(state));
    let host = open_dir(&old).map_err(io_err("opening the host's agent dir", &old))?;
    let sandbox = open_dir(&moved).map_err(io_err("opening the sandbox's agent dir", &moved))?;
    if is_socket(&host) {
        return Ok(());
    }
    let _ = fs::unlinkat(&host, SOCKET_NAME, AtFlags::empty());
    // No AT_SYMLINK_FOLLOW: a symlink is linked as one, and refused below. The socket
    // itself carries no flag, so it links out of the immutable dir.
    let linked = fs::linkat(&sandbox, SOCKET_NAME, &host, SOCKET_NAME, AtFlags::empty());
    if linked.is_ok() && is_socket(&host) {
        return Ok(());
    }
    let _ = fs::unlinkat(&host, SOCKET_NAME, AtFlags::empty());
    Err(RuntimeError::AgentStart(
        "the sandbox's agent socket is not in its dir (renamed or replaced)".into(),
    ))
}

/// Makes immutable every deleted regular file of the state dir's filesystem the
/// sandbox's processes hold open (those still named are the walk's): the sandbox may
/// have opened and removed one in its dir before the upgrade. Told by the inode (the
/// gofer's paths are those of its own root), reached through `/proc/<pid>/fd`.
fn held_files(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(&handle.state_dir)
        .map_err(|e| RuntimeError::Io {
            what: "reading the sandbox state dir",
            path: handle.state_dir.clone(),
            source: e,
        })?
        .dev();
    for pid in rt.linux.cgroups.procs(handle.id) {
        let fds = PathBuf::from(format!("/proc/{pid}/fd"));
        for entry in std::fs::read_dir(&fds).into_iter().flatten().flatten() {
            match std::fs::metadata(entry.path()) {
                Ok(m) if m.is_file() && m.dev() == dev && m.nlink() == 0 => {}
                _ => continue,
            }
            let Ok(fd) = fs::open(
                entry.path(),
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            set_file(&fd, true).map_err(|e| RuntimeError::Io {
                what: "making a file the sandbox holds immutable",
                path: entry.path(),
                source: e.into(),
            })?;
        }
    }
    Ok(())
}

/// Clears what [`secure`] set, so that a destroy can remove the state dir. Best effort.
pub(super) fn release(state_dir: &Path) {
    if let Ok(dir) = open_dir(&moved_dir(state_dir)) {
        let mut budget = usize::MAX;
        let _ = set_tree(&dir, false, &mut budget);
    }
    if let Ok(log) = fs::open(
        log_path(state_dir),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = set_file(&log, false);
    }
}

fn open_dir(dir: &Path) -> Result<OwnedFd, Errno> {
    fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn is_socket(host: &OwnedFd) -> bool {
    matches!(
        fs::statat(host, SOCKET_NAME, AtFlags::SYMLINK_NOFOLLOW),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Socket
    )
}

/// Sets (or clears) the immutable flag of `fd`'s inode when it is a regular file or a
/// dir (other kinds hold no data).
fn set_file(fd: &impl AsFd, on: bool) -> Result<(), Errno> {
    let kind = FileType::from_raw_mode(fs::fstat(fd)?.st_mode);
    if !matches!(kind, FileType::RegularFile | FileType::Directory) {
        return Ok(());
    }
    let flags = fs::ioctl_getflags(fd)?;
    let wanted = match on {
        true => flags | IFlags::IMMUTABLE,
        false => flags - IFlags::IMMUTABLE,
    };
    if wanted != flags {
        fs::ioctl_setflags(fd, wanted)?;
    }
    Ok(())
}

/// [`set_file`] on the dir `dir` and everything under it, top down: a dir is made
/// immutable before it is listed, so no name is added to it (or moved out of it)
/// behind the walk. Never follows a symlink.
fn set_tree(dir: &OwnedFd, on: bool, budget: &mut usize) -> Result<(), Errno> {
    if on {
        set_file(dir, true)?;
    } else {
        // Cleared first: a name under it may be removed next.
        set_file(dir, false)?;
    }
    let mut names = Vec::new();
    for entry in fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_owned();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        *budget = budget.checked_sub(1).ok_or(Errno::NOSPC)?;
        names.push(name);
    }
    for name in names {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match fs::openat(dir, &name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // A symlink, a socket, a gone name: no data to hold.
            Err(Errno::LOOP | Errno::NXIO | Errno::NOENT) => continue,
            Err(e) => return Err(e),
        };
        match FileType::from_raw_mode(fs::fstat(&fd)?.st_mode) {
            FileType::Directory => set_tree(&fd, on, budget)?,
            _ => set_file(&fd, on)?,
        }
    }
    Ok(())
}
