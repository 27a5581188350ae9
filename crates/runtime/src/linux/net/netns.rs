//! A sandbox's network made before the sandbox exists, in a network namespace that a
//! file keeps alive (a bind mount of its nsfs inode): the gVisor tier's. `runsc create`
//! is handed the file, and the sentry's own network stack takes over the link, address
//! and route it finds there.

use super::{link, names, policy, prepare, resolv};
use crate::linux::{io, LinuxRuntime};
use crate::{NetworkSpec, RuntimeError};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::path::Path;
use std::sync::mpsc;
use uuid::Uuid;

/// Makes sandbox `id`'s host side (lease, firewall entries) under `network`'s policy, a
/// new network namespace kept at `netns` with the link's inner end as its addressed
/// `eth0` and default route, and `etc/resolv.conf` under `root`. What it made is
/// removed by [`super::detach`] and by unmounting `netns`, also after a failure.
pub(in crate::linux) fn wire_new(
    rt: &LinuxRuntime,
    id: Uuid,
    network: &NetworkSpec,
    netns: &Path,
    root: &Path,
) -> Result<(), RuntimeError> {
    let config = rt.network.as_ref().ok_or_else(|| {
        RuntimeError::Network("egress networking is not configured on this server".into())
    })?;
    let policy = policy::resolve(network, &config.resolvers);
    // The rules are in place before the link exists.
    let lease = prepare(config, id, &policy, Some(&super::keeper(rt, id)))?;
    let (ifname, _) = names(id);
    holding_new_netns(netns, |tid| link::create(&ifname, tid, &lease))?;
    crate::faults::check("network.connect")?;
    resolv::write_resolv_conf(root, &config.resolvers, 0)
}

/// Puts sandbox `id`'s address and default route back on `eth0` in the namespace kept
/// at `netns` (runsc took them off when the sandbox's network stack took them over),
/// for a restore into that same namespace: runsc copies what it finds there again.
pub(in crate::linux) fn readdress(
    rt: &LinuxRuntime,
    id: Uuid,
    netns: &Path,
) -> Result<(), RuntimeError> {
    let config = rt.network.as_ref().ok_or_else(|| {
        RuntimeError::Network("egress networking is not configured on this server".into())
    })?;
    let lease = super::host::HostLock::take(&config.state_dir)?
        .lease(id)
        .ok_or_else(|| RuntimeError::Network(format!("sandbox {id} holds no network lease")))?;
    super::inner::configure_at(netns, lease.sandbox(), lease.host())
}

/// Why sandbox `id`'s network, kept at `netns` while it is on disk, can no longer be
/// restored into (its lease or its namespace's mount is gone: a host reboot empties
/// the lease dir, a tmpfs, and drops the mount), or `None` while both are there.
pub(in crate::linux) fn lost(rt: &LinuxRuntime, id: Uuid, netns: &Path) -> Option<String> {
    /// `statfs(2)`'s type of a namespace file (linux/magic.h).
    const NSFS_MAGIC: u64 = 0x6e73_6673;
    // Only what is surely gone counts: a server started without egress, or a lock it
    // cannot take, is an error of the restore itself (a later server may do it).
    let config = rt.network.as_ref()?;
    let lock = super::host::HostLock::take(&config.state_dir).ok()?;
    if lock.lease(id).is_none() {
        return Some(format!(
            "sandbox {id}'s network lease is gone (a host restart?)"
        ));
    }
    match rustix::fs::statfs(netns) {
        Ok(fs) if fs.f_type as u64 != NSFS_MAGIC => Some(format!(
            "sandbox {id}'s network namespace is gone (a host restart?)"
        )),
        _ => None,
    }
}

/// Makes a network namespace kept at `path`, and runs `f` with the id of a thread that
/// is in it meanwhile (what the link code takes to name a namespace: `/proc/<tid>` and
/// rtnetlink's `IFLA_NET_NS_PID` accept a thread's id).
fn holding_new_netns<T>(
    path: &Path,
    f: impl FnOnce(i32) -> Result<T, RuntimeError>,
) -> Result<T, RuntimeError> {
    std::fs::File::create(path).map_err(io("creating the netns mount point", path))?;
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        s.spawn(move || {
            let made = unshare(CloneFlags::CLONE_NEWNET)
                .and_then(|()| {
                    mount(
                        Some("/proc/thread-self/ns/net"),
                        path,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    )
                })
                .map(|()| nix::unistd::gettid().as_raw());
            let held = made.is_ok();
            let _ = ready_tx.send(made);
            if held {
                // Stay in the namespace until `f` is done with it.
                let _ = done_rx.recv();
            }
        });
        let made = ready_rx
            .recv()
            .map_err(|_| RuntimeError::Network("the netns thread died".into()))
            .and_then(|made| {
                made.map_err(|source| RuntimeError::Sys {
                    what: "making the sandbox's network namespace",
                    source,
                })
            });
        let result = made.and_then(f);
        drop(done_tx);
        result
    })
}
