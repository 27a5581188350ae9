//! Encrypted workspace secrets in SQLite.

use super::codec::*;
use crate::crypto::SecretBox;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

/// Associated data binding a sealed value to its workspace and name.
fn aad(ws: &str, name: &str) -> Vec<u8> {
    format!("{ws}\0{name}").into_bytes()
}

pub(super) fn set(
    c: &Connection,
    b: &SecretBox,
    ws: &str,
    name: &str,
    v: &[u8],
) -> StoreResult<()> {
    let sealed = b.seal(&aad(ws, name), v)?;
    c.execute(
        "INSERT INTO secrets (workspace, name, sealed, updated_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (workspace, name) DO UPDATE SET sealed = ?3, updated_at = ?4",
        params![ws, name, sealed, ts(OffsetDateTime::now_utc())],
    )?;
    Ok(())
}

pub(super) fn get(
    c: &Connection,
    b: &SecretBox,
    ws: &str,
    name: &str,
) -> StoreResult<Option<Vec<u8>>> {
    let sealed: Option<Vec<u8>> = c
        .query_row(
            "SELECT sealed FROM secrets WHERE workspace = ?1 AND name = ?2",
            params![ws, name],
            |r| r.get(0),
        )
        .optional()?;
    sealed.map(|s| b.open(&aad(ws, name), &s)).transpose()
}

pub(super) fn names(c: &Connection, ws: &str) -> StoreResult<Vec<String>> {
    let mut st = c.prepare("SELECT name FROM secrets WHERE workspace = ?1 ORDER BY name")?;
    let rows = st.query_map([ws], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn delete(c: &Connection, ws: &str, name: &str) -> StoreResult<bool> {
    let n = c.execute(
        "DELETE FROM secrets WHERE workspace = ?1 AND name = ?2",
        params![ws, name],
    )?;
    Ok(n > 0)
}
