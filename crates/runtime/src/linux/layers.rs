//! The content-addressed layer store under `data_dir/layers/<sha256>/` (plain directories).
//!
//! A layer's digest is the sha256 of a canonical tar stream of its tree: entries in
//! byte-sorted path order, each with its type, mode (incl. setuid/setgid/sticky), uid,
//! gid, size, content, link target, device numbers (overlay whiteouts are 0:0 char
//! devices) and `trusted.overlay.opaque` as a PAX xattr. Modification times are written
//! as 0: they are not part of a layer's identity, so equal trees dedup.
//!
//! A regular file with holes (SEEK_DATA/SEEK_HOLE) is hashed as a GNU sparse 0.1 entry:
//! PAX `GNU.sparse.size` (its length) and `GNU.sparse.map` (`offset,length,...` of its
//! data runs), then only the data runs' bytes, so that hashing costs what the file
//! stores. A file without holes is hashed as before (existing layers keep their
//! digests); a file whose zeros are written, not holes, hashes unlike its sparse twin.
//!
//! A layer is made in scratch (`.tmp-<uuid>`, a [`Scratch`]) and renamed into place. A
//! scratch dir is `flock`ed by its maker while it lives, so opening a store removes the
//! scratch a killed process left (its lock went with it) and never one a live process
//! (a server, a `sandboxd run` or a CLI build on the same data dir) is filling.

use super::io;
use super::sparse;
use crate::{Cancel, Layer, RuntimeError};
use rustix::fs::{flock, FlockOperation};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Writer that only hashes.
struct HashWriter(Sha256);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The layer directory store.
pub struct LayerStore {
    root: PathBuf,
}

/// A scratch directory in the store, locked against sweeps while this value lives
/// (derefs to its path).
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    _lock: std::fs::File,
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

const SCRATCH_PREFIX: &str = ".tmp-";

impl LayerStore {
    /// Opens (makes, root only) the store of `data_dir` and removes dead scratch.
    pub fn new(data_dir: &Path) -> Result<Self, RuntimeError> {
        let root = data_dir.join("layers");
        super::private_dir::ensure(&root)?;
        let store = LayerStore { root };
        store.sweep_dead_scratch();
        Ok(store)
    }

    /// The store of `data_dir` as it is, for lookups only: nothing made, nothing swept.
    pub(crate) fn existing(data_dir: &Path) -> Self {
        LayerStore {
            root: data_dir.join("layers"),
        }
    }

    /// The store's own dir, `flock`ed: held shared while a scratch dir is made and
    /// locked, exclusively while a sweep picks the dead ones (so it never takes a dir made
    /// but not yet locked). The dir itself, not a lock file in it: the store holds layers
    /// and scratch only.
    fn scratch_lock(&self, op: FlockOperation) -> Result<std::fs::File, RuntimeError> {
        let path = &self.root;
        let dir = std::fs::File::open(path).map_err(io("opening the layer store", path))?;
        flock(&dir, op).map_err(|e| io("locking the layer store", path)(e.into()))?;
        Ok(dir)
    }

    /// Removes the `.tmp-<uuid>` scratch no live process holds (a capture or pull
    /// killed mid-way); returns how many went.
    pub fn sweep_dead_scratch(&self) -> usize {
        let dead: Vec<(PathBuf, std::fs::File)> = {
            let Ok(_sweeping) = self.scratch_lock(FlockOperation::LockExclusive) else {
                return 0;
            };
            let Ok(entries) = std::fs::read_dir(&self.root) else {
                return 0;
            };
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
                        .is_some_and(|id| uuid::Uuid::try_parse(id).is_ok())
                })
                .filter_map(|e| {
                    let dir = std::fs::File::open(e.path()).ok()?;
                    flock(&dir, FlockOperation::NonBlockingLockExclusive).ok()?;
                    Some((e.path(), dir))
                })
                .collect()
        };
        for (path, _held) in &dead {
            tracing::info!(scratch = %path.display(), "removing a layer scratch dir a killed process left");
            remove_tree(path);
        }
        dead.len()
    }

    /// Directory of a stored layer, or `UnknownLayer`.
    pub fn path(&self, digest: &str) -> Result<PathBuf, RuntimeError> {
        let valid = digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        let path = self.root.join(digest);
        if valid && path.is_dir() {
            Ok(path)
        } else {
            Err(RuntimeError::UnknownLayer(digest.to_string()))
        }
    }

    /// A fresh scratch directory inside the store (same filesystem, for atomic renames),
    /// locked against sweeps until dropped. Refused when the store's chain from `/` is no
    /// longer root's alone (an ancestor loosened or given away since start-up): what a
    /// capture writes, setuid programs included, must stay out of other users' reach.
    pub fn scratch(&self) -> Result<Scratch, RuntimeError> {
        if super::secure_chain::check(&self.root)? != super::secure_chain::Reach::Whole {
            return Err(io("opening the layer store", &self.root)(
                std::io::ErrorKind::NotFound.into(),
            ));
        }
        let _making = self.scratch_lock(FlockOperation::LockShared)?;
        let path = self
            .root
            .join(format!("{SCRATCH_PREFIX}{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&path).map_err(io("creating a scratch layer", &path))?;
        let locked = std::fs::File::open(&path).and_then(|dir| {
            flock(&dir, FlockOperation::NonBlockingLockExclusive)?;
            Ok(dir)
        });
        match locked {
            Ok(lock) => Ok(Scratch { path, _lock: lock }),
            Err(e) => {
                remove_tree(&path);
                Err(io("locking a scratch layer", &path)(e))
            }
        }
    }

    /// Digests `dir` and moves it into the store (dropping it if that layer exists).
    pub fn commit(&self, dir: &Path) -> Result<Layer, RuntimeError> {
        self.commit_until(dir, &Cancel::new())
    }

    /// [`LayerStore::commit`], given up (`dir` left to the caller) once `cancel` is set
    /// before the layer is in the store.
    pub fn commit_until(&self, dir: &Path, cancel: &Cancel) -> Result<Layer, RuntimeError> {
        let (digest, size_bytes) = digest_tree_until(dir, cancel)?;
        cancel.check().map_err(io("storing a layer", dir))?;
        let target = self.root.join(&digest);
        if target.exists() {
            remove_tree(dir);
        } else if let Err(e) = std::fs::rename(dir, &target) {
            // A concurrent commit of the same content wins the rename; ours is redundant.
            remove_tree(dir);
            if !target.exists() {
                return Err(RuntimeError::Io {
                    what: "storing a layer",
                    path: target,
                    source: e,
                });
            }
        }
        Ok(Layer { digest, size_bytes })
    }

    /// Removes a stored layer; a missing one is fine.
    pub fn delete(&self, digest: &str) -> Result<(), RuntimeError> {
        match self.path(digest) {
            Ok(path) => std::fs::remove_dir_all(&path).map_err(io("deleting a layer", &path)),
            Err(_) => Ok(()),
        }
    }
}

/// Best-effort recursive removal of a scratch tree.
pub fn remove_tree(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// sha256 of the canonical tar stream of `dir`, and the bytes its regular files store
/// (their data runs: holes are not counted).
pub fn digest_tree(dir: &Path) -> Result<(String, u64), RuntimeError> {
    digest_tree_until(dir, &Cancel::new())
}

/// [`digest_tree`], stopped with an `Interrupted` error once `cancel` is set.
pub fn digest_tree_until(dir: &Path, cancel: &Cancel) -> Result<(String, u64), RuntimeError> {
    let mut builder = tar::Builder::new(HashWriter(Sha256::new()));
    let mut size = 0u64;
    let walk = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .follow_links(false);
    for entry in walk {
        let entry = entry.map_err(|e| RuntimeError::Io {
            what: "walking a layer",
            path: dir.to_path_buf(),
            source: e.into(),
        })?;
        let path = entry.path();
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let meta = entry.metadata().map_err(|e| RuntimeError::Io {
            what: "reading a layer entry",
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        cancel.check().map_err(io("hashing a layer", dir))?;
        append_entry(&mut builder, path, rel, &meta, &mut size, cancel)
            .map_err(io("hashing a layer entry", path))?;
    }
    let hasher = builder.into_inner().map_err(io("hashing a layer", dir))?;
    Ok((hex::encode(hasher.0.finalize()), size))
}

fn append_entry(
    builder: &mut tar::Builder<HashWriter>,
    path: &Path,
    rel: &Path,
    meta: &std::fs::Metadata,
    size: &mut u64,
    cancel: &Cancel,
) -> std::io::Result<()> {
    let ft = meta.file_type();
    // A regular file's data runs (all of it when it has no holes).
    let file = match ft.is_file() {
        true => {
            let file = std::fs::File::open(path)?;
            let runs = sparse::data_runs(&file, meta.len(), cancel)?;
            Some((file, runs))
        }
        false => None,
    };
    let holed = file
        .as_ref()
        .filter(|(_, runs)| !sparse::is_dense(runs, meta.len()))
        .map(|(_, runs)| sparse_pax(runs, meta.len()));
    let opaque = xattr_value(path, "trusted.overlay.opaque");
    let mut pax: Vec<(&str, Vec<u8>)> = Vec::new();
    if let Some((map, real)) = holed {
        pax.push(("GNU.sparse.map", map.into_bytes()));
        pax.push(("GNU.sparse.size", real.into_bytes()));
    }
    if let Some(value) = opaque {
        pax.push(("SCHILY.xattr.trusted.overlay.opaque", value));
    }
    if !pax.is_empty() {
        builder.append_pax_extensions(pax.iter().map(|(k, v)| (*k, v.as_slice())))?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_mode(meta.mode() & 0o7777);
    header.set_uid(u64::from(meta.uid()));
    header.set_gid(u64::from(meta.gid()));
    header.set_mtime(0);
    header.set_size(0);
    if ft.is_symlink() {
        header.set_entry_type(tar::EntryType::Symlink);
        builder.append_link(&mut header, rel, std::fs::read_link(path)?)?;
    } else if let Some((file, runs)) = &file {
        let stored: u64 = runs.iter().map(|r| r.1).sum();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(stored);
        *size += stored;
        builder.append_data(
            &mut header,
            rel,
            sparse::RunsReader::new(file, runs, cancel),
        )?;
    } else {
        header.set_entry_type(match () {
            _ if ft.is_dir() => tar::EntryType::Directory,
            _ if ft.is_char_device() => tar::EntryType::Char,
            _ if ft.is_block_device() => tar::EntryType::Block,
            _ if ft.is_fifo() => tar::EntryType::Fifo,
            _ => return Ok(()), // sockets have no place in a layer
        });
        let rdev = meta.rdev();
        header.set_device_major(libc::major(rdev))?;
        header.set_device_minor(libc::minor(rdev))?;
        builder.append_data(&mut header, rel, std::io::empty())?;
    }
    Ok(())
}

/// PAX `GNU.sparse.map` and `GNU.sparse.size` values of a file of `len` bytes whose
/// data lies in `runs`.
fn sparse_pax(runs: &[(u64, u64)], len: u64) -> (String, String) {
    let map: Vec<String> = runs.iter().map(|(o, l)| format!("{o},{l}")).collect();
    (map.join(","), len.to_string())
}

/// Value of one extended attribute of `path` (not following symlinks), if set.
fn xattr_value(path: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 256];
    // SAFETY: valid C strings and a buffer of the length passed.
    let n = unsafe {
        libc::lgetxattr(
            cpath.as_ptr(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_stable_and_content_sensitive() {
        let a = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(a.path().join("etc")).expect("mkdir");
        std::fs::write(a.path().join("etc/x"), "hello").expect("write");
        std::os::unix::fs::symlink("usr/bin", a.path().join("bin")).expect("symlink");
        let (d1, size) = digest_tree(a.path()).expect("digest");
        assert_eq!(size, 5);
        assert_eq!(d1.len(), 64);
        // mtimes do not matter
        let f = std::fs::File::options()
            .write(true)
            .open(a.path().join("etc/x"))
            .expect("open");
        f.set_modified(std::time::SystemTime::UNIX_EPOCH)
            .expect("mtime");
        assert_eq!(digest_tree(a.path()).expect("digest").0, d1);
        std::fs::write(a.path().join("etc/x"), "hellO").expect("write");
        assert_ne!(digest_tree(a.path()).expect("digest").0, d1);
    }

    #[test]
    fn a_sparse_file_hashes_its_data_not_its_length_and_dense_digests_stay() {
        let a = tempfile::tempdir().expect("tempdir");
        // A file without holes hashes as a plain tar entry of its bytes, as before.
        std::fs::write(a.path().join("x"), "hello").expect("write");
        let (dense, _) = digest_tree(a.path()).expect("digest");
        let meta = std::fs::metadata(a.path().join("x")).expect("meta");
        let mut b = tar::Builder::new(HashWriter(Sha256::new()));
        let mut h = tar::Header::new_gnu();
        h.set_mode(meta.mode() & 0o7777);
        h.set_uid(u64::from(meta.uid()));
        h.set_gid(u64::from(meta.gid()));
        h.set_mtime(0);
        h.set_size(5);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, "x", &b"hello"[..]).expect("append");
        let old = hex::encode(b.into_inner().expect("finish").0.finalize());
        assert_eq!(
            dense, old,
            "the digest of a tree without holes is unchanged"
        );
        let big = std::fs::File::create(a.path().join("big")).expect("create");
        big.set_len(1 << 40).expect("1 TiB, all hole");
        std::os::unix::fs::FileExt::write_all_at(&big, b"data", 1 << 30).expect("write");
        big.sync_all().expect("sync");
        let (sparse, size) = digest_tree(a.path()).expect("digest");
        assert!(size < 1 << 20, "stored bytes, not the length: {size}");
        std::os::unix::fs::FileExt::write_all_at(&big, b"Data", 1 << 30).expect("write");
        assert_ne!(digest_tree(a.path()).expect("digest").0, sparse);
        let cancel = Cancel::new();
        cancel.cancel();
        assert!(digest_tree_until(a.path(), &cancel).is_err());
    }

    #[test]
    fn opening_a_store_sweeps_dead_scratch_and_keeps_live_and_foreign_scratch() {
        let data = tempfile::tempdir().expect("tempdir");
        let store = LayerStore::new(data.path()).expect("store");
        let live = store.scratch().expect("scratch");
        std::fs::write(live.join("f"), "kept").expect("write");
        // What a killed capture leaves: its dir, no lock.
        let dead = data
            .path()
            .join("layers")
            .join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dead.join("sub")).expect("dead scratch");
        // The image store's own scratch (swept by its owner locks) is not ours.
        let pull = data.path().join("layers/.tmp-pull-x-y");
        std::fs::create_dir(&pull).expect("pull scratch");
        let reopened = LayerStore::new(data.path()).expect("reopen");
        assert!(!dead.exists(), "dead scratch kept");
        assert!(live.join("f").exists(), "live scratch swept");
        assert!(pull.exists(), "the image store's scratch swept");
        assert_eq!(reopened.sweep_dead_scratch(), 0);
        drop(live);
        assert_eq!(
            reopened.sweep_dead_scratch(),
            1,
            "a dropped, uncommitted scratch"
        );
    }

    #[test]
    fn commit_dedups_equal_trees() {
        let data = tempfile::tempdir().expect("tempdir");
        let store = LayerStore::new(data.path()).expect("store");
        let mut digests = Vec::new();
        for _ in 0..2 {
            let dir = store.scratch().expect("scratch");
            std::fs::write(dir.join("f"), "same").expect("write");
            digests.push(store.commit(&dir).expect("commit"));
            assert!(!dir.exists());
        }
        assert_eq!(digests[0], digests[1]);
        assert!(store.path(&digests[0].digest).is_ok());
        store.delete(&digests[0].digest).expect("delete");
        assert!(matches!(
            store.path(&digests[0].digest),
            Err(RuntimeError::UnknownLayer(_))
        ));
    }
}
