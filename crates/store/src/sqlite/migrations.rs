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
    // 5: each sandbox's disk size (MiB, 0: no limit), kept on its snapshots; NULL on
    // rows from before (they got the server's default of the time).
    "ALTER TABLE sandboxes ADD COLUMN disk_mb INTEGER;
    ALTER TABLE snapshots ADD COLUMN disk_mb INTEGER;",
    // 6: which keys the server's master key made (revoked when the master key changes),
    // and aliases (the Inngest SDK's hashed form of a key) revoked with their key. Rows
    // from before: the keys the server registered itself (the default workspace, every
    // permission, no scopes, not made by `keys create`) were master keys or their aliases.
    "ALTER TABLE api_keys ADD COLUMN master INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE api_keys ADD COLUMN alias_of TEXT;
    UPDATE api_keys SET master = 1
        WHERE workspace = 'default' AND permissions = '[\"*\"]' AND scopes = '[]'
        AND NOT (prefix GLOB 'sbx_*' OR prefix GLOB 'or_*' OR prefix GLOB 'vl_*');",
    // 7: dialect concepts leave the schema. One alias table, (dialect, kind, alias) ->
    // id, holds the names the dialects know workspaces and sandboxes by, and each
    // sandbox keeps its dialects' typed attributes as JSON by dialect. Existing data
    // moves: the workspace columns `inngest_env` and `runzivo_tenant_id` (the table is
    // rebuilt without them), Runzivo ids kept as sandbox names (newest first when a name
    // repeats; the name is cleared once aliased), and OpenRelay's `openrelay.*` metadata.
    "CREATE TABLE aliases (
        dialect TEXT NOT NULL,
        kind TEXT NOT NULL,
        alias TEXT NOT NULL,
        target TEXT NOT NULL,
        PRIMARY KEY (dialect, kind, alias)
    );
    CREATE INDEX aliases_target ON aliases (kind, target, dialect);
    INSERT INTO aliases (dialect, kind, alias, target)
        SELECT 'inngest', 'workspace', inngest_env, id FROM workspaces
        WHERE inngest_env IS NOT NULL;
    INSERT INTO aliases (dialect, kind, alias, target)
        SELECT 'runzivo', 'workspace', runzivo_tenant_id, id FROM workspaces
        WHERE runzivo_tenant_id IS NOT NULL;
    CREATE TABLE workspaces_v7 (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    INSERT INTO workspaces_v7 (id, name, created_at) SELECT id, name, created_at FROM workspaces;
    DROP TABLE workspaces;
    ALTER TABLE workspaces_v7 RENAME TO workspaces;
    INSERT OR IGNORE INTO aliases (dialect, kind, alias, target)
        SELECT 'runzivo', 'sandbox', name, id FROM sandboxes
        WHERE name GLOB 'sbx_[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
        ORDER BY created_at DESC, id DESC;
    UPDATE sandboxes SET name = NULL WHERE EXISTS (SELECT 1 FROM aliases a
        WHERE a.dialect = 'runzivo' AND a.kind = 'sandbox' AND a.target = sandboxes.id);
    ALTER TABLE sandboxes ADD COLUMN attributes TEXT NOT NULL DEFAULT '{}';
    UPDATE sandboxes SET
        attributes = json_object('openrelay', json_object(
            'template', json_extract(metadata, '$.\"openrelay.template\"'),
            'ephemeral', json(CASE json_extract(metadata, '$.\"openrelay.ephemeral\"')
                WHEN 'true' THEN 'true' ELSE 'false' END),
            'pinned', json(CASE json_extract(metadata, '$.\"openrelay.placement\"')
                WHEN 'pinned' THEN 'true' ELSE 'false' END),
            'cpuRequest', CAST(COALESCE(
                json_extract(metadata, '$.\"openrelay.cpuRequest\"'), 0) AS REAL),
            'memoryRequestMiB', CAST(COALESCE(
                json_extract(metadata, '$.\"openrelay.memoryRequestMiB\"'), 0) AS INTEGER),
            'autoPause', json(CASE json_extract(metadata, '$.\"openrelay.autoPause\"')
                WHEN 'true' THEN 'true' ELSE 'false' END))),
        metadata = json_remove(metadata,
            '$.\"openrelay.template\"', '$.\"openrelay.ephemeral\"',
            '$.\"openrelay.placement\"', '$.\"openrelay.cpuRequest\"',
            '$.\"openrelay.memoryRequestMiB\"', '$.\"openrelay.autoPause\"')
        WHERE json_extract(metadata, '$.\"openrelay.template\"') IS NOT NULL;",
    // 8: credentials per OCI registry (`sandboxd registry login`): the password or
    // token sealed like secrets; no username means a bearer token.
    "CREATE TABLE registry_credentials (
        registry TEXT PRIMARY KEY,
        username TEXT,
        sealed BLOB NOT NULL,
        updated_at INTEGER NOT NULL
    );",
    // 9: a workspace's default image (`sandboxd workspace set-image`), for creates
    // that name none (Inngest's).
    "CREATE TABLE workspace_images (
        workspace TEXT PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
        image TEXT NOT NULL
    );",
    // 10: the audit trail of mutating operations per workspace: who (key id) did what
    // to which target, when, and how it ended; pruned after the configured retention.
    "CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        workspace TEXT NOT NULL,
        key_id TEXT,
        request_id TEXT,
        action TEXT NOT NULL,
        target TEXT,
        outcome TEXT NOT NULL
    );
    CREATE INDEX audit_workspace_at ON audit (workspace, at);
    CREATE INDEX audit_at ON audit (at);",
    // 11: one-time web console sign-in codes (`sandboxd console link`), kept as SHA-256
    // hashes; a code is spent by setting used_at.
    "CREATE TABLE console_codes (
        code_hash TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(id),
        expires_at INTEGER NOT NULL,
        used_at INTEGER
    );",
    // 12: isolation tiers. Each sandbox's tier (NULL on rows from before: the server's
    // default tier, the only one a server ran then), a workspace's default tier
    // (`sandboxd workspace set-isolation`), and the tier a workspace template was built
    // for (OpenRelay's template `isolation`), by template name.
    "ALTER TABLE sandboxes ADD COLUMN isolation TEXT;
    CREATE TABLE workspace_isolation (
        workspace TEXT PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
        isolation TEXT NOT NULL
    );
    CREATE TABLE template_isolation (
        workspace TEXT NOT NULL,
        template TEXT NOT NULL,
        isolation TEXT NOT NULL,
        PRIMARY KEY (workspace, template)
    );",
    // 13: a memory snapshot's image dir (gVisor: `runsc checkpoint`), NULL for
    // filesystem-only snapshots.
    "ALTER TABLE snapshots ADD COLUMN memory_image TEXT;",
    // 14: autoPause. `auto_pause`: the sandbox consented to be moved to disk when
    // memory runs short (OpenRelay sandboxes that asked for it keep their consent);
    // `auto_paused_at`: when it was moved there, NULL while its memory is resident.
    "ALTER TABLE sandboxes ADD COLUMN auto_pause INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sandboxes ADD COLUMN auto_paused_at INTEGER;
    UPDATE sandboxes SET auto_pause = 1
        WHERE json_extract(attributes, '$.openrelay.autoPause') = 1;",
    // 15: the network a sandbox's create asked for (JSON: mode and its own egress
    // layer), so a repeated named create with another network is no repeat; NULL on
    // older rows.
    "ALTER TABLE sandboxes ADD COLUMN network TEXT;",
];

/// Brings the database up to the newest schema, one transaction per migration.
pub(super) fn migrate(conn: &mut Connection) -> Result<i64, StoreError> {
    migrate_to(conn, MIGRATIONS.len())
}

/// Runs the migrations a database lacks among the first `target`.
fn migrate_to(conn: &mut Connection, target: usize) -> Result<i64, StoreError> {
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
    // The common open: nothing to run, so no foreign-key toggling either.
    if current >= target as i64 {
        return Ok(current);
    }
    // Foreign keys are off while migrating (a migration may rebuild a referenced table,
    // as SQLite's ALTER TABLE procedure asks) and checked before each commit.
    let enforced: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let ran = run_pending(conn, current as usize, target);
    conn.pragma_update(None, "foreign_keys", if enforced { "ON" } else { "OFF" })?;
    ran?;
    Ok(known.min(target as i64).max(current))
}

/// Runs migrations `current..target`, one transaction each.
fn run_pending(conn: &mut Connection, current: usize, target: usize) -> Result<(), StoreError> {
    let pending = MIGRATIONS.iter().enumerate().take(target);
    for (i, sql) in pending.skip(current) {
        // IMMEDIATE: the write lock from the start, so that of two processes opening a
        // new database at once, one migrates and the other, once it has the lock, sees
        // the version moved and skips (both once ran the same CREATE TABLE).
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let now: i64 = tx
            .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        if now > i as i64 {
            continue;
        }
        tx.execute_batch(sql)?;
        let dangling: Option<String> = tx
            .query_row("PRAGMA foreign_key_check", [], |r| r.get(0))
            .optional()?;
        if let Some(table) = dangling {
            return Err(StoreError::Corrupt(format!(
                "migration {} left a dangling reference in {table}",
                i + 1
            )));
        }
        tx.execute("DELETE FROM schema_version", [])?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [i as i64 + 1],
        )?;
        tx.commit()?;
    }
    Ok(())
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

    /// An open of a current database (every short-lived process's) changes nothing of
    /// the connection: foreign keys stay enforced, as the store's open set them.
    #[test]
    fn a_migration_with_nothing_to_do_leaves_foreign_keys_enforced() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MIGRATIONS.len() as i64);
        let fk: bool = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert!(fk, "foreign keys are off after a no-op migration");
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

    /// Keys from before migration 6: those the server registered from its master key
    /// (among them the SDK form of a non-hex key, sha256 of nothing) become master keys,
    /// so the next start revokes them unless they are still its master key.
    #[test]
    fn migration_6_marks_the_keys_the_server_registered_as_master_keys() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_to(&mut conn, 5).unwrap(), 5);
        conn.execute_batch(
            "INSERT INTO workspaces (id, name, created_at) VALUES ('default', 'D', 1);
             INSERT INTO workspaces (id, name, created_at) VALUES ('acme', 'A', 1);",
        )
        .unwrap();
        let insert = |id: &str, prefix: &str, ws: &str, perms: &str| {
            conn.execute(
                "INSERT INTO api_keys (id, key_hash, prefix, workspace, permissions, scopes,
                    created_at) VALUES (?1, ?1, ?2, ?3, ?4, '[]', 1)",
                [id, prefix, ws, perms],
            )
            .unwrap();
        };
        insert("master", "any-non-hex-", "default", r#"["*"]"#);
        insert("empty-sha", "e3b0c44298fc", "default", r#"["*"]"#);
        insert("made", "sbx_0123abcd", "default", r#"["*"]"#);
        insert("made-or", "or_0123abcde", "default", r#"["*"]"#);
        insert("other-ws", "signkey-acme", "acme", r#"["*"]"#);
        insert("narrow", "signkey-prod", "default", r#"["sandboxes:read"]"#);
        migrate(&mut conn).unwrap();
        let mut st = conn
            .prepare("SELECT id FROM api_keys WHERE master = 1 ORDER BY id")
            .unwrap();
        let masters: Vec<String> = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(masters, ["empty-sha", "master"]);
    }

    /// A database from before migration 5 keeps its rows: their disk sizes read as
    /// unknown, and sizes written afterwards read back as written (0 included).
    #[test]
    fn migration_5_adds_disk_sizes_to_existing_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_to(&mut conn, 4).unwrap(), 4);
        conn.execute_batch(
            "INSERT INTO sandboxes (id, workspace, name, status, image, vcpu, memory_mb,
                created_at, environment, secrets, metadata, extra_layers)
             VALUES ('00000000-0000-0000-0000-000000000001', 'w', NULL, 'RUNNING',
                'default', 1, 512, 1, '{}', '[]', '{}', '[]');
             INSERT INTO snapshots (id, workspace, name, source_sandbox_id, image, digest,
                size_bytes, vcpu, memory_mb, created_at)
             VALUES ('00000000-0000-0000-0000-000000000002', 'w', 'template:t',
                '00000000-0000-0000-0000-000000000001', 'default', 'd', 1, 1, 512, 1);",
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MIGRATIONS.len() as i64);

        let id = uuid::Uuid::from_u128(1);
        let mut sb = super::super::sandboxes::get(&conn, id).unwrap().unwrap();
        assert_eq!((sb.memory_mb, sb.disk_mb), (512, None));
        sb.disk_mb = Some(64);
        super::super::sandboxes::update(&conn, &sb).unwrap();
        let got = super::super::sandboxes::get(&conn, id).unwrap().unwrap();
        assert_eq!(got.disk_mb, Some(64));
        sb.id = uuid::Uuid::from_u128(3);
        sb.disk_mb = Some(0);
        super::super::sandboxes::insert(&mut conn, &sb).unwrap();
        let got = super::super::sandboxes::get(&conn, sb.id).unwrap().unwrap();
        assert_eq!(got, sb, "0 (no limit) is kept apart from unknown");

        let old = uuid::Uuid::from_u128(2);
        let mut snap = super::super::snapshots::get(&conn, old).unwrap().unwrap();
        assert_eq!(
            (snap.name.as_deref(), snap.disk_mb),
            (Some("template:t"), None)
        );
        snap.id = uuid::Uuid::from_u128(4);
        snap.disk_mb = Some(64);
        super::super::snapshots::insert(&mut conn, &snap).unwrap();
        let got = super::super::snapshots::get(&conn, snap.id)
            .unwrap()
            .unwrap();
        assert_eq!(got, snap);
    }

    /// Migration 14 keeps the consent of OpenRelay sandboxes that sent `autoPause`
    /// (and only theirs); none is on disk.
    #[test]
    fn migration_14_carries_openrelay_auto_pause_consent() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_to(&mut conn, 13).unwrap(), 13);
        let sandbox = |n: u128, attributes: &str| {
            conn.execute(
                "INSERT INTO sandboxes (id, workspace, name, status, image, vcpu, memory_mb,
                    created_at, environment, secrets, metadata, extra_layers, attributes)
                 VALUES (?1, 'default', NULL, 'RUNNING', 'default', 1, 512, 1, '{}', '[]',
                    '{}', '[]', ?2)",
                rusqlite::params![uuid::Uuid::from_u128(n).to_string(), attributes],
            )
            .unwrap();
        };
        sandbox(
            1,
            r#"{"openrelay":{"template":"default","autoPause":true}}"#,
        );
        sandbox(
            2,
            r#"{"openrelay":{"template":"default","autoPause":false}}"#,
        );
        sandbox(3, "{}");
        migrate(&mut conn).unwrap();
        let get = |n: u128| {
            super::super::sandboxes::get(&conn, uuid::Uuid::from_u128(n))
                .unwrap()
                .unwrap()
        };
        assert!(get(1).auto_pause);
        assert!(!get(2).auto_pause && !get(3).auto_pause);
        assert!([1, 2, 3].iter().all(|&n| get(n).auto_paused_at.is_none()));
    }

    /// A database at version 6 keeps every dialect name through migration 7: workspace
    /// environments and tenants become workspace aliases, Runzivo ids kept as sandbox
    /// names become sandbox aliases (the newest sandbox keeps a repeated one), and
    /// OpenRelay's attributes leave the user's metadata for typed attributes.
    #[test]
    fn migration_7_moves_dialect_names_into_aliases_and_attributes() {
        use crate::records::SandboxFilter;
        use serde_json::json;
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        assert_eq!(migrate_to(&mut conn, 6).unwrap(), 6);
        conn.execute_batch(
            "INSERT INTO workspaces (id, name, inngest_env, runzivo_tenant_id, created_at)
                VALUES ('default', 'D', 'production', 'default', 1);
             INSERT INTO workspaces (id, name, inngest_env, runzivo_tenant_id, created_at)
                VALUES ('acme', 'A', NULL, 't-acme', 2);
             INSERT INTO api_keys (id, key_hash, prefix, workspace, permissions, scopes,
                created_at) VALUES ('k', 'h', 'p', 'acme', '[]', '[]', 1);",
        )
        .unwrap();
        let sandbox = |n: u128, name: Option<&str>, at: i64, meta: &str| {
            conn.execute(
                "INSERT INTO sandboxes (id, workspace, name, status, image, vcpu, memory_mb,
                    created_at, environment, secrets, metadata, extra_layers)
                 VALUES (?1, 'acme', ?2, 'RUNNING', 'default', 1, 512, ?3, '{}', '[]', ?4,
                    '[]')",
                rusqlite::params![uuid::Uuid::from_u128(n).to_string(), name, at, meta],
            )
            .unwrap();
        };
        let rz = "sbx_0123456789abcdef01234567";
        sandbox(1, Some(rz), 10, "{}");
        sandbox(2, Some(rz), 20, "{}"); // the same id again, newer: it wins
        sandbox(3, Some("sbx_not-a-runzivo-id"), 30, "{}");
        sandbox(
            4,
            Some("web"),
            40,
            r#"{"team":"x","openrelay.template":"python","openrelay.ephemeral":"true",
                "openrelay.placement":"pinned","openrelay.cpuRequest":"0.5",
                "openrelay.memoryRequestMiB":"256","openrelay.autoPause":"false"}"#,
        );
        migrate(&mut conn).unwrap();

        let ws = super::super::accounts::workspace_by_alias(&conn, "inngest", "production")
            .unwrap()
            .unwrap();
        assert_eq!(ws.id, "default");
        assert_eq!(
            ws.aliases,
            [("inngest", "production"), ("runzivo", "default")]
                .map(|(d, a)| (d.to_string(), a.to_string()))
                .into()
        );
        let acme = super::super::accounts::workspace_by_alias(&conn, "runzivo", "t-acme")
            .unwrap()
            .unwrap();
        assert_eq!((acme.id.as_str(), acme.name.as_str()), ("acme", "A"));
        assert!(
            super::super::accounts::workspace_by_alias(&conn, "inngest", "t-acme")
                .unwrap()
                .is_none()
        );
        let cols: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('workspaces')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(cols, ["id", "name", "created_at"]);
        let fk: bool = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert!(fk, "foreign keys are enforced again after migrating");

        let get = |n: u128| {
            super::super::sandboxes::get(&conn, uuid::Uuid::from_u128(n))
                .unwrap()
                .unwrap()
        };
        let by_rz = super::super::sandboxes::by_alias(&conn, "runzivo", rz)
            .unwrap()
            .unwrap();
        assert_eq!(by_rz.id, uuid::Uuid::from_u128(2));
        assert_eq!(by_rz.name, None, "the alias replaces the name");
        assert_eq!(
            by_rz.aliases,
            [("runzivo".to_string(), rz.to_string())].into()
        );
        assert_eq!(get(1).name.as_deref(), Some(rz), "a repeat keeps its name");
        assert!(get(1).aliases.is_empty());
        assert_eq!(get(3).name.as_deref(), Some("sbx_not-a-runzivo-id"));
        assert!(get(3).aliases.is_empty());

        let or = get(4);
        assert_eq!(or.name.as_deref(), Some("web"));
        assert_eq!(or.metadata, [("team".to_string(), "x".to_string())].into());
        assert_eq!(
            or.attributes["openrelay"],
            json!({"template": "python", "ephemeral": true, "pinned": true,
                   "cpuRequest": 0.5, "memoryRequestMiB": 256, "autoPause": false})
        );
        assert!(get(1).attributes.is_empty());

        let listed = super::super::sandboxes::list(
            &conn,
            "acme",
            SandboxFilter {
                aliased_in: Some("runzivo"),
            },
            10,
            None,
        )
        .unwrap();
        assert_eq!(listed, vec![by_rz]);
    }
}
