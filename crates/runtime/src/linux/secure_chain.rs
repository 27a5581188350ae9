//! The chain from `/` down to the data dir: no user but root (or the server's own user)
//! may rename, replace or redirect any step of it, checked the way OpenSSH's
//! `StrictModes` (`secure_path`) checks a user's `authorized_keys`.
//!
//! The rule, for every step of the path as the kernel resolves it (each directory from
//! `/` down, and each symlink met on the way, followed as the kernel would):
//! - it is owned by root or by the server's user;
//! - a directory above the data dir is not writable by group or others, unless it has
//!   the sticky bit (like `/tmp`, 1777): then only an entry's owner (or the dir's) may
//!   rename or remove it, and the next step, by the first rule, is root's (or ours).
//!   A POSIX ACL that lets another user write shows in the group bits (its mask), so it
//!   is refused as well.
//!
//! The data dir itself may be looser (it is made `0700` by [`super::private_dir`]).
//! When the chain holds, only root can rename the data dir or any dir above it, or swap
//! an entry in it: a rename after start-up is not open to other users, so work below
//! the data dir may go by path (no descriptor opened at start is needed). Captures check
//! the chain again before they write (an ancestor loosened later is refused there).

use crate::RuntimeError;
use rustix::fs::{FileType, Mode, OFlags};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed at most while resolving (as the kernel's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// How far a checked path exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Every step exists and passed.
    Whole,
    /// The steps that exist passed; from one on it does not exist yet (to be made by
    /// the server's user, then checked again).
    Partial,
}

/// Checks the chain of `path` (relative to the working dir when not absolute) as the
/// module describes; an error names the step that fails and why.
pub fn check(path: &Path) -> Result<Reach, RuntimeError> {
    let uid = nix::unistd::geteuid().as_raw();
    let abs = match path.is_absolute() {
        true => path.to_path_buf(),
        false => std::env::current_dir().map_err(io(path))?.join(path),
    };
    let refuse = |step: &Path, why: String| RuntimeError::Io {
        what: "checking the data directory's chain",
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} {why}; only root (or the server's user) may own or write the data \
                 directory and every directory above it (a sticky dir such as /tmp is \
                 fine when what is below it is root's)",
                step.display()
            ),
        ),
    };
    let open = |at: &OwnedFd, name: &std::ffi::OsStr| {
        rustix::fs::openat(
            at,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let root = || {
        rustix::fs::open(
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(Path::new("/"))(e.into()))
    };
    // The resolved dirs so far, `/` first, each with its path.
    let mut chain: Vec<(PathBuf, OwnedFd)> = vec![(PathBuf::from("/"), root()?)];
    check_dir(&chain[0].1, Path::new("/"), uid, false, &refuse)?;
    let mut pending: Vec<OsString> = components(&abs);
    pending.reverse(); // popped from the end: the next step last
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            if chain.len() > 1 {
                chain.pop(); // checked on the way down
            }
            continue;
        }
        let (at_path, at) = chain.last().expect("/ is never popped");
        let step = at_path.join(&name);
        let fd = match open(at, &name) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(Reach::Partial),
            Err(e) => return Err(io(&step)(e.into())),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io(&step)(e.into()))?;
        if st.st_uid != 0 && st.st_uid != uid {
            return Err(refuse(&step, format!("is owned by uid {}", st.st_uid)));
        }
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io(&step)(std::io::Error::other("too many symlinks")));
                }
                let target =
                    rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(|e| io(&step)(e.into()))?;
                let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    chain.truncate(1);
                }
                let mut more = components(&target);
                more.reverse();
                pending.extend(more);
            }
            FileType::Directory => {
                let last = pending.is_empty();
                check_dir(&fd, &step, uid, last, &refuse)?;
                chain.push((step, fd));
            }
            _ => {
                return Err(io(&step)(std::io::Error::other(
                    "is not a directory".to_string(),
                )))
            }
        }
    }
    Ok(Reach::Whole)
}

/// A dir on the chain: owned by root or `uid`; above the data dir (`last` false) not
/// writable by group or others unless sticky.
fn check_dir(
    fd: &OwnedFd,
    step: &Path,
    uid: u32,
    last: bool,
    refuse: &impl Fn(&Path, String) -> RuntimeError,
) -> Result<(), RuntimeError> {
    let st = rustix::fs::fstat(fd).map_err(|e| io(step)(e.into()))?;
    if st.st_uid != 0 && st.st_uid != uid {
        return Err(refuse(step, format!("is owned by uid {}", st.st_uid)));
    }
    let mode = st.st_mode & 0o7777;
    if !last && mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(refuse(
            step,
            format!("is writable by group or others without the sticky bit (mode {mode:o})"),
        ));
    }
    Ok(())
}

/// The named steps of `path` (`.` dropped, `..` kept), without the root.
fn components(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        what: "checking the data directory's chain",
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// Root's chain through /tmp (sticky, 1777) passes; a step another user owns, a
    /// group-writable step without the sticky bit, or another user's symlink fails.
    #[test]
    fn refuses_what_another_user_could_rename_or_redirect() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown needs root; the integration tests run as root
        }
        let top = tempfile::tempdir().expect("tempdir");
        let t = top.path();
        assert_eq!(check(&t.join("a/b")).expect("fresh"), Reach::Partial);
        std::fs::create_dir(t.join("a")).expect("mkdir");
        assert_eq!(check(&t.join("a")).expect("made"), Reach::Whole);
        // A sticky, world-writable dir of root's with root's dir below: fine.
        chmod(&t.join("a"), 0o1777);
        std::fs::create_dir(t.join("a/data")).expect("mkdir");
        assert_eq!(check(&t.join("a/data")).expect("sticky"), Reach::Whole);
        // Without the sticky bit: refused.
        chmod(&t.join("a"), 0o775);
        let e = format!(
            "{:?}",
            check(&t.join("a/data")).expect_err("group-writable")
        );
        assert!(e.contains("without the sticky bit"), "{e}");
        chmod(&t.join("a"), 0o755);
        // The data dir's parent owned by another user: refused, even if it does not
        // exist below.
        std::os::unix::fs::chown(t.join("a"), Some(65534), Some(65534)).expect("chown");
        let e = format!(
            "{:?}",
            check(&t.join("a/data/x")).expect_err("their parent")
        );
        assert!(e.contains("owned by uid 65534"), "{e}");
        std::os::unix::fs::chown(t.join("a"), Some(0), Some(0)).expect("chown");
        // Their symlink on the way: refused; root's: followed.
        std::os::unix::fs::symlink(t.join("a"), t.join("link")).expect("symlink");
        assert_eq!(
            check(&t.join("link/data")).expect("root's link"),
            Reach::Whole
        );
        std::os::unix::fs::lchown(t.join("link"), Some(65534), Some(65534)).expect("lchown");
        let e = format!("{:?}", check(&t.join("link/data")).expect_err("their link"));
        assert!(e.contains("owned by uid 65534"), "{e}");
        // Relative steps resolve as the kernel would.
        assert_eq!(
            check(&t.join("a/data/../data/./")).expect("dots"),
            Reach::Whole
        );
    }
}
