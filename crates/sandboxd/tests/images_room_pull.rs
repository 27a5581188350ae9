//! `sandboxd images pull` from a real registry (Debian's `docker-registry` on loopback,
//! pushed with `skopeo`) into a small data dir (a size-limited tmpfs) takes only the
//! room promised to no sandbox (REVIEW12 #5): a blob larger than that room is refused
//! before it is downloaded, a decompression bomb stops with "not enough room in the
//! data dir" and leaves nothing, and a 300 MiB GNU sparse file arrives as a hole.
//! Long symlink targets take room like file content, and a pull under way keeps the
//! room it was granted from another pull (REVIEW13 #1, #2).

mod registry;

use registry::proxy::Proxy;
use registry::small_disk::{names_in, scratch_left, SmallDisk};
use registry::{random_layers, run, sandboxd, Registry};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

fn hostile(work: &Path, name: &str, kind: &str) -> (PathBuf, String) {
    let out = work.join(name);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images_data/hostile_layout.py");
    let digest = run(Command::new("python3").arg(script).arg(&out).arg(kind));
    (out, digest.trim().to_owned())
}

/// Claims of pulls under way left in the data dir (none once every pull ended).
fn claims_left(data: &Path) -> Vec<String> {
    names_in(&data.join(".room-claims"), |n| !n.starts_with('.'))
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

/// Pulls a hostile layer of `kind` into 48 MiB of room: refused for room, leaving
/// nothing (no scratch, the free space as it was).
fn refused_for_room_leaving_nothing(kind: &str) {
    let disk = SmallDisk::new(160);
    disk.promise_sandbox(48);
    let registry = Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let (layout, _) = hostile(work.path(), "hostile", kind);
    registry.push_layout(&layout, "room/hostile");
    let before = disk.free();
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &registry.reference("room/hostile")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "unpacked past the room: {} MiB free before, {} after",
        before / MIB,
        disk.free() / MIB
    );
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
fn a_decompression_bomb_stops_at_the_promised_room_and_leaves_nothing() {
    refused_for_room_leaving_nothing("fill=80");
}

#[test]
fn long_symlink_targets_take_room_like_file_content() {
    // 16000 symlinks whose 4000-byte targets take a 4 KiB block each (62.5 MiB) in a
    // layer of half a MiB.
    refused_for_room_leaving_nothing("symlinks=16000");
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

#[test]
fn a_pull_under_way_keeps_its_room_from_another_pull() {
    // About 55 MiB of room (200 less 64 the reserve, 48 promised to a sandbox and the
    // database's own reserve file). Pull A's 20 MiB blob is admitted and held
    // mid-download by a proxy; pull B's layer unpacks to 40 MiB: it fits the room
    // alone, not beside A's 20.
    let disk = SmallDisk::new(200);
    disk.promise_sandbox(48);
    let registry = Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let a = random_layers(work.path(), "a", 20, 1);
    registry.push_layout(&a, "room/a");
    let (b, _) = hostile(work.path(), "b", "fill=40");
    registry.push_layout(&b, "room/b");
    let proxy = Proxy::start(registry.port);
    // The manifest and configuration pass; the layer's answer is held.
    let pull_a = registry::pull_held(&proxy, "room/a", &disk.path);
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &registry.reference("room/b")],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    proxy.cut();
    let a_out = pull_a.wait_with_output().expect("wait");
    assert!(
        !out.status.success(),
        "pull B took the room pull A was granted (A: {})",
        String::from_utf8_lossy(&a_out.stderr)
    );
    assert!(err.contains("not enough room in the data dir"), "{err}");
    assert!(err.contains("other pulls, imports and builds"), "{err}");
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
    assert_eq!(claims_left(&disk.path), Vec::<String>::new());
    // With A gone, its room is B's.
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &registry.reference("room/b")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(claims_left(&disk.path), Vec::<String>::new());
}

#[test]
fn a_pull_keeps_the_reserve_of_the_servers_configuration_file() {
    // 160 MiB; the layer unpacks to 20 MiB: it fits beside the default 64 MiB reserve,
    // not beside the 140 MiB `disk_reserve_mb` of the configuration file.
    let disk = SmallDisk::new(160);
    let registry = Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let (layout, _) = hostile(work.path(), "fill", "fill=20");
    registry.push_layout(&layout, "room/reserve");
    let config = work.path().join("sandboxd.toml");
    std::fs::write(&config, "disk_reserve_mb = 140\n").expect("config");
    let reference = registry.reference("room/reserve");
    let config_arg = config.to_string_lossy().into_owned();
    let out = sandboxd(
        &disk.path,
        &["images", "pull", &reference, "--config", &config_arg],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "pulled into the configured reserve");
    assert!(err.contains("not enough room in the data dir"), "{err}");
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
    let out = sandboxd(&disk.path, &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
