//! `images rm` and `images prune` against a real server's store: an image a live
//! sandbox or a snapshot uses cannot be removed; prune deletes exactly the layers of
//! removed images that nothing else uses, and the live sandbox and a sandbox started
//! from the snapshot keep working afterwards.

mod registry;
mod serve_bin;

use registry::{manifest_layers, random_layout, sandboxd, Registry};
use serde_json::json;
use serve_bin::Server;
use std::collections::BTreeSet;
use std::path::Path;

const MASTER: &str = "images-gc-test-master-key";

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The stored layer directory each blob of `reference` was unpacked into.
fn stored_layers(data: &Path, reference: &str) -> BTreeSet<String> {
    manifest_layers(reference)
        .iter()
        .map(|d| {
            let hex = d.strip_prefix("sha256:").expect("sha256");
            std::fs::read_to_string(data.join("images/blobs").join(hex))
                .expect("blob index")
                .trim()
                .to_owned()
        })
        .collect()
}

#[test]
fn rm_refuses_images_in_use_and_prune_deletes_only_unused_layers() {
    let (work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/app:v1");
    registry.push_layout(&random_layout(work.path(), "unused", 1), "test/unused:v1");
    let (app, unused) = (
        registry.reference("test/app:v1"),
        registry.reference("test/unused:v1"),
    );
    let data = tempfile::tempdir().expect("tempdir");
    for r in [&app, &unused] {
        ok(sandboxd(data.path(), &["images", "pull", r]));
    }
    let unused_layers = stored_layers(data.path(), &unused);
    let app_layers = stored_layers(data.path(), &app);
    assert_eq!(unused_layers.len(), 4);
    // Inspect reports each layer's bytes: four of 1 MiB of data, and the mount points.
    let inspected: serde_json::Value =
        serde_json::from_str(&ok(sandboxd(data.path(), &["images", "inspect", &unused])))
            .expect("inspect json");
    let sizes: Vec<u64> = inspected["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| l["bytes"].as_u64().expect("bytes"))
        .collect();
    assert_eq!(
        sizes,
        [1 << 20, 1 << 20, 1 << 20, 1 << 20, 0],
        "{inspected}"
    );
    assert_eq!(inspected["bytes"], 4 << 20);

    let server = Server::start(data.path(), Some(MASTER));
    // A live sandbox of app, and a snapshot of another (then destroyed) one.
    let body = json!({"name": "live", "vcpu": 1, "memoryMb": 256, "image": app});
    let live = server.create_sandbox(MASTER, &body);
    let body = json!({"name": "snapped", "vcpu": 1, "memoryMb": 256, "image": app});
    let snapped = server.create_sandbox(MASTER, &body);
    let (code, _) = server.exec(
        MASTER,
        &snapped,
        &["/usr/bin/bash", "-c", "echo kept > /srv/app/note"],
    );
    assert_eq!(code, 0);
    let reply = server.request(
        "POST",
        &format!("/v2/sandboxes/{snapped}/snapshots"),
        MASTER,
        Some(&json!({})),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    let snapshot = reply.json()["data"]["id"].as_str().expect("id").to_owned();
    server.destroy(MASTER, &snapped);

    // In use: refused, naming the users.
    let out = sandboxd(data.path(), &["images", "rm", &app]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("sandbox {live}")), "{err}");
    assert!(err.contains(&format!("snapshot {snapshot}")), "{err}");
    let out = sandboxd(data.path(), &["images", "rm", "127.0.0.1:1/nope:v1"]);
    assert!(!out.status.success());

    ok(sandboxd(data.path(), &["images", "rm", &unused]));
    let listed = ok(sandboxd(data.path(), &["images", "list"]));
    assert!(
        !listed.contains(&unused) && listed.contains(&app),
        "{listed}"
    );
    let every_layer = |data: &Path| -> BTreeSet<String> {
        std::fs::read_dir(data.join("layers"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect()
    };
    let before = every_layer(data.path());
    let out = ok(sandboxd(
        data.path(),
        &["images", "prune", "--grace-seconds", "0"],
    ));
    let deleted: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("deleted layer "))
        .map(String::from)
        .collect();
    assert_eq!(deleted, unused_layers, "{out}");
    let after = every_layer(data.path());
    assert_eq!(
        after,
        before.difference(&unused_layers).cloned().collect(),
        "only the unused image's layers go"
    );
    assert!(app_layers.is_subset(&after));
    // A second prune finds nothing.
    let out = ok(sandboxd(
        data.path(),
        &["images", "prune", "--grace-seconds", "0"],
    ));
    assert!(out.starts_with("0 layers deleted"), "{out}");

    // The live sandbox and the snapshot still work.
    let (code, got) = server.exec(MASTER, &live, &["/usr/bin/cat", "/etc/greeting"]);
    assert_eq!((code, got.as_str()), (0, "hello from the image\n"));
    let body = json!({"name": "clone", "snapshotId": snapshot});
    let clone = server.create_sandbox(MASTER, &body);
    let (code, got) = server.exec(MASTER, &clone, &["/usr/bin/cat", "/srv/app/note"]);
    assert_eq!((code, got.as_str()), (0, "kept\n"));
    server.destroy(MASTER, &clone);
    server.destroy(MASTER, &live);
}
