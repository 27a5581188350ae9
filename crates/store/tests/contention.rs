//! A second connection holding the database's write lock (as another process would):
//! reads go on, a write gives up within its bound with `Busy`, and writes work again
//! once the lock is let go.

use sandboxd_store::{SqliteStore, Store, StoreError, WorkspaceRecord};
use time::OffsetDateTime;

fn workspace(id: &str) -> WorkspaceRecord {
    WorkspaceRecord {
        id: id.into(),
        name: id.into(),
        aliases: Default::default(),
        created_at: OffsetDateTime::UNIX_EPOCH,
    }
}

#[test]
fn a_held_write_lock_blocks_no_read_and_makes_writes_busy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("sandboxd.db");
    let store = SqliteStore::open(&path).expect("open");
    store.create_workspace(&workspace("before")).expect("write");

    let other = rusqlite::Connection::open(&path).expect("second connection");
    other.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let got = store
        .get_workspace("before")
        .expect("a read beside the lock");
    assert_eq!(got.map(|w| w.id), Some("before".into()));
    match store.create_workspace(&workspace("during")) {
        Err(StoreError::Busy) => {}
        other => panic!("a write under another's lock gave {other:?}"),
    }
    assert_eq!(store.list_workspaces().expect("list").len(), 1);
    other.execute_batch("ROLLBACK").expect("unlock");

    store
        .create_workspace(&workspace("after"))
        .expect("write after");
    assert_eq!(store.list_workspaces().expect("list").len(), 2);
}

/// Two processes opening one new database at once (a server and a CLI command, or two
/// CLI commands): both get a migrated store; once, the second failed with "table …
/// already exists" as both ran the first migration.
#[test]
fn two_opens_of_a_new_database_at_once_both_succeed() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandboxd.db");
        let opened: Vec<_> = std::thread::scope(|s| {
            let a = s.spawn(|| sandboxd_store::SqliteStore::open(&path).map(drop));
            let b = s.spawn(|| sandboxd_store::SqliteStore::open(&path).map(drop));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        for result in opened {
            result.expect("both opens succeed");
        }
    }
}
