//! The gVisor warm pool and removed images: once a start of an image made the pool
//! keep entries of it, `images rm` of that image (another process, as beside a server)
//! drains those entries and its layers go at once, while the layers another image shares
//! stay. Skipped where runsc is missing.

mod common;
mod gvisor_common;
mod registry;

use gvisor_common::{raw_gvisor, Gvisor};
use registry::sandboxd;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::{Isolation, Runtime};
use std::collections::HashSet;
use std::path::Path;

const USER: &str = "test/user:v1";
const GOOD: &str = "test/good:v1";

fn gvwarm_dirs(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".gvwarm-"))
        .collect()
}

#[test]
fn removing_an_image_drains_its_warm_gvisor_entries_and_its_layers_go() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let (_work, _outside, layouts) = registry::test_layouts();
    for (layout, name) in [("user", USER), ("good", GOOD)] {
        let path = layouts.join(layout);
        let args = [
            "images",
            "import",
            path.to_str().expect("utf-8"),
            "--name",
            name,
        ];
        let out = sandboxd(&data, &args);
        assert!(out.status.success(), "{}", registry::text(&out));
    }
    let rt = Gvisor(raw_gvisor(&data).with_warm_pool_on_demand(1).expect("pool"));
    let good: HashSet<String> = rt
        .resolve_image(GOOD)
        .expect("good")
        .layers
        .into_iter()
        .collect();
    let only_user: Vec<String> = (rt.resolve_image(USER).expect("user").layers)
        .into_iter()
        .filter(|l| !good.contains(l))
        .collect();
    assert_eq!(only_user.len(), 1, "USER's accounts layer is its own");

    let mut spec = common::spec(USER);
    spec.isolation = Isolation::Gvisor;
    let first = rt.start(&spec).expect("start");
    rt.destroy(&first).expect("destroy");
    common::wait_for("a warm entry of USER", || rt.warm_pool_ready() == 1);
    assert_eq!(gvwarm_dirs(&data).len(), 1);

    let out = sandboxd(&data, &["images", "rm", USER, "--grace-seconds", "0"]);
    assert!(out.status.success(), "{}", registry::text(&out));
    assert_eq!(
        rt.warm_pool_ready(),
        0,
        "an entry of the removed image is kept"
    );
    // Its dir goes last, after its mounts and layer list.
    common::wait_for("the entry's dir goes", || gvwarm_dirs(&data).is_empty());
    for layer in &only_user {
        assert!(
            !data.join("layers").join(layer).exists(),
            "layer {layer} of the removed image kept"
        );
    }
    for layer in &good {
        assert!(
            data.join("layers").join(layer).is_dir(),
            "a shared layer went"
        );
    }
    // Another image still starts (and the pool moves there).
    let mut spec = common::spec(GOOD);
    spec.isolation = Isolation::Gvisor;
    let other = rt.start(&spec).expect("start GOOD");
    rt.destroy(&other).expect("destroy");
    rt.drain_warm_pool();
    assert_eq!(gvwarm_dirs(&data), Vec::<String>::new());
}
