//! Reading one small file of an image on the host, from its stored layers as the
//! sandbox's overlay shows them (the topmost layer that has the path wins; whiteouts
//! and opaque directories hide lower layers), never following a symlink: each layer's
//! path is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`. Used for the
//! image's `/etc/passwd` and `/etc/group`.

use super::layers::LayerStore;
use crate::{ImageFile, RuntimeError};
use rustix::fs::{self, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::io::Read;
use std::os::fd::OwnedFd;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// What one layer says about a path.
enum InLayer {
    /// Nothing here: look in the layer below.
    Nothing,
    /// Nothing here, and nothing below either (a whiteout, a non-directory where a
    /// directory is needed, or an opaque directory on the way).
    Hidden,
    File(OwnedFd),
    Unreadable(String),
}

/// File `path` (absolute, e.g. `/etc/passwd`) of the image made of `layers` (lowest
/// first), at most `max` bytes.
pub fn read_file(
    store: &LayerStore,
    layers: &[String],
    path: &str,
    max: u64,
) -> Result<ImageFile, RuntimeError> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() || parts.iter().any(|p| *p == "." || *p == "..") {
        return Ok(ImageFile::Unreadable(format!("{path} is no file path")));
    }
    for digest in layers.iter().rev() {
        let dir = store.path(digest)?;
        let root = fs::open(
            &dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| RuntimeError::Io {
            what: "opening a layer",
            path: dir.clone(),
            source: e.into(),
        })?;
        match in_layer(&root, &dir, &parts, path) {
            InLayer::Nothing => continue,
            InLayer::Hidden => return Ok(ImageFile::Absent),
            InLayer::Unreadable(why) => return Ok(ImageFile::Unreadable(why)),
            InLayer::File(fd) => {
                let mut bytes = Vec::new();
                let read = std::fs::File::from(fd)
                    .take(max + 1)
                    .read_to_end(&mut bytes);
                return Ok(match read {
                    Err(e) => ImageFile::Unreadable(format!("reading {path}: {e}")),
                    Ok(_) if bytes.len() as u64 > max => {
                        ImageFile::Unreadable(format!("{path} is larger than {max} bytes"))
                    }
                    Ok(_) => ImageFile::Content(bytes),
                });
            }
        }
    }
    Ok(ImageFile::Absent)
}

fn in_layer(root: &OwnedFd, dir: &std::path::Path, parts: &[&str], path: &str) -> InLayer {
    let mut opaque = false;
    for n in 1..=parts.len() {
        let rel = parts[..n].join("/");
        let last = n == parts.len();
        let flags = match last {
            true => OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            false => OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        };
        let fd = match fs::openat2(root, rel.as_str(), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => fd,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => {
                return match opaque {
                    true => InLayer::Hidden,
                    false => InLayer::Nothing,
                }
            }
            Err(Errno::LOOP) | Err(Errno::XDEV) => {
                return InLayer::Unreadable(format!(
                "/{rel} is a symlink in the image, which sandboxd does not follow to read {path}"
            ))
            }
            Err(e) => return InLayer::Unreadable(format!("opening /{rel} for {path}: {e}")),
        };
        let Ok(stat) = fs::fstat(&fd) else {
            return InLayer::Unreadable(format!("cannot stat /{rel}"));
        };
        let kind = fs::FileType::from_raw_mode(stat.st_mode);
        if kind == fs::FileType::CharacterDevice && stat.st_rdev == 0 {
            return InLayer::Hidden; // a whiteout
        }
        if last {
            return match kind {
                fs::FileType::RegularFile => InLayer::File(fd),
                _ => InLayer::Unreadable(format!("{path} is not a regular file")),
            };
        }
        if kind == fs::FileType::Symlink {
            // O_PATH | O_NOFOLLOW opened the link itself: not followed, and said so.
            return InLayer::Unreadable(format!(
                "/{rel} is a symlink in the image, which sandboxd does not follow to read {path}"
            ));
        }
        if kind != fs::FileType::Directory {
            return InLayer::Hidden;
        }
        // The layers are immutable and the path has no symlink: its name is safe here.
        let mut value = [0u8; 1];
        opaque |= matches!(
            fs::lgetxattr(dir.join(&rel), "trusted.overlay.opaque", &mut value[..]),
            Ok(1) if value[0] == b'y'
        );
    }
    InLayer::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn layer(store: &LayerStore, build: impl FnOnce(&std::path::Path)) -> String {
        let scratch = store.scratch().expect("scratch");
        build(&scratch);
        store.commit(&scratch).expect("commit").digest
    }

    #[test]
    fn the_top_layer_wins_and_symlinks_are_not_followed() {
        let data = tempfile::tempdir().expect("tempdir");
        let store = LayerStore::new(data.path()).expect("store");
        let outside = data.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("passwd"), "evil:x:0:0::/:/bin/sh\n").expect("write");
        let low = layer(&store, |d| {
            std::fs::create_dir(d.join("etc")).expect("etc");
            std::fs::write(d.join("etc/passwd"), "low\n").expect("passwd");
            std::fs::write(d.join("etc/group"), "low\n").expect("group");
        });
        let high = layer(&store, |d| {
            std::fs::create_dir(d.join("etc")).expect("etc");
            std::fs::write(d.join("etc/passwd"), "high\n").expect("passwd");
        });
        let both = [low.clone(), high.clone()];
        let read = |layers: &[String], p: &str| read_file(&store, layers, p, 1024).expect("read");
        assert_eq!(
            read(&both, "/etc/passwd"),
            ImageFile::Content(b"high\n".to_vec())
        );
        assert_eq!(
            read(&both, "/etc/group"),
            ImageFile::Content(b"low\n".to_vec())
        );
        assert_eq!(read(&both, "/etc/shadow"), ImageFile::Absent);
        let linked = layer(&store, |d| {
            symlink(&outside, d.join("etc")).expect("symlink")
        });
        let evil = [low.clone(), linked];
        assert!(matches!(
            read(&evil, "/etc/passwd"),
            ImageFile::Unreadable(_)
        ));
        let file_link = layer(&store, |d| {
            std::fs::create_dir(d.join("etc")).expect("etc");
            symlink(outside.join("passwd"), d.join("etc/passwd")).expect("symlink");
        });
        assert!(matches!(
            read(&[low.clone(), file_link], "/etc/passwd"),
            ImageFile::Unreadable(_)
        ));
        assert!(matches!(
            read(&both, "/etc/passwd/.."),
            ImageFile::Unreadable(_)
        ));
        assert!(matches!(
            read_file(&store, &both, "/etc/passwd", 2).expect("read"),
            ImageFile::Unreadable(_)
        ));
    }
}
