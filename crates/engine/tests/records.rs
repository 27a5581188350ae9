//! Persistence through the engine: pagination, isolation, re-adoption, secrets,
//! snapshots and accounts, over a test double runtime and a real SQLite store.

mod common;

use common::*;
use sandboxd_engine::*;
use sandboxd_store::Store;
use uuid::Uuid;

#[tokio::test]
async fn list_pages_newest_first_across_cursors() {
    let h = Harness::new();
    let ws = h.ws();
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(h.engine.create(&ws, request(None)).await.unwrap().0.id);
    }
    h.engine.destroy(&ws, made[0]).await.unwrap();
    h.engine.create(&"w2".into(), request(None)).await.unwrap();

    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = h
            .engine
            .list(&ws, PageRequest { limit: 2, cursor })
            .await
            .unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|s| s.id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    made.reverse();
    assert_eq!(
        seen, made,
        "newest first, terminated included, other workspaces excluded"
    );
    let bad = PageRequest {
        limit: 2,
        cursor: Some("not a cursor".into()),
    };
    assert_eq!(
        h.engine.list(&ws, bad).await.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
}

#[tokio::test]
async fn another_workspace_sees_not_found() {
    let h = Harness::new();
    let (sb, _) = h
        .engine
        .create(&h.ws(), request(Some("mine")))
        .await
        .unwrap();
    let other: WorkspaceId = "w2".into();
    let e = &h.engine;
    let codes = [
        e.get(&other, sb.id).await.unwrap_err().code,
        e.destroy(&other, sb.id).await.unwrap_err().code,
        e.pause(&other, sb.id).await.unwrap_err().code,
        e.exec(&other, sb.id, exec(&["/bin/true"]))
            .await
            .unwrap_err()
            .code,
        e.snapshot(&other, sb.id, None).await.unwrap_err().code,
        e.logs(&other, sb.id, false).await.err().unwrap().code,
    ];
    assert!(
        codes.iter().all(|c| *c == ErrorCode::SandboxNotFound),
        "{codes:?}"
    );
    assert_eq!(
        e.get(&h.ws(), sb.id).await.unwrap().status,
        SandboxStatus::Running
    );
}

#[tokio::test]
async fn reopening_readopts_live_sandboxes_and_ends_dead_ones() {
    let h = Harness::new();
    let ws = h.ws();
    let (live, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let (dead, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let (pausing, _) = h.engine.create(&ws, request(None)).await.unwrap();
    // The server stopped half-way through pausing one of them.
    let mut rec = h.store.get_sandbox(pausing.id).unwrap().unwrap();
    rec.status = "PAUSING".into();
    h.store.update_sandbox(&rec).unwrap();
    h.runtime.kill(dead.id);

    let engine = h.reopen();
    assert_eq!(
        engine.get(&ws, live.id).await.unwrap().status,
        SandboxStatus::Running
    );
    let ended = engine.get(&ws, dead.id).await.unwrap();
    assert_eq!(
        (ended.status, ended.end_reason),
        (SandboxStatus::Terminated, Some(EndReason::Crashed))
    );
    assert!(
        h.runtime.state().destroyed.contains(&dead.id),
        "leftovers cleaned"
    );
    assert_eq!(
        engine.get(&ws, pausing.id).await.unwrap().status,
        SandboxStatus::Paused
    );
    assert!(h.runtime.state().frozen.contains(&pausing.id));
}

/// Re-adoption moves each stored status only along the state machine: a record the
/// server left PENDING after the backend had started the sandbox becomes RUNNING
/// (through STARTING), and one that never got started ends TERMINATED (through
/// TERMINATING), never jumping to a status the machine does not reach from there.
#[tokio::test]
async fn readoption_follows_the_state_machine() {
    let h = Harness::new();
    let ws = h.ws();
    let (started, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let (unstarted, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let mut rec = h.store.get_sandbox(started.id).unwrap().unwrap();
    rec.status = "PENDING".into();
    h.store.update_sandbox(&rec).unwrap();
    let mut rec = h.store.get_sandbox(unstarted.id).unwrap().unwrap();
    (rec.status, rec.handle) = ("PENDING".into(), None);
    h.store.update_sandbox(&rec).unwrap();

    let engine = h.reopen();
    let got = engine.get(&ws, started.id).await.unwrap();
    assert_eq!(got.status, SandboxStatus::Running, "a live PENDING sandbox");
    let ended = engine.get(&ws, unstarted.id).await.unwrap();
    assert_eq!(
        (ended.status, ended.end_reason),
        (SandboxStatus::Terminated, Some(EndReason::Crashed))
    );
    assert!(ended.ended_at.is_some());
}

#[tokio::test]
async fn secrets_are_never_stored_in_plaintext() {
    let h = Harness::new();
    let ws = h.ws();
    const VALUE: &str = "plaintext-secret-value-7c1f";
    h.engine
        .accounts()
        .set_secret(&ws, "API_TOKEN", VALUE)
        .unwrap();
    assert_eq!(
        h.engine.accounts().list_secret_names(&ws).unwrap(),
        vec!["API_TOKEN"]
    );
    let mut req = request(Some("with-secret"));
    req.secrets = vec!["API_TOKEN".into()];
    let (sb, _) = h.engine.create(&ws, req).await.unwrap();
    assert_eq!(sb.secrets, vec!["API_TOKEN"]);
    assert!(!sb.environment.values().any(|v| v == VALUE));

    for entry in std::fs::read_dir(h.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
                "{path:?}"
            );
        }
    }
    assert_eq!(
        h.engine
            .accounts()
            .set_secret(&ws, "bad-name", "x")
            .unwrap_err()
            .code,
        ErrorCode::InvalidArgument
    );
    h.engine.accounts().delete_secret(&ws, "API_TOKEN").unwrap();
    assert_eq!(
        h.engine
            .accounts()
            .delete_secret(&ws, "API_TOKEN")
            .unwrap_err()
            .code,
        ErrorCode::SecretNotFound
    );
}

#[tokio::test]
async fn snapshots_stack_layers_and_free_them_when_unused() {
    let h = Harness::new();
    let ws = h.ws();
    let (src, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let first = h
        .engine
        .snapshot(&ws, src.id, Some("base".into()))
        .await
        .unwrap();
    assert_eq!(first.layers, vec![first.digest.clone()]);

    let mut req = request(None);
    req.snapshot_id = Some(first.id);
    let (clone, _) = h.engine.create(&ws, req).await.unwrap();
    assert_eq!(
        h.runtime.state().specs[&clone.id].extra_layers,
        first.layers
    );
    let second = h.engine.snapshot(&ws, clone.id, None).await.unwrap();
    assert_eq!(
        second.layers,
        vec![first.digest.clone(), second.digest.clone()]
    );

    let named = h
        .engine
        .list_snapshots(&ws, Some("base"), PageRequest::default())
        .await
        .unwrap();
    assert_eq!(
        named.items.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![first.id]
    );
    let all = h
        .engine
        .list_snapshots(
            &ws,
            None,
            PageRequest {
                limit: 1,
                cursor: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(all.items[0].id, second.id);
    assert!(all.next_cursor.is_some());
    assert_eq!(
        h.engine
            .get_snapshot(&"w2".into(), first.id)
            .await
            .unwrap_err()
            .code,
        ErrorCode::SnapshotNotFound
    );

    h.engine.delete_snapshot(&ws, first.id).await.unwrap();
    assert!(
        h.runtime.state().deleted_layers.is_empty(),
        "the second snapshot still uses it"
    );
    h.engine.destroy(&ws, clone.id).await.unwrap();
    h.engine.delete_snapshot(&ws, second.id).await.unwrap();
    let deleted = h.runtime.state().deleted_layers.clone();
    assert_eq!(deleted, vec![first.digest, second.digest]);
}

#[tokio::test]
async fn keys_authenticate_by_hash_until_revoked() {
    let h = Harness::new();
    let master = "master-key-0123456789abcdef";
    h.engine.ensure_master_key(master).unwrap();
    h.engine.ensure_master_key(master).unwrap();
    let p = h.engine.authenticate(master).unwrap().unwrap();
    assert_eq!(p.workspace.as_deref(), Some(DEFAULT_WORKSPACE));
    assert!(p.allows("sandboxes:write") && p.can_use(DEFAULT_WORKSPACE) && !p.can_use("w2"));
    let default = h
        .engine
        .workspace_by_alias("inngest", "production")
        .unwrap()
        .unwrap();
    assert_eq!(default.id, DEFAULT_WORKSPACE);
    assert_eq!(
        h.engine
            .workspace_by_alias("runzivo", "default")
            .unwrap()
            .unwrap()
            .id,
        DEFAULT_WORKSPACE
    );

    let ws = h
        .engine
        .create_workspace("Team", [("inngest".into(), "staging".into())].into())
        .unwrap();
    let key = h
        .engine
        .create_key(Some(&ws.id), vec!["sandboxes:read".into()], vec![])
        .unwrap();
    let p = h.engine.authenticate(&key).unwrap().unwrap();
    assert_eq!(p.workspace.as_deref(), Some(ws.id.as_str()));
    assert!(p.allows("sandboxes:read") && !p.allows("sandboxes:write") && !p.can_use("default"));
    assert!(h.engine.authenticate("sbx_wrong").unwrap().is_none());

    let listed = h.engine.accounts().list_keys(Some(&ws.id)).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(key.starts_with(&listed[0].prefix));
    assert!(h.engine.accounts().revoke_key(listed[0].id).unwrap());
    assert!(h.engine.authenticate(&key).unwrap().is_none());
    assert!(!h.engine.accounts().revoke_key(Uuid::new_v4()).unwrap());
    let dup = h
        .engine
        .create_workspace("Other", [("inngest".into(), "staging".into())].into())
        .unwrap_err();
    assert_eq!(dup.code, ErrorCode::NameTaken);
}
