//! The alias table: the names dialects know workspaces and sandboxes by.

use super::unique_violation;
use crate::records::{AliasKind, Aliases};
use crate::StoreResult;
use rusqlite::{params, Connection};

/// Inserts every alias of `target`; `Conflict` naming the alias when one is taken.
pub(super) fn insert(
    c: &Connection,
    kind: AliasKind,
    target: &str,
    aliases: &Aliases,
) -> StoreResult<()> {
    for (dialect, alias) in aliases {
        c.execute(
            "INSERT INTO aliases (dialect, kind, alias, target) VALUES (?1, ?2, ?3, ?4)",
            params![dialect, kind.as_str(), alias, target],
        )
        .map_err(|e| unique_violation(e, || format!("{dialect} {} {alias:?}", kind.as_str())))?;
    }
    Ok(())
}

/// SQL of a column holding the aliases of the row of `table` (kind `kind`) as a JSON
/// object by dialect.
pub(super) fn column(kind: AliasKind, table: &str) -> String {
    format!(
        "(SELECT json_group_object(a.dialect, a.alias) FROM aliases a \
         WHERE a.kind = '{}' AND a.target = {table}.id) AS aliases",
        kind.as_str()
    )
}
