//! Each workspace's default image in SQLite (no row: the built-in `default`).

use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};

pub(super) fn set(c: &Connection, ws: &str, image: Option<&str>) -> StoreResult<()> {
    match image {
        Some(image) => c.execute(
            "INSERT INTO workspace_images (workspace, image) VALUES (?1, ?2) \
             ON CONFLICT (workspace) DO UPDATE SET image = ?2",
            params![ws, image],
        )?,
        None => c.execute("DELETE FROM workspace_images WHERE workspace = ?1", [ws])?,
    };
    Ok(())
}

pub(super) fn get(c: &Connection, ws: &str) -> StoreResult<Option<String>> {
    Ok(c.query_row(
        "SELECT image FROM workspace_images WHERE workspace = ?1",
        [ws],
        |r| r.get(0),
    )
    .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replaces_clears_and_goes_with_its_workspace() {
        let mut conn = Connection::open_in_memory().expect("open");
        conn.pragma_update(None, "foreign_keys", "ON").expect("fk");
        super::super::migrations::migrate(&mut conn).expect("migrate");
        conn.execute(
            "INSERT INTO workspaces (id, name, created_at) VALUES ('w', 'W', 1)",
            [],
        )
        .expect("workspace");
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
