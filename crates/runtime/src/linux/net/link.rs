//! The sandbox's link: a veth pair whose inner end becomes `eth0` in the sandbox's
//! network namespace, addressed from its lease (its `/etc/resolv.conf`: see `resolv`).

use super::host::Lease;
use crate::RuntimeError;
use std::os::fd::{AsFd, OwnedFd};

/// Makes the pair with its inner end as `eth0` in the namespace of `pid`, and
/// addresses both ends with a default route via the host end (netlink and ioctls, no
/// processes).
pub fn create(ifname: &str, pid: i32, lease: &Lease) -> Result<(), RuntimeError> {
    let path = format!("/proc/{pid}/ns/net");
    let ns = std::fs::File::open(&path)
        .map_err(|e| RuntimeError::Network(format!("opening {path}: {e}")))?;
    create_in(ifname, &ns.into(), lease)
}

/// [`create`] in the network namespace `ns` is open on (a sandbox's, taken while its
/// start goes on: its first process may be gone by then).
pub fn create_in(ifname: &str, ns: &OwnedFd, lease: &Lease) -> Result<(), RuntimeError> {
    let t0 = std::time::Instant::now();
    let tm =
        |phase: &str| tracing::trace!(ifname, phase, ms = t0.elapsed().as_secs_f64() * 1e3, "link");
    super::netlink::create_veth(ifname, "eth0", ns.as_fd())?;
    tm("veth made");
    super::inner::configure_host_end(ifname, lease.host())?;
    tm("host end up");
    let configured = super::inner::configure_in(ns, lease.sandbox(), lease.host());
    tm("sandbox end up");
    configured
}

/// Deletes the host end (gone already once the namespace died with the sandbox).
pub fn delete(ifname: &str) {
    match super::netlink::delete_link(ifname) {
        Err(e) if e.raw_os_error() != Some(libc::ENODEV) => {
            tracing::warn!(ifname, error = %e, "deleting a sandbox's link");
        }
        _ => {}
    }
}
