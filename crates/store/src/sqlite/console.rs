//! One-time web console sign-in codes in SQLite.

use super::codec::*;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use time::OffsetDateTime;

pub(super) fn insert(
    c: &Connection,
    code_hash: &str,
    workspace: &str,
    expires_at: OffsetDateTime,
    now: OffsetDateTime,
) -> StoreResult<()> {
    c.execute("DELETE FROM console_codes WHERE expires_at < ?1", [ts(now)])?;
    c.execute(
        "INSERT INTO console_codes (code_hash, workspace, expires_at) VALUES (?1, ?2, ?3)",
        params![code_hash, workspace, ts(expires_at)],
    )?;
    Ok(())
}

pub(super) fn redeem(
    c: &Connection,
    code_hash: &str,
    now: OffsetDateTime,
) -> StoreResult<Option<String>> {
    Ok(c.query_row(
        "UPDATE console_codes SET used_at = ?2 \
             WHERE code_hash = ?1 AND used_at IS NULL AND expires_at > ?2 RETURNING workspace",
        params![code_hash, ts(now)],
        |r| r.get(0),
    )
    .optional()?)
}

#[cfg(test)]
mod tests {
    use crate::{SqliteStore, Store, WorkspaceRecord};
    use time::{Duration, OffsetDateTime};

    #[test]
    fn a_code_is_spent_once_and_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("db.sqlite")).unwrap();
        let now = OffsetDateTime::now_utc();
        store
            .create_workspace(&WorkspaceRecord {
                id: "ws".into(),
                name: "ws".into(),
                aliases: Default::default(),
                created_at: now,
            })
            .unwrap();
        store
            .insert_console_code("a", "ws", now + Duration::minutes(10), now)
            .unwrap();
        store
            .insert_console_code("old", "ws", now + Duration::seconds(1), now)
            .unwrap();
        assert_eq!(
            store.redeem_console_code("a", now).unwrap().as_deref(),
            Some("ws")
        );
        assert_eq!(store.redeem_console_code("a", now).unwrap(), None, "reuse");
        assert_eq!(store.redeem_console_code("forged", now).unwrap(), None);
        let later = now + Duration::seconds(2);
        assert_eq!(
            store.redeem_console_code("old", later).unwrap(),
            None,
            "expired"
        );
    }
}
