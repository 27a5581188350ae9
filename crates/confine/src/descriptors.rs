//! Descriptors above 2 that a process holds without having asked for them (inherited
//! from whoever started the server, or its own without close-on-exec): marked
//! close-on-exec so that nothing it starts, a sandbox's init or a command, gets them.

use std::io;

/// Marks every descriptor from `first` up close-on-exec. Only syscalls, no allocation:
/// fit for a child between fork (or vfork) and exec.
pub fn close_on_exec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range(2) with integer arguments only changes descriptor flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if !matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
        return Err(err);
    }
    // Kernels before 5.11: one fcntl per possible descriptor below the limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into our struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = limit.rlim_cur.min(1 << 20) as i32;
    for fd in first as i32..end {
        // SAFETY: F_SETFD on a descriptor that may not exist (EBADF is fine).
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn inherited_descriptors_become_close_on_exec() {
        let file = std::fs::File::open("/").expect("open /");
        // SAFETY: dup onto a free descriptor without O_CLOEXEC, as an inherited one is.
        let fd = unsafe { libc::dup(file.as_raw_fd()) };
        assert!(fd > 2);
        // SAFETY: F_GETFD on our own descriptor.
        let flags = || unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags() & libc::FD_CLOEXEC, 0);
        close_on_exec_from(3).expect("close_range");
        assert_eq!(flags() & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        // SAFETY: closing the descriptor dup'ed above.
        unsafe { libc::close(fd) };
    }
}
