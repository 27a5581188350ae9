//! An image import takes only the data dir's room that is promised to no one (REVIEW12
//! #5): bytes and inodes, checked before a blob is copied and while a layer unpacks,
//! with nothing left behind when refused; zeros unpack as holes; the per-image cap
//! counts every layer. Data dirs are small tmpfs mounts (run as root).

mod common;

use common::{layout, noise, scratch_left, tar_of, SmallDisk};
use sandboxd_images::{archive, Images, RoomPolicy};
use std::os::unix::fs::MetadataExt;

const MIB: u64 = 1 << 20;

fn policy() -> RoomPolicy {
    RoomPolicy {
        reserve_mb: 64,
        ..RoomPolicy::default()
    }
}

fn open(disk: &SmallDisk) -> Images {
    let mut images = Images::open(&disk.path).expect("open");
    images.room = policy();
    images
}

#[test]
fn a_decompression_bomb_stops_at_the_room_promised_to_sandboxes_and_leaves_nothing() {
    // 160 MiB: 64 kept as the reserve, 48 promised to a sandbox's disk, 48 free.
    let disk = SmallDisk::new(160, None);
    disk.promise_sandbox("a", 48);
    let images = open(&disk);
    let work = tempfile::tempdir().expect("tempdir");
    // 80 MiB of a non-zero byte: a gzip blob of well under 1 MiB.
    let tar = tar_of(&[("big".into(), vec![b'a'; 80 << 20])]);
    layout(work.path(), &[tar], true, "t/bomb:1");
    let before = disk.free();
    let err = archive::import(&images, work.path(), None).expect_err("must not fit");
    let text = err.to_string();
    assert!(
        text.contains("not enough room in the data dir"),
        "the error says why: {text}"
    );
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
    assert!(
        disk.free() + MIB >= before,
        "the room is all back: {} MiB free before, {} after",
        before / MIB,
        disk.free() / MIB
    );
}

#[test]
fn a_blob_larger_than_the_room_is_refused_before_it_is_copied() {
    let disk = SmallDisk::new(160, None);
    disk.promise_sandbox("a", 48);
    let images = open(&disk);
    let work = tempfile::tempdir().expect("tempdir");
    // 56 MiB that does not compress, stored as a plain tar.
    let tar = tar_of(&[("noise".into(), noise(56 << 20, 7))]);
    layout(work.path(), &[tar], false, "t/noise:1");
    let err = archive::import(&images, work.path(), None).expect_err("must not fit");
    let text = err.to_string();
    assert!(
        text.contains("not enough room in the data dir") && text.contains("blob sha256:"),
        "the blob is refused by its size: {text}"
    );
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
}

#[test]
fn an_image_that_fits_beside_the_promised_room_is_imported() {
    let disk = SmallDisk::new(160, None);
    disk.promise_sandbox("a", 48);
    let images = open(&disk);
    let work = tempfile::tempdir().expect("tempdir");
    let tar = tar_of(&[("noise".into(), noise(8 << 20, 3))]);
    layout(work.path(), &[tar], true, "t/fits:1");
    archive::import(&images, work.path(), None).expect("8 MiB fits in 48");
}

#[test]
fn a_gnu_sparse_entry_unpacks_as_holes() {
    // A 300 MiB file that is one hole, `tar -S`: a layer of a few hundred bytes.
    let disk = SmallDisk::new(160, None);
    let images = open(&disk);
    let work = tempfile::tempdir().expect("tempdir");
    let src = work.path().join("src");
    std::fs::create_dir(&src).expect("mkdir");
    let hole = std::fs::File::create(src.join("hole")).expect("create");
    hole.set_len(300 << 20).expect("truncate");
    let tar_path = work.path().join("sparse.tar");
    let ok = std::process::Command::new("tar")
        .args(["--format=gnu", "-S", "-C"])
        .arg(&src)
        .arg("-cf")
        .arg(&tar_path)
        .arg("hole")
        .status()
        .expect("tar")
        .success();
    assert!(ok);
    let tar = std::fs::read(&tar_path).expect("read");
    let layout_dir = work.path().join("layout");
    layout(&layout_dir, &[tar], true, "t/sparse:1");
    let image = archive::import(&images, &layout_dir, None).expect("a hole takes no room");
    let layer = images.layer_store().path(&image.layers[0]).expect("layer");
    let meta = std::fs::metadata(layer.join("hole")).expect("stat");
    assert_eq!(meta.len(), 300 << 20, "the file keeps its size");
    assert!(
        meta.blocks() * 512 < MIB,
        "the hole is a hole: {} bytes allocated",
        meta.blocks() * 512
    );
}

#[test]
fn entries_past_the_free_inodes_are_refused() {
    // 9000 inodes: the engine's reserve (8192) leaves about 800 for images.
    let disk = SmallDisk::new(64, Some(9000));
    let images = Images::open(&disk.path).map(|mut i| {
        i.room.reserve_mb = 0;
        i
    });
    let images = images.expect("open");
    let work = tempfile::tempdir().expect("tempdir");
    let files: Vec<(String, Vec<u8>)> = (0..2000).map(|i| (format!("f{i}"), vec![])).collect();
    layout(work.path(), &[tar_of(&files)], true, "t/files:1");
    let err = archive::import(&images, work.path(), None).expect_err("must not fit");
    let text = err.to_string();
    assert!(
        text.contains("not enough room in the data dir") && text.contains("inodes"),
        "{text}"
    );
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
}

#[test]
fn the_image_cap_counts_every_layer() {
    let disk = SmallDisk::new(160, None);
    let mut images = open(&disk);
    images.room.max_image_bytes = 3 * MIB;
    let work = tempfile::tempdir().expect("tempdir");
    let layers: Vec<Vec<u8>> = (0..2)
        .map(|i| tar_of(&[(format!("l{i}"), noise(2 << 20, i + 1))]))
        .collect();
    layout(work.path(), &layers, true, "t/two:1");
    let err = archive::import(&images, work.path(), None).expect_err("4 MiB > 3 MiB");
    let text = err.to_string();
    assert!(text.contains("the image is too large"), "{text}");
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
}
