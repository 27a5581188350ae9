//! A warm pool whose makes fail for a while recovers on its own, with no start to
//! trigger a refill: a refill retries failed makes after a growing wait (a few times),
//! on both tiers, and a periodic tick refills a container pool below its target after a
//! refill gave up. Failures come from the `warm.make` fault injection point.

mod common;
mod gvisor_common;

use std::path::Path;

/// A pool of two, with makes failing as `actions` (a `fail` crate spec) says, once asked
/// to fill.
fn failing_pool(data: &Path, actions: &str) -> common::TestRuntime {
    let rt = common::warm_runtime(data, 2);
    fail::cfg("warm.make", actions).expect("failpoint");
    rt.fill_warm_inits(0, false);
    rt
}

/// Regression: one failed make stopped the refill until a later start asked again.
#[test]
fn a_pool_whose_first_makes_fail_refills_to_its_target_with_no_start() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = failing_pool(data.path(), "3*return");
    common::wait_for("the pool back at its target", || rt.warm_inits_ready() == 2);
    drop(rt);
    scenario.teardown();
}

/// A refill that gave up (every make failed through its retries) is followed, once makes
/// work again, by the periodic tick's refill.
#[test]
fn a_pool_whose_refill_gave_up_is_refilled_by_its_tick() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = failing_pool(data.path(), "return");
    common::wait_for("the refill gave up", || !rt.warm_inits_refilling());
    assert_eq!(rt.warm_inits_ready(), 0, "every make failed");
    fail::remove("warm.make");
    common::wait_for("the pool back at its target", || rt.warm_inits_ready() == 2);
    drop(rt);
    scenario.teardown();
}

/// The gVisor tier's pool: a failed make stopped its refill for good too.
#[test]
fn a_gvisor_pool_whose_first_makes_fail_refills_to_its_target_with_no_start() {
    use sandboxd_runtime::linux::gvisor::GvisorRuntime;
    let data = tempfile::tempdir().expect("tempdir");
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let scenario = fail::FailScenario::setup();
    let rt = gvisor_common::Gvisor(
        gvisor_common::raw_gvisor(data.path())
            .with_warm_pool(2)
            .expect("warm pool"),
    );
    fail::cfg("warm.make", "2*return").expect("failpoint");
    rt.fill_warm_pool(64);
    common::wait_for("the gVisor pool back at its target", || {
        rt.warm_pool_ready() == 2
    });
    rt.drain_warm_pool();
    drop(rt);
    scenario.teardown();
}
