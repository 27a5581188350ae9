//! The audit trail in SQLite: appended, read per workspace from a time on, pruned.

use super::codec::*;
use crate::records::AuditRecord;
use crate::StoreResult;
use rusqlite::{params, Connection};
use time::OffsetDateTime;

pub(super) fn insert(c: &Connection, r: &AuditRecord) -> StoreResult<()> {
    // Cached: every mutating operation appends one.
    c.prepare_cached(
        "INSERT INTO audit (at, workspace, key_id, request_id, action, target, outcome) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        ts(r.at),
        r.workspace,
        r.key_id.clone(),
        r.request_id,
        r.action,
        r.target,
        r.outcome
    ])?;
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
            key_id: r.get("key_id")?,
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

#[cfg(test)]
mod tests {
    use crate::{AuditRecord, SqliteStore, Store};
    use time::{Duration, OffsetDateTime};

    fn entry(ws: &str, action: &str, at: OffsetDateTime) -> AuditRecord {
        AuditRecord {
            at,
            workspace: ws.into(),
            key_id: Some(uuid::Uuid::new_v4().to_string()),
            request_id: Some("req-1".into()),
            action: action.into(),
            target: Some("t".into()),
            outcome: "ok".into(),
        }
    }

    #[test]
    fn read_per_workspace_since_oldest_first_and_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("db")).unwrap();
        let now = OffsetDateTime::now_utc();
        let old = entry("a", "sandbox.create", now - Duration::days(100));
        let new = entry("a", "sandbox.destroy", now);
        store.insert_audit(&new).unwrap();
        store.insert_audit(&old).unwrap();
        store
            .insert_audit(&entry("b", "sandbox.pause", now))
            .unwrap();
        let all = store
            .list_audit("a", OffsetDateTime::UNIX_EPOCH, 100)
            .unwrap();
        assert_eq!(all, [old.clone(), new.clone()]);
        let recent = store.list_audit("a", now - Duration::days(1), 100).unwrap();
        assert_eq!(recent, std::slice::from_ref(&new));
        assert_eq!(store.prune_audit(now - Duration::days(90)).unwrap(), 1);
        assert_eq!(
            store
                .list_audit("a", OffsetDateTime::UNIX_EPOCH, 100)
                .unwrap(),
            [new]
        );
        assert_eq!(
            store
                .list_audit("b", OffsetDateTime::UNIX_EPOCH, 100)
                .unwrap()
                .len(),
            1
        );
    }
}
