//! Workspaces and API keys: the master key, authentication, and key management, over
//! the store alone so the `sandboxd keys` command can use them beside a running server.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{Aliases, WorkspaceId};
use sandboxd_store::{ApiKeyRecord, Store, StoreError, WorkspaceRecord};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

/// The workspace the master key's requests land in when a dialect names none.
pub const DEFAULT_WORKSPACE: &str = "default";
/// The permission that allows everything.
pub const ALL_PERMISSIONS: &str = "*";
/// The ids the dialects route to the default workspace: the workspace a master key's
/// requests land in (Inngest environment `production`, Runzivo tenant `default`).
pub const DEFAULT_WORKSPACE_ALIASES: [(&str, &str); 2] =
    [("inngest", "production"), ("runzivo", "default")];
/// Characters of a key kept for display.
const PREFIX_LEN: usize = 12;

/// Who a request is made by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// `None` = account scope: every workspace.
    pub workspace: Option<WorkspaceId>,
    pub key_id: Uuid,
    pub permissions: Vec<String>,
    pub scopes: Vec<String>,
}

impl Principal {
    /// Whether the key holds `permission` (or every permission).
    pub fn allows(&self, permission: &str) -> bool {
        self.permissions
            .iter()
            .any(|p| p == ALL_PERMISSIONS || p == permission)
    }

    /// Whether the key may act in workspace `ws`.
    pub fn can_use(&self, ws: &str) -> bool {
        self.workspace.as_deref().is_none_or(|own| own == ws)
    }
}

/// A workspace as the engine shows it.
pub type Workspace = WorkspaceRecord;

/// An API key as listed (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    pub id: Uuid,
    pub prefix: String,
    pub workspace: Option<WorkspaceId>,
    pub permissions: Vec<String>,
    pub scopes: Vec<String>,
    pub created_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
    /// Made from the server's master key.
    pub master: bool,
    /// The key this one is another form of.
    pub alias_of: Option<Uuid>,
}

fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// 64 random hex digits (two v4 UUIDs: 244 random bits).
fn random_hex() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

/// What a new key row holds besides its generated id and time.
struct KeyRow<'k> {
    key: &'k str,
    workspace: Option<&'k str>,
    permissions: Vec<String>,
    scopes: Vec<String>,
    master: bool,
    alias_of: Option<Uuid>,
}

impl<'k> KeyRow<'k> {
    fn new(
        key: &'k str,
        workspace: Option<&'k str>,
        permissions: Vec<String>,
        scopes: Vec<String>,
    ) -> Self {
        KeyRow {
            key,
            workspace,
            permissions,
            scopes,
            master: false,
            alias_of: None,
        }
    }
}

/// Workspace, key and secret management over a store; needs no runtime.
pub struct Accounts<'s> {
    pub(crate) store: &'s dyn Store,
}

impl Engine {
    /// Workspace, key and secret management over the engine's store.
    pub fn accounts(&self) -> Accounts<'_> {
        Accounts::new(self.store.as_ref())
    }

    pub fn ensure_master_key(&self, key: &str) -> Result<(), EngineError> {
        self.accounts().ensure_master_key(key)
    }

    pub fn set_master_key(&self, key: Option<&str>, aliases: &[String]) -> Result<(), EngineError> {
        self.accounts().set_master_key(key, aliases)
    }

    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>, EngineError> {
        let principal = self.accounts().authenticate(key)?;
        if let Some(p) = &principal {
            crate::request::set_caller(crate::request::Caller {
                workspace: p.workspace.clone(),
                key_id: p.key_id,
            });
        }
        Ok(principal)
    }

    /// The principal of key `id` if it is still unrevoked, which the current request
    /// then acts for (as if it had authenticated with it): for a dialect whose later
    /// request carries something the key bought earlier (a terminal ticket).
    pub fn authenticate_key_id(&self, id: Uuid) -> Result<Option<Principal>, EngineError> {
        let principal = self
            .store
            .key_by_id(id)?
            .filter(|k| k.revoked_at.is_none())
            .map(|k| Principal {
                workspace: k.workspace,
                key_id: k.id,
                permissions: k.permissions,
                scopes: k.scopes,
            });
        if let Some(p) = &principal {
            crate::request::set_caller(crate::request::Caller {
                workspace: p.workspace.clone(),
                key_id: p.key_id,
            });
        }
        Ok(principal)
    }

    /// The workspace `dialect` knows as `alias`.
    pub fn workspace_by_alias(
        &self,
        dialect: &str,
        alias: &str,
    ) -> Result<Option<Workspace>, EngineError> {
        self.accounts().workspace_by_alias(dialect, alias)
    }

    pub fn get_workspace(&self, id: &str) -> Result<Option<Workspace>, EngineError> {
        self.accounts().get_workspace(id)
    }

    pub fn create_workspace(&self, name: &str, aliases: Aliases) -> Result<Workspace, EngineError> {
        self.accounts().create_workspace(name, aliases)
    }

    pub fn create_key(
        &self,
        workspace: Option<&str>,
        permissions: Vec<String>,
        scopes: Vec<String>,
    ) -> Result<String, EngineError> {
        self.accounts().create_key(workspace, permissions, scopes)
    }
}

impl<'s> Accounts<'s> {
    pub fn new(store: &'s dyn Store) -> Self {
        Self { store }
    }

    /// Makes sure the `default` workspace (inngest env `production`, runzivo tenant
    /// `default`) exists and that `key` is a key of that workspace with every permission
    /// (workspace-scoped, so requests need no `X-Inngest-Env`).
    pub fn ensure_master_key(&self, key: &str) -> Result<(), EngineError> {
        self.set_master_key(Some(key), &[])
    }

    /// Makes `key` (with `aliases`, other strings that stand for it, such as the bearer
    /// the Inngest SDK derives from it) the master key: a key of the `default`
    /// workspace with every permission. Every master key or alias registered before
    /// that is not one of these is revoked, so a changed master key stops the old one;
    /// `None` revokes them all.
    pub fn set_master_key(&self, key: Option<&str>, aliases: &[String]) -> Result<(), EngineError> {
        if key.is_some_and(|k| k.len() < 16) {
            return Err(EngineError::invalid(
                "the master key must be at least 16 characters",
            ));
        }
        let forms: Vec<&str> = key
            .into_iter()
            .chain(aliases.iter().map(String::as_str))
            .collect();
        let keep: Vec<String> = forms.iter().map(|k| hash(k)).collect();
        let now = OffsetDateTime::now_utc();
        for old in self.store.list_keys(Some(DEFAULT_WORKSPACE))? {
            if old.master && old.revoked_at.is_none() && !keep.contains(&old.key_hash) {
                self.store.revoke_key(old.id, now)?;
                tracing::warn!(prefix = %old.prefix, "revoked a former master key");
            }
        }
        let Some(key) = key else {
            return Ok(());
        };
        self.ensure_default_workspace()?;
        let master = self.master_form(key, None)?;
        for alias in aliases {
            self.master_form(alias, Some(master))?;
        }
        Ok(())
    }

    /// Registers (or reinstates) one form of the master key; returns its key id.
    fn master_form(&self, key: &str, alias_of: Option<Uuid>) -> Result<Uuid, EngineError> {
        match self.store.key_by_hash(&hash(key))? {
            Some(k) if k.master => {
                if k.revoked_at.is_some() {
                    self.store.reinstate_key(k.id)?;
                }
                Ok(k.id)
            }
            // A key the operator made (e.g. with `keys create`) and then configured as the
            // master key: it stays an ordinary key of theirs, which authenticates as it did
            // (never a reason not to start), and is not revoked with master keys.
            Some(k) => {
                tracing::warn!(
                    prefix = %k.prefix,
                    "the master key is also an ordinary key in the store; it keeps that key's scope and revocation"
                );
                Ok(k.id)
            }
            None => self.insert_key(KeyRow {
                key,
                workspace: Some(DEFAULT_WORKSPACE),
                permissions: vec![ALL_PERMISSIONS.into()],
                scopes: Vec::new(),
                master: true,
                alias_of,
            }),
        }
    }

    /// The `default` workspace (inngest env `production`, runzivo tenant `default`),
    /// created when missing.
    pub fn ensure_default_workspace(&self) -> Result<Workspace, EngineError> {
        match self.store.get_workspace(DEFAULT_WORKSPACE)? {
            Some(ws) => Ok(ws),
            None => match self.create_workspace_with_id(
                DEFAULT_WORKSPACE,
                "Default",
                DEFAULT_WORKSPACE_ALIASES
                    .iter()
                    .map(|(d, a)| (d.to_string(), a.to_string()))
                    .collect(),
            ) {
                // Another process on the data dir (two `sandboxd run`s started together
                // on a fresh one) made it between the read and the insert: use theirs.
                Err(e) if e.code == ErrorCode::NameTaken => {
                    self.store.get_workspace(DEFAULT_WORKSPACE)?.ok_or(e)
                }
                made => made,
            },
        }
    }

    /// The principal of an unrevoked key.
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>, EngineError> {
        Ok(self
            .store
            .key_by_hash(&hash(key))?
            .filter(|k| k.revoked_at.is_none())
            .map(|k| Principal {
                workspace: k.workspace,
                key_id: k.id,
                permissions: k.permissions,
                scopes: k.scopes,
            }))
    }

    /// The workspace `dialect` knows as `alias`.
    pub fn workspace_by_alias(
        &self,
        dialect: &str,
        alias: &str,
    ) -> Result<Option<Workspace>, EngineError> {
        Ok(self.store.workspace_by_alias(dialect, alias)?)
    }

    pub fn get_workspace(&self, id: &str) -> Result<Option<Workspace>, EngineError> {
        Ok(self.store.get_workspace(id)?)
    }

    pub fn list_workspaces(&self) -> Result<Vec<Workspace>, EngineError> {
        Ok(self.store.list_workspaces()?)
    }

    /// Creates a workspace with a fresh id; its aliases (dialect -> id there) must be
    /// unused.
    pub fn create_workspace(&self, name: &str, aliases: Aliases) -> Result<Workspace, EngineError> {
        self.create_workspace_with_id(&Uuid::new_v4().to_string(), name, aliases)
    }

    /// Creates a workspace with a chosen id; id and aliases must be unused.
    pub fn create_workspace_with_id(
        &self,
        id: &str,
        name: &str,
        aliases: Aliases,
    ) -> Result<Workspace, EngineError> {
        if let Some((d, a)) = aliases.iter().find(|(d, a)| d.is_empty() || a.is_empty()) {
            return Err(EngineError::invalid(format!(
                "workspace alias {a:?} of dialect {d:?} must not be empty"
            )));
        }
        let ws = WorkspaceRecord {
            id: id.into(),
            name: name.into(),
            aliases,
            created_at: OffsetDateTime::now_utc(),
        };
        match self.store.create_workspace(&ws) {
            Ok(()) => Ok(ws),
            Err(StoreError::Conflict(what)) => Err(EngineError::new(
                ErrorCode::NameTaken,
                format!("{what} is already used"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates a key for `workspace` (`None` = account scope) and returns it; only its
    /// hash is kept, so this is the one time it is seen.
    pub fn create_key(
        &self,
        workspace: Option<&str>,
        permissions: Vec<String>,
        scopes: Vec<String>,
    ) -> Result<String, EngineError> {
        self.create_key_prefixed("sbx_", workspace, permissions, scopes)
    }

    /// [`Accounts::create_key`] with the key starting with `prefix` (1-16 characters of
    /// `[a-z0-9]` then `_`, e.g. OpenRelay's `or_` or legacy `vl_`); keys stay opaque.
    pub fn create_key_prefixed(
        &self,
        prefix: &str,
        workspace: Option<&str>,
        permissions: Vec<String>,
        scopes: Vec<String>,
    ) -> Result<String, EngineError> {
        let body = prefix.strip_suffix('_').unwrap_or("");
        let ok = (1..=16).contains(&body.len())
            && body
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !ok {
            return Err(EngineError::invalid(format!(
                "key prefix {prefix:?} must be 1-16 characters of a-z and 0-9, then '_'"
            )));
        }
        self.check_workspace(workspace)?;
        let key = format!("{prefix}{}", random_hex());
        self.insert_key(KeyRow::new(&key, workspace, permissions, scopes))?;
        Ok(key)
    }

    /// A new key `<prefix><64 hex digits>` (prefix: up to 40 visible ASCII characters,
    /// e.g. `signkey-prod-`), plus each of `aliases(key)` registered as another form of
    /// it, revoked with it. Returns the key; only hashes are kept.
    pub fn create_hex_key(
        &self,
        prefix: &str,
        workspace: Option<&str>,
        permissions: Vec<String>,
        scopes: Vec<String>,
        aliases: impl Fn(&str) -> Vec<String>,
    ) -> Result<String, EngineError> {
        if prefix.len() > 40 || !prefix.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(EngineError::invalid(format!(
                "key prefix {prefix:?} must be at most 40 visible ASCII characters"
            )));
        }
        self.check_workspace(workspace)?;
        let key = format!("{prefix}{}", random_hex());
        let id = self.insert_key(KeyRow::new(
            &key,
            workspace,
            permissions.clone(),
            scopes.clone(),
        ))?;
        for alias in aliases(&key) {
            self.insert_key(KeyRow {
                alias_of: Some(id),
                ..KeyRow::new(&alias, workspace, permissions.clone(), scopes.clone())
            })?;
        }
        Ok(key)
    }

    /// Registers a key chosen by the caller (e.g. the bearer the inngest SDK derives
    /// from a signing key); only its hash is kept. At least 16 visible ASCII characters.
    pub fn register_key(
        &self,
        key: &str,
        workspace: Option<&str>,
        permissions: Vec<String>,
        scopes: Vec<String>,
    ) -> Result<(), EngineError> {
        if key.len() < 16 || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(EngineError::invalid(
                "a key must be at least 16 visible ASCII characters",
            ));
        }
        if self.store.key_by_hash(&hash(key))?.is_some() {
            return Err(EngineError::new(
                ErrorCode::NameTaken,
                "this key is already registered",
            ));
        }
        self.check_workspace(workspace)?;
        self.insert_key(KeyRow::new(key, workspace, permissions, scopes))
            .map(drop)
    }

    /// Refuses a key scope naming a workspace that does not exist.
    fn check_workspace(&self, workspace: Option<&str>) -> Result<(), EngineError> {
        match workspace {
            Some(ws) if self.store.get_workspace(ws)?.is_none() => Err(EngineError::invalid(
                format!("workspace {ws:?} does not exist"),
            )),
            _ => Ok(()),
        }
    }

    fn insert_key(&self, row: KeyRow<'_>) -> Result<Uuid, EngineError> {
        let id = Uuid::new_v4();
        self.store.insert_key(&ApiKeyRecord {
            id,
            key_hash: hash(row.key),
            prefix: row.key.chars().take(PREFIX_LEN).collect(),
            workspace: row.workspace.map(Into::into),
            permissions: row.permissions,
            scopes: row.scopes,
            created_at: OffsetDateTime::now_utc(),
            revoked_at: None,
            master: row.master,
            alias_of: row.alias_of,
        })?;
        Ok(id)
    }

    /// Keys of a workspace, or the account-scoped keys for `None`.
    pub fn list_keys(&self, workspace: Option<&str>) -> Result<Vec<ApiKeyInfo>, EngineError> {
        let keys = self.store.list_keys(workspace)?;
        Ok(keys
            .into_iter()
            .map(|k| ApiKeyInfo {
                id: k.id,
                prefix: k.prefix,
                workspace: k.workspace,
                permissions: k.permissions,
                scopes: k.scopes,
                created_at: k.created_at,
                revoked_at: k.revoked_at,
                master: k.master,
                alias_of: k.alias_of,
            })
            .collect())
    }

    /// Revokes a key; false when there is no such unrevoked key.
    pub fn revoke_key(&self, id: Uuid) -> Result<bool, EngineError> {
        Ok(self.store.revoke_key(id, OffsetDateTime::now_utc())?)
    }
}
