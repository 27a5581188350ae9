//! A named create never waits for the lock of a due sandbox of that name while holding
//! `admission` (REVIEW12b #1b): a snapshot holds its sandbox's lock and then waits for
//! `admission`, so the old order deadlocked every create, snapshot and pause of the
//! server. A snapshot is held between its sandbox's lock and its reservation (failpoint
//! `snapshot.measured`), the sandbox's deadline passes, an Inngest create of the same
//! name is held under admission (`create.named`), the snapshot goes on to wait for
//! admission and the create is let go: it answers 503 with a Retry-After in the
//! dialect's shape instead of hanging, and the snapshot then completes. Real engine and Linux backend, the router in-process.

mod faults;
mod inngest_api;

use inngest_api::Api;
use sandboxd_engine::{CreateSandbox, DEFAULT_WORKSPACE};
use serde_json::json;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long the create may take before it counts as hung (it answers at once).
const HANG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_create_answers_while_a_snapshot_holds_its_due_namesake() {
    Api::run(|api| async move {
        let ws = DEFAULT_WORKSPACE.to_owned();
        // A named sandbox with a deadline (the engine's API: no dialect gives a named
        // create a timeout today, a builder or a future one may).
        let request = CreateSandbox {
            timeout: Some(Duration::from_secs(3)),
            ..faults::request("job")
        };
        let (sb, _) = api.engine.create(&ws, request).await.expect("create");
        let expires = sb.expires_at.expect("a deadline");

        // The snapshot, held past its sandbox's lock until the test lets it go.
        let (snapshot_at, release_snapshot) = hold("snapshot.measured");
        let engine = api.engine.clone();
        let snapshot = tokio::spawn({
            let ws = ws.clone();
            async move { engine.snapshot(&ws, sb.id, Some("held".into())).await }
        });
        reached(snapshot_at).await;
        // Its deadline passes while the snapshot holds it.
        while time::OffsetDateTime::now_utc() <= expires {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A named create of the same name, held under admission until the snapshot has
        // gone on to wait for admission: the cycle of the deadlock.
        let (create_at, release_create) = hold("create.named");
        let body = json!({"name": "job", "vcpu": 1, "memoryMb": 128});
        let create = tokio::spawn({
            let (api, body) = (api.clone(), body.clone());
            async move { api.post("/v2/sandboxes", body).await }
        });
        reached(create_at).await;
        release_snapshot.send(()).expect("release the snapshot");
        fail::remove("snapshot.measured");
        release_create.send(()).expect("release the create");
        fail::remove("create.named");
        let abort = create.abort_handle();
        let reply = match tokio::time::timeout(HANG, create).await {
            Ok(reply) => reply.expect("join"),
            Err(_) => {
                // Dropping the create lets go of admission, so the clean-up can run.
                abort.abort();
                panic!("the named create hung behind the snapshot's lock (deadlock)")
            }
        };
        reply.expect(503, "compute_unavailable");
        let retry: u64 = reply.headers["retry-after"]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("Retry-After in seconds");
        assert!(retry >= 1, "Retry-After: {retry}");

        // The snapshot then completes, and the name is free once the sandbox has ended.
        let taken = tokio::time::timeout(HANG, snapshot)
            .await
            .expect("the snapshot completes")
            .expect("join")
            .expect("the snapshot");
        assert_eq!(taken.name.as_deref(), Some("held"));
        let again = tokio::time::timeout(HANG, api.post("/v2/sandboxes", body))
            .await
            .expect("the create answers");
        assert!(
            again.status.is_success(),
            "{} {}",
            again.status,
            again.json()
        );
        assert_ne!(again.json()["data"]["id"], json!(sb.id.to_string()));
        let old = api.engine.get(&ws, sb.id).await.expect("get");
        assert!(!old.status.is_active(), "{:?}", old.status);
    })
    .await;
}

/// Makes failpoint `name` signal once reached and wait there (at most five minutes)
/// for the sender returned.
fn hold(name: &str) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (reached_tx, reached) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let (reached_tx, released) = (Mutex::new(reached_tx), Arc::new(Mutex::new(released)));
    fail::cfg_callback(name, move || {
        let _ = reached_tx.lock().unwrap().send(());
        let _ = released
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(300));
    })
    .expect("failpoint");
    (reached, release)
}

/// Waits (at most two minutes) until a [`hold`] point is reached.
async fn reached(at: mpsc::Receiver<()>) {
    tokio::task::spawn_blocking(move || at.recv_timeout(Duration::from_secs(120)))
        .await
        .expect("join")
        .expect("the failpoint was reached");
}
