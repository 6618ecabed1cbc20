//! The store end to end: opening and migrating, writing batches, reading them back,
//! sealing, purging and crash recovery, through the same calls the writer and readers use.

use super::schema::SCHEMA_VERSION;
use super::seal::RetentionCipher;
use super::testing::{self, ProviderSpec, item, key};
use super::write::PURGE_EXPIRED;
use super::*;
use crate::contract::{Item, LayerStatus, ProviderStatus};
use crate::digest::canonical_digest;
use crate::digest::keyed::DigestKey;
use crate::trace::record::HandleOpRecord;
use crate::trace::record::TurnTrace;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// The first column of every row `sql` selects.
fn first_column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> Vec<T> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The ids of the turns of tenant `acme` that `query` finds (its first 10), newest first.
fn acme_turn_ids(reader: &TraceReader, query: SearchQuery) -> Vec<String> {
    let query = SearchQuery {
        tenant: Some("acme".to_owned()),
        limit: 10,
        ..query
    };
    reader
        .search(&query)
        .unwrap()
        .traces
        .into_iter()
        .map(|t| t.turn.turn_id)
        .collect()
}

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
    let versions: Vec<i64> = first_column(
        again.connection(),
        "SELECT version FROM schema_version ORDER BY version",
    );
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
fn a_turn_with_many_layers_and_providers_reads_back_in_order_and_keeps_every_pair_in_its_shape() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, path) = store_in(dir.path());
    let providers: Vec<String> = (0..19).map(|i| format!("provider-{i:02}")).collect();
    let layers: Vec<String> = (0..17).map(|i| format!("layer-{i:02}")).collect();
    let statuses = [
        ProviderStatus::Ok,
        ProviderStatus::Timeout,
        ProviderStatus::NotFound,
    ];
    let provider_specs: Vec<(&str, ProviderStatus)> = providers
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), statuses[i % 3]))
        .collect();
    let layer_specs: Vec<(&str, LayerStatus)> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let status = if i % 2 == 0 {
                LayerStatus::Included
            } else {
                LayerStatus::Unavailable
            };
            (l.as_str(), status)
        })
        .collect();
    let wide = testing::simple(
        &key(),
        "turn-wide",
        "acme",
        1_000,
        &provider_specs,
        &layer_specs,
    );
    let narrow = simple("turn-narrow", "acme", &[("orders", ProviderStatus::Ok)]);
    store.write_batch(&[wide.clone(), narrow]).unwrap();

    let stored = TraceReader::open(&path, None)
        .unwrap()
        .turn(Some("acme"), "turn-wide")
        .unwrap()
        .unwrap();
    assert_eq!(stored.turn, wide.turn);
    assert_eq!(stored.providers, wide.providers);
    let conn = Connection::open(&path).unwrap();
    // The turn's pairs, once, under its shape (sorted: kind, name, status).
    let pairs = |seq: i64| -> Vec<String> {
        first_column(
            &conn,
            &format!(
                "SELECT k.kind || ' ' || k.name || ' ' || k.status FROM shape_keys k
                 WHERE k.shape = (SELECT shape FROM turns WHERE seq = {seq})
                 ORDER BY k.kind, k.name, k.status"
            ),
        )
    };
    let mut expected: Vec<String> = layer_specs
        .iter()
        .map(|(l, status)| format!("layer {l} {}", status.as_str()))
        .chain(
            provider_specs
                .iter()
                .map(|(p, status)| format!("provider {p} {}", status.as_str())),
        )
        .collect();
    expected.sort();
    assert_eq!(pairs(1), expected);
    assert_eq!(pairs(2), ["layer profile INCLUDED", "provider orders OK"]);
    assert_eq!(
        first_column::<i64>(&conn, "SELECT provider_count FROM turns ORDER BY seq"),
        [19, 1]
    );
    assert_eq!(
        first_column::<i64>(
            &conn,
            "SELECT (SELECT COUNT(*) FROM provider_records) + (SELECT COUNT(*) FROM layer_decisions)"
        ),
        [0],
        "a turn with a shape writes no row per record or decision"
    );
}

#[test]
fn a_turn_written_twice_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, path) = store_in(dir.path());
    let trace = simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)]);
    let rows = store.encoder().encode(&trace);
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
            "CREATE TRIGGER refuse BEFORE INSERT ON turns WHEN NEW.turn_id = 'turn-2'
             BEGIN SELECT RAISE(ABORT, 'refused'); END;",
        )
        .unwrap();
    let good = simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)]);
    let bad = simple("turn-2", "acme", &[("broken", ProviderStatus::Ok)]);
    let error = store.write_batch(&[good, bad]).unwrap_err();
    assert!(
        error.to_string().contains("cannot insert a turn"),
        "{error}"
    );
    let counts = TraceReader::open(&path, None).unwrap().counts().unwrap();
    assert_eq!(counts, StoreCounts::default());
}

fn retained_trace(turn_id: &str, tenant: &str, items: Vec<Item>, started_at_ms: i64) -> TurnTrace {
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
    // One ciphertext byte flipped (every bit of it, so the byte surely changes).
    let mut ciphertext: Vec<u8> = conn
        .query_row(
            "SELECT ciphertext FROM retained_content WHERE fingerprint = ?1",
            [&fb],
            |row| row.get(0),
        )
        .unwrap();
    ciphertext[30] ^= 0xFF;
    conn.execute(
        "UPDATE retained_content SET ciphertext = ?1 WHERE fingerprint = ?2",
        rusqlite::params![ciphertext, fb],
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
    other
        .connection()
        .busy_timeout(Duration::from_millis(1))
        .unwrap();
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
    .chain([Queued::Turn(Box::new(store.encoder().encode(&simple(
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
    let (store, path) = store_in(dir.path());
    // What a version-1 ctxd wrote.
    testing::write_unshaped(
        store.connection(),
        store.encoder(),
        &[simple("turn-1", "acme", &[("orders", ProviderStatus::Ok)])],
    );
    testing::as_version(store.connection(), 1);
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

#[test]
fn a_version_4_store_drops_its_status_indexes_and_still_finds_turns_by_status() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = store_in(dir.path());
    let k = key();
    testing::write_unshaped(
        store.connection(),
        store.encoder(),
        &[
            testing::simple(
                &k,
                "turn-1",
                "acme",
                1_000,
                &[
                    ("orders", ProviderStatus::Timeout),
                    ("crm", ProviderStatus::Ok),
                ],
                &[("profile", LayerStatus::Unavailable)],
            ),
            testing::simple(
                &k,
                "turn-2",
                "acme",
                2_000,
                &[("orders", ProviderStatus::Ok)],
                &[("profile", LayerStatus::Included)],
            ),
        ],
    );
    // What a version-4 ctxd wrote: the same rows, two more indexes.
    testing::as_version(store.connection(), 4);
    drop(store);
    assert!(matches!(
        TraceReader::open(&path, None).unwrap_err(),
        StoreError::TooOld { found: 4, .. }
    ));
    let store = TraceStore::open(&path, &k).unwrap();
    let indexes: Vec<String> = first_column(
        store.connection(),
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND name LIKE '%by_status'",
    );
    assert!(indexes.is_empty(), "{indexes:?}");
    let reader = TraceReader::open(&path, None).unwrap();
    let ids = |query: SearchQuery| acme_turn_ids(&reader, query);
    let by_provider_status = |status| SearchQuery {
        provider_status: Some(status),
        ..SearchQuery::default()
    };
    let by_layer_status = |status| SearchQuery {
        layer_status: Some(status),
        ..SearchQuery::default()
    };
    assert_eq!(ids(by_provider_status(ProviderStatus::Timeout)), ["turn-1"]);
    assert_eq!(
        ids(by_provider_status(ProviderStatus::Ok)),
        ["turn-2", "turn-1"]
    );
    assert_eq!(ids(by_layer_status(LayerStatus::Included)), ["turn-2"]);
    assert!(ids(by_provider_status(ProviderStatus::NotFound)).is_empty());
}

#[test]
fn a_version_5_store_gains_shapes_and_finds_old_and_new_turns_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = store_in(dir.path());
    let k = key();
    let turn = |id: &str, at: i64, crm: ProviderStatus, profile: LayerStatus| {
        testing::simple(
            &k,
            id,
            "acme",
            at,
            &[("crm", crm), ("orders", ProviderStatus::Ok)],
            &[("profile", profile)],
        )
    };
    let old = [
        turn("old-1", 100, ProviderStatus::Ok, LayerStatus::Included),
        turn(
            "old-2",
            200,
            ProviderStatus::Timeout,
            LayerStatus::Unavailable,
        ),
    ];
    testing::write_unshaped(store.connection(), store.encoder(), &old);
    testing::as_version(store.connection(), 5);
    drop(store);
    assert!(matches!(
        TraceReader::open(&path, None).unwrap_err(),
        StoreError::TooOld { found: 5, .. }
    ));
    let mut store = TraceStore::open(&path, &k).unwrap();
    let new = [
        turn(
            "new-3",
            300,
            ProviderStatus::Timeout,
            LayerStatus::Unavailable,
        ),
        turn("new-4", 400, ProviderStatus::Ok, LayerStatus::Included),
        turn("new-5", 500, ProviderStatus::Timeout, LayerStatus::Included),
    ];
    store.write_batch(&new).unwrap();
    let reader = TraceReader::open(&path, Some(&k)).unwrap();
    let ids = |query: SearchQuery| acme_turn_ids(&reader, query);
    let crm = |status: Option<ProviderStatus>| SearchQuery {
        provider: Some("crm".to_owned()),
        provider_status: status,
        ..SearchQuery::default()
    };
    assert_eq!(
        ids(crm(None)),
        ["new-5", "new-4", "new-3", "old-2", "old-1"]
    );
    assert_eq!(
        ids(crm(Some(ProviderStatus::Timeout))),
        ["new-5", "new-3", "old-2"]
    );
    assert_eq!(
        ids(SearchQuery {
            provider_status: Some(ProviderStatus::Timeout),
            ..SearchQuery::default()
        }),
        ["new-5", "new-3", "old-2"],
        "a status alone, over both kinds of turn"
    );
    assert_eq!(
        ids(SearchQuery {
            layer_status: Some(LayerStatus::Included),
            ..SearchQuery::default()
        }),
        ["new-5", "new-4", "old-1"]
    );
    assert_eq!(
        ids(SearchQuery {
            provider: Some("crm".to_owned()),
            provider_status: Some(ProviderStatus::Timeout),
            layer: Some("profile".to_owned()),
            layer_status: Some(LayerStatus::Unavailable),
            since_ms: Some(150),
            ..SearchQuery::default()
        }),
        ["new-3", "old-2"],
        "both filters on the same turn, within the window"
    );
    assert!(
        ids(SearchQuery {
            provider: Some("crm".to_owned()),
            provider_status: Some(ProviderStatus::NotFound),
            ..SearchQuery::default()
        })
        .is_empty()
    );
    // Pages run across both kinds of turn, newest first, each turn once.
    let mut page = SearchQuery {
        tenant: Some("acme".to_owned()),
        provider: Some("orders".to_owned()),
        limit: 2,
        ..SearchQuery::default()
    };
    let mut seen = Vec::new();
    loop {
        let result = reader.search(&page).unwrap();
        seen.extend(result.traces.into_iter().map(|t| t.turn.turn_id));
        match result.next_cursor {
            Some(cursor) => page.cursor = Some(cursor),
            None => break,
        }
    }
    assert_eq!(seen, ["new-5", "new-4", "new-3", "old-2", "old-1"]);
    // Every turn reads back whole, whichever way its provider records are stored.
    for trace in old.iter().chain(&new) {
        let stored = reader.turn(None, &trace.turn.turn_id).unwrap().unwrap();
        assert_eq!(stored.turn, trace.turn);
        assert_eq!(stored.providers, trace.providers);
    }
    assert_eq!(
        reader.counts().unwrap(),
        StoreCounts {
            turns: 5,
            provider_records: 10,
            retained_items: reader.counts().unwrap().retained_items,
        }
    );
}

#[test]
fn bodies_are_compressed_and_rows_of_json_text_are_read_beside_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, path) = store_in(dir.path());
    let compressed = simple("turn-z", "acme", &[("orders", ProviderStatus::Ok)]);
    let plain = simple("turn-j", "acme", &[("orders", ProviderStatus::Ok)]);
    store
        .write_batch(std::slice::from_ref(&compressed))
        .unwrap();
    // A turn as a store written before compression holds it: the records' JSON text.
    let conn = store.connection();
    conn.execute(
        "INSERT INTO turns (turn_id, tenant, project, build_digest, blocked, rendered_digest, started_at_ms, duration_ms, record)
         VALUES ('turn-j', 'acme', ?1, ?2, 0, NULL, ?3, 1, ?4)",
        rusqlite::params![
            plain.turn.project,
            plain.turn.build_digest,
            plain.turn.started_at_ms,
            serde_json::to_string(&plain.turn).unwrap()
        ],
    )
    .unwrap();
    let seq = conn.last_insert_rowid();
    conn.execute(
        "INSERT INTO provider_records (turn_seq, tenant, provider, status, observed_at_ms, record) VALUES (?1, 'acme', 'orders', 'OK', 0, ?2)",
        rusqlite::params![seq, serde_json::to_string(&plain.providers[0]).unwrap()],
    )
    .unwrap();
    let kinds: Vec<String> = first_column(conn, "SELECT typeof(record) FROM turns ORDER BY seq");
    assert_eq!(kinds, ["blob", "text"]);
    let reader = TraceReader::open(&path, None).unwrap();
    for trace in [&compressed, &plain] {
        let stored = reader.turn(None, &trace.turn.turn_id).unwrap().unwrap();
        assert_eq!(
            serde_json::to_string(&stored.turn).unwrap(),
            serde_json::to_string(&trace.turn).unwrap(),
            "the same JSON, byte for byte"
        );
        assert_eq!(
            serde_json::to_string(&stored.providers).unwrap(),
            serde_json::to_string(&trace.providers).unwrap()
        );
    }
    // A body whose dictionary is gone is an error that names the record, not a panic.
    store
        .connection()
        .execute_batch("DELETE FROM record_dictionaries")
        .unwrap();
    let reader = TraceReader::open(&path, None).unwrap();
    let error = reader.turn(None, "turn-z").unwrap_err().to_string();
    assert!(
        error.contains("turn record at seq 1 does not decode: the body's dictionary"),
        "{error}"
    );
}

#[test]
fn a_builds_turns_are_read_back_across_both_of_its_dictionaries() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, path) = store_in(dir.path());
    let traces: Vec<TurnTrace> = (0..codec::STATISTICS_SAMPLES + 3)
        .map(|n| {
            simple(
                &format!("turn-{n}"),
                "acme",
                &[
                    ("orders", ProviderStatus::Ok),
                    ("crm", ProviderStatus::NotFound),
                ],
            )
        })
        .collect();
    for trace in &traces {
        store.write_batch(std::slice::from_ref(trace)).unwrap();
    }
    let conn = store.connection();
    let dictionaries: Vec<Vec<u8>> =
        first_column(conn, "SELECT bytes FROM record_dictionaries ORDER BY rowid");
    assert_eq!(
        dictionaries.len(),
        2,
        "the first turn's, then with its statistics"
    );
    assert!(dictionaries[1].ends_with(&dictionaries[0]));
    let bodies: Vec<Vec<u8>> = first_column(conn, "SELECT record FROM turns ORDER BY seq");
    let named: Vec<i64> = bodies
        .iter()
        .map(|body| codec::dictionary_of(body).unwrap())
        .collect();
    // The first turn makes the dictionary; the next ones are its samples, and the last
    // sample is the first turn encoded with the statistics.
    let learned_from = codec::STATISTICS_SAMPLES;
    assert!(named[..learned_from].iter().all(|id| *id == named[0]));
    assert!(named[learned_from..].iter().all(|id| *id != named[0]));
    let reader = TraceReader::open(&path, None).unwrap();
    for trace in &traces {
        let stored = reader.turn(None, &trace.turn.turn_id).unwrap().unwrap();
        assert_eq!(
            serde_json::to_string(&stored.turn).unwrap(),
            serde_json::to_string(&trace.turn).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&stored.providers).unwrap(),
            serde_json::to_string(&trace.providers).unwrap()
        );
    }
    // A learned dictionary whose tables are damaged does not load: reading a body made
    // with it is an error that names the record and the dictionary, never a panic.
    conn.execute(
        "UPDATE record_dictionaries SET bytes = ?1 WHERE id = ?2",
        rusqlite::params![
            [&dictionaries[1][..8], &[0xff; 64][..]].concat(),
            named[learned_from]
        ],
    )
    .unwrap();
    let reader = TraceReader::open(&path, None).unwrap();
    let last = &traces[traces.len() - 1].turn.turn_id;
    let error = reader.turn(None, last).unwrap_err().to_string();
    assert!(
        error.contains(&format!("dictionary {} does not load", named[learned_from])),
        "{error}"
    );
    assert!(reader.turn(None, &traces[0].turn.turn_id).is_ok());
}

#[test]
fn a_turn_that_makes_a_dictionary_reserves_room_for_its_row() {
    let encoder = RowEncoder::new(&key());
    let reserved: Vec<(u64, bool, usize)> = (0..codec::STATISTICS_SAMPLES + 2)
        .map(|n| {
            let rows = encoder.encode(&simple(
                &format!("turn-{n:02}"),
                "acme",
                &[("orders", ProviderStatus::Ok)],
            ));
            let made = rows.dictionary_made;
            let dictionary = rows.dictionary.bytes.len();
            (
                Queued::Turn(Box::new(rows)).encoded_bytes(),
                made,
                dictionary,
            )
        })
        .collect();
    let made: Vec<bool> = reserved.iter().map(|(_, made, _)| *made).collect();
    let mut expected = vec![false; reserved.len()];
    expected[0] = true;
    expected[codec::STATISTICS_SAMPLES] = true;
    assert_eq!(made, expected, "the first turn and the last sample's");
    let plain = reserved[1].0;
    for (bytes, made, dictionary) in &reserved {
        if *made {
            assert!(
                *bytes >= plain + *dictionary as u64,
                "{bytes} against {plain}"
            );
        } else {
            assert!(bytes.abs_diff(plain) < 64, "{bytes} against {plain}");
        }
    }
}
