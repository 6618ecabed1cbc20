//! Keeping the store within its keep and its bounds: deleting a tenant's oldest turn
//! records (with their layer decisions and provider records) and handle operations in
//! small transactions, giving freed pages back, and measuring what the store takes.
//!
//! Records go oldest first in the order they were written (`seq`): a batch takes the
//! tenant's first rows while they started before the cut-off and stops at the first that
//! did not, so a check finds its work in about `batch` index entries whatever the store's
//! size. A turn written after a newer one (turns commit in the order they end) goes at
//! the next check after that newer one's cut-off.

use super::error::{StoreError, sqlite};
use crate::contract::LayerStatus;
use crate::trace::query::NameColumn;
use crate::trace::upkeep::StoreUsage;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::Path;

/// The tenant's oldest turns, in the order they were written.
const OLDEST_TURNS: &str = "SELECT seq, started_at_ms, provider_count FROM turns
    WHERE tenant = ?1 ORDER BY seq LIMIT ?2";
const DELETE_TURN: &str = "DELETE FROM turns WHERE seq = ?1";
const DELETE_PROVIDER_RECORDS: &str = "DELETE FROM provider_records WHERE turn_seq = ?1";
/// Through the `(tenant, layer, status, turn_seq)` index: one point lookup per status,
/// for each layer name of the tenant ([`NameColumn::walk`]).
const DELETE_LAYER_DECISIONS: &str = "DELETE FROM layer_decisions
    WHERE tenant = ?1 AND layer = ?9 AND status IN (?3, ?4, ?5, ?6, ?7, ?8) AND turn_seq = ?2";
const DELETE_HANDLE_OPERATIONS: &str = "DELETE FROM handle_operations WHERE rowid IN
    (SELECT rowid FROM handle_operations WHERE tenant = ?1 AND at_ms < ?2 LIMIT ?3)";
const COUNT_HANDLE_OPERATIONS: &str =
    "SELECT COUNT(*) FROM handle_operations WHERE tenant = ?1 AND at_ms < ?2";
/// Every tenant with a turn or a handle operation, one index seek per tenant.
const TENANTS: &str = "WITH RECURSIVE
    turn_tenants(tenant) AS (
        SELECT MIN(tenant) FROM turns
        UNION ALL
        SELECT (SELECT MIN(tenant) FROM turns WHERE tenant > turn_tenants.tenant)
        FROM turn_tenants WHERE turn_tenants.tenant IS NOT NULL),
    operation_tenants(tenant) AS (
        SELECT MIN(tenant) FROM handle_operations
        UNION ALL
        SELECT (SELECT MIN(tenant) FROM handle_operations WHERE tenant > operation_tenants.tenant)
        FROM operation_tenants WHERE operation_tenants.tenant IS NOT NULL)
    SELECT tenant FROM turn_tenants WHERE tenant IS NOT NULL
    UNION SELECT tenant FROM operation_tenants WHERE tenant IS NOT NULL";
/// The first turn written that is still in the store.
const OLDEST_STARTED: &str = "SELECT started_at_ms FROM turns ORDER BY seq LIMIT 1";

/// Frames the WAL may hold past `wal_autocheckpoint`: the checkpoint runs after the
/// commit that crosses it, so the file grows by that commit's pages first.
const WAL_SLACK_FRAMES: u64 = 512;
/// The WAL file's header, and each frame's before its page (the WAL format).
const WAL_HEADER_BYTES: u64 = 32;
const WAL_FRAME_HEADER_BYTES: u64 = 24;

/// What one batch deleted (or, in a dry run, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub turns: u64,
    /// The provider records of the turns deleted: rows of turns written before shapes,
    /// the records in the bodies of those since.
    pub provider_records: u64,
    /// Rows of `layer_decisions` deleted (turns written before shapes have them).
    pub layer_decisions: u64,
    pub handle_operations: u64,
}

impl Pruned {
    /// Turn records plus provider records: the records `ctxd_trace_records_total` counts.
    pub(crate) fn records(&self) -> u64 {
        self.turns + self.provider_records
    }

    pub(crate) fn add(&mut self, other: Pruned) {
        self.turns += other.turns;
        self.provider_records += other.provider_records;
        self.layer_decisions += other.layer_decisions;
        self.handle_operations += other.handle_operations;
    }
}

/// Deletes, in one `BEGIN IMMEDIATE` transaction, at most `batch` of `tenant`'s oldest
/// turns that started before `cutoff_ms` with their rows, and at most `batch` of its
/// handle operations older than it. With `dry_run` nothing is deleted and the same
/// batch is counted (its rows are not: see [`count_past`]).
pub(crate) fn prune_batch(
    conn: &mut Connection,
    path: &Path,
    tenant: &str,
    cutoff_ms: i64,
    batch: usize,
) -> Result<Pruned, StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite(path, "begin pruning"))?;
    let seqs = expired_turns(&tx, path, tenant, cutoff_ms, batch)?;
    let names = if seqs.is_empty() {
        Vec::new()
    } else {
        layer_names(&tx, path, tenant)?
    };
    let mut pruned = Pruned::default();
    {
        let mut providers = tx
            .prepare_cached(DELETE_PROVIDER_RECORDS)
            .map_err(sqlite(path, "prepare pruning"))?;
        let mut layers = tx
            .prepare_cached(DELETE_LAYER_DECISIONS)
            .map_err(sqlite(path, "prepare pruning"))?;
        let mut turns = tx
            .prepare_cached(DELETE_TURN)
            .map_err(sqlite(path, "prepare pruning"))?;
        let statuses = LayerStatus::ALL.map(LayerStatus::as_str);
        for (seq, in_body) in &seqs {
            // A turn with a shape has its provider records in its body; one written
            // before has a row for each.
            pruned.provider_records += in_body;
            pruned.provider_records += providers
                .execute([seq])
                .map_err(sqlite(path, "delete provider records"))?
                as u64;
            for layer in &names {
                pruned.layer_decisions += layers
                    .execute(params![
                        tenant,
                        seq,
                        statuses[0],
                        statuses[1],
                        statuses[2],
                        statuses[3],
                        statuses[4],
                        statuses[5],
                        layer
                    ])
                    .map_err(sqlite(path, "delete layer decisions"))?
                    as u64;
            }
            pruned.turns += turns
                .execute([*seq])
                .map_err(sqlite(path, "delete turn records"))? as u64;
        }
        pruned.handle_operations = tx
            .prepare_cached(DELETE_HANDLE_OPERATIONS)
            .and_then(|mut statement| statement.execute(params![tenant, cutoff_ms, batch as i64]))
            .map_err(sqlite(path, "delete handle operations"))?
            as u64;
    }
    tx.commit().map_err(sqlite(path, "commit pruning"))?;
    Ok(pruned)
}

/// What pruning `tenant` at `cutoff_ms` would delete, without deleting: turns (and their
/// provider records) and handle operations, walking the turns in batches as pruning does.
pub(crate) fn count_past(
    conn: &Connection,
    path: &Path,
    tenant: &str,
    cutoff_ms: i64,
) -> Result<Pruned, StoreError> {
    let mut counted = Pruned::default();
    let mut provider_count = conn
        .prepare_cached("SELECT COUNT(*) FROM provider_records WHERE turn_seq = ?1")
        .map_err(sqlite(path, "prepare counting"))?;
    let mut walk = conn
        .prepare_cached(
            "SELECT seq, started_at_ms, provider_count FROM turns WHERE tenant = ?1 ORDER BY seq",
        )
        .map_err(sqlite(path, "prepare counting"))?;
    let mut rows = walk
        .query([tenant])
        .map_err(sqlite(path, "count turn records"))?;
    while let Some(row) = rows.next().map_err(sqlite(path, "count turn records"))? {
        let (seq, started): (i64, i64) = (
            row.get(0).map_err(sqlite(path, "read a turn"))?,
            row.get(1).map_err(sqlite(path, "read a turn"))?,
        );
        if started >= cutoff_ms {
            break;
        }
        counted.turns += 1;
        let in_body: i64 = row.get(2).map_err(sqlite(path, "read a turn"))?;
        counted.provider_records += in_body.max(0) as u64;
        counted.provider_records += provider_count
            .query_row([seq], |row| row.get::<_, i64>(0))
            .map_err(sqlite(path, "count provider records"))?
            as u64;
    }
    counted.handle_operations = conn
        .query_row(COUNT_HANDLE_OPERATIONS, params![tenant, cutoff_ms], |row| {
            row.get::<_, i64>(0)
        })
        .map_err(sqlite(path, "count handle operations"))? as u64;
    Ok(counted)
}

/// Every layer name of `tenant`'s layer decisions.
fn layer_names(conn: &Connection, path: &Path, tenant: &str) -> Result<Vec<String>, StoreError> {
    let walk = NameColumn::Layer.walk(tenant);
    conn.prepare_cached(&walk.sql)
        .and_then(|mut statement| {
            statement
                .query_map(rusqlite::params_from_iter(&walk.params), |row| row.get(0))?
                .collect()
        })
        .map_err(sqlite(path, "read the layer names"))
}

/// The `seq` of at most `batch` of `tenant`'s first turns, while they started before
/// `cutoff_ms`.
fn expired_turns(
    conn: &Connection,
    path: &Path,
    tenant: &str,
    cutoff_ms: i64,
    batch: usize,
) -> Result<Vec<(i64, u64)>, StoreError> {
    let mut statement = conn
        .prepare_cached(OLDEST_TURNS)
        .map_err(sqlite(path, "prepare pruning"))?;
    let mut rows = statement
        .query(params![tenant, batch as i64])
        .map_err(sqlite(path, "find turns past their keep"))?;
    let mut seqs = Vec::new();
    while let Some(row) = rows
        .next()
        .map_err(sqlite(path, "find turns past their keep"))?
    {
        let started: i64 = row.get(1).map_err(sqlite(path, "read a turn"))?;
        if started >= cutoff_ms {
            break;
        }
        let in_body: i64 = row.get(2).map_err(sqlite(path, "read a turn"))?;
        seqs.push((
            row.get(0).map_err(sqlite(path, "read a turn"))?,
            in_body.max(0) as u64,
        ));
    }
    Ok(seqs)
}

/// Every tenant that has records in the store.
pub(crate) fn tenants(conn: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    let mut statement = conn
        .prepare_cached(TENANTS)
        .map_err(sqlite(path, "list the store's tenants"))?;
    let tenants = statement
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
        .map_err(sqlite(path, "list the store's tenants"))?;
    Ok(tenants)
}

/// When the first turn still in the store started (ms since the epoch); `None` when empty.
pub(crate) fn oldest_started_ms(conn: &Connection, path: &Path) -> Result<Option<i64>, StoreError> {
    conn.query_row(OLDEST_STARTED, [], |row| row.get(0))
        .optional()
        .map_err(sqlite(path, "read the oldest turn"))
}

/// Gives up to `pages` free-list pages back to the filesystem when the store was made
/// with incremental auto-vacuum (new stores are); otherwise they stay in the file, where
/// new rows take them first.
pub(crate) fn release_free_pages(
    conn: &Connection,
    path: &Path,
    pages: u32,
) -> Result<(), StoreError> {
    // Each step of the pragma frees one page: step it to the end.
    let mut statement = conn
        .prepare(&format!("PRAGMA incremental_vacuum({pages})"))
        .map_err(sqlite(path, "release free pages"))?;
    let mut rows = statement
        .query([])
        .map_err(sqlite(path, "release free pages"))?;
    while rows
        .next()
        .map_err(sqlite(path, "release free pages"))?
        .is_some()
    {}
    Ok(())
}

/// What the store takes: pages in use, the WAL, the free list, and the room left on its
/// filesystem. The WAL counts at least at the size it reaches before SQLite checkpoints
/// it (`wal_autocheckpoint` frames of a page each, and the commit that crosses that):
/// a commit writes whole pages to it, so between checkpoints it grows by more than the
/// rows written, and its file keeps that size afterwards. The writer measures after
/// every commit, so the four statements are prepared once per connection (the writer's
/// statement cache), not per measure.
pub(crate) fn usage(conn: &Connection, path: &Path) -> Result<StoreUsage, StoreError> {
    let pragma = |sql: &'static str| -> Result<u64, StoreError> {
        conn.prepare_cached(sql)
            .and_then(|mut statement| statement.query_row([], |row| row.get::<_, i64>(0)))
            .map(|value| value.max(0) as u64)
            .map_err(sqlite(path, "measure the store"))
    };
    let page_size = pragma("PRAGMA page_size")?;
    let pages = pragma("PRAGMA page_count")?;
    let free_pages = pragma("PRAGMA freelist_count")?;
    let checkpoint_frames = pragma("PRAGMA wal_autocheckpoint")?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_bytes = std::fs::metadata(&wal).map_or(0, |m| m.len());
    let wal_ceiling = WAL_HEADER_BYTES
        + (checkpoint_frames + WAL_SLACK_FRAMES) * (WAL_FRAME_HEADER_BYTES + page_size);
    Ok(StoreUsage {
        used_bytes: pages.saturating_sub(free_pages) * page_size + wal_bytes.max(wal_ceiling),
        reusable_bytes: free_pages * page_size,
        disk_available: disk_available(path),
    })
}

/// Bytes the filesystem holding the store at `path` gives an unprivileged writer.
pub(crate) fn disk_available(path: &Path) -> Option<u64> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let stats = rustix::fs::statvfs(folder).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// A write connection for `ctxd traces prune`: opened beside a running server (WAL and
/// the busy timeout let both write), on an existing store (never created) of exactly
/// this code's schema.
pub(crate) fn open_for_pruning(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    conn.busy_timeout(super::schema::BUSY_TIMEOUT)
        .map_err(sqlite(path, "set busy_timeout"))?;
    super::schema::without_foreign_keys(&conn, path)?;
    super::schema::require_current(&conn, path)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{LayerStatus as L, ProviderStatus as P};
    use crate::trace::record::HandleOpRecord;
    use crate::trace::store::testing::{key, simple};
    use crate::trace::store::{HandleOperationRow, Queued, StoreCounts, TraceReader, TraceStore};

    use std::time::{Duration, UNIX_EPOCH};

    const DAY_MS: i64 = 86_400_000;

    /// A store with `turns` turns of each tenant, turn `i` started at day `i`.
    fn store(tenants: &[&str], turns: i64) -> (tempfile::TempDir, TraceStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = TraceStore::open(&dir.path().join("traces.db"), &key()).unwrap();
        let mut traces = Vec::new();
        for day in 0..turns {
            for tenant in tenants {
                traces.push(simple(
                    &key(),
                    &format!("{tenant}-{day}"),
                    tenant,
                    day * DAY_MS,
                    &[("crm", P::Ok), ("billing", P::NotFound)],
                    &[("customer", L::Included), ("orders", L::Empty)],
                ));
            }
        }
        store.write_batch(&traces).unwrap();
        (dir, store)
    }

    #[test]
    fn turns_written_before_shapes_are_deleted_with_their_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = TraceStore::open(&dir.path().join("traces.db"), &key()).unwrap();
        let trace = |day: i64| {
            simple(
                &key(),
                &format!("acme-{day}"),
                "acme",
                day * DAY_MS,
                &[("crm", P::Ok), ("billing", P::NotFound)],
                &[("customer", L::Included), ("orders", L::Empty)],
            )
        };
        // Days 0 and 1 as a store before shapes held them, day 2 with a shape.
        crate::trace::store::testing::write_unshaped(
            store.connection(),
            store.encoder(),
            &[trace(0), trace(1)],
        );
        store.write_batch(&[trace(2)]).unwrap();
        let before = counts(&store);
        assert_eq!((before.turns, before.provider_records), (3, 6));
        let pruned = store.prune_batch("acme", 3 * DAY_MS, 10).unwrap();
        assert_eq!(
            pruned,
            Pruned {
                turns: 3,
                provider_records: 6,
                layer_decisions: 4,
                handle_operations: 0
            }
        );
        let rows: i64 = store
            .connection()
            .query_row(
                "SELECT (SELECT COUNT(*) FROM provider_records) + (SELECT COUNT(*) FROM layer_decisions) + (SELECT COUNT(*) FROM turns)",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(rows, 0);
        assert_eq!(counts(&store), StoreCounts::default());
    }

    fn store_path(store: &TraceStore) -> std::path::PathBuf {
        store.connection().path().unwrap().into()
    }

    fn counts(store: &TraceStore) -> StoreCounts {
        TraceReader::open(&store_path(store), None)
            .unwrap()
            .counts()
            .unwrap()
    }

    fn operation(tenant: &str, sequence: u64, at_ms: i64) -> Queued {
        let at = UNIX_EPOCH + Duration::from_millis(at_ms as u64);
        let record = HandleOpRecord::new(tenant, "h1", 1, sequence, "peek", at);
        Queued::HandleOperation(Box::new(HandleOperationRow::encode(&record)))
    }

    #[test]
    fn a_batch_deletes_the_oldest_turns_with_their_rows_and_stops_at_the_cutoff() {
        let (_dir, mut store) = store(&["acme", "globex"], 10);
        assert_eq!(store.tenants().unwrap(), ["acme", "globex"]);
        let before = counts(&store);
        // Days 0..4 of acme started before day 4; three per batch.
        let first = store.prune_batch("acme", 4 * DAY_MS, 3).unwrap();
        assert_eq!(
            first,
            Pruned {
                turns: 3,
                provider_records: 6,
                layer_decisions: 0,
                handle_operations: 0
            }
        );
        let second = store.prune_batch("acme", 4 * DAY_MS, 3).unwrap();
        assert_eq!(second.turns, 1);
        assert_eq!(
            store.prune_batch("acme", 4 * DAY_MS, 3).unwrap(),
            Pruned::default()
        );
        let after = counts(&store);
        assert_eq!(after.turns, before.turns - 4);
        assert_eq!(after.provider_records, before.provider_records - 8);
        let layer_rows: i64 = store
            .connection()
            .query_row(
                "SELECT COUNT(*) FROM layer_decisions WHERE tenant = 'acme'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(layer_rows, 0, "turns with a shape have no decision rows");
        // The other tenant's records are untouched, and acme's from day 4 on are kept.
        let reader = TraceReader::open(&store_path(&store), None).unwrap();
        assert!(reader.turn(None, "acme-3").unwrap().is_none());
        assert!(reader.turn(None, "acme-4").unwrap().is_some());
        assert!(reader.turn(None, "globex-0").unwrap().is_some());
        assert_eq!(store.oldest_started_ms().unwrap(), Some(0));
    }

    #[test]
    fn pruning_a_turn_steps_through_no_whole_table() {
        // Deleting a turn must not look at every layer decision or provider record of
        // the store: an enforced foreign key from the child tables to `turns` did, on
        // every deleted turn, as `layer_decisions` has no index led by `turn_seq`.
        let (_dir, mut store) = store(&["acme"], 50);
        let path = store_path(&store);
        let whole_table_steps = |conn: &Connection| {
            [DELETE_TURN, DELETE_PROVIDER_RECORDS, DELETE_LAYER_DECISIONS].map(|sql| {
                conn.prepare_cached(sql)
                    .unwrap()
                    .get_status(rusqlite::StatementStatus::FullscanStep)
            })
        };
        // The writer's connection, then the operator's (`ctxd traces prune`).
        let pruned = store.prune_batch("acme", 2 * DAY_MS, 10).unwrap();
        assert_eq!(pruned.turns, 2);
        assert_eq!(whole_table_steps(store.connection()), [0, 0, 0]);
        let mut operator = open_for_pruning(&path).unwrap();
        let pruned = prune_batch(&mut operator, &path, "acme", 4 * DAY_MS, 10).unwrap();
        assert_eq!(pruned.turns, 2);
        assert_eq!(whole_table_steps(&operator), [0, 0, 0]);
    }

    #[test]
    fn a_dry_run_counts_what_pruning_deletes() {
        let (_dir, mut store) = store(&["acme"], 6);
        let counted =
            count_past(store.connection(), &store_path(&store), "acme", 5 * DAY_MS).unwrap();
        assert_eq!((counted.turns, counted.provider_records), (5, 10));
        assert_eq!(counts(&store).turns, 6, "nothing deleted");
        let mut pruned = Pruned::default();
        loop {
            let batch = store.prune_batch("acme", 5 * DAY_MS, 2).unwrap();
            if batch == Pruned::default() {
                break;
            }
            pruned.add(batch);
        }
        assert_eq!((pruned.turns, pruned.provider_records), (5, 10));
        assert_eq!(store.oldest_started_ms().unwrap(), Some(5 * DAY_MS));
    }

    #[test]
    fn handle_operations_go_by_their_own_age_and_name_their_tenant() {
        let (_dir, mut store) = store(&[], 0);
        store
            .write_queued(&[
                operation("acme", 1, DAY_MS),
                operation("acme", 2, 3 * DAY_MS),
                operation("initech", 1, DAY_MS),
            ])
            .unwrap();
        assert_eq!(store.tenants().unwrap(), ["acme", "initech"]);
        let pruned = store.prune_batch("acme", 2 * DAY_MS, 10).unwrap();
        assert_eq!(pruned.handle_operations, 1);
        assert_eq!(pruned.turns, 0);
        let reader = TraceReader::open(&store_path(&store), None).unwrap();
        assert_eq!(
            reader
                .handle_operations("acme", "h1", 0, 10)
                .unwrap()
                .operations
                .len(),
            1
        );
        assert_eq!(
            reader
                .handle_operations("initech", "h1", 0, 10)
                .unwrap()
                .operations
                .len(),
            1
        );
    }

    #[test]
    fn pruned_pages_go_back_to_the_filesystem_in_a_new_store() {
        let (_dir, mut store) = store(&["acme"], 400);
        let full = store.usage().unwrap();
        while store.prune_batch("acme", 400 * DAY_MS, 100).unwrap() != Pruned::default() {}
        let pruned = store.usage().unwrap();
        assert!(pruned.reusable_bytes > 0, "{pruned:?}");
        store.release_free_pages(u32::MAX >> 1).unwrap();
        let released = store.usage().unwrap();
        assert_eq!(released.reusable_bytes, 0, "{released:?}");
        let pages: i64 = store
            .connection()
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        let page_size: i64 = store
            .connection()
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap();
        assert!(
            ((pages * page_size) as u64) < full.used_bytes,
            "the file shrank: {pages} pages against {full:?}"
        );
        assert!(released.disk_available.is_some_and(|bytes| bytes > 0));
        // The writer's connection keeps its measuring statements prepared: what it
        // measures after three changes of the file is what a fresh connection measures.
        let fresh = Connection::open(store_path(&store)).unwrap();
        let measured_fresh = usage(&fresh, &store_path(&store)).unwrap();
        assert_eq!(
            (released.used_bytes, released.reusable_bytes),
            (measured_fresh.used_bytes, measured_fresh.reusable_bytes)
        );
        assert!(
            released.used_bytes < full.used_bytes,
            "{released:?} {full:?}"
        );
    }
}
