//! Mounting anything, and new namespaces that would grant the privileges to do it.

use super::cstr;
use crate::report::Attempt;

pub fn attempts() -> Vec<Attempt> {
    let mut out = vec![
        mount("mount tmpfs on /mnt", "none", "/mnt", "tmpfs", 0),
        mount(
            "bind-mount / on /mnt",
            "/",
            "/mnt",
            "",
            libc::MS_BIND | libc::MS_REC,
        ),
        mount(
            "remount /usr read-write",
            "",
            "/usr",
            "",
            libc::MS_REMOUNT | libc::MS_BIND,
        ),
        mount("mount proc on /mnt", "proc", "/mnt", "proc", 0),
    ];
    let usr = cstr("/usr");
    // SAFETY: valid C string.
    let ret = unsafe { libc::umount2(usr.as_ptr(), libc::MNT_DETACH) };
    out.push(Attempt::from_ret(
        "umount2 /usr (uncover what lies below)",
        ret.into(),
    ));

    let tmpfs = cstr("tmpfs");
    // SAFETY: fsopen(name, flags); on success the fd is closed.
    let fd = unsafe { libc::syscall(libc::SYS_fsopen, tmpfs.as_ptr(), 0) };
    close_if_open(fd);
    out.push(Attempt::from_ret("fsopen(\"tmpfs\")", fd));

    let root = cstr("/");
    // SAFETY: open_tree(dirfd, path, flags); OPEN_TREE_CLONE = 1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, root.as_ptr(), 1u32) };
    close_if_open(fd);
    out.push(Attempt::from_ret("open_tree(\"/\", OPEN_TREE_CLONE)", fd));

    out.push(in_child("unshare(CLONE_NEWUSER)", || {
        // SAFETY: unshare in a throwaway child.
        unsafe { libc::unshare(libc::CLONE_NEWUSER) }
    }));
    out.push(in_child(
        "unshare(CLONE_NEWUSER | CLONE_NEWNS) then mount tmpfs",
        || {
            // SAFETY: as above; the mount only happens if unshare succeeded.
            unsafe {
                if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                    return -1;
                }
                let (n, m, t) = (cstr("none"), cstr("/mnt"), cstr("tmpfs"));
                libc::mount(n.as_ptr(), m.as_ptr(), t.as_ptr(), 0, std::ptr::null())
            }
        },
    ));
    out.push(in_child("unshare(CLONE_NEWNS)", || {
        // SAFETY: as above.
        unsafe { libc::unshare(libc::CLONE_NEWNS) }
    }));
    out.push(clone_newuser());
    out
}

fn mount(what: &str, src: &str, target: &str, fstype: &str, flags: libc::c_ulong) -> Attempt {
    let (s, t, f) = (cstr(src), cstr(target), cstr(fstype));
    let fstype = if fstype.is_empty() {
        std::ptr::null()
    } else {
        f.as_ptr()
    };
    // SAFETY: valid C strings, no data argument.
    let ret = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), fstype, flags, std::ptr::null()) };
    if ret == 0 {
        // SAFETY: undo what must not have worked.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
    Attempt::from_ret(what, ret.into())
}

fn close_if_open(fd: i64) {
    if fd >= 0 {
        // SAFETY: our own fd.
        unsafe { libc::close(fd as i32) };
    }
}

/// Runs `op` in a forked child (so a namespace change never affects later attempts);
/// the child's exit status carries the errno.
fn in_child(what: &str, op: impl FnOnce() -> i32) -> Attempt {
    // SAFETY: fork; the child only runs `op` and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = if op() == 0 {
            0
        } else {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(255)
        };
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(code.clamp(0, 255)) };
    }
    wait_errno(what, pid)
}

/// Waits for `pid` and judges its exit status (0 = success, else an errno).
fn wait_errno(what: &str, pid: i32) -> Attempt {
    if pid < 0 {
        return Attempt::refused(what, "fork failed");
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Attempt::escaped(what, "succeeded"),
        Some(errno) => Attempt::refused(
            what,
            crate::report::errno_name(std::io::Error::from_raw_os_error(errno)),
        ),
        None => Attempt::refused(what, format!("child died (status {status})")),
    }
}

/// The raw clone syscall with CLONE_NEWUSER (what unshare-less tools use).
fn clone_newuser() -> Attempt {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: a fork-like clone (no new stack); the child exits at once.
    let ret = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if ret == 0 {
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(0) };
    }
    if ret > 0 {
        return wait_errno("clone(CLONE_NEWUSER)", ret as i32);
    }
    Attempt::from_ret("clone(CLONE_NEWUSER)", ret)
}
