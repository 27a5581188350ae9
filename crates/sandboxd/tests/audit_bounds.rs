//! The audit trail cannot be flooded: operations on ids the caller has not (guessed,
//! another workspace's) change nothing and are not recorded, while real operations are.
//! (The per-workspace bound on entries is the store's unit test.)

mod serve_bin;

use sandboxd_store::{SqliteStore, Store};
use serde_json::json;
use serve_bin::Server;
use time::OffsetDateTime;

const MASTER: &str = "audit-bounds-test-master-key-0123456789ab";

/// Regression (REVIEW13 #5): each of these appended an entry, ~1.2 MB/s from one client.
#[test]
fn operations_on_ids_that_are_not_there_leave_no_entries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().canonicalize().expect("canonical");
    let server = Server::start(&data, Some(MASTER));
    let since = OffsetDateTime::now_utc() - time::Duration::seconds(5);
    for _ in 0..200 {
        let path = format!("/v2/sandboxes/{}", uuid::Uuid::new_v4());
        assert_eq!(server.request("DELETE", &path, MASTER, None).status, 404);
        let pause = format!("/v2/sandboxes/{}/pause", uuid::Uuid::new_v4());
        assert_eq!(server.request("POST", &pause, MASTER, None).status, 404);
    }
    let id = server.create_sandbox(MASTER, &json!({"name": "real", "vcpu": 1, "memoryMb": 128}));
    server.destroy(MASTER, &id);
    let store = SqliteStore::open(data.join("sandboxd.db")).expect("store");
    let entries = store.list_audit("default", since, 10_000).expect("audit");
    let actions: Vec<_> = entries
        .iter()
        .map(|e| (e.action.as_str(), e.outcome.as_str()))
        .collect();
    assert_eq!(
        actions,
        [("sandbox.create", "ok"), ("sandbox.destroy", "ok")],
        "only the real operations are on record"
    );
}
