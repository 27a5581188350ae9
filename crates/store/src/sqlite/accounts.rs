//! Workspaces and API keys in SQLite.

use super::codec::*;
use super::unique_violation;
use crate::records::{ApiKeyRecord, WorkspaceRecord};
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension, Row};
use time::OffsetDateTime;
use uuid::Uuid;

const WS_COLS: &str = "id, name, inngest_env, runzivo_tenant_id, created_at";
const KEY_COLS: &str =
    "id, key_hash, prefix, workspace, permissions, scopes, created_at, revoked_at, master, alias_of";

fn workspace_row(r: &Row) -> rusqlite::Result<WorkspaceRecord> {
    Ok(WorkspaceRecord {
        id: r.get("id")?,
        name: r.get("name")?,
        inngest_env: r.get("inngest_env")?,
        runzivo_tenant_id: r.get("runzivo_tenant_id")?,
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

pub(super) fn create_workspace(c: &Connection, ws: &WorkspaceRecord) -> StoreResult<()> {
    c.execute(
        &format!("INSERT INTO workspaces ({WS_COLS}) VALUES (?1, ?2, ?3, ?4, ?5)"),
        params![
            ws.id,
            ws.name,
            ws.inngest_env,
            ws.runzivo_tenant_id,
            ts(ws.created_at)
        ],
    )
    .map_err(|e| unique_violation(e, || format!("workspace {:?}", ws.id)))?;
    Ok(())
}

/// Looks a workspace up by one column (`id`, `inngest_env`, `runzivo_tenant_id`).
pub(super) fn workspace_by(
    c: &Connection,
    column: &'static str,
    value: &str,
) -> StoreResult<Option<WorkspaceRecord>> {
    let sql = format!("SELECT {WS_COLS} FROM workspaces WHERE {column} = ?1");
    Ok(c.query_row(&sql, [value], workspace_row).optional()?)
}

pub(super) fn list_workspaces(c: &Connection) -> StoreResult<Vec<WorkspaceRecord>> {
    let mut st = c.prepare(&format!(
        "SELECT {WS_COLS} FROM workspaces ORDER BY created_at, id"
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
