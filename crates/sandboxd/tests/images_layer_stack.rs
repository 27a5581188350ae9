//! An image of hundreds of layers runs whole, on either tier: every layer is in its
//! root, and the root is writable. `mount(2)` takes an overlay's options as one string
//! and the kernel cut it at one page: the lowest layers, the upper dir and the work dir
//! were dropped without an error, and the sandbox ran on a read-only root missing part
//! of its image (an outside audit found it at ~415 layers; the gVisor tier, which names
//! its layers by absolute path, at a few dozen). More layers than the kernel stacks
//! (500) are refused at import, as they were at pull. A layer an image lists twice is
//! stacked once (the overlay refused the same dir twice: ELOOP at every start). A
//! whiteout hides the lower layers' entries only, never its own layer's, whichever
//! comes first in the archive (OCI image spec, "Whiteouts"). An image whose Env no
//! command could carry is refused at import (it imported, and every start failed).

mod registry;

use registry::{many_layers_layout, sandboxd, whiteout_order_layout};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Counts the files of every one-file layer, then writes to the root.
const CHECK: &str = "n=0; for f in /layers/*; do n=$((n+1)); done; echo $n; \
                     echo written > /tmp/x && cat /tmp/x";

/// Runs `script` with bash in image `image` of `data` on each tier (the gVisor one
/// where runsc is installed), and asserts that each succeeds and prints `want`.
fn runs_on_each_tier(data: &Path, image: &str, script: &str, want: &str) {
    let mut tiers = vec!["container"];
    if Command::new("runsc").arg("--version").output().is_ok() {
        tiers.push("gvisor");
    } else {
        eprintln!("runsc not installed: the gVisor tier is not tried");
    }
    for tier in tiers {
        let out = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            // The run's teardown waited for too: the data dir goes right after.
            .args([
                "run",
                "--wait-cleanup",
                "--network",
                "none",
                "--isolation",
                tier,
            ])
            .args(["--image", image, "--data-dir"])
            .arg(data)
            .args(["--", "/usr/bin/bash", "-c", script])
            .output()
            .expect("sandboxd run");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{tier}: {stdout}{stderr}");
        assert_eq!(stdout, want, "{tier}: {stderr}");
    }
}

fn import(data: &Path, layout: &Path, name: &str) -> std::process::Output {
    sandboxd(
        data,
        &["images", "import", layout.to_str().unwrap(), "--name", name],
    )
}

/// A fresh data dir with the layout `make` writes (into a work dir) imported as
/// `name`; both dirs, kept while the test runs.
fn imported(
    name: &str,
    make: impl FnOnce(&Path) -> PathBuf,
) -> (tempfile::TempDir, tempfile::TempDir) {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = make(work.path());
    let data = tempfile::tempdir().expect("tempdir");
    let out = import(data.path(), &layout, name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (work, data)
}

/// The import of the layout `make` writes is refused with a message holding `says`,
/// and stores no image.
fn refused_at_import(make: impl FnOnce(&Path) -> PathBuf, says: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = make(work.path());
    let data = tempfile::tempdir().expect("tempdir");
    let out = import(data.path(), &layout, "local/refused:v1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "imported: {stderr}");
    assert!(stderr.contains(says), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let listed = sandboxd(data.path(), &["images", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed, "", "an image was stored");
}

#[test]
fn an_image_of_450_layers_runs_whole_with_a_writable_root_on_each_tier() {
    let (_work, data) = imported("local/many:v1", |w| {
        many_layers_layout(w, "layouts", 450, None)
    });
    runs_on_each_tier(data.path(), "local/many:v1", CHECK, "450\nwritten\n");
}

#[test]
fn an_image_listing_one_layer_twice_runs_on_each_tier() {
    let (_work, data) = imported("local/twice:v1", |w| {
        many_layers_layout(w, "layouts", 2, Some("dup"))
    });
    runs_on_each_tier(data.path(), "local/twice:v1", CHECK, "2\nwritten\n");
}

#[test]
fn an_image_of_more_layers_than_the_kernel_stacks_is_refused_at_import() {
    // The base and 500 more.
    let many = |w: &Path| many_layers_layout(w, "layouts", 500, None);
    refused_at_import(many, "501 layers (at most 500)");
}

#[test]
fn a_whiteout_hides_lower_layers_only_whichever_comes_first_in_its_layer() {
    let (_work, data) = imported("local/whiteouts:v1", |w| {
        whiteout_order_layout(w, "layouts")
    });
    let list = "for d in /a /b /c; do echo $d: $(cd $d && echo *); done";
    runs_on_each_tier(
        data.path(),
        "local/whiteouts:v1",
        list,
        "/a: new\n/b: new\n/c: new\n",
    );
}

#[test]
fn an_image_whose_env_no_command_could_carry_is_refused_at_import() {
    let big_env = |w: &Path| many_layers_layout(w, "layouts", 1, Some("bigenv"));
    refused_at_import(big_env, "Env holds");
}
