//! A server killed in the middle of a restore from disk loses nothing: cut between the
//! runtime saving the live handle and removing the image (a failpoint), the image is
//! still there, and the next start-up adopts the restored sandbox; cut after the
//! restore but before the engine recorded it (the store still holding the handle on
//! disk, whose image is gone), the next start-up adopts the restored sandbox instead of
//! taking it for crashed. Skipped where runsc is missing.

mod common;
mod gvisor_common;

use common::agent_sh;
use gvisor_common::*;
use sandboxd_engine::{
    CreateSandbox, Engine, EngineConfig, ExecCommand, Limits, NetworkMode, ProcessExit, Resources,
    SandboxStatus,
};
use sandboxd_runtime::Runtime;
use sandboxd_store::Store;
use std::sync::Arc;
use std::time::Duration;

const SLEEPER: &str = "(setsid sleep 3601 </dev/null >/dev/null 2>&1 &)";
const PS: &str = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '";

#[test]
fn a_restore_cut_after_saving_its_handle_comes_back_from_its_image() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    assert_eq!(agent_sh(&handle, SLEEPER).0, Some(0));
    let on_disk = rt.checkpoint(&handle).expect("checkpoint");
    fail::cfg("restore.saved", "panic").expect("failpoint");
    let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.restore(&on_disk)));
    fail::remove("restore.saved");
    assert!(cut.is_err(), "the failpoint was not met");
    // The image is still there (the record's handle on disk is still good)...
    assert!(
        rt.is_checkpointed(&on_disk),
        "the image went before the handle was saved"
    );
    // ...and the next start-up adopts the restored sandbox, the image going then.
    let live = rt.restored(&on_disk).expect("the restored handle");
    assert!(!rt.is_checkpointed(&on_disk), "the image is left");
    let keep: std::collections::HashSet<_> = [on_disk.id].into();
    rt.reconcile(&keep, &Default::default());
    assert!(rt.is_alive(&live));
    let (code, out) = agent_sh(&live, PS);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("sleep 3601"), "{out}");
    rt.destroy(&live).expect("destroy");
    assert_gone(&rt, &live);
    scenario.teardown();
}

fn request() -> CreateSandbox {
    CreateSandbox {
        name: None,
        resources: Resources {
            vcpu: 1,
            memory_mb: 256,
        },
        image: None,
        snapshot_id: None,
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
    let r = engine.exec(&"ws".into(), id, cmd).await.expect("exec");
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.exit, Some(ProcessExit::Code(0)), "{out}");
    out
}

#[test]
fn a_resume_the_store_did_not_record_keeps_the_restored_sandbox() {
    if !sandboxd_runtime::linux::gvisor::GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let _cleanup = Gvisor(raw_gvisor(&data));
    let store = Arc::new(sandboxd_store::SqliteStore::open(data.join("db")).expect("store"));
    let open = || {
        let runtime: Arc<dyn Runtime> = Arc::new(raw_gvisor(&data));
        Engine::open(EngineConfig {
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
        .expect("engine")
    };
    let ws = "ws".to_owned();
    // The first server: its tasks end with its tokio runtime.
    let id = tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            let engine = open();
            let sb = engine.create(&ws, request()).await.expect("create").0;
            sh(&engine, sb.id, SLEEPER).await;
            engine.pause(&ws, sb.id).await.expect("pause");
            let mut resuming = store.get_sandbox(sb.id).expect("store").expect("record");
            assert!(
                resuming
                    .handle
                    .as_ref()
                    .is_some_and(|h| h["agent_pid"] == 0),
                "not on disk"
            );
            resuming.status = "RESUMING".into();
            let resumed = engine.resume(&ws, sb.id).await.expect("resume");
            assert_eq!(resumed.status, SandboxStatus::Running);
            // Killed once the restore was done, before its record was written.
            store.update_sandbox(&resuming).expect("store");
            sb.id
        });
    tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            let engine = open();
            let sb = engine.get(&ws, id).await.expect("get");
            assert_eq!(sb.status, SandboxStatus::Running, "{sb:?}");
            assert!(sh(&engine, id, PS).await.contains("sleep 3601"));
            engine.destroy(&ws, id).await.expect("destroy");
        });
}
