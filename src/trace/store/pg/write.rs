//! The write side on PostgreSQL: the connection a replica's trace writer thread owns,
//! the batch transaction (each table's rows of the whole batch in one multi-row
//! `INSERT … SELECT FROM UNNEST(…)`), purging, pruning in batched `DELETE`s, and
//! measuring the store.
//!
//! Replicas write the same tables at once: turn ids are unique, so turns never
//! conflict; dictionaries, builds and retained content may, and are inserted sorted by
//! key so two replicas' batches take their row locks in the same order and never
//! deadlock on them.

use super::read::planned_first_column;
use super::schema::migrate;
use super::{PgConnection, PgTarget};
use crate::contract::LayerStatus;
use crate::trace::query::NameColumn;
use crate::trace::store::error::StoreError;
use crate::trace::store::prune::Pruned;
use crate::trace::store::rows::{HandleOperationRow, Queued, TraceRows};
use crate::trace::store::write::{Written, remember};
use crate::trace::upkeep::StoreUsage;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

const INSERT_DICTIONARIES: &str = "INSERT INTO record_dictionaries (id, bytes)
    SELECT * FROM UNNEST($1::int8[], $2::bytea[]) ON CONFLICT (id) DO NOTHING";
const INSERT_BUILDS: &str = "INSERT INTO builds (digest, build)
    SELECT * FROM UNNEST($1::text[], $2::text[]) ON CONFLICT (digest) DO NOTHING";
const INSERT_HANDLE_OPERATIONS: &str =
    "INSERT INTO handle_operations (tenant, handle_id, sequence, at_ms, record)
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int8[], $5::text[])
    ON CONFLICT (tenant, handle_id, sequence) DO NOTHING";
/// A turn id already in the store (a retried batch) is skipped with its rows.
const INSERT_TURNS: &str = "INSERT INTO turns (turn_id, tenant, project, build_digest, blocked, rendered_digest, started_at_ms, duration_ms, record, shape, provider_count)
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::text[], $7::int8[], $8::int8[], $9::bytea[], $10::int8[], $11::int8[])
    ON CONFLICT (turn_id) DO NOTHING RETURNING seq, turn_id";
/// A shape's pairs are written once; replicas writing the same shape at once both do
/// nothing for the pairs already there.
const INSERT_SHAPE_KEYS: &str = "INSERT INTO shape_keys (tenant, kind, name, status, shape)
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[])
    ON CONFLICT DO NOTHING";
/// Stored once per tenant and fingerprint: a second write only moves the expiry later.
const UPSERT_RETAINED: &str =
    "INSERT INTO retained_content (tenant, fingerprint, ciphertext, expires_at_ms)
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::int8[])
    ON CONFLICT (tenant, fingerprint) DO UPDATE SET expires_at_ms = EXCLUDED.expires_at_ms
    WHERE EXCLUDED.expires_at_ms > retained_content.expires_at_ms";
const PURGE_EXPIRED: &str = "DELETE FROM retained_content WHERE expires_at_ms <= $1";
const OLDEST_TURNS: &str =
    "SELECT seq, started_at_ms FROM turns WHERE tenant = $1 ORDER BY seq LIMIT $2";
const DELETE_PROVIDER_RECORDS: &str = "DELETE FROM provider_records WHERE turn_seq = ANY($1)";
/// Through the `(tenant, layer, status, turn_seq)` index, under each layer name of the
/// tenant ([`NameColumn::walk`]).
const DELETE_LAYER_DECISIONS: &str = "DELETE FROM layer_decisions
    WHERE tenant = $1 AND layer = ANY($4) AND status = ANY($3) AND turn_seq = ANY($2)";
/// Each deleted turn's count of the provider records its body held (zero for a turn
/// written before shapes, whose records are rows of their own).
const DELETE_TURNS: &str = "DELETE FROM turns WHERE seq = ANY($1) RETURNING provider_count";
const DELETE_HANDLE_OPERATIONS: &str = "DELETE FROM handle_operations
    WHERE (tenant, handle_id, sequence) IN (SELECT tenant, handle_id, sequence
        FROM handle_operations WHERE tenant = $1 AND at_ms < $2 LIMIT $3)";
const TENANTS: &str = "SELECT DISTINCT tenant FROM turns
    UNION SELECT DISTINCT tenant FROM handle_operations";
const OLDEST_STARTED: &str = "SELECT started_at_ms FROM turns ORDER BY seq LIMIT 1";
/// What ctxd's tables take in this schema: heap, indexes and TOAST.
const STORE_BYTES: &str = "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::int8
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind = 'r'
    AND c.relname IN ('turns', 'layer_decisions', 'provider_records', 'shape_keys', 'retained_content',
        'builds', 'handle_operations', 'record_dictionaries', 'schema_version')";

/// A replica's write connection. Owned by its trace writer thread.
pub struct PgTraceStore {
    conn: PgConnection,
    /// Where to connect again when the server closes the connection (a restart, a
    /// failover): the writer's retries then go to a new connection.
    target: PgTarget,
    known_builds: HashSet<String>,
    known_dictionaries: HashSet<i64>,
    known_shapes: HashSet<i64>,
}

impl fmt::Debug for PgTraceStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTraceStore")
            .field("store", self.conn.label())
            .finish_non_exhaustive()
    }
}

/// The columns of one batch, one vector per column, as `UNNEST` takes them.
#[derive(Default)]
struct TurnColumns<'a> {
    turn_id: Vec<&'a str>,
    tenant: Vec<&'a str>,
    project: Vec<&'a str>,
    build_digest: Vec<&'a str>,
    blocked: Vec<bool>,
    rendered_digest: Vec<Option<&'a str>>,
    started_at_ms: Vec<i64>,
    duration_ms: Vec<i64>,
    record: Vec<&'a [u8]>,
    shape: Vec<i64>,
    provider_count: Vec<i64>,
}

impl PgTraceStore {
    /// Connects and brings the schema up to date under the migration lock.
    pub fn open(target: &PgTarget) -> Result<PgTraceStore, StoreError> {
        let mut conn = PgConnection::connect(target)?;
        let applied = migrate(&mut conn)?;
        if applied > 0 {
            tracing::info!(store = %conn.label().display(), applied, "trace store schema migrated");
        }
        Ok(PgTraceStore {
            conn,
            target: target.clone(),
            known_builds: HashSet::new(),
            known_dictionaries: HashSet::new(),
            known_shapes: HashSet::new(),
        })
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
        // Sorted by key: replicas take row locks in the same order.
        let mut dictionaries: BTreeMap<i64, &[u8]> = BTreeMap::new();
        let mut builds: BTreeMap<&str, &str> = BTreeMap::new();
        let mut columns = TurnColumns::default();
        for rows in batch {
            let dictionary = &rows.dictionary;
            if !self.known_dictionaries.contains(&dictionary.id) {
                dictionaries.insert(dictionary.id, &dictionary.bytes);
            }
            if let Some((digest, build)) = &rows.build
                && !self.known_builds.contains(digest)
            {
                builds.insert(digest, build);
            }
            let turn = &rows.turn;
            columns.turn_id.push(&turn.turn_id);
            columns.tenant.push(&turn.tenant);
            columns.project.push(&turn.project);
            columns.build_digest.push(&turn.build_digest);
            columns.blocked.push(turn.blocked);
            columns
                .rendered_digest
                .push(turn.rendered_digest.as_deref());
            columns.started_at_ms.push(turn.started_at_ms);
            columns.duration_ms.push(turn.duration_ms);
            columns.record.push(&turn.record);
            columns.shape.push(rows.shape.id);
            columns
                .provider_count
                .push(i64::from(rows.provider_records));
        }
        // Sorted by key, as the other shared rows: replicas lock in the same order.
        let mut shape_keys: BTreeMap<(&str, &str, &str, &str, i64), ()> = BTreeMap::new();
        for rows in batch {
            if !self.known_shapes.contains(&rows.shape.id) {
                for key in &rows.shape.keys {
                    shape_keys.insert(
                        (
                            &rows.turn.tenant,
                            key.kind,
                            &key.name,
                            key.status,
                            rows.shape.id,
                        ),
                        (),
                    );
                }
            }
        }
        let by_turn_id: HashMap<&str, &TraceRows> = batch
            .iter()
            .map(|rows| (rows.turn.turn_id.as_str(), *rows))
            .collect();
        self.reconnect_if_closed()?;
        let written = self.conn.run_mut("write a batch", |client| async move {
            let tx = client.transaction().await?;
            let mut written = Written::default();
            if !dictionaries.is_empty() {
                let ids: Vec<i64> = dictionaries.keys().copied().collect();
                let bytes: Vec<&[u8]> = dictionaries.values().copied().collect();
                tx.execute(INSERT_DICTIONARIES, &[&ids, &bytes]).await?;
            }
            if !builds.is_empty() {
                let digests: Vec<&str> = builds.keys().copied().collect();
                let texts: Vec<&str> = builds.values().copied().collect();
                tx.execute(INSERT_BUILDS, &[&digests, &texts]).await?;
            }
            if !operations.is_empty() {
                let tenant: Vec<&str> = operations.iter().map(|o| o.tenant.as_str()).collect();
                let handle: Vec<&str> = operations.iter().map(|o| o.handle_id.as_str()).collect();
                let sequence: Vec<i64> = operations.iter().map(|o| o.sequence).collect();
                let at: Vec<i64> = operations.iter().map(|o| o.at_ms).collect();
                let record: Vec<&str> = operations.iter().map(|o| o.record.as_str()).collect();
                written.handle_operations = tx
                    .execute(
                        INSERT_HANDLE_OPERATIONS,
                        &[&tenant, &handle, &sequence, &at, &record],
                    )
                    .await?;
            }
            if !columns.turn_id.is_empty() {
                let inserted = tx
                    .query(
                        INSERT_TURNS,
                        &[
                            &columns.turn_id,
                            &columns.tenant,
                            &columns.project,
                            &columns.build_digest,
                            &columns.blocked,
                            &columns.rendered_digest,
                            &columns.started_at_ms,
                            &columns.duration_ms,
                            &columns.record,
                            &columns.shape,
                            &columns.provider_count,
                        ],
                    )
                    .await?;
                written.turns = inserted.len() as u64;
                let mut retained: BTreeMap<(&str, &str), (&[u8], i64)> = BTreeMap::new();
                for row in &inserted {
                    let turn_id: &str = row.get(1);
                    let Some(rows) = by_turn_id.get(turn_id) else {
                        continue;
                    };
                    let tenant = rows.turn.tenant.as_str();
                    written.provider_records += u64::from(rows.provider_records);
                    for item in &rows.retained {
                        let entry = retained
                            .entry((tenant, item.fingerprint.as_str()))
                            .or_insert((&item.ciphertext, item.expires_at_ms));
                        entry.1 = entry.1.max(item.expires_at_ms);
                    }
                }
                if !shape_keys.is_empty() {
                    let tenant: Vec<&str> = shape_keys.keys().map(|k| k.0).collect();
                    let kind: Vec<&str> = shape_keys.keys().map(|k| k.1).collect();
                    let name: Vec<&str> = shape_keys.keys().map(|k| k.2).collect();
                    let status: Vec<&str> = shape_keys.keys().map(|k| k.3).collect();
                    let shape: Vec<i64> = shape_keys.keys().map(|k| k.4).collect();
                    tx.execute(INSERT_SHAPE_KEYS, &[&tenant, &kind, &name, &status, &shape])
                        .await?;
                }
                if !retained.is_empty() {
                    let tenant: Vec<&str> = retained.keys().map(|(t, _)| *t).collect();
                    let fingerprint: Vec<&str> = retained.keys().map(|(_, f)| *f).collect();
                    let ciphertext: Vec<&[u8]> = retained.values().map(|(c, _)| *c).collect();
                    let expires: Vec<i64> = retained.values().map(|(_, e)| *e).collect();
                    tx.execute(
                        UPSERT_RETAINED,
                        &[&tenant, &fingerprint, &ciphertext, &expires],
                    )
                    .await?;
                }
            }
            tx.commit().await?;
            Ok(written)
        })?;
        remember(
            &mut self.known_dictionaries,
            batch.iter().map(|rows| rows.dictionary.id),
        );
        remember(
            &mut self.known_shapes,
            batch.iter().map(|rows| rows.shape.id),
        );
        remember(
            &mut self.known_builds,
            batch
                .iter()
                .filter_map(|rows| rows.build.as_ref().map(|(digest, _)| digest.clone())),
        );
        Ok(written)
    }

    /// Deletes retained content whose `expires_at_ms <= now_ms`; returns how many rows.
    pub(crate) fn purge_expired(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        self.reconnect_if_closed()?;
        self.conn
            .run("purge expired retained content", |client| async move {
                client.execute(PURGE_EXPIRED, &[&now_ms]).await
            })
            .map(|n| n as usize)
    }

    /// Deletes, in one transaction, at most `batch` of `tenant`'s oldest turns that
    /// started before `cutoff_ms` with their rows, and at most `batch` of its handle
    /// operations older than it. Every replica prunes: a row another one deleted first
    /// is simply not counted.
    pub(crate) fn prune_batch(
        &mut self,
        tenant: &str,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<Pruned, StoreError> {
        let limit = batch as i64;
        self.reconnect_if_closed()?;
        self.conn.run_mut("prune the store", |client| async move {
            let tx = client.transaction().await?;
            let oldest = tx.query(OLDEST_TURNS, &[&tenant, &limit]).await?;
            let seqs: Vec<i64> = oldest
                .iter()
                .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1)))
                .take_while(|(_, started)| *started < cutoff_ms)
                .map(|(seq, _)| seq)
                .collect();
            let mut pruned = Pruned::default();
            if !seqs.is_empty() {
                let statuses: Vec<&str> = LayerStatus::ALL.map(LayerStatus::as_str).to_vec();
                let walk = NameColumn::Layer.walk(tenant);
                let names: Vec<String> = planned_first_column(&tx, &walk.sql, &walk.params).await?;
                pruned.provider_records = tx.execute(DELETE_PROVIDER_RECORDS, &[&seqs]).await?;
                pruned.layer_decisions = tx
                    .execute(DELETE_LAYER_DECISIONS, &[&tenant, &seqs, &statuses, &names])
                    .await?;
                let deleted = tx.query(DELETE_TURNS, &[&seqs]).await?;
                pruned.turns = deleted.len() as u64;
                pruned.provider_records += deleted
                    .iter()
                    .map(|row| row.get::<_, i64>(0).max(0) as u64)
                    .sum::<u64>();
            }
            pruned.handle_operations = tx
                .execute(DELETE_HANDLE_OPERATIONS, &[&tenant, &cutoff_ms, &limit])
                .await?;
            tx.commit().await?;
            Ok(pruned)
        })
    }

    /// A new connection in place of one the server closed. The schema is not migrated
    /// again: it was at this code's version when the store opened.
    fn reconnect_if_closed(&mut self) -> Result<(), StoreError> {
        if self.conn.is_closed() {
            self.conn = PgConnection::connect(&self.target)?;
            tracing::info!(store = %self.conn.label().display(), "trace store connection reopened");
        }
        Ok(())
    }

    /// Every tenant with records in the store.
    pub(crate) fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.conn
            .run("list the store's tenants", |client| async move {
                let rows = client.query(TENANTS, &[]).await?;
                Ok(rows.iter().map(|row| row.get(0)).collect())
            })
    }

    /// When the first turn still in the store started.
    pub(crate) fn oldest_started_ms(&self) -> Result<Option<i64>, StoreError> {
        self.conn.run("read the oldest turn", |client| async move {
            let row = client.query_opt(OLDEST_STARTED, &[]).await?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    /// What ctxd's tables take on the server (`pg_total_relation_size`). The server's
    /// disk is not this process's to measure: `disk_available` is `None`.
    pub(crate) fn usage(&self) -> Result<StoreUsage, StoreError> {
        let used: i64 = self.conn.run("measure the store", |client| async move {
            Ok(client.query_one(STORE_BYTES, &[]).await?.get(0))
        })?;
        Ok(StoreUsage {
            used_bytes: used.max(0) as u64,
            reusable_bytes: 0,
            disk_available: None,
        })
    }
}

#[cfg(test)]
mod tests {
    //! Against the machine's PostgreSQL (127.0.0.1:5432, as the integration tests), each
    //! test in a schema of its own.
    use super::*;
    use crate::contract::{LayerStatus, ProviderStatus};
    use crate::digest::canonical_digest;
    use crate::trace::query::SearchQuery;
    use crate::trace::store::TraceReader;
    use crate::trace::store::rows::RowEncoder;
    use crate::trace::store::testing::{ProviderSpec, item, key, turn};

    const ADMIN_DSN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

    /// A schema of this test's own, dropped when the value drops.
    struct Schema {
        name: String,
        admin: PgConnection,
    }

    impl Schema {
        fn create() -> (Schema, PgTarget) {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).unwrap();
            let name = format!("ctxd_unit_{}", hex::encode(bytes));
            let admin = PgConnection::connect(&PgTarget::parse("ADMIN", ADMIN_DSN).unwrap())
                .expect("PostgreSQL runs on 127.0.0.1:5432");
            admin
                .batch("create a schema", &format!("CREATE SCHEMA {name}"))
                .unwrap();
            let target = PgTarget::parse(
                "TRACE_DSN",
                &format!("{ADMIN_DSN} options=-csearch_path={name}"),
            )
            .unwrap();
            (Schema { name, admin }, target)
        }
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            let _ = self.admin.batch(
                "drop a schema",
                &format!("DROP SCHEMA {} CASCADE", self.name),
            );
        }
    }

    #[test]
    fn the_rows_of_a_turn_carry_no_enforced_foreign_key() {
        // Enforced, every row written locked its turn and every turn pruned scanned all
        // of `layer_decisions` (no index of it is led by `turn_seq`).
        let (schema, target) = Schema::create();
        let _store = PgTraceStore::open(&target).unwrap();
        let name = schema.name.clone();
        let foreign_keys: i64 = schema
            .admin
            .run("count foreign keys", |client| async move {
                let row = client
                    .query_one(
                        "SELECT COUNT(*) FROM pg_constraint c
                         JOIN pg_namespace n ON n.oid = c.connamespace
                         WHERE c.contype = 'f' AND n.nspname = $1",
                        &[&name],
                    )
                    .await?;
                Ok(row.get(0))
            })
            .unwrap();
        assert_eq!(foreign_keys, 0);
    }

    #[test]
    fn no_index_is_led_by_tenant_and_status() {
        // Each would cost every turn written one entry per provider record or layer
        // decision; a status alone is searched under each of the tenant's names.
        let (schema, target) = Schema::create();
        let _store = PgTraceStore::open(&target).unwrap();
        let name = schema.name.clone();
        let indexes: Vec<String> = schema
            .admin
            .run("list indexes", |client| async move {
                let rows = client
                    .query(
                        "SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY 1",
                        &[&name],
                    )
                    .await?;
                Ok(rows.iter().map(|row| row.get(0)).collect())
            })
            .unwrap();
        assert!(
            indexes
                .iter()
                .any(|index| index == "layer_decisions_by_layer"),
            "{indexes:?}"
        );
        assert!(
            !indexes.iter().any(|index| index.ends_with("_by_status")),
            "{indexes:?}"
        );
    }

    #[test]
    fn a_retried_batch_writes_nothing_twice_and_reads_back_as_written() {
        let (_schema, target) = Schema::create();
        let mut store = PgTraceStore::open(&target).unwrap();
        let shared = item("REC-1", "Shared", "Kept by both turns");
        let traces: Vec<_> = (0..3)
            .map(|i| {
                turn(
                    &key(),
                    &format!("turn-{i}"),
                    "acme",
                    1_000 + i,
                    &[
                        ProviderSpec::new("crm", ProviderStatus::Ok)
                            .retention("content")
                            .items(vec![shared.clone()]),
                        ProviderSpec::new("slow", ProviderStatus::Timeout),
                    ],
                    &[("profile", LayerStatus::Included)],
                )
            })
            .collect();
        let encoder = RowEncoder::new(&key());
        let batch: Vec<Queued> = traces
            .iter()
            .map(|trace| Queued::Turn(Box::new(encoder.encode(trace))))
            .collect();
        let first = store.write_queued(&batch).unwrap();
        assert_eq!(first.turns, 3);
        assert_eq!(first.provider_records, 6);
        let retried = store.write_queued(&batch).unwrap();
        assert_eq!(retried, Written::default(), "a retried batch adds nothing");

        let reader = TraceReader::open_postgres(&target, Some(&key())).unwrap();
        let counts = reader.counts().unwrap();
        assert_eq!(
            (counts.turns, counts.provider_records, counts.retained_items),
            (3, 6, 1)
        );
        let stored = reader.turn(Some("acme"), "turn-1").unwrap().unwrap();
        assert_eq!(stored.turn, traces[1].turn);
        assert_eq!(stored.providers, traces[1].providers, "in their order");
        assert!(reader.turn(Some("globex"), "turn-1").unwrap().is_none());
        let fingerprint = canonical_digest(&shared);
        let retained = reader.retained("acme", &[&fingerprint]).unwrap();
        assert_eq!(
            retained.get(&fingerprint),
            Some(&shared),
            "sealed, then opened"
        );

        let query = |cursor: Option<String>| SearchQuery {
            tenant: Some("acme".to_owned()),
            provider: Some("slow".to_owned()),
            provider_status: Some(ProviderStatus::Timeout),
            limit: 2,
            cursor,
            ..SearchQuery::default()
        };
        let page = reader.search(&query(None)).unwrap();
        let ids: Vec<_> = page.traces.iter().map(|t| t.turn.turn_id.clone()).collect();
        assert_eq!(ids, ["turn-2", "turn-1"], "newest first");
        let next = reader.search(&query(page.next_cursor)).unwrap();
        assert_eq!(next.traces.len(), 1);
        assert_eq!(next.traces[0].turn.turn_id, "turn-0");
        assert!(next.next_cursor.is_none());
        // A status without its name: walked under each of the tenant's names.
        let ids = |provider_status, layer_status| -> Vec<String> {
            let query = SearchQuery {
                tenant: Some("acme".to_owned()),
                provider_status,
                layer_status,
                limit: 10,
                ..SearchQuery::default()
            };
            let page = reader.search(&query).unwrap();
            page.traces.into_iter().map(|t| t.turn.turn_id).collect()
        };
        let all = ["turn-2", "turn-1", "turn-0"];
        assert_eq!(ids(Some(ProviderStatus::Timeout), None), all);
        assert_eq!(ids(None, Some(LayerStatus::Included)), all);
        assert_eq!(
            ids(Some(ProviderStatus::Ok), Some(LayerStatus::Included)),
            all
        );
        assert!(ids(Some(ProviderStatus::NotFound), None).is_empty());
        assert!(ids(None, Some(LayerStatus::Empty)).is_empty());

        let pruned = store.prune_batch("acme", 1_002, 500).unwrap();
        assert_eq!((pruned.turns, pruned.provider_records), (2, 4));
        assert_eq!(
            pruned.layer_decisions, 0,
            "turns with a shape have no decision rows"
        );
        assert_eq!(reader.counts().unwrap().turns, 1);
        assert_eq!(store.tenants().unwrap(), ["acme"]);
        assert!(store.usage().unwrap().used_bytes > 0);
        assert_eq!(store.usage().unwrap().disk_available, None);
    }
}
