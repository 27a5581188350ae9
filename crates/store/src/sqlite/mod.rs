//! The embedded SQLite store: one WAL-mode database file plus a secret key file.

mod accounts;
mod aliases;
mod audit;
mod checkpoints;
mod codec;
mod conns;
mod console;
mod egress;
mod file_modes;
mod idempotency;
mod isolation;
mod migrations;
mod quotas;
mod read_cache;
mod registries;
mod reserve;
mod sandboxes;
mod secrets;
mod snapshots;
mod workspace_images;
mod workspace_setting;

use crate::crypto::SecretBox;
use crate::error::StoreError;
use crate::records::*;
use crate::{Store, StoreResult};
use std::path::Path;
use time::OffsetDateTime;
use uuid::Uuid;

/// Name of the key file that encrypts secrets, next to the database.
pub const SECRET_KEY_FILE: &str = "secrets.key";

/// A [`Store`] in one SQLite file (WAL journal, foreign keys on): one writer and a
/// pool of readers that never wait behind it.
pub struct SqliteStore {
    conns: conns::Conns,
    secrets: SecretBox,
    cache: read_cache::ReadCache,
}

impl SqliteStore {
    /// Opens (creating when needed) the database at `path` and runs its migrations; the
    /// secret key lives in `secrets.key` in the same directory.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref();
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            what: "create the data directory",
            path: dir.to_owned(),
            source,
        })?;
        let secrets = SecretBox::load_or_create(&dir.join(SECRET_KEY_FILE))?;
        file_modes::make_private(path)?;
        // Two processes setting up one new database at once: switching it to WAL does not
        // wait for the other's lock (SQLite answers busy at once), so retry, bounded.
        let mut tries = 0;
        let conn = loop {
            match Self::set_up(path) {
                Err(StoreError::Busy) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        Ok(Self {
            conns: conns::Conns::new(path, conn, reserve::Reserve::keep(dir)),
            secrets,
            cache: read_cache::ReadCache::off(),
        })
    }
}

impl SqliteStore {
    /// Opens readers ahead (their schema read) until `n` are idle, at most 32: a
    /// server's first burst of requests then opens no connection on its way. A
    /// failure leaves fewer, opened when needed as before.
    pub fn open_readers(&self, n: usize) {
        self.conns.open_readers(n)
    }

    /// Keeps the keys and sandboxes read between reads while the database has not
    /// changed (see `read_cache`), for a long-lived store such as a server's. A failure
    /// to open the connection that watches for changes leaves reads uncached.
    pub fn cache_reads(&self) -> StoreResult<()> {
        let watch = conns::open(self.conns.path())?;
        Ok(self.cache.start(watch)?)
    }

    /// Reads on the writer connection when it is free and no reader is idle, instead
    /// of opening a reader: for a short-lived store with few reads (`sandboxd run`),
    /// whose second connection would cost its opening and a read of the whole schema
    /// (~0.3 ms of CPU here). A read meeting the writer busy still opens a reader.
    pub fn read_on_free_writer(&self) {
        self.conns.read_on_free_writer()
    }

    /// Checkpoints the WAL on a thread of its own instead of inside the commit that
    /// fills it (see `checkpoints`), for a long-lived store such as a server's: its
    /// writes then never wait for the database file's sync.
    pub fn checkpoint_in_background(&self) -> StoreResult<()> {
        self.conns.checkpoint_in_background()
    }

    /// For a short-lived process (`sandboxd run`) once its writes are done: when the
    /// WAL has grown past a few dozen pages, checkpoints it into the database and
    /// truncates it (a few syncs), unless another connection is busy with the database
    /// (then nothing). The next process to open the database alone rebuilds the WAL's
    /// index from every frame in it, on its way to its first statement; this keeps that
    /// small. True when it trimmed.
    pub fn trim_wal(&self) -> StoreResult<bool> {
        self.conns.trim_wal()
    }

    /// Readers idle now, ready for the next read.
    pub fn idle_readers(&self) -> usize {
        self.conns.idle_readers()
    }

    /// A connection to `path` in WAL mode with every migration run.
    fn set_up(path: &Path) -> StoreResult<rusqlite::Connection> {
        let mut conn = conns::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.busy_timeout(conns::WRITE_BOUND)?;
        migrations::migrate(&mut conn)?;
        Ok(conn)
    }
}

/// Turns a UNIQUE/PRIMARY KEY violation into `Conflict`, anything else into `Busy` or
/// `Sqlite`.
pub(super) fn unique_violation(e: rusqlite::Error, what: impl FnOnce() -> String) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(ref f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation
                && matches!(f.extended_code, 1555 | 2067) =>
        {
            StoreError::Conflict(what())
        }
        other => other.into(),
    }
}

impl Store for SqliteStore {
    fn create_workspace(&self, ws: &WorkspaceRecord) -> StoreResult<()> {
        self.conns.write_with(|c| accounts::create_workspace(c, ws))
    }
    fn get_workspace(&self, id: &str) -> StoreResult<Option<WorkspaceRecord>> {
        accounts::workspace(&*self.conns.read()?, id)
    }
    fn workspace_by_alias(
        &self,
        dialect: &str,
        alias: &str,
    ) -> StoreResult<Option<WorkspaceRecord>> {
        accounts::workspace_by_alias(&*self.conns.read()?, dialect, alias)
    }
    fn list_workspaces(&self) -> StoreResult<Vec<WorkspaceRecord>> {
        accounts::list_workspaces(&*self.conns.read()?)
    }
    fn insert_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
        self.conns.write_with(|c| accounts::insert_key(c, key))
    }
    fn key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        self.cache.key(key_hash, || {
            accounts::key_by_hash(&*self.conns.read()?, key_hash)
        })
    }
    fn key_by_id(&self, id: Uuid) -> StoreResult<Option<ApiKeyRecord>> {
        accounts::key_by_id(&*self.conns.read()?, id)
    }
    fn list_keys(&self, workspace: Option<&str>) -> StoreResult<Vec<ApiKeyRecord>> {
        accounts::list_keys(&*self.conns.read()?, workspace)
    }
    fn revoke_key(&self, id: Uuid, at: OffsetDateTime) -> StoreResult<bool> {
        self.conns.write_with(|c| accounts::revoke_key(c, id, at))
    }
    fn reinstate_key(&self, id: Uuid) -> StoreResult<bool> {
        self.conns.write_with(|c| accounts::reinstate_key(c, id))
    }
    fn insert_sandbox(&self, sb: &SandboxRecord) -> StoreResult<()> {
        self.conns.write_with(|c| sandboxes::insert(c, sb))
    }
    fn update_sandbox(&self, sb: &SandboxRecord) -> StoreResult<()> {
        self.conns.write_with(|c| sandboxes::update(c, sb))
    }
    fn prune_ended_sandboxes(
        &self,
        before: OffsetDateTime,
        pending_teardown: &str,
        limit: u32,
    ) -> StoreResult<u64> {
        self.conns
            .write_with(|c| sandboxes::prune_ended(c, before, pending_teardown, limit))
    }
    fn update_sandbox_audited(&self, sb: &SandboxRecord, rec: &AuditRecord) -> StoreResult<()> {
        self.conns.write_with(|c| {
            let tx = c.transaction()?;
            sandboxes::update(&tx, sb)?;
            audit::insert(&tx, rec)?;
            tx.commit()?;
            Ok(())
        })
    }
    fn get_sandbox(&self, id: Uuid) -> StoreResult<Option<SandboxRecord>> {
        self.cache
            .sandbox(id, || sandboxes::get(&*self.conns.read()?, id))
    }
    fn sandbox_by_alias(&self, dialect: &str, alias: &str) -> StoreResult<Option<SandboxRecord>> {
        sandboxes::by_alias(&*self.conns.read()?, dialect, alias)
    }
    fn list_sandboxes(
        &self,
        workspace: &str,
        filter: SandboxFilter<'_>,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::list(&*self.conns.read()?, workspace, filter, limit, after)
    }
    fn sandboxes_in_status(&self, statuses: &[&str]) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::in_status(&*self.conns.read()?, statuses)
    }
    fn usage_in_status(&self, statuses: &[&str]) -> StoreResult<Vec<WorkspaceUsage>> {
        sandboxes::usage_in_status(&*self.conns.read()?, statuses)
    }
    fn sandboxes_named(&self, workspace: &str, name: &str) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::named(&*self.conns.read()?, workspace, name)
    }
    fn ended_sandboxes(
        &self,
        workspace: &str,
        since: OffsetDateTime,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::ended(&*self.conns.read()?, workspace, since, limit, after)
    }
    fn insert_snapshot(&self, snap: &SnapshotRecord) -> StoreResult<()> {
        self.conns.write_with(|c| snapshots::insert(c, snap))
    }
    fn get_snapshot(&self, id: Uuid) -> StoreResult<Option<SnapshotRecord>> {
        snapshots::get(&*self.conns.read()?, id)
    }
    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SnapshotRecord>> {
        snapshots::list(&*self.conns.read()?, workspace, name, limit, after)
    }
    fn delete_snapshot(&self, id: Uuid) -> StoreResult<bool> {
        self.conns.write_with(|c| snapshots::delete(c, id))
    }
    fn snapshots_using_layer(&self, digest: &str) -> StoreResult<u64> {
        snapshots::using_layer(&*self.conns.read()?, digest)
    }
    fn snapshot_memory_images(&self) -> StoreResult<Vec<String>> {
        snapshots::memory_images(&*self.conns.read()?)
    }
    fn set_secret(&self, workspace: &str, name: &str, value: &[u8]) -> StoreResult<()> {
        self.conns
            .write_with(|c| secrets::set(c, &self.secrets, workspace, name, value))
    }
    fn get_secret(&self, workspace: &str, name: &str) -> StoreResult<Option<Vec<u8>>> {
        secrets::get(&*self.conns.read()?, &self.secrets, workspace, name)
    }
    fn list_secret_names(&self, workspace: &str) -> StoreResult<Vec<String>> {
        secrets::names(&*self.conns.read()?, workspace)
    }
    fn delete_secret(&self, workspace: &str, name: &str) -> StoreResult<bool> {
        self.conns
            .write_with(|c| secrets::delete(c, workspace, name))
    }
    fn set_registry_credential(&self, cred: &RegistryCredential) -> StoreResult<()> {
        self.conns
            .write_with(|c| registries::set(c, &self.secrets, cred))
    }
    fn get_registry_credential(&self, registry: &str) -> StoreResult<Option<RegistryCredential>> {
        registries::get(&*self.conns.read()?, &self.secrets, registry)
    }
    fn list_registry_credentials(&self) -> StoreResult<Vec<(String, Option<String>)>> {
        registries::list(&*self.conns.read()?)
    }
    fn delete_registry_credential(&self, registry: &str) -> StoreResult<bool> {
        self.conns.write_with(|c| registries::delete(c, registry))
    }
    fn set_egress_policy(&self, policy: &EgressPolicyRecord) -> StoreResult<()> {
        self.conns.write_with(|c| egress::set(c, policy))
    }
    fn get_egress_policy(&self, workspace: &str) -> StoreResult<Option<EgressPolicyRecord>> {
        egress::get(&*self.conns.read()?, workspace)
    }
    fn delete_egress_policy(&self, workspace: &str) -> StoreResult<bool> {
        self.conns.write_with(|c| egress::delete(c, workspace))
    }
    fn set_quota_override(&self, quota: &QuotaOverrideRecord) -> StoreResult<()> {
        self.conns.write_with(|c| quotas::set(c, quota))
    }
    fn get_quota_override(&self, workspace: &str) -> StoreResult<Option<QuotaOverrideRecord>> {
        quotas::get(&*self.conns.read()?, workspace)
    }
    fn set_workspace_image(&self, workspace: &str, image: Option<&str>) -> StoreResult<()> {
        self.conns
            .write_with(|c| workspace_images::set(c, workspace, image))
    }
    fn get_workspace_image(&self, workspace: &str) -> StoreResult<Option<String>> {
        workspace_images::get(&*self.conns.read()?, workspace)
    }
    fn set_workspace_isolation(&self, workspace: &str, tier: Option<&str>) -> StoreResult<()> {
        self.conns
            .write_with(|c| isolation::set_workspace(c, workspace, tier))
    }
    fn get_workspace_isolation(&self, workspace: &str) -> StoreResult<Option<String>> {
        isolation::get_workspace(&*self.conns.read()?, workspace)
    }
    fn set_template_isolation(
        &self,
        workspace: &str,
        template: &str,
        tier: Option<&str>,
    ) -> StoreResult<()> {
        self.conns
            .write_with(|c| isolation::set_template(c, workspace, template, tier))
    }
    fn get_template_isolation(
        &self,
        workspace: &str,
        template: &str,
    ) -> StoreResult<Option<String>> {
        isolation::get_template(&*self.conns.read()?, workspace, template)
    }
    fn put_idempotency(&self, rec: &IdempotencyRecord) -> StoreResult<bool> {
        self.conns.write_with(|c| idempotency::put(c, rec))
    }
    fn put_idempotency_bounded(
        &self,
        rec: &IdempotencyRecord,
        max_records: u64,
        max_bytes: u64,
    ) -> StoreResult<Option<bool>> {
        self.conns
            .write_with(|c| idempotency::put_bounded(c, rec, max_records, max_bytes))
    }
    fn get_idempotency(
        &self,
        workspace: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        idempotency::get(&*self.conns.read()?, workspace, key)
    }
    fn prune_idempotency(&self, before: OffsetDateTime) -> StoreResult<u64> {
        self.conns.write_with(|c| idempotency::prune(c, before))
    }
    fn insert_audit(&self, rec: &AuditRecord) -> StoreResult<()> {
        self.conns.write_with(|c| audit::insert(c, rec))
    }
    fn list_audit(
        &self,
        workspace: &str,
        since: OffsetDateTime,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        audit::list(&*self.conns.read()?, workspace, since, limit)
    }
    fn prune_audit(&self, before: OffsetDateTime) -> StoreResult<u64> {
        self.conns.write_with(|c| audit::prune(c, before))
    }
    fn insert_console_code(
        &self,
        code_hash: &str,
        workspace: &str,
        expires_at: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.conns
            .write_with(|c| console::insert(c, code_hash, workspace, expires_at, now))
    }
    fn redeem_console_code(
        &self,
        code_hash: &str,
        now: OffsetDateTime,
    ) -> StoreResult<Option<String>> {
        self.conns
            .write_with(|c| console::redeem(c, code_hash, now))
    }
}
