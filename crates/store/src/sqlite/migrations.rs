//! The SQLite schema, as ordered migrations recorded in `schema_version`.

use crate::error::StoreError;
use rusqlite::{Connection, OptionalExtension};

/// Every migration, oldest first; a database at version N has run the first N.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        inngest_env TEXT UNIQUE,
        runzivo_tenant_id TEXT UNIQUE,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        workspace TEXT REFERENCES workspaces(id),
        permissions TEXT NOT NULL,
        scopes TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
    );
    CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        name TEXT,
        status TEXT NOT NULL,
        image TEXT NOT NULL,
        vcpu INTEGER NOT NULL,
        memory_mb INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        started_at INTEGER,
        ended_at INTEGER,
        expires_at INTEGER,
        end_reason TEXT,
        error TEXT,
        snapshot_id TEXT,
        environment TEXT NOT NULL,
        secrets TEXT NOT NULL,
        metadata TEXT NOT NULL,
        extra_layers TEXT NOT NULL,
        handle TEXT,
        id_slot INTEGER
    );
    CREATE INDEX sandboxes_page ON sandboxes (workspace, created_at DESC, id DESC);
    CREATE INDEX sandboxes_status ON sandboxes (status);
    CREATE INDEX sandboxes_name ON sandboxes (workspace, name);
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        name TEXT,
        source_sandbox_id TEXT NOT NULL,
        image TEXT NOT NULL,
        digest TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        vcpu INTEGER NOT NULL,
        memory_mb INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER
    );
    CREATE INDEX snapshots_page ON snapshots (workspace, created_at DESC, id DESC);
    CREATE TABLE snapshot_layers (
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        digest TEXT NOT NULL,
        PRIMARY KEY (snapshot_id, position)
    );
    CREATE INDEX snapshot_layers_digest ON snapshot_layers (digest);
    CREATE TABLE secrets (
        workspace TEXT NOT NULL,
        name TEXT NOT NULL,
        sealed BLOB NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (workspace, name)
    );
    CREATE TABLE idempotency (
        workspace TEXT NOT NULL,
        key TEXT NOT NULL,
        request_hash TEXT NOT NULL,
        status INTEGER NOT NULL,
        body BLOB NOT NULL,
        headers TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (workspace, key)
    );
    CREATE INDEX idempotency_age ON idempotency (created_at);",
    // 2: history by end time.
    "CREATE INDEX sandboxes_ended ON sandboxes (workspace, ended_at DESC, id DESC);",
    // 3: per-workspace egress policy.
    "CREATE TABLE egress_policies (
        workspace TEXT PRIMARY KEY,
        allow TEXT NOT NULL,
        deny TEXT NOT NULL,
        updated_at INTEGER NOT NULL
    );",
    // 4: per-workspace quota overrides (NULL: the server's default).
    "CREATE TABLE workspace_quotas (
        workspace TEXT PRIMARY KEY,
        max_sandboxes INTEGER,
        max_vcpu INTEGER,
        max_memory_mb INTEGER,
        updated_at INTEGER NOT NULL
    );",
];

/// Brings the database up to the newest schema, one transaction per migration.
pub(super) fn migrate(conn: &mut Connection) -> Result<i64, StoreError> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
    let current: i64 = conn
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::SchemaTooNew {
            found: current,
            known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.execute("DELETE FROM schema_version", [])?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [i as i64 + 1],
        )?;
        tx.commit()?;
    }
    Ok(known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MIGRATIONS.len() as i64);
        assert_eq!(migrate(&mut conn).unwrap(), MIGRATIONS.len() as i64);
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
    }

    #[test]
    fn refuses_a_newer_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        conn.execute("UPDATE schema_version SET version = 99", [])
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(StoreError::SchemaTooNew { found: 99, .. })
        ));
    }
}
