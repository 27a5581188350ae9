//! A snapshot's wait for `admission` (the server-wide lock under which creates and
//! snapshots reserve room) against its sandbox's lock, through the Inngest dialect (real
//! engine and Linux backend, the router in-process; failpoints hold each side):
//!
//! - a named create never waits for the lock of a due sandbox of that name while
//!   holding `admission` (REVIEW12b #1b): a snapshot holds its sandbox's lock and then
//!   waits for `admission`, so the old order deadlocked every create, snapshot and pause
//!   of the server;
//! - a snapshot waiting for `admission` does not keep its sandbox frozen meanwhile
//!   (REVIEW11b #7): it reserves before it freezes.

mod faults;
mod inngest_api;

use inngest_api::Api;
use sandboxd_engine::{CreateSandbox, DEFAULT_WORKSPACE};
use serde_json::json;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long the create may take before it counts as hung (it answers at once).
const HANG: Duration = Duration::from_secs(60);

/// A snapshot is held under its sandbox's lock before it waits for admission (failpoint
/// `snapshot.admission`), the sandbox's deadline passes, an Inngest create of the same
/// name is held under admission (`create.named`), the snapshot goes on to wait for
/// admission and the create is let go: it answers 503 with a Retry-After in the
/// dialect's shape instead of hanging, and the snapshot then completes.
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
        let (snapshot_at, release_snapshot) = hold("snapshot.admission");
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
        fail::remove("snapshot.admission");
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

/// A create holds admission (held at `create.named`, a name already taken); a snapshot
/// of a running sandbox then waits for admission: the sandbox answers an exec
/// meanwhile (before, it was frozen for the whole wait), and both complete once the
/// create lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_waiting_for_admission_does_not_keep_its_sandbox_frozen() {
    Api::run(|api| async move {
        let body = json!({"name": "busy", "vcpu": 1, "memoryMb": 128});
        let first = api.post("/v2/sandboxes", body.clone()).await;
        assert!(first.status.is_success(), "{}", first.json());
        let id = first.json()["data"]["id"].as_str().expect("id").to_owned();
        let (create_at, release_create) = hold("create.named");
        let create = tokio::spawn({
            let api = api.clone();
            async move { api.post("/v2/sandboxes", body).await }
        });
        reached(create_at).await;
        // The snapshot, let go just before its wait for admission, which the create holds.
        let (snapshot_at, release_snapshot) = hold("snapshot.admission");
        let snapshot = tokio::spawn({
            let (api, path) = (api.clone(), format!("/v2/sandboxes/{id}/snapshots"));
            async move { api.post(&path, json!({"name": "waiting"})).await }
        });
        reached(snapshot_at).await;
        release_snapshot.send(()).expect("release the snapshot");
        fail::remove("snapshot.admission");
        let exec_path = format!("/v2/sandboxes/{id}/exec");
        let exec = api.post(
            &exec_path,
            json!({"command": ["/bin/sh", "-c", "echo awake"]}),
        );
        let answered = tokio::time::timeout(HANG, exec).await;
        // The create lets go of admission whatever the exec did, so all can end.
        release_create.send(()).expect("release the create");
        fail::remove("create.named");
        let exec = answered.expect("the sandbox stayed frozen while its snapshot waited");
        assert_eq!(exec.status.as_u16(), 200, "{}", exec.json());
        use base64::Engine;
        let stdout = exec.json()["data"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let stdout = base64::engine::general_purpose::STANDARD
            .decode(stdout)
            .expect("base64");
        assert_eq!(stdout, b"awake\n");
        let again = tokio::time::timeout(HANG, create)
            .await
            .expect("the create answers")
            .expect("join");
        assert_eq!(again.json()["data"]["id"], json!(id), "{}", again.json());
        let taken = tokio::time::timeout(HANG, snapshot)
            .await
            .expect("the snapshot completes")
            .expect("join");
        assert_eq!(taken.status.as_u16(), 201, "{}", taken.json());
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
