//! Exporting an image as an OCI archive (`oci-layout`, `index.json`, `blobs/sha256/…`
//! in one tar) that `skopeo copy oci-archive:FILE …` reads. Layers are written as plain
//! tars of their stored directories, overlay whiteouts turned back into OCI ones
//! (`.wh.NAME`, `.wh..wh..opq`). The built-in `default` image exports its skeleton only
//! (the host's /usr it mounts is not part of it).

use crate::store::Images;
use crate::{io, ImageError};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Writer that hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    len: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes image `name` to `out` as an OCI archive tagged `tag`.
pub fn export(images: &Images, name: &str, out: &Path, tag: &str) -> Result<(), ImageError> {
    let image = images.get(name)?;
    let mut blobs = Vec::new(); // (hex, size, temp)
    let mut diff_ids = Vec::new();
    let mut layer_descs = Vec::new();
    for digest in &image.layers {
        let dir = images.layer_store().path(digest)?;
        let (file, temp) = images.temp_file()?;
        let mut w = Hashing {
            inner: std::io::BufWriter::new(file),
            hash: Sha256::new(),
            len: 0,
        };
        layer_tar(&dir, &mut w).map_err(io("writing a layer tar", &dir))?;
        w.flush().map_err(io("writing a layer tar", &temp.path))?;
        let hex = hex::encode(w.hash.finalize());
        diff_ids.push(format!("sha256:{hex}"));
        layer_descs.push(json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{hex}"),
            "size": w.len,
        }));
        blobs.push((hex, w.len, Some(temp)));
    }
    let c = &image.config;
    let mut cfg = serde_json::Map::new();
    if !c.env.is_empty() {
        cfg.insert("Env".into(), json!(c.env));
    }
    if let Some(w) = &c.working_dir {
        cfg.insert("WorkingDir".into(), json!(w));
    }
    if let Some(u) = &c.user {
        cfg.insert("User".into(), json!(u));
    }
    if !c.entrypoint.is_empty() {
        cfg.insert("Entrypoint".into(), json!(c.entrypoint));
    }
    if !c.cmd.is_empty() {
        cfg.insert("Cmd".into(), json!(c.cmd));
    }
    if !c.labels.is_empty() {
        cfg.insert("Labels".into(), json!(c.labels));
    }
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    }))
    .unwrap_or_default();
    let config_hex = hex::encode(Sha256::digest(&config));
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_hex}"),
            "size": config.len(),
        },
        "layers": layer_descs,
    }))
    .unwrap_or_default();
    let manifest_hex = hex::encode(Sha256::digest(&manifest));
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_hex}"),
            "size": manifest.len(),
            "annotations": { "org.opencontainers.image.ref.name": tag },
        }],
    }))
    .unwrap_or_default();

    let tmp_out = out.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    let result = (|| -> std::io::Result<()> {
        let file = std::fs::File::create(&tmp_out)?;
        let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
        let mut add = |path: &str, data: &[u8]| -> std::io::Result<()> {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut h, path, data)
        };
        add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        add("index.json", &index)?;
        add(&format!("blobs/sha256/{manifest_hex}"), &manifest)?;
        add(&format!("blobs/sha256/{config_hex}"), &config)?;
        let mut seen = std::collections::HashSet::new();
        for (hex, size, temp) in &blobs {
            if !seen.insert(hex.clone()) {
                continue;
            }
            let Some(temp) = temp else { continue };
            let mut h = tar::Header::new_ustar();
            h.set_size(*size);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h.set_entry_type(tar::EntryType::Regular);
            tar.append_data(
                &mut h,
                format!("blobs/sha256/{hex}"),
                std::fs::File::open(&temp.path)?,
            )?;
        }
        tar.into_inner()?.flush()
    })();
    match result.and_then(|()| std::fs::rename(&tmp_out, out)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp_out);
            Err(io("writing the archive", out)(e))
        }
    }
}

/// A tar of layer directory `dir` in OCI form, entries in sorted order.
fn layer_tar(dir: &Path, out: impl Write) -> std::io::Result<()> {
    let mut tar = tar::Builder::new(out);
    tar.follow_symlinks(false);
    let walk = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .follow_links(false);
    for entry in walk {
        let entry = entry.map_err(std::io::Error::other)?;
        let path = entry.path();
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let meta = entry.metadata().map_err(std::io::Error::other)?;
        let ft = meta.file_type();
        let mut h = tar::Header::new_gnu();
        h.set_mode(meta.mode() & 0o7777);
        h.set_uid(u64::from(meta.uid()));
        h.set_gid(u64::from(meta.gid()));
        h.set_mtime(0);
        h.set_size(0);
        if ft.is_char_device() && meta.rdev() == 0 {
            // An overlay whiteout: `.wh.NAME` in OCI.
            let name = format!(
                ".wh.{}",
                rel.file_name().unwrap_or_default().to_string_lossy()
            );
            let wh = rel.with_file_name(name);
            h.set_mode(0o600);
            h.set_uid(0);
            h.set_gid(0);
            h.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut h, wh, std::io::empty())?;
        } else if ft.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            tar.append_data(&mut h, rel, std::io::empty())?;
            if xattr_is_set(path, "trusted.overlay.opaque") {
                let mut o = tar::Header::new_gnu();
                o.set_mode(0o600);
                o.set_uid(0);
                o.set_gid(0);
                o.set_mtime(0);
                o.set_size(0);
                o.set_entry_type(tar::EntryType::Regular);
                tar.append_data(&mut o, rel.join(".wh..wh..opq"), std::io::empty())?;
            }
        } else if ft.is_symlink() {
            h.set_entry_type(tar::EntryType::Symlink);
            tar.append_link(&mut h, rel, std::fs::read_link(path)?)?;
        } else if ft.is_file() {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(meta.len());
            tar.append_data(&mut h, rel, std::fs::File::open(path)?)?;
        } else if ft.is_fifo() {
            h.set_entry_type(tar::EntryType::Fifo);
            tar.append_data(&mut h, rel, std::io::empty())?;
        }
    }
    tar.into_inner()?.flush()
}

fn xattr_is_set(path: &Path, name: &str) -> bool {
    let mut buf = [0u8; 8];
    rustix::fs::lgetxattr(path, name, &mut buf).is_ok()
}
