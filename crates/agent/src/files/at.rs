//! File operations relative to a directory's descriptor (`openat`, `fstatat`,
//! `renameat`, `unlinkat`): names, not paths, so no path length limit applies beyond
//! the final path's own.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    match ret {
        -1 => Err(io::Error::last_os_error()),
        n => Ok(n),
    }
}

/// The file type bits (`S_IFREG`, `S_IFDIR`…) of `name` in `dir`, not following a
/// symlink; `None` when there is no such name.
pub fn kind(dir: &File, name: &OsStr) -> io::Result<Option<libc::mode_t>> {
    let name = c_name(name)?;
    // SAFETY: a zeroed `stat` is a valid out-buffer for fstatat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor, `name` a NUL-terminated string and `st` a
    // writable `stat` that outlives the call.
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match check(ret) {
        Ok(_) => Ok(Some(st.st_mode & libc::S_IFMT)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates `name` in `dir` (it must not exist; mode 0600, never through a symlink).
pub fn create(dir: &File, name: &str) -> io::Result<File> {
    let name = c_name(OsStr::new(name))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string.
    let fd = check(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o600) })?;
    // SAFETY: `fd` was just opened by us and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Renames `from` to `to`, both in `dir` (replacing `to` atomically).
pub fn rename(dir: &File, from: &str, to: &OsStr) -> io::Result<()> {
    let (from, to) = (c_name(OsStr::new(from))?, c_name(to)?);
    let fd = dir.as_raw_fd();
    // SAFETY: `fd` is an open descriptor; both names are NUL-terminated strings.
    check(unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) }).map(drop)
}

/// Removes `name` from `dir`, ignoring failure (cleanup of a temp file).
pub fn remove(dir: &File, name: &str) {
    if let Ok(name) = c_name(OsStr::new(name)) {
        // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string.
        unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
    }
}
