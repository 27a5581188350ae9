//! Warm inits wired ahead of time: a spare host side (lease, chain) whose veth already
//! ends as `eth0` in a warm init's network namespace, and its `resolv.conf` staged in
//! the entry's upper dir, so a sandbox without policy rules of its own starts with its
//! network done. The spare's marker (see `spares`) covers a crash before the claim.

use super::{link, spares, NetConfig};
use crate::linux::warm::Warm;
use crate::linux::LinuxRuntime;
use crate::{RuntimeError, SandboxSpec};
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// Gives warm entry `key` (its init is `pid`, its upper dir `upper`, its root host id
/// `owner`) an egress network, and its `resolv.conf`.
pub(in crate::linux) fn wire(
    config: &NetConfig,
    key: Uuid,
    pid: i32,
    upper: &Path,
    owner: u32,
) -> Result<(), RuntimeError> {
    let lease = spares::make(config, key)?;
    let (ifname, _) = super::lease_names(key, &lease);
    link::create(&ifname, pid, &lease)?;
    link::stage_resolv_conf(upper, &config.resolvers, owner)
}

/// Removes what [`wire`] made (idempotent).
pub(in crate::linux) fn unwire(config: &NetConfig, key: Uuid) {
    spares::remove(config, key);
}

/// Takes a wired warm entry for sandbox `spec.id` over `layers`, its network now the sandbox's
/// (`None` if there is none, or handing its network over failed: then it is discarded).
pub(in crate::linux) fn take(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: &[PathBuf],
) -> Option<Warm> {
    let (pool, config) = (rt.warm.as_ref()?, rt.network.as_ref()?);
    let warm = pool.take(spec.disk_mb, true, &spec.image, layers)?;
    match spares::hand_over(config, warm.key, spec.id) {
        Ok(_) => Some(warm),
        Err(e) => {
            tracing::warn!(id = %spec.id, error = %e, "cannot take a wired warm init's network");
            pool.discard(warm);
            None
        }
    }
}
