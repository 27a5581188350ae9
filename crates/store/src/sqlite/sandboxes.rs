//! Sandbox rows in SQLite, with keyset pagination by (created_at DESC, id DESC).

use super::codec::*;
use super::unique_violation;
use crate::error::StoreError;
use crate::records::{AliasKind, Keyset, SandboxFilter, SandboxRecord, WorkspaceUsage};
use crate::StoreResult;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};
use time::OffsetDateTime;
use uuid::Uuid;

/// The columns written; a read adds the aliases (see [`cols`]).
const COLS: &str = "id, workspace, name, status, image, vcpu, memory_mb, created_at, \
    started_at, ended_at, expires_at, end_reason, error, snapshot_id, environment, secrets, \
    metadata, extra_layers, handle, id_slot, disk_mb, attributes, isolation, auto_pause, auto_paused_at, \
    network";

/// The columns read: every written one plus the sandbox's aliases.
fn cols() -> String {
    format!(
        "{COLS}, {}",
        super::aliases::column(AliasKind::Sandbox, "sandboxes")
    )
}

fn row(r: &Row) -> rusqlite::Result<SandboxRecord> {
    let handle: Option<String> = r.get("handle")?;
    let handle = opt_json_value(handle)?;
    let network = opt_json_value(r.get("network")?)?;
    Ok(SandboxRecord {
        id: get_uuid(r, "id")?,
        workspace: r.get("workspace")?,
        name: r.get("name")?,
        status: r.get("status")?,
        image: r.get("image")?,
        vcpu: r.get("vcpu")?,
        memory_mb: r.get("memory_mb")?,
        created_at: get_ts(r, "created_at")?,
        started_at: get_opt_ts(r, "started_at")?,
        ended_at: get_opt_ts(r, "ended_at")?,
        expires_at: get_opt_ts(r, "expires_at")?,
        auto_pause: r.get("auto_pause")?,
        auto_paused_at: get_opt_ts(r, "auto_paused_at")?,
        end_reason: r.get("end_reason")?,
        error: r.get("error")?,
        snapshot_id: get_opt_uuid(r, "snapshot_id")?,
        environment: get_json(r, "environment")?,
        secrets: get_json(r, "secrets")?,
        metadata: get_json(r, "metadata")?,
        extra_layers: get_json(r, "extra_layers")?,
        handle,
        id_slot: r.get("id_slot")?,
        disk_mb: r.get("disk_mb")?,
        aliases: get_json(r, "aliases")?,
        attributes: get_json(r, "attributes")?,
        isolation: r.get("isolation")?,
        network,
    })
}

/// A nullable JSON text column's value.
fn opt_json_value(text: Option<String>) -> rusqlite::Result<Option<serde_json::Value>> {
    match text {
        Some(s) => Ok(Some(serde_json::from_str(&s).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
        })?)),
        None => Ok(None),
    }
}

/// Writes every column with `verb` (`INSERT` or `REPLACE` semantics decided by caller SQL).
/// The statement is cached: every create and transition runs it.
fn write(c: &Connection, sql: &str, s: &SandboxRecord) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(params![
        s.id.to_string(),
        s.workspace,
        s.name,
        s.status,
        s.image,
        s.vcpu,
        s.memory_mb,
        ts(s.created_at),
        opt_ts(s.started_at),
        opt_ts(s.ended_at),
        opt_ts(s.expires_at),
        s.end_reason,
        s.error,
        s.snapshot_id.map(|u| u.to_string()),
        json(&s.environment),
        json(&s.secrets),
        json(&s.metadata),
        json(&s.extra_layers),
        s.handle.as_ref().map(json),
        s.id_slot,
        s.disk_mb,
        json(&s.attributes),
        s.isolation,
        s.auto_pause,
        opt_ts(s.auto_paused_at),
        s.network.as_ref().map(json),
    ])
}

pub(super) fn insert(c: &mut Connection, s: &SandboxRecord) -> StoreResult<()> {
    let sql = format!(
        "INSERT INTO sandboxes ({COLS}) VALUES \
         (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
         ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)"
    );
    let tx = c.transaction()?;
    write(&tx, &sql, s).map_err(|e| unique_violation(e, || format!("sandbox {}", s.id)))?;
    super::aliases::insert(&tx, AliasKind::Sandbox, &s.id.to_string(), &s.aliases)?;
    tx.commit()?;
    Ok(())
}

pub(super) fn update(c: &Connection, s: &SandboxRecord) -> StoreResult<()> {
    let sql = "UPDATE sandboxes SET workspace = ?2, name = ?3, status = ?4, image = ?5, \
        vcpu = ?6, memory_mb = ?7, created_at = ?8, started_at = ?9, ended_at = ?10, \
        expires_at = ?11, end_reason = ?12, error = ?13, snapshot_id = ?14, environment = ?15, \
        secrets = ?16, metadata = ?17, extra_layers = ?18, handle = ?19, id_slot = ?20, \
        disk_mb = ?21, attributes = ?22, isolation = ?23, auto_pause = ?24, auto_paused_at = ?25, \
        network = ?26 WHERE id = ?1";
    match write(c, sql, s)? {
        0 => Err(StoreError::NotFound(format!("sandbox {}", s.id))),
        _ => Ok(()),
    }
}

pub(super) fn get(c: &Connection, id: Uuid) -> StoreResult<Option<SandboxRecord>> {
    // Cached: every operation on a sandbox runs it.
    let sql = format!("SELECT {} FROM sandboxes WHERE id = ?1", cols());
    Ok(c.prepare_cached(&sql)?
        .query_row([id.to_string()], row)
        .optional()?)
}

pub(super) fn by_alias(
    c: &Connection,
    dialect: &str,
    alias: &str,
) -> StoreResult<Option<SandboxRecord>> {
    let sql = format!(
        "SELECT {} FROM sandboxes WHERE id = (SELECT target FROM aliases \
         WHERE dialect = ?1 AND kind = 'sandbox' AND alias = ?2)",
        cols()
    );
    Ok(c.prepare_cached(&sql)?
        .query_row([dialect, alias], row)
        .optional()?)
}

pub(super) fn list(
    c: &Connection,
    ws: &str,
    filter: SandboxFilter<'_>,
    limit: u32,
    after: Option<Keyset>,
) -> StoreResult<Vec<SandboxRecord>> {
    let (at, id) = match after {
        Some(k) => (ts(k.created_at), k.id.to_string()),
        None => (i64::MAX, "g".to_string()), // sorts after every hex uuid
    };
    // `?5 IS NULL`: no filter; else the sandbox has an alias in that dialect.
    let sql = format!(
        "SELECT {} FROM sandboxes WHERE workspace = ?1 \
         AND (created_at < ?2 OR (created_at = ?2 AND id < ?3)) \
         AND (?5 IS NULL OR EXISTS (SELECT 1 FROM aliases f WHERE f.kind = 'sandbox' \
              AND f.target = sandboxes.id AND f.dialect = ?5)) \
         ORDER BY created_at DESC, id DESC LIMIT ?4",
        cols()
    );
    let mut st = c.prepare(&sql)?;
    let rows = st.query_map(params![ws, at, id, limit, filter.aliased_in], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn ended(
    c: &Connection,
    ws: &str,
    since: OffsetDateTime,
    limit: u32,
    after: Option<Keyset>,
) -> StoreResult<Vec<SandboxRecord>> {
    let (at, id) = match after {
        Some(k) => (ts(k.created_at), k.id.to_string()),
        None => (i64::MAX, "g".to_string()),
    };
    let sql = format!(
        "SELECT {} FROM sandboxes WHERE workspace = ?1 AND ended_at IS NOT NULL \
         AND ended_at >= ?2 AND (ended_at < ?3 OR (ended_at = ?3 AND id < ?4)) \
         ORDER BY ended_at DESC, id DESC LIMIT ?5",
        cols()
    );
    let mut st = c.prepare(&sql)?;
    let rows = st.query_map(params![ws, ts(since), at, id, limit], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn in_status(c: &Connection, statuses: &[&str]) -> StoreResult<Vec<SandboxRecord>> {
    if statuses.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; statuses.len()].join(", ");
    let sql = format!(
        "SELECT {} FROM sandboxes WHERE status IN ({marks}) ORDER BY created_at",
        cols()
    );
    let mut st = c.prepare_cached(&sql)?;
    let rows = st.query_map(params_from_iter(statuses), row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn usage_in_status(
    c: &Connection,
    statuses: &[&str],
) -> StoreResult<Vec<WorkspaceUsage>> {
    if statuses.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; statuses.len()].join(", ");
    let sql = format!(
        "SELECT workspace, COUNT(*), SUM(vcpu), SUM(memory_mb), COALESCE(SUM(disk_mb), 0), \
         COUNT(*) - COUNT(disk_mb) FROM sandboxes WHERE status IN ({marks}) GROUP BY workspace"
    );
    let mut st = c.prepare_cached(&sql)?;
    let rows = st.query_map(params_from_iter(statuses), |r| {
        let count = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
        Ok(WorkspaceUsage {
            workspace: r.get(0)?,
            sandboxes: count(1)?,
            vcpu: count(2)?,
            memory_mb: count(3)?,
            disk_mb: count(4)?,
            default_disk: count(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn named(c: &Connection, ws: &str, name: &str) -> StoreResult<Vec<SandboxRecord>> {
    let sql = format!(
        "SELECT {} FROM sandboxes WHERE workspace = ?1 AND name = ?2 ORDER BY created_at DESC",
        cols()
    );
    // Cached: every named create runs it.
    let mut st = c.prepare_cached(&sql)?;
    let rows = st.query_map(params![ws, name], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Removes, with their aliases, at most `limit` records of sandboxes that ended before
/// `before`: TERMINATED ones, and FAILED ones unless their error starts with
/// `pending_teardown` (a teardown that failed and that a later destroy retries) and no
/// later destroy removed them. Returns how many.
pub(super) fn prune_ended(
    c: &mut Connection,
    before: OffsetDateTime,
    pending_teardown: &str,
    limit: u32,
) -> StoreResult<u64> {
    let tx = c.transaction()?;
    let ids: Vec<String> = {
        let mut stmt = tx.prepare(
            "SELECT id FROM sandboxes WHERE ended_at IS NOT NULL AND ended_at < ?1 \
             AND (status = 'TERMINATED' OR (status = 'FAILED' AND (error IS NULL \
             OR substr(error, 1, length(?2)) <> ?2 \
             OR error LIKE '%(removed by a later destroy)'))) \
             ORDER BY ended_at LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![ts(before), pending_teardown, limit], |r| {
            r.get::<_, String>(0)
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for id in &ids {
        tx.execute(
            "DELETE FROM aliases WHERE kind = ?1 AND target = ?2",
            params![AliasKind::Sandbox.as_str(), id],
        )?;
        tx.execute("DELETE FROM sandboxes WHERE id = ?1", [id])?;
    }
    tx.commit()?;
    Ok(ids.len() as u64)
}
