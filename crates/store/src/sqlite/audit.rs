//! The audit trail in SQLite: appended, read per workspace from a time on, pruned.

use super::codec::*;
use crate::records::AuditRecord;
use crate::StoreResult;
use rusqlite::{params, Connection};
use time::OffsetDateTime;

/// Most entries kept per workspace: past it the oldest go, so that one key's flood of
/// operations grows the database by at most this many rows (~30 MB).
pub const MAX_PER_WORKSPACE: u32 = 100_000;

/// How often (in appended rows) a workspace's trail is trimmed to its bound.
const TRIM_EVERY: i64 = 256;

pub(super) fn insert(c: &Connection, r: &AuditRecord) -> StoreResult<()> {
    insert_bounded(c, r, MAX_PER_WORKSPACE)
}

/// [`insert`], keeping at most `bound` entries of the record's workspace (trimmed every
/// [`TRIM_EVERY`] appends, so the trail may exceed it by that many for a while).
pub(super) fn insert_bounded(c: &Connection, r: &AuditRecord, bound: u32) -> StoreResult<()> {
    append(c, r)?;
    if c.last_insert_rowid() % TRIM_EVERY == 0 {
        c.prepare_cached(
            "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE workspace = ?1 \
             ORDER BY at DESC, seq DESC LIMIT -1 OFFSET ?2)",
        )?
        .execute(params![r.workspace, bound])?;
    }
    Ok(())
}

fn append(c: &Connection, r: &AuditRecord) -> StoreResult<()> {
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

    /// Regression (REVIEW13 #5): one key's flood of operations grew the trail, and the
    /// database, without bound; a workspace now keeps its newest entries only, and
    /// another workspace's are untouched.
    #[test]
    fn a_workspace_keeps_at_most_its_bound_of_newest_entries() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::sqlite::conns::open(&dir.path().join("db")).unwrap();
        let mut conn = conn;
        crate::sqlite::migrations::migrate(&mut conn).unwrap();
        let now = OffsetDateTime::now_utc();
        super::insert_bounded(&conn, &entry("other", "sandbox.create", now), 10).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for i in 0..1000 {
            let e = entry("flood", "sandbox.destroy", now + Duration::milliseconds(i));
            super::insert_bounded(&conn, &e, 10).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        let count = |ws: &str| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM audit WHERE workspace = ?1",
                [ws],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(
            count("flood") <= 10 + super::TRIM_EVERY,
            "{}",
            count("flood")
        );
        assert_eq!(count("other"), 1);
        let newest: i64 = conn
            .query_row(
                "SELECT max(at) FROM audit WHERE workspace = 'flood'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let want = super::ts(now + Duration::milliseconds(999));
        assert_eq!(newest, want, "the newest entries are kept");
    }
}
