//! Images: named layer stacks. The built-in `default` image is one generated base layer
//! (root skeleton and a minimal /etc) that is mounted with the host's /usr bound read-only
//! on top, so it needs no download.

use super::io;
use super::layers::{remove_tree, LayerStore};
use crate::{ImageLayers, RuntimeError};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// Name of the built-in image.
pub const DEFAULT_IMAGE: &str = "default";

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n";
const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
const NSSWITCH: &str = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n";
const PROFILE: &str = "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/sandboxd/bin\nif [ -n \"$BASH_VERSION\" ] && [ -f /etc/bash.bashrc ]; then . /etc/bash.bashrc; fi\n";
const BASHRC: &str = "PS1='\\u@\\h:\\w\\$ '\n";
/// Empty directories of the root skeleton, with their modes.
const DIRS: [(&str, u32); 18] = [
    ("usr", 0o755),
    ("proc", 0o555),
    ("sys", 0o555),
    ("dev", 0o755),
    ("tmp", 0o1777),
    ("root", 0o700),
    ("home", 0o755),
    ("run", 0o755),
    ("var", 0o755),
    ("var/tmp", 0o1777),
    ("workspace", 0o755),
    ("opt", 0o755),
    ("opt/sandboxd", 0o755),
    ("opt/sandboxd/bin", 0o755),
    ("mnt", 0o755),
    ("etc", 0o755),
    ("etc/ld.so.conf.d", 0o755),
    ("etc/alternatives", 0o755),
];
/// Top-level names that a merged-/usr host makes symlinks into /usr.
const USR_LINKS: [&str; 5] = ["bin", "lib", "lib64", "sbin", "libx32"];

/// The record file of image `name` under `data_dir/images/`: the name with `%` and `/`
/// percent-encoded (references like `host:5000/team/app:1.4` are names too).
fn record_path(data_dir: &Path, name: &str) -> PathBuf {
    let file: String = name
        .chars()
        .map(|c| match c {
            '%' => "%25".to_owned(),
            '/' => "%2F".to_owned(),
            c => c.to_string(),
        })
        .collect();
    data_dir.join("images").join(format!("{file}.json"))
}

/// Names an image may be stored under: not empty, no control characters, and never
/// one of the special directory names.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 512
        && name != "."
        && name != ".."
        && !name.chars().any(char::is_control)
}

fn read_record(data_dir: &Path, store: &LayerStore, name: &str) -> Option<ImageLayers> {
    if !valid_name(name) {
        return None;
    }
    let text = std::fs::read_to_string(record_path(data_dir, name)).ok()?;
    let image = serde_json::from_str::<ImageLayers>(&text).ok()?;
    image
        .layers
        .iter()
        .all(|d| store.path(d).is_ok())
        .then_some(image)
}

/// Stores (or replaces) the record of an image whose layers are all in `store`.
pub fn store_image(
    data_dir: &Path,
    store: &LayerStore,
    image: &ImageLayers,
) -> Result<(), RuntimeError> {
    if !valid_name(&image.name) || image.name == DEFAULT_IMAGE {
        return Err(RuntimeError::UnknownImage(image.name.clone()));
    }
    for digest in &image.layers {
        store.path(digest)?;
    }
    save(&record_path(data_dir, &image.name), image)
}

/// Every stored image record (whose layers are all present), by name.
pub fn list_images(data_dir: &Path, store: &LayerStore) -> Vec<ImageLayers> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("images")) else {
        return Vec::new();
    };
    let mut images: Vec<ImageLayers> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            (path.extension()? == "json").then_some(())?;
            let text = std::fs::read_to_string(&path).ok()?;
            let image = serde_json::from_str::<ImageLayers>(&text).ok()?;
            image
                .layers
                .iter()
                .all(|d| store.path(d).is_ok())
                .then_some(image)
        })
        .collect();
    images.sort_by(|a, b| a.name.cmp(&b.name));
    images
}

/// Other spellings of a registry reference that images are stored under: Docker Hub's
/// short forms (`python:3.12` is `docker.io/library/python:3.12`) and an implied
/// `:latest`.
fn reference_spellings(name: &str) -> Vec<String> {
    let (path, pin) = match name.split_once('@') {
        Some((p, d)) => (p, Some(d)),
        None => (name, None),
    };
    let last = path.rsplit('/').next().unwrap_or(path);
    let (repo, tag) = match (last.rsplit_once(':'), pin) {
        (Some(_), _) | (None, Some(_)) => (path.to_owned(), String::new()),
        (None, None) => (path.to_owned(), ":latest".to_owned()),
    };
    let suffix = match pin {
        Some(d) => format!("{tag}@{d}"),
        None => tag,
    };
    let first = repo.split('/').next().unwrap_or("");
    let has_registry =
        repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut out = vec![format!("{repo}{suffix}")];
    if !has_registry {
        let full = match repo.contains('/') {
            true => format!("docker.io/{repo}{suffix}"),
            false => format!("docker.io/library/{repo}{suffix}"),
        };
        out.push(full);
    }
    out.retain(|n| n != name);
    out
}

/// Removes the record of stored image `name` (any spelling of its reference); returns
/// the name it was stored under. Its layers stay until a prune finds them unused.
pub fn remove_image(
    data_dir: &Path,
    store: &LayerStore,
    name: &str,
) -> Result<String, RuntimeError> {
    if name == DEFAULT_IMAGE {
        return Err(RuntimeError::UnknownImage(name.to_string()));
    }
    let image = resolve(data_dir, store, name)?;
    let record = record_path(data_dir, &image.name);
    std::fs::remove_file(&record).map_err(io("removing an image record", &record))?;
    Ok(image.name)
}

/// Resolves `name` to its layers from the image records alone (any spelling of its
/// reference; the built-in image by its own name only): `None` when no record has it,
/// the built-in image not built yet included.
/// Reads only: for checks on a data dir that may be going away.
pub fn recorded(data_dir: &Path, store: &LayerStore, name: &str) -> Option<ImageLayers> {
    if let Some(image) = read_record(data_dir, store, name) {
        return Some(image);
    }
    // The built-in image is only ever itself (`default:latest` is another image).
    if name == DEFAULT_IMAGE {
        return None;
    }
    reference_spellings(name)
        .iter()
        .find_map(|n| read_record(data_dir, store, n))
}

/// Resolves `name` to its layers, building the built-in image on first use.
pub fn resolve(
    data_dir: &Path,
    store: &LayerStore,
    name: &str,
) -> Result<ImageLayers, RuntimeError> {
    if let Some(image) = recorded(data_dir, store, name) {
        return Ok(image);
    }
    if name != DEFAULT_IMAGE {
        return Err(RuntimeError::UnknownImage(name.to_string()));
    }
    let record = record_path(data_dir, name);
    let scratch = store.scratch()?;
    if let Err(e) = build_base(&scratch, Path::new("/")) {
        remove_tree(&scratch);
        return Err(e);
    }
    let layer = store.commit(&scratch)?;
    let image = ImageLayers {
        name: name.to_string(),
        layers: vec![layer.digest],
        host_usr: true,
        ..Default::default()
    };
    save(&record, &image)?;
    Ok(image)
}

fn save(record: &Path, image: &ImageLayers) -> Result<(), RuntimeError> {
    let dir = record.parent().unwrap_or(Path::new("."));
    // Root only, as the other stores (the records name layers; see `private_dir`).
    super::private_dir::ensure(dir)?;
    let tmp = record.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    let text = serde_json::to_vec_pretty(image).unwrap_or_default();
    std::fs::write(&tmp, text).map_err(io("writing an image record", &tmp))?;
    std::fs::rename(&tmp, record).map_err(io("writing an image record", record))
}

/// Writes the default image's base layer into `dir`, taking library config from `host`.
pub fn build_base(dir: &Path, host: &Path) -> Result<(), RuntimeError> {
    for (name, mode) in DIRS {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).map_err(io("creating a base directory", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io("setting a base mode", &path))?;
    }
    for name in USR_LINKS {
        if let Ok(target) = std::fs::read_link(host.join(name)) {
            symlink(&target, dir.join(name)).map_err(io("linking into /usr", &dir.join(name)))?;
        }
    }
    // Debian's python-is-python3, which the host's /usr cannot carry (it is read-only).
    if host.join("usr/bin/python3").exists() && !host.join("usr/bin/python").exists() {
        let link = dir.join("opt/sandboxd/bin/python");
        symlink("/usr/bin/python3", &link).map_err(io("linking python", &link))?;
    }
    let etc = dir.join("etc");
    for (name, text) in [
        ("passwd", PASSWD),
        ("group", GROUP),
        ("hostname", "sandbox\n"),
        ("hosts", HOSTS),
        ("resolv.conf", ""),
        ("nsswitch.conf", NSSWITCH),
        ("profile", PROFILE),
        ("bash.bashrc", BASHRC),
    ] {
        std::fs::write(etc.join(name), text).map_err(io("writing base /etc", &etc.join(name)))?;
        std::fs::set_permissions(etc.join(name), std::fs::Permissions::from_mode(0o644))
            .map_err(io("setting a base mode", &etc.join(name)))?;
    }
    let host_etc = host.join("etc");
    for name in ["ld.so.cache", "ld.so.conf"] {
        copy_if_present(&host_etc.join(name), &etc.join(name))?;
    }
    copy_dir_entries(&host_etc.join("ld.so.conf.d"), &etc.join("ld.so.conf.d"))?;
    copy_dir_entries(&host_etc.join("alternatives"), &etc.join("alternatives"))?;
    if let Ok(target) = std::fs::read_link(host_etc.join("os-release")) {
        symlink(target, etc.join("os-release")).map_err(io("linking os-release", &etc))?;
    }
    Ok(())
}

/// Copies regular files (content, mode 0644) and symlinks from `from` into `to`.
fn copy_dir_entries(from: &Path, to: &Path) -> Result<(), RuntimeError> {
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    for src in names {
        let Some(name) = src.file_name() else {
            continue;
        };
        copy_if_present(&src, &to.join(name))?;
    }
    Ok(())
}

fn copy_if_present(src: &Path, dst: &Path) -> Result<(), RuntimeError> {
    let Ok(meta) = std::fs::symlink_metadata(src) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(src).map_err(io("reading a host symlink", src))?;
        symlink(target, dst).map_err(io("copying a host symlink", dst))?;
    } else if meta.is_file() {
        std::fs::copy(src, dst).map_err(io("copying a host file", src))?;
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o644))
            .map_err(io("setting a base mode", dst))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_image_is_built_once_and_is_deterministic() {
        let data = tempfile::tempdir().expect("tempdir");
        let store = LayerStore::new(data.path()).expect("store");
        let first = resolve(data.path(), &store, DEFAULT_IMAGE).expect("default");
        assert_eq!(first.layers.len(), 1);
        let base = store.path(&first.layers[0]).expect("layer");
        assert!(std::fs::read_to_string(base.join("etc/passwd"))
            .expect("passwd")
            .starts_with("root:x:0:0"));
        assert!(!base.join("etc/shadow").exists());
        let mode = std::fs::metadata(base.join("tmp"))
            .expect("tmp")
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o1777);
        std::fs::remove_file(data.path().join("images/default.json")).expect("rm record");
        assert_eq!(
            resolve(data.path(), &store, DEFAULT_IMAGE).expect("again"),
            first
        );
        assert!(matches!(
            resolve(data.path(), &store, "nope"),
            Err(RuntimeError::UnknownImage(_))
        ));
    }

    #[test]
    fn stored_images_resolve_by_reference_spellings() {
        let data = tempfile::tempdir().expect("tempdir");
        let store = LayerStore::new(data.path()).expect("store");
        let base = resolve(data.path(), &store, DEFAULT_IMAGE).expect("default");
        for name in [
            "docker.io/library/python:3.12",
            "127.0.0.1:5000/team/app:latest",
        ] {
            let image = ImageLayers {
                name: name.into(),
                layers: base.layers.clone(),
                ..Default::default()
            };
            store_image(data.path(), &store, &image).expect("store");
        }
        assert_eq!(
            resolve(data.path(), &store, "python:3.12")
                .expect("short")
                .name,
            "docker.io/library/python:3.12"
        );
        assert_eq!(
            resolve(data.path(), &store, "127.0.0.1:5000/team/app")
                .expect("implied latest")
                .name,
            "127.0.0.1:5000/team/app:latest"
        );
        let names: Vec<String> = list_images(data.path(), &store)
            .into_iter()
            .map(|i| i.name)
            .collect();
        assert_eq!(names.len(), 3);
        assert!(resolve(data.path(), &store, "../default").is_err());
        let bad = ImageLayers {
            name: "x".into(),
            layers: vec!["0".repeat(64)],
            ..Default::default()
        };
        assert!(store_image(data.path(), &store, &bad).is_err());
    }
}
