//! A memory snapshot deleted while a sandbox is being created from it: the create
//! holds the snapshot, so the delete waits until the restore is done (then removes the
//! image) and the create succeeds with the snapshot's processes; a create arriving
//! after the delete began finds no snapshot. Fault injection (`failpoints`) holds the
//! create in its start. A fork whose start missed its deadline holds the snapshot too,
//! until its restore (going on in the background) has ended. Skipped where runsc is
//! missing.

mod common;
mod gvisor_common;

use gvisor_common::*;
use sandboxd_engine::{
    CreateSandbox, Deadlines, Engine, EngineConfig, ErrorCode, ExecCommand, Limits, NetworkMode,
    ProcessExit, Resources, SandboxStatus,
};
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use std::sync::Arc;
use std::time::Duration;

const WS: &str = "forks";

fn request(snapshot: Option<uuid::Uuid>) -> CreateSandbox {
    CreateSandbox {
        name: None,
        resources: Resources {
            vcpu: 1,
            memory_mb: 256,
        },
        image: None,
        snapshot_id: snapshot,
        environment: Default::default(),
        secrets: Vec::new(),
        metadata: Default::default(),
        timeout: None,
        auto_pause: false,
        isolation: None,
        network: None,
        egress: None,
        disk_mb: None,
        aliases: Default::default(),
        attributes: Default::default(),
    }
}

async fn sh(engine: &Engine, id: uuid::Uuid, script: &str) -> String {
    let cmd = ExecCommand {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: None,
        cwd: None,
        timeout: Duration::from_secs(60),
        max_output_bytes: 1 << 20,
    };
    let r = engine.exec(&WS.into(), id, cmd).await.expect("exec");
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.exit, Some(ProcessExit::Code(0)), "{out}");
    out
}

/// Removes a failpoint when dropped (a paused one would hold its thread forever).
struct Release(&'static str);

impl Drop for Release {
    fn drop(&mut self) {
        fail::remove(self.0);
    }
}

#[test]
fn a_snapshot_deleted_during_a_create_from_it_waits_for_the_restore() {
    deleted_during_a_create(false);
}

/// The delete's caller gone (its request dropped) while it waits: the image still goes
/// once the restore is done.
#[test]
fn a_snapshot_delete_abandoned_while_it_waits_still_removes_the_image() {
    deleted_during_a_create(true);
}

fn deleted_during_a_create(abandon: bool) {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let rt = Arc::new(Gvisor(raw_gvisor(&data)));
    let store = Arc::new(sandboxd_store::SqliteStore::open(data.join("db")).expect("store"));
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    tokio.block_on(async {
        let runtime: Arc<dyn sandboxd_runtime::Runtime> = Arc::new(raw_gvisor(&data));
        let engine = Engine::open(EngineConfig {
            data_dir: data.clone(),
            runtime,
            store: store.clone(),
            limits: Limits {
                default_network: NetworkMode::None,
                isolation: sandboxd_runtime::Isolation::Gvisor,
                // Small: the host's free disk, which admission counts, is shared.
                disk_mb_per_sandbox: 256,
                ..Limits::default()
            },
        })
        .expect("engine");
        let ws = WS.to_owned();
        let source = engine.create(&ws, request(None)).await.expect("create").0;
        sh(
            &engine,
            source.id,
            "(setsid sleep 3601 </dev/null >/dev/null 2>&1 &)",
        )
        .await;
        let snap = engine
            .snapshot(&ws, source.id, None)
            .await
            .expect("snapshot");
        assert!(snap.memory_image.is_some(), "{snap:?}");
        let image = snap.memory_image.clone().expect("image");

        // The create stops at the start of its restore (let go however the test ends).
        fail::cfg("start.gvisor", "pause").expect("failpoint");
        let _release = Release("start.gvisor");
        let (waits_tx, mut waits) = tokio::sync::mpsc::unbounded_channel();
        fail::cfg_callback("snapshot_delete.waits", move || {
            let _ = waits_tx.send(());
        })
        .expect("callback");
        let fork = tokio::spawn({
            let (engine, ws) = (engine.clone(), ws.clone());
            async move { engine.create(&ws, request(Some(snap.id))).await }
        });
        common::wait_for("the fork is starting", || {
            use sandboxd_store::Store;
            let starting = store.sandboxes_in_status(&["STARTING"]).expect("store");
            !starting.is_empty()
        });
        let mut delete = tokio::spawn({
            let (engine, ws) = (engine.clone(), ws.clone());
            async move { engine.delete_snapshot(&ws, snap.id).await }
        });
        tokio::select! {
            _ = waits.recv() => {}
            done = &mut delete => panic!("the delete finished during the restore: {done:?}"),
        }
        assert!(
            image.join("checkpoint.img").is_file(),
            "the image went mid-restore"
        );
        // A create arriving now finds no snapshot.
        let late = engine.create(&ws, request(Some(snap.id))).await;
        assert_eq!(
            late.expect_err("a late fork").code,
            ErrorCode::SnapshotNotFound
        );

        if abandon {
            delete.abort();
        }
        fail::remove("start.gvisor");
        let (fork, created) = fork.await.expect("join").expect("the fork");
        assert!(created && fork.status == SandboxStatus::Running);
        match abandon {
            true => {
                assert!(delete.await.is_err_and(|e| e.is_cancelled()));
                let gone = image.clone();
                tokio::task::spawn_blocking(move || {
                    common::wait_for("the image goes", || !gone.exists())
                })
                .await
                .expect("the image outlived the abandoned delete");
            }
            false => {
                delete.await.expect("join").expect("the delete");
                assert!(!image.exists(), "the image outlived the delete");
            }
        }
        // The fork runs the source's processes (a fresh sandbox has no such sleep).
        let ps = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '";
        assert!(sh(&engine, fork.id, ps).await.contains("sleep 3601"));
        for id in [fork.id, source.id] {
            engine.destroy(&ws, id).await.expect("destroy");
        }
    });
    fail::remove("snapshot_delete.waits");
    drop(rt);
    scenario.teardown();
}

/// A fork whose start missed its deadline: the create answers, the restore goes on in
/// the background, and the snapshot stays held until that restore has ended (a delete
/// meanwhile waits, the image stays); the late start is then removed.
#[test]
fn a_fork_past_its_start_deadline_holds_its_snapshot_until_the_restore_ends() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let rt = Arc::new(Gvisor(raw_gvisor(&data)));
    let store = Arc::new(sandboxd_store::SqliteStore::open(data.join("db")).expect("store"));
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    tokio.block_on(async {
        let runtime: Arc<dyn sandboxd_runtime::Runtime> = Arc::new(raw_gvisor(&data));
        let engine = Engine::open(EngineConfig {
            data_dir: data.clone(),
            runtime,
            store: store.clone(),
            limits: Limits {
                default_network: NetworkMode::None,
                isolation: sandboxd_runtime::Isolation::Gvisor,
                // Small: the host's free disk, which admission counts, is shared.
                disk_mb_per_sandbox: 256,
                // Long enough for the source's cold start on a loaded machine; the
                // fork's start, held at a failpoint, misses it whatever its length.
                deadlines: Deadlines {
                    start: Duration::from_secs(20),
                    ..Deadlines::default()
                },
                ..Limits::default()
            },
        })
        .expect("engine");
        let ws = WS.to_owned();
        let source = engine.create(&ws, request(None)).await.expect("create").0;
        let snap = engine
            .snapshot(&ws, source.id, None)
            .await
            .expect("snapshot");
        let image = snap.memory_image.clone().expect("a memory snapshot");

        fail::cfg("start.gvisor", "pause").expect("failpoint");
        let _release = Release("start.gvisor");
        let (waits_tx, mut waits) = tokio::sync::mpsc::unbounded_channel();
        fail::cfg_callback("snapshot_delete.waits", move || {
            let _ = waits_tx.send(());
        })
        .expect("callback");
        let overdue = engine
            .create(&ws, request(Some(snap.id)))
            .await
            .expect_err("a start held past its deadline");
        assert_eq!(overdue.code, ErrorCode::Unavailable, "{overdue:?}");
        use sandboxd_store::Store;
        let failed = store.sandboxes_in_status(&["FAILED"]).expect("store");
        assert_eq!(failed.len(), 1, "{failed:?}");
        let fork = failed[0].id;

        // Its restore has not even begun: the delete must wait for it.
        let mut delete = tokio::spawn({
            let (engine, ws) = (engine.clone(), ws.clone());
            async move { engine.delete_snapshot(&ws, snap.id).await }
        });
        tokio::select! {
            _ = waits.recv() => {}
            done = &mut delete => panic!("the delete did not wait for the late restore: {done:?}"),
        }
        assert!(
            image.join("checkpoint.img").is_file(),
            "the image went before the late restore"
        );
        fail::remove("start.gvisor");
        delete.await.expect("join").expect("the delete");
        assert!(!image.exists(), "the image outlived the delete");
        // The late start, restored or not, is removed.
        let state = data.join("sandboxes").join(fork.to_string());
        let fork_id = fork.to_string();
        tokio::task::spawn_blocking(move || {
            common::wait_for("the late start is removed", || {
                !state.exists() && processes_naming(&fork_id).is_empty()
            })
        })
        .await
        .expect("the late start stayed");
        engine.destroy(&ws, source.id).await.expect("destroy");
    });
    fail::remove("snapshot_delete.waits");
    drop(rt);
    scenario.teardown();
}
