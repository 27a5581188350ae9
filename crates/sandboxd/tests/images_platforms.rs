//! Multi-platform images: an image index (pushed with `skopeo copy --all` to a real
//! `docker-registry` on loopback) resolves to the host's own platform wherever that is
//! listed, by tag and by the index's digest; an index with nothing for this host is
//! refused with an error naming the host's platform and the ones on offer, and stores
//! nothing.

mod registry;

use registry::{layer_store_leftovers, multi_layout, run, sandboxd, Registry};
use std::process::Command;

/// The host's architecture as OCI (Go) names it.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn inspect(data: &std::path::Path, name: &str) -> serde_json::Value {
    let out = sandboxd(data, &["images", "inspect", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect json")
}

#[test]
fn an_index_resolves_to_the_host_platform() {
    let work = tempfile::tempdir().expect("tempdir");
    let host = host_arch();
    let other = if host == "amd64" { "arm64" } else { "amd64" };
    // The host's image listed last, so that "the first entry" would be wrong.
    let layout = multi_layout(work.path(), "multi", &[other, "s390x", host]);
    let registry = Registry::start();
    registry.push_index(&layout, "test/multi:v1");
    let reference = registry.reference("test/multi:v1");
    let raw = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{reference}"),
    ]));
    let index: serde_json::Value = serde_json::from_str(&raw).expect("index json");
    let host_manifest = index["manifests"]
        .as_array()
        .expect("an index")
        .iter()
        .find(|m| m["platform"]["architecture"] == host)
        .and_then(|m| m["digest"].as_str())
        .expect("the host's entry")
        .to_owned();

    let data = tempfile::tempdir().expect("tempdir");
    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = inspect(data.path(), &reference);
    assert_eq!(view["config"]["labels"]["arch"], host, "{view}");
    assert_eq!(view["config"]["manifest_digest"], host_manifest.as_str());
    // The index's own digest pins it too, to the same image.
    let index_digest = run(Command::new("skopeo").args([
        "inspect",
        "--tls-verify=false",
        "--format",
        "{{.Digest}}",
        &format!("docker://{reference}"),
    ]));
    let pinned = format!(
        "{}@{}",
        registry.reference("test/multi"),
        index_digest.trim()
    );
    let out = sandboxd(data.path(), &["images", "pull", &pinned]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = inspect(data.path(), &pinned);
    assert_eq!(view["config"]["labels"]["arch"], host, "{view}");
    // One layer of the host's image (and the mount points' layer): no other's.
    let layers = view["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "{view}");
    assert_eq!(layer_store_leftovers(data.path()), Vec::<String>::new());
}

#[test]
fn an_index_with_nothing_for_this_host_is_refused_by_name() {
    let work = tempfile::tempdir().expect("tempdir");
    let foreign: Vec<&str> = ["s390x", "riscv64", "ppc64le"]
        .into_iter()
        .filter(|a| *a != host_arch())
        .take(2)
        .collect();
    let layout = multi_layout(work.path(), "multi", &foreign);
    let registry = Registry::start();
    registry.push_index(&layout, "test/foreign:v1");
    let data = tempfile::tempdir().expect("tempdir");
    let out = sandboxd(
        data.path(),
        &["images", "pull", &registry.reference("test/foreign:v1")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a foreign-only index was pulled");
    assert!(err.contains(&format!("linux/{}", host_arch())), "{err}");
    for arch in &foreign {
        assert!(err.contains(&format!("linux/{arch}")), "{err}");
    }
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "");
    assert_eq!(layer_store_leftovers(data.path()), Vec::<String>::new());
}
