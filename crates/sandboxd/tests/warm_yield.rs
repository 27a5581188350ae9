//! The warm pool's refill yields to starts under way: while a start runs (here held at
//! its last step by a fault point), nothing is made beside it, not even for a pool it
//! left empty; once it is done, the refill makes the pool full again.

mod common;

use common::*;
use sandboxd_runtime::Runtime;
use std::time::Duration;

#[test]
fn a_refill_waits_for_a_start_under_way_and_then_fills_the_pool() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = growing_warm_runtime(data.path(), 2, 2);
    rt.fill_warm_inits(64, false);
    wait_for("the pool full", || rt.warm_inits_ready() >= 2);
    let mut want = spec("default");
    want.disk_mb = 64;
    let next = || sandboxd_runtime::SandboxSpec {
        id: uuid::Uuid::new_v4(),
        ..want.clone()
    };
    // The first start takes an entry and, done, sets the refill off; the second takes
    // the last entry and is held before its handle is written.
    let first = rt.start(&next()).expect("start");
    fail::cfg("start.handle", "1*pause").expect("failpoint");
    let second = std::thread::scope(|s| {
        let start = s.spawn(|| rt.start(&next()));
        wait_for("the last entry taken", || rt.warm_inits_ready() == 0);
        // Longer than the refill's first wait (25 ms) and the pause it waits for after
        // a start (50 ms): before, a refill of an emptied pool made an entry at once.
        std::thread::sleep(Duration::from_millis(500));
        let beside = (rt.warm_inits_ready(), rt.warm_inits_made_beside_starts());
        fail::remove("start.handle");
        let handle = start.join().expect("start thread").expect("start");
        assert_eq!(beside, (0, 0), "(entries ready, made) while the start ran");
        handle
    });
    // Both done, the refill fills the pool again (and made nothing while one ran).
    wait_for("the pool full again", || rt.warm_inits_ready() >= 2);
    assert_eq!(rt.warm_inits_made_beside_starts(), 0);
    for handle in [first, second] {
        assert!(handle.state_dir.join("owner").exists(), "started warm");
        assert_eq!(sh_ok(&handle, "echo up"), "up\n");
        rt.destroy(&handle).expect("destroy");
        assert_gone(&rt, data.path(), &handle);
    }
    rt.drain_warm_inits();
    scenario.teardown();
}
