//! Fault injection (the `failpoints` feature): each step of create, destroy, pause,
//! resume and snapshot fails in turn, and the operation rolls back completely: no
//! directory, mount, loop device, cgroup, id slot, network lease or process of a
//! half-made sandbox, no record left transitional, and a create retried with the same
//! name makes a new sandbox rather than returning a stuck one.

mod faults;

use faults::{eventually, request, Fixture};
use sandboxd_engine::{Deadlines, ErrorCode, PageRequest, SandboxStatus};

/// The steps of a create, each made to fail in turn.
const CREATE_STEPS: [&str; 9] = [
    "store.insert_sandbox",
    "store.save.STARTING",
    "start.disk",
    "start.cgroup",
    "start.self_move",
    "start.mount_root",
    "start.handshake",
    "start.handle",
    "store.save.RUNNING",
];

/// A failed create leaves nothing, and the same create retried makes a new sandbox.
async fn fail_create_at(f: &Fixture, step: &str, name: &str) {
    fail::cfg(step, "return").expect("failpoint");
    let err = f.engine.create(&f.ws(), request(name)).await;
    fail::remove(step);
    let err = err.expect_err(step);
    assert_ne!(err.code, ErrorCode::InvalidArgument, "{step}: {err}");
    f.assert_only(&[], step).await;
    let (sb, created) = f
        .engine
        .create(&f.ws(), request(name))
        .await
        .unwrap_or_else(|e| panic!("{step}: the retried create failed: {e}"));
    assert!(
        created,
        "{step}: the retried create returned {} {}",
        sb.id,
        sb.status.as_str()
    );
    assert_eq!(sb.status, SandboxStatus::Running, "{step}");
    f.assert_only(&[sb.id], step).await;
    let ended = f.engine.destroy(&f.ws(), sb.id).await.expect("destroy");
    assert_eq!(ended.status, SandboxStatus::Terminated, "{step}");
    f.assert_only(&[], step).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_failing_at_any_step_rolls_back_and_can_be_retried() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(Deadlines::default(), false);
    for (i, step) in CREATE_STEPS.iter().enumerate() {
        fail_create_at(&f, step, &format!("retry-{i}")).await;
    }
    // Every failed start is on record as FAILED with its error.
    let failed: Vec<_> = f
        .records()
        .await
        .into_iter()
        .filter(|s| s.status == SandboxStatus::Failed)
        .collect();
    assert!(failed.iter().all(|s| s.error.is_some()), "{failed:?}");
    f.finish().await;
    scenario.teardown();
}

/// In a network namespace and with network state of its own: with the host's, a
/// create took a network another test's `sandboxd run` had parked there (made earlier,
/// so no `network.prepare`) and succeeded. The engine's threads are all started from
/// this one, after the unshare, so they are in the namespace too.
#[test]
fn a_create_failing_at_network_wiring_rolls_back() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    tokio.block_on(async {
        let scenario = fail::FailScenario::setup();
        let f = Fixture::new(Deadlines::default(), true);
        for (i, step) in ["network.prepare", "network.connect"].iter().enumerate() {
            fail_create_at(&f, step, &format!("net-{i}")).await;
        }
        f.finish().await;
        scenario.teardown();
    });
}

/// The case: a store write fails during create and so does the write of
/// FAILED after it. The record stays PENDING only until it is settled: a create
/// retried with the same name gets a new sandbox (not the stuck one with `false`), and
/// an unnamed one is settled by the engine's own tick.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_undo_fails_too_is_settled_not_returned() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(Deadlines::default(), false);
    fail::cfg("store.save", "return").expect("failpoint");
    f.engine
        .create(&f.ws(), request("stuck"))
        .await
        .expect_err("no store write works");
    let mut unnamed = request("x");
    unnamed.name = None;
    f.engine
        .create(&f.ws(), unnamed)
        .await
        .expect_err("no store write works");
    fail::remove("store.save");

    let (sb, created) = f
        .engine
        .create(&f.ws(), request("stuck"))
        .await
        .expect("retry");
    assert!(
        created,
        "the stuck sandbox was returned: {} {}",
        sb.id,
        sb.status.as_str()
    );
    assert_eq!(sb.status, SandboxStatus::Running);
    let records = eventually("no record is transitional", || async {
        let records = f.records().await;
        records
            .iter()
            .all(|s| !faults::TRANSITIONAL.contains(&s.status))
            .then_some(records)
    })
    .await;
    let failed = records
        .iter()
        .filter(|s| s.status == SandboxStatus::Failed)
        .count();
    assert_eq!(failed, 2, "{records:?}");
    f.assert_only(&[sb.id], "settled").await;
    f.finish().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_and_resume_failing_at_any_step_leave_a_settled_sandbox() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(Deadlines::default(), false);
    let ws = f.ws();
    let (sb, _) = f.engine.create(&ws, request("p")).await.expect("create");
    let id = sb.id;
    let status = || async { f.engine.get(&ws, id).await.expect("get").status };

    // The freeze fails, or the write of PAUSING: still RUNNING.
    for step in ["freeze", "store.save.PAUSING"] {
        fail::cfg(step, "return").expect("failpoint");
        let err = f.engine.pause(&ws, id).await;
        fail::remove(step);
        let err = err.expect_err(step);
        if step == "freeze" {
            let said = format!("cannot pause sandbox {id}");
            assert!(err.message.starts_with(&said), "{step}: {}", err.message);
        }
        assert_eq!(status().await, SandboxStatus::Running, "{step}");
    }
    // The write of PAUSED fails once frozen: the pause is finished by the engine.
    fail::cfg("store.save.PAUSED", "1*return").expect("failpoint");
    f.engine
        .pause(&ws, id)
        .await
        .expect_err("PAUSED not written");
    eventually("the pause is finished", || async {
        (status().await == SandboxStatus::Paused).then_some(())
    })
    .await;
    fail::remove("store.save.PAUSED");

    for step in ["thaw", "store.save.RESUMING"] {
        fail::cfg(step, "return").expect("failpoint");
        let err = f.engine.resume(&ws, id).await;
        fail::remove(step);
        let err = err.expect_err(step);
        if step == "thaw" {
            let said = format!("cannot resume sandbox {id}");
            assert!(err.message.starts_with(&said), "{step}: {}", err.message);
        }
        assert_eq!(status().await, SandboxStatus::Paused, "{step}");
    }
    fail::cfg("store.save.RUNNING", "1*return").expect("failpoint");
    f.engine
        .resume(&ws, id)
        .await
        .expect_err("RUNNING not written");
    eventually("the resume is finished", || async {
        (status().await == SandboxStatus::Running).then_some(())
    })
    .await;
    fail::remove("store.save.RUNNING");
    // Thawed for real: a command runs.
    let out = f
        .engine
        .exec(&ws, id, exec_true())
        .await
        .expect("exec after resume");
    assert_eq!(out.exit.map(|e| e.shell_code()), Some(0));
    f.assert_only(&[id], "pause and resume").await;
    f.finish().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_failing_at_any_step_leaves_no_snapshot_or_layer() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(Deadlines::default(), false);
    let ws = f.ws();
    let (sb, _) = f.engine.create(&ws, request("s")).await.expect("create");
    let layers = || layer_entries(&f.data);
    let before = layers();
    for step in ["capture", "store.insert_snapshot"] {
        fail::cfg(step, "return").expect("failpoint");
        let err = f.engine.snapshot(&ws, sb.id, None).await;
        fail::remove(step);
        err.expect_err(step);
        let page = PageRequest {
            limit: 100,
            cursor: None,
        };
        let snaps = f
            .engine
            .list_snapshots(&ws, None, page)
            .await
            .expect("list");
        assert!(snaps.items.is_empty(), "{step}: a snapshot was recorded");
        assert_eq!(layers(), before, "{step}: a layer was left");
        assert_eq!(
            f.engine.get(&ws, sb.id).await.expect("get").status,
            SandboxStatus::Running,
            "{step}"
        );
    }
    let snap = f.engine.snapshot(&ws, sb.id, None).await.expect("snapshot");
    f.engine
        .delete_snapshot(&ws, snap.id)
        .await
        .expect("delete snapshot");
    f.finish().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destroy_failing_at_any_step_ends_with_nothing_left() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(Deadlines::default(), false);
    let ws = f.ws();
    // The write of TERMINATING fails: nothing happened, the sandbox still runs.
    let (sb, _) = f.engine.create(&ws, request("d0")).await.expect("create");
    fail::cfg("store.save.TERMINATING", "return").expect("failpoint");
    f.engine
        .destroy(&ws, sb.id)
        .await
        .expect_err("TERMINATING not written");
    fail::remove("store.save.TERMINATING");
    let got = f.engine.get(&ws, sb.id).await.expect("get");
    assert_eq!(got.status, SandboxStatus::Running);
    f.assert_only(&[sb.id], "TERMINATING not written").await;
    f.engine.destroy(&ws, sb.id).await.expect("destroy");
    f.assert_only(&[], "destroyed after all").await;

    // A teardown step fails: FAILED with the error; the next destroy finishes it.
    for (i, step) in ["destroy.cgroup", "destroy.unmount", "destroy.dir"]
        .iter()
        .enumerate()
    {
        let (sb, _) = f
            .engine
            .create(&ws, request(&format!("d{}", i + 1)))
            .await
            .expect("create");
        fail::cfg(*step, "return").expect("failpoint");
        let ended = f.engine.destroy(&ws, sb.id).await;
        fail::remove(step);
        let ended = ended.expect(step);
        assert_eq!(ended.status, SandboxStatus::Failed, "{step}");
        assert!(
            ended.error.as_deref().is_some_and(|e| e.contains(step)),
            "{step}: {:?}",
            ended.error
        );
        f.engine.destroy(&ws, sb.id).await.expect("destroy again");
        f.assert_only(&[], step).await;
    }

    // The write of TERMINATED fails after the teardown: the engine finishes it.
    let (sb, _) = f.engine.create(&ws, request("d9")).await.expect("create");
    fail::cfg("store.save.TERMINATED", "1*return").expect("failpoint");
    f.engine
        .destroy(&ws, sb.id)
        .await
        .expect_err("TERMINATED not written");
    eventually("the destroy is finished", || async {
        let sb = f.engine.get(&ws, sb.id).await.expect("get");
        (sb.status == SandboxStatus::Terminated).then_some(())
    })
    .await;
    fail::remove("store.save.TERMINATED");
    f.finish().await;
    scenario.teardown();
}

fn exec_true() -> sandboxd_engine::ExecCommand {
    sandboxd_engine::ExecCommand {
        argv: vec!["/bin/true".into()],
        env: None,
        cwd: None,
        timeout: std::time::Duration::from_secs(60),
        max_output_bytes: 1 << 20,
    }
}

/// Names of the stored layers.
fn layer_entries(data: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data.join("layers"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
