//! The sandbox root, prepared by the backend in the host mount namespace:
//! idmapped read-only layers under an overlayfs, plus the host /usr for `default`.
//!
//! Layout of a state dir: `lower/<n>` (idmapped layers, top first), `layer/{upper,work}`
//! (on `layer.img` when the disk is limited), `rootfs/` (the overlay), `agent.sock`,
//! `init.log`, `handle.json` (filled in `.handle.json.next` first: `handle_file`).

use super::{disk, io, sys};
use crate::RuntimeError;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

fn mkdir(path: &Path) -> Result<(), RuntimeError> {
    std::fs::create_dir_all(path).map_err(io("creating a sandbox directory", path))
}

pub fn rootfs(state_dir: &Path) -> PathBuf {
    state_dir.join("rootfs")
}

/// The overlay's upper dir: on the sandbox's disk under `layer/` (sandboxes started
/// before disk limits keep theirs at `upper/`).
pub fn upper(state_dir: &Path) -> PathBuf {
    let old = state_dir.join("upper");
    match old.is_dir() {
        true => old,
        false => disk::layer_dir(state_dir).join("upper"),
    }
}

fn work(state_dir: &Path) -> PathBuf {
    upper(state_dir).with_file_name("work")
}

/// Makes the directories of the root (mount points, upper dir owned by the sandbox's
/// root `host_base`), the upper and work dirs on a `disk_mb` MiB disk of their own
/// unless it is 0; needs no user namespace yet, so it overlaps the init's exec.
pub fn prepare_dirs(
    state_dir: &Path,
    layer_count: usize,
    host_base: u32,
    disk: Option<(&Path, u32)>,
) -> Result<(), RuntimeError> {
    for n in 0..layer_count {
        mkdir(&lower(state_dir, n))?;
    }
    if let Some((data_dir, disk_mb)) = disk.filter(|(_, mb)| *mb > 0) {
        disk::mount_limited(data_dir, state_dir, disk_mb)?;
    }
    let upper = disk::layer_dir(state_dir).join("upper");
    for dir in [&upper, &work(state_dir), &rootfs(state_dir)] {
        mkdir(dir)?;
    }
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(host_base),
        nix::unistd::Gid::from_raw(host_base),
    );
    nix::unistd::chown(&upper, Some(uid), Some(gid)).map_err(|source| RuntimeError::Sys {
        what: "chowning the upper dir",
        source,
    })
}

fn lower(state_dir: &Path, n: usize) -> PathBuf {
    state_dir.join("lower").join(n.to_string())
}

/// Mounts the root over the dirs of [`prepare_dirs`]: `layers` (top first) idmapped
/// through `userns`, an overlay with the writable upper dir, and with `host_usr` the
/// host's /usr read-only on its /usr.
pub fn mount_root(
    state_dir: &Path,
    layers: &[PathBuf],
    userns: &OwnedFd,
    host_usr: bool,
) -> Result<(), RuntimeError> {
    let mut lowers = Vec::with_capacity(layers.len());
    for (n, layer) in layers.iter().enumerate() {
        let target = lower(state_dir, n);
        sys::idmapped_bind(layer, &target, userns, false)
            .map_err(io("idmapping a layer", layer))?;
        lowers.push(relative(state_dir, &target));
    }
    let (upper, work, root) = (upper(state_dir), work(state_dir), rootfs(state_dir));
    // Named relative to the state dir (mounted from there): the sandbox sees these
    // options in its mountinfo, and they must not tell it the host's data dir or ids.
    let (upper, work) = (relative(state_dir, &upper), relative(state_dir, &work));
    let mounted = sys::in_dir(state_dir, || {
        Ok(super::overlay::mount_overlay(&root, &lowers, &upper, &work))
    })
    .map_err(|e| RuntimeError::Sys {
        what: "mounting the overlay root",
        source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    })?;
    mounted?;
    if host_usr {
        sys::idmapped_bind(Path::new("/usr"), &root.join("usr"), userns, true)
            .map_err(io("binding the host /usr", &root))?;
    }
    Ok(())
}

/// `path` relative to `state_dir` (where it lies).
fn relative(state_dir: &Path, path: &Path) -> String {
    path.strip_prefix(state_dir)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The file a sandbox's own network namespace is bound on (the gVisor tier's).
pub const NETNS_FILE: &str = "netns";

/// Detaches every mount `mount_root` may have made, and the disk (idempotent, best
/// effort per mount).
pub fn unmount_root(state_dir: &Path) -> Result<(), RuntimeError> {
    let root = rootfs(state_dir);
    let mut targets = vec![root.join("usr"), root.clone()];
    if let Ok(entries) = std::fs::read_dir(state_dir.join("lower")) {
        targets.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
    }
    targets.push(disk::layer_dir(state_dir));
    // A gVisor sandbox's network namespace, kept by a bind mount (see `net::netns`).
    targets.push(state_dir.join(NETNS_FILE));
    for target in targets {
        if target.symlink_metadata().is_ok() {
            sys::detach(&target).map_err(io("unmounting", &target))?;
        }
    }
    Ok(())
}

/// Whether anything is mounted at or below `dir` in our mount namespace.
pub fn has_mounts_under(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let prefix = dir.display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mnt| mnt == prefix || mnt.starts_with(&format!("{prefix}/")))
}
