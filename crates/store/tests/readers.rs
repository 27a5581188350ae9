//! Readers opened ahead (a server's start): they stay idle for the requests to come,
//! up to the pool's bound, and a read on any of them sees what was written after they
//! were opened.

use sandboxd_store::{SqliteStore, Store, WorkspaceRecord};
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
fn readers_opened_ahead_are_kept_and_see_later_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("sandboxd.db")).expect("open");
    store.open_readers(20);
    assert_eq!(store.idle_readers(), 20);
    store.open_readers(1000);
    assert_eq!(store.idle_readers(), 32, "at most the pool's bound");
    store.create_workspace(&workspace("later")).expect("write");
    // Reads from many threads at once: each reader, whichever it is, sees the write.
    std::thread::scope(|s| {
        for _ in 0..40 {
            s.spawn(|| {
                let got = store.get_workspace("later").expect("read");
                assert_eq!(got.map(|w| w.id), Some("later".into()));
            });
        }
    });
    assert!(
        store.idle_readers() >= 32,
        "the readers are kept for the next burst: {}",
        store.idle_readers()
    );
}
