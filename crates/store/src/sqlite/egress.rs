//! Per-workspace egress policies in SQLite (rule lists as JSON text).

use super::codec::*;
use crate::records::EgressPolicyRecord;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};

pub(super) fn set(c: &Connection, p: &EgressPolicyRecord) -> StoreResult<()> {
    c.execute(
        "INSERT INTO egress_policies (workspace, allow, deny, updated_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (workspace) DO UPDATE SET allow = ?2, deny = ?3, updated_at = ?4",
        params![p.workspace, json(&p.allow), json(&p.deny), ts(p.updated_at)],
    )?;
    Ok(())
}

pub(super) fn get(c: &Connection, ws: &str) -> StoreResult<Option<EgressPolicyRecord>> {
    // Cached: every create reads it.
    let rec = c
        .prepare_cached(
            "SELECT workspace, allow, deny, updated_at FROM egress_policies WHERE workspace = ?1",
        )?
        .query_row([ws], |r| {
            Ok(EgressPolicyRecord {
                workspace: r.get("workspace")?,
                allow: get_json(r, "allow")?,
                deny: get_json(r, "deny")?,
                updated_at: get_ts(r, "updated_at")?,
            })
        })
        .optional()?;
    Ok(rec)
}

pub(super) fn delete(c: &Connection, ws: &str) -> StoreResult<bool> {
    let n = c.execute("DELETE FROM egress_policies WHERE workspace = ?1", [ws])?;
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::OffsetDateTime;

    #[test]
    fn set_replaces_get_reads_delete_removes() {
        let mut conn = Connection::open_in_memory().expect("open");
        super::super::migrations::migrate(&mut conn).expect("migrate");
        let at = OffsetDateTime::from_unix_timestamp(1_700_000_000).expect("time");
        let rec = |allow: &[&str]| EgressPolicyRecord {
            workspace: "w".into(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: vec!["bad.test".into()],
            updated_at: at,
        };
        assert_eq!(get(&conn, "w").expect("get"), None);
        set(&conn, &rec(&["10.0.0.0/8"])).expect("set");
        set(&conn, &rec(&["192.0.2.0/24", "good.test"])).expect("replace");
        assert_eq!(
            get(&conn, "w").expect("get"),
            Some(rec(&["192.0.2.0/24", "good.test"]))
        );
        assert_eq!(get(&conn, "other").expect("get"), None);
        assert!(delete(&conn, "w").expect("delete"));
        assert!(!delete(&conn, "w").expect("delete again"));
        assert_eq!(get(&conn, "w").expect("get"), None);
    }
}
