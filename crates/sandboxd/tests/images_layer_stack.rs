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
use std::path::Path;
use std::process::Command;

/// Counts the files of every one-file layer, then writes to the root.
const CHECK: &str = "n=0; for f in /layers/*; do n=$((n+1)); done; echo $n; \
                     echo written > /tmp/x && cat /tmp/x";

/// `sandboxd run` of [`CHECK`] in image `image` of `data`, on tier `isolation`.
fn run_check(data: &Path, image: &str, isolation: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args([
            "run",
            "--network",
            "none",
            "--isolation",
            isolation,
            "--image",
            image,
        ])
        .arg("--data-dir")
        .arg(data)
        .args(["--", "/usr/bin/bash", "-c", CHECK])
        .output()
        .expect("sandboxd run");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn import(data: &Path, layout: &Path, name: &str) -> std::process::Output {
    sandboxd(
        data,
        &["images", "import", layout.to_str().unwrap(), "--name", name],
    )
}

#[test]
fn an_image_of_450_layers_runs_whole_with_a_writable_root_on_each_tier() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = many_layers_layout(work.path(), "layouts", 450, None);
    let data = tempfile::tempdir().expect("tempdir");
    let out = import(data.path(), &layout, "local/many:v1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for tier in tiers() {
        let (ok, stdout, stderr) = run_check(data.path(), "local/many:v1", tier);
        assert!(ok, "{tier}: {stdout}{stderr}");
        assert_eq!(stdout, "450\nwritten\n", "{tier}: {stderr}");
    }
}

/// The container tier, and the gVisor tier where runsc is installed.
fn tiers() -> Vec<&'static str> {
    let mut tiers = vec!["container"];
    if Command::new("runsc").arg("--version").output().is_ok() {
        tiers.push("gvisor");
    } else {
        eprintln!("runsc not installed: the gVisor tier is not tried");
    }
    tiers
}

#[test]
fn an_image_listing_one_layer_twice_runs_on_each_tier() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = many_layers_layout(work.path(), "layouts", 2, Some("dup"));
    let data = tempfile::tempdir().expect("tempdir");
    let out = import(data.path(), &layout, "local/twice:v1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for tier in tiers() {
        let (ok, stdout, stderr) = run_check(data.path(), "local/twice:v1", tier);
        assert!(ok, "{tier}: {stdout}{stderr}");
        assert_eq!(stdout, "2\nwritten\n", "{tier}: {stderr}");
    }
}

#[test]
fn an_image_of_more_layers_than_the_kernel_stacks_is_refused_at_import() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = many_layers_layout(work.path(), "layouts", 500, None);
    let data = tempfile::tempdir().expect("tempdir");
    // The base and 500 more.
    let out = import(data.path(), &layout, "local/toomany:v1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "imported: {stderr}");
    assert!(stderr.contains("501 layers (at most 500)"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "",
        "an image was stored"
    );
}

#[test]
fn a_whiteout_hides_lower_layers_only_whichever_comes_first_in_its_layer() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = whiteout_order_layout(work.path(), "layouts");
    let data = tempfile::tempdir().expect("tempdir");
    let out = import(data.path(), &layout, "local/whiteouts:v1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = "for d in /a /b /c; do echo $d: $(cd $d && echo *); done";
    for tier in tiers() {
        let out = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["run", "--network", "none", "--isolation", tier])
            .args(["--image", "local/whiteouts:v1", "--data-dir"])
            .arg(data.path())
            .args(["--", "/usr/bin/bash", "-c", list])
            .output()
            .expect("sandboxd run");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{tier}: {stdout}{stderr}");
        assert_eq!(stdout, "/a: new\n/b: new\n/c: new\n", "{tier}: {stderr}");
    }
}

#[test]
fn an_image_whose_env_no_command_could_carry_is_refused_at_import() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = many_layers_layout(work.path(), "layouts", 1, Some("bigenv"));
    let data = tempfile::tempdir().expect("tempdir");
    let out = import(data.path(), &layout, "local/bigenv:v1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "imported: {stderr}");
    assert!(stderr.contains("Env holds"), "{stderr}");
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "",
        "an image was stored"
    );
}
