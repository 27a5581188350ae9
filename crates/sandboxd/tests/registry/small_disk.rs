//! A size-limited tmpfs as a data dir, for tests of what the data dir's room allows.

#![allow(dead_code)]

use super::run;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A tmpfs data dir of `mb` MiB, unmounted when dropped.
pub struct SmallDisk {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn new(mb: u64) -> SmallDisk {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data");
        std::fs::create_dir(&path).expect("mkdir");
        run(Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mb}m,mode=0700"),
                "sandboxd-test",
            ])
            .arg(&path));
        SmallDisk { path, _dir: dir }
    }

    /// A sandbox disk image of `mb` MiB (sparse): room promised to that sandbox.
    pub fn promise_sandbox(&self, mb: u64) {
        let dir = self.path.join("sandboxes").join("s1");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = std::fs::File::create(dir.join("layer.img")).expect("img");
        f.set_len(mb * MIB).expect("truncate");
    }

    /// Free bytes, counting the database's own reserve file (made by the first CLI
    /// command that opens the database) as free.
    pub fn free(&self) -> u64 {
        let v = nix::sys::statvfs::statvfs(&self.path).expect("statvfs");
        let reserve = std::fs::metadata(self.path.join("sandboxd.db.reserve"))
            .map(|m| m.blocks() * 512)
            .unwrap_or(0);
        v.blocks_available() * v.fragment_size() + reserve
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Names in `dir` that `keep` keeps (none when there is no `dir`).
pub fn names_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| keep(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Scratch a pull, import or build left in the layer store of `data`.
pub fn scratch_left(data: &Path) -> Vec<String> {
    names_in(&data.join("layers"), |n| n.starts_with(".tmp-"))
}
