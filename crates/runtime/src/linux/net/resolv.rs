//! A sandbox's `/etc/resolv.conf`, written by the host without ever leaving the
//! sandbox's root through the root's own symlinks: `etc` is resolved with
//! `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, so an image's `etc -> /etc` or
//! `etc -> ../../..` means the root's own directory, as it does inside the sandbox; the
//! file is made afresh (`O_CREAT | O_EXCL`, which follows no symlink and opens no
//! existing inode), chowned through its fd, and renamed over whatever `resolv.conf`
//! was (a symlink there is replaced, never followed). An `etc` that resolves to nothing
//! or to no directory within the root gets no file, with a warning: the sandbox starts
//! without the host's resolvers.

use crate::RuntimeError;
use rustix::fs::{self, AtFlags, Gid, Mode, OFlags, ResolveFlags, Uid};
use rustix::io::Errno;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// The name the file is written under before it is renamed into place.
const STAGING: &str = ".resolv.conf.sandboxd";

/// How often a step the sandbox can race (its processes may change its root) is tried.
const ATTEMPTS: usize = 4;

fn resolv_conf_text(resolvers: &[Ipv4Addr]) -> String {
    let mut text = String::from("# written by sandboxd\n");
    for r in resolvers {
        text += &format!("nameserver {r}\n");
    }
    text
}

fn resolv_err(path: &Path) -> impl Fn(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        what: "writing the sandbox's resolv.conf",
        path: path.to_path_buf(),
        source,
    }
}

/// Stages `etc/resolv.conf` in an overlay upper dir before the root is mounted (an
/// `etc` dir there merges with the image's), owned by the sandbox's root (`owner`).
/// The upper dir is the host's own and new (no sandbox ran over it yet).
pub fn stage_resolv_conf(
    upper: &Path,
    resolvers: &[Ipv4Addr],
    owner: u32,
) -> Result<(), RuntimeError> {
    let etc = upper.join("etc");
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&etc)
        .map_err(resolv_err(&etc))?;
    let path = etc.join("resolv.conf");
    std::fs::write(&path, resolv_conf_text(resolvers)).map_err(resolv_err(&path))?;
    for path in [path, etc] {
        std::os::unix::fs::chown(&path, Some(owner), Some(owner)).map_err(resolv_err(&path))?;
    }
    Ok(())
}

/// Before `layers` (top first) are mounted over a wired warm entry's upper dir `upper`
/// (never under a mounted overlay yet, so the host's alone): when the image's `etc` is
/// no directory (a symlink), the `etc` staged there would hide it, so the staged files
/// go. Whether they went: then the caller writes the file into the mounted root with
/// [`write_resolv_conf`], where the image's link leads.
pub fn unstage_over_linked_etc(upper: &Path, layers: &[PathBuf]) -> Result<bool, RuntimeError> {
    let linked = layers
        .iter()
        .find_map(|layer| std::fs::symlink_metadata(layer.join("etc")).ok())
        .is_some_and(|m| !m.is_dir() && !is_whiteout(&m));
    let (etc, file) = (upper.join("etc"), upper.join("etc/resolv.conf"));
    if !linked || !std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
        return Ok(false);
    }
    std::fs::remove_file(&file).map_err(resolv_err(&file))?;
    std::fs::remove_dir(&etc).map_err(resolv_err(&etc))?;
    Ok(true)
}

fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Writes `etc/resolv.conf` in the sandbox's root `root` (as the sandbox resolves it),
/// owned by the sandbox's root (`owner`); skipped with a warning when the root's
/// `/etc` is no directory.
pub fn write_resolv_conf(
    root: &Path,
    resolvers: &[Ipv4Addr],
    owner: u32,
) -> Result<(), RuntimeError> {
    let path = root.join("etc/resolv.conf");
    let err = |e: Errno| resolv_err(&path)(e.into());
    let root_fd = fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)?;
    let written = match open_etc(&root_fd, owner).map_err(err)? {
        Ok(etc) => replace(&etc, &resolv_conf_text(resolvers), owner).map_err(err)?,
        Err(why) => Err(why),
    };
    if let Err(why) = written {
        tracing::warn!(
            root = %root.display(),
            "the sandbox gets no resolv.conf: {why}"
        );
    }
    Ok(())
}

/// The root's `etc` directory as the sandbox resolves it (made, owned by `owner`, if
/// there is nothing at all of that name), or why there is none.
fn open_etc(root: &OwnedFd, owner: u32) -> Result<Result<OwnedFd, &'static str>, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    for _ in 0..ATTEMPTS {
        match fs::openat2(root, "etc", flags, Mode::empty(), RESOLVE) {
            Ok(fd) => return Ok(Ok(fd)),
            // mkdirat follows no symlink: EEXIST means `etc` points at nothing.
            Err(Errno::NOENT) => match fs::mkdirat(root, "etc", Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    let fd = fs::openat2(root, "etc", flags, Mode::empty(), RESOLVE)?;
                    fs::fchown(&fd, Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)))?;
                    fs::fchmod(&fd, Mode::from_raw_mode(0o755))?;
                    return Ok(Ok(fd));
                }
                Err(Errno::EXIST) => {
                    return Ok(Err(
                        "/etc is a symlink to nothing within the sandbox's root",
                    ))
                }
                Err(e) => return Err(e),
            },
            Err(Errno::NOTDIR) => return Ok(Err("/etc is no directory")),
            Err(Errno::LOOP) => return Ok(Err("/etc is a loop of symlinks")),
            // A rename in the root raced the resolution: the kernel asks for a retry.
            Err(Errno::AGAIN) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(Err("/etc kept changing while it was resolved"))
}

/// Makes `resolv.conf` in `etc` afresh with `text`, owned by `owner`, replacing
/// whatever had that name (not a directory), or says why it cannot.
fn replace(etc: &OwnedFd, text: &str, owner: u32) -> Result<Result<(), &'static str>, Errno> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..ATTEMPTS {
        let fd = match fs::openat(etc, STAGING, flags, Mode::from_raw_mode(0o644)) {
            Ok(fd) => fd,
            // Left by an earlier try, or put there by the sandbox: it goes.
            Err(Errno::EXIST) => match remove_staging(etc) {
                Ok(()) => continue,
                Err(_) => return Ok(Err("/etc/.resolv.conf.sandboxd is in the way")),
            },
            Err(e) => return Err(e),
        };
        let written = fs::fchown(&fd, Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)))
            .and_then(|()| fs::fchmod(&fd, Mode::from_raw_mode(0o644)))
            .and_then(|()| {
                std::fs::File::from(fd)
                    .write_all(text.as_bytes())
                    .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
            })
            .and_then(|()| fs::renameat(etc, STAGING, etc, "resolv.conf"));
        return match written {
            Ok(()) => Ok(Ok(())),
            Err(e) => {
                remove_staging(etc)?;
                match e {
                    Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => {
                        Ok(Err("/etc/resolv.conf is a directory"))
                    }
                    e => Err(e),
                }
            }
        };
    }
    Ok(Err("/etc kept changing while resolv.conf was written"))
}

fn remove_staging(etc: &OwnedFd) -> Result<(), Errno> {
    match fs::unlinkat(etc, STAGING, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        // A directory of that name: the sandbox's own doing.
        Err(Errno::ISDIR) | Err(Errno::PERM) => fs::unlinkat(etc, STAGING, AtFlags::REMOVEDIR),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::write_resolv_conf;
    use std::os::unix::fs::{symlink, MetadataExt};
    use std::path::Path;

    const OWNER: u32 = 234_567;

    /// A root and, beside it, a dir outside it holding one file (both the test's own).
    fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("a/b/c/root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).expect("root");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("resolv.conf"), "host's\n").expect("host file");
        (dir, root, outside)
    }

    /// Nothing in `outside` changed: one file, its text and owner as made.
    fn assert_outside_untouched(outside: &Path) {
        let names: Vec<_> = std::fs::read_dir(outside)
            .expect("outside")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["resolv.conf"], "outside gained files");
        let file = outside.join("resolv.conf");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "host's\n");
        assert_eq!(std::fs::metadata(&file).expect("stat").uid(), 0);
    }

    fn assert_written(file: &Path) {
        let meta = std::fs::symlink_metadata(file).expect("resolv.conf written");
        assert!(meta.is_file(), "{} is no regular file", file.display());
        assert_eq!((meta.uid(), meta.gid()), (OWNER, OWNER));
        let text = std::fs::read_to_string(file).expect("read");
        assert!(text.contains("nameserver 10.9.8.7"), "{text}");
    }

    fn write(root: &Path) {
        write_resolv_conf(root, &["10.9.8.7".parse().expect("ip")], OWNER)
            .expect("a hostile /etc is no error");
    }

    #[test]
    fn an_absolute_etc_symlink_resolves_inside_the_root() {
        let (_dir, root, outside) = setup();
        symlink(&outside, root.join("etc")).expect("symlink");
        write(&root);
        assert_outside_untouched(&outside);
        // Its target within the root exists: the file goes there.
        let inner = root.join(outside.strip_prefix("/").expect("absolute"));
        std::fs::create_dir_all(&inner).expect("inner");
        write(&root);
        assert_outside_untouched(&outside);
        assert_written(&inner.join("resolv.conf"));
    }

    #[test]
    fn a_climbing_relative_etc_symlink_stays_in_the_root() {
        let (_dir, root, outside) = setup();
        // Exactly far enough up to reach `outside` from the root's own path.
        symlink("../../../../outside", root.join("etc")).expect("symlink");
        write(&root);
        assert_outside_untouched(&outside);
        std::fs::create_dir(root.join("outside")).expect("inner");
        write(&root);
        assert_outside_untouched(&outside);
        assert_written(&root.join("outside/resolv.conf"));
    }

    #[test]
    fn a_resolv_conf_symlink_is_replaced_not_followed() {
        for target in [None, Some("../../../../../outside/resolv.conf".to_string())] {
            let (_dir, root, outside) = setup();
            std::fs::create_dir(root.join("etc")).expect("etc");
            let target =
                target.unwrap_or_else(|| outside.join("resolv.conf").display().to_string());
            symlink(&target, root.join("etc/resolv.conf")).expect("symlink");
            write(&root);
            assert_outside_untouched(&outside);
            assert_written(&root.join("etc/resolv.conf"));
        }
    }

    #[test]
    fn a_symlink_at_the_staging_name_is_not_followed() {
        let (_dir, root, outside) = setup();
        std::fs::create_dir(root.join("etc")).expect("etc");
        symlink(
            outside.join("resolv.conf"),
            root.join("etc").join(super::STAGING),
        )
        .expect("symlink");
        write(&root);
        assert_outside_untouched(&outside);
        assert_written(&root.join("etc/resolv.conf"));
        assert!(!root.join("etc").join(super::STAGING).exists());
    }

    #[test]
    fn an_etc_that_is_no_directory_is_left_alone() {
        let (_dir, root, outside) = setup();
        std::fs::write(root.join("etc"), "a file").expect("etc file");
        write(&root);
        assert_outside_untouched(&outside);
        assert_eq!(
            std::fs::read_to_string(root.join("etc")).expect("read"),
            "a file"
        );
    }

    #[test]
    fn a_missing_etc_is_made_for_the_sandbox() {
        let (_dir, root, outside) = setup();
        write(&root);
        assert_outside_untouched(&outside);
        assert_written(&root.join("etc/resolv.conf"));
        let etc = std::fs::metadata(root.join("etc")).expect("etc");
        assert_eq!((etc.uid(), etc.mode() & 0o7777), (OWNER, 0o755));
    }
}
