//! OCI images end to end with real parts: Debian's `docker-registry` on a loopback port
//! (storage in a temp dir), layouts written by `images_data/make_layouts.py` and pushed
//! with `skopeo`, pulled with `sandboxd images pull`, run through the Runzivo dialect;
//! hostile layers refused with nothing written outside; a corrupted blob refused;
//! `skopeo`'s oci-archive imported and our export read back by skopeo.

mod registry;
mod runzivo_api;

use registry::{run, sandboxd, Registry};
use runzivo_api::Server;
use serde_json::json;
use std::path::Path;
use std::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn pulled_image_runs_with_its_files_env_and_whiteouts() {
    let (_work, outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/app:v1");
    let s = Server::start(30);
    let reference = registry.reference("test/app:v1");
    let out = sandboxd(s.data_dir(), &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = sandboxd(s.data_dir(), &["images", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&reference));

    let view = s.create_with(&json!({ "image": reference })).await;
    let id = view["id"].as_str().expect("id");
    let got = s
        .sh(
            id,
            "cat /etc/greeting; echo \"var=$IMAGE_VAR\"; \
             test -e /etc/gone || echo gone-hidden; ls /opq; \
             test -e /olddir || echo dir-hidden; \
             test -e /usr/bin/python3 || echo no-host-usr",
        )
        .await;
    assert_eq!(
        got,
        "hello from the image\nvar=from-image\ngone-hidden\nnew\ndir-hidden\nno-host-usr\n"
    );

    // By digest, and the same layers are not stored twice.
    let layers_before = std::fs::read_dir(s.data_dir().join("layers"))
        .unwrap()
        .count();
    let manifest = run(Command::new("skopeo").args([
        "inspect",
        "--tls-verify=false",
        "--format",
        "{{.Digest}}",
        &format!("docker://{reference}"),
    ]));
    let pinned = format!("{}@{}", registry.reference("test/app"), manifest.trim());
    let out = sandboxd(s.data_dir(), &["images", "pull", &pinned]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(s.data_dir().join("layers"))
            .unwrap()
            .count(),
        layers_before
    );

    // An unknown image is the client's mistake.
    let reply = s
        .json(
            "POST",
            &s.path(""),
            &json!({ "image": "127.0.0.1:1/nope:v1" }),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.json());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn hostile_layers_are_refused_and_write_nothing_outside() {
    let (_work, outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    let data = tempfile::tempdir().expect("tempdir");
    let hostname = std::fs::read("/etc/hostname").ok();
    for (case, why) in [
        ("dotdot", "`..` component"),
        ("absolute", "absolute path"),
        ("symlink", "through a symlink"),
        ("hardlink", "leaves the layer"),
        ("sparse", "unpacks to more than"),
    ] {
        let name = format!("hostile/{case}:v1");
        registry.push_layout(&layouts.join(format!("hostile-{case}")), &name);
        let out = sandboxd(data.path(), &["images", "pull", &registry.reference(&name)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case} was pulled");
        assert!(err.contains(why), "{case}: {err}");
        // Also as an archive import.
        let out = sandboxd(
            data.path(),
            &[
                "images",
                "import",
                layouts.join(format!("hostile-{case}")).to_str().unwrap(),
                "--name",
                &name,
            ],
        );
        assert!(!out.status.success(), "{case} was imported");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert_eq!(std::fs::read("/etc/hostname").ok(), hostname);
    // Nothing stored: no image, no layer, no scratch.
    let list = sandboxd(data.path(), &["images", "list"]);
    assert_eq!(String::from_utf8_lossy(&list.stdout), "");
    let left: Vec<String> = std::fs::read_dir(data.path().join("layers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with(".lock-"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn a_blob_that_does_not_match_its_digest_is_refused() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/corrupt:v1");
    // Corrupt the big blob (the base layer, as skopeo compressed it) in the registry's
    // storage, keeping its length.
    let blobs = registry.root.join("docker/registry/v2/blobs/sha256");
    let mut corrupted = 0;
    for prefix in std::fs::read_dir(&blobs).expect("blobs").flatten() {
        for blob in std::fs::read_dir(prefix.path())
            .expect("blob dir")
            .flatten()
        {
            let data = blob.path().join("data");
            let mut bytes = std::fs::read(&data).expect("stored blob");
            if bytes.len() > 100_000 {
                let last = bytes.len() - 1;
                bytes[last] ^= 0xff;
                std::fs::write(&data, bytes).expect("corrupt");
                corrupted += 1;
            }
        }
    }
    assert_eq!(corrupted, 1);
    let data = tempfile::tempdir().expect("tempdir");
    let out = sandboxd(
        data.path(),
        &["images", "pull", &registry.reference("test/corrupt:v1")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("does not match its digest"), "{err}");
    let left: Vec<String> = std::fs::read_dir(data.path().join("layers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with(".lock-"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
    // No blob index entry and no image record either.
    let indexed = std::fs::read_dir(data.path().join("images/blobs"))
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    assert_eq!(indexed, 0);
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "");
}

#[test]
fn skopeo_archives_import_and_exports_read_back() {
    let (work, _outside, layouts) = registry::test_layouts();
    let archive = work.path().join("app.tar");
    run(Command::new("skopeo").args([
        "copy",
        &format!("oci:{}:v1", layouts.join("good").display()),
        &format!("oci-archive:{}:local/app:v1", archive.display()),
    ]));
    let data = tempfile::tempdir().expect("tempdir");
    let out = sandboxd(
        data.path(),
        &["images", "import", archive.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("local/app:v1"));

    let exported = work.path().join("out.tar");
    let out = sandboxd(
        data.path(),
        &[
            "images",
            "export",
            "local/app:v1",
            exported.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspected = run(Command::new("skopeo").args([
        "inspect",
        "--config",
        &format!("oci-archive:{}", exported.display()),
    ]));
    let config: serde_json::Value = serde_json::from_str(&inspected).expect("config json");
    assert_eq!(config["config"]["Env"][0], "IMAGE_VAR=from-image");
    assert_eq!(config["config"]["WorkingDir"], "/srv/app");
    // Round trip: the export imports again, to the same layers.
    let again = tempfile::tempdir().expect("tempdir");
    let out = sandboxd(
        again.path(),
        &[
            "images",
            "import",
            exported.to_str().unwrap(),
            "--name",
            "local/again:v1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = layer_dirs(data.path());
    assert_eq!(layer_dirs(again.path()), first);
}

fn layer_dirs(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data.join("layers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}
