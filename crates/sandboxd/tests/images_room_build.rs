//! `sandboxd templates build` into a small data dir (a size-limited tmpfs): a COPY
//! takes the data dir's room as a pulled layer does (REVIEW13 #4). A source larger
//! than the room is refused with "not enough room in the data dir" and leaves nothing;
//! a sparse source arrives as a hole.

mod registry;

use registry::small_disk::{scratch_left, SmallDisk};
use registry::text;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

const MIB: u64 = 1 << 20;

/// Builds template `name` from `context/Dockerfile` into data dir `data`.
fn build(data: &Path, name: &str, context: &Path) -> Output {
    let file = context.join("Dockerfile");
    Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["templates", "build", name, "--file"])
        .arg(&file)
        .env("SANDBOXD_DATA_DIR", data)
        .env_remove("SANDBOXD_KEY")
        .output()
        .expect("sandboxd")
}

/// A build context holding `big`, written by `make`, and a Dockerfile that copies it.
fn context(make: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    make(&dir.path().join("big"));
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM default\nCOPY big /big\n",
    )
    .expect("Dockerfile");
    dir
}

#[test]
fn a_copy_larger_than_the_room_is_refused_and_leaves_nothing() {
    // 160 MiB: 64 the reserve, 32 the database's own reserve file; the source is 80
    // MiB of random data.
    let disk = SmallDisk::new(160);
    let ctx = context(|big| {
        let mut data = vec![0u8; (80 * MIB) as usize];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for chunk in data.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(big, data).expect("big");
    });
    let before = disk.free();
    let out = build(&disk.path, "bigcopy", ctx.path());
    assert!(
        !out.status.success(),
        "copied past the room: {} MiB free before, {} after",
        before / MIB,
        disk.free() / MIB
    );
    assert!(
        text(&out).contains("not enough room in the data dir"),
        "{}",
        text(&out)
    );
    assert_eq!(scratch_left(&disk.path), Vec::<String>::new());
    assert!(
        disk.free() + 2 * MIB >= before,
        "{} MiB free before, {} after",
        before / MIB,
        disk.free() / MIB
    );
}

#[test]
fn a_sparse_copy_source_is_copied_as_a_hole() {
    let disk = SmallDisk::new(160);
    let ctx = context(|big| {
        std::fs::File::create(big)
            .and_then(|f| f.set_len(1 << 30))
            .expect("hole");
    });
    let out = build(&disk.path, "holecopy", ctx.path());
    assert!(out.status.success(), "{}", text(&out));
    let copied: Vec<std::fs::Metadata> = std::fs::read_dir(disk.path.join("layers"))
        .expect("layers")
        .flatten()
        .filter_map(|e| std::fs::symlink_metadata(e.path().join("big")).ok())
        .collect();
    assert_eq!(copied.len(), 1);
    assert_eq!(copied[0].len(), 1 << 30);
    assert!(
        copied[0].blocks() * 512 < MIB,
        "the hole was written as data"
    );
}
