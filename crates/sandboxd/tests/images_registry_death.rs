//! The registry going away mid-pull: a 50 MiB layer streams through a proxy on loopback
//! that holds it part-way; the registry is killed by its PID and the proxy cuts every
//! connection. The pull fails with an error that says the download broke off, nothing is
//! half-stored (no scratch, no layer, no blob index entry, no image record), and once
//! the registry is back the same pull succeeds.

mod registry;

use registry::proxy::Proxy;
use registry::{layer_store_leftovers, random_layers, sandboxd, Registry};
use std::path::Path;
use std::process::{Command, Stdio};

/// Entries of `dir` not starting with `.` (stored layers, index entries), if it exists.
fn visible(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_registry_that_dies_mid_pull_leaves_nothing_and_the_next_pull_succeeds() {
    let work = tempfile::tempdir().expect("tempdir");
    let layout = random_layers(work.path(), "one", 50, 1);
    let mut registry = Registry::start();
    registry.push_layout(&layout, "test/one:v1");
    let proxy = Proxy::start(registry.port);
    let reference = format!("127.0.0.1:{}/test/one:v1", proxy.port);
    let data = tempfile::tempdir().expect("tempdir");

    // Hold the answers once 20 MiB passed: mid-way through the 50 MiB layer.
    proxy.hold_after(20 << 20);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["images", "pull", &reference, "--data-dir"])
        .arg(data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandboxd images pull");
    let held = proxy.wait_held(|| child.try_wait().expect("try_wait").is_none());
    assert!(held, "the pull ended before the layer was half-way");
    assert!(proxy.forwarded() > 10 << 20, "{}", proxy.forwarded());
    registry.kill();
    proxy.cut();
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the pull succeeded");
    let host = format!("127.0.0.1:{}", proxy.port);
    assert!(err.contains(&host), "{err}");
    assert!(err.contains("broke off"), "{err}");
    assert!(!err.contains("does not match its digest"), "{err}");

    assert_eq!(layer_store_leftovers(data.path()), Vec::<String>::new());
    assert_eq!(visible(&data.path().join("layers")), Vec::<String>::new());
    assert_eq!(
        visible(&data.path().join("images/blobs")),
        Vec::<String>::new()
    );
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "");

    registry.restart();
    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&reference));
    assert_eq!(layer_store_leftovers(data.path()), Vec::<String>::new());
}
