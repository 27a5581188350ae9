//! Persistence: the `Store` trait and its embedded SQLite implementation.

mod crypto;
pub mod error;
pub mod records;
mod sqlite;

pub use error::StoreError;
pub use records::*;
pub use sqlite::SqliteStore;

use time::OffsetDateTime;
use uuid::Uuid;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Everything the engine persists. Methods are blocking and short; every backend owns
/// its migrations.
pub trait Store: Send + Sync + 'static {
    // Workspaces.
    /// Inserts the workspace with its aliases; `Conflict` when the id or an alias is taken.
    fn create_workspace(&self, ws: &WorkspaceRecord) -> StoreResult<()>;
    fn get_workspace(&self, id: &str) -> StoreResult<Option<WorkspaceRecord>>;
    /// The workspace `dialect` knows as `alias`.
    fn workspace_by_alias(
        &self,
        dialect: &str,
        alias: &str,
    ) -> StoreResult<Option<WorkspaceRecord>>;
    fn list_workspaces(&self) -> StoreResult<Vec<WorkspaceRecord>>;

    // API keys.
    fn insert_key(&self, key: &ApiKeyRecord) -> StoreResult<()>;
    fn key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKeyRecord>>;
    /// The key with this id (revoked or not).
    fn key_by_id(&self, id: Uuid) -> StoreResult<Option<ApiKeyRecord>>;
    /// Keys of one workspace (`Some`) or account-scoped keys (`None`), oldest first.
    fn list_keys(&self, workspace: Option<&str>) -> StoreResult<Vec<ApiKeyRecord>>;
    /// Marks a key revoked, with its aliases; false when no such unrevoked key exists.
    fn revoke_key(&self, id: Uuid, at: OffsetDateTime) -> StoreResult<bool>;
    /// Clears a key's revocation (a master key configured again); false when none.
    fn reinstate_key(&self, id: Uuid) -> StoreResult<bool>;

    // Sandboxes.
    /// Inserts the sandbox with its aliases; `Conflict` when the id or an alias is taken.
    fn insert_sandbox(&self, sb: &SandboxRecord) -> StoreResult<()>;
    /// Replaces the whole row but its aliases; `NotFound` when it does not exist.
    fn update_sandbox(&self, sb: &SandboxRecord) -> StoreResult<()>;
    /// [`Store::update_sandbox`] and [`Store::insert_audit`] in one transaction: both
    /// land or neither does.
    fn update_sandbox_audited(&self, sb: &SandboxRecord, audit: &AuditRecord) -> StoreResult<()>;
    fn get_sandbox(&self, id: Uuid) -> StoreResult<Option<SandboxRecord>>;
    /// The sandbox `dialect` knows as `alias`.
    fn sandbox_by_alias(&self, dialect: &str, alias: &str) -> StoreResult<Option<SandboxRecord>>;
    /// One workspace's sandboxes that pass `filter`, by (created_at DESC, id DESC),
    /// after `after`.
    fn list_sandboxes(
        &self,
        workspace: &str,
        filter: SandboxFilter<'_>,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SandboxRecord>>;
    /// Every sandbox (all workspaces) whose status is one of `statuses`.
    fn sandboxes_in_status(&self, statuses: &[&str]) -> StoreResult<Vec<SandboxRecord>>;
    /// The sandboxes whose status is one of `statuses`, summed per workspace (what
    /// [`Store::sandboxes_in_status`] gives, without the records).
    fn usage_in_status(&self, statuses: &[&str]) -> StoreResult<Vec<WorkspaceUsage>>;
    /// One workspace's sandboxes with this name (any status).
    fn sandboxes_named(&self, workspace: &str, name: &str) -> StoreResult<Vec<SandboxRecord>>;
    /// One workspace's sandboxes that ended at or after `since`, by (ended_at DESC, id
    /// DESC), after `after` (whose `created_at` holds the previous row's `ended_at`).
    fn ended_sandboxes(
        &self,
        workspace: &str,
        since: OffsetDateTime,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SandboxRecord>>;

    /// Removes, with their aliases, at most `limit` records of sandboxes that ended
    /// before `before` (TERMINATED, or FAILED unless their error starts with
    /// `pending_teardown` and no later destroy removed them); returns how many.
    fn prune_ended_sandboxes(
        &self,
        before: OffsetDateTime,
        pending_teardown: &str,
        limit: u32,
    ) -> StoreResult<u64>;

    // Snapshots.
    fn insert_snapshot(&self, snap: &SnapshotRecord) -> StoreResult<()>;
    fn get_snapshot(&self, id: Uuid) -> StoreResult<Option<SnapshotRecord>>;
    /// One workspace's snapshots by (created_at DESC, id DESC), optionally by name.
    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<Keyset>,
    ) -> StoreResult<Vec<SnapshotRecord>>;
    fn delete_snapshot(&self, id: Uuid) -> StoreResult<bool>;
    /// How many snapshots list `digest` among their layers.
    fn snapshots_using_layer(&self, digest: &str) -> StoreResult<u64>;
    /// The memory image paths of every snapshot that keeps one (any workspace).
    fn snapshot_memory_images(&self) -> StoreResult<Vec<String>>;

    // Secrets (encrypted at rest by the backend).
    fn set_secret(&self, workspace: &str, name: &str, value: &[u8]) -> StoreResult<()>;
    fn get_secret(&self, workspace: &str, name: &str) -> StoreResult<Option<Vec<u8>>>;
    fn list_secret_names(&self, workspace: &str) -> StoreResult<Vec<String>>;
    fn delete_secret(&self, workspace: &str, name: &str) -> StoreResult<bool>;

    // Registry credentials (server-wide; the secret encrypted at rest like secrets).
    /// Sets (replacing) the credential of `cred.registry`.
    fn set_registry_credential(&self, cred: &RegistryCredential) -> StoreResult<()>;
    fn get_registry_credential(&self, registry: &str) -> StoreResult<Option<RegistryCredential>>;
    /// Registries with a credential and their user names (never secrets).
    fn list_registry_credentials(&self) -> StoreResult<Vec<(String, Option<String>)>>;
    fn delete_registry_credential(&self, registry: &str) -> StoreResult<bool>;

    // Egress policy (one layer per workspace).
    /// Sets (replacing) the workspace's policy.
    fn set_egress_policy(&self, policy: &EgressPolicyRecord) -> StoreResult<()>;
    fn get_egress_policy(&self, workspace: &str) -> StoreResult<Option<EgressPolicyRecord>>;
    /// Removes the workspace's policy; false when it had none.
    fn delete_egress_policy(&self, workspace: &str) -> StoreResult<bool>;

    // Quota overrides (one per workspace).
    /// Sets (replacing) the workspace's override.
    fn set_quota_override(&self, quota: &QuotaOverrideRecord) -> StoreResult<()>;
    fn get_quota_override(&self, workspace: &str) -> StoreResult<Option<QuotaOverrideRecord>>;

    // Default images (one per workspace, optional).
    /// Sets (`None`: clears) the image creates of `workspace` that name none start from.
    fn set_workspace_image(&self, workspace: &str, image: Option<&str>) -> StoreResult<()>;
    fn get_workspace_image(&self, workspace: &str) -> StoreResult<Option<String>>;

    // Isolation tier choices (names as the runtime's `Isolation` gives them).
    /// Sets (`None`: clears) the tier creates of `workspace` that choose none run on.
    fn set_workspace_isolation(&self, workspace: &str, tier: Option<&str>) -> StoreResult<()>;
    fn get_workspace_isolation(&self, workspace: &str) -> StoreResult<Option<String>>;
    /// Sets (`None`: clears) the tier the workspace's template `template` runs on.
    fn set_template_isolation(
        &self,
        workspace: &str,
        template: &str,
        tier: Option<&str>,
    ) -> StoreResult<()>;
    fn get_template_isolation(
        &self,
        workspace: &str,
        template: &str,
    ) -> StoreResult<Option<String>>;

    // Idempotency.
    /// Inserts the record; false (and nothing changed) when the key is already taken.
    fn put_idempotency(&self, rec: &IdempotencyRecord) -> StoreResult<bool>;
    /// Inserts the record within its workspace's bounds: past `max_records` records the
    /// workspace's oldest are removed first, and an answer that would take the
    /// workspace's kept bodies past `max_bytes` is kept without its body (status 0).
    /// `None` (and nothing changed) when the key is already taken; else whether the
    /// body was kept.
    fn put_idempotency_bounded(
        &self,
        rec: &IdempotencyRecord,
        max_records: u64,
        max_bytes: u64,
    ) -> StoreResult<Option<bool>>;
    fn get_idempotency(&self, workspace: &str, key: &str)
        -> StoreResult<Option<IdempotencyRecord>>;
    /// Removes records created before `before`; returns how many.
    fn prune_idempotency(&self, before: OffsetDateTime) -> StoreResult<u64>;

    // Audit trail.
    fn insert_audit(&self, rec: &AuditRecord) -> StoreResult<()>;
    /// A workspace's entries at or after `since`, oldest first, at most `limit`.
    fn list_audit(
        &self,
        workspace: &str,
        since: OffsetDateTime,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>>;
    /// Removes entries before `before`; returns how many.
    fn prune_audit(&self, before: OffsetDateTime) -> StoreResult<u64>;
    // Web console sign-in codes.
    /// Stores a one-time code (by its hash) for `workspace`, valid until `expires_at`;
    /// removes codes that expired before `now`.
    fn insert_console_code(
        &self,
        code_hash: &str,
        workspace: &str,
        expires_at: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    /// Spends the code: its workspace when it was unused and unexpired at `now`, in
    /// one statement, so that two redeemers cannot both succeed; `None` otherwise.
    fn redeem_console_code(
        &self,
        code_hash: &str,
        now: OffsetDateTime,
    ) -> StoreResult<Option<String>>;
}
