//! One story that every `Store` backend must pass, run here against `SqliteStore`.

mod fixtures;

use fixtures::{sandbox, t};
use sandboxd_store::*;
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

fn workspace(id: &str, env: &str) -> WorkspaceRecord {
    WorkspaceRecord {
        id: id.into(),
        name: format!("{id} name"),
        aliases: BTreeMap::from([
            ("inngest".into(), env.into()),
            ("runzivo".into(), format!("tenant-{id}")),
        ]),
        created_at: t(0),
    }
}

fn snapshot(ws: &str, name: &str, layers: &[&str], at: OffsetDateTime) -> SnapshotRecord {
    SnapshotRecord {
        id: Uuid::new_v4(),
        workspace: ws.into(),
        name: Some(name.into()),
        source_sandbox_id: Uuid::new_v4(),
        image: "default".into(),
        layers: layers.iter().map(|s| s.to_string()).collect(),
        digest: layers.last().unwrap().to_string(),
        size_bytes: 4096,
        vcpu: 1,
        memory_mb: 256,
        created_at: at,
        expires_at: None,
        disk_mb: Some(64),
        memory_image: None,
    }
}

fn accounts(store: &dyn Store) {
    store
        .create_workspace(&workspace("w1", "production"))
        .unwrap();
    store.create_workspace(&workspace("w2", "staging")).unwrap();
    assert!(matches!(
        store.create_workspace(&workspace("w1", "x")),
        Err(StoreError::Conflict(_))
    ));
    // An alias taken by another workspace refuses the whole workspace.
    assert!(matches!(
        store.create_workspace(&workspace("w3", "staging")),
        Err(StoreError::Conflict(_))
    ));
    assert!(store.get_workspace("w3").unwrap().is_none());
    assert!(store.workspace_by_alias("inngest", "x").unwrap().is_none());
    let w2 = store
        .workspace_by_alias("inngest", "staging")
        .unwrap()
        .unwrap();
    assert_eq!(w2, workspace("w2", "staging"), "read back with its aliases");
    assert_eq!(
        store
            .workspace_by_alias("runzivo", "tenant-w1")
            .unwrap()
            .unwrap()
            .id,
        "w1"
    );
    assert!(
        store
            .workspace_by_alias("inngest", "tenant-w1")
            .unwrap()
            .is_none(),
        "an alias belongs to its dialect"
    );
    assert!(store.get_workspace("nope").unwrap().is_none());
    assert_eq!(store.list_workspaces().unwrap().len(), 2);

    let key = ApiKeyRecord {
        id: Uuid::new_v4(),
        key_hash: "ab".repeat(32),
        prefix: "sbx_abcd".into(),
        workspace: Some("w1".into()),
        permissions: vec!["sandboxes:write".into()],
        scopes: vec![],
        created_at: t(1),
        revoked_at: None,
        master: false,
        alias_of: None,
    };
    store.insert_key(&key).unwrap();
    assert_eq!(store.key_by_hash(&key.key_hash).unwrap().unwrap(), key);
    assert_eq!(store.list_keys(Some("w1")).unwrap(), vec![key.clone()]);
    assert!(store.list_keys(None).unwrap().is_empty());
    assert!(store.revoke_key(key.id, t(2)).unwrap());
    assert!(
        !store.revoke_key(key.id, t(3)).unwrap(),
        "revoking twice changes nothing"
    );
    assert_eq!(
        store
            .key_by_hash(&key.key_hash)
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(t(2))
    );
    assert!(store.reinstate_key(key.id).unwrap());
    assert!(!store.reinstate_key(key.id).unwrap(), "already in force");

    // An alias goes with its key, and is kept as such.
    let alias = ApiKeyRecord {
        id: Uuid::new_v4(),
        key_hash: "cd".repeat(32),
        prefix: "signkey-w1-0".into(),
        master: true,
        alias_of: Some(key.id),
        ..key.clone()
    };
    store.insert_key(&alias).unwrap();
    assert_eq!(store.key_by_hash(&alias.key_hash).unwrap().unwrap(), alias);
    assert!(store.revoke_key(key.id, t(4)).unwrap());
    let revoked = store.key_by_hash(&alias.key_hash).unwrap().unwrap();
    assert_eq!(
        revoked.revoked_at,
        Some(t(4)),
        "the alias is revoked with its key"
    );
}

fn sandboxes(store: &dyn Store) {
    // Five in w1 with two sharing a timestamp, one in w2.
    let mut made = Vec::new();
    for (i, secs) in [10, 20, 20, 30, 40].into_iter().enumerate() {
        let sb = sandbox("w1", Some(&format!("sb{i}")), t(secs));
        store.insert_sandbox(&sb).unwrap();
        made.push(sb);
    }
    store
        .insert_sandbox(&sandbox("w2", Some("sb0"), t(50)))
        .unwrap();
    made.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.id)));

    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_sandboxes("w1", SandboxFilter::default(), 2, after)
            .unwrap();
        if page.is_empty() {
            break;
        }
        let last = page.last().unwrap();
        after = Some(Keyset {
            created_at: last.created_at,
            id: last.id,
        });
        seen.extend(page);
    }
    assert_eq!(seen, made, "pages cover every sandbox once, newest first");

    let mut first = made[0].clone();
    first.status = "RUNNING".into();
    first.handle = Some(serde_json::json!({"agent_pid": 42}));
    first.id_slot = Some(3);
    store.update_sandbox(&first).unwrap();
    assert_eq!(store.get_sandbox(first.id).unwrap().unwrap(), first);
    let running = store.sandboxes_in_status(&["RUNNING", "PAUSED"]).unwrap();
    assert_eq!(running, vec![first.clone()]);
    assert_eq!(
        store
            .sandboxes_named("w1", &made[1].name.clone().unwrap())
            .unwrap()
            .len(),
        1
    );
    ended_history(store, &made);
    aliased(store);
    assert!(matches!(
        store.update_sandbox(&sandbox("w1", None, t(0))),
        Err(StoreError::NotFound(_))
    ));
}

/// Sandboxes known to a dialect by its own ids: found by them, listed by them before
/// paging, and never given an alias twice.
fn aliased(store: &dyn Store) {
    let mut mine = Vec::new();
    for i in 0..5 {
        let mut sb = sandbox("w2", None, t(200 + i));
        if i % 2 == 0 {
            sb.aliases = BTreeMap::from([("runzivo".into(), format!("sbx_{i}"))]);
            sb.attributes = BTreeMap::from([("runzivo".into(), serde_json::json!({"n": i}))]);
            mine.push(sb.clone());
        }
        store.insert_sandbox(&sb).unwrap();
    }
    mine.reverse();
    let got = store.sandbox_by_alias("runzivo", "sbx_2").unwrap().unwrap();
    assert_eq!(got, mine[1]);
    assert!(store.sandbox_by_alias("other", "sbx_2").unwrap().is_none());
    let mut dup = sandbox("w2", None, t(300));
    dup.aliases = BTreeMap::from([("runzivo".into(), "sbx_4".into())]);
    assert!(matches!(
        store.insert_sandbox(&dup),
        Err(StoreError::Conflict(_))
    ));
    assert!(
        store.get_sandbox(dup.id).unwrap().is_none(),
        "nothing half-inserted"
    );

    // A filtered page is full: the filter runs in the query, before the limit.
    let only = SandboxFilter {
        aliased_in: Some("runzivo"),
    };
    let first = store.list_sandboxes("w2", only, 2, None).unwrap();
    assert_eq!(first, mine[..2]);
    let last = first.last().unwrap();
    let after = Keyset {
        created_at: last.created_at,
        id: last.id,
    };
    assert_eq!(
        store.list_sandboxes("w2", only, 2, Some(after)).unwrap(),
        mine[2..]
    );

    // An update keeps the aliases and replaces the attributes.
    let mut changed = mine[0].clone();
    changed.aliases.clear();
    changed.attributes = BTreeMap::from([("runzivo".into(), serde_json::json!({"n": 9}))]);
    store.update_sandbox(&changed).unwrap();
    let back = store.get_sandbox(changed.id).unwrap().unwrap();
    assert_eq!(back.aliases, mine[0].aliases);
    assert_eq!(back.attributes, changed.attributes);
}

/// Ends three of `made` at different times and pages through the history.
fn ended_history(store: &dyn Store, made: &[SandboxRecord]) {
    for (i, sb) in made.iter().skip(2).enumerate() {
        let mut ended = sb.clone();
        ended.status = "TERMINATED".into();
        ended.ended_at = Some(t(100 + i as i64));
        store.update_sandbox(&ended).unwrap();
    }
    let newest = store.ended_sandboxes("w1", t(0), 2, None).unwrap();
    assert_eq!(
        newest.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![made[4].id, made[3].id]
    );
    let last = &newest[1];
    let after = Keyset {
        created_at: last.ended_at.unwrap(),
        id: last.id,
    };
    let rest = store.ended_sandboxes("w1", t(0), 2, Some(after)).unwrap();
    assert_eq!(
        rest.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![made[2].id]
    );
    assert_eq!(
        store.ended_sandboxes("w1", t(101), 10, None).unwrap().len(),
        2,
        "since"
    );
    assert!(store
        .ended_sandboxes("w2", t(0), 10, None)
        .unwrap()
        .is_empty());
}

fn snapshots(store: &dyn Store) {
    let a = snapshot("w1", "base", &["l1"], t(10));
    let b = SnapshotRecord {
        memory_image: Some("/data/memory-snapshots/b".into()),
        ..snapshot("w1", "child", &["l1", "l2"], t(20))
    };
    let c = snapshot("w1", "base", &["l3"], t(30));
    for s in [&a, &b, &c] {
        store.insert_snapshot(s).unwrap();
    }
    assert_eq!(store.get_snapshot(b.id).unwrap().unwrap(), b);
    let bases = store.list_snapshots("w1", Some("base"), 10, None).unwrap();
    assert_eq!(bases, vec![c.clone(), a.clone()]);
    let page = store
        .list_snapshots(
            "w1",
            None,
            10,
            Some(Keyset {
                created_at: c.created_at,
                id: c.id,
            }),
        )
        .unwrap();
    assert_eq!(page, vec![b.clone(), a.clone()]);
    assert!(store
        .list_snapshots("w2", None, 10, None)
        .unwrap()
        .is_empty());
    assert_eq!(store.snapshots_using_layer("l1").unwrap(), 2);
    assert!(store.delete_snapshot(a.id).unwrap());
    assert!(!store.delete_snapshot(a.id).unwrap());
    assert_eq!(store.snapshots_using_layer("l1").unwrap(), 1);
}

fn secrets_and_idempotency(store: &dyn Store) {
    store.set_secret("w1", "TOKEN", b"s3cr3t-value").unwrap();
    store.set_secret("w1", "TOKEN", b"s3cr3t-value-2").unwrap();
    store.set_secret("w1", "ALPHA", b"a").unwrap();
    assert_eq!(
        store.get_secret("w1", "TOKEN").unwrap().unwrap(),
        b"s3cr3t-value-2"
    );
    assert!(store.get_secret("w2", "TOKEN").unwrap().is_none());
    assert_eq!(
        store.list_secret_names("w1").unwrap(),
        vec!["ALPHA", "TOKEN"]
    );
    assert!(store.delete_secret("w1", "ALPHA").unwrap());
    assert!(!store.delete_secret("w1", "ALPHA").unwrap());

    let rec = IdempotencyRecord {
        key: "req-1".into(),
        workspace: "w1".into(),
        request_hash: "h".into(),
        status: 201,
        body: b"{}".to_vec(),
        headers: vec![("content-type".into(), "application/json".into())],
        created_at: t(100),
    };
    assert!(store.put_idempotency(&rec).unwrap());
    assert!(!store
        .put_idempotency(&IdempotencyRecord {
            status: 500,
            ..rec.clone()
        })
        .unwrap());
    assert_eq!(store.get_idempotency("w1", "req-1").unwrap().unwrap(), rec);
    assert!(store.get_idempotency("w2", "req-1").unwrap().is_none());
    assert_eq!(store.prune_idempotency(t(101)).unwrap(), 1);
    assert!(store.get_idempotency("w1", "req-1").unwrap().is_none());
}

/// The story every backend must tell.
fn story(store: &dyn Store) {
    accounts(store);
    sandboxes(store);
    snapshots(store);
    secrets_and_idempotency(store);
}

#[test]
fn sqlite_story() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandboxd.db");
    story(&SqliteStore::open(&path).unwrap());
    // Reopening keeps everything and still decrypts.
    let again = SqliteStore::open(&path).unwrap();
    assert_eq!(
        again.get_secret("w1", "TOKEN").unwrap().unwrap(),
        b"s3cr3t-value-2"
    );
    let db = std::fs::read(&path).unwrap();
    let wal = std::fs::read(dir.path().join("sandboxd.db-wal")).unwrap_or_default();
    for bytes in [db, wal] {
        assert!(
            !bytes.windows(12).any(|w| w == b"s3cr3t-value"),
            "plaintext secret on disk"
        );
    }
}

/// The per-workspace sums admission reads are those of the records in the statuses
/// asked for: counts, vCPUs, memory, recorded disk sizes and how many have none.
#[test]
fn usage_in_status_sums_the_records_it_stands_for() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("sandboxd.db")).unwrap();
    for ws in ["u1", "u2"] {
        store.create_workspace(&workspace(ws, ws)).unwrap();
    }
    let rows = [
        ("u1", "RUNNING", 2, 512, Some(100)),
        ("u1", "PAUSED", 1, 256, None),
        ("u1", "STARTING", 4, 1024, Some(300)),
        ("u1", "TERMINATED", 8, 4096, Some(5000)),
        ("u2", "RUNNING", 1, 128, None),
        ("u2", "FAILED", 16, 8192, None),
    ];
    for (i, (ws, status, vcpu, memory_mb, disk_mb)) in rows.into_iter().enumerate() {
        let mut sb = sandbox(ws, None, t(i as i64));
        sb.status = status.into();
        sb.vcpu = vcpu;
        sb.memory_mb = memory_mb;
        sb.disk_mb = disk_mb;
        store.insert_sandbox(&sb).unwrap();
    }
    let statuses = ["RUNNING", "PAUSED", "STARTING"];
    let mut usage = store.usage_in_status(&statuses).unwrap();
    usage.sort_by(|a, b| a.workspace.cmp(&b.workspace));
    let want =
        |workspace: &str, sandboxes, vcpu, memory_mb, disk_mb, default_disk| WorkspaceUsage {
            workspace: workspace.into(),
            sandboxes,
            vcpu,
            memory_mb,
            disk_mb,
            default_disk,
        };
    assert_eq!(
        usage,
        vec![want("u1", 3, 7, 1792, 400, 1), want("u2", 1, 1, 128, 0, 1)]
    );
    // The same as summing the records themselves.
    let records = store.sandboxes_in_status(&statuses).unwrap();
    let sum = |f: fn(&SandboxRecord) -> u64| records.iter().map(f).sum::<u64>();
    let summed = |f: fn(&WorkspaceUsage) -> u64| usage.iter().map(f).sum::<u64>();
    assert_eq!(sum(|_| 1), summed(|u| u.sandboxes));
    assert_eq!(sum(|r| u64::from(r.vcpu)), summed(|u| u.vcpu));
    assert_eq!(sum(|r| u64::from(r.memory_mb)), summed(|u| u.memory_mb));
    assert_eq!(
        sum(|r| u64::from(r.disk_mb.unwrap_or(0))),
        summed(|u| u.disk_mb)
    );
    assert_eq!(
        sum(|r| u64::from(r.disk_mb.is_none())),
        summed(|u| u.default_disk)
    );
    assert_eq!(store.usage_in_status(&["DELETED"]).unwrap(), vec![]);
    assert_eq!(store.usage_in_status(&[]).unwrap(), vec![]);
}
