//! Snapshot rows and their layer lists in SQLite.

use super::codec::*;
use super::unique_violation;
use crate::records::{Keyset, SnapshotRecord};
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension, Row};
use uuid::Uuid;

const COLS: &str = "id, workspace, name, source_sandbox_id, image, digest, size_bytes, vcpu, \
    memory_mb, created_at, expires_at, disk_mb, memory_image";

fn row(r: &Row) -> rusqlite::Result<SnapshotRecord> {
    let size: i64 = r.get("size_bytes")?;
    Ok(SnapshotRecord {
        id: get_uuid(r, "id")?,
        workspace: r.get("workspace")?,
        name: r.get("name")?,
        source_sandbox_id: get_uuid(r, "source_sandbox_id")?,
        image: r.get("image")?,
        layers: Vec::new(),
        digest: r.get("digest")?,
        size_bytes: size.max(0) as u64,
        vcpu: r.get("vcpu")?,
        memory_mb: r.get("memory_mb")?,
        created_at: get_ts(r, "created_at")?,
        expires_at: get_opt_ts(r, "expires_at")?,
        disk_mb: r.get("disk_mb")?,
        memory_image: r.get("memory_image")?,
    })
}

fn with_layers(c: &Connection, mut s: SnapshotRecord) -> StoreResult<SnapshotRecord> {
    let mut st = c.prepare_cached(
        "SELECT digest FROM snapshot_layers WHERE snapshot_id = ?1 ORDER BY position",
    )?;
    let rows = st.query_map([s.id.to_string()], |r| r.get::<_, String>(0))?;
    s.layers = rows.collect::<Result<_, _>>()?;
    Ok(s)
}

pub(super) fn insert(c: &mut Connection, s: &SnapshotRecord) -> StoreResult<()> {
    let tx = c.transaction()?;
    tx.execute(
        &format!(
            "INSERT INTO snapshots ({COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        ),
        params![
            s.id.to_string(),
            s.workspace,
            s.name,
            s.source_sandbox_id.to_string(),
            s.image,
            s.digest,
            i64::try_from(s.size_bytes).unwrap_or(i64::MAX),
            s.vcpu,
            s.memory_mb,
            ts(s.created_at),
            opt_ts(s.expires_at),
            s.disk_mb,
            s.memory_image
        ],
    )
    .map_err(|e| unique_violation(e, || format!("snapshot {}", s.id)))?;
    for (pos, digest) in s.layers.iter().enumerate() {
        tx.execute(
            "INSERT INTO snapshot_layers (snapshot_id, position, digest) VALUES (?1, ?2, ?3)",
            params![s.id.to_string(), pos as i64, digest],
        )?;
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn get(c: &Connection, id: Uuid) -> StoreResult<Option<SnapshotRecord>> {
    let sql = format!("SELECT {COLS} FROM snapshots WHERE id = ?1");
    match c.query_row(&sql, [id.to_string()], row).optional()? {
        Some(s) => Ok(Some(with_layers(c, s)?)),
        None => Ok(None),
    }
}

pub(super) fn list(
    c: &Connection,
    ws: &str,
    name: Option<&str>,
    limit: u32,
    after: Option<Keyset>,
) -> StoreResult<Vec<SnapshotRecord>> {
    let (at, id) = match after {
        Some(k) => (ts(k.created_at), k.id.to_string()),
        None => (i64::MAX, "g".to_string()),
    };
    let sql = format!(
        "SELECT {COLS} FROM snapshots WHERE workspace = ?1 AND (?2 IS NULL OR name = ?2) \
         AND (created_at < ?3 OR (created_at = ?3 AND id < ?4)) \
         ORDER BY created_at DESC, id DESC LIMIT ?5"
    );
    let mut st = c.prepare(&sql)?;
    let rows = st.query_map(params![ws, name, at, id, limit], row)?;
    let found: Vec<SnapshotRecord> = rows.collect::<Result<_, _>>()?;
    found.into_iter().map(|s| with_layers(c, s)).collect()
}

pub(super) fn delete(c: &Connection, id: Uuid) -> StoreResult<bool> {
    Ok(c.execute("DELETE FROM snapshots WHERE id = ?1", [id.to_string()])? > 0)
}

pub(super) fn memory_images(c: &Connection) -> StoreResult<Vec<String>> {
    let mut stmt =
        c.prepare("SELECT memory_image FROM snapshots WHERE memory_image IS NOT NULL")?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn using_layer(c: &Connection, digest: &str) -> StoreResult<u64> {
    let n: i64 = c.query_row(
        "SELECT COUNT(DISTINCT snapshot_id) FROM snapshot_layers WHERE digest = ?1",
        [digest],
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}
