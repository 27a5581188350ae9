//! A realistic image: a Debian minbase root with python3 made by `mmdebstrap`
//! (`scripts/debian-python-image.sh`, run by `scripts/setup.sh`, caches it as an OCI
//! layout at /var/cache/sandboxd-test/debian-python.oci), pushed to a real
//! `docker-registry` on loopback with skopeo, pulled with `sandboxd images pull`, and
//! `python3 -c 'print(1+1)'` run inside through the Runzivo dialect. Outside CI the
//! test is skipped, saying so, when that file is absent; in CI (`SANDBOXD_CI` or `CI`
//! set) its absence fails it.

mod registry;
mod runzivo_api;

use registry::{sandboxd, Registry};
use runzivo_api::Server;
use serde_json::json;
use std::path::Path;

const IMAGE: &str = "/var/cache/sandboxd-test/debian-python.oci";

#[tokio::test(flavor = "multi_thread")]
async fn a_debian_image_with_python_runs_python() {
    let layout = Path::new(IMAGE);
    if !layout.join("index.json").exists() {
        let in_ci = std::env::var_os("SANDBOXD_CI").is_some() || std::env::var_os("CI").is_some();
        assert!(
            !in_ci,
            "{IMAGE} is missing: scripts/setup.sh builds it (scripts/debian-python-image.sh)"
        );
        eprintln!(
            "SKIPPED a_debian_image_with_python_runs_python: no {IMAGE}; build it with \
             scripts/debian-python-image.sh (needs mmdebstrap and a Debian mirror)"
        );
        return;
    }
    let registry = Registry::start();
    registry.push_layout(layout, "debian/python:v1");
    let reference = registry.reference("debian/python:v1");
    let s = Server::start(30);
    let out = sandboxd(s.data_dir(), &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = s.create_with(&json!({ "image": reference })).await;
    let id = view["id"].as_str().expect("id");
    let got = s.sh(id, "python3 -c 'print(1+1)'").await;
    assert_eq!(got, "2\n");
    // The image's own Debian: its package database says python3 is installed.
    let got = s.sh(id, "dpkg-query -W -f='${Status}\\n' python3").await;
    assert_eq!(got, "install ok installed\n");
}
