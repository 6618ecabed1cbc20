//! Trace writer throughput against a plain rusqlite baseline, same run, same rows, same
//! machine.
//!
//! - **writer**: `N` turns through `trace::writer::spawn`, `TraceSender::enqueue_rows`
//!   and `shutdown`, default settings (queue 8192, batches of 256, 50 ms), timed from the
//!   first enqueue to the return of `shutdown` (the last commit). The rows are
//!   serialized and sealed by a `RowEncoder` *before* the clock starts, as the
//!   baseline's are: in ctxd every worker encodes its own turns, and since a turn
//!   writes one row (turn shapes) one enqueuing thread's encoding (printed as
//!   `encode`) is slower than the writer it feeds.
//! - **baseline**: a plain rusqlite connection (WAL, `synchronous=NORMAL`, foreign keys
//!   not enforced, as on the writer's connection) on a store whose schema
//!   `TraceStore::open` created, inserting the same rows — serialized and sealed by
//!   `RowEncoder` *before* the clock starts — in transactions of 256 turns with prepared
//!   statements.
//!
//! Both sides allocate with jemalloc, as the `ctxd` binary does.
//!
//! Each side runs 7 times, interleaved, the side that goes first alternating from run to
//! run; the ratio is the median of the 7 runs' own ratios (each run's two sides a few
//! seconds apart, so a slow minute of the machine weighs on both), reported on stdout
//! with each side's median and as JSON in `target/bench/trace_writer.json`. Records =
//! turn records + provider records.
//!
//! `CTXD_BENCH_SEARCH=1` also builds a store of ~1 M provider records and prints the
//! latency of each search shape (about a minute more).

use ctxd::contract::{
    Currentness, Item, LayerReason, LayerStatus, ProviderStatus, Source, VersionSource,
};
use ctxd::digest::DigestKey;
use ctxd::digest::canonical_digest;
use ctxd::trace::record::{
    InputDigest, ItemRecord, LayerDecisionRecord, PROVIDER_RECORD_KIND, ProviderRecord,
    RetainedItem, RetentionRecord, SelectionRecord, TURN_RECORD_KIND, TurnRecord, TurnTrace,
    material_digest,
};
use ctxd::trace::store::{RowEncoder, SearchQuery, TraceReader, TraceRows, TraceStore};
use ctxd::trace::writer::{self, WriterSettings};
use rusqlite::{Connection, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The allocator the `ctxd` binary ships with (`src/main.rs`), for both sides: the writer
/// frees on its own thread what the enqueuing thread allocated, which glibc's malloc
/// serializes on the other thread's arena lock.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const TURNS: usize = 60_000;
const CUSTOMERS: usize = 2_000;
const RUNS: usize = 7;
const BATCH: usize = 256;
const TENANTS: [&str; 4] = ["acme", "globex", "initech", "umbrella"];
const STARTED_AT_MS: i64 = 1_764_500_000_000;

fn item(id: String, title: String, content_bytes: usize) -> Item {
    let content = "Pallet sensors shipped via freight; delivery confirmed on the dock. "
        .repeat(content_bytes / 68 + 1)[..content_bytes]
        .to_owned();
    Item {
        id,
        title: Some(title),
        content,
        metadata:
            serde_json::json!({"status": "delivered", "totalEur": 1840.0, "plan": "Enterprise"})
                .as_object()
                .unwrap()
                .clone(),
        updated_at: Some("2026-11-24T16:02:00Z".to_owned()),
    }
}

/// One provider record the way `trace::capture` builds it.
#[allow(clippy::too_many_arguments)]
fn provider_record(
    key: &DigestKey,
    provider: &str,
    value: &str,
    items: &[Item],
    status: ProviderStatus,
    retention: &str,
    observed_at_ms: i64,
) -> ProviderRecord {
    let fingerprints: Vec<String> = items.iter().map(canonical_digest).collect();
    let refs: Vec<&str> = fingerprints.iter().map(String::as_str).collect();
    ProviderRecord {
        kind: PROVIDER_RECORD_KIND.to_owned(),
        provider: provider.to_owned(),
        contract: "context-provider.v1".to_owned(),
        binding_revision: Some("2026-11-30.1".to_owned()),
        binding_digest: Some(format!("sha256:{}", "b7".repeat(32))),
        provider_type: Some("http".to_owned()),
        version: Some("5.0.1".to_owned()),
        version_source: Some(VersionSource::Response),
        request_digest: key.request_digest(provider, "customerId", value),
        lookup_key: "customerId".to_owned(),
        invoked: true,
        observed_at: "2026-11-30T10:53:20.123Z".to_owned(),
        observed_at_ms,
        upstream_revision: Some("crm-r9".to_owned()),
        currentness: status.is_success().then_some(Currentness::Current),
        item_count: items.len(),
        items: items
            .iter()
            .zip(&fingerprints)
            .map(|(item, fingerprint)| ItemRecord {
                locator: key.locator(provider, &item.id),
                fingerprint: fingerprint.clone(),
                bytes: item.content.len(),
            })
            .collect(),
        material_digest: status.is_success().then(|| material_digest(&refs)),
        duration_ms: Some(38),
        status,
        detail: (status == ProviderStatus::Timeout).then(|| "DEADLINE".to_owned()),
        source: Some(Source::Live),
        age_ms: None,
        redactions: Default::default(),
        items_dropped: 0,
        retention: RetentionRecord {
            policy: retention.to_owned(),
            ttl_ms: 7 * 24 * 3_600_000,
            content_retained: retention == "content" && !items.is_empty(),
        },
    }
}

/// Turn `i`: 3 providers (customer-data retains content, orders keeps digests, tickets
/// times out), 5 layer decisions, 3 selections.
fn turn(key: &DigestKey, i: usize) -> TurnTrace {
    let tenant = TENANTS[i % TENANTS.len()];
    let customer = format!("CUST-{:04}", i % CUSTOMERS);
    let started_at_ms = STARTED_AT_MS + i as i64 * 3;
    let profile = vec![item(
        customer.clone(),
        "Current account state".to_owned(),
        360,
    )];
    let orders: Vec<Item> = (0..2)
        .map(|n| item(format!("ORD-{i:06}-{n}"), format!("Order {n}"), 240))
        .collect();
    // Mostly healthy, with failures at fixed rates so searches have something to find.
    let orders_status = if i % 1009 == 7 {
        ProviderStatus::Unavailable
    } else {
        ProviderStatus::Ok
    };
    let tickets_status = if i % 50 == 4 {
        ProviderStatus::Timeout
    } else {
        ProviderStatus::NotFound
    };
    let orders_items: &[Item] = if orders_status == ProviderStatus::Ok {
        &orders
    } else {
        &[]
    };
    let providers = vec![
        provider_record(
            key,
            "customer-data",
            &customer,
            &profile,
            ProviderStatus::Ok,
            "content",
            started_at_ms + 40,
        ),
        provider_record(
            key,
            "orders",
            &customer,
            orders_items,
            orders_status,
            "digest",
            started_at_ms + 35,
        ),
        provider_record(
            key,
            "tickets",
            &customer,
            &[],
            tickets_status,
            "digest",
            started_at_ms + 800,
        ),
    ];
    let selections = providers[..2]
        .iter()
        .flat_map(|p| {
            p.items.iter().map(|item| SelectionRecord {
                layer: format!("{}-layer", p.provider),
                provider: Some(p.provider.clone()),
                locator: Some(item.locator.clone()),
                fingerprint: Some(item.fingerprint.clone()),
                bytes: item.bytes,
                truncated: false,
                handle: None,
            })
        })
        .collect();
    let layer = |id: &str, status, reason, providers: &[&str]| LayerDecisionRecord {
        id: id.to_owned(),
        status,
        reason,
        required: id == "customer-profile",
        providers: providers.iter().map(|p| (*p).to_owned()).collect(),
        missing_inputs: Vec::new(),
        currentness: None,
    };
    let retained = profile
        .iter()
        .map(|item| RetainedItem {
            fingerprint: canonical_digest(item),
            item: item.clone(),
            expires_at_ms: started_at_ms + 7 * 24 * 3_600_000,
        })
        .collect();
    TurnTrace {
        turn: TurnRecord {
            kind: TURN_RECORD_KIND.to_owned(),
            turn_id: format!("0193a1b2-{i:08x}-7000-8000-00000000{:04x}", i % 65_536),
            tenant: tenant.to_owned(),
            project: "support".to_owned(),
            project_version: "1.4.0".to_owned(),
            build_digest: format!("sha256:{}", "a1".repeat(32)),
            binding_revision: Some("2026-11-30.1".to_owned()),
            binding_digest: Some(format!("sha256:{}", "b7".repeat(32))),
            profile: "default".to_owned(),
            objective: Some("billing".to_owned()),
            consumer: Some("support-agent".to_owned()),
            inputs: vec![InputDigest {
                key: "customerId".to_owned(),
                digest: key.input_digest("customerId", &customer),
            }],
            budget_max_bytes: 8000,
            deadline_ms: 1000,
            mode: Source::Live,
            layers: vec![
                layer("policy", LayerStatus::Included, LayerReason::Static, &[]),
                layer(
                    "customer-profile",
                    LayerStatus::Included,
                    LayerReason::ProviderItems,
                    &["customer-data"],
                ),
                if orders_status == ProviderStatus::Ok {
                    layer(
                        "orders",
                        LayerStatus::Included,
                        LayerReason::ProviderItems,
                        &["orders"],
                    )
                } else {
                    layer(
                        "orders",
                        LayerStatus::Unavailable,
                        LayerReason::ProviderFailed,
                        &["orders"],
                    )
                },
                if tickets_status == ProviderStatus::Timeout {
                    layer(
                        "tickets",
                        LayerStatus::Unavailable,
                        LayerReason::ProviderFailed,
                        &["tickets"],
                    )
                } else {
                    layer(
                        "tickets",
                        LayerStatus::Empty,
                        LayerReason::NotFound,
                        &["tickets"],
                    )
                },
                layer(
                    "escalation",
                    LayerStatus::NotRequested,
                    LayerReason::ObjectiveOutOfScope,
                    &[],
                ),
            ],
            selections,
            cuts: Vec::new(),
            blocked: false,
            blocking_layers: Vec::new(),
            rendered_digest: Some(format!("sha256:{}", "c3".repeat(32))),
            rendered_bytes: 2210,
            nonce: "9f86d081884c7d65".to_owned(),
            started_at: "2026-11-30T10:53:20.000Z".to_owned(),
            started_at_ms,
            duration_ms: 812,
        },
        providers,
        retained,
        build: (i == 0).then(|| {
            (
                format!("sha256:{}", "a1".repeat(32)),
                r#"{"id":"support","version":"1.4.0","layers":[]}"#.to_owned(),
            )
        }),
    }
}

struct Run {
    seconds: f64,
    records: u64,
}

impl Run {
    fn records_per_second(&self) -> f64 {
        self.records as f64 / self.seconds
    }
}

fn writer_run(dir: &Path, key: &DigestKey, rows: Vec<TraceRows>) -> Run {
    let path = dir.join("writer.db");
    let (sender, handle) = writer::spawn(&path, key, WriterSettings::default()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        for rows in rows {
            sender
                .enqueue_rows(rows, Duration::from_secs(60))
                .await
                .expect("the writer keeps up within a minute");
        }
    });
    let stats = handle.shutdown().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(stats.write_errors, 0);
    Run {
        seconds,
        records: stats.records,
    }
}

const INSERT_TURN: &str = "INSERT INTO turns (turn_id, tenant, project, build_digest, blocked, rendered_digest, started_at_ms, duration_ms, record, shape, provider_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
const INSERT_SHAPE_KEY: &str = "INSERT INTO shape_keys (tenant, kind, name, status, shape) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING";
const UPSERT_RETAINED: &str = "INSERT INTO retained_content (tenant, fingerprint, ciphertext, expires_at_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tenant, fingerprint) DO UPDATE SET expires_at_ms = excluded.expires_at_ms WHERE excluded.expires_at_ms > retained_content.expires_at_ms";
const INSERT_BUILD: &str =
    "INSERT INTO builds (digest, build) VALUES (?1, ?2) ON CONFLICT (digest) DO NOTHING";
const INSERT_DICTIONARY: &str =
    "INSERT INTO record_dictionaries (id, bytes) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING";

/// Inserts rows the plain way: prepared statements, one transaction per `BATCH` turns.
/// Returns the records written.
fn insert_plain(conn: &mut Connection, rows: &[TraceRows]) -> u64 {
    let mut records = 0u64;
    // Each dictionary and each shape's keys once, as the writer remembers what it stored.
    let mut dictionaries = std::collections::HashSet::new();
    let mut shapes = std::collections::HashSet::new();
    for chunk in rows.chunks(BATCH) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        {
            let mut insert_turn = tx.prepare_cached(INSERT_TURN).unwrap();
            let mut insert_shape_key = tx.prepare_cached(INSERT_SHAPE_KEY).unwrap();
            let mut upsert_retained = tx.prepare_cached(UPSERT_RETAINED).unwrap();
            let mut insert_build = tx.prepare_cached(INSERT_BUILD).unwrap();
            let mut insert_dictionary = tx.prepare_cached(INSERT_DICTIONARY).unwrap();
            for row in chunk {
                let (id, bytes) = row.dictionary();
                if dictionaries.insert(id) {
                    insert_dictionary.execute(params![id, bytes]).unwrap();
                }
                let t = &row.turn;
                insert_turn
                    .execute(params![
                        t.turn_id,
                        t.tenant,
                        t.project,
                        t.build_digest,
                        t.blocked,
                        t.rendered_digest,
                        t.started_at_ms,
                        t.duration_ms,
                        t.record,
                        row.shape.id,
                        row.provider_records
                    ])
                    .unwrap();
                if shapes.insert(row.shape.id) {
                    for key in &row.shape.keys {
                        insert_shape_key
                            .execute(params![
                                t.tenant,
                                key.kind,
                                key.name,
                                key.status,
                                row.shape.id
                            ])
                            .unwrap();
                    }
                }
                for retained in &row.retained {
                    upsert_retained
                        .execute(params![
                            t.tenant,
                            retained.fingerprint,
                            retained.ciphertext,
                            retained.expires_at_ms
                        ])
                        .unwrap();
                }
                if let Some((digest, build)) = &row.build {
                    insert_build.execute(params![digest, build]).unwrap();
                }
                records += 1 + u64::from(row.provider_records);
            }
        }
        tx.commit().unwrap();
    }
    records
}

fn plain_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    // As the store's write connection: references to `turns` are not enforced.
    conn.pragma_update(None, "foreign_keys", "OFF").unwrap();
    conn
}

fn baseline_run(dir: &Path, key: &DigestKey, rows: &[TraceRows]) -> Run {
    let path = dir.join("baseline.db");
    drop(TraceStore::open(&path, key).unwrap());
    let mut conn = plain_connection(&path);
    let started = Instant::now();
    let records = insert_plain(&mut conn, rows);
    let seconds = started.elapsed().as_secs_f64();
    drop(conn);
    Run { seconds, records }
}

/// Opt-in (`CTXD_BENCH_SEARCH=1`): search latency on a store of about a million provider
/// records, one line per search shape (median of 5, first page of 20).
fn search_probe(dir: &Path, key: &DigestKey) {
    const PROBE_TURNS: usize = 334_000;
    let path = dir.join("search.db");
    drop(TraceStore::open(&path, key).unwrap());
    let mut conn = plain_connection(&path);
    let encoder = RowEncoder::new(key);
    let started = Instant::now();
    for start in (0..PROBE_TURNS).step_by(10_000) {
        let rows: Vec<TraceRows> = (start..(start + 10_000).min(PROBE_TURNS))
            .map(|i| encoder.encode(&turn(key, i)))
            .collect();
        insert_plain(&mut conn, &rows);
    }
    drop(conn);
    let reader = TraceReader::open(&path, None).unwrap();
    let counts = reader.counts().unwrap();
    println!(
        "search probe: {} turns, {} provider records, built in {:.0} s",
        counts.turns,
        counts.provider_records,
        started.elapsed().as_secs_f64()
    );
    let acme = || SearchQuery {
        tenant: Some("acme".to_owned()),
        limit: 20,
        ..SearchQuery::default()
    };
    let old_window = STARTED_AT_MS + 3 * 1_000;
    let shapes: Vec<(&str, SearchQuery)> = vec![
        ("tenant only", acme()),
        (
            "provider=tickets providerStatus=TIMEOUT (2%)",
            SearchQuery {
                provider: Some("tickets".to_owned()),
                provider_status: Some(ProviderStatus::Timeout),
                ..acme()
            },
        ),
        (
            "provider=orders providerStatus=UNAVAILABLE (0.1%)",
            SearchQuery {
                provider: Some("orders".to_owned()),
                provider_status: Some(ProviderStatus::Unavailable),
                ..acme()
            },
        ),
        (
            "providerStatus=UNAVAILABLE",
            SearchQuery {
                provider_status: Some(ProviderStatus::Unavailable),
                ..acme()
            },
        ),
        (
            "provider=orders (11 status streams)",
            SearchQuery {
                provider: Some("orders".to_owned()),
                ..acme()
            },
        ),
        (
            "layer=tickets status=UNAVAILABLE",
            SearchQuery {
                layer: Some("tickets".to_owned()),
                layer_status: Some(LayerStatus::Unavailable),
                ..acme()
            },
        ),
        (
            "provider=tickets providerStatus=TIMEOUT layer=orders status=UNAVAILABLE",
            SearchQuery {
                provider: Some("tickets".to_owned()),
                provider_status: Some(ProviderStatus::Timeout),
                layer: Some("orders".to_owned()),
                layer_status: Some(LayerStatus::Unavailable),
                ..acme()
            },
        ),
        (
            "since/until: the newest hour",
            SearchQuery {
                since_ms: Some(STARTED_AT_MS + PROBE_TURNS as i64 * 3 - 3_600_000),
                ..acme()
            },
        ),
        (
            "since/until: the oldest 3 s (walks every newer turn)",
            SearchQuery {
                since_ms: Some(STARTED_AT_MS),
                until_ms: Some(old_window),
                ..acme()
            },
        ),
        (
            "no tenant: providerStatus=TIMEOUT (4 tenants merged)",
            SearchQuery {
                tenant: None,
                provider_status: Some(ProviderStatus::Timeout),
                ..acme()
            },
        ),
    ];
    for (name, query) in shapes {
        let mut times = Vec::new();
        let mut found = 0;
        for _ in 0..5 {
            let started = Instant::now();
            found = reader.search(&query).unwrap().traces.len();
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        println!("  {:>8.2} ms  {found:>2} turns  {name}", median(times));
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn main() {
    let key = DigestKey::from_bytes(b"bench-key-bench-key-bench-key-bench-key".to_vec()).unwrap();
    let traces: Vec<TurnTrace> = (0..TURNS).map(|i| turn(&key, i)).collect();
    let encode_started = Instant::now();
    let rows: Vec<TraceRows> = {
        let encoder = RowEncoder::new(&key);
        traces.iter().map(|t| encoder.encode(t)).collect()
    };
    let encode_seconds = encode_started.elapsed().as_secs_f64();
    println!("encode: {:.1} us/turn", encode_seconds * 1e6 / TURNS as f64);
    let turn_body = rows.iter().map(|r| r.turn.record.len()).sum::<usize>() / rows.len();
    println!(
        "trace_writer: {TURNS} turns x (1 turn row with a ~{turn_body} B body: the turn record and 3 provider records, compressed together; its shape: 3 provider and 5 layer (name, status) pairs, written once; 1 retained item), batches of {BATCH}, {RUNS} runs each"
    );

    let bench_dir = target_dir().join("bench");
    std::fs::create_dir_all(&bench_dir).unwrap();
    let mut writer_runs = Vec::new();
    let mut baseline_runs = Vec::new();
    for run in 1..=RUNS {
        let dir = tempfile::tempdir_in(&bench_dir).unwrap();
        // Neither side always runs on the other's leftovers (page cache, disk queue).
        let (writer, baseline) = if run % 2 == 1 {
            let writer = writer_run(dir.path(), &key, rows.clone());
            (writer, baseline_run(dir.path(), &key, &rows))
        } else {
            let baseline = baseline_run(dir.path(), &key, &rows);
            (writer_run(dir.path(), &key, rows.clone()), baseline)
        };
        assert_eq!(
            writer.records, baseline.records,
            "the same rows on both sides"
        );
        println!(
            "  run {run}: writer {:>9.0} records/s ({:.2} s)   baseline {:>9.0} records/s ({:.2} s)",
            writer.records_per_second(),
            writer.seconds,
            baseline.records_per_second(),
            baseline.seconds
        );
        writer_runs.push(writer);
        baseline_runs.push(baseline);
    }
    let records = writer_runs[0].records;
    let writer_rps = median(writer_runs.iter().map(Run::records_per_second).collect());
    let baseline_rps = median(baseline_runs.iter().map(Run::records_per_second).collect());
    let run_ratios: Vec<f64> = writer_runs
        .iter()
        .zip(&baseline_runs)
        .map(|(writer, baseline)| writer.records_per_second() / baseline.records_per_second())
        .collect();
    let ratio = median(run_ratios.clone());
    println!(
        "median: writer {writer_rps:.0} records/s, baseline {baseline_rps:.0} records/s; ratio {ratio:.3}, the median of the runs' ratios (target >= 0.9)"
    );
    let report = serde_json::json!({
        "bench": "trace_writer",
        "turns": TURNS,
        "records_per_run": records,
        "batch_size": BATCH,
        "runs": RUNS,
        "turn_body_bytes": turn_body,
        "writer": {
            "records_per_second": writer_rps,
            "seconds": writer_runs.iter().map(|r| r.seconds).collect::<Vec<_>>(),
        },
        "baseline": {
            "records_per_second": baseline_rps,
            "seconds": baseline_runs.iter().map(|r| r.seconds).collect::<Vec<_>>(),
        },
        "run_ratios": run_ratios,
        "ratio": ratio,
        "target_ratio": 0.9,
    });
    let out = bench_dir.join("trace_writer.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("wrote {}", out.display());
    if std::env::var_os("CTXD_BENCH_SEARCH").is_some() {
        let dir = tempfile::tempdir_in(&bench_dir).unwrap();
        search_probe(dir.path(), &key);
    }
}
