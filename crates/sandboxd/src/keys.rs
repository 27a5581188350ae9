//! `sandboxd keys create|list|revoke`: API keys and workspaces, straight on the data
//! directory's store (SQLite in WAL mode, so safe beside a running `serve`).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sandboxd_dialect_inngest::signing_key::{sdk_bearer_for, signing_key_prefix};
use sandboxd_engine::accounts::{Accounts, ApiKeyInfo};
use sandboxd_engine::{Aliases, Workspace, ALL_PERMISSIONS, ALL_SCOPE, DEFAULT_WORKSPACE};
use sandboxd_store::SqliteStore;
use std::path::PathBuf;
use uuid::Uuid;

/// The data directory a store command works on.
#[derive(Args)]
pub struct DataDirArg {
    /// Data directory of the server (the same as `serve --data-dir`).
    #[arg(
        long = "data-dir",
        env = "SANDBOXD_DATA_DIR",
        default_value = "./.sandboxd"
    )]
    pub data_dir: PathBuf,
}

impl DataDirArg {
    /// Opens (creating if needed) the store `serve` uses in this directory.
    pub fn open(&self) -> Result<SqliteStore> {
        let path = self.data_dir.join(crate::serve::DATABASE_FILE);
        SqliteStore::open(&path).with_context(|| format!("opening {}", path.display()))
    }
}

/// A workspace named on the command line, in a data directory's store.
#[derive(Args)]
pub struct WorkspaceTarget {
    /// Workspace (id or name).
    #[arg(long)]
    workspace: String,
    #[command(flatten)]
    dir: DataDirArg,
}

impl WorkspaceTarget {
    /// Opens the store and finds the workspace (an error when there is none).
    pub fn open(&self) -> Result<(SqliteStore, Workspace)> {
        let store = self.dir.open()?;
        let ws = find_workspace(&Accounts::new(&store), &self.workspace)?
            .with_context(|| format!("no workspace {:?}", self.workspace))?;
        Ok((store, ws))
    }
}

/// A workspace named by its id or its display name.
pub fn find_workspace(accounts: &Accounts<'_>, name: &str) -> Result<Option<Workspace>> {
    if let Some(ws) = accounts.get_workspace(name)? {
        return Ok(Some(ws));
    }
    let all = accounts.list_workspaces()?;
    let mut named = all.into_iter().filter(|w| w.name == name);
    match (named.next(), named.next()) {
        (Some(_), Some(_)) => bail!("several workspaces are named {name:?}: use the id"),
        (found, _) => Ok(found),
    }
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create a key (and its workspace when new); prints the key once on stdout.
    Create(CreateArgs),
    /// List keys (never the keys themselves: id, prefix, scope, permissions).
    List(ListArgs),
    /// Revoke a key by id.
    Revoke {
        id: Uuid,
        #[command(flatten)]
        dir: DataDirArg,
    },
}

#[derive(Args)]
pub struct CreateArgs {
    /// Workspace (id or name) the key is scoped to; created when it does not exist.
    #[arg(long, conflicts_with = "account")]
    workspace: Option<String>,
    /// Account-scoped key: every workspace, chosen per request by `X-Inngest-Env`.
    #[arg(long)]
    account: bool,
    /// A permission (repeatable) [default: `*`, every permission].
    #[arg(long = "permission")]
    permissions: Vec<String>,
    /// A scope (repeatable).
    #[arg(long = "scope")]
    scopes: Vec<String>,
    /// Inngest environment of a new workspace (unique in the store).
    #[arg(long = "inngest-env")]
    inngest_env: Option<String>,
    /// Runzivo tenant ID of a new workspace (unique in the store).
    #[arg(long)]
    tenant: Option<String>,
    /// How the key starts, e.g. `or_` (OpenRelay) or `vl_` (its legacy keys). Without
    /// it the key is an Inngest signing key, `signkey-<env>-<64 hex>`, which works as a
    /// bearer in every dialect and as the Inngest SDK's `signingKey`.
    #[arg(long)]
    prefix: Option<String>,
    /// Register the key read from stdin (one trailing newline removed) instead of
    /// generating one: e.g. the bearer the inngest SDK sends for a signing key.
    #[arg(long = "key-stdin", conflicts_with = "prefix")]
    key_stdin: bool,
    #[command(flatten)]
    dir: DataDirArg,
}

#[derive(Args)]
pub struct ListArgs {
    /// Only this workspace's keys (id or name).
    #[arg(long)]
    workspace: Option<String>,
    #[command(flatten)]
    dir: DataDirArg,
}

pub fn main(command: KeysCommand) -> Result<()> {
    match command {
        KeysCommand::Create(args) => create(args),
        KeysCommand::List(args) => list(args),
        KeysCommand::Revoke { id, dir } => {
            let store = dir.open()?;
            let accounts = Accounts::new(&store);
            let ws = key_workspace(&accounts, id)?;
            if !accounts.revoke_key(id)? {
                bail!("no unrevoked key has id {id}");
            }
            // An account-scoped key belongs to no workspace's trail.
            if let Some(ws) = ws {
                crate::audit::record_cli(&store, &ws, "key.revoke", &id.to_string())?;
            }
            eprintln!("revoked key {id}");
            Ok(())
        }
    }
}

fn create(args: CreateArgs) -> Result<()> {
    let store = args.dir.open()?;
    let accounts = Accounts::new(&store);
    let workspace = match (&args.workspace, args.account) {
        (_, true) => {
            if args.inngest_env.is_some() || args.tenant.is_some() {
                bail!("--inngest-env and --tenant describe a workspace, not an account key");
            }
            None
        }
        (name, false) => Some(workspace_for_key(
            &accounts,
            name.as_deref().unwrap_or(DEFAULT_WORKSPACE),
            &args,
        )?),
    };
    let permissions = match args.permissions.is_empty() {
        true => vec![ALL_PERMISSIONS.to_owned()],
        false => args.permissions,
    };
    let ws_id = workspace.as_ref().map(|w| w.id.as_str());
    if args.key_stdin {
        let key = crate::secrets::read_stdin()?;
        accounts.register_key(&key, ws_id, permissions, args.scopes)?;
        audit_created(&accounts, &store, &key)?;
        eprintln!("key registered");
        return Ok(());
    }
    let key = match &args.prefix {
        Some(prefix) => accounts.create_key_prefixed(prefix, ws_id, permissions, args.scopes)?,
        None => {
            let env = workspace
                .as_ref()
                .and_then(|w| w.aliases.get(INNGEST))
                .map(String::as_str);
            let prefix = signing_key_prefix(env.unwrap_or("account"));
            let sdk_form = |key: &str| sdk_bearer_for(key).into_iter().collect();
            accounts.create_hex_key(&prefix, ws_id, permissions, args.scopes, sdk_form)?
        }
    };
    audit_created(&accounts, &store, &key)?;
    match &workspace {
        Some(ws) => eprintln!(
            "key for workspace {} ({}); shown only once:",
            ws.id, ws.name
        ),
        None => eprintln!("account-scoped key; shown only once:"),
    }
    println!("{key}");
    Ok(())
}

/// The workspace of key `id` (`None`: an account-scoped key, or no such key).
fn key_workspace(accounts: &Accounts<'_>, id: Uuid) -> Result<Option<String>> {
    for ws in accounts.list_workspaces()? {
        if accounts.list_keys(Some(&ws.id))?.iter().any(|k| k.id == id) {
            return Ok(Some(ws.id));
        }
    }
    Ok(None)
}

/// Records a new workspace key in its workspace's audit trail (an account-scoped key
/// belongs to no workspace's), and says so when its scopes leave it no sandbox operation.
fn audit_created(accounts: &Accounts<'_>, store: &SqliteStore, key: &str) -> Result<()> {
    let principal = accounts
        .authenticate(key)?
        .context("the new key does not authenticate")?;
    if !principal.scopes_allow_sandboxes() {
        eprintln!(
            "note: this key's scopes lack {ALL_SCOPE}: no dialect allows it any sandbox operation"
        );
    }
    match principal.workspace {
        Some(ws) => {
            crate::audit::record_cli(store, &ws, "key.create", &principal.key_id.to_string())
        }
        None => Ok(()),
    }
}

/// The dialect names the `--inngest-env` and `--tenant` flags give a workspace alias in.
const INNGEST: &str = sandboxd_dialect_inngest::DIALECT;
const RUNZIVO: &str = "runzivo";

/// The key's workspace: an existing one (whose env and tenant must agree with the
/// flags) or a new one with id and name `name`.
fn workspace_for_key(accounts: &Accounts<'_>, name: &str, args: &CreateArgs) -> Result<Workspace> {
    let flags: Aliases = [(INNGEST, &args.inngest_env), (RUNZIVO, &args.tenant)]
        .into_iter()
        .filter_map(|(d, a)| Some((d.to_owned(), a.clone()?)))
        .collect();
    if let Some(ws) = find_workspace(accounts, name)? {
        if flags.iter().any(|(d, a)| ws.aliases.get(d) != Some(a)) {
            bail!(
                "workspace {} exists with inngest env {:?} and tenant {:?}",
                ws.id,
                ws.aliases.get(INNGEST),
                ws.aliases.get(RUNZIVO)
            );
        }
        return Ok(ws);
    }
    if name == DEFAULT_WORKSPACE && flags.is_empty() {
        return Ok(accounts.ensure_default_workspace()?);
    }
    let ws = accounts.create_workspace_with_id(name, name, flags)?;
    eprintln!("created workspace {}", ws.id);
    Ok(ws)
}

fn list(args: ListArgs) -> Result<()> {
    let store = args.dir.open()?;
    let accounts = Accounts::new(&store);
    let mut keys: Vec<ApiKeyInfo> = Vec::new();
    match &args.workspace {
        Some(name) => {
            let ws = find_workspace(&accounts, name)?
                .with_context(|| format!("no workspace {name:?}"))?;
            keys.extend(accounts.list_keys(Some(&ws.id))?);
        }
        None => {
            keys.extend(accounts.list_keys(None)?);
            for ws in accounts.list_workspaces()? {
                keys.extend(accounts.list_keys(Some(&ws.id))?);
            }
        }
    }
    println!("ID\tPREFIX\tWORKSPACE\tPERMISSIONS\tSCOPES\tCREATED\tREVOKED\tKIND");
    for k in keys {
        let kind = match (k.master, k.alias_of) {
            (true, None) => "master".to_owned(),
            (true, Some(of)) => format!("master-alias-of:{of}"),
            (false, None) => "key".to_owned(),
            (false, Some(of)) => format!("alias-of:{of}"),
        };
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{kind}",
            k.id,
            k.prefix,
            k.workspace.as_deref().unwrap_or("(account)"),
            k.permissions.join(","),
            k.scopes.join(","),
            k.created_at,
            k.revoked_at
                .map_or_else(|| "-".to_owned(), |t| t.to_string()),
        );
    }
    Ok(())
}
