//! `capture_layer`: copy a sandbox's overlay upper dir (frozen, synced) into the layer
//! store, shifting ownership from the sandbox's host id range back to 0-based ids.

use super::layers::remove_tree;
use super::{rootfs, slots, LinuxRuntime};
use crate::{Cancel, Layer, RuntimeError, SandboxHandle};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

pub(super) fn capture(
    rt: &LinuxRuntime,
    handle: &SandboxHandle,
    cancel: &Cancel,
) -> Result<Layer, RuntimeError> {
    let upper = rootfs::upper(&handle.state_dir);
    if !upper.is_dir() {
        return Err(RuntimeError::Io {
            what: "capturing a layer",
            path: upper,
            source: std::io::ErrorKind::NotFound.into(),
        });
    }
    let scratch = rt.layers.scratch()?;
    let was_frozen = rt.cgroups.is_frozen(handle.id);
    if !was_frozen {
        rt.cgroups.set_frozen(handle.id, true)?;
    }
    let mut copied = sync_fs(&rootfs::rootfs(&handle.state_dir))
        .and_then(|()| copy_tree(&upper, &scratch, cancel))
        .and_then(|()| crate::faults::check("capture.copied"));
    if !was_frozen {
        let thawed = rt.cgroups.set_frozen(handle.id, false);
        copied = copied.and(thawed);
    }
    let result = copied
        .and_then(|()| shift_ids(&scratch, handle.host_id_base))
        .and_then(|()| rt.layers.commit_until(&scratch, cancel));
    if result.is_err() {
        remove_tree(&scratch);
    }
    result
}

/// Syncs the sandbox's root and copies its upper dir into `scratch` as it is on the host
/// (the caller keeps the sandbox still meanwhile).
pub(super) fn copy_upper(
    handle: &SandboxHandle,
    scratch: &Path,
    cancel: &Cancel,
) -> Result<(), RuntimeError> {
    let upper = rootfs::upper(&handle.state_dir);
    sync_fs(&rootfs::rootfs(&handle.state_dir)).and_then(|()| copy_tree(&upper, scratch, cancel))
}

fn sync_fs(dir: &Path) -> Result<(), RuntimeError> {
    let file = std::fs::File::open(dir).map_err(|source| RuntimeError::Io {
        what: "opening the root to sync",
        path: dir.to_path_buf(),
        source,
    })?;
    // SAFETY: syncfs on an open fd.
    if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
        return Err(RuntimeError::Io {
            what: "syncing the root",
            path: dir.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `cp -a` keeps modes, ownership, whiteouts (0:0 char devices), xattrs (opaque dirs)
/// and holes (it seeks past them); killed once `cancel` is set.
fn copy_tree(from: &Path, to: &Path, cancel: &Cancel) -> Result<(), RuntimeError> {
    let failed = |what, source| RuntimeError::Io {
        what,
        path: from.to_path_buf(),
        source,
    };
    let mut child = Command::new("cp")
        .arg("-a")
        .arg("--")
        .arg(from.join("."))
        .arg(to)
        .spawn()
        .map_err(|e| failed("running cp", e))?;
    loop {
        if let Some(s) = child.try_wait().map_err(|e| failed("waiting for cp", e))? {
            return match s.success() {
                true => Ok(()),
                false => Err(failed(
                    "copying the upper layer",
                    std::io::Error::other(format!("cp exited with {s}")),
                )),
            };
        }
        if let Err(stopped) = cancel.check() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed("copying the upper layer", stopped));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Maps ids in `[base, base+65536)` to `[0, 65536)`, keeping setuid/setgid bits.
pub fn shift_ids(dir: &Path, base: u32) -> Result<(), RuntimeError> {
    let shift = |id: u32| {
        if (base..base.saturating_add(slots::RANGE)).contains(&id) {
            id - base
        } else {
            id
        }
    };
    for entry in walkdir::WalkDir::new(dir).follow_links(false) {
        let entry = entry.map_err(|e| RuntimeError::Io {
            what: "walking a captured layer",
            path: dir.to_path_buf(),
            source: e.into(),
        })?;
        let path = entry.path();
        let err = |source| RuntimeError::Io {
            what: "shifting ownership",
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::symlink_metadata(path).map_err(err)?;
        std::os::unix::fs::lchown(path, Some(shift(meta.uid())), Some(shift(meta.gid())))
            .map_err(err)?;
        if !meta.file_type().is_symlink() && meta.mode() & 0o6000 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
                .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_ids_maps_the_range_back_and_keeps_setuid() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown needs root; the integration tests cover capture end to end
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let base = slots::FIRST_BASE;
        let file = dir.path().join("suid");
        std::fs::write(&file, "x").expect("write");
        std::os::unix::fs::chown(&file, Some(base + 5), Some(base + 7)).expect("chown");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "y").expect("write");
        std::os::unix::fs::chown(&outside, Some(1000), Some(1000)).expect("chown");
        shift_ids(dir.path(), base).expect("shift");
        let meta = std::fs::metadata(&file).expect("meta");
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (5, 7, 0o4755)
        );
        let meta = std::fs::metadata(&outside).expect("meta");
        assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
    }
}
