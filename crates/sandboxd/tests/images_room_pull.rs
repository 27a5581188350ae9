//! `sandboxd images pull` from a real registry (Debian's `docker-registry` on loopback,
//! pushed with `skopeo`) into a small data dir (a size-limited tmpfs) takes only the
//! room promised to no sandbox (REVIEW12 #5): a blob larger than that room is refused
//! before it is downloaded, a decompression bomb stops with "not enough room in the
//! data dir" and leaves nothing, and a 300 MiB GNU sparse file arrives as a hole.

mod registry;

use registry::{random_layers, run, sandboxd, Registry};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A tmpfs data dir of `mb` MiB, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(mb: u64) -> SmallDisk {
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
    fn promise_sandbox(&self, mb: u64) {
        let dir = self.path.join("sandboxes").join("s1");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = std::fs::File::create(dir.join("layer.img")).expect("img");
        f.set_len(mb * MIB).expect("truncate");
    }

    /// Free bytes, counting the database's own reserve file (made by the first CLI
    /// command that opens the database) as free.
    fn free(&self) -> u64 {
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

fn hostile(work: &Path, name: &str, kind: &str) -> (PathBuf, String) {
    let out = work.join(name);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images_data/hostile_layout.py");
    let digest = run(Command::new("python3").arg(script).arg(&out).arg(kind));
    (out, digest.trim().to_owned())
}

fn scratch_left(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("layers"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tmp-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_blob_past_the_promised_room_is_not_downloaded() {
    // 160 MiB: 64 the reserve, 48 promised to a sandbox, 48 left; the layer is 56 MiB
    // of random data.
    let disk = SmallDisk::new(160);
    disk.promise_sandbox(48);
    let registry = Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let layout = random_layers(work.path(), "noise", 56, 1);
    registry.push_layout(&layout, "room/noise");
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &registry.reference("room/noise")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "pulled past the room");
    assert!(err.contains("not enough room in the data dir"), "{err}");
    let log = std::fs::read_to_string(&registry.log).unwrap_or_default();
    let blob_gets = log
        .lines()
        .filter(|l| l.contains("\"GET ") && l.contains("/blobs/sha256:"))
        .count();
    assert_eq!(blob_gets, 1, "only the configuration was fetched:\n{log}");
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
}

#[test]
fn a_decompression_bomb_stops_at_the_promised_room_and_leaves_nothing() {
    let disk = SmallDisk::new(160);
    disk.promise_sandbox(48);
    let registry = Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let (layout, _) = hostile(work.path(), "fill", "fill=80");
    registry.push_layout(&layout, "room/fill");
    let before = disk.free();
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &registry.reference("room/fill")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "unpacked past the room");
    assert!(err.contains("not enough room in the data dir"), "{err}");
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
    assert!(
        disk.free() + MIB >= before,
        "{} MiB free before, {} after",
        before / MIB,
        disk.free() / MIB
    );
}

#[test]
fn a_gnu_sparse_layer_is_pulled_as_a_hole() {
    let disk = SmallDisk::new(160);
    let registry = Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let src = work.path().join("src");
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::File::create(src.join("hole"))
        .and_then(|f| f.set_len(300 * MIB))
        .expect("hole");
    let tar = work.path().join("sparse.tar");
    run(Command::new("tar")
        .args(["--format=gnu", "-S", "-C"])
        .arg(&src)
        .arg("-cf")
        .arg(&tar)
        .arg("hole"));
    let (layout, _) = hostile(work.path(), "sparse", &format!("tar={}", tar.display()));
    registry.push_layout(&layout, "room/sparse");
    let before = disk.free();
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &registry.reference("room/sparse")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let holes: Vec<std::fs::Metadata> = std::fs::read_dir(disk.path.join("layers"))
        .expect("layers")
        .flatten()
        .filter_map(|e| std::fs::symlink_metadata(e.path().join("hole")).ok())
        .collect();
    assert_eq!(holes.len(), 1);
    assert_eq!(holes[0].len(), 300 * MIB);
    assert!(
        holes[0].blocks() * 512 < MIB,
        "the hole was written as data"
    );
    assert!(
        before - disk.free() < 8 * MIB,
        "the pull took {} MiB:\n{}",
        (before - disk.free()) / MIB,
        run(Command::new("du").arg("-a").arg(&disk.path))
    );
}
