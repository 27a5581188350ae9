//! The store's cache of keys and sandboxes never serves a record older than the last
//! commit: two stores on one database file stand for two processes (a server and the
//! `sandboxd keys` tool), each with its own connections and cache.

mod fixtures;

use fixtures::t;
use sandboxd_store::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use uuid::Uuid;

fn workspace(id: &str) -> WorkspaceRecord {
    WorkspaceRecord {
        id: id.into(),
        name: id.into(),
        aliases: BTreeMap::new(),
        created_at: t(0),
    }
}

fn key(ws: &str, hash: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: Uuid::new_v4(),
        key_hash: hash.into(),
        prefix: "sbx_abcd".into(),
        workspace: Some(ws.into()),
        permissions: vec!["sandboxes:write".into()],
        scopes: vec![],
        created_at: t(1),
        revoked_at: None,
        master: false,
        alias_of: None,
    }
}

fn sandbox(ws: &str) -> SandboxRecord {
    SandboxRecord {
        status: "RUNNING".into(),
        ..fixtures::sandbox(ws, Some("cached"), t(2))
    }
}

/// A server's store and another process's, on one fresh database.
fn two_stores() -> (tempfile::TempDir, SqliteStore, SqliteStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("sandboxd.db");
    let server = SqliteStore::open(&path).expect("open");
    let tool = SqliteStore::open(&path).expect("open again");
    for store in [&server, &tool] {
        store.cache_reads().expect("a cache");
    }
    server.create_workspace(&workspace("w1")).unwrap();
    (dir, server, tool)
}

#[test]
fn a_key_revoked_by_another_process_is_revoked_at_the_next_read() {
    let (_dir, server, tool) = two_stores();
    let k = key("w1", &"ab".repeat(32));
    server.insert_key(&k).unwrap();
    // Read (and so kept) several times by the server.
    for _ in 0..3 {
        let found = server.key_by_hash(&k.key_hash).unwrap().expect("the key");
        assert_eq!(found.revoked_at, None);
    }
    assert!(tool.revoke_key(k.id, t(3)).unwrap());
    let found = server.key_by_hash(&k.key_hash).unwrap().expect("the key");
    assert_eq!(found.revoked_at, Some(t(3)), "a revoked key read as live");
    // And back, by the server itself this time.
    assert!(server.reinstate_key(k.id).unwrap());
    let found = tool.key_by_hash(&k.key_hash).unwrap().expect("the key");
    assert_eq!(found.revoked_at, None);
    assert_eq!(
        server.key_by_hash(&k.key_hash).unwrap().unwrap().revoked_at,
        None
    );
    // A key's SDK form (an alias of it) is revoked with it.
    let alias = ApiKeyRecord {
        id: Uuid::new_v4(),
        key_hash: "ef".repeat(32),
        alias_of: Some(k.id),
        ..k.clone()
    };
    server.insert_key(&alias).unwrap();
    let revoked_at = |hash: &str| server.key_by_hash(hash).unwrap().expect("a key").revoked_at;
    assert_eq!(revoked_at(&alias.key_hash), None);
    assert!(tool.revoke_key(k.id, t(5)).unwrap());
    assert_eq!(
        revoked_at(&alias.key_hash),
        Some(t(5)),
        "an alias of a revoked key read as live"
    );
    // A hash that matches nothing is nothing, also once a key with it is made.
    let later = key("w1", &"cd".repeat(32));
    assert_eq!(server.key_by_hash(&later.key_hash).unwrap(), None);
    tool.insert_key(&later).unwrap();
    assert_eq!(
        server.key_by_hash(&later.key_hash).unwrap().map(|k| k.id),
        Some(later.id)
    );
}

#[test]
fn every_read_of_a_sandbox_after_a_commit_sees_it_in_either_process() {
    let (_dir, server, tool) = two_stores();
    let mut sb = sandbox("w1");
    server.insert_sandbox(&sb).unwrap();
    for round in 0..200u32 {
        sb.memory_mb = 256 + round;
        // Writes alternate between the two processes; reads follow at once in both.
        let writer = if round % 2 == 0 { &tool } else { &server };
        writer.update_sandbox(&sb).unwrap();
        for reader in [&server, &tool] {
            let got = reader.get_sandbox(sb.id).unwrap().expect("the sandbox");
            assert_eq!(
                got.memory_mb, sb.memory_mb,
                "a stale record in round {round}"
            );
        }
    }
    // One that matches nothing is nothing, also once it is made.
    let later = sandbox("w1");
    assert_eq!(server.get_sandbox(later.id).unwrap(), None);
    tool.insert_sandbox(&later).unwrap();
    assert!(server.get_sandbox(later.id).unwrap().is_some());
}

#[test]
fn readers_racing_a_writer_in_another_process_never_go_back() {
    let (_dir, server, tool) = two_stores();
    let mut sb = sandbox("w1");
    server.insert_sandbox(&sb).unwrap();
    let done = AtomicBool::new(false);
    /// Ends the readers when the writer is done, or has failed.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let mut last = 0;
                while !done.load(Ordering::Acquire) {
                    let got = server.get_sandbox(sb.id).unwrap().expect("the sandbox");
                    assert!(got.memory_mb >= last, "{} after {last}", got.memory_mb);
                    last = got.memory_mb;
                }
            });
        }
        let _done = Done(&done);
        for round in 0..300 {
            sb.memory_mb = 256 + round;
            tool.update_sandbox(&sb).unwrap();
            // Once the commit returned, a read of the server's sees it.
            let got = server.get_sandbox(sb.id).unwrap().expect("the sandbox");
            assert!(
                got.memory_mb >= sb.memory_mb,
                "round {round}: {}",
                got.memory_mb
            );
        }
    });
}
