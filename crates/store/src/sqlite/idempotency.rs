//! Remembered answers to idempotent requests in SQLite.

use super::codec::*;
use crate::records::IdempotencyRecord;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

/// [`put`] within a workspace's bounds, in one transaction: past `max_records` the
/// workspace's oldest records go first; an answer that would take its records past
/// `max_bytes` is kept without its body, as status 0. `None`: the key was taken;
/// otherwise whether the body was kept.
pub(super) fn put_bounded(
    c: &mut Connection,
    r: &IdempotencyRecord,
    max_records: u64,
    max_bytes: u64,
) -> StoreResult<Option<bool>> {
    let tx = c.transaction()?;
    let (count, bytes): (u64, u64) = tx.query_row(
        "SELECT count(*), coalesce(sum(length(body)), 0) FROM idempotency WHERE workspace = ?1",
        [&r.workspace],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let mut bytes = bytes;
    if count >= max_records {
        let over = count + 1 - max_records.max(1);
        let freed: u64 = tx.query_row(
            "SELECT coalesce(sum(length(body)), 0) FROM (SELECT body FROM idempotency \
             WHERE workspace = ?1 ORDER BY created_at, key LIMIT ?2)",
            params![r.workspace, over],
            |row| row.get(0),
        )?;
        tx.execute(
            "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency \
             WHERE workspace = ?1 ORDER BY created_at, key LIMIT ?2)",
            params![r.workspace, over],
        )?;
        bytes = bytes.saturating_sub(freed);
    }
    let whole = bytes.saturating_add(r.body.len() as u64) <= max_bytes;
    let kept = match whole {
        true => r.clone(),
        false => IdempotencyRecord {
            status: 0,
            body: Vec::new(),
            ..r.clone()
        },
    };
    let inserted = put(&tx, &kept)?;
    tx.commit()?;
    Ok(inserted.then_some(whole))
}

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
