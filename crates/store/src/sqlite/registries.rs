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

#[cfg(test)]
mod tests {
    use crate::{RegistryCredential, SqliteStore, Store};

    #[test]
    fn credentials_round_trip_sealed_and_bound_to_their_user() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("db.sqlite")).unwrap();
        let cred = RegistryCredential {
            registry: "reg.lan:5000".into(),
            username: Some("alice".into()),
            secret: b"hunter2-in-clear".to_vec(),
        };
        store.set_registry_credential(&cred).unwrap();
        assert_eq!(
            store.get_registry_credential("reg.lan:5000").unwrap(),
            Some(cred.clone())
        );
        assert_eq!(store.get_registry_credential("other").unwrap(), None);
        assert_eq!(
            store.list_registry_credentials().unwrap(),
            vec![("reg.lan:5000".to_owned(), Some("alice".to_owned()))]
        );
        let sealed: Vec<u8> = store
            .conns
            .read()
            .unwrap()
            .query_row("SELECT sealed FROM registry_credentials", [], |r| r.get(0))
            .unwrap();
        assert!(!sealed
            .windows(cred.secret.len())
            .any(|w| w == cred.secret.as_slice()));
        // Another user name in the row no longer opens the sealed secret.
        store
            .conns
            .write_with(|c| {
                c.execute("UPDATE registry_credentials SET username = 'mallory'", [])?;
                Ok(())
            })
            .unwrap();
        assert!(store.get_registry_credential("reg.lan:5000").is_err());
        // A token (no user) replaces it; delete forgets it.
        let token = RegistryCredential {
            registry: "reg.lan:5000".into(),
            username: None,
            secret: b"tok".to_vec(),
        };
        store.set_registry_credential(&token).unwrap();
        assert_eq!(
            store.get_registry_credential("reg.lan:5000").unwrap(),
            Some(token)
        );
        assert!(store.delete_registry_credential("reg.lan:5000").unwrap());
        assert!(!store.delete_registry_credential("reg.lan:5000").unwrap());
    }
}
