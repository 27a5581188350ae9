//! The records every request reads, kept between requests while the database has not
//! changed: an API key by its hash (each request authenticates) and a sandbox by its id
//! (each exec loads it). Whether anything changed is SQLite's own `PRAGMA data_version`
//! on a connection of the cache's own, which moves on every commit by any other
//! connection — this process's writer and readers, or another process's (`sandboxd keys
//! revoke` beside a server): a revoked key is refused at its next request, as when each
//! request read the database. Any change empties the cache; only found records are
//! kept (a bearer token that matches nothing is never held), at most [`MAX_ENTRIES`] of
//! each kind. Measured on the exec round trip: about 0.05 ms of the server's 0.3 ms of
//! CPU per exec were these two reads.

use crate::records::{ApiKeyRecord, SandboxRecord};
use crate::StoreResult;
use rusqlite::Connection;
use std::collections::HashMap;
use std::hash::Hash;
use std::path::PathBuf;
use uuid::Uuid;

/// Records of one kind the cache holds at most; one more empties that kind first.
pub(super) const MAX_ENTRIES: usize = 4096;

/// The cache (see the module's documentation).
pub(super) struct ReadCache {
    path: PathBuf,
    /// The connection that watches the database's version, opened at first use
    /// (`None` until then, and after it failed: reads then go to the database).
    watch: parking_lot::Mutex<Option<Connection>>,
    kept: parking_lot::Mutex<Kept>,
}

/// What is kept, as of one version of the database.
#[derive(Default)]
struct Kept {
    version: Option<i64>,
    keys: HashMap<String, ApiKeyRecord>,
    sandboxes: HashMap<Uuid, SandboxRecord>,
}

impl Kept {
    /// Empties the cache unless it is of `version`.
    fn at(&mut self, version: i64) {
        if self.version != Some(version) {
            self.keys.clear();
            self.sandboxes.clear();
            self.version = Some(version);
        }
    }
}

impl ReadCache {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            path,
            watch: parking_lot::Mutex::new(None),
            kept: parking_lot::Mutex::new(Kept::default()),
        }
    }

    /// The database's version as the watching connection sees it; `None` when it
    /// cannot be read (the caller then reads the database, uncached).
    fn version(&self) -> Option<i64> {
        let mut watch = self.watch.lock();
        if watch.is_none() {
            *watch = Some(super::conns::open(&self.path).ok()?);
        }
        let conn = watch.as_ref()?;
        let read = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut pragma| pragma.query_row([], |row| row.get(0)));
        match read {
            Ok(version) => Some(version),
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the database's version; reading uncached");
                *watch = None;
                None
            }
        }
    }

    /// The key whose hash is `hash`, from the cache or `load`.
    pub(super) fn key(
        &self,
        hash: &str,
        load: impl FnOnce() -> StoreResult<Option<ApiKeyRecord>>,
    ) -> StoreResult<Option<ApiKeyRecord>> {
        self.through(hash, |k| &mut k.keys, load)
    }

    /// The sandbox `id`, from the cache or `load`.
    pub(super) fn sandbox(
        &self,
        id: Uuid,
        load: impl FnOnce() -> StoreResult<Option<SandboxRecord>>,
    ) -> StoreResult<Option<SandboxRecord>> {
        self.through(&id, |k| &mut k.sandboxes, load)
    }

    /// A record from `map` of the cache when the database has not changed since it was
    /// kept; else `load`ed and kept. The version is read before the load: a commit after
    /// it moves the version, so a record loaded before that commit is never served.
    fn through<K, Q, R>(
        &self,
        key: &Q,
        map: impl Fn(&mut Kept) -> &mut HashMap<K, R>,
        load: impl FnOnce() -> StoreResult<Option<R>>,
    ) -> StoreResult<Option<R>>
    where
        K: Hash + Eq + std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: Clone,
    {
        let Some(version) = self.version() else {
            return load();
        };
        {
            let mut kept = self.kept.lock();
            kept.at(version);
            if let Some(found) = map(&mut kept).get(key) {
                return Ok(Some(found.clone()));
            }
        }
        let found = load()?;
        if let Some(record) = &found {
            let mut kept = self.kept.lock();
            // Kept only as of the version read before the load (a newer one seen by
            // now means the record may be stale already).
            if kept.version == Some(version) {
                let records = map(&mut kept);
                if records.len() >= MAX_ENTRIES {
                    records.clear();
                }
                records.insert(key.to_owned(), record.clone());
            }
        }
        Ok(found)
    }
}
