//! Warm inits wired ahead of time: a spare host side (lease, chain) whose veth already
//! ends as `eth0` in a warm init's network namespace, and its `resolv.conf` staged in
//! the entry's upper dir, so a sandbox without policy rules of its own starts with its
//! network done. The spare's marker (see `spares`) covers a crash before the claim.

use super::policy::Policy;
use super::{link, resolv, spares, NetConfig};
use crate::linux::warm::Warm;
use crate::linux::LinuxRuntime;
use crate::{RuntimeError, SandboxSpec};
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// Gives warm entry `key` (its init is `pid`, its upper dir `upper`, its root host id
/// `owner`) an egress network under `policy`, and its `resolv.conf`.
pub(in crate::linux) fn wire(
    config: &NetConfig,
    key: Uuid,
    (pid, upper, owner): (i32, &Path, u32),
    policy: &Policy,
) -> Result<(), RuntimeError> {
    let lease = spares::make(config, key, policy)?;
    let (ifname, _) = super::lease_names(key, &lease);
    link::create(&ifname, pid, &lease)?;
    resolv::stage_resolv_conf(upper, &config.resolvers, owner)
}

/// Before `layers` are mounted over wired warm entry's upper dir `upper`: takes back the
/// staged `resolv.conf` where its `etc` would hide an image's `etc` link; whether it
/// did (then [`write_after_mount`] is due).
pub(in crate::linux) fn unstage_over_linked_etc(
    upper: &Path,
    layers: &[PathBuf],
) -> Result<bool, RuntimeError> {
    resolv::unstage_over_linked_etc(upper, layers)
}

/// Writes the resolver config into the mounted `root` (after [`unstage_over_linked_etc`]).
pub(in crate::linux) fn write_after_mount(
    config: &NetConfig,
    root: &Path,
    owner: u32,
) -> Result<(), RuntimeError> {
    resolv::write_resolv_conf(root, &config.resolvers, owner)
}

/// Removes what [`wire`] made (idempotent).
pub(in crate::linux) fn unwire(config: &NetConfig, key: Uuid) {
    spares::remove(config, key);
}

/// Takes a wired warm entry for sandbox `spec.id` over `layers` under `policy`, its
/// network now the sandbox's: one made for that policy, else one made with none whose
/// chain is rewritten to it (one nft transaction). `None` if there is none, or handing
/// its network over failed: then it is discarded.
pub(in crate::linux) fn take(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: &[PathBuf],
    policy: &Policy,
) -> Option<Warm> {
    let (pool, config) = (rt.warm.as_ref()?, rt.network.as_ref()?);
    let warm = pool.take(
        (spec.disk_mb, true),
        (&spec.image, spec.extra_layers.is_empty()),
        layers,
        policy,
    )?;
    let keeper = super::keeper(rt, spec.id);
    let handed = spares::hand_over(config, warm.key, spec.id, &keeper).and_then(|lease| {
        match warm.shape.policy == *policy {
            true => Ok(()),
            false => super::retarget(config, spec.id, &lease, policy),
        }
    });
    match handed {
        Ok(()) => Some(warm),
        Err(e) => {
            tracing::warn!(id = %spec.id, error = %e, "cannot take a wired warm init's network");
            let _ = super::teardown(config, spec.id);
            pool.discard(warm);
            None
        }
    }
}
