//! Isolation tier choices in SQLite: each workspace's default tier and the tier each
//! workspace template was built for (no row: none chosen).

use super::workspace_setting::WorkspaceSetting;
use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};

const WORKSPACE: WorkspaceSetting = WorkspaceSetting {
    table: "workspace_isolation",
    column: "isolation",
};

pub(super) fn set_workspace(c: &Connection, ws: &str, tier: Option<&str>) -> StoreResult<()> {
    WORKSPACE.set(c, ws, tier)
}

pub(super) fn get_workspace(c: &Connection, ws: &str) -> StoreResult<Option<String>> {
    WORKSPACE.get(c, ws)
}

pub(super) fn set_template(
    c: &Connection,
    ws: &str,
    template: &str,
    tier: Option<&str>,
) -> StoreResult<()> {
    match tier {
        Some(tier) => c.execute(
            "INSERT INTO template_isolation (workspace, template, isolation) \
             VALUES (?1, ?2, ?3) \
             ON CONFLICT (workspace, template) DO UPDATE SET isolation = ?3",
            params![ws, template, tier],
        )?,
        None => c.execute(
            "DELETE FROM template_isolation WHERE workspace = ?1 AND template = ?2",
            [ws, template],
        )?,
    };
    Ok(())
}

pub(super) fn get_template(
    c: &Connection,
    ws: &str,
    template: &str,
) -> StoreResult<Option<String>> {
    Ok(c.query_row(
        "SELECT isolation FROM template_isolation WHERE workspace = ?1 AND template = ?2",
        [ws, template],
        |r| r.get(0),
    )
    .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_are_set_replaced_cleared_and_kept_apart() {
        let conn = super::super::workspace_setting::test_db_with_workspace_w();
        assert_eq!(get_workspace(&conn, "w").expect("get"), None);
        set_workspace(&conn, "w", Some("gvisor")).expect("set");
        set_workspace(&conn, "w", Some("container")).expect("replace");
        assert_eq!(
            get_workspace(&conn, "w").expect("get").as_deref(),
            Some("container")
        );
        set_workspace(&conn, "w", None).expect("clear");
        assert_eq!(get_workspace(&conn, "w").expect("get"), None);
        assert!(
            set_workspace(&conn, "nope", Some("gvisor")).is_err(),
            "no such workspace"
        );

        set_template(&conn, "w", "t", Some("gvisor")).expect("set");
        set_template(&conn, "v", "t", Some("container")).expect("other workspace");
        assert_eq!(
            get_template(&conn, "w", "t").expect("get").as_deref(),
            Some("gvisor")
        );
        assert_eq!(
            get_template(&conn, "v", "t").expect("get").as_deref(),
            Some("container")
        );
        assert_eq!(get_template(&conn, "w", "u").expect("get"), None);
        set_template(&conn, "w", "t", None).expect("clear");
        assert_eq!(get_template(&conn, "w", "t").expect("get"), None);
        assert_eq!(
            get_template(&conn, "v", "t").expect("get").as_deref(),
            Some("container")
        );
    }
}
