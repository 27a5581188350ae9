//! The runtime's parent cgroup: a runtime that made it removes it at drain and on drop
//! when no sandbox is left in it; one it found is kept; and a runtime whose parent
//! another removed empty makes it again at its next start.

mod common;

use common::spec;
use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime};
use sandboxd_runtime::Runtime;
use std::path::{Path, PathBuf};

fn runtime(data_dir: &Path, parent: &str) -> LinuxRuntime {
    LinuxRuntime::new(LinuxConfig {
        data_dir: data_dir.to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: parent.into(),
        max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
    })
    .expect("runtime")
}

/// A parent cgroup name no other test uses.
fn fresh_parent() -> String {
    format!(
        "sandboxd-test-parent-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// The parent's dir in every hierarchy `rt` uses.
fn parent_dirs(rt: &LinuxRuntime) -> Vec<PathBuf> {
    rt.cgroups()
        .dirs(uuid::Uuid::nil())
        .into_iter()
        .map(|d| d.parent().expect("a parent").to_path_buf())
        .collect()
}

fn start_and_destroy(rt: &LinuxRuntime) {
    let handle = rt.start(&spec("default")).expect("start");
    rt.destroy(&handle).expect("destroy");
}

#[test]
fn a_runtime_removes_the_parent_cgroup_it_made_once_empty() {
    let data = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let rt = runtime(data.path(), &parent);
    let dirs = parent_dirs(&rt);
    assert!(dirs.iter().all(|d| d.is_dir()), "made: {dirs:?}");
    start_and_destroy(&rt);
    // A sandbox still in it keeps it through a drain.
    let handle = rt.start(&spec("default")).expect("start");
    rt.drain_warm_inits();
    assert!(dirs.iter().all(|d| d.is_dir()), "kept while in use");
    rt.destroy(&handle).expect("destroy");
    drop(rt);
    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "removed on drop: {left:?}");
}

#[test]
fn a_parent_cgroup_found_is_kept_and_one_removed_by_another_is_made_again() {
    let data = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let maker = runtime(data.path(), &parent);
    let dirs = parent_dirs(&maker);
    // This one found the parent: dropping it leaves the parent to its maker.
    let finder = runtime(data.path(), &parent);
    start_and_destroy(&finder);
    drop(finder);
    assert!(
        dirs.iter().all(|d| d.is_dir()),
        "kept by a runtime that found it"
    );
    // The maker removes it while another runtime, which found it, lives on…
    let other = runtime(data.path(), &parent);
    drop(maker);
    assert!(dirs.iter().all(|d| !d.exists()), "removed by its maker");
    // …whose next start makes it again.
    start_and_destroy(&other);
    drop(other);
    for d in &dirs {
        let _ = std::fs::remove_dir(d);
    }
}
