//! The PostgreSQL store's schema: versioned migrations, applied once by whichever
//! replica opens the store first. A replica takes `pg_advisory_lock` (keyed by the
//! schema the connection writes to, so stores in other schemas of the database do not
//! wait on each other), reads `schema_version`, applies what is missing — each
//! migration and its `schema_version` row in one transaction — and releases the lock.
//! Replicas starting at the same moment wait for the lock, then find every version
//! applied. Readers never migrate: they check the version.

use super::PgConnection;
use crate::trace::store::error::StoreError;
use std::time::{SystemTime, UNIX_EPOCH};

/// The schema version this code writes and reads.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock's key: one per schema (`current_schema()`), the same number in
/// every replica.
const LOCK_KEY: &str = "hashtextextended('ctxd.trace-store.migrations:' || current_schema(), 0)";

/// Ordered migrations: `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
/// Never edit a released entry; append a new one. The tables and columns are the SQLite
/// store's (see [`crate::trace::store`]); record bodies are `bytea`, and provider
/// records carry an identity `id` for their order within a turn (SQLite's `rowid`).
const MIGRATIONS: &[&str] = &[
    // 1: turns, their layer decisions and provider records, retained content, builds.
    "CREATE TABLE turns (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        turn_id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        project TEXT NOT NULL,
        build_digest TEXT NOT NULL,
        blocked BOOLEAN NOT NULL,
        rendered_digest TEXT,
        started_at_ms BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        record BYTEA NOT NULL
    );
    CREATE INDEX turns_by_tenant ON turns (tenant, seq, started_at_ms);
    CREATE TABLE layer_decisions (
        turn_seq BIGINT NOT NULL REFERENCES turns (seq),
        tenant TEXT NOT NULL,
        layer TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL
    );
    CREATE INDEX layer_decisions_by_layer ON layer_decisions (tenant, layer, status, turn_seq);
    CREATE INDEX layer_decisions_by_status ON layer_decisions (tenant, status, turn_seq);
    CREATE TABLE provider_records (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        turn_seq BIGINT NOT NULL REFERENCES turns (seq),
        tenant TEXT NOT NULL,
        provider TEXT NOT NULL,
        status TEXT NOT NULL,
        observed_at_ms BIGINT NOT NULL,
        record BYTEA NOT NULL
    );
    CREATE INDEX provider_records_by_turn ON provider_records (turn_seq, id);
    CREATE INDEX provider_records_by_provider ON provider_records (tenant, provider, status, turn_seq);
    CREATE INDEX provider_records_by_status ON provider_records (tenant, status, turn_seq);
    CREATE TABLE retained_content (
        tenant TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        ciphertext BYTEA NOT NULL,
        expires_at_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant, fingerprint)
    );
    CREATE INDEX retained_content_by_expiry ON retained_content (expires_at_ms);
    CREATE TABLE builds (
        digest TEXT PRIMARY KEY,
        build TEXT NOT NULL
    );",
    // 2: handle operation records, and the dictionaries record bodies are compressed
    // against (shared by every replica: each inserts its own, ids are digests).
    "CREATE TABLE handle_operations (
        tenant TEXT NOT NULL,
        handle_id TEXT NOT NULL,
        sequence BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (tenant, handle_id, sequence)
    );
    CREATE INDEX handle_operations_by_age ON handle_operations (tenant, at_ms);
    CREATE TABLE record_dictionaries (
        id BIGINT PRIMARY KEY,
        bytes BYTEA NOT NULL
    );",
    // 3: the references from a turn's rows to `turns` are no longer enforced (see the
    // SQLite store's `without_foreign_keys`): the writer commits a turn with its rows
    // and pruning deletes them together. Enforced, each row written locked its turn,
    // and each turn pruned scanned `layer_decisions`, which has no index led by
    // `turn_seq`.
    "ALTER TABLE layer_decisions DROP CONSTRAINT IF EXISTS layer_decisions_turn_seq_fkey;
    ALTER TABLE provider_records DROP CONSTRAINT IF EXISTS provider_records_turn_seq_fkey;",
    // 4: no index led by `(tenant, status)`, as in the SQLite store's version 5: a status
    // filter without its name walks the name-led index once per name of the tenant.
    "DROP INDEX IF EXISTS layer_decisions_by_status;
    DROP INDEX IF EXISTS provider_records_by_status;",
    // 5: turn shapes, as in the SQLite store's version 6: a turn carries the id of the
    // set of its (name, status) pairs, stored once per shape in `shape_keys`, and
    // writes no provider or layer rows; turns written before keep theirs.
    "CREATE TABLE shape_keys (
        tenant TEXT NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        shape BIGINT NOT NULL,
        PRIMARY KEY (tenant, kind, name, status, shape)
    );
    ALTER TABLE turns ADD COLUMN shape BIGINT,
        ADD COLUMN provider_count BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX turns_by_shape ON turns (tenant, shape, seq, started_at_ms) WHERE shape IS NOT NULL;",
];

const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_version (
    version BIGINT PRIMARY KEY,
    applied_at_ms BIGINT NOT NULL
)";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The highest applied migration; `None` when the schema has no `schema_version` table.
pub(super) fn schema_version(conn: &PgConnection) -> Result<Option<i64>, StoreError> {
    conn.run("read the schema version", |client| async move {
        let exists: bool = client
            .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])
            .await?
            .get(0);
        if !exists {
            return Ok(None);
        }
        let version: i64 = client
            .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
            .await?
            .get(0);
        Ok(Some(version))
    })
}

/// A reader's check: the schema holds a trace store of exactly this code's version.
pub(super) fn require_current(conn: &PgConnection) -> Result<(), StoreError> {
    let path = conn.label().clone();
    match schema_version(conn)? {
        None => Err(StoreError::NotATraceStore { path }),
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::TooNew {
            path,
            found,
            known: SCHEMA_VERSION,
        }),
        Some(found) if found < SCHEMA_VERSION => Err(StoreError::TooOld {
            path,
            found,
            known: SCHEMA_VERSION,
        }),
        Some(_) => Ok(()),
    }
}

/// Applies the migrations the store lacks under the advisory lock; returns how many
/// this call applied (0 when another replica had).
pub(super) fn migrate(conn: &mut PgConnection) -> Result<usize, StoreError> {
    conn.batch(
        "take the migration lock",
        &format!("SELECT pg_advisory_lock({LOCK_KEY})"),
    )?;
    let applied = apply_missing(conn);
    // Released whatever happened: a failed migration leaves the lock to the next replica.
    let released = conn.batch(
        "release the migration lock",
        &format!("SELECT pg_advisory_unlock({LOCK_KEY})"),
    );
    let applied = applied?;
    released?;
    Ok(applied)
}

fn apply_missing(conn: &mut PgConnection) -> Result<usize, StoreError> {
    let current = match schema_version(conn)? {
        Some(version) => version,
        None => {
            let tables: i64 = conn.run("read the schema", |client| async move {
                Ok(client
                    .query_one(
                        "SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema()",
                        &[],
                    )
                    .await?
                    .get(0))
            })?;
            if tables > 0 {
                return Err(StoreError::NotATraceStore {
                    path: conn.label().clone(),
                });
            }
            0
        }
    };
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: conn.label().clone(),
            found: current,
            known: SCHEMA_VERSION,
        });
    }
    let mut applied = 0;
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        if version <= current {
            continue;
        }
        conn.run_mut("apply a schema migration", |client| async move {
            let tx = client.transaction().await?;
            tx.batch_execute(VERSION_TABLE).await?;
            tx.batch_execute(migration).await?;
            tx.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES ($1, $2)",
                &[&version, &now_ms()],
            )
            .await?;
            tx.commit().await
        })?;
        applied += 1;
    }
    Ok(applied)
}
