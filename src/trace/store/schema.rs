//! The trace store's schema: its migrations, the version both kinds of connection
//! check when they open, and the settings every connection opens with. The tables and
//! indexes are described in [`super`].

use super::error::{StoreError, sqlite};
use rusqlite::{Connection, TransactionBehavior, params};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The schema version this code writes and reads.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a statement waits for another connection's lock before failing busy.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Distinct SQL texts a connection keeps prepared (search shapes vary by filter).
pub(super) const STATEMENT_CACHE: usize = 64;

/// Ordered migrations: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
/// Never edit a released entry; append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE turns (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        turn_id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        project TEXT NOT NULL,
        build_digest TEXT NOT NULL,
        blocked INTEGER NOT NULL,
        rendered_digest TEXT,
        started_at_ms INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX turns_by_tenant ON turns (tenant, seq, started_at_ms);
    CREATE TABLE layer_decisions (
        turn_seq INTEGER NOT NULL REFERENCES turns (seq),
        tenant TEXT NOT NULL,
        layer TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL
    );
    CREATE INDEX layer_decisions_by_layer ON layer_decisions (tenant, layer, status, turn_seq);
    CREATE INDEX layer_decisions_by_status ON layer_decisions (tenant, status, turn_seq);
    CREATE TABLE provider_records (
        turn_seq INTEGER NOT NULL REFERENCES turns (seq),
        tenant TEXT NOT NULL,
        provider TEXT NOT NULL,
        status TEXT NOT NULL,
        observed_at_ms INTEGER NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX provider_records_by_turn ON provider_records (turn_seq);
    CREATE INDEX provider_records_by_provider ON provider_records (tenant, provider, status, turn_seq);
    CREATE INDEX provider_records_by_status ON provider_records (tenant, status, turn_seq);
    CREATE TABLE retained_content (
        tenant TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        ciphertext BLOB NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        PRIMARY KEY (tenant, fingerprint)
    );
    CREATE INDEX retained_content_by_expiry ON retained_content (expires_at_ms);
    CREATE TABLE builds (
        digest TEXT PRIMARY KEY,
        build TEXT NOT NULL
    );",
    // 2: handle operation records. The key is also the listing order of one handle's
    // operations, so `GET /v1/handles/{id}/trace` is one range scan.
    "CREATE TABLE handle_operations (
        tenant TEXT NOT NULL,
        handle_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (tenant, handle_id, sequence)
    );",
    // 3: pruning finds a tenant's handle operations past their keep by age.
    "CREATE INDEX handle_operations_by_age ON handle_operations (tenant, at_ms);",
    // 4: record bodies compressed against dictionaries kept once (see `codec`); rows
    // written before keep their JSON text, and both are read.
    "CREATE TABLE record_dictionaries (
        id INTEGER PRIMARY KEY,
        bytes BLOB NOT NULL
    );",
    // 5: no index led by `(tenant, status)`. A status filter without its name walks the
    // name-led index once per name of the tenant (see `trace::query`), and each turn
    // written no longer adds an entry per provider record and per layer decision.
    "DROP INDEX layer_decisions_by_status;
    DROP INDEX provider_records_by_status;",
    // 6: turn shapes (see `trace::query`). A turn carries the id of the set of its
    // provider records' and layer decisions' (name, status) pairs, whose pairs are
    // stored once per shape; searches find a shape's turns through `turns_by_shape`.
    // A turn then writes one row instead of a row per provider record and layer
    // decision. Turns written before keep their rows (and `shape` NULL, out of the
    // partial index); their provider records stay countable by their rows, a new
    // turn's by `provider_count`.
    "CREATE TABLE shape_keys (
        tenant TEXT NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        shape INTEGER NOT NULL,
        PRIMARY KEY (tenant, kind, name, status, shape)
    ) WITHOUT ROWID;
    ALTER TABLE turns ADD COLUMN shape INTEGER;
    ALTER TABLE turns ADD COLUMN provider_count INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX turns_by_shape ON turns (tenant, shape, seq, started_at_ms) WHERE shape IS NOT NULL;",
];

/// Turns off foreign key enforcement on a write connection (the bundled SQLite enforces
/// them by default). The `REFERENCES` clauses say which turn a row belongs to; the
/// writers keep that true themselves — a turn and its rows commit in one transaction,
/// and pruning deletes a turn's rows with it. Enforcing it cost a lookup of the turn for
/// every row written and, since no index of `layer_decisions` is led by `turn_seq`, a
/// scan of every layer decision in the store for every turn pruned.
pub(super) fn without_foreign_keys(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    conn.pragma_update(None, "foreign_keys", "OFF")
        .map_err(sqlite(path, "turn foreign key enforcement off"))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The highest applied migration; `None` when there is no `schema_version` table.
fn schema_version(conn: &Connection, path: &Path) -> Result<Option<i64>, StoreError> {
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_version')",
            [],
            |row| row.get(0),
        )
        .map_err(sqlite(path, "read the schema"))?;
    if !exists {
        return Ok(None);
    }
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_version",
        [],
        |row| row.get(0),
    )
    .map(Some)
    .map_err(sqlite(path, "read the schema version"))
}

/// A reader's check: the store exists as a trace store with exactly this code's schema
/// version (readers never migrate).
pub(super) fn require_current(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    match schema_version(conn, path)? {
        None => Err(StoreError::NotATraceStore {
            path: path.to_path_buf(),
        }),
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        }),
        Some(found) if found < SCHEMA_VERSION => Err(StoreError::TooOld {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        }),
        Some(_) => Ok(()),
    }
}

/// Applies the migrations the store lacks, each in its own `BEGIN IMMEDIATE`
/// transaction (so two processes opening a new store at once apply each one once).
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let current = match schema_version(conn, path)? {
        Some(version) => version,
        None => {
            let tables: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                    [],
                    |row| row.get(0),
                )
                .map_err(sqlite(path, "read the schema"))?;
            if tables > 0 {
                return Err(StoreError::NotATraceStore {
                    path: path.to_path_buf(),
                });
            }
            0
        }
    };
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found: current,
            known: SCHEMA_VERSION,
        });
    }
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        if version <= current {
            continue;
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite(path, "begin a migration"))?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version INTEGER PRIMARY KEY,
                applied_at_ms INTEGER NOT NULL
            )",
        )
        .map_err(sqlite(path, "create the schema_version table"))?;
        // Another process may have applied it while this one waited for the lock.
        let applied = schema_version(&tx, path)?.unwrap_or(0);
        if applied > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_path_buf(),
                found: applied,
                known: SCHEMA_VERSION,
            });
        }
        if applied >= version {
            continue;
        }
        tx.execute_batch(migration)
            .map_err(sqlite(path, "apply a schema migration"))?;
        tx.execute(
            "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, ?2)",
            params![version, now_ms()],
        )
        .map_err(sqlite(path, "record the schema version"))?;
        tx.commit()
            .map_err(sqlite(path, "commit a schema migration"))?;
    }
    Ok(())
}
