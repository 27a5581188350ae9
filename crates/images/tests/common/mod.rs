//! Shared parts of the images crate's tests: OCI layouts written here (hostile ones
//! too), and small data dirs on a size-limited tmpfs, unmounted when dropped.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `size` (and `nr_inodes`, when given) mounted on a fresh temp dir: the
/// data dir of one test. Unmounted, then removed, when dropped.
pub struct SmallDisk {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn new(size_mb: u64, nr_inodes: Option<u64>) -> SmallDisk {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data");
        std::fs::create_dir(&path).expect("mkdir");
        let mut opts = format!("size={size_mb}m,mode=0700");
        if let Some(n) = nr_inodes {
            opts.push_str(&format!(",nr_inodes={n}"));
        }
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "sandboxd-test"])
            .arg(&path)
            .status()
            .expect("mount")
            .success();
        assert!(ok, "mounting a tmpfs (tests run as root)");
        SmallDisk { path, _dir: dir }
    }

    /// Bytes free on the disk now.
    pub fn free(&self) -> u64 {
        let v = nix::sys::statvfs::statvfs(&self.path).expect("statvfs");
        v.blocks_available() * v.fragment_size()
    }

    /// A sandbox's disk image of `mb` MiB (sparse, as the runtime makes them): room
    /// promised to it.
    pub fn promise_sandbox(&self, name: &str, mb: u64) {
        let dir = self.path.join("sandboxes").join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = std::fs::File::create(dir.join("layer.img")).expect("img");
        f.set_len(mb << 20).expect("truncate");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

fn blob(out: &Path, data: &[u8]) -> (String, usize) {
    let hex = hex::encode(Sha256::digest(data));
    std::fs::write(out.join("blobs/sha256").join(&hex), data).expect("blob");
    (format!("sha256:{hex}"), data.len())
}

/// A layer tar's entries: (path, contents) regular files.
pub fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data.as_slice())
            .expect("append");
    }
    b.into_inner().expect("tar")
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).expect("gzip");
    gz.finish().expect("gzip")
}

/// `n` bytes no compressor shrinks (xorshift).
pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Writes an OCI layout at `out` whose image has `layers` (each a tar, stored gzipped
/// when `gz`), named `name`.
pub fn layout(out: &Path, layers: &[Vec<u8>], gz: bool, name: &str) {
    std::fs::create_dir_all(out.join("blobs/sha256")).expect("mkdir");
    let mut diff_ids = Vec::new();
    let mut descs = Vec::new();
    for tar in layers {
        diff_ids.push(format!("sha256:{}", hex::encode(Sha256::digest(tar))));
        let (digest, size) = match gz {
            true => blob(out, &gzip(tar)),
            false => blob(out, tar),
        };
        let media = match gz {
            true => "application/vnd.oci.image.layer.v1.tar+gzip",
            false => "application/vnd.oci.image.layer.v1.tar",
        };
        descs.push(serde_json::json!({"mediaType": media, "digest": digest, "size": size}));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .expect("json");
    let (cdig, csize) = blob(out, &config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": csize},
        "layers": descs,
    }))
    .expect("json");
    let (mdig, msize) = blob(out, &manifest);
    std::fs::write(out.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("w");
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": mdig, "size": msize,
        "annotations": {"org.opencontainers.image.ref.name": name},
    }]});
    std::fs::write(out.join("index.json"), index.to_string()).expect("w");
}

/// Scratch the store left in its layers dir (`.tmp-*`, not its lock and owner files).
pub fn scratch_left(data_dir: &Path) -> Vec<String> {
    std::fs::read_dir(data_dir.join("layers"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tmp-"))
                .collect()
        })
        .unwrap_or_default()
}
