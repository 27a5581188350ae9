//! The store's connections: one writer, taken within a bound, and a pool of readers
//! that never wait behind it (WAL lets readers run beside a writer, ours or another
//! process's).

use crate::error::StoreError;
use crate::StoreResult;
use rusqlite::config::DbConfig;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a write waits, in all, for the database's write lock (held by our own
/// writer or by another process) before it fails with [`StoreError::Busy`]. SQLite's
/// busy handler retries the lock within what is left of it.
pub(super) const WRITE_BOUND: Duration = Duration::from_secs(2);

/// How long a read waits on the rare locks a WAL reader can meet (a checkpoint or a
/// recovery in another process).
const READ_BOUND: Duration = Duration::from_secs(2);

/// Readers kept open for reuse: as many as a burst of concurrent requests reads with
/// at once, so that the next burst opens none (each new connection reads the schema
/// afresh on its first statement).
pub(super) const IDLE_READERS: usize = 32;

/// Opens a connection to the database at `path` with the store's settings.
pub(super) fn open(path: &Path) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // The last connection to close would checkpoint, delete the WAL (3 fsyncs), and the
    // next process would make it afresh (2 more): per short-lived process (`sandboxd
    // run`, every CLI tool) 5 fsyncs for nothing. The WAL stays between processes
    // instead, bounded by the automatic checkpoint (1000 pages) as while open.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(READ_BOUND)?;
    // Room for every statement a create or an exec runs (rusqlite's default is 16):
    // each is parsed once per connection, not once per call.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 64;

/// Bytes of one WAL frame: a 24-byte header and a page (the default 4096 bytes).
const WAL_FRAME_BYTES: u64 = 24 + 4096;

/// WAL frames above which [`Conns::trim_wal`] checkpoints and truncates: the next
/// process to open the database alone reads every frame to rebuild the WAL's index
/// (about 1 ms per 1000 frames measured here, on `sandboxd run`'s path).
pub(super) const TRIM_ABOVE_FRAMES: u64 = 64;

/// The writer connection and the idle readers.
pub(super) struct Conns {
    path: PathBuf,
    reserve: super::reserve::Reserve,
    writer: parking_lot::Mutex<Connection>,
    readers: parking_lot::Mutex<Vec<Connection>>,
    /// Reads take the writer when it is free and no reader is idle.
    reads_on_writer: std::sync::atomic::AtomicBool,
    /// The WAL's checkpoints off the writer's path, once started.
    checkpoints: std::sync::OnceLock<super::checkpoints::Checkpoints>,
}

impl Conns {
    /// `writer` is the connection that set the database up (WAL mode, migrations).
    pub(super) fn new(path: &Path, writer: Connection, reserve: super::reserve::Reserve) -> Self {
        Self {
            path: path.to_owned(),
            reserve,
            writer: parking_lot::Mutex::new(writer),
            readers: parking_lot::Mutex::new(Vec::new()),
            reads_on_writer: std::sync::atomic::AtomicBool::new(false),
            checkpoints: std::sync::OnceLock::new(),
        }
    }

    /// The database file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the WAL's checkpoints off the writer onto a thread of their own (see
    /// `checkpoints`); once per store.
    pub(super) fn checkpoint_in_background(&self) -> StoreResult<()> {
        let writer = self.write()?;
        if self.checkpoints.get().is_some() {
            return Ok(());
        }
        let started = open(&self.path)
            .map_err(StoreError::from)
            .and_then(|conn| {
                super::checkpoints::Checkpoints::start(conn).map_err(|source| StoreError::Io {
                    what: "start the WAL checkpoint thread",
                    path: self.path.clone(),
                    source,
                })
            })?;
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        let _ = self.checkpoints.set(started);
        Ok(())
    }

    /// The writer, once our other writes let go of it and with SQLite told to wait for
    /// another process's lock only for what is left of [`WRITE_BOUND`].
    pub(super) fn write(&self) -> StoreResult<parking_lot::MutexGuard<'_, Connection>> {
        let deadline = Instant::now() + WRITE_BOUND;
        let conn = self
            .writer
            .try_lock_until(deadline)
            .ok_or(StoreError::Busy)?;
        let left = deadline.saturating_duration_since(Instant::now());
        conn.busy_timeout(left.max(Duration::from_millis(1)))?;
        Ok(conn)
    }

    /// Runs a write on the writer; when the disk is full, gives up the reserve and
    /// tries once more, so that writes that free space still land.
    pub(super) fn write_with<T>(
        &self,
        mut op: impl FnMut(&mut Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self.write()?;
        let done = match op(&mut conn) {
            Err(StoreError::Full) if self.reserve.release() => op(&mut conn),
            other => other,
        };
        if let (Ok(_), Some(checkpoints)) = (&done, self.checkpoints.get()) {
            if !checkpoints.committed() {
                // Its thread is gone: SQLite's own checkpoint again (1000 pages).
                let _ = conn.pragma_update(None, "wal_autocheckpoint", 1000);
            }
        }
        done
    }

    /// Checkpoints the WAL into the database and truncates it, when it holds more than
    /// [`TRIM_ABOVE_FRAMES`] frames and nothing else uses the database (a busy
    /// checkpoint is left, never waited for). True when it did.
    pub(super) fn trim_wal(&self) -> StoreResult<bool> {
        let wal = self.path.with_file_name(format!(
            "{}-wal",
            self.path.file_name().unwrap_or_default().to_string_lossy()
        ));
        let frames = std::fs::metadata(&wal).map_or(0, |m| m.len() / WAL_FRAME_BYTES);
        if frames <= TRIM_ABOVE_FRAMES {
            return Ok(false);
        }
        let writer = self.write()?;
        writer.busy_timeout(Duration::ZERO)?;
        let busy: i64 = writer.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
        Ok(busy == 0)
    }

    /// Opens readers (their schema read) until `n` are idle, at most
    /// [`IDLE_READERS`]; a failure leaves fewer, to be opened when needed.
    pub(super) fn open_readers(&self, n: usize) {
        let n = n.min(IDLE_READERS);
        while self.readers.lock().len() < n {
            let conn = match open(&self.path) {
                Ok(conn) => conn,
                Err(_) => return,
            };
            let read: rusqlite::Result<i64> =
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0));
            if read.is_err() {
                return;
            }
            self.readers.lock().push(conn);
        }
    }

    /// Readers idle now.
    pub(super) fn idle_readers(&self) -> usize {
        self.readers.lock().len()
    }

    /// See [`super::SqliteStore::read_on_free_writer`].
    pub(super) fn read_on_free_writer(&self) {
        self.reads_on_writer
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A reader: an idle one, the writer when reads may take it and it is free (never
    /// waited for: a read inside a write on this thread would wait on itself), or a new
    /// connection.
    pub(super) fn read(&self) -> StoreResult<Reader<'_>> {
        let idle = self.readers.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                if self
                    .reads_on_writer
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    // Free and outside a transaction (they are all taken under the
                    // guard), waiting on another process's lock as a reader would.
                    // Such a wait holds our writes back too, for at most READ_BOUND:
                    // only for stores with few writes beside their reads (a run's).
                    if let Some(writer) = self.writer.try_lock() {
                        if writer.is_autocommit() && writer.busy_timeout(READ_BOUND).is_ok() {
                            return Ok(Reader::Writer(writer));
                        }
                    }
                }
                open(&self.path)?
            }
        };
        Ok(Reader::Pooled {
            conn: Some(conn),
            conns: self,
        })
    }
}

/// A reader connection: a pooled one, given back to the pool when dropped, or the
/// writer, free (no transaction open) while held.
pub(super) enum Reader<'a> {
    Pooled {
        conn: Option<Connection>,
        conns: &'a Conns,
    },
    Writer(parking_lot::MutexGuard<'a, Connection>),
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match self {
            Reader::Pooled { conn, .. } => conn
                .as_ref()
                .expect("a reader holds its connection until dropped"),
            Reader::Writer(writer) => writer,
        }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Reader::Pooled { conn, conns } = self {
            let mut idle = conns.readers.lock();
            if let (Some(conn), true) = (conn.take(), idle.len() < IDLE_READERS) {
                idle.push(conn);
            }
        }
    }
}

#[cfg(test)]
mod trim_tests {
    use crate::Store;

    fn wal_bytes(path: &std::path::Path) -> u64 {
        std::fs::metadata(path.with_file_name("sandboxd.db-wal")).map_or(0, |m| m.len())
    }

    /// A store's WAL past the bound is checkpointed and truncated, what it held now in
    /// the database file; a short one, or one another connection reads, is left.
    #[test]
    fn a_long_wal_is_trimmed_and_a_short_or_busy_one_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sandboxd.db");
        let store = crate::SqliteStore::open(&path).expect("store");
        // The migrations wrote a long WAL; once trimmed, one write makes a short one.
        assert!(
            store.trim_wal().expect("trim"),
            "the migrations' WAL was left"
        );
        store.set_secret("default", "first", b"v").expect("write");
        assert!(!store.trim_wal().expect("trim"), "a short WAL was trimmed");
        let mut n = 1;
        while wal_bytes(&path) <= super::TRIM_ABOVE_FRAMES * super::WAL_FRAME_BYTES {
            store
                .set_secret("default", &format!("s{n}"), &[7; 2048])
                .expect("write");
            n += 1;
        }
        // Another process's read transaction: the checkpoint would have to wait.
        let other = rusqlite::Connection::open(&path).expect("another connection");
        other.execute_batch("BEGIN").expect("begin");
        let _: i64 = other
            .query_row("SELECT count(*) FROM secrets", [], |r| r.get(0))
            .expect("read");
        let before = wal_bytes(&path);
        assert!(!store.trim_wal().expect("trim"), "trimmed under a reader");
        assert_eq!(wal_bytes(&path), before, "the WAL changed under a reader");
        other.execute_batch("COMMIT").expect("end the read");
        drop(other);
        assert!(store.trim_wal().expect("trim"), "a long WAL was left");
        assert_eq!(wal_bytes(&path), 0, "the WAL was not truncated");
        drop(store);
        // Everything is in the database file alone.
        let copy = dir.path().join("copy.db");
        std::fs::copy(&path, &copy).expect("copy the database file");
        let rows: i64 = rusqlite::Connection::open(&copy)
            .and_then(|c| c.query_row("SELECT count(*) FROM secrets", [], |r| r.get(0)))
            .expect("count");
        assert_eq!(rows, n as i64);
    }
}

#[cfg(test)]
mod read_on_writer_tests {
    use super::Reader;
    use crate::Store;

    /// Told to, reads take the free writer instead of opening a connection; a read
    /// meeting the writer held (a write on another thread, or this one's) opens a
    /// reader instead of waiting; untold, reads open readers as before.
    #[test]
    fn reads_take_the_free_writer_and_never_wait_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::SqliteStore::open(dir.path().join("sandboxd.db")).expect("store");
        store.set_secret("default", "s", b"v").expect("write");
        store.get_secret("default", "s").expect("read");
        assert_eq!(store.idle_readers(), 1, "untold, a read opens a reader");
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::SqliteStore::open(dir.path().join("sandboxd.db")).expect("store");
        store.read_on_free_writer();
        store.set_secret("default", "s", b"v").expect("write");
        assert_eq!(
            store.get_secret("default", "s").expect("read").as_deref(),
            Some(&b"v"[..])
        );
        assert!(matches!(
            store.conns.read().expect("read"),
            Reader::Writer(_)
        ));
        assert_eq!(store.idle_readers(), 0, "a read opened a connection");
        // A read on the writer waits on another process's lock as a reader does, even
        // after a write that left the writer no wait at all (the WAL trim's 0).
        let left = store.conns.write().expect("the writer");
        left.busy_timeout(std::time::Duration::ZERO)
            .expect("no wait");
        drop(left);
        let read = store.conns.read().expect("read");
        let wait: i64 = read
            .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
            .expect("busy timeout");
        assert_eq!(wait, super::READ_BOUND.as_millis() as i64);
        drop(read);
        {
            let _writing = store.conns.write().expect("the writer");
            let read = store.conns.read().expect("a read beside the write");
            assert!(
                matches!(read, Reader::Pooled { .. }),
                "a read took a held writer"
            );
        }
        assert_eq!(store.idle_readers(), 1);
    }
}
