//! The embedded SQLite store: one WAL-mode database file plus a secret key file.

mod accounts;
mod codec;
mod egress;
mod idempotency;
mod migrations;
mod quotas;
mod sandboxes;
mod secrets;
mod snapshots;

use crate::crypto::SecretBox;
use crate::error::StoreError;
use crate::records::*;
use crate::{Store, StoreResult};
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use time::OffsetDateTime;
use uuid::Uuid;

/// Name of the key file that encrypts secrets, next to the database.
pub const SECRET_KEY_FILE: &str = "secrets.key";

/// A [`Store`] in one SQLite file (WAL journal, foreign keys on).
pub struct SqliteStore {
    conn: Mutex<Connection>,
    secrets: SecretBox,
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
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            secrets,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection usable (every write is a
        // single statement or a transaction), so a poisoned lock is recovered.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Turns a UNIQUE/PRIMARY KEY violation into `Conflict`, anything else into `Sqlite`.
pub(super) fn unique_violation(e: rusqlite::Error, what: impl FnOnce() -> String) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(ref f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation
                && matches!(f.extended_code, 1555 | 2067) =>
        {
            StoreError::Conflict(what())
        }
        other => StoreError::Sqlite(other),
    }
}

impl Store for SqliteStore {
    fn create_workspace(&self, ws: &WorkspaceRecord) -> StoreResult<()> {
        accounts::create_workspace(&self.conn(), ws)
    }
    fn get_workspace(&self, id: &str) -> StoreResult<Option<WorkspaceRecord>> {
        accounts::workspace_by(&self.conn(), "id", id)
    }
    fn workspace_by_inngest_env(&self, env: &str) -> StoreResult<Option<WorkspaceRecord>> {
        accounts::workspace_by(&self.conn(), "inngest_env", env)
    }
    fn workspace_by_tenant(&self, tenant: &str) -> StoreResult<Option<WorkspaceRecord>> {
        accounts::workspace_by(&self.conn(), "runzivo_tenant_id", tenant)
    }
    fn list_workspaces(&self) -> StoreResult<Vec<WorkspaceRecord>> {
        accounts::list_workspaces(&self.conn())
    }
    fn insert_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
        accounts::insert_key(&self.conn(), key)
    }
    fn key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        accounts::key_by_hash(&self.conn(), key_hash)
    }
    fn list_keys(&self, workspace: Option<&str>) -> StoreResult<Vec<ApiKeyRecord>> {
        accounts::list_keys(&self.conn(), workspace)
    }
    fn revoke_key(&self, id: Uuid, at: OffsetDateTime) -> StoreResult<bool> {
        accounts::revoke_key(&self.conn(), id, at)
    }
    fn reinstate_key(&self, id: Uuid) -> StoreResult<bool> {
        accounts::reinstate_key(&self.conn(), id)
    }
    fn insert_sandbox(&self, sb: &SandboxRecord) -> StoreResult<()> {
        sandboxes::insert(&self.conn(), sb)
    }
    fn update_sandbox(&self, sb: &SandboxRecord) -> StoreResult<()> {
        sandboxes::update(&self.conn(), sb)
    }
    fn get_sandbox(&self, id: Uuid) -> StoreResult<Option<SandboxRecord>> {
        sandboxes::get(&self.conn(), id)
    }
    fn list_sandboxes(
        &self,
        workspace: &str,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::list(&self.conn(), workspace, limit, after)
    }
    fn sandboxes_in_status(&self, statuses: &[&str]) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::in_status(&self.conn(), statuses)
    }
    fn sandboxes_named(&self, workspace: &str, name: &str) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::named(&self.conn(), workspace, name)
    }
    fn ended_sandboxes(
        &self,
        workspace: &str,
        since: OffsetDateTime,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SandboxRecord>> {
        sandboxes::ended(&self.conn(), workspace, since, limit, after)
    }
    fn insert_snapshot(&self, snap: &SnapshotRecord) -> StoreResult<()> {
        snapshots::insert(&mut self.conn(), snap)
    }
    fn get_snapshot(&self, id: Uuid) -> StoreResult<Option<SnapshotRecord>> {
        snapshots::get(&self.conn(), id)
    }
    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SnapshotRecord>> {
        snapshots::list(&self.conn(), workspace, name, limit, after)
    }
    fn delete_snapshot(&self, id: Uuid) -> StoreResult<bool> {
        snapshots::delete(&self.conn(), id)
    }
    fn snapshots_using_layer(&self, digest: &str) -> StoreResult<u64> {
        snapshots::using_layer(&self.conn(), digest)
    }
    fn set_secret(&self, workspace: &str, name: &str, value: &[u8]) -> StoreResult<()> {
        secrets::set(&self.conn(), &self.secrets, workspace, name, value)
    }
    fn get_secret(&self, workspace: &str, name: &str) -> StoreResult<Option<Vec<u8>>> {
        secrets::get(&self.conn(), &self.secrets, workspace, name)
    }
    fn list_secret_names(&self, workspace: &str) -> StoreResult<Vec<String>> {
        secrets::names(&self.conn(), workspace)
    }
    fn delete_secret(&self, workspace: &str, name: &str) -> StoreResult<bool> {
        secrets::delete(&self.conn(), workspace, name)
    }
    fn set_egress_policy(&self, policy: &EgressPolicyRecord) -> StoreResult<()> {
        egress::set(&self.conn(), policy)
    }
    fn get_egress_policy(&self, workspace: &str) -> StoreResult<Option<EgressPolicyRecord>> {
        egress::get(&self.conn(), workspace)
    }
    fn delete_egress_policy(&self, workspace: &str) -> StoreResult<bool> {
        egress::delete(&self.conn(), workspace)
    }
    fn set_quota_override(&self, quota: &QuotaOverrideRecord) -> StoreResult<()> {
        quotas::set(&self.conn(), quota)
    }
    fn get_quota_override(&self, workspace: &str) -> StoreResult<Option<QuotaOverrideRecord>> {
        quotas::get(&self.conn(), workspace)
    }
    fn put_idempotency(&self, rec: &IdempotencyRecord) -> StoreResult<bool> {
        idempotency::put(&self.conn(), rec)
    }
    fn get_idempotency(
        &self,
        workspace: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        idempotency::get(&self.conn(), workspace, key)
    }
    fn prune_idempotency(&self, before: OffsetDateTime) -> StoreResult<u64> {
        idempotency::prune(&self.conn(), before)
    }
}
