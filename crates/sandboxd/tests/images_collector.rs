//! The server's background layer collector (`SANDBOXD_LAYER_GC_INTERVAL_SECONDS`): it
//! deletes the layers of removed images that nothing uses, never the layers a live
//! sandbox runs on (even once that sandbox's image record is gone, as when `images rm`
//! races its create), and never while a start or a pull holds the layer store's
//! collector lock.

mod registry;
mod serve_bin;

use registry::{manifest_layers, random_layout, sandboxd, Registry};
use serde_json::json;
use serve_bin::Server;
use std::collections::BTreeSet;
use std::path::Path;

const MASTER: &str = "images-collector-test-master-key";

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

fn present(data: &Path, layers: &BTreeSet<String>) -> usize {
    layers
        .iter()
        .filter(|l| data.join("layers").join(l).exists())
        .count()
}

/// Polls until `done` (the collector runs every second); panics after minutes.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1200 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{what} never happened");
}

/// `images rm` without collecting (a grace no layer is within): the record only.
fn rm_record(data: &Path, reference: &str) {
    ok(sandboxd(
        data,
        &["images", "rm", reference, "--grace-seconds", "100000000"],
    ));
}

#[test]
fn the_collector_deletes_unused_layers_but_not_a_live_sandboxs() {
    let (work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/gone:v1");
    registry.push_layout(&layouts.join("noshell"), "test/live:v1");
    registry.push_layout(&random_layout(work.path(), "orphan", 1), "test/orphan:v1");
    let [gone, live, orphan] =
        ["test/gone:v1", "test/live:v1", "test/orphan:v1"].map(|n| registry.reference(n));
    let data = tempfile::tempdir().expect("tempdir");
    for r in [&gone, &live, &orphan] {
        ok(sandboxd(data.path(), &["images", "pull", r]));
    }
    let [gone_layers, live_layers, orphan_layers] =
        [&gone, &live, &orphan].map(|r| stored_layers(data.path(), r));
    assert_eq!(
        (gone_layers.len(), live_layers.len(), orphan_layers.len()),
        (2, 1, 4)
    );

    // A start between resolving its layers and pinning them holds the collector lock
    // shared: a collection then deletes nothing and says why.
    rm_record(data.path(), &orphan);
    {
        let _starting =
            sandboxd_runtime::linux::layer_pins::share_gc_lock(&data.path().join("layers"))
                .expect("lock");
        let out = sandboxd(data.path(), &["images", "prune", "--grace-seconds", "0"]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("busy"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(present(data.path(), &orphan_layers), 4);
    }

    let server = Server::start_with_env(
        data.path(),
        Some(MASTER),
        &[
            ("SANDBOXD_LAYER_GC_INTERVAL_SECONDS", "1"),
            ("SANDBOXD_LAYER_GC_GRACE_SECONDS", "0"),
        ],
    );
    wait_until("the orphan's layers' collection", || {
        present(data.path(), &orphan_layers) == 0
    });
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "live", "vcpu": 1, "memoryMb": 512, "image": live}),
    );
    // The live sandbox's image record goes behind its back; then `gone` is removed.
    let record = data.path().join("images").join(format!(
        "{}.json",
        live.replace('%', "%25").replace('/', "%2F")
    ));
    std::fs::remove_file(&record).expect("remove the live image's record");
    rm_record(data.path(), &gone);
    // Once a round has deleted `gone`'s layers, it has seen the live ones unrecorded too.
    wait_until("the removed image's layers' collection", || {
        present(data.path(), &gone_layers) == 0
    });
    assert_eq!(
        present(data.path(), &live_layers),
        1,
        "a live sandbox's layer was collected"
    );
    let (exit, stdout) = server.exec(MASTER, &id, &["/probe"]);
    assert_eq!(exit, 0);
    assert!(stdout.starts_with("uid=0 "), "{stdout}");
    // Once the sandbox is gone, so is its layer.
    server.destroy(MASTER, &id);
    wait_until("the ended sandbox's layer's collection", || {
        present(data.path(), &live_layers) == 0
    });
}
