//! Checkpoints of the write-ahead log off the writer's path, for a long-lived store (a
//! server's). SQLite's automatic checkpoint runs inside the commit that takes the WAL
//! past its threshold: that commit copies the WAL back into the database and syncs both
//! files while it holds the writer (10-25 ms measured on these machines, inside a
//! create's admission, so a burst of creates queued behind one). With
//! [`Checkpoints::start`], the writer's commits only append to the WAL (no sync under
//! `synchronous=NORMAL`), and a thread of its own checkpoints (`PASSIVE`: it never
//! holds up a writer or a reader) every [`COMMITS`] commits, and within [`IDLE`] of
//! any fewer. Should the thread die, the writer takes SQLite's automatic checkpoint
//! back (see [`Checkpoints::committed`]).
//!
//! Short-lived processes (`sandboxd run`, the CLI) keep SQLite's automatic checkpoint:
//! a thread would not outlive them, and their own few commits rarely cross its
//! threshold.

use parking_lot::{Condvar, Mutex};
use rusqlite::Connection;
use std::sync::Arc;
use std::time::Duration;

/// Commits after which the thread checkpoints (a create's or destroy's commit writes
/// a few pages: this keeps the WAL well under SQLite's own 1000-page threshold).
pub(super) const COMMITS: u64 = 64;
/// How often, at most, the thread looks for commits left pending below [`COMMITS`].
const IDLE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    /// Commits since the last checkpoint.
    pending: u64,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The checkpoint thread of a store; stopped (and joined) when dropped.
pub(super) struct Checkpoints {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpoints {
    /// Starts the thread, checkpointing through `conn` (a connection of its own). The
    /// caller has turned the writer's automatic checkpoint off.
    pub(super) fn start(conn: Connection) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sqlite-checkpoints".into())
                .spawn(move || run(&shared, &conn))?
        };
        Ok(Checkpoints {
            shared,
            thread: Some(thread),
        })
    }

    /// Counts a commit of the writer; wakes the thread every [`COMMITS`]. False once
    /// the thread is gone (it panicked): the writer must checkpoint on its own again.
    pub(super) fn committed(&self) -> bool {
        match &self.thread {
            Some(thread) if !thread.is_finished() => {}
            _ => return false,
        }
        let mut state = self.shared.state.lock();
        state.pending += 1;
        if state.pending >= COMMITS {
            self.shared.wake.notify_one();
        }
        true
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: waits for [`COMMITS`] commits, or [`IDLE`] with some pending, then
/// checkpoints; a last one when stopped.
fn run(shared: &Shared, conn: &Connection) {
    loop {
        let mut state = shared.state.lock();
        let timed_out = match state.stop || state.pending >= COMMITS {
            true => false,
            false => shared.wake.wait_for(&mut state, IDLE).timed_out(),
        };
        let due = state.pending >= COMMITS || (timed_out && state.pending > 0) || state.stop;
        if !due {
            continue;
        }
        let stop = state.stop;
        state.pending = 0;
        drop(state);
        checkpoint(conn);
        if stop {
            return;
        }
    }
}

/// One `PASSIVE` checkpoint: as much of the WAL as no reader still needs.
fn checkpoint(conn: &Connection) {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    match done {
        Ok((log, copied)) => tracing::trace!(log, copied, "WAL checkpoint"),
        Err(e) => tracing::warn!(error = %e, "checkpointing the database's WAL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows in the database file itself (a copy of it alone, without the WAL: what a
    /// checkpoint has copied back), looked at without checkpointing anything.
    fn rows_in_file(path: &std::path::Path, scratch: &std::path::Path) -> i64 {
        let _ = std::fs::remove_file(scratch);
        std::fs::copy(path, scratch).expect("copy the database file");
        let conn = Connection::open(scratch).expect("open the copy");
        // A copy taken mid-checkpoint may be torn: counted as nothing yet.
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap_or(-1)
    }

    /// With the writer's own checkpoint off, what it commits reaches the database file
    /// through the thread: after [`COMMITS`] commits, and after a pause for fewer.
    #[test]
    fn commits_reach_the_database_file_through_the_thread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, scratch) = (dir.path().join("db"), dir.path().join("copy"));
        let writer = Connection::open(&path).expect("writer");
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        writer
            .pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no automatic checkpoint");
        writer
            .execute_batch("CREATE TABLE t (n INTEGER)")
            .expect("table");
        let checkpoints =
            Checkpoints::start(Connection::open(&path).expect("its own")).expect("start");
        let wait_for = |rows: i64| {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while rows_in_file(&path, &scratch) != rows {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{rows} rows never reached the database file"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let commit = |n: u64| {
            writer
                .execute("INSERT INTO t VALUES (?1)", [n as i64])
                .expect("insert");
            checkpoints.committed();
        };
        (0..COMMITS).for_each(commit);
        wait_for(COMMITS as i64);
        (0..3).for_each(commit);
        wait_for(COMMITS as i64 + 3);
        drop(checkpoints);
    }

    /// Through the store as a server uses it: its writer's own checkpoint is off, and
    /// what it writes still reaches the database file.
    #[test]
    fn a_stores_writes_reach_its_file_with_checkpoints_in_the_background() {
        use crate::Store;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sandboxd.db");
        let scratch = dir.path().join("copy");
        let store = crate::SqliteStore::open(&path).expect("store");
        store
            .checkpoint_in_background()
            .expect("background checkpoints");
        store
            .checkpoint_in_background()
            .expect("a second call is none");
        let auto: i64 = store
            .conns
            .write()
            .expect("writer")
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .expect("pragma");
        assert_eq!(auto, 0, "the writer still checkpoints inside its commits");
        let n = COMMITS + 5;
        for i in 0..n {
            store
                .set_secret("default", &format!("s{i}"), b"v")
                .expect("write");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let _ = std::fs::remove_file(&scratch);
            std::fs::copy(&path, &scratch).expect("copy the database file");
            let rows: i64 = Connection::open(&scratch)
                .and_then(|c| c.query_row("SELECT count(*) FROM secrets", [], |r| r.get(0)))
                .unwrap_or(-1);
            if rows == n as i64 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{rows} of {n} secrets in the database file"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
