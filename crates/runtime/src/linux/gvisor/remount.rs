//! A gVisor sandbox on disk after a host restart: the restart took its root's overlay
//! mount, its disk's mount and loop device, and its cgroup (all kernel state), while its
//! memory image, writable layer image and state dir stayed. Its root is mounted again
//! from the same layers (its `layers` file) over its own writable layer, and its cgroup
//! made again with the limits it had when it went to disk (recorded then), so that the
//! next operation restores it; what cannot be put back makes it unrestorable, said once
//! at start-up ([`lost`]) instead of at every wake.

use super::GvisorRuntime;
use crate::linux::cgroup::Limits;
use crate::linux::{disk, io, rootfs, sys};
use crate::{RuntimeError, SandboxHandle};
use std::path::{Path, PathBuf};

/// The file, in the state dir, of the cgroup limits recorded at the checkpoint.
const LIMITS_FILE: &str = "cgroup-limits";

/// Records the sandbox's cgroup limits (before it goes to disk).
pub(super) fn save_limits(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    let Some(l) = rt.linux.cgroups.limits(handle.id) else {
        return Ok(()); // no limits to keep (a lost one is said by `lost`)
    };
    let path = handle.state_dir.join(LIMITS_FILE);
    let text = format!("{} {} {}\n", l.vcpu, l.memory_mb, l.pids_max);
    std::fs::write(&path, text).map_err(io("recording the sandbox's limits", &path))
}

fn saved_limits(state_dir: &Path) -> Option<Limits> {
    let text = std::fs::read_to_string(state_dir.join(LIMITS_FILE)).ok()?;
    let mut n = text.split_whitespace().map(|w| w.parse::<u32>().ok());
    Some(Limits {
        vcpu: n.next()??,
        memory_mb: n.next()??,
        pids_max: n.next()??,
    })
}

/// The layer dirs the sandbox's root is made of (top first), from its `layers` file.
fn layers(rt: &GvisorRuntime, state_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let path = state_dir.join("layers");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("its layer list {} is unreadable: {e}", path.display()))?;
    let mut dirs = Vec::new();
    for digest in text.lines().filter(|l| !l.trim().is_empty()) {
        let dir = rt
            .linux
            .layers
            .path(digest.trim())
            .map_err(|e| format!("its layer {digest} is gone: {e}"))?;
        if !dir.is_dir() {
            return Err(format!("its layer {digest} is gone"));
        }
        dirs.push(dir);
    }
    Ok(dirs)
}

/// Whether the sandbox's root is mounted (it is, until a host restart).
fn root_mounted(state_dir: &Path) -> bool {
    sys::is_mount_point(&rootfs::rootfs(state_dir))
}

/// Why a sandbox on disk whose root a host restart unmounted cannot be mounted again
/// (and so never restored), or `None` (mounted, or it can be).
pub(super) fn lost(rt: &GvisorRuntime, handle: &SandboxHandle) -> Option<String> {
    let dir = &handle.state_dir;
    if !root_mounted(dir) {
        if let Err(why) = layers(rt, dir) {
            return Some(format!("its root is unmounted (host restart) and {why}"));
        }
        if dir.join("layer.loop").exists() && !disk::has_image(dir) {
            return Some("its root is unmounted (host restart) and its disk image is gone".into());
        }
    }
    if !cgroup_made(rt, handle) && saved_limits(dir).is_none() {
        return Some("its cgroup is gone (host restart) and its limits were not recorded".into());
    }
    None
}

fn cgroup_made(rt: &GvisorRuntime, handle: &SandboxHandle) -> bool {
    rt.linux.cgroups.dirs(handle.id).iter().all(|d| d.is_dir())
}

/// Mounts the root of a sandbox on disk again, and makes its cgroup, when a host restart
/// took them; does nothing when they are there.
pub(super) fn ensure(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    let dir = &handle.state_dir;
    if !cgroup_made(rt, handle) {
        let limits = saved_limits(dir).ok_or_else(|| {
            RuntimeError::Unsupported("its cgroup is gone and its limits were not recorded".into())
        })?;
        tracing::info!(sandbox = %handle.id, "making the cgroup of a sandbox on disk again");
        rt.linux.cgroups.create(handle.id, limits)?;
    }
    if root_mounted(dir) {
        return Ok(());
    }
    tracing::info!(sandbox = %handle.id, "mounting the root of a sandbox on disk again (host restart)");
    let layers = layers(rt, dir).map_err(RuntimeError::Unsupported)?;
    if disk::has_image(dir) {
        disk::remount(dir)?;
    }
    let mounted = super::start::mount_root(dir, &layers);
    if mounted.is_err() && disk::has_image(dir) {
        let _ = sys::detach(&disk::layer_dir(dir));
    }
    mounted
}
