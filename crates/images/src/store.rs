//! Verified blobs into stored layers: each compressed blob is unpacked once into the
//! runtime's layer store, and an index maps the blob's digest to its layer, so an image
//! that shares a layer with another needs no second download.
//!
//! Concurrency: one `flock` per blob digest (`layers/.lock-<hex>`) serializes the
//! processes and tasks that want the same blob; the loser finds the index written and
//! downloads nothing. A blob is only unpacked after its digest was verified, into a
//! scratch directory that becomes a layer by one rename; an interruption leaves only
//! scratch, never a stored layer or index entry.
//!
//! Scratch is owned: every open store holds an `flock` on `layers/.owner-<id>` for its
//! life and names its scratch `.tmp-pull-<id>-…`. Opening a store removes the scratch
//! of every owner whose lock is free (a pull that was killed), so the next pull or
//! import after a crash leaves nothing behind; other `.tmp-*` scratch older than a day
//! is swept too.

use crate::room::{self, RoomPolicy};
use crate::unpack::{self, Budget, UnpackLimits};
use crate::{io, sha256_hex, ImageError};
use sandboxd_runtime::linux::file_lock::{How, Locked};
use sandboxd_runtime::linux::images as rt_images;
use sandboxd_runtime::linux::layers::{remove_tree, LayerStore};
use sandboxd_runtime::{ImageConfig, ImageLayers};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The image store of one data directory.
pub struct Images {
    data_dir: PathBuf,
    layers: LayerStore,
    pub limits: UnpackLimits,
    /// What an image may take of the data dir (its room, its own caps).
    pub room: RoomPolicy,
    /// This store's owner id (in its scratch names) and the lock that proves it alive.
    owner: String,
    _owner_lock: Locked,
    /// Shared while this store is open; a prune takes it exclusively, so no pull or
    /// import runs in any process while layers are removed.
    pub(crate) gc_lock: Option<Locked>,
}

const OWNER_PREFIX: &str = ".owner-";
const SCRATCH_PREFIX: &str = ".tmp-pull-";
/// The collector lock, shared with the runtime's starts (they hold it while they pin).
pub(crate) const GC_LOCK: &str = sandboxd_runtime::linux::layer_pins::GC_LOCK;

/// A file that is removed when dropped unless kept.
pub struct TempFile {
    pub path: PathBuf,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        // A clean end leaves no owner file (a killed one is swept by the next open).
        let _ = std::fs::remove_file(
            self.layers_dir()
                .join(format!("{OWNER_PREFIX}{}", self.owner)),
        );
    }
}

impl Images {
    pub fn open(data_dir: &Path) -> Result<Self, ImageError> {
        let layers = LayerStore::new(data_dir)?;
        let dir = data_dir.join("layers");
        let gc_lock = gc_lock(&dir)?;
        sweep_dead_owners(&dir);
        let (owner, lock) = take_owner(&dir)?;
        let images = Images {
            data_dir: data_dir.to_path_buf(),
            layers,
            limits: UnpackLimits::default(),
            room: RoomPolicy::from_env()?,
            owner,
            _owner_lock: lock,
            gc_lock: Some(gc_lock),
        };
        // Image-made files (setuid programs of a pulled image) lie below: root only.
        sandboxd_runtime::linux::private_dir::ensure(&images.data_dir.join("images"))?;
        std::fs::create_dir_all(images.index_dir())
            .map_err(io("creating the blob index", &images.index_dir()))?;
        images.sweep_stale_scratch();
        Ok(images)
    }

    /// A fresh scratch directory of this owner in the layer store (same filesystem).
    pub fn scratch_dir(&self) -> Result<PathBuf, ImageError> {
        // What a pull or build writes must stay out of other users' reach: refused when
        // the store's chain from `/` is no longer root's alone (see `secure_chain`).
        sandboxd_runtime::linux::secure_chain::check(&self.layers_dir())?;
        let path = self.layers_dir().join(format!(
            "{SCRATCH_PREFIX}{}-{}",
            self.owner,
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir(&path).map_err(io("creating a scratch layer", &path))?;
        Ok(path)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn layer_store(&self) -> &LayerStore {
        &self.layers
    }

    pub(crate) fn layers_dir(&self) -> PathBuf {
        self.data_dir.join("layers")
    }

    pub(crate) fn index_dir(&self) -> PathBuf {
        self.data_dir.join("images").join("blobs")
    }

    /// Removes `.tmp-*` scratch (files and directories) a crashed pull left a day ago.
    fn sweep_stale_scratch(&self) {
        let Ok(entries) = std::fs::read_dir(self.layers_dir()) else {
            return;
        };
        let day = std::time::Duration::from_secs(86_400);
        for entry in entries.flatten() {
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if stale && entry.file_name().to_string_lossy().starts_with(".tmp-") {
                let path = entry.path();
                if path.is_dir() {
                    remove_tree(&path);
                } else {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }

    /// A fresh scratch file in the layer store's directory (same filesystem).
    pub fn temp_file(&self) -> Result<(std::fs::File, TempFile), ImageError> {
        let path = self.layers_dir().join(format!(
            "{SCRATCH_PREFIX}{}-blob-{}",
            self.owner,
            uuid::Uuid::new_v4()
        ));
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io("creating a download file", &path))?;
        Ok((file, TempFile { path }))
    }

    /// The stored layer blob `digest` was unpacked into, if it is still there.
    pub fn layer_for_blob(&self, digest: &str) -> Result<Option<String>, ImageError> {
        let hex = sha256_hex(digest)?;
        let Ok(layer) = std::fs::read_to_string(self.index_dir().join(hex)) else {
            return Ok(None);
        };
        let layer = layer.trim().to_owned();
        Ok(self.layers.path(&layer).is_ok().then_some(layer))
    }

    /// Takes the lock of blob `digest` (blocking until other holders are done).
    pub fn lock_blob(&self, digest: &str) -> Result<Locked, ImageError> {
        let hex = sha256_hex(digest)?;
        let path = self.layers_dir().join(format!(".lock-{hex}"));
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("opening a blob lock", &path))?;
        Locked::lock(file, How::Exclusive).map_err(|(_, e)| ImageError::Io {
            what: "locking blob",
            path,
            source: e,
        })
    }

    /// A fresh budget for one image (or build): its caps, and a claim of no room yet
    /// in the data dir's shared accounting (granted as it writes).
    pub fn image_budget(&self) -> Result<Budget, ImageError> {
        Ok(Budget {
            room_bytes: 0,
            room_inodes: 0,
            image_bytes: self.room.max_image_bytes,
            image_entries: self.room.max_image_entries,
            room: Some(std::sync::Arc::new(room::RoomGrant::new(
                &self.data_dir,
                self.room,
            )?)),
        })
    }

    /// Takes the room of a blob of `size` bytes about to be downloaded or copied into
    /// the store from `budget`, or refuses it when it would take room promised to
    /// others.
    pub fn admit_blob(
        &self,
        budget: &mut Budget,
        digest: &str,
        size: u64,
    ) -> Result<(), ImageError> {
        budget
            .take_bytes(size)
            .and_then(|()| budget.take_inode())
            .map_err(|why| {
                room::no_room(format!(
                    "blob {digest} is {} MiB: {why}",
                    size.div_ceil(1 << 20)
                ))
            })
    }

    /// Unpacks the verified layer blob `file` (gzip, zstd or plain tar) into the layer
    /// store and records it under `digest`; returns the stored layer's digest. What it
    /// writes comes out of the image's `budget` (the data dir's shared room).
    pub fn ingest_blob(
        &self,
        digest: &str,
        file: &Path,
        budget: &mut Budget,
    ) -> Result<String, ImageError> {
        let hex = sha256_hex(digest)?;
        let reader = std::fs::File::open(file).map_err(io("opening a blob", file))?;
        let scratch = self.scratch_dir()?;
        let unpacked = unpack::decompressed(std::io::BufReader::new(reader))
            .map_err(|source| ImageError::Layer {
                digest: digest.to_owned(),
                source: unpack::UnpackError::Read(source),
            })
            .and_then(|r| {
                unpack::unpack(r, &scratch, self.limits, budget)
                    .map_err(|source| layer_error(digest, source))
            });
        let unpacked = match unpacked {
            Ok(u) => u,
            Err(e) => {
                remove_tree(&scratch);
                return Err(e);
            }
        };
        if unpacked.devices_skipped > 0 {
            tracing::warn!(
                blob = digest,
                count = unpacked.devices_skipped,
                "device nodes left out"
            );
        }
        let layer = self.layers.commit(&scratch)?;
        self.write_index(hex, &layer.digest)?;
        Ok(layer.digest)
    }

    fn write_index(&self, hex: &str, layer: &str) -> Result<(), ImageError> {
        let path = self.index_dir().join(hex);
        let tmp = self
            .index_dir()
            .join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        let mut f = std::fs::File::create(&tmp).map_err(io("writing the blob index", &tmp))?;
        f.write_all(layer.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io("writing the blob index", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("writing the blob index", &path))
    }

    /// The layer every image gets on top: real directories for the mount points the
    /// sandbox's init mounts on (`/proc`, `/sys`, `/dev`), whatever the image has there
    /// (an overlay directory above a lower symlink hides it), and with `workspace`, an
    /// empty `/workspace` as the built-in image has (the working directory a Runzivo
    /// command gets by default; merged with the image's own if it has that directory).
    pub fn mount_point_layer(&self) -> Result<String, ImageError> {
        self.top_layer(true)
    }

    /// [`Images::mount_point_layer`], with `/workspace` or without.
    fn top_layer(&self, workspace: bool) -> Result<String, ImageError> {
        let scratch = self.scratch_dir()?;
        let dirs = [("proc", 0o555), ("sys", 0o555), ("dev", 0o755)];
        let extra = workspace.then_some(("workspace", 0o755));
        for (name, mode) in dirs.into_iter().chain(extra) {
            let path = scratch.join(name);
            std::fs::create_dir(&path)
                .and_then(|()| {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                })
                .map_err(io("making a mount point", &path))?;
        }
        Ok(self.layers.commit(&scratch)?.digest)
    }

    /// Whether an image over `layers` (lowest first) may get a `/workspace` directory:
    /// unless its topmost entry of that name is something else (a file, a symlink, a
    /// whiteout), which a directory above would hide.
    fn workspace_fits(&self, layers: &[String]) -> bool {
        for layer in layers.iter().rev() {
            let Ok(dir) = self.layers.path(layer) else {
                continue;
            };
            if let Ok(meta) = dir.join("workspace").symlink_metadata() {
                return meta.is_dir();
            }
        }
        true
    }

    /// Records image `name` over `layers` (lowest first; the mount-point layer is added
    /// on top) with `config`.
    pub fn save_image(
        &self,
        name: &str,
        mut layers: Vec<String>,
        config: ImageConfig,
    ) -> Result<ImageLayers, ImageError> {
        let workspace = self.workspace_fits(&layers);
        layers.push(self.top_layer(workspace)?);
        let image = ImageLayers {
            name: name.to_owned(),
            layers,
            config,
            host_usr: false,
        };
        rt_images::store_image(&self.data_dir, &self.layers, &image)?;
        Ok(image)
    }

    /// Every stored image (the built-in one once it was first used).
    pub fn list(&self) -> Vec<ImageLayers> {
        rt_images::list_images(&self.data_dir, &self.layers)
    }

    /// Image `name` (any spelling of a stored reference, or `default`).
    pub fn get(&self, name: &str) -> Result<ImageLayers, ImageError> {
        Ok(rt_images::resolve(&self.data_dir, &self.layers, name)?)
    }

    /// Bytes of file content in `layer`'s directory.
    pub fn layer_size(&self, layer: &str) -> u64 {
        let Ok(dir) = self.layers.path(layer) else {
            return 0;
        };
        walk_size(&dir)
    }
}

/// An unpack's failure: short of room is said as such, anything else is the layer's.
pub(crate) fn layer_error(digest: &str, source: unpack::UnpackError) -> ImageError {
    match source {
        unpack::UnpackError::NoRoom(why) => {
            room::no_room(format!("unpacking layer {digest}: {why}"))
        }
        unpack::UnpackError::ImageTooLarge(why) => {
            ImageError::TooLarge(format!("unpacking layer {digest}: {why}"))
        }
        source => ImageError::Layer {
            digest: digest.to_owned(),
            source,
        },
    }
}

/// The prune lock of the layer store `dir`, shared (waiting while a prune runs).
fn gc_lock(dir: &Path) -> Result<Locked, ImageError> {
    let path = dir.join(GC_LOCK);
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("opening the prune lock", &path))?;
    Locked::lock(file, How::Shared).map_err(|(_, e)| ImageError::Io {
        what: "locking",
        path,
        source: e,
    })
}

/// Creates this process's owner file, locked before it gets its name (so no sweeper
/// ever sees it unlocked while its owner lives).
fn take_owner(dir: &Path) -> Result<(String, Locked), ImageError> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let temp = dir.join(format!(".tmp-owner-{id}"));
    let file = std::fs::File::options()
        .create_new(true)
        .write(true)
        .open(&temp)
        .map_err(io("creating an owner lock", &temp))?;
    let lock = Locked::lock(file, How::ExclusiveNow).map_err(|(_, e)| ImageError::Io {
        what: "locking an owner file",
        path: temp.clone(),
        source: e,
    })?;
    let path = dir.join(format!("{OWNER_PREFIX}{id}"));
    std::fs::rename(&temp, &path).map_err(io("naming an owner lock", &path))?;
    Ok((id, lock))
}

/// Removes the scratch of every owner whose lock is free (its process is gone), then
/// its owner file.
fn sweep_dead_owners(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    for name in &names {
        let Some(id) = name.strip_prefix(OWNER_PREFIX) else {
            continue;
        };
        let path = dir.join(name);
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        let Ok(_lock) = Locked::lock(file, How::ExclusiveNow) else {
            continue; // alive
        };
        let prefix = format!("{SCRATCH_PREFIX}{id}-");
        for scratch in names.iter().filter(|n| n.starts_with(&prefix)) {
            let p = dir.join(scratch);
            match p.is_dir() {
                true => remove_tree(&p),
                false => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}

pub(crate) fn walk_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    total
}

/// The config fields sandboxd keeps from an OCI (or Docker) image configuration JSON.
/// The most bytes an image's `Env` may hold in all: every command of its sandboxes
/// carries it (with the request's own, itself bounded to 64 KiB, and the workspace's
/// secrets) to the agent, which takes a request of 1 MiB at most.
pub const MAX_IMAGE_ENV_BYTES: usize = 256 << 10;

/// Refuses an `Env` no command could be started with ([`MAX_IMAGE_ENV_BYTES`]): it
/// was stored, and every start of the image then failed.
fn check_env(env: &[String]) -> Result<(), ImageError> {
    let total: usize = env.iter().map(|e| e.len() + 1).sum();
    if total > MAX_IMAGE_ENV_BYTES {
        return Err(ImageError::Unsupported(format!(
            "an image whose Env holds {total} bytes (at most {MAX_IMAGE_ENV_BYTES})"
        )));
    }
    Ok(())
}

pub fn image_config(json: &[u8]) -> Result<ImageConfig, ImageError> {
    let parsed: oci_spec::image::ImageConfiguration = serde_json::from_slice(json)
        .map_err(|e| ImageError::Malformed(format!("image configuration: {e}")))?;
    let mut out = ImageConfig::default();
    if let Some(c) = parsed.config() {
        out.env = c.env().clone().unwrap_or_default();
        check_env(&out.env)?;
        out.working_dir = c.working_dir().clone().filter(|w| w.starts_with('/'));
        out.user = c.user().clone().filter(|u| !u.is_empty());
        out.entrypoint = c.entrypoint().clone().unwrap_or_default();
        out.cmd = c.cmd().clone().unwrap_or_default();
        out.labels = c.labels().clone().unwrap_or_default().into_iter().collect();
    }
    Ok(out)
}
