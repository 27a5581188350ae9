//! Deadlines of the transitional states: a step made to hang (the `failpoints`
//! feature's `pause` action, released by the test) does not leave its sandbox
//! STARTING, PAUSING or TERMINATING. Past the deadline (short ones configured here) the
//! sandbox is FAILED with the reason, and what the hung step makes once released is
//! removed.

mod faults;

use faults::{eventually, request, Fixture};
use sandboxd_engine::{Deadlines, ErrorCode, SandboxStatus};
use std::time::Duration;

fn short() -> Deadlines {
    Deadlines {
        start: Duration::from_secs(2),
        pause: Duration::from_secs(1),
        destroy: Duration::from_secs(2),
        snapshot: Duration::from_secs(1),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_start_fails_at_its_deadline_and_is_removed_once_it_returns() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(short(), false);
    let ws = f.ws();
    // Only the first start hangs (until the failpoint is removed).
    fail::cfg("start.handshake", "1*pause").expect("failpoint");
    let err = f
        .engine
        .create(&ws, request("hung"))
        .await
        .expect_err("the start hangs");
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
    assert!(err.message.contains("did not finish within"), "{err}");
    let hung = f.records().await;
    assert_eq!(hung.len(), 1);
    assert_eq!(hung[0].status, SandboxStatus::Failed);
    assert!(
        hung[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("did not finish")),
        "{:?}",
        hung[0].error
    );
    // The name is free at once, while the old start still hangs. A retry may itself
    // miss the short deadline on a loaded machine (a start is no timed promise here):
    // such a start fails the same way, is removed once it returns, and is retried.
    let mut attempts = 0;
    let (sb, created) = loop {
        attempts += 1;
        match f.engine.create(&ws, request("hung")).await {
            Ok(done) => break done,
            Err(e)
                if attempts < 5
                    && e.code == ErrorCode::Unavailable
                    && e.message.contains("did not finish within") => {}
            Err(e) => panic!("retry: {e:?}"),
        }
    };
    assert!(created && sb.status == SandboxStatus::Running);

    fail::remove("start.handshake"); // the hung start goes on, and is then removed
                                     // Its directory goes first, its id slot last: wait for both.
    eventually("the late start is removed", || async {
        let dirs = std::fs::read_dir(f.data.join("sandboxes"))
            .map(|rd| rd.count())
            .unwrap_or(0);
        (dirs == 1 && faults::slot_leases(&f.data).len() == 1).then_some(())
    })
    .await;
    f.assert_only(&[sb.id], "late start removed").await;
    f.finish().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_pause_or_resume_fails_the_sandbox_at_its_deadline() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(short(), false);
    let ws = f.ws();
    for (i, step) in ["freeze", "thaw"].iter().enumerate() {
        let (sb, _) = f
            .engine
            .create(&ws, request(&format!("p{i}")))
            .await
            .expect("create");
        if *step == "thaw" {
            f.engine.pause(&ws, sb.id).await.expect("pause");
        }
        fail::cfg(*step, "pause").expect("failpoint");
        let err = match *step {
            "freeze" => f.engine.pause(&ws, sb.id).await,
            _ => f.engine.resume(&ws, sb.id).await,
        }
        .expect_err("the step hangs");
        assert!(
            err.message.contains("did not finish within"),
            "{step}: {err}"
        );
        let got = f.engine.get(&ws, sb.id).await.expect("get");
        assert_eq!(got.status, SandboxStatus::Failed, "{step}");
        assert!(
            got.error
                .as_deref()
                .is_some_and(|e| e.contains("did not finish")),
            "{step}: {:?}",
            got.error
        );
        fail::remove(step);
        // Its late freeze or thaw finds the sandbox gone and changes nothing; a moment
        // for it to run (nothing below depends on its timing).
        tokio::time::sleep(Duration::from_millis(200)).await;
        f.assert_only(&[], step).await;
    }
    f.finish().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_destroy_fails_at_its_deadline_and_finishes_once_released() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(short(), false);
    let ws = f.ws();
    let (sb, _) = f.engine.create(&ws, request("d")).await.expect("create");
    fail::cfg("destroy.dir", "pause").expect("failpoint");
    let ended = f.engine.destroy(&ws, sb.id).await.expect("destroy");
    assert_eq!(ended.status, SandboxStatus::Failed);
    assert!(
        ended
            .error
            .as_deref()
            .is_some_and(|e| e.contains("did not finish")),
        "{:?}",
        ended.error
    );
    fail::remove("destroy.dir");
    eventually("the released teardown finishes", || async {
        (!f.data.join("sandboxes").join(sb.id.to_string()).exists()).then_some(())
    })
    .await;
    f.assert_only(&[], "released teardown").await;
    f.finish().await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_snapshot_gives_up_at_its_deadline_and_the_sandbox_runs_on() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(short(), false);
    let ws = f.ws();
    let (sb, _) = f.engine.create(&ws, request("s")).await.expect("create");
    fail::cfg("capture", "pause").expect("failpoint");
    let err = f
        .engine
        .snapshot(&ws, sb.id, None)
        .await
        .expect_err("the capture hangs");
    assert!(err.message.contains("did not finish within"), "{err}");
    fail::remove("capture");
    let got = f.engine.get(&ws, sb.id).await.expect("get");
    assert_eq!(got.status, SandboxStatus::Running);
    f.engine.snapshot(&ws, sb.id, None).await.expect("snapshot");
    f.finish().await;
    scenario.teardown();
}

/// The layer directories of the data dir's store (scratch dirs included).
fn layer_dirs(data: &std::path::Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(data.join("layers"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A capture released past its snapshot's deadline stops (its caller gave up): it
/// leaves no layer that no snapshot records, and no scratch dir.
#[tokio::test(flavor = "multi_thread")]
async fn a_capture_past_its_deadline_stops_and_leaves_no_unrecorded_layer() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(short(), false);
    let ws = f.ws();
    let (sb, _) = f.engine.create(&ws, request("late")).await.expect("create");
    f.engine
        .exec(
            &ws,
            sb.id,
            sandboxd_engine::ExecCommand {
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "echo mine > /mine; sync".into(),
                ],
                env: None,
                cwd: None,
                timeout: Duration::from_secs(60),
                max_output_bytes: 1 << 20,
            },
        )
        .await
        .expect("exec");
    let before = layer_dirs(&f.data);
    fail::cfg("capture", "1*pause").expect("failpoint");
    let err = f
        .engine
        .snapshot(&ws, sb.id, None)
        .await
        .expect_err("the capture hangs");
    assert!(err.message.contains("did not finish within"), "{err}");
    fail::remove("capture"); // the late capture goes on, told to stop
                             // Time for it to finish (it copies a few bytes); nothing may be left of it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        layer_dirs(&f.data),
        before,
        "a layer no snapshot records, or a scratch dir"
    );
    let snap = f.engine.snapshot(&ws, sb.id, None).await.expect("snapshot");
    assert!(layer_dirs(&f.data).contains(&snap.digest));
    f.finish().await;
    scenario.teardown();
}
