//! Configures both ends of a sandbox's link with plain ioctls, no `nsenter`/`ip`
//! processes on the start path: the sandbox's `eth0` (address, up, default route) from a
//! short-lived host thread that joins the sandbox's network namespace, and the host end
//! from the caller's, each with IPv6 off.

use crate::RuntimeError;
use nix::sched::CloneFlags;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Gives `eth0` in the network namespace `ns` is open on the address `addr/30`, brings
/// it up and routes everything via `gateway`.
pub fn configure_in(ns: &OwnedFd, addr: Ipv4Addr, gateway: Ipv4Addr) -> Result<(), RuntimeError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(ns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| sys("joining the sandbox's network namespace", e))?;
            ipv6_off("eth0", "a sandbox's eth0");
            let sock = inet_socket()?;
            address_and_up(&sock, "eth0", addr)?;
            add_default_route(&sock, gateway)
        })
        .join()
        .unwrap_or_else(|_| Err(RuntimeError::Network("the netns thread panicked".into())))
    })
}

/// Gives `eth0` in the network namespace kept at `netns` (a bind-mounted nsfs file)
/// the address `addr/30`, brings it up and routes everything via `gateway`, again: a
/// gVisor sandbox's runsc takes the address off the link when its network stack takes
/// it over, so a restore into the same namespace finds none unless it is put back.
/// A default route already there is kept.
pub fn configure_at(
    netns: &std::path::Path,
    addr: Ipv4Addr,
    gateway: Ipv4Addr,
) -> Result<(), RuntimeError> {
    let ns = std::fs::File::open(netns)
        .map_err(|e| RuntimeError::Network(format!("opening {}: {e}", netns.display())))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| sys("joining the sandbox's network namespace", e))?;
            let sock = inet_socket()?;
            address_and_up(&sock, "eth0", addr)?;
            match default_route(&sock, gateway) {
                Ok(()) | Err(nix::Error::EEXIST) => Ok(()),
                Err(e) => Err(sys("adding the default route", e)),
            }
        })
        .join()
        .unwrap_or_else(|_| Err(RuntimeError::Network("the netns thread panicked".into())))
    })
}

/// Turns IPv6 off on interface `name` of the calling thread's network namespace (net
/// sysctls are those of the caller's namespace), before it comes up. The host drops
/// every IPv6 packet a sandbox sends anyway; with it on, `eth0` sent a dozen neighbour
/// discovery and multicast listener packets of its own as it came up. Off, it sends
/// nothing until a process in the sandbox does, so the host end's counters tell whether
/// the sandbox's address was ever used (see `conntrack::link_received_nothing`). `lo` keeps
/// `::1`. For the host end, see [`configure_host_end`]. A kernel without IPv6 has
/// nothing to turn off; a write refused is logged and the start goes on. `whose`: the
/// interface, as the log names it.
fn ipv6_off(name: &str, whose: &str) {
    let path = format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6");
    match std::fs::write(&path, "1") {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        // A read-only /proc/sys (systemd's ProtectKernelTunables, a container, an LSM)
        // costs only this: for `eth0`, the teardown's shortcut (the link then carries
        // the neighbour discovery packets and its flows are looked up as any used
        // link's); for the host end, its link-local address and packets.
        Err(e) => tracing::warn!(path, interface = whose, error = %e, "cannot turn IPv6 off"),
    }
}

/// Gives interface `name` of our own namespace (the host end) `addr/30` and brings it
/// up, IPv6 off first: the sandbox has none (its `eth0`'s is off, and the host drops
/// what IPv6 a sandbox sends), so on the host end it would only be a link-local address
/// and route per sandbox, and duplicate address detection, router solicitations and
/// multicast reports sent into the sandbox over its first seconds (their CPU: ~25 µs
/// more to bring up a veth whose peer is up, measured; the host end comes up first,
/// so that work ran in the kernel's link-watch worker once `eth0` came up).
pub fn configure_host_end(name: &str, addr: Ipv4Addr) -> Result<(), RuntimeError> {
    ipv6_off(name, "a sandbox's host end");
    address_and_up(&inet_socket()?, name, addr)
}

fn address_and_up(sock: &OwnedFd, name: &str, addr: Ipv4Addr) -> Result<(), RuntimeError> {
    set_addr(sock, name, libc::SIOCSIFADDR, addr, "setting an address")?;
    let mask = Ipv4Addr::new(255, 255, 255, 252);
    set_addr(sock, name, libc::SIOCSIFNETMASK, mask, "setting a netmask")?;
    set_up(sock, name)
}

fn sys(what: &str, e: nix::Error) -> RuntimeError {
    RuntimeError::Network(format!("{what}: {e}"))
}

fn last(what: &str) -> RuntimeError {
    sys(what, nix::Error::last())
}

fn inet_socket() -> Result<OwnedFd, RuntimeError> {
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last("opening a socket in the sandbox's netns"));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(addr).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; this is how the ioctls take it.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// An ifreq naming `name` (at most IFNAMSIZ-1 bytes; callers' names fit).
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let len = name.len().min(req.ifr_name.len() - 1);
    for (dst, src) in req.ifr_name.iter_mut().zip(&name.as_bytes()[..len]) {
        *dst = *src as libc::c_char;
    }
    req
}

fn set_addr(
    sock: &OwnedFd,
    name: &str,
    request: libc::Ioctl,
    addr: Ipv4Addr,
    what: &str,
) -> Result<(), RuntimeError> {
    let mut req = ifreq(name);
    req.ifr_ifru.ifru_addr = sockaddr(addr);
    // SAFETY: `req` is a valid ifreq for this request and outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), request, &mut req) } < 0 {
        return Err(last(what));
    }
    Ok(())
}

fn set_up(sock: &OwnedFd, name: &str) -> Result<(), RuntimeError> {
    let mut req = ifreq(name);
    // SAFETY: valid ifreq for SIOCGIFFLAGS/SIOCSIFFLAGS; the union's flags member is used.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(last("reading an interface's flags"));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) < 0 {
            return Err(last("bringing an interface up"));
        }
    }
    Ok(())
}

fn add_default_route(sock: &OwnedFd, gateway: Ipv4Addr) -> Result<(), RuntimeError> {
    default_route(sock, gateway).map_err(|e| sys("adding the default route", e))
}

fn default_route(sock: &OwnedFd, gateway: Ipv4Addr) -> nix::Result<()> {
    // SAFETY: rtentry is plain old data; all-zero is a valid value.
    let mut route: libc::rtentry = unsafe { std::mem::zeroed() };
    route.rt_dst = sockaddr(Ipv4Addr::UNSPECIFIED);
    route.rt_genmask = sockaddr(Ipv4Addr::UNSPECIFIED);
    route.rt_gateway = sockaddr(gateway);
    route.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    // SAFETY: `route` is a valid rtentry that outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCADDRT, &mut route) } < 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}
