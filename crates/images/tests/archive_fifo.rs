//! Import reads only regular files of an archive (REVIEW12 #7): a `manifest.json`,
//! `index.json` or blob that is a FIFO is refused by name instead of blocking `open`
//! forever with the collector lock held.

mod common;

use common::{layout, tar_of};
use sandboxd_images::{archive, Images};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// Imports `path` on a thread; a hang (the old behaviour) fails the test after a long
/// wait instead of blocking it forever (a hang detector, not a timing assertion).
fn import(data: &Path, path: PathBuf) -> String {
    let data = data.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let images = Images::open(&data).expect("open");
        let _ = tx.send(archive::import(&images, &path, Some("t/fifo:1")).map(|_| ()));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(Err(e)) => chain(&e),
        Ok(Ok(())) => panic!("an archive with a FIFO was imported"),
        Err(_) => panic!("the import hung on a FIFO"),
    }
}

/// The error with its causes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

#[test]
fn a_tar_whose_manifest_is_a_fifo_is_refused_by_name() {
    // The archive's FIFO is left out when it is unpacked: no manifest.json is found.
    let work = tempfile::tempdir().expect("tempdir");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Fifo);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(0);
    b.append_data(&mut h, "manifest.json", std::io::empty())
        .expect("append");
    let tar = work.path().join("fifo.tar");
    std::fs::write(&tar, b.into_inner().expect("tar")).expect("write");
    let data = work.path().join("data");
    let text = import(&data, tar);
    assert!(
        text.contains("manifest.json") && text.contains("neither a docker save archive"),
        "{text}"
    );
}

#[test]
fn a_layout_whose_index_is_a_fifo_is_refused_by_name() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("layout");
    layout(
        &dir,
        &[tar_of(&[("a".into(), b"a".to_vec())])],
        true,
        "t/a:1",
    );
    std::fs::remove_file(dir.join("index.json")).expect("rm");
    mkfifo(&dir.join("index.json"));
    let text = import(&work.path().join("data"), dir);
    assert!(
        text.contains("index.json") && text.contains("not a regular file"),
        "{text}"
    );
}

#[test]
fn a_layout_whose_layer_blob_is_a_fifo_is_refused_by_name() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("layout");
    let tar = tar_of(&[("a".into(), b"a".to_vec())]);
    layout(&dir, std::slice::from_ref(&tar), false, "t/a:1");
    let hex = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&tar))
    };
    let blob = dir.join("blobs/sha256").join(&hex);
    std::fs::remove_file(&blob).expect("rm");
    mkfifo(&blob);
    let text = import(&work.path().join("data"), dir);
    assert!(
        text.contains(&hex) && text.contains("not a regular file"),
        "{text}"
    );
}
