//! The SQLite trace store: schema and migrations, the write path the
//! [`TraceWriter`](super::writer) owns, and the read-only reader behind
//! `GET /v1/traces` and `ctxd traces`.
//!
//! Design goals:
//! - One write connection ([`TraceStore`]), owned by the trace writer thread; readers
//!   ([`TraceReader`]) open their own read-only connections. WAL lets both run at once.
//! - A turn is committed whole or not at all: its turn row, layer decisions, provider
//!   records, retained content and build go in the batch's one transaction.
//! - The file never holds a lookup value, a secret or unretained content. Records hold
//!   key names, keyed digests, locators and fingerprints by construction
//!   ([`super::record`]); retained items are sealed with XChaCha20-Poly1305 under
//!   `DigestKey::derive("ctxd-retention")`, a random nonce per row, and the tenant and
//!   fingerprint as associated data, so a row moved to another tenant or fingerprint
//!   no longer opens.
//! - Serializing and sealing happen in [`RowEncoder`], on the caller's thread, so the
//!   single writer thread only runs SQL.
//! - The SQL stays plain (no JSON functions, no `INDEXED BY`) so a PostgreSQL store can
//!   follow with the same schema; `ON CONFLICT … DO NOTHING/UPDATE` is in both.
//!
//! # Schema (version [`SCHEMA_VERSION`])
//!
//! | table | rows | keys and indexes |
//! |---|---|---|
//! | `turns` | one per turn: filter columns + the turn record JSON | `seq` (autoincrement, the cursor), `turn_id` unique, `(tenant, seq, started_at_ms)` |
//! | `layer_decisions` | one per layer decision | `(tenant, layer, status, turn_seq)`, `(tenant, status, turn_seq)` |
//! | `provider_records` | one per provider record, with its JSON | `(turn_seq)`, `(tenant, provider, status, turn_seq)`, `(tenant, status, turn_seq)` |
//! | `retained_content` | one per tenant and fingerprint: nonce ‖ ciphertext | primary key `(tenant, fingerprint)`, `(expires_at_ms)` |
//! | `builds` | one per build digest | primary key `digest` |
//! | `handle_operations` | one per operation on a handle (v2): filter columns + the record JSON | primary key `(tenant, handle_id, sequence)` |
//! | `schema_version` | one per applied migration | primary key `version` |
//!
//! Why these indexes: a search walks exactly one of them newest first (see
//! [`super::query`]) and checks its other filters with point lookups, so a page costs
//! about `limit` index entries per walked stream whatever the store's size. There is
//! no `(tenant, started_at_ms)` index: a time window is checked from the covering
//! `(tenant, seq, started_at_ms)` walk, because results are ordered by `seq` and an
//! index ordered by time would need a sort of the whole window. The cost moves to
//! narrow windows far in the past, which walk every newer turn of the tenant in that
//! covering index (about 4 ms for 83 k turns; `CTXD_BENCH_SEARCH=1 cargo bench --bench
//! trace_writer` measures every shape on a million provider records).
//!
//! Plans are chosen without statistics (ctxd never runs `ANALYZE`), so they are the ones
//! the `EXPLAIN QUERY PLAN` tests in [`super::query`] pin down.

use super::DigestKey;
use super::query;
pub use super::query::{SearchPage, SearchQuery};
use super::record::{ProviderRecord, TurnRecord, TurnTrace};
use crate::contract::Item;
use crate::digest::{canonical_digest, canonical_json_of};
use crate::handles::HandleOpRecord;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The schema version this code writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a statement waits for another connection's lock before failing busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Purpose string of the key that seals retained content.
const RETENTION_PURPOSE: &str = "ctxd-retention";
const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;
/// Build digests remembered as written, so a build is not re-sent with every turn.
const KNOWN_BUILDS_CAP: usize = 4096;
/// Distinct SQL texts a connection keeps prepared (search shapes vary by filter).
const STATEMENT_CACHE: usize = 64;

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
];

const INSERT_TURN: &str = "INSERT INTO turns (turn_id, tenant, project, build_digest, blocked, rendered_digest, started_at_ms, duration_ms, record)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (turn_id) DO NOTHING";
const INSERT_LAYER: &str = "INSERT INTO layer_decisions (turn_seq, tenant, layer, status, reason) VALUES (?1, ?2, ?3, ?4, ?5)";
const INSERT_PROVIDER: &str =
    "INSERT INTO provider_records (turn_seq, tenant, provider, status, observed_at_ms, record)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
/// Stored once per tenant and fingerprint: a second write only moves the expiry later.
const UPSERT_RETAINED: &str =
    "INSERT INTO retained_content (tenant, fingerprint, ciphertext, expires_at_ms)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (tenant, fingerprint) DO UPDATE SET expires_at_ms = excluded.expires_at_ms
    WHERE excluded.expires_at_ms > retained_content.expires_at_ms";
const INSERT_BUILD: &str =
    "INSERT INTO builds (digest, build) VALUES (?1, ?2) ON CONFLICT (digest) DO NOTHING";
/// A retried batch never duplicates: `(tenant, handle, sequence)` is written once.
const INSERT_HANDLE_OPERATION: &str =
    "INSERT INTO handle_operations (tenant, handle_id, sequence, at_ms, record)
    VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant, handle_id, sequence) DO NOTHING";
const PURGE_EXPIRED: &str = "DELETE FROM retained_content WHERE expires_at_ms <= ?1";
const SELECT_TURN_BY_ID: &str = "SELECT seq, tenant, record FROM turns WHERE turn_id = ?1";
const SELECT_TURN_BY_SEQ: &str = "SELECT record FROM turns WHERE seq = ?1";
const SELECT_PROVIDERS: &str =
    "SELECT record FROM provider_records WHERE turn_seq = ?1 ORDER BY rowid";
const SELECT_RETAINED: &str =
    "SELECT ciphertext FROM retained_content WHERE tenant = ?1 AND fingerprint = ?2";

/// What went wrong in the trace store. Messages name the file and the operation; they
/// never carry record content (parse errors give only a line and column).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the folder {path} for the trace store: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the trace store {path}: {source}")]
    CreateFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the trace store {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("trace store {path}: cannot {action}: {source}")]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        source: rusqlite::Error,
    },
    #[error("trace store {path}: journal_mode=WAL did not take effect (the mode is {mode:?})")]
    NotWal { path: PathBuf, mode: String },
    #[error(
        "{path} is not a ctxd trace store (it has no schema_version table): point [trace] store at a new file or an existing trace store"
    )]
    NotATraceStore { path: PathBuf },
    #[error(
        "the trace store {path} has schema version {found}, newer than this ctxd knows ({known}): upgrade ctxd before opening it"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "the trace store {path} has schema version {found}, older than this ctxd reads ({known}): start `ctxd serve` on it once to migrate it"
    )]
    TooOld {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("trace store {path}: the {what} does not parse (line {line}, column {column})")]
    Corrupt {
        path: PathBuf,
        what: String,
        line: usize,
        column: usize,
    },
    #[error(
        "the cursor is not one this trace store issued: pass next_cursor from the previous page unchanged"
    )]
    InvalidCursor,
    #[error(
        "trace store {path}: reading retained content needs the digest key, and this reader was opened without it"
    )]
    NoRetentionKey { path: PathBuf },
    #[error(
        "trace store {path}: {attempts} commit attempts in a row failed (last: {last_error}); the writer keeps the batch and retries"
    )]
    WriteFailing {
        path: PathBuf,
        attempts: u32,
        last_error: String,
    },
    #[error(
        "trace store {path}: {traces} traces could not be written before the writer stopped (last error: {last_error})"
    )]
    NotWritten {
        path: PathBuf,
        traces: usize,
        last_error: String,
    },
    #[error("the trace writer has stopped")]
    WriterStopped,
    #[error("cannot start the trace writer thread: {0}")]
    Spawn(std::io::Error),
}

impl StoreError {
    /// Whether the store is busy (another connection holds the write lock) rather than
    /// broken.
    pub fn is_busy(&self) -> bool {
        let source = match self {
            StoreError::Sqlite { source, .. } | StoreError::Open { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

/// `map_err` helper: a SQLite failure of `action` on the store at `path`.
fn sqlite(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Sqlite {
        path,
        action,
        source,
    }
}

/// The turn record and all its provider records, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredTurn {
    pub turn: TurnRecord,
    pub providers: Vec<ProviderRecord>,
}

/// Row counts of a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreCounts {
    pub turns: u64,
    pub provider_records: u64,
    pub retained_items: u64,
}

/// How many rows one committed batch added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Turns written (a turn id already in the store is skipped, not an error).
    pub turns: u64,
    pub provider_records: u64,
    /// Handle operation records written (one already in the store is skipped).
    pub handle_operations: u64,
}

/// One entry of the trace writer's queue: a turn's rows or one handle operation.
/// Boxed, so the queue's slots stay small whatever a turn holds.
#[derive(Debug, Clone)]
pub enum Queued {
    Turn(Box<TraceRows>),
    HandleOperation(Box<HandleOperationRow>),
}

/// A handle operation record, serialized off the writer thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleOperationRow {
    pub tenant: String,
    pub handle_id: String,
    pub sequence: i64,
    pub at_ms: i64,
    /// The record as JSON.
    pub record: String,
}

impl HandleOperationRow {
    pub fn encode(record: &HandleOpRecord) -> HandleOperationRow {
        HandleOperationRow {
            tenant: record.tenant.clone(),
            handle_id: record.handle.clone(),
            sequence: i64::try_from(record.sequence).unwrap_or(i64::MAX),
            at_ms: record.at_ms,
            record: serde_json::to_string(record)
                .expect("a handle operation record always serializes"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rows: what one turn writes, serialized and sealed before it reaches the writer.

/// The rows one turn writes, serialized (and retained content sealed) off the writer
/// thread. Produced by [`RowEncoder::encode`].
#[derive(Debug, Clone)]
pub struct TraceRows {
    pub turn: TurnRow,
    pub layers: Vec<LayerRow>,
    pub providers: Vec<ProviderRow>,
    pub retained: Vec<RetainedRow>,
    /// `(digest, build JSON)`.
    pub build: Option<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct TurnRow {
    pub turn_id: String,
    pub tenant: String,
    pub project: String,
    pub build_digest: String,
    pub blocked: bool,
    pub rendered_digest: Option<String>,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// The turn record as JSON.
    pub record: String,
}

#[derive(Debug, Clone)]
pub struct LayerRow {
    pub layer: String,
    pub status: &'static str,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct ProviderRow {
    pub provider: String,
    pub status: &'static str,
    pub observed_at_ms: i64,
    /// The provider record as JSON.
    pub record: String,
}

#[derive(Debug, Clone)]
pub struct RetainedRow {
    pub fingerprint: String,
    /// Nonce (24 bytes) followed by the XChaCha20-Poly1305 ciphertext and tag.
    pub ciphertext: Vec<u8>,
    pub expires_at_ms: i64,
}

impl TraceRows {
    /// Turn record plus provider records: the unit the writer's `records` counts.
    pub fn record_count(&self) -> usize {
        1 + self.providers.len()
    }
}

/// Serializes traces into rows and seals retained content. Cheap to clone; holds the
/// derived retention key (zeroed on drop), never printed.
#[derive(Clone)]
pub struct RowEncoder {
    cipher: RetentionCipher,
}

impl fmt::Debug for RowEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RowEncoder(<key redacted>)")
    }
}

impl RowEncoder {
    pub fn new(key: &DigestKey) -> RowEncoder {
        RowEncoder {
            cipher: RetentionCipher::new(key),
        }
    }

    pub fn encode(&self, trace: &TurnTrace) -> TraceRows {
        let turn = &trace.turn;
        let record = serde_json::to_string(turn).expect("a turn record always serializes");
        TraceRows {
            turn: TurnRow {
                turn_id: turn.turn_id.clone(),
                tenant: turn.tenant.clone(),
                project: turn.project.clone(),
                build_digest: turn.build_digest.clone(),
                blocked: turn.blocked,
                rendered_digest: turn.rendered_digest.clone(),
                started_at_ms: turn.started_at_ms,
                duration_ms: i64::try_from(turn.duration_ms).unwrap_or(i64::MAX),
                record,
            },
            layers: turn
                .layers
                .iter()
                .map(|layer| LayerRow {
                    layer: layer.id.clone(),
                    status: layer.status.as_str(),
                    reason: serde_name(&layer.reason),
                })
                .collect(),
            providers: trace
                .providers
                .iter()
                .map(|provider| ProviderRow {
                    provider: provider.provider.clone(),
                    status: provider.status.as_str(),
                    observed_at_ms: provider.observed_at_ms,
                    record: serde_json::to_string(provider)
                        .expect("a provider record always serializes"),
                })
                .collect(),
            retained: trace
                .retained
                .iter()
                .map(|retained| RetainedRow {
                    fingerprint: retained.fingerprint.clone(),
                    ciphertext: self.cipher.seal(
                        &turn.tenant,
                        &retained.fingerprint,
                        &retained.item,
                    ),
                    expires_at_ms: retained.expires_at_ms,
                })
                .collect(),
            build: trace.build.clone(),
        }
    }
}

/// The name serde gives a unit enum variant (`PROVIDER_ITEMS`).
fn serde_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// XChaCha20-Poly1305 under `DigestKey::derive("ctxd-retention")`.
#[derive(Clone)]
struct RetentionCipher(XChaCha20Poly1305);

impl RetentionCipher {
    fn new(key: &DigestKey) -> RetentionCipher {
        let derived = key.derive(RETENTION_PURPOSE);
        RetentionCipher(XChaCha20Poly1305::new(Key::from_slice(&derived)))
    }

    /// Nonce ‖ ciphertext of the item's canonical JSON, bound to tenant and fingerprint.
    fn seal(&self, tenant: &str, fingerprint: &str, item: &Item) -> Vec<u8> {
        let plaintext = canonical_json_of(item);
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).expect("the operating system provides randomness");
        let aad = associated_data(tenant, fingerprint);
        let sealed = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("XChaCha20-Poly1305 seals any message under 256 GiB");
        let mut blob = Vec::with_capacity(NONCE_BYTES + sealed.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&sealed);
        blob
    }

    /// The item, if the blob opens under this tenant and fingerprint, parses, and its
    /// canonical digest is the fingerprint. `None` for anything tampered with.
    fn open(&self, tenant: &str, fingerprint: &str, blob: &[u8]) -> Option<Item> {
        if blob.len() < NONCE_BYTES + TAG_BYTES {
            return None;
        }
        let (nonce, sealed) = blob.split_at(NONCE_BYTES);
        let aad = associated_data(tenant, fingerprint);
        let plaintext = self
            .0
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .ok()?;
        let item: Item = serde_json::from_slice(&plaintext).ok()?;
        (canonical_digest(&item) == fingerprint).then_some(item)
    }
}

/// Length-prefixed tenant and fingerprint, so no two pairs give the same bytes.
fn associated_data(tenant: &str, fingerprint: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + tenant.len() + fingerprint.len());
    aad.extend_from_slice(b"ctxd-retained-v1");
    for part in [tenant, fingerprint] {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

// ---------------------------------------------------------------------------------------
// The write side.

/// The write connection. Owned by one thread (the trace writer); not `Sync`.
pub struct TraceStore {
    conn: Connection,
    path: PathBuf,
    encoder: RowEncoder,
    /// Build digests already in the store, so the (large) build JSON is not bound and
    /// re-inserted with every turn. Bounded: cleared when full.
    known_builds: HashSet<String>,
}

impl fmt::Debug for TraceStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TraceStore {
    /// Creates parent dirs, opens (file mode 0600 on create), WAL
    /// (`journal_mode=WAL`, `synchronous=NORMAL`), busy_timeout, runs migrations.
    /// Opening an up-to-date store again changes nothing.
    pub fn open(path: &Path, key: &DigestKey) -> Result<TraceStore, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        create_private_file(path).map_err(|source| StoreError::CreateFile {
            path: path.to_path_buf(),
            source,
        })?;
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite(path, "set busy_timeout"))?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(sqlite(path, "switch to WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NotWal {
                path: path.to_path_buf(),
                mode,
            });
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sqlite(path, "set synchronous=NORMAL"))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&mut conn, path)?;
        Ok(TraceStore {
            conn,
            path: path.to_path_buf(),
            encoder: RowEncoder::new(key),
            known_builds: HashSet::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One transaction for the whole batch; prepared statements.
    pub fn write_batch(&mut self, traces: &[TurnTrace]) -> Result<(), StoreError> {
        let rows: Vec<TraceRows> = traces.iter().map(|t| self.encoder.encode(t)).collect();
        self.write_rows(&rows).map(|_| ())
    }

    /// Writes encoded rows in one `BEGIN IMMEDIATE` transaction. A turn id already in
    /// the store is skipped with its rows, so a retried batch never duplicates.
    pub fn write_rows(&mut self, batch: &[TraceRows]) -> Result<Written, StoreError> {
        let turns: Vec<&TraceRows> = batch.iter().collect();
        self.write_all(&turns, &[])
    }

    /// Writes a writer batch — turns and handle operations — in one transaction.
    pub fn write_queued(&mut self, batch: &[Queued]) -> Result<Written, StoreError> {
        let mut turns = Vec::with_capacity(batch.len());
        let mut operations = Vec::new();
        for queued in batch {
            match queued {
                Queued::Turn(rows) => turns.push(&**rows),
                Queued::HandleOperation(row) => operations.push(&**row),
            }
        }
        self.write_all(&turns, &operations)
    }

    fn write_all(
        &mut self,
        batch: &[&TraceRows],
        operations: &[&HandleOperationRow],
    ) -> Result<Written, StoreError> {
        let path = self.path.clone();
        let mut written = Written::default();
        let mut new_builds = Vec::new();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite(&path, "begin a write transaction"))?;
        {
            let prepare = |sql| {
                tx.prepare_cached(sql)
                    .map_err(sqlite(&path, "prepare a write"))
            };
            let mut insert_turn = prepare(INSERT_TURN)?;
            let mut insert_operation = prepare(INSERT_HANDLE_OPERATION)?;
            let mut insert_layer = prepare(INSERT_LAYER)?;
            let mut insert_provider = prepare(INSERT_PROVIDER)?;
            let mut upsert_retained = prepare(UPSERT_RETAINED)?;
            let mut insert_build = prepare(INSERT_BUILD)?;
            for row in operations {
                written.handle_operations += insert_operation
                    .execute(params![
                        row.tenant,
                        row.handle_id,
                        row.sequence,
                        row.at_ms,
                        row.record
                    ])
                    .map_err(sqlite(&path, "insert a handle operation"))?
                    as u64;
            }
            for &rows in batch {
                let turn = &rows.turn;
                let inserted = insert_turn
                    .execute(params![
                        turn.turn_id,
                        turn.tenant,
                        turn.project,
                        turn.build_digest,
                        turn.blocked,
                        turn.rendered_digest,
                        turn.started_at_ms,
                        turn.duration_ms,
                        turn.record,
                    ])
                    .map_err(sqlite(&path, "insert a turn"))?;
                if inserted == 0 {
                    continue;
                }
                let seq = tx.last_insert_rowid();
                written.turns += 1;
                for layer in &rows.layers {
                    insert_layer
                        .execute(params![
                            seq,
                            turn.tenant,
                            layer.layer,
                            layer.status,
                            layer.reason
                        ])
                        .map_err(sqlite(&path, "insert a layer decision"))?;
                }
                for provider in &rows.providers {
                    insert_provider
                        .execute(params![
                            seq,
                            turn.tenant,
                            provider.provider,
                            provider.status,
                            provider.observed_at_ms,
                            provider.record,
                        ])
                        .map_err(sqlite(&path, "insert a provider record"))?;
                    written.provider_records += 1;
                }
                for retained in &rows.retained {
                    upsert_retained
                        .execute(params![
                            turn.tenant,
                            retained.fingerprint,
                            retained.ciphertext,
                            retained.expires_at_ms,
                        ])
                        .map_err(sqlite(&path, "insert retained content"))?;
                }
                if let Some((digest, build)) = &rows.build
                    && !self.known_builds.contains(digest)
                    && !new_builds.contains(digest)
                {
                    insert_build
                        .execute(params![digest, build])
                        .map_err(sqlite(&path, "insert a build"))?;
                    new_builds.push(digest.clone());
                }
            }
        }
        tx.commit().map_err(sqlite(&path, "commit a batch"))?;
        if self.known_builds.len() + new_builds.len() > KNOWN_BUILDS_CAP {
            self.known_builds.clear();
        }
        self.known_builds.extend(new_builds);
        Ok(written)
    }

    /// Deletes retained content whose `expires_at_ms <= now_ms`; returns how many rows.
    /// (The clock is injected: callers pass now.)
    pub fn purge_expired(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        self.conn
            .prepare_cached(PURGE_EXPIRED)
            .and_then(|mut statement| statement.execute([now_ms]))
            .map_err(sqlite(&self.path, "purge expired retained content"))
    }

    #[cfg(test)]
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Creates the file with mode 0600 when it does not exist, so the database (and the
/// `-wal` and `-shm` files, which SQLite gives the database's mode) is private.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
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

/// Applies the migrations the store lacks, each in its own `BEGIN IMMEDIATE`
/// transaction (so two processes opening a new store at once apply each one once).
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
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

// ---------------------------------------------------------------------------------------
// The read side.

/// A read-only connection (`SQLITE_OPEN_READ_ONLY`, `query_only`). One per thread: wrap
/// it in a mutex or open one per worker to share it.
pub struct TraceReader {
    conn: Connection,
    path: PathBuf,
    cipher: Option<RetentionCipher>,
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("path", &self.path)
            .field("retention_key", &self.cipher.is_some())
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// `key` decrypts retained content; without it `retained` errors. The store must
    /// exist and have exactly this code's schema version.
    pub fn open(path: &Path, key: Option<&DigestKey>) -> Result<TraceReader, StoreError> {
        let open_error = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_error)?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite(path, "set busy_timeout"))?;
        conn.pragma_update(None, "query_only", true)
            .map_err(sqlite(path, "set query_only"))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        match schema_version(&conn, path)? {
            None => {
                return Err(StoreError::NotATraceStore {
                    path: path.to_path_buf(),
                });
            }
            Some(found) if found > SCHEMA_VERSION => {
                return Err(StoreError::TooNew {
                    path: path.to_path_buf(),
                    found,
                    known: SCHEMA_VERSION,
                });
            }
            Some(found) if found < SCHEMA_VERSION => {
                return Err(StoreError::TooOld {
                    path: path.to_path_buf(),
                    found,
                    known: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
        }
        Ok(TraceReader {
            conn,
            path: path.to_path_buf(),
            cipher: key.map(RetentionCipher::new),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Turns matching every filter, newest first, each with all its provider records.
    pub fn search(&self, query: &SearchQuery) -> Result<SearchPage, StoreError> {
        let (seqs, next_cursor) = query::matching_seqs(&self.conn, &self.path, query)?;
        let mut traces = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let record: Option<String> = self
                .conn
                .prepare_cached(SELECT_TURN_BY_SEQ)
                .and_then(|mut statement| statement.query_row([seq], |row| row.get(0)).optional())
                .map_err(sqlite(&self.path, "read a turn"))?;
            // Only a concurrent deletion could remove it; there is none today.
            let Some(record) = record else { continue };
            traces.push(self.stored_turn(seq, &record)?);
        }
        Ok(SearchPage {
            traces,
            next_cursor,
        })
    }

    /// `tenant: None` is for operator tools (CLI); the API always passes `Some` — another
    /// tenant's turn is `None`.
    pub fn turn(
        &self,
        tenant: Option<&str>,
        turn_id: &str,
    ) -> Result<Option<StoredTurn>, StoreError> {
        let row: Option<(i64, String, String)> = self
            .conn
            .prepare_cached(SELECT_TURN_BY_ID)
            .and_then(|mut statement| {
                statement
                    .query_row([turn_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .optional()
            })
            .map_err(sqlite(&self.path, "read a turn"))?;
        match row {
            Some((seq, owner, record)) if tenant.is_none_or(|tenant| tenant == owner) => {
                self.stored_turn(seq, &record).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn stored_turn(&self, seq: i64, record: &str) -> Result<StoredTurn, StoreError> {
        let turn: TurnRecord = self.parse(record, || format!("turn record at seq {seq}"))?;
        let mut statement = self
            .conn
            .prepare_cached(SELECT_PROVIDERS)
            .map_err(sqlite(&self.path, "read provider records"))?;
        let records = statement
            .query_map([seq], |row| row.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sqlite(&self.path, "read provider records"))?;
        let providers = records
            .iter()
            .map(|record| self.parse(record, || format!("a provider record of seq {seq}")))
            .collect::<Result<_, _>>()?;
        Ok(StoredTurn { turn, providers })
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        json: &str,
        what: impl FnOnce() -> String,
    ) -> Result<T, StoreError> {
        serde_json::from_str(json).map_err(|error| StoreError::Corrupt {
            path: self.path.clone(),
            what: what(),
            line: error.line(),
            column: error.column(),
        })
    }

    /// Retained items by fingerprint (decrypted, and only if the item's canonical digest
    /// equals its fingerprint — a tampered row is left out), for one tenant.
    pub fn retained(
        &self,
        tenant: &str,
        fingerprints: &[&str],
    ) -> Result<HashMap<String, Item>, StoreError> {
        let Some(cipher) = &self.cipher else {
            return Err(StoreError::NoRetentionKey {
                path: self.path.clone(),
            });
        };
        let mut statement = self
            .conn
            .prepare_cached(SELECT_RETAINED)
            .map_err(sqlite(&self.path, "read retained content"))?;
        let mut found = HashMap::new();
        let mut refused = 0usize;
        for &fingerprint in fingerprints {
            if found.contains_key(fingerprint) {
                continue;
            }
            let blob: Option<Vec<u8>> = statement
                .query_row([tenant, fingerprint], |row| row.get(0))
                .optional()
                .map_err(sqlite(&self.path, "read retained content"))?;
            let Some(blob) = blob else { continue };
            match cipher.open(tenant, fingerprint, &blob) {
                Some(item) => {
                    found.insert(fingerprint.to_owned(), item);
                }
                None => refused += 1,
            }
        }
        if refused > 0 {
            tracing::warn!(
                store = %self.path.display(),
                refused,
                "retained content failed verification and was left out"
            );
        }
        Ok(found)
    }

    /// One page of a handle's operation records for `tenant`, in sequence order, after
    /// sequence `after` (0 for the first page). Another tenant's handle has none.
    pub fn handle_operations(
        &self,
        tenant: &str,
        handle: &str,
        after: u64,
        limit: usize,
    ) -> Result<query::HandleOperationsPage<HandleOpRecord>, StoreError> {
        let page = query::handle_operations(&self.conn, &self.path, tenant, handle, after, limit)?;
        let operations = page
            .operations
            .iter()
            .map(|record| self.parse(record, || "a handle operation record".to_owned()))
            .collect::<Result<_, _>>()?;
        Ok(query::HandleOperationsPage {
            operations,
            next_after: page.next_after,
        })
    }

    /// The Build JSON recorded for a build digest.
    pub fn build(&self, digest: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT build FROM builds WHERE digest = ?1")
            .and_then(|mut statement| statement.query_row([digest], |row| row.get(0)).optional())
            .map_err(sqlite(&self.path, "read a build"))
    }

    /// Rows in `turns`, `provider_records` and `retained_content`.
    pub fn counts(&self) -> Result<StoreCounts, StoreError> {
        let count = |table: &str| -> Result<u64, StoreError> {
            self.conn
                .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                    row.get::<_, i64>(0)
                })
                .map(|n| n as u64)
                .map_err(sqlite(&self.path, "count rows"))
        };
        Ok(StoreCounts {
            turns: count("turns")?,
            provider_records: count("provider_records")?,
            retained_items: count("retained_content")?,
        })
    }

    #[cfg(test)]
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Trace builders for the tests of the store, the writer, search and the CLI.
#[cfg(test)]
pub(crate) mod testing {
    use crate::contract::{
        Currentness, Item, LayerReason, LayerStatus, ProviderStatus, Source, VersionSource,
    };
    use crate::digest::canonical_digest;
    use crate::trace::DigestKey;
    use crate::trace::record::{
        InputDigest, ItemRecord, LayerDecisionRecord, PROVIDER_RECORD_KIND, ProviderRecord,
        RetainedItem, RetentionRecord, SelectionRecord, TURN_RECORD_KIND, TurnRecord, TurnTrace,
        material_digest,
    };

    pub(crate) fn key() -> DigestKey {
        DigestKey::from_bytes(b"test-key-test-key-test-key-test-key!".to_vec()).unwrap()
    }

    /// What one provider of a test turn answered.
    #[derive(Debug, Clone)]
    pub(crate) struct ProviderSpec {
        pub provider: String,
        pub status: ProviderStatus,
        /// `none`, `digest` or `content`.
        pub retention: &'static str,
        pub items: Vec<Item>,
        /// The lookup value: only its keyed digest reaches the record.
        pub value: String,
    }

    impl ProviderSpec {
        pub(crate) fn new(provider: &str, status: ProviderStatus) -> ProviderSpec {
            ProviderSpec {
                provider: provider.to_owned(),
                status,
                retention: "digest",
                items: Vec::new(),
                value: "CUST-0001".to_owned(),
            }
        }

        pub(crate) fn items(mut self, items: Vec<Item>) -> ProviderSpec {
            self.items = items;
            self
        }

        pub(crate) fn retention(mut self, retention: &'static str) -> ProviderSpec {
            self.retention = retention;
            self
        }

        pub(crate) fn value(mut self, value: &str) -> ProviderSpec {
            self.value = value.to_owned();
            self
        }
    }

    pub(crate) fn item(id: &str, title: &str, content: &str) -> Item {
        let mut metadata = serde_json::Map::new();
        metadata.insert(
            "plan".to_owned(),
            serde_json::json!(format!("plan-of-{id}")),
        );
        Item {
            id: id.to_owned(),
            title: Some(title.to_owned()),
            content: content.to_owned(),
            metadata,
            updated_at: Some("2026-10-08".to_owned()),
        }
    }

    /// A turn shaped as `trace::capture` shapes one: locators, fingerprints and digests
    /// instead of ids and values, retained items only under `retention = "content"`.
    pub(crate) fn turn(
        key: &DigestKey,
        turn_id: &str,
        tenant: &str,
        started_at_ms: i64,
        providers: &[ProviderSpec],
        layers: &[(&str, LayerStatus)],
    ) -> TurnTrace {
        let ttl_ms: u64 = 7 * 24 * 3_600_000;
        let mut records = Vec::new();
        let mut retained = Vec::new();
        let mut selections = Vec::new();
        for spec in providers {
            let fingerprints: Vec<String> = spec.items.iter().map(canonical_digest).collect();
            let keep = spec.retention != "none";
            let content = spec.retention == "content" && !spec.items.is_empty();
            if content {
                for (item, fingerprint) in spec.items.iter().zip(&fingerprints) {
                    retained.push(RetainedItem {
                        fingerprint: fingerprint.clone(),
                        item: item.clone(),
                        expires_at_ms: started_at_ms + ttl_ms as i64,
                    });
                }
            }
            let items: Vec<ItemRecord> = if keep {
                spec.items
                    .iter()
                    .zip(&fingerprints)
                    .map(|(item, fingerprint)| ItemRecord {
                        locator: key.locator(&spec.provider, &item.id),
                        fingerprint: fingerprint.clone(),
                        bytes: item.content.len(),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            for item in &items {
                selections.push(SelectionRecord {
                    layer: format!("{}-layer", spec.provider),
                    provider: Some(spec.provider.clone()),
                    locator: Some(item.locator.clone()),
                    fingerprint: Some(item.fingerprint.clone()),
                    bytes: item.bytes,
                    truncated: false,
                    handle: None,
                });
            }
            let refs: Vec<&str> = fingerprints.iter().map(String::as_str).collect();
            records.push(ProviderRecord {
                kind: PROVIDER_RECORD_KIND.to_owned(),
                provider: spec.provider.clone(),
                contract: "context-provider.v1".to_owned(),
                binding_revision: Some("2026-11-30.1".to_owned()),
                binding_digest: Some(format!("sha256:{}", "b".repeat(64))),
                provider_type: Some("http".to_owned()),
                version: Some("5.0.1".to_owned()),
                version_source: Some(VersionSource::Response),
                request_digest: key.request_digest(&spec.provider, "customerId", &spec.value),
                lookup_key: "customerId".to_owned(),
                invoked: true,
                observed_at: "2026-11-30T10:53:20.123Z".to_owned(),
                observed_at_ms: started_at_ms + 5,
                upstream_revision: Some("crm-r9".to_owned()),
                currentness: spec.status.is_success().then_some(Currentness::Current),
                item_count: spec.items.len(),
                material_digest: (keep && spec.status.is_success()).then(|| material_digest(&refs)),
                items,
                duration_ms: Some(12),
                status: spec.status,
                detail: None,
                source: Some(Source::Live),
                retention: RetentionRecord {
                    policy: spec.retention.to_owned(),
                    ttl_ms,
                    content_retained: content,
                },
            });
        }
        let value = providers.first().map_or("CUST-0001", |p| p.value.as_str());
        TurnTrace {
            turn: TurnRecord {
                kind: TURN_RECORD_KIND.to_owned(),
                turn_id: turn_id.to_owned(),
                tenant: tenant.to_owned(),
                project: "support".to_owned(),
                project_version: "1.4.0".to_owned(),
                build_digest: format!("sha256:{}", "a".repeat(64)),
                binding_revision: Some("2026-11-30.1".to_owned()),
                binding_digest: Some(format!("sha256:{}", "b".repeat(64))),
                profile: "default".to_owned(),
                objective: Some("billing".to_owned()),
                consumer: Some("support-agent".to_owned()),
                inputs: vec![InputDigest {
                    key: "customerId".to_owned(),
                    digest: key.input_digest("customerId", value),
                }],
                budget_max_bytes: 8000,
                deadline_ms: 800,
                mode: Source::Live,
                layers: layers
                    .iter()
                    .map(|(id, status)| LayerDecisionRecord {
                        id: (*id).to_owned(),
                        status: *status,
                        reason: match status {
                            LayerStatus::Included => LayerReason::ProviderItems,
                            LayerStatus::Empty => LayerReason::NotFound,
                            LayerStatus::Unknown => LayerReason::ProviderInputNotProvided,
                            LayerStatus::Unavailable => LayerReason::ProviderFailed,
                            LayerStatus::NotRequested => LayerReason::ObjectiveOutOfScope,
                            LayerStatus::Excluded => LayerReason::ProfileExcluded,
                        },
                        required: false,
                        providers: Vec::new(),
                        missing_inputs: Vec::new(),
                        currentness: None,
                    })
                    .collect(),
                selections,
                cuts: Vec::new(),
                blocked: false,
                blocking_layers: Vec::new(),
                rendered_digest: Some(format!("sha256:{}", "c".repeat(64))),
                rendered_bytes: 1234,
                nonce: "0123456789abcdef".to_owned(),
                started_at: "2026-11-30T10:53:20.000Z".to_owned(),
                started_at_ms,
                duration_ms: 15,
            },
            providers: records,
            retained,
            build: Some((
                format!("sha256:{}", "a".repeat(64)),
                r#"{"id":"support","version":"1.4.0"}"#.to_owned(),
            )),
        }
    }

    /// A turn with one provider per `(provider, status)` and one layer per
    /// `(layer, status)`; successful providers answer one item.
    pub(crate) fn simple(
        key: &DigestKey,
        turn_id: &str,
        tenant: &str,
        started_at_ms: i64,
        providers: &[(&str, ProviderStatus)],
        layers: &[(&str, LayerStatus)],
    ) -> TurnTrace {
        let specs: Vec<ProviderSpec> = providers
            .iter()
            .map(|(provider, status)| {
                let spec = ProviderSpec::new(provider, *status);
                if *status == ProviderStatus::Ok {
                    let id = format!("{turn_id}-{provider}");
                    spec.items(vec![item(&id, "title", "content")])
                } else {
                    spec
                }
            })
            .collect();
        turn(key, turn_id, tenant, started_at_ms, &specs, layers)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{self, ProviderSpec, item, key};
    use super::*;
    use crate::contract::{LayerStatus, ProviderStatus};

    fn store_in(dir: &Path) -> (TraceStore, PathBuf) {
        let path = dir.join("traces.db");
        (TraceStore::open(&path, &key()).unwrap(), path)
    }

    fn simple(turn_id: &str, tenant: &str, providers: &[(&str, ProviderStatus)]) -> TurnTrace {
        testing::simple(
            &key(),
            turn_id,
            tenant,
            1_000,
            providers,
            &[("profile", LayerStatus::Included)],
        )
    }

    #[test]
    fn open_creates_a_private_wal_store_and_reopening_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/deeper/traces.db");
        let store = TraceStore::open(&path, &key()).unwrap();
        let mode: String = store
            .connection()
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let synchronous: i64 = store
            .connection()
            .query_row("PRAGMA synchronous", [], |row| row.get(0))
            .unwrap();
        assert_eq!(synchronous, 1, "NORMAL");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for file in [
                path.clone(),
                PathBuf::from(format!("{}-wal", path.display())),
            ] {
                let mode = std::fs::metadata(&file).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{}", file.display());
            }
        }
        drop(store);
        let again = TraceStore::open(&path, &key()).unwrap();
        let versions: Vec<i64> = again
            .connection()
            .prepare("SELECT version FROM schema_version ORDER BY version")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
        assert!(TraceReader::open(&path, None).is_ok());
    }

    #[test]
    fn a_store_newer_than_the_code_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (store, path) = store_in(dir.path());
        store
            .connection()
            .execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, 0)",
                [SCHEMA_VERSION + 1],
            )
            .unwrap();
        drop(store);
        let error = TraceStore::open(&path, &key()).unwrap_err();
        assert!(matches!(error, StoreError::TooNew { found, .. } if found == SCHEMA_VERSION + 1));
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("upgrade ctxd"), "{message}");
        assert!(matches!(
            TraceReader::open(&path, None).unwrap_err(),
            StoreError::TooNew { .. }
        ));
    }

    #[test]
    fn a_database_that_is_not_a_trace_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orders.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE orders (id TEXT)")
            .unwrap();
        assert!(matches!(
            TraceStore::open(&path, &key()).unwrap_err(),
            StoreError::NotATraceStore { .. }
        ));
        assert!(matches!(
            TraceReader::open(&path, None).unwrap_err(),
            StoreError::NotATraceStore { .. }
        ));
        let missing = dir.path().join("missing.db");
        let error = TraceReader::open(&missing, None).unwrap_err();
        assert!(matches!(error, StoreError::Open { .. }));
        assert!(error.to_string().contains("missing.db"), "{error}");
        assert!(!missing.exists(), "a reader never creates a store");
    }

    #[test]
    fn turns_round_trip_with_all_provider_records_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let first = simple(
            "turn-1",
            "acme",
            &[
                ("customer-data", ProviderStatus::Ok),
                ("orders", ProviderStatus::Timeout),
                ("tickets", ProviderStatus::NotFound),
            ],
        );
        let second = simple("turn-2", "globex", &[("orders", ProviderStatus::Ok)]);
        store.write_batch(&[first.clone(), second.clone()]).unwrap();

        let reader = TraceReader::open(&path, None).unwrap();
        let stored = reader.turn(Some("acme"), "turn-1").unwrap().unwrap();
        assert_eq!(stored.turn, first.turn);
        assert_eq!(stored.providers, first.providers);
        assert_eq!(
            reader.turn(None, "turn-2").unwrap().unwrap().turn,
            second.turn
        );
        assert!(
            reader.turn(Some("acme"), "turn-2").unwrap().is_none(),
            "another tenant's turn is not found"
        );
        assert!(reader.turn(None, "turn-3").unwrap().is_none());
        assert_eq!(
            reader.counts().unwrap(),
            StoreCounts {
                turns: 2,
                provider_records: 4,
                retained_items: 0
            }
        );
        assert_eq!(
            reader.build(&first.build.as_ref().unwrap().0).unwrap(),
            Some(first.build.clone().unwrap().1)
        );
        assert_eq!(reader.build("sha256:none").unwrap(), None);
    }

    #[test]
    fn a_turn_written_twice_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let trace = simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)]);
        let rows = store.encoder.encode(&trace);
        let written = store.write_rows(&[rows.clone(), rows.clone()]).unwrap();
        assert_eq!(
            written,
            Written {
                turns: 1,
                provider_records: 1,
                handle_operations: 0,
            }
        );
        assert_eq!(store.write_rows(&[rows]).unwrap(), Written::default());
        let counts = TraceReader::open(&path, None).unwrap().counts().unwrap();
        assert_eq!((counts.turns, counts.provider_records), (1, 1));
    }

    #[test]
    fn a_failed_batch_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        store
            .connection()
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE INSERT ON provider_records WHEN NEW.provider = 'broken'
                 BEGIN SELECT RAISE(ABORT, 'refused'); END;",
            )
            .unwrap();
        let good = simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)]);
        let bad = simple("turn-2", "acme", &[("broken", ProviderStatus::Ok)]);
        let error = store.write_batch(&[good, bad]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("cannot insert a provider record"),
            "{error}"
        );
        let counts = TraceReader::open(&path, None).unwrap().counts().unwrap();
        assert_eq!(counts, StoreCounts::default());
    }

    fn retained_trace(
        turn_id: &str,
        tenant: &str,
        items: Vec<Item>,
        started_at_ms: i64,
    ) -> TurnTrace {
        testing::turn(
            &key(),
            turn_id,
            tenant,
            started_at_ms,
            &[ProviderSpec::new("customer-data", ProviderStatus::Ok)
                .items(items)
                .retention("content")],
            &[],
        )
    }

    fn expiry(store: &TraceStore, tenant: &str, fingerprint: &str) -> i64 {
        store
            .connection()
            .query_row(
                "SELECT expires_at_ms FROM retained_content WHERE tenant = ?1 AND fingerprint = ?2",
                [tenant, fingerprint],
                |row| row.get(0),
            )
            .unwrap()
    }

    #[test]
    fn retained_content_is_stored_once_per_tenant_and_only_extended() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let record = item("CUST-1042", "Account", "Enterprise plan");
        let fingerprint = canonical_digest(&record);
        let mut later = retained_trace("turn-1", "acme", vec![record.clone()], 0);
        later.retained[0].expires_at_ms = 5_000;
        store.write_batch(&[later]).unwrap();
        let ciphertext_before: Vec<u8> = store
            .connection()
            .query_row("SELECT ciphertext FROM retained_content", [], |row| {
                row.get(0)
            })
            .unwrap();

        let mut earlier = retained_trace("turn-2", "acme", vec![record.clone()], 0);
        earlier.retained[0].expires_at_ms = 3_000;
        store.write_batch(&[earlier]).unwrap();
        assert_eq!(
            expiry(&store, "acme", &fingerprint),
            5_000,
            "never shortened"
        );

        let mut latest = retained_trace("turn-3", "acme", vec![record.clone()], 0);
        latest.retained[0].expires_at_ms = 9_000;
        let other_tenant = retained_trace("turn-4", "globex", vec![record.clone()], 0);
        store.write_batch(&[latest, other_tenant]).unwrap();
        assert_eq!(expiry(&store, "acme", &fingerprint), 9_000, "extended");
        let ciphertext_after: Vec<u8> = store
            .connection()
            .query_row(
                "SELECT ciphertext FROM retained_content WHERE tenant = 'acme'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(
            ciphertext_before, ciphertext_after,
            "the first copy is kept"
        );

        let reader = TraceReader::open(&path, Some(&key())).unwrap();
        assert_eq!(
            reader.counts().unwrap().retained_items,
            2,
            "once per tenant"
        );
        let found = reader
            .retained("acme", &[fingerprint.as_str(), "sha256:absent"])
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[&fingerprint], record);
        assert!(matches!(
            TraceReader::open(&path, None)
                .unwrap()
                .retained("acme", &[&fingerprint]),
            Err(StoreError::NoRetentionKey { .. })
        ));
        let wrong_key = DigestKey::from_bytes(vec![9u8; 32]).unwrap();
        let other = TraceReader::open(&path, Some(&wrong_key)).unwrap();
        assert!(other.retained("acme", &[&fingerprint]).unwrap().is_empty());
    }

    #[test]
    fn tampered_retained_rows_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let a = item("CUST-1", "A", "first");
        let b = item("CUST-2", "B", "second");
        let c = item("CUST-3", "C", "third");
        let (fa, fb, fc) = (
            canonical_digest(&a),
            canonical_digest(&b),
            canonical_digest(&c),
        );
        store
            .write_batch(&[retained_trace("turn-1", "acme", vec![a, b, c.clone()], 0)])
            .unwrap();
        let conn = store.connection();
        // Moved to another tenant.
        conn.execute(
            "UPDATE retained_content SET tenant = 'globex' WHERE fingerprint = ?1",
            [&fa],
        )
        .unwrap();
        // One ciphertext byte flipped.
        conn.execute(
            "UPDATE retained_content SET ciphertext = CAST(substr(ciphertext, 1, 30) || X'00' || substr(ciphertext, 32) AS BLOB) WHERE fingerprint = ?1",
            [&fb],
        )
        .unwrap();
        // A validly sealed item under a fingerprint that is not its digest.
        let forged = RetentionCipher::new(&key()).seal("acme", "sha256:forged", &c);
        conn.execute(
            "INSERT INTO retained_content (tenant, fingerprint, ciphertext, expires_at_ms) VALUES ('acme', 'sha256:forged', ?1, 0)",
            [forged],
        )
        .unwrap();
        let reader = TraceReader::open(&path, Some(&key())).unwrap();
        let found = reader
            .retained("acme", &[&fa, &fb, &fc, "sha256:forged"])
            .unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), [&fc]);
        assert!(reader.retained("globex", &[&fa]).unwrap().is_empty());
    }

    #[test]
    fn purge_deletes_content_expired_at_or_before_now() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let mut trace = retained_trace(
            "turn-1",
            "acme",
            vec![
                item("A-1", "a", "a"),
                item("A-2", "b", "b"),
                item("A-3", "c", "c"),
            ],
            0,
        );
        for (retained, expires) in trace.retained.iter_mut().zip([100, 200, 300]) {
            retained.expires_at_ms = expires;
        }
        store.write_batch(&[trace]).unwrap();
        assert_eq!(store.purge_expired(99).unwrap(), 0);
        assert_eq!(store.purge_expired(200).unwrap(), 2, "inclusive");
        assert_eq!(store.purge_expired(200).unwrap(), 0);
        let counts = TraceReader::open(&path, None).unwrap().counts().unwrap();
        assert_eq!(counts.retained_items, 1);
        assert_eq!(counts.turns, 1, "records outlive their content");
        let plan = plan_of(store.connection(), &PURGE_EXPIRED.replace("?1", "0"));
        assert!(
            plan.iter()
                .any(|line| line.contains("retained_content_by_expiry")),
            "{plan:?}"
        );
    }

    fn plan_of(conn: &Connection, sql: &str) -> Vec<String> {
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        statement
            .query_map([], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn the_reader_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        store
            .write_batch(&[simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)])])
            .unwrap();
        let reader = TraceReader::open(&path, None).unwrap();
        for sql in [
            "DELETE FROM turns",
            "INSERT INTO builds (digest, build) VALUES ('x', 'y')",
            "CREATE TABLE evil (x)",
        ] {
            assert!(reader.connection().execute_batch(sql).is_err(), "{sql}");
        }
        assert_eq!(reader.counts().unwrap().turns, 1);
    }

    #[test]
    fn a_corrupt_record_is_an_error_without_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        store
            .write_batch(&[simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)])])
            .unwrap();
        store
            .connection()
            .execute(
                "UPDATE turns SET record = '{\"kind\": \"SECRET-LEAK-0042\"'",
                [],
            )
            .unwrap();
        let error = TraceReader::open(&path, None)
            .unwrap()
            .turn(None, "turn-1")
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("turn record at seq 1"), "{message}");
        assert!(message.contains("traces.db"), "{message}");
        assert!(!message.contains("SECRET-LEAK"), "{message}");
    }

    /// Simulates a crash: the store is forgotten with committed batches in the WAL (no
    /// close, no checkpoint). The next open recovers every committed turn.
    #[test]
    fn committed_batches_survive_an_abandoned_connection() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        for batch in 0..3 {
            let traces: Vec<TurnTrace> = (0..10)
                .map(|i| {
                    simple(
                        &format!("turn-{batch}-{i}"),
                        "acme",
                        &[
                            ("orders", ProviderStatus::Ok),
                            ("crm", ProviderStatus::Timeout),
                        ],
                    )
                })
                .collect();
            store.write_batch(&traces).unwrap();
        }
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "the batches sit in the WAL"
        );
        std::mem::forget(store);
        let reopened = TraceStore::open(&path, &key()).unwrap();
        let check: String = reopened
            .connection()
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let counts = TraceReader::open(&path, None).unwrap().counts().unwrap();
        assert_eq!((counts.turns, counts.provider_records), (30, 60));
    }

    /// Strings that must never reach the file in clear: lookup values, record ids,
    /// titles, content, metadata — retained or not — and a secret.
    const NEEDLES: &[&str] = &[
        "LOOKUPVALUE-7781",
        "LOOKUPVALUE-9902",
        "RECORDID-ZEBRA-1",
        "RECORDID-OKAPI-2",
        "TITLE-NARWHAL-3",
        "TITLE-AXOLOTL-4",
        "CONTENT-QUOKKA-5",
        "CONTENT-PANGOLIN-6",
        "plan-of-RECORDID",
        "sk_live_SECRETTOKEN0123456789",
    ];

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
    }

    fn scan(files: &[PathBuf]) -> Vec<String> {
        let mut found = Vec::new();
        for file in files {
            let bytes = std::fs::read(file).unwrap_or_default();
            for needle in NEEDLES {
                if contains(&bytes, needle) {
                    found.push(format!("{needle} in {}", file.display()));
                }
            }
        }
        found
    }

    #[test]
    fn the_store_file_never_holds_values_secrets_or_content_in_clear() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let files = [
            path.clone(),
            PathBuf::from(format!("{}-wal", path.display())),
            PathBuf::from(format!("{}-shm", path.display())),
        ];
        let retained_items = vec![item(
            "RECORDID-ZEBRA-1",
            "TITLE-NARWHAL-3",
            "CONTENT-QUOKKA-5 sk_live_SECRETTOKEN0123456789",
        )];
        let digest_items = vec![item(
            "RECORDID-OKAPI-2",
            "TITLE-AXOLOTL-4",
            "CONTENT-PANGOLIN-6",
        )];
        let traces: Vec<TurnTrace> = (0..50)
            .map(|i| {
                testing::turn(
                    &key(),
                    &format!("turn-{i}"),
                    "acme",
                    1_000 + i,
                    &[
                        ProviderSpec::new("customer-data", ProviderStatus::Ok)
                            .items(retained_items.clone())
                            .retention("content")
                            .value("LOOKUPVALUE-7781"),
                        ProviderSpec::new("orders", ProviderStatus::Ok)
                            .items(digest_items.clone())
                            .retention("digest")
                            .value("LOOKUPVALUE-9902"),
                        ProviderSpec::new("tickets", ProviderStatus::Ok)
                            .items(digest_items.clone())
                            .retention("none")
                            .value("LOOKUPVALUE-9902"),
                    ],
                    &[("customer-profile", LayerStatus::Included)],
                )
            })
            .collect();
        store.write_batch(&traces).unwrap();

        let before = std::fs::read(&files[1]).unwrap();
        assert!(
            !before.is_empty(),
            "the rows are in the WAL before a checkpoint"
        );
        // Positive control: the scan does see what is stored in clear.
        assert!(contains(&before, "customer-data/item-"));
        assert!(contains(&before, "turn-49"));
        assert_eq!(scan(&files), Vec::<String>::new(), "before a checkpoint");

        let (busy, _, _): (i64, i64, i64) = store
            .connection()
            .query_row("PRAGMA wal_checkpoint(FULL)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .unwrap();
        assert_eq!(busy, 0);
        let after = std::fs::read(&path).unwrap();
        assert!(contains(&after, "customer-data/item-"), "checkpointed");
        assert_eq!(scan(&files), Vec::<String>::new(), "after a checkpoint");

        // And the sealed content still opens with the key.
        let fingerprint = canonical_digest(&retained_items[0]);
        let reader = TraceReader::open(&path, Some(&key())).unwrap();
        let found = reader.retained("acme", &[&fingerprint]).unwrap();
        assert_eq!(found[&fingerprint], retained_items[0]);
        drop(reader);
        drop(store);
        assert_eq!(scan(&files), Vec::<String>::new(), "after close");
    }

    #[test]
    fn busy_errors_are_classified() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, path) = store_in(dir.path());
        let blocker = Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut other = TraceStore::open(&path, &key());
        // Opening needs no write lock once migrated; writing does.
        let other = other.as_mut().unwrap();
        other.conn.busy_timeout(Duration::from_millis(1)).unwrap();
        let error = other
            .write_batch(&[simple("turn-1", "acme", &[])])
            .unwrap_err();
        assert!(error.is_busy(), "{error}");
        blocker.execute_batch("ROLLBACK").unwrap();
        other.write_batch(&[simple("turn-1", "acme", &[])]).unwrap();
    }

    fn operation(tenant: &str, handle: &str, sequence: u64, result: &str) -> HandleOpRecord {
        let mut record = HandleOpRecord::new(
            tenant,
            handle,
            1,
            sequence,
            "search",
            UNIX_EPOCH + Duration::from_millis(1_764_500_000_000 + sequence),
        );
        record.result = result.to_owned();
        record.bytes_inspected = 100 * sequence;
        record
    }

    #[test]
    fn handle_operations_are_listed_per_tenant_in_sequence_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        let handle = format!("h_{}", "a".repeat(32));
        let other = format!("h_{}", "b".repeat(32));
        let queued: Vec<Queued> = [
            operation("acme", &handle, 2, "ok"),
            operation("acme", &handle, 1, "ok"),
            operation("acme", &other, 1, "ok"),
            operation("globex", &handle, 1, "stale_handle"),
            operation("acme", &handle, 3, "time_limit_exceeded"),
        ]
        .iter()
        .map(|record| Queued::HandleOperation(Box::new(HandleOperationRow::encode(record))))
        .chain([Queued::Turn(Box::new(store.encoder.encode(&simple(
            "turn-1",
            "acme",
            &[],
        ))))])
        .collect();
        let written = store.write_queued(&queued).unwrap();
        assert_eq!((written.turns, written.handle_operations), (1, 5));
        // A retried batch never duplicates.
        assert_eq!(store.write_queued(&queued).unwrap(), Written::default());

        let reader = TraceReader::open(&path, None).unwrap();
        let page = reader.handle_operations("acme", &handle, 0, 10).unwrap();
        let sequences: Vec<u64> = page.operations.iter().map(|r| r.sequence).collect();
        assert_eq!(sequences, [1, 2, 3]);
        assert_eq!(page.operations[2].result, "time_limit_exceeded");
        assert_eq!(page.operations[0], operation("acme", &handle, 1, "ok"));
        assert_eq!(page.next_after, None);
        let first = reader.handle_operations("acme", &handle, 0, 2).unwrap();
        assert_eq!(first.operations.len(), 2);
        assert_eq!(first.next_after, Some(2));
        let rest = reader.handle_operations("acme", &handle, 2, 2).unwrap();
        assert_eq!(rest.operations.len(), 1);
        assert_eq!(rest.next_after, None);
        let globex = reader.handle_operations("globex", &handle, 0, 10).unwrap();
        assert_eq!(globex.operations.len(), 1, "scoped to the tenant");
        assert!(
            reader
                .handle_operations("globex", &other, 0, 10)
                .unwrap()
                .operations
                .is_empty()
        );
        let plan = plan_of(
            reader.connection(),
            "SELECT sequence, record FROM handle_operations WHERE tenant = 'a' AND handle_id = 'h' AND sequence > 0 ORDER BY sequence LIMIT 5",
        );
        assert!(
            plan.iter()
                .any(|line| line.contains("sqlite_autoindex_handle_operations")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|line| line.contains("TEMP B-TREE")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_version_1_store_is_migrated_to_handle_operations() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, path) = store_in(dir.path());
        store
            .write_batch(&[simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)])])
            .unwrap();
        // Back to what a version-1 ctxd wrote.
        store
            .connection()
            .execute_batch(
                "DROP TABLE handle_operations; DELETE FROM schema_version WHERE version = 2",
            )
            .unwrap();
        drop(store);
        assert!(matches!(
            TraceReader::open(&path, None).unwrap_err(),
            StoreError::TooOld { found: 1, .. }
        ));
        let mut store = TraceStore::open(&path, &key()).unwrap();
        let row = HandleOperationRow::encode(&operation("acme", "h_x", 1, "ok"));
        store
            .write_queued(&[Queued::HandleOperation(Box::new(row))])
            .unwrap();
        let reader = TraceReader::open(&path, None).unwrap();
        assert_eq!(reader.counts().unwrap().turns, 1, "version-1 rows are kept");
        assert_eq!(
            reader
                .handle_operations("acme", "h_x", 0, 10)
                .unwrap()
                .operations
                .len(),
            1
        );
    }
}
