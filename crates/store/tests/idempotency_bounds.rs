//! What one workspace keeps of idempotent answers is bounded: past its record count
//! its oldest records go first, past its bytes an answer is kept without its body
//! (status 0, the key still held); other workspaces are untouched.

use sandboxd_store::{IdempotencyRecord, SqliteStore, Store};
use time::OffsetDateTime;

fn rec(ws: &str, key: &str, bytes: usize, age_s: i64) -> IdempotencyRecord {
    IdempotencyRecord {
        workspace: ws.into(),
        key: key.into(),
        request_hash: "h".into(),
        status: 201,
        body: vec![b'x'; bytes],
        headers: Vec::new(),
        created_at: OffsetDateTime::now_utc() - time::Duration::seconds(age_s),
    }
}

#[test]
fn a_workspace_keeps_at_most_its_records_and_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("db")).expect("store");
    let put = |r: &IdempotencyRecord| store.put_idempotency_bounded(r, 3, 100).unwrap();
    assert_eq!(put(&rec("w", "a", 10, 30)), Some(true));
    assert_eq!(put(&rec("w", "b", 10, 20)), Some(true));
    assert_eq!(put(&rec("other", "z", 90, 40)), Some(true));
    assert_eq!(put(&rec("w", "a", 10, 0)), None, "a taken key stays");
    assert_eq!(put(&rec("w", "c", 10, 10)), Some(true));
    // A fourth record: the oldest ("a") goes.
    assert_eq!(put(&rec("w", "d", 10, 0)), Some(true));
    assert!(store.get_idempotency("w", "a").unwrap().is_none());
    for k in ["b", "c", "d"] {
        assert!(store.get_idempotency("w", k).unwrap().is_some(), "{k}");
    }
    // "b" goes for the count, then past the bytes (20 kept + 85): held without its body.
    assert_eq!(put(&rec("w", "e", 85, 0)), Some(false));
    let held = store.get_idempotency("w", "e").unwrap().expect("held");
    assert_eq!((held.status, held.body.len()), (0, 0));
    assert!(store.get_idempotency("w", "b").unwrap().is_none());
    // Room again once records went: "c" goes, 10 + 0 + 70 fits.
    assert_eq!(put(&rec("w", "f", 70, 0)), Some(true));
    let other = store.get_idempotency("other", "z").unwrap().expect("other");
    assert_eq!(other.body.len(), 90, "another workspace is untouched");
}
