//! Workspaces and API keys in SQLite.

use super::codec::*;
use super::unique_violation;
use crate::records::{AliasKind, ApiKeyRecord, WorkspaceRecord};
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension, Row};
use time::OffsetDateTime;
use uuid::Uuid;

/// The workspace columns read (its aliases included).
fn ws_cols() -> String {
    format!(
        "id, name, created_at, {}",
        super::aliases::column(AliasKind::Workspace, "workspaces")
    )
}
const KEY_COLS: &str =
    "id, key_hash, prefix, workspace, permissions, scopes, created_at, revoked_at, master, alias_of";

fn workspace_row(r: &Row) -> rusqlite::Result<WorkspaceRecord> {
    Ok(WorkspaceRecord {
        id: r.get("id")?,
        name: r.get("name")?,
        aliases: get_json(r, "aliases")?,
        created_at: get_ts(r, "created_at")?,
    })
}

fn key_row(r: &Row) -> rusqlite::Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: get_uuid(r, "id")?,
        key_hash: r.get("key_hash")?,
        prefix: r.get("prefix")?,
        workspace: r.get("workspace")?,
        permissions: get_json(r, "permissions")?,
        scopes: get_json(r, "scopes")?,
        created_at: get_ts(r, "created_at")?,
        revoked_at: get_opt_ts(r, "revoked_at")?,
        master: r.get("master")?,
        alias_of: get_opt_uuid(r, "alias_of")?,
    })
}

pub(super) fn create_workspace(c: &mut Connection, ws: &WorkspaceRecord) -> StoreResult<()> {
    let tx = c.transaction()?;
    tx.execute(
        "INSERT INTO workspaces (id, name, created_at) VALUES (?1, ?2, ?3)",
        params![ws.id, ws.name, ts(ws.created_at)],
    )
    .map_err(|e| unique_violation(e, || format!("workspace {:?}", ws.id)))?;
    super::aliases::insert(&tx, AliasKind::Workspace, &ws.id, &ws.aliases)?;
    tx.commit()?;
    Ok(())
}

pub(super) fn workspace(c: &Connection, id: &str) -> StoreResult<Option<WorkspaceRecord>> {
    let sql = format!("SELECT {} FROM workspaces WHERE id = ?1", ws_cols());
    Ok(c.prepare_cached(&sql)?
        .query_row([id], workspace_row)
        .optional()?)
}

pub(super) fn workspace_by_alias(
    c: &Connection,
    dialect: &str,
    alias: &str,
) -> StoreResult<Option<WorkspaceRecord>> {
    let sql = format!(
        "SELECT {} FROM workspaces WHERE id = (SELECT target FROM aliases \
         WHERE dialect = ?1 AND kind = 'workspace' AND alias = ?2)",
        ws_cols()
    );
    Ok(c.prepare_cached(&sql)?
        .query_row([dialect, alias], workspace_row)
        .optional()?)
}

pub(super) fn list_workspaces(c: &Connection) -> StoreResult<Vec<WorkspaceRecord>> {
    let mut st = c.prepare(&format!(
        "SELECT {} FROM workspaces ORDER BY created_at, id",
        ws_cols()
    ))?;
    let rows = st.query_map([], workspace_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn insert_key(c: &Connection, k: &ApiKeyRecord) -> StoreResult<()> {
    c.execute(
        &format!(
            "INSERT INTO api_keys ({KEY_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        ),
        params![
            k.id.to_string(),
            k.key_hash,
            k.prefix,
            k.workspace,
            json(&k.permissions),
            json(&k.scopes),
            ts(k.created_at),
            opt_ts(k.revoked_at),
            k.master,
            k.alias_of.map(|id| id.to_string())
        ],
    )
    .map_err(|e| unique_violation(e, || format!("api key {}", k.prefix)))?;
    Ok(())
}

pub(super) fn key_by_hash(c: &Connection, hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
    // Cached: every authenticated request runs it.
    let sql = format!("SELECT {KEY_COLS} FROM api_keys WHERE key_hash = ?1");
    Ok(c.prepare_cached(&sql)?
        .query_row([hash], key_row)
        .optional()?)
}

pub(super) fn key_by_id(c: &Connection, id: Uuid) -> StoreResult<Option<ApiKeyRecord>> {
    // Cached: the server re-reads the keys of its open streams every second.
    let sql = format!("SELECT {KEY_COLS} FROM api_keys WHERE id = ?1");
    Ok(c.prepare_cached(&sql)?
        .query_row([id.to_string()], key_row)
        .optional()?)
}

pub(super) fn list_keys(c: &Connection, ws: Option<&str>) -> StoreResult<Vec<ApiKeyRecord>> {
    let sql =
        format!("SELECT {KEY_COLS} FROM api_keys WHERE workspace IS ?1 ORDER BY created_at, id");
    let mut st = c.prepare(&sql)?;
    let rows = st.query_map([ws], key_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn revoke_key(c: &Connection, id: Uuid, at: OffsetDateTime) -> StoreResult<bool> {
    let n = c.execute(
        "UPDATE api_keys SET revoked_at = ?2 WHERE (id = ?1 OR alias_of = ?1) AND revoked_at IS NULL",
        params![id.to_string(), ts(at)],
    )?;
    Ok(n > 0)
}

pub(super) fn reinstate_key(c: &Connection, id: Uuid) -> StoreResult<bool> {
    let n = c.execute(
        "UPDATE api_keys SET revoked_at = NULL WHERE id = ?1 AND revoked_at IS NOT NULL",
        [id.to_string()],
    )?;
    Ok(n > 0)
}
