//! Ended sandboxes' records are removed after the retention, with their aliases (the
//! alias is free again), while running sandboxes, sandboxes ended within the retention,
//! snapshots of a removed sandbox and creates from them are untouched.

mod common;

use common::*;
use sandboxd_engine::*;
use sandboxd_store::Store;
use std::time::Duration;

#[tokio::test]
async fn ended_records_go_after_the_retention_and_nothing_else_does() {
    let h = Harness::new();
    let ws = h.ws();
    let mut aliased = request(None);
    aliased.aliases.insert("runzivo".into(), "sbx_gone".into());
    let (gone, _) = h.engine.create(&ws, aliased).await.unwrap();
    let snap = h.engine.snapshot(&ws, gone.id, None).await.unwrap();
    h.engine.destroy(&ws, gone.id).await.unwrap();
    let (recent, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let (running, _) = h.engine.create(&ws, request(None)).await.unwrap();

    // A retention of an hour keeps what just ended.
    let kept = h.engine.prune_ended_sandboxes(Duration::from_secs(3600));
    assert_eq!(kept.unwrap(), 0);
    assert!(h.store.get_sandbox(gone.id).unwrap().is_some());

    h.engine.destroy(&ws, recent.id).await.unwrap();
    // A retention of zero: everything ended so far goes, and only that.
    let pruned = h.engine.prune_ended_sandboxes(Duration::ZERO).unwrap();
    assert_eq!(pruned, 2);
    assert!(h.store.get_sandbox(gone.id).unwrap().is_none());
    assert!(h.store.get_sandbox(recent.id).unwrap().is_none());
    assert_eq!(
        h.engine.get(&ws, gone.id).await.unwrap_err().code,
        ErrorCode::SandboxNotFound
    );
    assert!(
        h.store
            .sandbox_by_alias("runzivo", "sbx_gone")
            .unwrap()
            .is_none(),
        "the alias went with its record"
    );
    let got = h.engine.get(&ws, running.id).await.unwrap();
    assert_eq!(got.status, SandboxStatus::Running);

    // The snapshot of the removed sandbox stays, and a create from it works; the
    // freed alias can be taken again.
    let still = h.engine.get_snapshot(&ws, snap.id).await.unwrap();
    assert_eq!(still.source_sandbox_id, gone.id);
    let mut clone = request(None);
    clone.snapshot_id = Some(snap.id);
    clone.aliases.insert("runzivo".into(), "sbx_gone".into());
    let (made, _) = h.engine.create(&ws, clone).await.unwrap();
    assert_eq!(made.status, SandboxStatus::Running);
    assert_eq!(h.engine.prune_ended_sandboxes(Duration::ZERO).unwrap(), 0);
}

/// A retention reaching before the earliest date the server can compute (10^8 hours,
/// or an audit retention of u32::MAX days) removes nothing and never panics.
#[tokio::test]
async fn a_retention_past_the_calendar_removes_nothing_and_does_not_panic() {
    let h = Harness::new();
    let ws = h.ws();
    let (gone, _) = h.engine.create(&ws, request(None)).await.unwrap();
    h.engine.destroy(&ws, gone.id).await.unwrap();
    for hours in [100_000_000u64, u64::from(u32::MAX)] {
        let kept = h
            .engine
            .prune_ended_sandboxes(Duration::from_secs(hours * 3600));
        assert_eq!(kept.unwrap(), 0, "{hours} hours");
    }
    assert!(h.store.get_sandbox(gone.id).unwrap().is_some());
    assert_eq!(h.engine.prune_audit(u32::MAX).unwrap(), 0);
}
