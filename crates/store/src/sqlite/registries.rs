//! Registry credentials in SQLite: the password or token sealed like secrets, bound to
//! its registry and user name.

use super::codec::*;
use crate::crypto::SecretBox;
use crate::records::RegistryCredential;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

/// Associated data binding a sealed value to its registry and user name.
fn aad(registry: &str, username: Option<&str>) -> Vec<u8> {
    format!("registry\0{registry}\0{}", username.unwrap_or("")).into_bytes()
}

pub(super) fn set(c: &Connection, b: &SecretBox, cred: &RegistryCredential) -> StoreResult<()> {
    let sealed = b.seal(&aad(&cred.registry, cred.username.as_deref()), &cred.secret)?;
    c.execute(
        "INSERT INTO registry_credentials (registry, username, sealed, updated_at) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (registry) DO UPDATE \
         SET username = ?2, sealed = ?3, updated_at = ?4",
        params![
            cred.registry,
            cred.username,
            sealed,
            ts(OffsetDateTime::now_utc())
        ],
    )?;
    Ok(())
}

pub(super) fn get(
    c: &Connection,
    b: &SecretBox,
    registry: &str,
) -> StoreResult<Option<RegistryCredential>> {
    let row: Option<(Option<String>, Vec<u8>)> = c
        .query_row(
            "SELECT username, sealed FROM registry_credentials WHERE registry = ?1",
            params![registry],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((username, sealed)) = row else {
        return Ok(None);
    };
    let secret = b.open(&aad(registry, username.as_deref()), &sealed)?;
    Ok(Some(RegistryCredential {
        registry: registry.to_owned(),
        username,
        secret,
    }))
}

pub(super) fn list(c: &Connection) -> StoreResult<Vec<(String, Option<String>)>> {
    let mut st =
        c.prepare("SELECT registry, username FROM registry_credentials ORDER BY registry")?;
    let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn delete(c: &Connection, registry: &str) -> StoreResult<bool> {
    let n = c.execute(
        "DELETE FROM registry_credentials WHERE registry = ?1",
        params![registry],
    )?;
    Ok(n > 0)
}
