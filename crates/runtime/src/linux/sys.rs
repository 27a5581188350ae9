//! Thin wrappers over the syscalls nix lacks (idmapped mounts) and small /proc helpers.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_IDMAP: u64 = 0x10_0000;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cpath(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_long) -> std::io::Result<libc::c_long> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Mounts `source` read-only at `target`, with its ids shifted through the user
/// namespace `userns` (an idmapped mount: host uid N appears as N inside, i.e. files
/// owned by host root are owned by the sandbox's root).
pub fn idmapped_bind(
    source: &Path,
    target: &Path,
    userns: &OwnedFd,
    recursive: bool,
) -> std::io::Result<()> {
    let src = cpath(source)?;
    let dst = cpath(target)?;
    let empty = c"";
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: valid NUL-terminated path; the returned fd is owned below.
    let fd =
        check(unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, src.as_ptr(), flags) })?;
    // SAFETY: open_tree returned a fresh fd we now own.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let at_flags = libc::AT_EMPTY_PATH as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: attr lives across the call and its size is passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            at_flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    // SAFETY: valid fds and paths.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            dst.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// Lazily detaches whatever is mounted at `path`; "nothing mounted" is not an error.
pub fn detach(path: &Path) -> std::io::Result<()> {
    // Never through a symlink: a path in a sandbox's root (its `/usr`) is the image's
    // or the sandbox's to make a link to any host mount point.
    let flags = nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW;
    match nix::mount::umount2(path, flags) {
        Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// An exclusive `flock` on `path` (made if missing), held while the returned file is
/// open: how host-wide state shared by every sandboxd on the host is guarded.
pub fn lock_exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    // SAFETY: flock on an fd we own; blocks until the lock is ours.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Whether another filesystem is mounted at `path` (its device differs from its
/// parent's); false when it does not exist.
pub fn is_mount_point(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = path.parent().unwrap_or(path);
    match (std::fs::metadata(path), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// Process state letter and start time (field 22, in clock ticks) of `pid`.
pub fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ticks = fields.nth(18)?.parse().ok()?;
    Some((state, ticks))
}

/// Whether `pid` is the live (not zombie) process that started at `ticks`.
pub fn is_same_live_process(pid: i32, ticks: u64) -> bool {
    pid > 0
        && matches!(proc_stat(pid), Some((state, t)) if t == ticks && state != 'Z' && state != 'X')
}

/// Runs `f` on a short-lived thread of ours that first joins the `kind` namespace of
/// process `pid` (`/proc/<pid>/ns/<name>`): setns moves only the calling thread, and
/// the thread ends right after, so nothing else of ours ever runs in that namespace.
/// Failures of its own are reported through `wrap`.
pub fn on_thread_in_namespace<T: Send>(
    pid: i32,
    name: &str,
    kind: nix::sched::CloneFlags,
    wrap: fn(String) -> crate::RuntimeError,
    f: impl FnOnce() -> Result<T, crate::RuntimeError> + Send,
) -> Result<T, crate::RuntimeError> {
    let path = format!("/proc/{pid}/ns/{name}");
    let ns = std::fs::File::open(&path).map_err(|e| wrap(format!("opening {path}: {e}")))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&ns, kind).map_err(|e| wrap(format!("joining {path}: {e}")))?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(wrap(format!("the thread in {path} panicked"))))
    })
}

/// Runs `f` on a thread of its own whose working directory is `dir` (the thread's
/// filesystem context is unshared, so the process's stays), for calls that must see
/// paths relative to `dir`: an overlay mounted so names only its own layout, not the
/// host's.
pub fn in_dir<T: Send>(
    dir: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)?;
            nix::unistd::chdir(dir)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the thread in a sandbox dir panicked",
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_dir_sees_relative_paths_there_and_leaves_our_cwd() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("here"), "x").expect("write");
        let before = std::env::current_dir().expect("cwd");
        let read = in_dir(dir.path(), || std::fs::read_to_string("here")).expect("read");
        assert_eq!(read, "x");
        assert_eq!(std::env::current_dir().expect("cwd"), before);
    }

    #[test]
    fn proc_stat_reads_own_process() {
        let (state, ticks) = proc_stat(std::process::id() as i32).expect("own stat");
        assert!(state != 'Z', "own state {state}");
        assert!(is_same_live_process(std::process::id() as i32, ticks));
        assert!(!is_same_live_process(std::process::id() as i32, ticks + 1));
    }
}
