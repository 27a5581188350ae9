//! Each workspace's default image in SQLite (no row: the built-in `default`).

use super::workspace_setting::WorkspaceSetting;
use crate::StoreResult;
use rusqlite::Connection;

const IMAGE: WorkspaceSetting = WorkspaceSetting {
    table: "workspace_images",
    column: "image",
};

pub(super) fn set(c: &Connection, ws: &str, image: Option<&str>) -> StoreResult<()> {
    IMAGE.set(c, ws, image)
}

pub(super) fn get(c: &Connection, ws: &str) -> StoreResult<Option<String>> {
    IMAGE.get(c, ws)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replaces_clears_and_goes_with_its_workspace() {
        let conn = super::super::workspace_setting::test_db_with_workspace_w();
        assert_eq!(get(&conn, "w").expect("get"), None);
        set(&conn, "w", Some("a:1")).expect("set");
        set(&conn, "w", Some("b:2")).expect("replace");
        assert_eq!(get(&conn, "w").expect("get").as_deref(), Some("b:2"));
        set(&conn, "w", None).expect("clear");
        assert_eq!(get(&conn, "w").expect("get"), None);
        assert!(
            set(&conn, "nope", Some("a:1")).is_err(),
            "no such workspace"
        );
        set(&conn, "w", Some("c:3")).expect("set");
        conn.execute("DELETE FROM workspaces WHERE id = 'w'", [])
            .expect("delete");
        assert_eq!(get(&conn, "w").expect("get"), None);
    }
}
