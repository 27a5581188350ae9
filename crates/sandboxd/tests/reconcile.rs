//! Start-up reconciliation: sandboxes under the data directory that no live record
//! claims (a start a crash interrupted before or after it wrote its handle) are
//! removed when the engine opens, their running agents included.

mod common;
mod host;

use sandboxd_engine::{Engine, EngineConfig, Limits};
use sandboxd_runtime::Runtime;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_no_live_record_claims_are_removed_when_the_engine_opens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical data dir");
    let rt = Arc::new(common::runtime(&data));
    // Interrupted before its handle was written: its agent runs all the same.
    let orphan = rt.start(&common::spec("default")).expect("start");
    std::fs::remove_file(orphan.state_dir.join("handle.json")).expect("drop the handle");
    // Started, but its record never said so.
    let unclaimed = rt.start(&common::spec("default")).expect("start");

    let store = sandboxd_store::SqliteStore::open(data.join("sandboxd.db")).expect("store");
    let engine = Engine::open(EngineConfig {
        data_dir: data.clone(),
        runtime: rt.clone(),
        store: Arc::new(store),
        limits: Limits::default(),
    })
    .expect("engine");

    for h in [&orphan, &unclaimed] {
        let id = h.id.to_string();
        assert!(
            !host::exists(h.agent_pid, h.agent_start_ticks),
            "agent of {id} left"
        );
        assert_eq!(
            host::processes_of(&id),
            Vec::<i32>::new(),
            "processes of {id} left"
        );
        let cgroups: Vec<_> = rt
            .cgroups()
            .dirs(h.id)
            .into_iter()
            .filter(|d| d.exists())
            .collect();
        assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
        assert_eq!(
            host::mounts_of(&h.state_dir, &id),
            Vec::<String>::new(),
            "mounts left"
        );
        assert!(!h.state_dir.exists(), "state dir of {id} left");
    }
    let slots = common::slot_leases(&data);
    assert!(slots.is_empty(), "host id slots left: {slots:?}");
    drop(engine);
}
