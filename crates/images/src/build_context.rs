//! The layers a Dockerfile build makes without a sandbox: COPY/ADD of local files from
//! the build context (every source resolved with `openat2(RESOLVE_BENEATH)` from the
//! context's descriptor, so `..`, absolute paths and symlinks leading out are refused by
//! the kernel) and WORKDIR's directory. Paths in the image are looked up through the
//! layer chain (symlinks followed inside the image's root, whiteouts and opaque
//! directories honoured), so a copy into `/bin` of a merged-/usr image lands in
//! `/usr/bin` and existing directories keep their modes and owners.

use crate::dockerfile::CopySpec;
use crate::unpack::{self, Budget, UnpackError};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::fs::Metadata;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a COPY/ADD/WORKDIR step could not make its layer.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("{0}")]
    Refused(String),
    #[error("not enough room in the data dir: {0}")]
    NoRoom(String),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ContextError {
    let path = path.to_path_buf();
    move |source| ContextError::Io { what, path, source }
}

/// An open build context directory.
pub struct Context {
    root: PathBuf,
    fd: OwnedFd,
}

/// A resolved source: its host path (inside the context) and how it is named.
struct Source {
    path: PathBuf,
    name: String,
    is_dir: bool,
}

impl Context {
    pub fn open(dir: &Path) -> Result<Context, ContextError> {
        let root = dir
            .canonicalize()
            .map_err(io("opening the build context", dir))?;
        let fd = rustix::fs::open(
            &root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ContextError::Io {
            what: "opening the build context",
            path: root.clone(),
            source: e.into(),
        })?;
        Ok(Context { root, fd })
    }

    /// Resolves `src` beneath the context; refuses escapes with a clear message.
    fn source(&self, what: &str, src: &str) -> Result<Source, ContextError> {
        if src.starts_with('/') {
            return Err(ContextError::Refused(format!(
                "{what} source {src:?} is absolute: sources are paths inside the build context"
            )));
        }
        if src.contains(['*', '?', '[']) {
            return Err(ContextError::Refused(format!(
                "{what} source {src:?}: wildcards are not supported"
            )));
        }
        let fd = rustix::fs::openat2(
            self.fd.as_fd(),
            src,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            rustix::io::Errno::XDEV => ContextError::Refused(format!(
                "{what} source {src:?} leads outside the build context (`..` or a symlink)"
            )),
            rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => ContextError::Refused(format!(
                "{what} source {src:?} not found in the build context"
            )),
            e => ContextError::Io {
                what: "opening a source",
                path: self.root.join(src),
                source: e.into(),
            },
        })?;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", rustix_fd(&fd)))
            .map_err(io("resolving a source", &self.root.join(src)))?;
        if !path.starts_with(&self.root) {
            return Err(ContextError::Refused(format!(
                "{what} source {src:?} leads outside the build context"
            )));
        }
        let meta = std::fs::metadata(&path).map_err(io("reading a source", &path))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Source {
            path,
            name,
            is_dir: meta.is_dir(),
        })
    }
}

impl Context {
    /// Opens regular file `path` (inside the context) for reading, resolved beneath the
    /// context's descriptor without following a final symlink.
    fn open_file(&self, path: &Path) -> Result<std::fs::File, ContextError> {
        let rel = path.strip_prefix(&self.root).map_err(|_| {
            ContextError::Refused(format!("{} is outside the build context", path.display()))
        })?;
        let fd = rustix::fs::openat2(
            self.fd.as_fd(),
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            rustix::io::Errno::XDEV => ContextError::Refused(format!(
                "{} leads outside the build context",
                path.display()
            )),
            e => ContextError::Io {
                what: "reading a source",
                path: path.to_path_buf(),
                source: e.into(),
            },
        })?;
        Ok(std::fs::File::from(fd))
    }
}

fn rustix_fd(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// A path in the image, relative to its root, `..` and `.` resolved lexically (a `..`
/// at the root stays there, as in a real root).
pub fn image_path(workdir: &str, path: &str) -> PathBuf {
    let full = match path.starts_with('/') {
        true => PathBuf::from(path),
        false => Path::new(workdir).join(path),
    };
    let mut out = PathBuf::new();
    for c in full.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// The layer directories of an image, top first, for lookups.
pub struct Chain<'a> {
    pub layers: &'a [PathBuf],
}

fn is_whiteout(m: &Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

fn is_opaque(path: &Path) -> bool {
    let mut buf = [0u8; 4];
    rustix::fs::lgetxattr(path, "trusted.overlay.opaque", &mut buf).is_ok()
}

impl Chain<'_> {
    /// What the image has at `rel` (not following a final symlink): the topmost entry
    /// that no whiteout or opaque directory above hides, and the layer it is in.
    fn lookup(&self, rel: &Path) -> Option<(Metadata, PathBuf)> {
        'layers: for layer in self.layers {
            let mut prefix = layer.clone();
            let parts: Vec<_> = rel.components().collect();
            let mut opaque_above = false;
            for (i, c) in parts.iter().enumerate() {
                prefix.push(c);
                let Ok(m) = std::fs::symlink_metadata(&prefix) else {
                    if opaque_above {
                        return None;
                    }
                    continue 'layers;
                };
                if is_whiteout(&m) {
                    return None;
                }
                if i + 1 == parts.len() {
                    return Some((m, prefix));
                }
                if !m.is_dir() {
                    continue 'layers;
                }
                opaque_above |= is_opaque(&prefix);
            }
            if parts.is_empty() {
                return std::fs::symlink_metadata(layer)
                    .ok()
                    .map(|m| (m, layer.clone()));
            }
        }
        None
    }

    /// `rel` with every symlink on the way resolved inside the image's root (the last
    /// component too when `follow_last`).
    pub fn resolve(&self, rel: &Path, follow_last: bool) -> Result<PathBuf, ContextError> {
        let mut todo: Vec<PathBuf> = rel
            .components()
            .map(|c| PathBuf::from(c.as_os_str()))
            .rev()
            .collect();
        let mut done = PathBuf::new();
        let mut hops = 0;
        while let Some(part) = todo.pop() {
            let candidate = done.join(&part);
            let last = todo.is_empty();
            match self.lookup(&candidate) {
                Some((m, host)) if m.file_type().is_symlink() && (!last || follow_last) => {
                    hops += 1;
                    if hops > 40 {
                        return Err(ContextError::Refused(format!(
                            "too many symlinks resolving /{} in the image",
                            rel.display()
                        )));
                    }
                    let target = std::fs::read_link(&host).map_err(io("reading a link", &host))?;
                    let base = match target.is_absolute() {
                        true => PathBuf::new(),
                        false => done.clone(),
                    };
                    let joined =
                        image_path(&format!("/{}", base.display()), &target.to_string_lossy());
                    done = PathBuf::new();
                    for c in joined.components().rev() {
                        todo.push(PathBuf::from(c.as_os_str()));
                    }
                }
                _ => done = candidate,
            }
        }
        Ok(done)
    }

    fn is_dir(&self, rel: &Path) -> bool {
        self.lookup(rel).is_some_and(|(m, _)| m.is_dir())
    }
}

/// Creates directory `rel` (and its parents) in `scratch` where missing, each with the
/// mode and owner the image has there (else 0755 root).
fn ensure_dirs(chain: &Chain, scratch: &Path, rel: &Path) -> Result<(), ContextError> {
    let mut host = scratch.to_path_buf();
    let mut image = PathBuf::new();
    for c in rel.components() {
        host.push(c);
        image.push(c);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => {
                std::fs::remove_file(&host).map_err(io("replacing an entry", &host))?;
            }
            Err(_) => {}
        }
        std::fs::create_dir(&host).map_err(io("creating a directory", &host))?;
        let (mode, uid, gid) = match chain.lookup(&image) {
            Some((m, _)) if m.is_dir() => (m.mode() & 0o7777, m.uid(), m.gid()),
            _ => (0o755, 0, 0),
        };
        set_owner_mode(&host, uid, gid, Some(mode))?;
    }
    Ok(())
}

fn set_owner_mode(path: &Path, uid: u32, gid: u32, mode: Option<u32>) -> Result<(), ContextError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io("setting an owner", path))?;
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(io("setting a mode", path))?;
    }
    Ok(())
}

/// WORKDIR: makes `dir` (absolute) in `scratch` unless the image has it; whether it
/// made anything.
pub fn workdir_layer(chain: &Chain, dir: &str, scratch: &Path) -> Result<bool, ContextError> {
    let rel = chain.resolve(&image_path("/", dir), true)?;
    if rel.as_os_str().is_empty() || chain.is_dir(&rel) {
        return Ok(false);
    }
    ensure_dirs(chain, scratch, &rel)?;
    Ok(true)
}

/// COPY/ADD `spec` (words already expanded) from `ctx` into `scratch`, relative
/// destinations under `workdir`. `what` names the instruction in errors. What it writes
/// is taken from `budget` (the data dir's shared room), as a pulled layer's is; zeros
/// are left holes.
pub fn copy_layer(
    ctx: &Context,
    chain: &Chain,
    what: &str,
    spec: &CopySpec,
    workdir: &str,
    scratch: &Path,
    budget: &mut Budget,
) -> Result<(), ContextError> {
    let mut sources = Vec::new();
    for src in &spec.sources {
        if what == "ADD" {
            let lower = src.to_ascii_lowercase();
            if lower.contains("://") || lower.starts_with("git@") {
                return Err(ContextError::Refused(format!(
                    "ADD of a URL ({src:?}) is refused: only local files from the build context"
                )));
            }
            let archive = [
                ".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar.zst",
            ];
            if archive.iter().any(|s| lower.ends_with(s)) {
                return Err(ContextError::Refused(format!(
                    "ADD of an archive ({src:?}) is not supported (it would be unpacked): \
                     COPY it and unpack it with RUN"
                )));
            }
        }
        sources.push(ctx.source(what, src)?);
    }
    let dest_dir_form = spec.dest.ends_with('/') || spec.dest.ends_with("/.");
    let dest = chain.resolve(&image_path(workdir, &spec.dest), true)?;
    let into_dir = dest_dir_form || sources.len() > 1 || sources[0].is_dir || chain.is_dir(&dest);
    if sources.len() > 1 && !dest_dir_form {
        return Err(ContextError::Refused(format!(
            "{what} with several sources needs a destination ending in `/`"
        )));
    }
    let owner = spec.chown.unwrap_or((0, 0));
    for src in &sources {
        let (target_dir, target) = match (into_dir, src.is_dir) {
            (true, true) => (dest.clone(), dest.clone()),
            (true, false) => (dest.clone(), dest.join(&src.name)),
            (false, _) => (
                dest.parent().map(Path::to_path_buf).unwrap_or_default(),
                dest.clone(),
            ),
        };
        ensure_dirs(chain, scratch, &target_dir)?;
        copy_tree(
            ctx,
            &src.path,
            &scratch.join(&target),
            owner,
            spec.chmod,
            budget,
        )?;
    }
    Ok(())
}

/// Copies `from` (a file, symlink or directory tree, symlinks inside kept as symlinks)
/// to `to`, owned by `owner`. File contents are opened beneath the context again, so a
/// directory swapped for a symlink meanwhile cannot bring in a file from outside.
fn copy_tree(
    ctx: &Context,
    from: &Path,
    to: &Path,
    owner: (u32, u32),
    chmod: Option<u32>,
    budget: &mut Budget,
) -> Result<(), ContextError> {
    let no_room = |path: &Path| {
        let path = path.display().to_string();
        move |why: String| ContextError::NoRoom(format!("writing {path}: {why}"))
    };
    let walk = walkdir::WalkDir::new(from)
        .follow_links(false)
        .follow_root_links(true)
        .sort_by_file_name();
    for entry in walk {
        let entry = entry.map_err(|e| ContextError::Io {
            what: "reading the build context",
            path: from.to_path_buf(),
            source: e.into(),
        })?;
        let rel = entry.path().strip_prefix(from).unwrap_or(Path::new(""));
        let dst = match rel.as_os_str().is_empty() {
            true => to.to_path_buf(),
            false => to.join(rel),
        };
        let meta = match entry.depth() {
            0 => std::fs::metadata(entry.path()),
            _ => std::fs::symlink_metadata(entry.path()),
        }
        .map_err(io("reading a source", entry.path()))?;
        let ft = meta.file_type();
        // An inode and a name in its directory, as an unpacked entry.
        let name = dst.file_name().map_or(0, |n| n.len() as u64);
        budget
            .take_inode()
            .and_then(|()| budget.take_bytes(name + unpack::DIRENT_OVERHEAD))
            .map_err(no_room(&dst))?;
        let existing = std::fs::symlink_metadata(&dst).ok();
        if ft.is_dir() {
            budget
                .take_bytes(unpack::BLOCK as u64)
                .map_err(no_room(&dst))?;
            if !existing.as_ref().is_some_and(Metadata::is_dir) {
                if existing.is_some() {
                    std::fs::remove_file(&dst).map_err(io("replacing an entry", &dst))?;
                }
                std::fs::create_dir(&dst).map_err(io("creating a directory", &dst))?;
            }
            set_owner_mode(
                &dst,
                owner.0,
                owner.1,
                Some(chmod.unwrap_or(meta.mode() & 0o7777)),
            )?;
            continue;
        }
        if let Some(old) = existing {
            match old.is_dir() {
                true => std::fs::remove_dir_all(&dst),
                false => std::fs::remove_file(&dst),
            }
            .map_err(io("replacing an entry", &dst))?;
        }
        if ft.is_symlink() {
            let target =
                std::fs::read_link(entry.path()).map_err(io("reading a link", entry.path()))?;
            let len = target.as_os_str().len();
            if len >= unpack::INLINE_SYMLINK {
                budget
                    .take_bytes((len.div_ceil(unpack::BLOCK) * unpack::BLOCK) as u64)
                    .map_err(no_room(&dst))?;
            }
            std::os::unix::fs::symlink(&target, &dst).map_err(io("copying a link", &dst))?;
            set_owner_mode(&dst, owner.0, owner.1, None)?;
        } else if ft.is_file() {
            let mut input = ctx.open_file(entry.path())?;
            let output = std::fs::File::options()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&dst)
                .map_err(io("writing a copied file", &dst))?;
            unpack::write_sparse(&mut input, &output, &dst, budget).map_err(|e| match e {
                UnpackError::NoRoom(why) => ContextError::NoRoom(why),
                UnpackError::Read(source) => ContextError::Io {
                    what: "copying a file",
                    path: entry.path().to_path_buf(),
                    source,
                },
                e => ContextError::Io {
                    what: "copying a file",
                    path: dst.clone(),
                    source: std::io::Error::other(e.to_string()),
                },
            })?;
            set_owner_mode(
                &dst,
                owner.0,
                owner.1,
                Some(chmod.unwrap_or(meta.mode() & 0o7777)),
            )?;
        } else {
            return Err(ContextError::Refused(format!(
                "{} is not a regular file, directory or symlink",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sources: &[&str], dest: &str) -> CopySpec {
        CopySpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            dest: dest.into(),
            chown: None,
            chmod: None,
        }
    }

    #[test]
    fn escapes_are_refused() {
        let ctx_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::write(ctx_dir.path().join("ok"), "ok").unwrap();
        std::os::unix::fs::symlink(outside.path(), ctx_dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink("../../../../../../etc/hostname", ctx_dir.path().join("rel"))
            .unwrap();
        let ctx = Context::open(ctx_dir.path()).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let chain = Chain { layers: &[] };
        for (src, why) in [
            ("../x", "outside"),
            ("/etc/passwd", "absolute"),
            ("out/secret", "outside"),
            ("rel", "outside"),
            ("missing", "not found"),
            ("*.txt", "wildcards"),
        ] {
            let e = copy_layer(
                &ctx,
                &chain,
                "COPY",
                &spec(&[src], "/x"),
                "/",
                scratch.path(),
                &mut Budget::unlimited(),
            )
            .unwrap_err();
            assert!(e.to_string().contains(why), "{src}: {e}");
        }
        let e = copy_layer(
            &ctx,
            &chain,
            "ADD",
            &spec(&["http://h/x"], "/x"),
            "/",
            scratch.path(),
            &mut Budget::unlimited(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("URL"), "{e}");
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
        // A directory swapped for a symlink after the walk saw it: contents are opened
        // beneath the context again.
        let swapped = ctx.open_file(&ctx.root.join("out/secret")).unwrap_err();
        assert!(swapped.to_string().contains("outside"), "{swapped}");
        copy_layer(
            &ctx,
            &chain,
            "COPY",
            &spec(&["ok"], "rel/dir/"),
            "/app",
            scratch.path(),
            &mut Budget::unlimited(),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(scratch.path().join("app/rel/dir/ok")).unwrap(),
            "ok"
        );
    }

    #[test]
    fn destinations_follow_the_image() {
        let lower = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(lower.path().join("usr/bin")).unwrap();
        std::os::unix::fs::symlink("usr/bin", lower.path().join("bin")).unwrap();
        std::fs::create_dir(lower.path().join("tmp")).unwrap();
        std::fs::set_permissions(
            lower.path().join("tmp"),
            std::fs::Permissions::from_mode(0o1777),
        )
        .unwrap();
        let layers = [lower.path().to_path_buf()];
        let chain = Chain { layers: &layers };
        let ctx_dir = tempfile::tempdir().unwrap();
        std::fs::write(ctx_dir.path().join("tool"), "t").unwrap();
        let ctx = Context::open(ctx_dir.path()).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        copy_layer(
            &ctx,
            &chain,
            "COPY",
            &spec(&["tool"], "/bin/"),
            "/",
            scratch.path(),
            &mut Budget::unlimited(),
        )
        .unwrap();
        copy_layer(
            &ctx,
            &chain,
            "COPY",
            &spec(&["tool"], "/tmp"),
            "/",
            scratch.path(),
            &mut Budget::unlimited(),
        )
        .unwrap();
        assert!(scratch.path().join("usr/bin/tool").is_file());
        assert!(!scratch.path().join("bin").exists());
        let tmp = std::fs::metadata(scratch.path().join("tmp")).unwrap();
        assert_eq!(tmp.mode() & 0o7777, 0o1777, "the image's mode is kept");
        assert!(scratch.path().join("tmp/tool").is_file());
        assert!(!workdir_layer(&chain, "/tmp", scratch.path()).unwrap());
        let fresh = tempfile::tempdir().unwrap();
        assert!(workdir_layer(&chain, "/srv/app", fresh.path()).unwrap());
        assert!(fresh.path().join("srv/app").is_dir());
    }
}
