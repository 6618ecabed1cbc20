//! The write side: the one write connection the trace writer thread owns, and the
//! batch transaction that commits a turn whole or not at all.

use super::error::{StoreError, sqlite};
use super::prune::{self, Pruned};
use super::rows::{HandleOperationRow, Queued, RowEncoder, TraceRows};
use super::schema::{BUSY_TIMEOUT, STATEMENT_CACHE, migrate, without_foreign_keys};
use crate::digest::keyed::DigestKey;
use crate::trace::record::TurnTrace;
use crate::trace::upkeep::StoreUsage;
use rusqlite::{Connection, OpenFlags, TransactionBehavior, params};
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// Build digests and record dictionaries remembered as written (by either store), so
/// they are not re-sent with every turn.
const KNOWN_CAP: usize = 4096;

/// Adds `new` to a bounded set of keys known to be in the store (cleared when full).
pub(super) fn remember<T: std::hash::Hash + Eq>(
    known: &mut HashSet<T>,
    new: impl IntoIterator<Item = T>,
) {
    let new: Vec<T> = new.into_iter().collect();
    if known.len() + new.len() > KNOWN_CAP {
        known.clear();
    }
    known.extend(new);
}

const INSERT_TURN: &str = "INSERT INTO turns (turn_id, tenant, project, build_digest, blocked, rendered_digest, started_at_ms, duration_ms, record, shape, provider_count)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (turn_id) DO NOTHING";
/// A shape's pairs are written once: a second write of the same pair does nothing.
const INSERT_SHAPE_KEY: &str = "INSERT INTO shape_keys (tenant, kind, name, status, shape)
    VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING";
/// Stored once per tenant and fingerprint: a second write only moves the expiry later.
const UPSERT_RETAINED: &str =
    "INSERT INTO retained_content (tenant, fingerprint, ciphertext, expires_at_ms)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (tenant, fingerprint) DO UPDATE SET expires_at_ms = excluded.expires_at_ms
    WHERE excluded.expires_at_ms > retained_content.expires_at_ms";
/// A dictionary is written once: its id is a digest of its bytes.
const INSERT_DICTIONARY: &str =
    "INSERT INTO record_dictionaries (id, bytes) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING";
const INSERT_BUILD: &str =
    "INSERT INTO builds (digest, build) VALUES (?1, ?2) ON CONFLICT (digest) DO NOTHING";
/// A retried batch never duplicates: `(tenant, handle, sequence)` is written once.
const INSERT_HANDLE_OPERATION: &str =
    "INSERT INTO handle_operations (tenant, handle_id, sequence, at_ms, record)
    VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant, handle_id, sequence) DO NOTHING";
pub(super) const PURGE_EXPIRED: &str = "DELETE FROM retained_content WHERE expires_at_ms <= ?1";

/// How many rows one committed batch added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Turns written (a turn id already in the store is skipped, not an error).
    pub(crate) turns: u64,
    pub(crate) provider_records: u64,
    /// Handle operation records written (one already in the store is skipped).
    pub(crate) handle_operations: u64,
}

/// The write connection. Owned by one thread (the trace writer); not `Sync`.
pub struct TraceStore {
    conn: Connection,
    path: PathBuf,
    encoder: RowEncoder,
    /// Build digests already in the store, so the (large) build JSON is not bound and
    /// re-inserted with every turn. Bounded: cleared when full.
    known_builds: HashSet<String>,
    /// Record dictionaries already in the store, likewise.
    known_dictionaries: HashSet<i64>,
    /// Turn shapes whose keys are already in the store, likewise.
    known_shapes: HashSet<i64>,
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
        // Only a new file can take incremental auto-vacuum: pruned pages then go back to
        // the filesystem. An older store keeps them on its free list, for new rows.
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .map_err(sqlite(path, "read the store's size"))?;
        if pages == 0 {
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
                .map_err(sqlite(path, "set auto_vacuum=INCREMENTAL"))?;
        }
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
        without_foreign_keys(&conn, path)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&mut conn, path)?;
        Ok(TraceStore {
            conn,
            path: path.to_path_buf(),
            encoder: RowEncoder::new(key),
            known_builds: HashSet::new(),
            known_dictionaries: HashSet::new(),
            known_shapes: HashSet::new(),
        })
    }

    /// One transaction for the whole batch; prepared statements.
    pub fn write_batch(&mut self, traces: &[TurnTrace]) -> Result<(), StoreError> {
        let rows: Vec<TraceRows> = traces.iter().map(|t| self.encoder.encode(t)).collect();
        self.write_rows(&rows).map(|_| ())
    }

    /// Writes encoded rows in one `BEGIN IMMEDIATE` transaction. A turn id already in
    /// the store is skipped with its rows, so a retried batch never duplicates.
    pub(crate) fn write_rows(&mut self, batch: &[TraceRows]) -> Result<Written, StoreError> {
        let turns: Vec<&TraceRows> = batch.iter().collect();
        self.write_all(&turns, &[])
    }

    /// Writes a writer batch — turns and handle operations — in one transaction.
    pub(crate) fn write_queued(&mut self, batch: &[Queued]) -> Result<Written, StoreError> {
        let (turns, operations) = Queued::split(batch);
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
        let mut new_dictionaries = Vec::new();
        let mut new_shapes = Vec::new();
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
            let mut insert_shape_key = prepare(INSERT_SHAPE_KEY)?;
            let mut upsert_retained = prepare(UPSERT_RETAINED)?;
            let mut insert_build = prepare(INSERT_BUILD)?;
            let mut insert_dictionary = prepare(INSERT_DICTIONARY)?;
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
                let dictionary = &rows.dictionary;
                if !self.known_dictionaries.contains(&dictionary.id)
                    && !new_dictionaries.contains(&dictionary.id)
                {
                    insert_dictionary
                        .execute(params![dictionary.id, &*dictionary.bytes])
                        .map_err(sqlite(&path, "insert a record dictionary"))?;
                    new_dictionaries.push(dictionary.id);
                }
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
                        rows.shape.id,
                        rows.provider_records,
                    ])
                    .map_err(sqlite(&path, "insert a turn"))?;
                if inserted == 0 {
                    continue;
                }
                written.turns += 1;
                written.provider_records += u64::from(rows.provider_records);
                let shape = &rows.shape;
                if !self.known_shapes.contains(&shape.id) && !new_shapes.contains(&shape.id) {
                    for key in &shape.keys {
                        insert_shape_key
                            .execute(params![
                                turn.tenant,
                                key.kind,
                                key.name,
                                key.status,
                                shape.id
                            ])
                            .map_err(sqlite(&path, "insert a turn shape"))?;
                    }
                    new_shapes.push(shape.id);
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
        remember(&mut self.known_builds, new_builds);
        remember(&mut self.known_dictionaries, new_dictionaries);
        remember(&mut self.known_shapes, new_shapes);
        Ok(written)
    }

    /// Deletes retained content whose `expires_at_ms <= now_ms`; returns how many rows.
    /// (The clock is injected: callers pass now.)
    pub(crate) fn purge_expired(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        self.conn
            .prepare_cached(PURGE_EXPIRED)
            .and_then(|mut statement| statement.execute([now_ms]))
            .map_err(sqlite(&self.path, "purge expired retained content"))
    }

    /// Deletes one batch of `tenant`'s records that started before `cutoff_ms`
    /// ([`prune::prune_batch`]).
    pub(crate) fn prune_batch(
        &mut self,
        tenant: &str,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<Pruned, StoreError> {
        prune::prune_batch(&mut self.conn, &self.path, tenant, cutoff_ms, batch)
    }

    /// Every tenant with records in the store.
    pub(crate) fn tenants(&self) -> Result<Vec<String>, StoreError> {
        prune::tenants(&self.conn, &self.path)
    }

    /// When the first turn still in the store started.
    pub(crate) fn oldest_started_ms(&self) -> Result<Option<i64>, StoreError> {
        prune::oldest_started_ms(&self.conn, &self.path)
    }

    /// Gives free pages back to the filesystem (new stores only, see [`Self::open`]).
    pub(crate) fn release_free_pages(&self, pages: u32) -> Result<(), StoreError> {
        prune::release_free_pages(&self.conn, &self.path, pages)
    }

    /// What the store takes and the room left on its disk.
    pub(crate) fn usage(&self) -> Result<StoreUsage, StoreError> {
        prune::usage(&self.conn, &self.path)
    }

    #[cfg(test)]
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    #[cfg(test)]
    pub(crate) fn encoder(&self) -> &RowEncoder {
        &self.encoder
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
