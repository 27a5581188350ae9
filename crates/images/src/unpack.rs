//! Applying an untrusted layer tar to an empty directory, with the kernel's help.
//!
//! Every path is resolved with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)` below the layer's directory, and every
//! change is made with `*at` calls relative to the parent found so, never following the
//! last component. So an entry can never write outside the layer: `..` components and
//! absolute paths are refused by name, a path through a symlink (planted by an earlier
//! entry) fails with ELOOP, and hard links resolve their target the same way.
//!
//! OCI whiteouts become overlayfs whiteouts, since a stored layer is an overlay lower
//! directory: `.wh.NAME` is a 0:0 character device at NAME and `.wh..wh..opq` sets
//! `trusted.overlay.opaque=y` on its directory. A whiteout hides the lower layers'
//! entries only, never its own layer's, in whichever order the archive lists them: a
//! directory of the layer's own that a whiteout names (before or after it) is made
//! opaque instead. Device nodes are skipped (a layer may not
//! carry them; the sandbox gets its own /dev). Extended attributes of the archive are
//! ignored (an archive must never forge overlay metadata). Ownership and modes
//! (setuid/setgid/sticky included) are kept as the archive gives them: the store's
//! layers hold in-sandbox ids, idmapped when mounted.

use rustix::fs::{self as fs, AtFlags, Mode, OFlags, ResolveFlags};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Bounds on what one layer may hold.
#[derive(Debug, Clone, Copy)]
pub struct UnpackLimits {
    /// Entries (files, directories, links…) in the layer.
    pub max_entries: u64,
    /// Bytes of file content once unpacked (sparse files count at their full size).
    pub max_bytes: u64,
    /// Whether FIFOs are made (a layer's are part of the image; an archive unpacked
    /// for import has no use for them and leaves them out).
    pub fifos: bool,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_entries: 1_000_000,
            max_bytes: 64 << 30,
            fifos: true,
        }
    }
}

/// Where an unpack gets more room once its grant is spent: the shared accounting of
/// the data dir (`room::RoomGrant`), so that pulls, imports and builds under way at once
/// never take the same free room twice.
pub trait Refill: Send + Sync {
    /// Replaces this writer's grant (spent but for what is passed back) with a new one
    /// of at least `bytes` bytes and `inodes` inodes, more when there is room; the new
    /// grant, or why there is no room for it.
    fn refill(&self, bytes: u64, inodes: u64) -> Result<(u64, u64), String>;
}

/// What one unpack may still take, counted down as it writes: room in the data dir
/// (data blocks and inodes granted by `room`, refilled from it as they run out) and
/// what is left of the image's own caps across its layers (apparent bytes and entries).
#[derive(Clone)]
pub struct Budget {
    pub room_bytes: u64,
    pub room_inodes: u64,
    pub image_bytes: u64,
    pub image_entries: u64,
    /// The shared accounting that grants more room (none: the room is what is left).
    pub room: Option<std::sync::Arc<dyn Refill>>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("room_bytes", &self.room_bytes)
            .field("room_inodes", &self.room_inodes)
            .field("image_bytes", &self.image_bytes)
            .field("image_entries", &self.image_entries)
            .field("shared", &self.room.is_some())
            .finish()
    }
}

impl Budget {
    /// No bound beyond the per-layer limits.
    pub fn unlimited() -> Self {
        Budget {
            room_bytes: u64::MAX,
            room_inodes: u64::MAX,
            image_bytes: u64::MAX,
            image_entries: u64::MAX,
            room: None,
        }
    }

    /// Takes `n` bytes of the data dir's room (refilling the grant if it is short), or
    /// says why there is none.
    pub fn take_bytes(&mut self, n: u64) -> Result<(), String> {
        if self.room_bytes < n {
            if let Some(room) = &self.room {
                let (bytes, inodes) = room.refill(n, self.room_inodes)?;
                self.room_bytes = bytes;
                self.room_inodes = inodes;
            }
        }
        match self.room_bytes.checked_sub(n) {
            Some(left) => {
                self.room_bytes = left;
                Ok(())
            }
            None => Err("it would take room promised to sandboxes or kept as the reserve".into()),
        }
    }

    /// Takes one inode of the data dir's room, like [`Budget::take_bytes`].
    pub fn take_inode(&mut self) -> Result<(), String> {
        if self.room_inodes == 0 {
            if let Some(room) = &self.room {
                let (bytes, inodes) = room.refill(self.room_bytes, 1)?;
                self.room_bytes = bytes;
                self.room_inodes = inodes;
            }
        }
        match self.room_inodes.checked_sub(1) {
            Some(left) => {
                self.room_inodes = left;
                Ok(())
            }
            None => Err("it would take inodes promised to sandboxes or kept as the reserve".into()),
        }
    }

    /// Takes `n` bytes of the data dir's room for `path`.
    fn take_room(&mut self, n: u64, path: &Path) -> Result<(), UnpackError> {
        self.take_bytes(n)
            .map_err(|why| UnpackError::NoRoom(format!("writing {}: {why}", path.display())))
    }
}

/// Bytes of directory blocks an entry's name may take in its parent directory beyond
/// the name itself (an ext4 directory record's header, rounded up).
pub(crate) const DIRENT_OVERHEAD: u64 = 16;

/// Symlink targets at least this long take a data block (shorter ones live in the
/// inode: ext4 keeps up to 59 bytes there, tmpfs up to 127).
pub(crate) const INLINE_SYMLINK: usize = 60;

/// Data blocks are written and charged in units of this (the usual block size): an
/// all-zero unit is left a hole.
pub(crate) const BLOCK: usize = 4096;

/// Why a layer was refused.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("layer entry {path:?}: {why}")]
    Refused { path: String, why: String },
    #[error("layer has more than {0} entries")]
    TooManyEntries(u64),
    #[error("layer unpacks to more than {0} bytes")]
    TooLarge(u64),
    #[error("not enough room in the data dir: {0}")]
    NoRoom(String),
    #[error("the image is too large: {0}")]
    ImageTooLarge(String),
    #[error("reading the layer: {0}")]
    Read(#[source] std::io::Error),
    #[error("layer entry {path:?}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn refused(path: &Path, why: impl Into<String>) -> UnpackError {
    UnpackError::Refused {
        path: path.display().to_string(),
        why: why.into(),
    }
}

/// What was unpacked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    pub entries: u64,
    pub bytes: u64,
    /// Device nodes left out.
    pub devices_skipped: u64,
}

const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// The entry's path as plain relative components; `..`, absolute and empty paths are
/// refused (a leading `./` is fine).
fn clean(path: &Path) -> Result<PathBuf, UnpackError> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => return Err(refused(path, "has a `..` component")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refused(path, "is an absolute path"))
            }
        }
    }
    Ok(out)
}

/// Applies the (decompressed) layer tar `reader` to the empty directory `root`, taking
/// what it writes from `budget`. Zeros are written as holes (a GNU sparse entry's holes
/// and any other all-zero block), so only data takes room.
pub fn unpack(
    reader: impl Read,
    root: &Path,
    limits: UnpackLimits,
    budget: &mut Budget,
) -> Result<Unpacked, UnpackError> {
    let root_fd = fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| UnpackError::Write {
        path: root.display().to_string(),
        source: e.into(),
    })?;
    let mut archive = tar::Archive::new(reader);
    let mut done = Unpacked::default();
    for entry in archive.entries().map_err(UnpackError::Read)? {
        let mut entry = entry.map_err(UnpackError::Read)?;
        done.entries += 1;
        if done.entries > limits.max_entries {
            return Err(UnpackError::TooManyEntries(limits.max_entries));
        }
        let raw = entry.path().map_err(UnpackError::Read)?.into_owned();
        budget.image_entries = budget.image_entries.checked_sub(1).ok_or_else(|| {
            UnpackError::ImageTooLarge("it has more entries than an image may hold".into())
        })?;
        budget
            .take_inode()
            .map_err(|why| UnpackError::NoRoom(format!("making {}: {why}", raw.display())))?;
        let path = clean(&raw)?;
        // Its name's record in its parent directory (many long names grow directories
        // by blocks).
        if let Some(name) = path.file_name() {
            budget.take_room(name.len() as u64 + DIRENT_OVERHEAD, &raw)?;
        }
        let kind = entry.header().entry_type();
        if kind.is_file() || kind == tar::EntryType::GNUSparse {
            let size = entry.size();
            if done.bytes.saturating_add(size) > limits.max_bytes {
                return Err(UnpackError::TooLarge(limits.max_bytes));
            }
            done.bytes += size;
            budget.image_bytes = budget.image_bytes.checked_sub(size).ok_or_else(|| {
                UnpackError::ImageTooLarge(format!(
                    "{} makes it unpack to more than an image may hold",
                    raw.display()
                ))
            })?;
        }
        if kind == tar::EntryType::Directory {
            budget.take_room(BLOCK as u64, &raw)?;
        }
        if kind == tar::EntryType::Symlink {
            // A long target takes data blocks like a file's content.
            let len = entry.link_name_bytes().map_or(0, |target| target.len());
            if len >= INLINE_SYMLINK {
                let blocks = (len.div_ceil(BLOCK) * BLOCK) as u64;
                budget.take_room(blocks, &raw)?;
                budget.image_bytes =
                    budget.image_bytes.checked_sub(len as u64).ok_or_else(|| {
                        UnpackError::ImageTooLarge(format!(
                            "{} makes it unpack to more than an image may hold",
                            raw.display()
                        ))
                    })?;
            }
        }
        if kind == tar::EntryType::Fifo && !limits.fifos {
            continue;
        }
        apply(&root_fd, &path, &raw, &mut entry, &mut done, budget)?;
    }
    Ok(done)
}

/// Opens directory `rel` (relative, clean) below `root`, making missing directories
/// (0755, root-owned) on the way.
/// A path component this layer whited out earlier (`.wh.etc`, then `etc/x`) becomes a
/// directory again, opaque: the whiteout hides the lower layers' `etc`, never this
/// layer's own entries (OCI: a whiteout applies to lower layers only).
fn open_dir(root: &OwnedFd, rel: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match fs::openat2(root, rel, flags, Mode::empty(), RESOLVE) {
        Ok(fd) => return Ok(fd),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {}
        Err(e) => return Err(e.into()),
    }
    let mut dir = fs::openat2(root, ".", flags, Mode::empty(), RESOLVE)?;
    for c in rel.components() {
        let name = c.as_os_str();
        match fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) if is_whiteout(&dir, name) => {
                fs::unlinkat(&dir, name, AtFlags::empty())?;
                fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755))?;
                set_opaque(&dir, name)?;
            }
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        dir = fs::openat2(&dir, name, flags, Mode::empty(), RESOLVE)?;
    }
    Ok(dir)
}

/// Whether `name` in `dir` is an overlay whiteout (a 0:0 character device).
fn is_whiteout(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        fs::FileType::from_raw_mode(st.st_mode) == fs::FileType::CharacterDevice
            && st.st_rdev == fs::makedev(0, 0)
    })
}

/// Directory `name` in `dir`, opened to read (resolved within the layer).
fn open_subdir(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<OwnedFd> {
    fs::openat2(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(Into::into)
}

/// Marks directory `name` in `dir` opaque: the lower layers' entries under it are hidden.
fn set_opaque(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<()> {
    let opened = open_subdir(dir, name)?;
    fs::fsetxattr(
        &opened,
        "trusted.overlay.opaque",
        b"y",
        fs::XattrFlags::empty(),
    )
    .map_err(Into::into)
}

/// Removes whatever is at `name` in `dir` (a directory only when empty is not needed:
/// a non-directory entry replacing a directory removes its tree).
fn remove_existing(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<()> {
    match fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
        Ok(st) if fs::FileType::from_raw_mode(st.st_mode) == fs::FileType::Directory => {
            remove_tree_at(open_subdir(dir, name)?)?;
            fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(Into::into)
        }
        Ok(_) => fs::unlinkat(dir, name, AtFlags::empty()).map_err(Into::into),
    }
}

/// Empties the directory open at `dir` (not following symlinks).
fn remove_tree_at(dir: OwnedFd) -> std::io::Result<()> {
    let mut names = Vec::new();
    for entry in fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsString::from(
                std::ffi::OsStr::from_bytes_compat(name),
            ));
        }
    }
    for name in names {
        remove_existing(&dir, &name)?;
    }
    Ok(())
}

/// `OsStr` from bytes (Unix).
trait FromBytesCompat {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr;
}
impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr {
        std::os::unix::ffi::OsStrExt::from_bytes(b)
    }
}

fn apply<R: Read>(
    root: &OwnedFd,
    path: &Path,
    raw: &Path,
    entry: &mut tar::Entry<'_, R>,
    done: &mut Unpacked,
    budget: &mut Budget,
) -> Result<(), UnpackError> {
    let werr = |e: std::io::Error| match e.raw_os_error() {
        Some(libc::ELOOP) => refused(raw, "goes through a symlink"),
        Some(libc::EXDEV) => refused(raw, "leaves the layer"),
        _ => UnpackError::Write {
            path: raw.display().to_string(),
            source: e,
        },
    };
    let Some(name) = path.file_name() else {
        // The layer's root itself (`./`): keep the directory as made.
        return Ok(());
    };
    let parent = path.parent().unwrap_or(Path::new(""));
    let header = entry.header();
    let kind = header.entry_type();
    let mode = header.mode().map_err(UnpackError::Read)? & 0o7777;
    let uid = header.uid().map_err(UnpackError::Read)?;
    let gid = header.gid().map_err(UnpackError::Read)?;
    let (uid, gid) = match (u32::try_from(uid), u32::try_from(gid)) {
        (Ok(u), Ok(g)) if u < 65536 && g < 65536 => (u, g),
        _ => return Err(refused(raw, "owner id outside 0-65535")),
    };
    let owner = || (Some(fs::Uid::from_raw(uid)), Some(fs::Gid::from_raw(gid)));
    let dir = open_dir(root, parent).map_err(werr)?;
    let name_bytes = std::os::unix::ffi::OsStrExt::as_bytes(name);
    // Whiteouts.
    if name_bytes == b".wh..wh..opq" {
        set_opaque(&dir, std::ffi::OsStr::new(".")).map_err(werr)?;
        return Ok(());
    }
    if let Some(hidden) = name_bytes.strip_prefix(b".wh.") {
        if hidden.starts_with(b".wh.") || hidden.is_empty() {
            return Ok(()); // AUFS metadata (`.wh..wh.plnk`…): nothing to apply
        }
        if hidden == b"." || hidden == b".." {
            return Err(refused(raw, "a whiteout of `.` or `..`"));
        }
        let hidden = std::ffi::OsStr::from_bytes_compat(hidden);
        // This layer's own entry stays (a whiteout hides the lower layers' only): a
        // directory of its own becomes opaque, anything else hides them already.
        match fs::statat(&dir, hidden, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(werr(e.into())),
            Ok(st) if fs::FileType::from_raw_mode(st.st_mode) == fs::FileType::Directory => {
                return set_opaque(&dir, hidden).map_err(werr);
            }
            Ok(_) => return Ok(()),
        }
        fs::mknodat(
            &dir,
            hidden,
            fs::FileType::CharacterDevice,
            Mode::empty(),
            fs::makedev(0, 0),
        )
        .map_err(|e| werr(e.into()))?;
        return Ok(());
    }
    match kind {
        tar::EntryType::Directory => {
            match fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if fs::FileType::from_raw_mode(st.st_mode) == fs::FileType::Directory => {}
                // This layer whited it out first: the lower layers' stays hidden.
                Ok(_) if is_whiteout(&dir, name) => {
                    fs::unlinkat(&dir, name, AtFlags::empty()).map_err(|e| werr(e.into()))?;
                    fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700))
                        .map_err(|e| werr(e.into()))?;
                    set_opaque(&dir, name).map_err(werr)?;
                }
                Ok(_) => {
                    remove_existing(&dir, name).map_err(werr)?;
                    fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700))
                        .map_err(|e| werr(e.into()))?;
                }
                Err(_) => fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700))
                    .map_err(|e| werr(e.into()))?,
            }
            let fd = fs::openat2(
                &dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                RESOLVE,
            )
            .map_err(|e| werr(e.into()))?;
            let (u, g) = owner();
            fs::fchown(&fd, u, g).map_err(|e| werr(e.into()))?;
            fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| werr(e.into()))?;
        }
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
            remove_existing(&dir, name).map_err(werr)?;
            let fd = fs::openat(
                &dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| werr(e.into()))?;
            let file = std::fs::File::from(fd);
            write_sparse(entry, &file, raw, budget)?;
            let (u, g) = owner();
            fs::fchown(file.as_fd(), u, g).map_err(|e| werr(e.into()))?;
            // After chown, which would clear setuid/setgid bits.
            fs::fchmod(file.as_fd(), Mode::from_raw_mode(mode)).map_err(|e| werr(e.into()))?;
        }
        tar::EntryType::Symlink => {
            let target = entry
                .link_name()
                .map_err(UnpackError::Read)?
                .ok_or_else(|| refused(raw, "symlink without a target"))?
                .into_owned();
            remove_existing(&dir, name).map_err(werr)?;
            fs::symlinkat(&target, &dir, name).map_err(|e| werr(e.into()))?;
            let (u, g) = owner();
            fs::chownat(&dir, name, u, g, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| werr(e.into()))?;
        }
        tar::EntryType::Link => {
            let target = entry
                .link_name()
                .map_err(UnpackError::Read)?
                .ok_or_else(|| refused(raw, "hard link without a target"))?
                .into_owned();
            let target = clean(&target).map_err(|_| {
                refused(
                    raw,
                    format!("hard link to {} leaves the layer", target.display()),
                )
            })?;
            let Some(target_name) = target.file_name() else {
                return Err(refused(raw, "hard link to the layer's root"));
            };
            let target_dir = open_dir_existing(root, target.parent().unwrap_or(Path::new("")))
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOENT) => refused(raw, "hard link to a missing file"),
                    _ => werr(e),
                })?;
            if target == path {
                return Ok(());
            }
            remove_existing(&dir, name).map_err(werr)?;
            fs::linkat(&target_dir, target_name, &dir, name, AtFlags::empty()).map_err(
                |e| match e {
                    rustix::io::Errno::NOENT => refused(raw, "hard link to a missing file"),
                    rustix::io::Errno::PERM => refused(raw, "hard link to a directory"),
                    e => werr(e.into()),
                },
            )?;
        }
        tar::EntryType::Fifo => {
            remove_existing(&dir, name).map_err(werr)?;
            fs::mknodat(&dir, name, fs::FileType::Fifo, Mode::from_raw_mode(mode), 0)
                .map_err(|e| werr(e.into()))?;
            let (u, g) = owner();
            fs::chownat(&dir, name, u, g, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| werr(e.into()))?;
        }
        tar::EntryType::Char | tar::EntryType::Block => done.devices_skipped += 1,
        // Metadata entries the tar crate has already folded in, and kinds with no place
        // in a layer.
        _ => {}
    }
    Ok(())
}

/// Copies `src` into the empty `file`, leaving every all-zero block a hole, and takes
/// each block written from `budget`'s room before writing it.
pub(crate) fn write_sparse(
    src: &mut impl Read,
    file: &std::fs::File,
    raw: &Path,
    budget: &mut Budget,
) -> Result<(), UnpackError> {
    use std::os::unix::fs::FileExt;
    let werr = |e: std::io::Error| UnpackError::Write {
        path: raw.display().to_string(),
        source: e,
    };
    let mut buf = vec![0u8; 16 * BLOCK];
    let mut offset = 0u64;
    loop {
        // A full buffer each round (short reads too), so blocks stay aligned to the file.
        let mut n = 0;
        while n < buf.len() {
            match src.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(UnpackError::Read(e)),
            }
        }
        if n == 0 {
            break;
        }
        let mut at = 0;
        while at < n {
            // A run of blocks with data, written in one call.
            let start = at;
            while at < n && buf[at..n.min(at + BLOCK)].iter().any(|&b| b != 0) {
                at = n.min(at + BLOCK);
            }
            if at > start {
                budget.take_room(((at - start).div_ceil(BLOCK) * BLOCK) as u64, raw)?;
                file.write_all_at(&buf[start..at], offset + start as u64)
                    .map_err(werr)?;
            }
            // Then a run of zero blocks: a hole.
            while at < n && buf[at..n.min(at + BLOCK)].iter().all(|&b| b == 0) {
                at = n.min(at + BLOCK);
            }
        }
        offset += n as u64;
        if n < buf.len() {
            break;
        }
    }
    file.set_len(offset).map_err(werr)
}

/// Like [`open_dir`] but never creates anything.
fn open_dir_existing(root: &OwnedFd, rel: &Path) -> std::io::Result<OwnedFd> {
    let rel = match rel.as_os_str().is_empty() {
        true => Path::new("."),
        false => rel,
    };
    fs::openat2(
        root,
        rel,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(Into::into)
}

/// A reader that decompresses gzip or zstd by their magic bytes, or passes a plain tar.
pub fn decompressed<'a>(
    mut reader: impl std::io::BufRead + 'a,
) -> std::io::Result<Box<dyn Read + 'a>> {
    let head = reader.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(reader)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Ok(Box::new(zstd::stream::read::Decoder::with_buffer(reader)?))
    } else {
        Ok(Box::new(reader))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_refuses_parent_and_absolute_paths() {
        assert_eq!(clean(Path::new("./a/b")).expect("ok"), Path::new("a/b"));
        assert!(clean(Path::new("a/../../b")).is_err());
        assert!(clean(Path::new("/etc/passwd")).is_err());
    }
}
