//! Warm inits: a start that takes one gives the same sandbox as a cold start (limits,
//! disk, namespaces; parked in the root made ahead, or without one for other layers),
//! entries outlive quiet minutes, and neither a destroyed sandbox nor a drained pool nor
//! a dead owner's entries leave anything behind.

mod common;

use common::*;
use sandboxd_runtime::Runtime;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// Waits until `rt` has `n` warm inits of the default shape ready.
fn wait_ready(rt: &TestRuntime, n: usize) {
    wait_for("warm inits ready", || rt.warm_inits_ready() >= n);
}

/// Waits until `rt` holds `n` warm inits of any shape.
fn wait_held(rt: &TestRuntime, n: usize) {
    wait_for("warm inits held", || rt.warm_inits_held() >= n);
}

/// Directories of warm entries under the data dir.
fn warm_dirs(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".warm-"))
        .collect()
}

fn cgroup_file(rt: &TestRuntime, ctrl: &str, id: uuid::Uuid, file: &str) -> String {
    let dir = rt
        .cgroups()
        .dirs(id)
        .into_iter()
        .find(|d| d.to_string_lossy().contains(&format!("/{ctrl}/")))
        .expect("controller dir");
    std::fs::read_to_string(dir.join(file))
        .expect("cgroup file")
        .trim()
        .to_owned()
}

/// Everything a warm pool under `data` may have made is gone: dirs, mounts, id slots,
/// cgroups.
fn assert_pool_gone(rt: &TestRuntime, data: &Path) {
    assert_eq!(warm_dirs(data), Vec::<String>::new());
    assert_eq!(mounts_under(&data.join("sandboxes")), Vec::<String>::new());
    assert_eq!(
        common::slot_leases(data),
        Vec::<String>::new(),
        "id slots left claimed"
    );
    for parent in rt.cgroups().dirs(uuid::Uuid::nil()) {
        let parent = parent.parent().expect("parent").to_path_buf();
        let children: Vec<_> = std::fs::read_dir(&parent)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            children.is_empty(),
            "cgroups left under {}",
            parent.display()
        );
    }
}

#[test]
fn a_start_takes_a_warm_init_and_gets_the_same_sandbox() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = warm_runtime(data.path(), 2);
    rt.fill_warm_inits(64, false);
    wait_ready(&rt, 2);
    // Two parked in the default image's root, one more for other layer stacks.
    wait_for_dirs(data.path(), 3);
    let mut want = spec("default");
    want.disk_mb = 64;
    want.memory_mb = 200;
    want.pids_max = 77;
    // Each entry made its handle's file ahead: the start allocates no inode for it.
    let premade: Vec<u64> = warm_dirs(data.path())
        .iter()
        .filter_map(|d| {
            let next = data
                .path()
                .join("sandboxes")
                .join(d)
                .join(".handle.json.next");
            std::fs::metadata(next).ok().map(|m| m.ino())
        })
        .collect();
    let handle = rt.start(&want).expect("start from a warm init");
    assert!(
        handle.state_dir.join("owner").exists(),
        "the state dir is a warm entry's, renamed"
    );
    let written = std::fs::metadata(handle.state_dir.join("handle.json")).expect("handle");
    assert!(
        premade.contains(&written.ino()),
        "handle.json is not a file the entries made ahead: {} not in {premade:?}",
        written.ino()
    );
    assert!(!handle.state_dir.join(".handle.json.next").exists());
    // The cgroup was renamed to the sandbox's id and given its limits.
    assert_eq!(
        cgroup_file(&rt, "memory", handle.id, "memory.limit_in_bytes"),
        (200u64 << 20).to_string()
    );
    assert_eq!(cgroup_file(&rt, "pids", handle.id, "pids.max"), "77");
    assert!(rt.cgroups().holds(handle.id, handle.agent_pid));
    // Inside: PID 1, root, own hostname, a cgroup namespace rooted at its cgroup.
    assert_eq!(sh_ok(&handle, "hostname").trim(), "box");
    assert_eq!(sh_ok(&handle, "id -u").trim(), "0");
    assert!(get(&handle.agent_socket, "/v1/health").contains("\"pid\":1"));
    let (code, cg) = agent_sh(&handle, "cat /proc/self/cgroup");
    assert_eq!(code, Some(0));
    assert!(
        cg.lines()
            .filter(|l| l.contains(":memory:") || l.contains(":pids:"))
            .all(|l| l.ends_with(":/")),
        "cgroup namespace not rooted at the sandbox: {cg}"
    );
    // The disk the warm entry mounted is the sandbox's: 64 MiB, then ENOSPC.
    let (code, out) = agent_sh(
        &handle,
        "dd if=/dev/zero of=/big bs=1M count=100 2>&1; echo rc=$?",
    );
    assert_eq!(code, Some(0));
    assert!(out.contains("No space left"), "{out}");
    let upper = handle.state_dir.join("layer/upper");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&upper).expect("upper")),
        handle.host_id_base
    );
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
    // A start with another disk size finds no match and starts cold; the pool keeps
    // the size it was filled for.
    let cold = rt.start(&spec("default")).expect("cold start");
    assert!(!cold.state_dir.join("owner").exists());
    rt.destroy(&cold).expect("destroy");
    assert_gone(&rt, data.path(), &cold);
    wait_ready(&rt, 2);
    let again = rt
        .start(&sandboxd_runtime::SandboxSpec {
            id: uuid::Uuid::new_v4(),
            ..want.clone()
        })
        .expect("a warm start again");
    assert!(
        again.state_dir.join("owner").exists(),
        "the pool kept 64 MiB entries"
    );
    rt.destroy(&again).expect("destroy");
    assert_gone(&rt, data.path(), &again);
    wait_ready(&rt, 2);
    rt.drain_warm_inits();
    assert_eq!(rt.warm_inits_ready(), 0);
    assert_pool_gone(&rt, data.path());
    assert_eq!(zombie_children(), Vec::<i32>::new());
}

/// Waits until `n` warm entries have their dirs under `data`.
fn wait_for_dirs(data: &Path, n: usize) {
    wait_for("warm entry dirs", || warm_dirs(data).len() == n);
}

/// The warm entries under `data` parked in a root made ahead, and the others.
fn parked_and_plain(data: &Path) -> (Vec<String>, Vec<String>) {
    warm_dirs(data).into_iter().partition(|d| {
        let rootfs = data.join("sandboxes").join(d).join("rootfs");
        mounts_under(&rootfs).len() == 2 // the overlay and /usr
    })
}

#[test]
fn a_start_of_another_layer_stack_takes_the_entry_without_a_root() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = warm_runtime(data.path(), 1);
    rt.fill_warm_inits(0, false);
    wait_ready(&rt, 1);
    wait_for_dirs(data.path(), 2);
    let (parked, plain) = parked_and_plain(data.path());
    assert_eq!((parked.len(), plain.len()), (1, 1), "{parked:?} {plain:?}");
    let exists = |d: &String| data.path().join("sandboxes").join(d).exists();
    let first = rt.start(&spec("default")).expect("warm start");
    assert!(first.state_dir.join("owner").exists(), "took an entry");
    assert!(
        !exists(&parked[0]) && exists(&plain[0]),
        "took the parked one"
    );
    sh_ok(&first, "echo layered > /marker");
    let layer = rt.capture_layer(&first).expect("capture");
    rt.destroy(&first).expect("destroy");
    assert_gone(&rt, data.path(), &first);

    wait_ready(&rt, 1);
    wait_for_dirs(data.path(), 2);
    let (parked, _) = parked_and_plain(data.path());
    let mut clone = spec("default");
    clone.extra_layers = vec![layer.digest.clone()];
    let second = rt
        .start(&clone)
        .expect("warm start over the captured layer");
    assert!(second.state_dir.join("owner").exists(), "took an entry");
    assert!(
        exists(&parked[0]) && !exists(&plain[0]),
        "took the plain one"
    );
    assert_eq!(sh_ok(&second, "cat /marker"), "layered\n");
    assert_eq!(mounts_under(&second.state_dir.join("rootfs")).len(), 2);
    assert_eq!(sh_ok(&second, "id -u; touch /new && echo ok"), "0\nok\n");
    rt.destroy(&second).expect("destroy");
    assert_gone(&rt, data.path(), &second);
    rt.delete_layer(&layer.digest).expect("delete the layer");
    rt.drain_warm_inits();
    assert_pool_gone(&rt, data.path());
}

#[test]
fn entries_left_by_a_dead_owner_are_removed_by_the_next_runtime() {
    let data = tempfile::tempdir().expect("tempdir");
    let first = warm_runtime(data.path(), 2);
    first.fill_warm_inits(64, false);
    // All three made (the one for other layer stacks too): an entry still being made
    // belongs to a live maker, which a real dead owner would not have.
    wait_held(&first, 3);
    let left = warm_dirs(data.path());
    assert_eq!(left.len(), 3);
    // Play a server killed with -9: its entries now name an owner that is gone.
    for dir in &left {
        std::fs::write(
            data.path().join("sandboxes").join(dir).join("owner"),
            "999999999 1",
        )
        .expect("owner");
    }
    // Any runtime opening the data dir sweeps them, with a pool of its own or not.
    let second = runtime(data.path());
    assert_eq!(
        warm_dirs(data.path()),
        Vec::<String>::new(),
        "stale entries swept"
    );
    assert_pool_gone(&second, data.path());
    // The first pool's own handles to them are now dead: its drain must cope.
    first.drain_warm_inits();
    drop(second);
    assert_pool_gone(&first, data.path());
    assert_eq!(zombie_children(), Vec::<i32>::new(), "parked PID 1s reaped");
}

/// A server killed with -9 between making an entry's dir and writing its owner, or while
/// removing one (its owner gone first or the files half gone), leaves a young dir without
/// an owner. The next runtime removes it at once: the make writes the owner first, so
/// such a dir is never a live entry with anything in it (found by `crash_churn`, where
/// the next server came within the minute an owner-less dir used to be spared).
#[test]
fn young_entries_without_an_owner_are_removed_by_the_next_runtime() {
    let data = tempfile::tempdir().expect("tempdir");
    let sandboxes = data.path().join("sandboxes");
    std::fs::create_dir_all(&sandboxes).expect("sandboxes dir");
    let empty = sandboxes.join(format!(".warm-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&empty).expect("empty entry dir");
    let half_removed = sandboxes.join(format!(".warm-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&half_removed).expect("half-removed entry dir");
    std::fs::write(half_removed.join("init.log"), "").expect("a file left");
    let rt = runtime(data.path());
    assert_eq!(
        warm_dirs(data.path()),
        Vec::<String>::new(),
        "owner-less dirs swept"
    );
    drop(rt);
}

#[test]
fn a_warm_init_waits_longer_than_a_minute_for_its_start() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = warm_runtime(data.path(), 1);
    rt.fill_warm_inits(64, false);
    wait_held(&rt, 2);
    // Quiet for longer than one poll of the init's handshake wait (60 s): a server
    // with sporadic creates must still find its pool alive.
    std::thread::sleep(Duration::from_secs(65));
    let mut want = spec("default");
    want.disk_mb = 64;
    let handle = rt.start(&want).expect("start");
    assert!(
        handle.state_dir.join("owner").exists(),
        "the start took a warm init, not a cold start"
    );
    assert_eq!(sh_ok(&handle, "echo alive"), "alive\n");
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
    rt.drain_warm_inits();
    assert_pool_gone(&rt, data.path());
}

#[test]
fn a_pool_outrun_by_a_burst_grows_so_the_next_burst_starts_warm() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = growing_warm_runtime(data.path(), 1, 4);
    rt.fill_warm_inits(64, false);
    wait_held(&rt, 2);
    let mut want = spec("default");
    want.disk_mb = 64;
    let burst = |n: usize| -> Vec<sandboxd_runtime::SandboxHandle> {
        (0..n)
            .map(|_| {
                rt.start(&sandboxd_runtime::SandboxSpec {
                    id: uuid::Uuid::new_v4(),
                    ..want.clone()
                })
                .expect("start")
            })
            .collect()
    };
    let is_warm = |h: &sandboxd_runtime::SandboxHandle| h.state_dir.join("owner").exists();
    // Back to back: the refill waits a moment after each start, so starts after the
    // first find the pool empty and start cold; a miss grows the pool to the burst.
    let first = burst(5);
    assert!(is_warm(&first[0]));
    let cold = first.iter().filter(|h| !is_warm(h)).count();
    assert!(cold >= 1, "a back-to-back burst outran a pool of one");
    let target = rt.warm_inits_target();
    assert!(
        (2..=4).contains(&target),
        "grown to the burst, within the max: {target}"
    );
    for h in &first {
        rt.destroy(h).expect("destroy");
        assert_gone(&rt, data.path(), h);
    }
    // Grown and filled (with the one for other layer stacks), the pool serves a burst
    // as large as the one that outran it, every start warm.
    wait_held(&rt, target + 1);
    let second = burst(target);
    assert!(second.iter().all(is_warm), "the next burst started warm");
    for h in &second {
        assert_eq!(sh_ok(h, "echo up"), "up\n");
        rt.destroy(h).expect("destroy");
        assert_gone(&rt, data.path(), h);
    }
    rt.drain_warm_inits();
    assert_pool_gone(&rt, data.path());
}

#[test]
fn a_burst_that_takes_every_entry_grows_the_pool_before_any_start_misses() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = growing_warm_runtime(data.path(), 2, 8);
    rt.fill_warm_inits(64, false);
    wait_ready(&rt, 2);
    let mut want = spec("default");
    want.disk_mb = 64;
    // Two starts back to back take both entries: neither misses, yet the pool grows
    // ahead of the burst (half again its length) so that a third would find one.
    let handles: Vec<_> = (0..2)
        .map(|_| {
            rt.start(&sandboxd_runtime::SandboxSpec {
                id: uuid::Uuid::new_v4(),
                ..want.clone()
            })
            .expect("start")
        })
        .collect();
    let linux: &sandboxd_runtime::linux::LinuxRuntime = &rt;
    let stats = linux.warm_pool().expect("a pool");
    assert_eq!((stats.hits, stats.misses), (2, 0), "both warm: {stats:?}");
    assert_eq!(stats.target, 3, "grown ahead of the burst");
    wait_ready(&rt, 3);
    for h in &handles {
        assert_eq!(sh_ok(h, "echo up"), "up\n");
        rt.destroy(h).expect("destroy");
        assert_gone(&rt, data.path(), h);
    }
    rt.drain_warm_inits();
    assert_pool_gone(&rt, data.path());
}

#[test]
fn a_quiet_refill_overlaps_its_makes_within_its_bound_and_the_entries_all_work() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = growing_warm_runtime(data.path(), 2, 12);
    // Grown ahead of any start (as `serve` does with `warm_inits_start`): no start
    // comes, so the refill may make more than the two a burst's refill makes at once.
    rt.fill_warm_inits(64, false);
    rt.grow_warm_inits(10);
    wait_ready(&rt, 10);
    let peak = rt.warm_inits_making_peak();
    assert!(
        (3..=4).contains(&peak),
        "entries made at once: {peak} (more than 2, at most 4)"
    );
    // Exactly the target: makes in flight together did not overshoot it.
    wait_held(&rt, 11);
    assert_eq!(
        (rt.warm_inits_ready(), rt.warm_inits_held()),
        (10, 11),
        "the target and the one kept for other layer stacks"
    );
    assert_eq!(
        warm_dirs(data.path()).len(),
        11,
        "no entry dir beyond the pool's"
    );
    let mut want = spec("default");
    want.disk_mb = 64;
    let handles: Vec<_> = (0..10)
        .map(|_| {
            rt.start(&sandboxd_runtime::SandboxSpec {
                id: uuid::Uuid::new_v4(),
                ..want.clone()
            })
            .expect("start")
        })
        .collect();
    for h in &handles {
        assert!(h.state_dir.join("owner").exists(), "started warm");
        assert_eq!(sh_ok(h, "echo up"), "up\n");
        rt.destroy(h).expect("destroy");
        assert_gone(&rt, data.path(), h);
    }
    rt.drain_warm_inits();
    assert_pool_gone(&rt, data.path());
}
