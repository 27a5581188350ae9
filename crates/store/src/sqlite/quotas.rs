//! Per-workspace quota overrides in SQLite (a NULL limit keeps the server's default).

use super::codec::*;
use crate::records::QuotaOverrideRecord;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};

pub(super) fn set(c: &Connection, q: &QuotaOverrideRecord) -> StoreResult<()> {
    c.execute(
        "INSERT INTO workspace_quotas (workspace, max_sandboxes, max_vcpu, max_memory_mb, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (workspace) DO UPDATE SET \
         max_sandboxes = ?2, max_vcpu = ?3, max_memory_mb = ?4, updated_at = ?5",
        params![
            q.workspace,
            q.max_sandboxes,
            q.max_vcpu,
            q.max_memory_mb.map(|m| m as i64),
            ts(q.updated_at)
        ],
    )?;
    Ok(())
}

pub(super) fn get(c: &Connection, ws: &str) -> StoreResult<Option<QuotaOverrideRecord>> {
    // Cached: every create reads it.
    let rec = c
        .prepare_cached(
            "SELECT workspace, max_sandboxes, max_vcpu, max_memory_mb, updated_at \
             FROM workspace_quotas WHERE workspace = ?1",
        )?
        .query_row([ws], |r| {
            Ok(QuotaOverrideRecord {
                workspace: r.get("workspace")?,
                max_sandboxes: r.get("max_sandboxes")?,
                max_vcpu: r.get("max_vcpu")?,
                max_memory_mb: r.get::<_, Option<i64>>("max_memory_mb")?.map(|m| m as u64),
                updated_at: get_ts(r, "updated_at")?,
            })
        })
        .optional()?;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::OffsetDateTime;

    #[test]
    fn set_replaces_and_get_reads_per_workspace() {
        let mut conn = Connection::open_in_memory().expect("open");
        super::super::migrations::migrate(&mut conn).expect("migrate");
        let at = OffsetDateTime::from_unix_timestamp(1_700_000_000).expect("time");
        let rec = |sandboxes: Option<u32>, memory: Option<u64>| QuotaOverrideRecord {
            workspace: "w".into(),
            max_sandboxes: sandboxes,
            max_vcpu: None,
            max_memory_mb: memory,
            updated_at: at,
        };
        assert_eq!(get(&conn, "w").expect("get"), None);
        set(&conn, &rec(Some(3), None)).expect("set");
        set(&conn, &rec(None, Some(8 << 30))).expect("replace");
        assert_eq!(
            get(&conn, "w").expect("get"),
            Some(rec(None, Some(8 << 30)))
        );
        assert_eq!(get(&conn, "other").expect("get"), None);
    }
}
