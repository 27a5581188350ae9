//! The runtime's parent cgroup: a runtime that made it removes it at drain and on drop
//! when no sandbox is left in it; one it found is kept; and a runtime whose parent
//! another removed empty makes it again at its next start, and removes it in turn.

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
    // …whose next start makes it again, and so answers for it: it goes with that
    // runtime too (it was left, with no record naming anyone, for ever).
    start_and_destroy(&other);
    drop(other);
    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "a parent made again was left: {left:?}");
}

/// The v1 cpuset hierarchy's root, when the host has one.
fn cpuset_root() -> Option<&'static Path> {
    let root = Path::new("/sys/fs/cgroup/cpuset");
    root.join("cpuset.cpus").exists().then_some(root)
}

/// Requests that pin one CPU.
fn pin_one_cpu() -> sandboxd_runtime::Requests {
    sandboxd_runtime::Requests {
        cpu_millis: 1000,
        memory_mb: 64,
        pinned_vcpus: Some(1),
    }
}

/// A pinned sandbox's runtime makes a cpuset parent (v1) beside its others; once the
/// sandbox is gone, dropping the runtime that made the parent removes that one too.
#[test]
fn the_cpuset_parent_pinning_made_is_removed_with_the_others() {
    let Some(cpuset) = cpuset_root() else {
        eprintln!("no v1 cpuset hierarchy: skipping");
        return;
    };
    let data = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let rt = runtime(data.path(), &parent);
    let handle = rt.start(&spec("default")).expect("start");
    let requests = pin_one_cpu();
    rt.apply_requests(&handle, &requests).expect("pin one CPU");
    let pinned = cpuset.join(&parent);
    assert!(pinned.is_dir(), "pinning made {}", pinned.display());
    rt.destroy(&handle).expect("destroy");
    drop(rt);
    let left = pinned.exists();
    let _ = std::fs::remove_dir(&pinned);
    assert!(!left, "the cpuset parent {} is left", pinned.display());
}

/// A runtime that found its parent (made by another, which keeps it) still owns the
/// cpuset parent its pinning made: the last pinned sandbox takes it along, so that a
/// server that stops with the others' parent in place leaves no empty cpuset parent
/// (CI found one after Schemathesis pinned a sandbox on a machine whose `sandboxd`
/// parent predated the run).
#[test]
fn the_cpuset_parent_goes_with_the_last_pinned_sandbox_of_a_runtime_that_found_its_parent() {
    let Some(cpuset) = cpuset_root() else {
        eprintln!("no v1 cpuset hierarchy: skipping");
        return;
    };
    let data = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let maker = runtime(data.path(), &parent);
    let finder = runtime(data.path(), &parent);
    let requests = pin_one_cpu();
    let pinned = cpuset.join(&parent);
    let first = finder.start(&spec("default")).expect("start");
    finder
        .apply_requests(&first, &requests)
        .expect("pin one CPU");
    let second = finder.start(&spec("default")).expect("start");
    let unpinned = sandboxd_runtime::Requests {
        pinned_vcpus: None,
        ..requests
    };
    finder.apply_requests(&second, &unpinned).expect("requests");
    finder.destroy(&first).expect("destroy");
    let left_after_last_pinned = pinned.exists();
    finder.destroy(&second).expect("destroy");
    drop(finder);
    drop(maker);
    let left = pinned.exists();
    let _ = std::fs::remove_dir(&pinned);
    assert!(
        !left_after_last_pinned && !left,
        "the cpuset parent {} is left",
        pinned.display()
    );
}

/// A cpuset parent an operator made (its CPUs chosen) is not sandboxd's to remove: the
/// last pinned sandbox leaves it (an outside review saw it removed, then made again
/// with every CPU of the root).
#[test]
fn an_operators_cpuset_parent_stays_after_the_last_pinned_sandbox() {
    let Some(cpuset) = cpuset_root() else {
        eprintln!("no v1 cpuset hierarchy: skipping");
        return;
    };
    let data = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let operators = cpuset.join(&parent);
    std::fs::create_dir(&operators).expect("the operator's cpuset parent");
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let root = std::fs::read_to_string(cpuset.join(file)).expect("root cpuset");
        std::fs::write(operators.join(file), root.trim()).expect("the operator's choice");
    }
    let rt = runtime(data.path(), &parent);
    let handle = rt.start(&spec("default")).expect("start");
    rt.apply_requests(&handle, &pin_one_cpu())
        .expect("pin one CPU");
    rt.destroy(&handle).expect("destroy");
    drop(rt);
    let kept = operators.is_dir();
    let _ = std::fs::remove_dir(&operators);
    assert!(kept, "the operator's cpuset parent was removed");
}

/// Env var naming the data dir of [`a_test_runtime_left_undropped`] (set only when
/// this test binary runs it as a child).
const UNDROPPED_DATA: &str = "SANDBOXD_TEST_UNDROPPED_DATA";

/// A test process whose runtime is never dropped (as an engine's is not, or a runtime
/// playing a server that stops) still removes its own parent cgroup, empty, at its
/// exit; run as a child process of this binary.
#[test]
fn a_tests_own_parent_is_removed_when_its_process_exits() {
    let data = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "a_test_runtime_left_undropped", "--ignored"])
        .env(UNDROPPED_DATA, data.path())
        .output()
        .expect("run the child test");
    assert!(out.status.success(), "the child test: {out:?}");
    let name = common::own_cgroups::parent_for(data.path());
    let left: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .expect("/sys/fs/cgroup")
        .flatten()
        .map(|e| e.path().join(&name))
        .filter(|d| d.exists())
        .collect();
    assert!(left.is_empty(), "left after the child exited: {left:?}");
}

/// The child of [`a_tests_own_parent_is_removed_when_its_process_exits`]: a runtime
/// over the given data dir starts and ends a sandbox, and is forgotten.
#[test]
#[ignore = "run by a_tests_own_parent_is_removed_when_its_process_exits"]
fn a_test_runtime_left_undropped() {
    let Some(data) = std::env::var_os(UNDROPPED_DATA) else {
        return;
    };
    let rt = common::raw_runtime(Path::new(&data));
    start_and_destroy(&rt);
    assert!(
        !parent_dirs(&rt).is_empty() && parent_dirs(&rt).iter().all(|d| d.is_dir()),
        "the parent is made"
    );
    std::mem::forget(rt);
}

/// Env var naming the parent of [`a_maker_that_dies`] (set only when this test binary
/// runs it as a child).
const DYING_PARENT: &str = "SANDBOXD_TEST_DYING_PARENT";

/// A parent whose maker died without removing it (killed, as a `kill -9`ed server's)
/// is taken over by the next runtime that finds it, which removes it once empty, as
/// its maker would have. (Before, a found parent was always kept: the default
/// `sandboxd` parent stayed after every killed server.)
#[test]
fn a_parent_whose_maker_died_is_removed_by_the_runtime_that_finds_it() {
    let data = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "a_maker_that_dies", "--ignored"])
        .env(DYING_PARENT, &parent)
        .env("SANDBOXD_TEST_DYING_DATA", data.path())
        .output()
        .expect("run the child test");
    assert!(out.status.success(), "the child test: {out:?}");
    let finder = runtime(data.path(), &parent);
    let dirs = parent_dirs(&finder);
    assert!(dirs.iter().all(|d| d.is_dir()), "left by the dead maker");
    assert_a_finder_removes(finder, &dirs, &parent);
}

/// `finder`, which found `parent` (its `dirs`) made by a maker now gone, starts and
/// destroys a sandbox and is dropped: the parent is gone (whatever is left is removed,
/// with its records, before the assertion).
fn assert_a_finder_removes(finder: LinuxRuntime, dirs: &[PathBuf], parent: &str) {
    start_and_destroy(&finder);
    drop(finder);
    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).cloned().collect();
    for d in &left {
        let _ = std::fs::remove_dir(d);
    }
    let records = Path::new("/run/sandboxd/cgroup-parents");
    let _ = std::fs::remove_file(records.join(parent));
    let _ = std::fs::remove_file(records.join(format!("{parent}.cpuset")));
    assert!(
        left.is_empty(),
        "kept by the runtime that found it: {left:?}"
    );
}

/// The child of [`a_parent_whose_maker_died_is_removed_by_the_runtime_that_finds_it`]:
/// makes the parent, and exits without removing it.
#[test]
#[ignore = "run by a_parent_whose_maker_died_is_removed_by_the_runtime_that_finds_it"]
fn a_maker_that_dies() {
    let (Some(parent), Some(data)) = (
        std::env::var(DYING_PARENT).ok(),
        std::env::var_os("SANDBOXD_TEST_DYING_DATA"),
    ) else {
        return;
    };
    let rt = runtime(Path::new(&data), &parent);
    assert!(parent_dirs(&rt).iter().all(|d| d.is_dir()), "made");
    std::mem::forget(rt);
}

/// Opening a runtime while another process removes the empty parent (a run ending
/// beside it) succeeds: the CI once saw `sandboxd run` fail with "resolving the cgroup
/// parent …: No such file or directory" when the parent went between its making and
/// its resolving.
#[test]
fn detecting_the_parent_while_another_removes_it_empty_succeeds() {
    let parent = fresh_parent();
    // The parent's dir in every hierarchy this host's cgroups (v1 or v2) use.
    let dirs: Vec<PathBuf> = sandboxd_runtime::linux::Cgroups::detect(&parent)
        .expect("detect")
        .dirs(uuid::Uuid::nil())
        .into_iter()
        .map(|d| d.parent().expect("a parent").to_path_buf())
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let remover = {
        let (stop, dirs) = (stop.clone(), dirs.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for dir in &dirs {
                    let _ = std::fs::remove_dir(dir);
                }
            }
        })
    };
    let mut failures = Vec::new();
    for _ in 0..3000 {
        if let Err(e) = sandboxd_runtime::linux::Cgroups::detect(&parent) {
            failures.push(e.to_string());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    remover.join().expect("remover");
    for dir in &dirs {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(
        failures.is_empty(),
        "{} of 3000 detections failed, first: {:?}",
        failures.len(),
        failures.first()
    );
}

/// Env var naming the dir where [`a_maker_that_waits`] and its parent test meet.
const MEETING: &str = "SANDBOXD_TEST_MEETING_DIR";

/// A runtime that found the parent while its maker lived takes it over once the maker
/// is gone, and removes it at its own end (it was left for good when the maker stopped
/// first, while the finder's sandboxes kept it: two test servers at once left the
/// host's default parent behind).
#[test]
fn a_parent_whose_maker_went_after_it_was_found_is_removed_by_its_finder() {
    let data = tempfile::tempdir().expect("tempdir");
    let meeting = tempfile::tempdir().expect("tempdir");
    let parent = fresh_parent();
    let mut maker = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "a_maker_that_waits", "--ignored"])
        .env(DYING_PARENT, &parent)
        .env("SANDBOXD_TEST_DYING_DATA", data.path())
        .env(MEETING, meeting.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run the child test");
    let made = meeting.path().join("made");
    for _ in 0..600 {
        if made.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(made.exists(), "the maker never made the parent");
    // Found while the maker lives: not this runtime's to remove, yet.
    let finder = runtime(data.path(), &parent);
    let dirs = parent_dirs(&finder);
    std::fs::write(meeting.path().join("go"), "").expect("tell the maker to go");
    assert!(
        maker.wait().expect("the maker").success(),
        "the maker failed"
    );
    assert_a_finder_removes(finder, &dirs, &parent);
}

/// The child of [`a_parent_whose_maker_went_after_it_was_found_is_removed_by_its_finder`]:
/// makes the parent, says so, waits to be told to go, and exits without removing it.
#[test]
#[ignore = "run by a_parent_whose_maker_went_after_it_was_found_is_removed_by_its_finder"]
fn a_maker_that_waits() {
    let (Some(parent), Some(data), Some(meeting)) = (
        std::env::var(DYING_PARENT).ok(),
        std::env::var_os("SANDBOXD_TEST_DYING_DATA"),
        std::env::var_os(MEETING),
    ) else {
        return;
    };
    let meeting = Path::new(&meeting);
    let rt = runtime(Path::new(&data), &parent);
    assert!(parent_dirs(&rt).iter().all(|d| d.is_dir()), "made");
    std::fs::write(meeting.join("made"), "").expect("say so");
    for _ in 0..1200 {
        if meeting.join("go").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::mem::forget(rt);
}
