//! Remembered answers to idempotent requests in SQLite.

use super::codec::*;
use crate::records::IdempotencyRecord;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

pub(super) fn put(c: &Connection, r: &IdempotencyRecord) -> StoreResult<bool> {
    let n = c.execute(
        "INSERT INTO idempotency (workspace, key, request_hash, status, body, headers, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (workspace, key) DO NOTHING",
        params![
            r.workspace,
            r.key,
            r.request_hash,
            r.status,
            r.body,
            json(&r.headers),
            ts(r.created_at)
        ],
    )?;
    Ok(n > 0)
}

pub(super) fn get(c: &Connection, ws: &str, key: &str) -> StoreResult<Option<IdempotencyRecord>> {
    Ok(c.query_row(
        "SELECT workspace, key, request_hash, status, body, headers, created_at \
         FROM idempotency WHERE workspace = ?1 AND key = ?2",
        params![ws, key],
        |r| {
            Ok(IdempotencyRecord {
                workspace: r.get("workspace")?,
                key: r.get("key")?,
                request_hash: r.get("request_hash")?,
                status: r.get("status")?,
                body: r.get("body")?,
                headers: get_json(r, "headers")?,
                created_at: get_ts(r, "created_at")?,
            })
        },
    )
    .optional()?)
}

pub(super) fn prune(c: &Connection, before: OffsetDateTime) -> StoreResult<u64> {
    Ok(c.execute(
        "DELETE FROM idempotency WHERE created_at < ?1",
        [ts(before)],
    )? as u64)
}
