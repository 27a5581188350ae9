//! Directories only root may enter: the data dir and every dir under it that holds files
//! a sandbox or an image made (layers, disks, sandbox state, trash, memory images).
//!
//! A tenant is root in its sandbox, so a layer it snapshots may hold a setuid-root
//! program, kept as it is for the sandbox's sake (a restored sandbox sees its setuid bit).
//! On the host such a file must be out of reach of every other user: made `0700` and
//! owned by the server's user, a dir cannot be entered, so nothing below it can be run.

use super::io;
use crate::RuntimeError;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Makes `dir` (its parents as usual) `0700` and owned by this process's user, tightening
/// an existing one that is looser (logged, with its old mode and owner).
pub fn ensure(dir: &Path) -> Result<(), RuntimeError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("creating a directory", parent))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("creating a private directory", dir)(e)),
    }
    tighten(dir)
}

/// Makes an existing `dir` `0700` and owned by this process's user if it is not.
pub fn tighten(dir: &Path) -> Result<(), RuntimeError> {
    let meta = std::fs::metadata(dir).map_err(io("reading a private directory", dir))?;
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    let (mode, owner) = (meta.mode() & 0o7777, meta.uid());
    if owner != uid.as_raw() {
        std::os::unix::fs::chown(dir, Some(uid.as_raw()), Some(gid.as_raw()))
            .map_err(io("taking ownership of a private directory", dir))?;
    }
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io("making a directory private", dir))?;
    }
    if owner != uid.as_raw() || mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            old_mode = format!("{mode:o}"),
            old_owner = owner,
            "tightened a directory that holds sandbox-made files to 0700, owned by the server's user"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_a_new_dir_private_and_tightens_a_loose_one() {
        let top = tempfile::tempdir().expect("tempdir");
        let fresh = top.path().join("a/data");
        ensure(&fresh).expect("ensure");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!(mode(&fresh), 0o700);
        let loose = top.path().join("loose");
        std::fs::create_dir(&loose).expect("mkdir");
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        ensure(&loose).expect("ensure");
        assert_eq!(mode(&loose), 0o700);
    }
}
