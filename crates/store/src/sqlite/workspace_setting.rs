//! One text setting per workspace, in a table keyed by `workspace` (no row: none
//! chosen): set or replace, clear, get. Each workspace's default image and default
//! isolation tier are such settings.

use crate::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};

/// A per-workspace setting: its table and value column (names fixed in code, never
/// taken from input).
pub(super) struct WorkspaceSetting {
    pub table: &'static str,
    pub column: &'static str,
}

impl WorkspaceSetting {
    /// Sets (or replaces) the workspace's value; `None` clears it.
    pub(super) fn set(&self, c: &Connection, ws: &str, value: Option<&str>) -> StoreResult<()> {
        let WorkspaceSetting { table, column } = self;
        match value {
            Some(value) => c.execute(
                &format!(
                    "INSERT INTO {table} (workspace, {column}) VALUES (?1, ?2) \
                     ON CONFLICT (workspace) DO UPDATE SET {column} = ?2"
                ),
                params![ws, value],
            )?,
            None => c.execute(&format!("DELETE FROM {table} WHERE workspace = ?1"), [ws])?,
        };
        Ok(())
    }

    /// The workspace's value, if one is set.
    pub(super) fn get(&self, c: &Connection, ws: &str) -> StoreResult<Option<String>> {
        let WorkspaceSetting { table, column } = self;
        Ok(c.query_row(
            &format!("SELECT {column} FROM {table} WHERE workspace = ?1"),
            [ws],
            |r| r.get(0),
        )
        .optional()?)
    }
}

/// A migrated in-memory database with foreign keys on and one workspace, `w`.
#[cfg(test)]
pub(super) fn test_db_with_workspace_w() -> Connection {
    let mut conn = Connection::open_in_memory().expect("open");
    conn.pragma_update(None, "foreign_keys", "ON").expect("fk");
    super::migrations::migrate(&mut conn).expect("migrate");
    conn.execute(
        "INSERT INTO workspaces (id, name, created_at) VALUES ('w', 'W', 1)",
        [],
    )
    .expect("workspace");
    conn
}
