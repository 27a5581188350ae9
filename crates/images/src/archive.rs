//! Importing image archives: `docker save` tarballs (with `manifest.json`, legacy or
//! OCI-shaped) and OCI image layouts, as a directory or an archive
//! (`skopeo copy … oci-archive:`). An archive is untrusted like a layer: it is unpacked
//! with the same guards into scratch, and every file is opened with `RESOLVE_IN_ROOT`;
//! each blob is verified against its digest (a Docker layer against its config's
//! `diff_id`) before it is unpacked.

use crate::store::{image_config, Images};
use crate::unpack::{self, Budget, UnpackLimits};
use crate::{io, sha256_hex, ImageError};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use sandboxd_runtime::linux::layers::remove_tree;
use sandboxd_runtime::ImageLayers;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Reads files of an unpacked archive without ever leaving it.
struct Root(std::os::fd::OwnedFd, PathBuf);

impl Root {
    fn open(dir: &Path) -> Result<Root, ImageError> {
        let fd = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("opening an archive", dir)(e.into()))?;
        Ok(Root(fd, dir.to_path_buf()))
    }

    /// Opens regular file `rel` of the archive for reading. Opened non-blocking (a FIFO
    /// or a device an archive carries would otherwise block `open` or reads forever,
    /// with the collector lock held), then refused unless it is a regular file.
    /// Symlinks inside the archive (`docker save` links equal layers) resolve below it.
    fn file(&self, rel: &str) -> Result<std::fs::File, ImageError> {
        let fd = rustix::fs::openat2(
            &self.0,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV,
        )
        .map_err(|e| ImageError::Malformed(format!("archive file {rel:?}: {e}")))?;
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| ImageError::Malformed(format!("archive file {rel:?}: {e}")))?;
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        if kind != rustix::fs::FileType::RegularFile {
            return Err(ImageError::Malformed(format!(
                "archive file {rel:?} is not a regular file (a {kind:?})"
            )));
        }
        // Reads of a regular file never block: back to plain blocking reads.
        rustix::fs::fcntl_setfl(&fd, OFlags::RDONLY)
            .map_err(|e| ImageError::Malformed(format!("archive file {rel:?}: {e}")))?;
        Ok(std::fs::File::from(fd))
    }

    /// Whether the archive has an entry `rel` (of any kind: what it is, `file` checks).
    fn exists(&self, rel: &str) -> bool {
        rustix::fs::openat2(
            &self.0,
            rel,
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV,
        )
        .is_ok()
    }

    /// A manifest, index or configuration: refused past the size a pull takes
    /// ([`MAX_ANSWER`](crate::manifest_fetch::MAX_ANSWER)), so that an imported image
    /// is held to what a pulled one is.
    fn read_small(&self, rel: &str) -> Result<Vec<u8>, ImageError> {
        let max = crate::manifest_fetch::MAX_ANSWER;
        let mut out = Vec::new();
        self.file(rel)?
            .take(max + 1)
            .read_to_end(&mut out)
            .map_err(io("reading an archive file", &self.1.join(rel)))?;
        if out.len() as u64 > max {
            return Err(ImageError::Unsupported(format!(
                "{rel} is larger than {max} bytes: refused"
            )));
        }
        Ok(out)
    }

    /// The hex sha256 of file `rel`.
    fn sha256(&self, rel: &str) -> Result<String, ImageError> {
        let mut f = self.file(rel)?;
        let mut h = Sha256::new();
        std::io::copy(&mut f, &mut h).map_err(io("hashing an archive file", &self.1.join(rel)))?;
        Ok(hex::encode(h.finalize()))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

#[derive(Deserialize)]
struct ConfigRootFs {
    rootfs: RootFs,
}

/// Imports the archive or layout at `path`; `name` overrides the name it carries.
pub fn import(images: &Images, path: &Path, name: Option<&str>) -> Result<ImageLayers, ImageError> {
    if path.is_dir() {
        return import_dir(images, &Root::open(path)?, name);
    }
    let scratch = images.scratch_dir()?;
    let result = (|| {
        let file = std::fs::File::open(path).map_err(io("opening", path))?;
        let limits = UnpackLimits {
            max_entries: 100_000,
            max_bytes: images.limits.max_bytes,
            fifos: false,
        };
        // The archive's own unpacking takes room like its layers do.
        let mut budget = images.image_budget()?;
        unpack::unpack(
            unpack::decompressed(std::io::BufReader::new(file)).map_err(io("reading", path))?,
            &scratch,
            limits,
            &mut budget,
        )
        .map_err(|source| crate::store::layer_error(&path.display().to_string(), source))?;
        // Its claim ends here: what it wrote is on the disk now.
        drop(budget);
        import_dir(images, &Root::open(&scratch)?, name)
    })();
    remove_tree(&scratch);
    result
}

fn import_dir(images: &Images, root: &Root, name: Option<&str>) -> Result<ImageLayers, ImageError> {
    if root.exists("manifest.json") {
        return import_docker(images, root, name);
    }
    if root.exists("index.json") {
        return import_oci(images, root, name);
    }
    Err(ImageError::Malformed(
        "neither a docker save archive (manifest.json) nor an OCI layout (index.json)".into(),
    ))
}

fn image_name(carried: Option<String>, name: Option<&str>) -> Result<String, ImageError> {
    let name = name.map(str::to_owned).or(carried).ok_or_else(|| {
        ImageError::Malformed("the archive names no image: give it a name".into())
    })?;
    crate::reference::parse(&name)?;
    Ok(name)
}

/// Verifies layer file `rel` has sha256 `hex` and stores it (once per digest), taking
/// what it writes from `budget`.
fn ingest(
    images: &Images,
    root: &Root,
    rel: &str,
    digest: &str,
    budget: &mut Budget,
) -> Result<String, ImageError> {
    if let Some(layer) = images.layer_for_blob(digest)? {
        return Ok(layer);
    }
    let hex = sha256_hex(digest)?;
    let _lock = images.lock_blob(digest)?;
    if let Some(layer) = images.layer_for_blob(digest)? {
        return Ok(layer);
    }
    // Copied out first, so what is unpacked is what was hashed.
    let mut f = root.file(rel)?;
    let size = f
        .metadata()
        .map_err(io("reading a blob", &root.1.join(rel)))?
        .len();
    images.admit_blob(budget, digest, size)?;
    let (mut out, temp) = images.temp_file()?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io("reading a blob", &temp.path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        std::io::Write::write_all(&mut out, &buf[..n]).map_err(io("copying a blob", &temp.path))?;
    }
    let actual = hex::encode(h.finalize());
    if actual != hex {
        return Err(ImageError::DigestMismatch {
            digest: digest.to_owned(),
            actual,
        });
    }
    drop(out);
    images.ingest_blob(digest, &temp.path, budget)
}

fn import_docker(
    images: &Images,
    root: &Root,
    name: Option<&str>,
) -> Result<ImageLayers, ImageError> {
    let manifests: Vec<DockerManifest> = serde_json::from_slice(&root.read_small("manifest.json")?)
        .map_err(|e| ImageError::Malformed(format!("manifest.json: {e}")))?;
    let [m] = manifests.as_slice() else {
        return Err(ImageError::Unsupported(
            "archives of more than one image".into(),
        ));
    };
    let config_bytes = root.read_small(&m.config)?;
    // The config's file name is its digest (`<hex>.json` or `blobs/sha256/<hex>`).
    let config_hex = hex::encode(Sha256::digest(&config_bytes));
    let stem = Path::new(&m.config)
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.trim_end_matches(".json").to_owned())
        .unwrap_or_default();
    if stem != config_hex {
        return Err(ImageError::DigestMismatch {
            digest: m.config.clone(),
            actual: config_hex,
        });
    }
    let rootfs: ConfigRootFs = serde_json::from_slice(&config_bytes)
        .map_err(|e| ImageError::Malformed(format!("image configuration: {e}")))?;
    crate::manifest_fetch::check_layer_count(m.layers.len())?;
    if rootfs.rootfs.diff_ids.len() != m.layers.len() {
        return Err(ImageError::Malformed(
            "layer count differs from the configuration's diff_ids".into(),
        ));
    }
    let mut layers = Vec::new();
    let mut budget = images.image_budget()?;
    for (rel, diff_id) in m.layers.iter().zip(&rootfs.rootfs.diff_ids) {
        // Layers may be compressed (OCI-shaped saves): the blob digest is the file name.
        let blob = Path::new(rel)
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| sha256_hex(&format!("sha256:{n}")).is_ok())
            .map(|n| format!("sha256:{n}"));
        let digest = match blob {
            Some(d) if root.sha256(rel)? == d["sha256:".len()..] => d,
            _ => diff_id.clone(),
        };
        layers.push(ingest(images, root, rel, &digest, &mut budget)?);
    }
    let mut config = image_config(&config_bytes)?;
    config.manifest_digest = None;
    let carried = m.repo_tags.as_ref().and_then(|t| t.first().cloned());
    images.save_image(&image_name(carried, name)?, layers, config)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: Option<String>,
    digest: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

fn blob(root: &Root, digest: &str) -> Result<Vec<u8>, ImageError> {
    let hex = sha256_hex(digest)?;
    let bytes = root.read_small(&format!("blobs/sha256/{hex}"))?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != hex {
        return Err(ImageError::DigestMismatch {
            digest: digest.to_owned(),
            actual,
        });
    }
    Ok(bytes)
}

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

fn import_oci(images: &Images, root: &Root, name: Option<&str>) -> Result<ImageLayers, ImageError> {
    let mut index: Index = serde_json::from_slice(&root.read_small("index.json")?)
        .map_err(|e| ImageError::Malformed(format!("index.json: {e}")))?;
    let mut carried = None;
    // Nested indexes (multi-platform images) resolve to linux/amd64.
    let manifest = loop {
        let pick = index
            .manifests
            .iter()
            .find(|d| {
                d.platform
                    .as_ref()
                    .is_none_or(|p| p.os == "linux" && p.architecture == "amd64")
            })
            .ok_or_else(|| ImageError::Unsupported("no linux/amd64 image in the index".into()))?;
        if let Some(n) = pick.annotations.get("org.opencontainers.image.ref.name") {
            carried.get_or_insert_with(|| n.clone());
        }
        let bytes = blob(root, &pick.digest)?;
        if pick
            .media_type
            .as_deref()
            .is_some_and(|t| INDEX_TYPES.contains(&t))
        {
            index = serde_json::from_slice(&bytes)
                .map_err(|e| ImageError::Malformed(format!("image index: {e}")))?;
            continue;
        }
        break serde_json::from_slice::<Manifest>(&bytes)
            .map_err(|e| ImageError::Malformed(format!("image manifest: {e}")))?;
    };
    crate::manifest_fetch::check_layer_count(manifest.layers.len())?;
    let config = image_config(&blob(root, &manifest.config.digest)?)?;
    let mut layers = Vec::new();
    let mut budget = images.image_budget()?;
    for d in &manifest.layers {
        let hex = sha256_hex(&d.digest)?;
        layers.push(ingest(
            images,
            root,
            &format!("blobs/sha256/{hex}"),
            &d.digest,
            &mut budget,
        )?);
    }
    images.save_image(&image_name(carried, name)?, layers, config)
}
