//! The audit trail in SQLite: appended, read per workspace from a time on, pruned.

use super::codec::*;
use crate::records::AuditRecord;
use crate::StoreResult;
use rusqlite::{params, Connection};
use time::OffsetDateTime;

pub(super) fn insert(c: &Connection, r: &AuditRecord) -> StoreResult<()> {
    c.execute(
        "INSERT INTO audit (at, workspace, key_id, request_id, action, target, outcome) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            ts(r.at),
            r.workspace,
            r.key_id.map(|k| k.to_string()),
            r.request_id,
            r.action,
            r.target,
            r.outcome
        ],
    )?;
    Ok(())
}

pub(super) fn list(
    c: &Connection,
    ws: &str,
    since: OffsetDateTime,
    limit: u32,
) -> StoreResult<Vec<AuditRecord>> {
    let mut stmt = c.prepare(
        "SELECT at, workspace, key_id, request_id, action, target, outcome FROM audit \
         WHERE workspace = ?1 AND at >= ?2 ORDER BY at, seq LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![ws, ts(since), limit], |r| {
        Ok(AuditRecord {
            at: get_ts(r, "at")?,
            workspace: r.get("workspace")?,
            key_id: get_opt_uuid(r, "key_id")?,
            request_id: r.get("request_id")?,
            action: r.get("action")?,
            target: r.get("target")?,
            outcome: r.get("outcome")?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn prune(c: &Connection, before: OffsetDateTime) -> StoreResult<u64> {
    Ok(c.execute("DELETE FROM audit WHERE at < ?1", [ts(before)])? as u64)
}
