//! The warm pool's refill yields to starts under way, for a while: a burst's starts
//! finish first (the rule's unit test in the runtime's warm pool), but a start held
//! long (here at its last step by a fault point), or starts that overlap without a
//! pause, do not keep the pool from refilling: past the bound the refill makes one
//! entry at a time beside them.

mod common;

use common::*;
use sandboxd_runtime::Runtime;
use std::time::Duration;

/// A runtime whose warm pool (2 entries of 64 MiB disks, growing to no more) is full.
fn full_pool(data: &std::path::Path) -> TestRuntime {
    let rt = growing_warm_runtime(data, 2, 2);
    rt.fill_warm_inits(64, false);
    wait_for("the pool full", || rt.warm_inits_ready() >= 2);
    rt
}

/// A new sandbox's spec that fits the pool's entries.
fn next() -> sandboxd_runtime::SandboxSpec {
    sandboxd_runtime::SandboxSpec {
        disk_mb: 64,
        ..spec("default")
    }
}

#[test]
fn a_refill_beside_a_start_held_long_makes_entries_one_at_a_time() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = full_pool(data.path());
    // The first start takes an entry and, done, sets the refill off; the second takes
    // the last entry and is held before its handle is written.
    let first = rt.start(&next()).expect("start");
    fail::cfg("start.handle", "1*pause").expect("failpoint");
    let second = std::thread::scope(|s| {
        let start = s.spawn(|| rt.start(&next()));
        wait_for("the last entry taken", || rt.warm_inits_ready() == 0);
        // The start still held: the refill, done yielding, fills the pool beside it.
        wait_for("the pool full beside the held start", || {
            rt.warm_inits_ready() >= 2
        });
        let beside = rt.warm_inits_made_beside_starts();
        fail::remove("start.handle");
        let handle = start.join().expect("start thread").expect("start");
        assert!(beside >= 2, "{beside} made while the start ran");
        handle
    });
    for handle in [first, second] {
        assert!(handle.state_dir.join("owner").exists(), "started warm");
        assert_eq!(sh_ok(&handle, "echo up"), "up\n");
        rt.destroy(&handle).expect("destroy");
        assert_gone(&rt, data.path(), &handle);
    }
    rt.drain_warm_inits();
    scenario.teardown();
}

/// Starts that overlap without a pause (each held a while at its last step, the next
/// one begun before it ends) never leave the refill a moment with none under way: it
/// must not wait for one for ever (each start is far shorter than the bound on a
/// stuck one), but make entries beside them, one at a time.
#[test]
fn a_refill_makes_entries_beside_overlapping_starts_that_never_pause() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = full_pool(data.path());
    // Each start held 1.5 s; a new one begun every 0.3 s: several are always under way.
    fail::cfg("start.handle", "sleep(1500)").expect("failpoint");
    let handles: Vec<_> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..12)
            .map(|_| {
                let start = s.spawn(|| rt.start(&next()));
                std::thread::sleep(Duration::from_millis(300));
                start
            })
            .collect();
        starts
            .into_iter()
            .map(|t| t.join().expect("start thread").expect("start"))
            .collect()
    });
    fail::remove("start.handle");
    let beside = rt.warm_inits_made_beside_starts();
    for handle in &handles {
        rt.destroy(handle).expect("destroy");
        assert_gone(&rt, data.path(), handle);
    }
    rt.drain_warm_inits();
    scenario.teardown();
    assert!(beside > 0, "no entry made while the starts went on");
}
