//! Plain records the store persists; free of engine types so any backend can hold them.

use serde_json::Value;
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// What an alias names: the `kind` column of the alias table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AliasKind {
    Workspace,
    Sandbox,
}

impl AliasKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AliasKind::Workspace => "workspace",
            AliasKind::Sandbox => "sandbox",
        }
    }
}

/// Names a dialect knows one workspace or sandbox by: dialect name -> alias. An alias
/// is unique within its (dialect, kind) and set once, when its target is created.
pub type Aliases = BTreeMap<String, String>;

/// A workspace: the tenant boundary, with the names the dialects know it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRecord {
    pub id: String,
    pub name: String,
    /// The names dialects route to this workspace (e.g. an environment or tenant id).
    pub aliases: Aliases,
    pub created_at: OffsetDateTime,
}

/// An API key; only the sha256 of the key is ever stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: Uuid,
    /// Lowercase hex sha256 of the full key.
    pub key_hash: String,
    /// The first characters of the key, for display.
    pub prefix: String,
    /// `None` = account scope (every workspace).
    pub workspace: Option<String>,
    pub permissions: Vec<String>,
    pub scopes: Vec<String>,
    pub created_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
    /// Made by the server from its configured master key (revoked when that changes).
    pub master: bool,
    /// The key this one is another form of (e.g. the Inngest SDK's hashed bearer);
    /// revoking that key revokes this one too.
    pub alias_of: Option<Uuid>,
}

/// What one workspace's sandboxes in some statuses hold, summed: admission's view of
/// them, read without decoding every record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceUsage {
    pub workspace: String,
    pub sandboxes: u64,
    pub vcpu: u64,
    pub memory_mb: u64,
    /// The disk sizes recorded for them, summed.
    pub disk_mb: u64,
    /// How many have no disk size recorded (the server's default applies to them).
    pub default_disk: u64,
}

/// A sandbox row: every field of the engine's sandbox plus backend data.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRecord {
    pub id: Uuid,
    pub workspace: String,
    pub name: Option<String>,
    /// Status as its stable upper-case name (`RUNNING`…).
    pub status: String,
    pub image: String,
    pub vcpu: u32,
    pub memory_mb: u32,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub ended_at: Option<OffsetDateTime>,
    pub expires_at: Option<OffsetDateTime>,
    /// Consented to be moved to disk when memory runs short (autoPause).
    pub auto_pause: bool,
    /// When it was moved to disk for memory (autoPause); `None` while resident.
    pub auto_paused_at: Option<OffsetDateTime>,
    /// End reason as its snake_case name.
    pub end_reason: Option<String>,
    pub error: Option<String>,
    pub snapshot_id: Option<Uuid>,
    pub environment: BTreeMap<String, String>,
    /// Secret names (never values).
    pub secrets: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    /// Snapshot layers the sandbox runs on top of its image, lowest first.
    pub extra_layers: Vec<String>,
    /// The backend's handle as JSON (`None` before the backend started it).
    pub handle: Option<Value>,
    /// The host id-range slot the backend gave it.
    pub id_slot: Option<u32>,
    /// Size of its writable layer in MiB, chosen at create (0: no limit); `None` on
    /// rows written before sizes were recorded (schema version 5).
    pub disk_mb: Option<u32>,
    /// The ids dialects know it by (written at insert, never changed by an update).
    pub aliases: Aliases,
    /// Each dialect's own typed attributes of the sandbox, as JSON by dialect name.
    pub attributes: BTreeMap<String, Value>,
    /// Its isolation tier's name (`container`, `gvisor`); `None` on rows written before
    /// tiers were recorded (schema version 12): they run on the server's default tier.
    pub isolation: Option<String>,
    /// The network its create asked for, as the engine's JSON (mode and the sandbox's
    /// own egress layer), so a repeated named create can be compared; `None` on rows
    /// written before it was recorded (schema version 15).
    pub network: Option<Value>,
}

/// A sandbox list's filter, applied in the query before paging.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxFilter<'a> {
    /// Only sandboxes this dialect has an alias for.
    pub aliased_in: Option<&'a str>,
}

/// A snapshot row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    pub id: Uuid,
    pub workspace: String,
    pub name: Option<String>,
    pub source_sandbox_id: Uuid,
    pub image: String,
    /// Layers on top of `image`, lowest first; the last one is the snapshot's own.
    pub layers: Vec<String>,
    pub digest: String,
    pub size_bytes: u64,
    pub vcpu: u32,
    pub memory_mb: u32,
    pub created_at: OffsetDateTime,
    pub expires_at: Option<OffsetDateTime>,
    /// The source sandbox's disk size in MiB (0: no limit), inherited by sandboxes
    /// started from it; `None` when the source's size was not recorded.
    pub disk_mb: Option<u32>,
    /// The dir of its memory image when it keeps the source's memory too (a gVisor
    /// sandbox's processes); `None` for a filesystem-only snapshot.
    pub memory_image: Option<String>,
}

/// A remembered answer to an idempotent request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    pub key: String,
    pub workspace: String,
    /// Hash of the request, to detect the same key used for another request.
    pub request_hash: String,
    pub status: u16,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
    pub created_at: OffsetDateTime,
}

/// One entry of the audit trail: a mutating operation in a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub at: OffsetDateTime,
    pub workspace: String,
    /// Who asked: an API key's id, or a fixed actor (`console`, `cli`) when no key
    /// did (`None`: the server itself, e.g. an expiry).
    pub key_id: Option<String>,
    /// The HTTP request it was part of.
    pub request_id: Option<String>,
    /// What was done: `sandbox.create`, `sandbox.destroy`, …
    pub action: String,
    /// What it was done to (a sandbox or snapshot id).
    pub target: Option<String>,
    /// `ok`, or the engine's error code.
    pub outcome: String,
}

/// Position after which a keyset page starts: the last item of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyset {
    pub created_at: OffsetDateTime,
    pub id: Uuid,
}

/// A workspace's egress policy layer: allow and deny rules (IPv4 CIDRs or domain
/// names, as text; the engine parses them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPolicyRecord {
    pub workspace: String,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub updated_at: OffsetDateTime,
}

/// A workspace's quota override: each limit set replaces the server's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaOverrideRecord {
    pub workspace: String,
    pub max_sandboxes: Option<u32>,
    pub max_vcpu: Option<u32>,
    pub max_memory_mb: Option<u64>,
    pub updated_at: OffsetDateTime,
}

/// A credential for one OCI registry (`host[:port]`).
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryCredential {
    pub registry: String,
    /// `None`: `secret` is a bearer token; else the password of this user.
    pub username: Option<String>,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for RegistryCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredential")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .field("secret", &"<redacted>")
            .finish()
    }
}
