//! Directories only root may enter: the data dir and every dir under it that holds files
//! a sandbox or an image made (layers, disks, sandbox state, trash, memory images).
//!
//! A tenant is root in its sandbox, so a layer it snapshots may hold a setuid-root
//! program, kept as it is for the sandbox's sake (a restored sandbox sees its setuid bit).
//! On the host such a file must be out of reach of every other user: made `0700` and
//! owned by the server's user, a dir cannot be entered, so nothing below it can be run.
//! An existing dir is tightened only when the server's user owns it (see [`tighten`]);
//! another user's is refused. So is a dir whose chain from `/` another user could rename
//! or redirect ([`super::secure_chain`]): moving a 0700 dir aside and putting one's own
//! in its place needs only the parent's write permission, not the dir's.

use super::io;
use crate::RuntimeError;
use rustix::fs::{Mode, OFlags};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Makes `dir` (its parents as usual) `0700` and owned by this process's user, tightening
/// an existing one of this user's that is looser (see [`tighten`]). Refused, before
/// anything is made, when the chain from `/` to `dir` is not root's (or this user's) alone
/// ([`super::secure_chain::check`]); checked again once made (a step made by another
/// user in between is refused too).
pub fn ensure(dir: &Path) -> Result<(), RuntimeError> {
    super::secure_chain::check(dir)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("creating a directory", parent))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("creating a private directory", dir)(e)),
    }
    tighten(dir)?;
    match super::secure_chain::check(dir)? {
        super::secure_chain::Reach::Whole => Ok(()),
        super::secure_chain::Reach::Partial => Err(io("checking a private directory", dir)(
            std::io::Error::other("it went away while it was made"),
        )),
    }
}

/// Makes an existing `dir` of this process's user `0700` if it is looser (logged, with
/// its old mode).
///
/// Never through another user's symlink: a symlink is followed only when this process's
/// user owns it (an operator's data dir placed elsewhere), so a user who could write
/// where a private dir belongs cannot point root's `chmod` at a dir of root's. A dir
/// another user owns (a mistaken `--data-dir $HOME`, a user's dir run with sudo) is
/// refused, neither taken over nor changed: that user could reach (or swap) what
/// sandboxes and images make below it, setuid programs included.
pub fn tighten(dir: &Path) -> Result<(), RuntimeError> {
    let uid = nix::unistd::geteuid().as_raw();
    let link = std::fs::symlink_metadata(dir).map_err(io("reading a private directory", dir))?;
    if link.file_type().is_symlink() && link.uid() != uid {
        return Err(io("opening a private directory", dir)(
            std::io::Error::other(format!(
                "it is a symlink owned by uid {}, not by the server's user: not followed",
                link.uid()
            )),
        ));
    }
    let resolved = match link.file_type().is_symlink() {
        true => std::fs::canonicalize(dir).map_err(io("resolving a private directory", dir))?,
        false => dir.to_path_buf(),
    };
    // Opened without following a symlink (a swap after the look above is refused), then
    // changed through the descriptor.
    let fd = rustix::fs::open(
        &resolved,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("opening a private directory", &resolved)(e.into()))?;
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| io("reading a private directory", &resolved)(e.into()))?;
    let (mode, owner) = (st.st_mode & 0o7777, st.st_uid);
    if owner != uid {
        return Err(io("opening a private directory", &resolved)(
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "it is owned by uid {owner}, not by the server's user: refused (that user \
                     could reach or swap what sandboxes and images make below it); use a \
                     directory of the server's user"
                ),
            ),
        ));
    }
    if mode & 0o077 != 0 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))
            .map_err(|e| io("making a directory private", &resolved)(e.into()))?;
        tracing::warn!(
            dir = %resolved.display(),
            old_mode = format!("{mode:o}"),
            "tightened a directory that holds sandbox-made files to 0700"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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

    /// A dir another user owns (a mistaken `--data-dir $HOME`, a user's dir run with
    /// sudo) is refused, neither taken over nor changed, and a symlink another user
    /// planted where a private dir belongs is not followed: root never chmods or chowns
    /// its target.
    #[test]
    fn refuses_another_users_dir_and_does_not_follow_their_symlink() {
        let top = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        let owner = |p: &Path| std::fs::metadata(p).expect("meta").uid();
        let theirs = top.path().join("home");
        std::fs::create_dir(&theirs).expect("mkdir");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let refused = format!("{:?}", ensure(&theirs).expect_err("their dir was accepted"));
        assert!(refused.contains("owned by uid 65534"), "{refused}");
        assert_eq!(
            (owner(&theirs), mode(&theirs)),
            (65534, 0o755),
            "their dir changed"
        );
        // Their symlink where `layers/` belongs, to a root-owned dir they cannot change.
        let target = top.path().join("root-owned");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let link = top.path().join("layers");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).expect("lchown");
        assert!(
            ensure(&link).is_err(),
            "another user's symlink was followed"
        );
        assert_eq!(mode(&target), 0o755, "the symlink's target was chmodded");
        // The server's own symlink (an operator's data dir elsewhere) is followed.
        let ours = top.path().join("data");
        std::os::unix::fs::symlink(&target, &ours).expect("symlink");
        ensure(&ours).expect("ensure through our own symlink");
        assert_eq!(mode(&target), 0o700);
    }
}
