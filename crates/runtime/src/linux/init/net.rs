//! Brings up the loopback interface of the sandbox's fresh network namespace.

use super::InitError;
use std::os::fd::AsRawFd;

/// Sets `lo` up and running (the namespace has no other interface).
pub fn loopback_up() -> Result<(), InitError> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0");
    // Binding fails while lo is down; any AF_INET datagram socket serves for the ioctl.
    let fd = match sock {
        Ok(s) => return set_up(s.as_raw_fd()),
        // SAFETY: plain socket(2); the fd is closed below.
        Err(_) => unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) },
    };
    if fd < 0 {
        return Err(InitError::Sys {
            what: "socket for lo".into(),
            source: nix::Error::last(),
        });
    }
    let result = set_up(fd);
    // SAFETY: fd was opened above and is not used after this.
    unsafe { libc::close(fd) };
    result
}

fn set_up(fd: i32) -> Result<(), InitError> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: valid socket and ifreq for these ioctls.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(InitError::Sys {
            what: "SIOCGIFFLAGS lo".into(),
            source: nix::Error::last(),
        });
    }
    // SAFETY: the union member written by SIOCGIFFLAGS.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(InitError::Sys {
            what: "SIOCSIFFLAGS lo".into(),
            source: nix::Error::last(),
        });
    }
    Ok(())
}
