//! Pulls that race or die: two pulls of one image at once download each layer once
//! (counted in the registry's access log) and both succeed; a pull killed with SIGKILL
//! mid-download leaves scratch only, which the next pull removes before it succeeds.

mod registry;

use registry::{big_layout, layer_store_leftovers, manifest_layers, sandboxd, Registry};
use std::process::{Command, Stdio};

fn pull_child(data: &std::path::Path, reference: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["images", "pull", reference, "--data-dir"])
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandboxd images pull")
}

#[test]
fn concurrent_pulls_download_each_layer_once() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = big_layout(work.path());
    let registry = Registry::start();
    registry.push_layout(&layout, "test/big:v1");
    let reference = registry.reference("test/big:v1");
    let layers = manifest_layers(&reference);
    assert_eq!(layers.len(), 4);
    let before: Vec<usize> = layers.iter().map(|d| registry.blob_gets(d)).collect();
    let data = tempfile::tempdir().expect("tempdir");
    let a = pull_child(data.path(), &reference);
    let b = pull_child(data.path(), &reference);
    for child in [a, b] {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (digest, before) in layers.iter().zip(before) {
        assert_eq!(
            registry.blob_gets(digest) - before,
            1,
            "layer {digest} was downloaded more than once"
        );
    }
    assert_eq!(layer_store_leftovers(data.path()), Vec::<String>::new());
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&reference));
}

#[test]
fn a_killed_pull_leaves_nothing_half_stored_and_the_next_one_succeeds() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = big_layout(work.path());
    let registry = Registry::start();
    registry.push_layout(&layout, "test/big:v1");
    let reference = registry.reference("test/big:v1");
    let data = tempfile::tempdir().expect("tempdir");
    let mut child = pull_child(data.path(), &reference);
    // Kill it as soon as it has scratch: mid-download or mid-unpack.
    let layers_dir = data.path().join("layers");
    loop {
        let scratch = std::fs::read_dir(&layers_dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(".tmp-pull-"))
            })
            .unwrap_or(false);
        if scratch {
            break;
        }
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the pull ended before it was killed"
        );
        std::thread::yield_now();
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    assert!(
        !layer_store_leftovers(data.path()).is_empty(),
        "the killed pull left no scratch to clean"
    );
    // Nothing half-stored: no image record.
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&reference));

    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(layer_store_leftovers(data.path()), Vec::<String>::new());
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&reference));
}
