//! Micro-benchmarks of the pure core on the demo project: gating, assembling and
//! rendering a turn, bounds and secret scanning of provider items, canonical digests,
//! keyed locators, capturing a turn's trace and encoding its rows, writing the turn's
//! answer and records as JSON (serde_json against `ctxd::json`), and a trace batch
//! insert into a SQLite store.

use criterion::{Criterion, criterion_group, criterion_main};
use ctxd::bounds::check_items_refusing;
use ctxd::config::Retention;
use ctxd::contract::{Currentness, Item, Source, VersionSource};
use ctxd::digest::DigestKey;
use ctxd::gate::{self, GateRequest, Invocation};
use ctxd::kernel::{self, NoHandles, Rendering};
use ctxd::outcome::{Call, CallFacts, Outcome};
use ctxd::project::Project;
use ctxd::secrets;
use ctxd::trace::record::TurnTrace;
use ctxd::trace::store::{RowEncoder, TraceStore};
use ctxd::turn::{self, Answered, Ask, Immediate, ProviderTraceSettings, TurnFacts};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

const NONCE: &str = "00112233445566778899aabbccddeeff";
/// Turns per trace batch in the insert bench.
const TRACE_BATCH: usize = 64;
/// Batches written into one store before the bench starts a fresh one, so the file
/// stays small (~6 400 turns) however many iterations criterion runs.
const BATCHES_PER_STORE: u64 = 100;

fn demo() -> Project {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo/project.json");
    Project::load(std::path::Path::new(path)).expect("the demo project loads")
}

fn items(count: usize, content_bytes: usize) -> Vec<Item> {
    (0..count)
        .map(|i| Item {
            id: format!("ORD-{i:05}"),
            title: Some(format!("Order ORD-{i:05}")),
            content: "Pallet sensors shipped via freight; delivery confirmed. "
                .repeat(content_bytes / 56 + 1)[..content_bytes]
                .to_owned(),
            metadata: serde_json::json!({"status": "delivered", "totalEur": 1840.0})
                .as_object()
                .unwrap()
                .clone(),
            updated_at: Some("2026-11-24T16:02:00Z".to_owned()),
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let project = demo();
    let inputs: BTreeMap<String, String> =
        [("customerId".to_owned(), "CUST-1042".to_owned())].into();
    let request = GateRequest {
        profile: project.profile("default").unwrap(),
        objective: Some("support"),
        consumer: Some("support-agent"),
        inputs: &inputs,
    };
    c.bench_function("gate/plan demo turn", |b| {
        b.iter(|| gate::plan(black_box(&project), black_box(&request), &|_| true))
    });

    let plan = gate::plan(&project, &request, &|_| true);
    let calls: Vec<Call> = plan
        .invocations
        .iter()
        .map(|invocation| {
            let outcome = demo_answer(invocation);
            let facts = CallFacts::untimed(&outcome);
            Call::new(invocation.clone(), outcome, facts)
        })
        .collect();
    c.bench_function("kernel/assemble demo turn (11 items)", |b| {
        b.iter(|| {
            kernel::assemble(
                &project,
                &plan.decisions,
                black_box(&calls),
                12_000,
                "00112233445566778899aabbccddeeff",
            )
        })
    });
    c.bench_function("kernel/assemble with budget cuts (2 KiB)", |b| {
        b.iter(|| {
            kernel::assemble(
                &project,
                &plan.decisions,
                black_box(&calls),
                2_048,
                "00112233445566778899aabbccddeeff",
            )
        })
    });

    // The turn answer's bulk and a turn's trace records, written by serde_json (the
    // baseline) and by `ctxd::json` (what the turn path uses), in the same run.
    let result = kernel::assemble(&project, &plan.decisions, &calls, 12_000, NONCE);
    c.bench_function("json/demo turn result: serde_json", |b| {
        b.iter(|| serde_json::to_vec(black_box(&result)).unwrap())
    });
    c.bench_function("json/demo turn result: ctxd::json", |b| {
        b.iter(|| ctxd::json::to_vec(black_box(&result)).unwrap())
    });

    let large = items(100, 4_000);
    c.bench_function("bounds/check_items 100 items x 4 KB", |b| {
        b.iter(|| check_items_refusing(black_box(&large), 100))
    });
    c.bench_function("digest/canonical item fingerprint", |b| {
        b.iter(|| ctxd::digest::canonical_digest(black_box(&large[0])))
    });
}

/// Every demo provider answers its limit of 400-byte items.
fn demo_answer(invocation: &Invocation) -> Outcome {
    Outcome::items(
        items(invocation.limit as usize, 400),
        Currentness::Current,
        Source::Live,
    )
}

/// Clean prose (no detector matches), `bytes` long: the common case of a scan.
fn clean_text(bytes: usize) -> String {
    const LINES: [&str; 4] = [
        "Customer reported that the pallet sensors arrived on 2026-11-24 and were installed. ",
        "Order ORD-10420 shipped via freight; the delivery was confirmed at the loading dock. ",
        "The account is on the Enterprise plan with 240 seats in the EU-Central region. ",
        "Support ticket 5531: firmware update scheduled, no further action needed today. ",
    ];
    let mut text = String::with_capacity(bytes + 100);
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(LINES[i % LINES.len()]);
        i += 1;
    }
    text.truncate(bytes);
    text
}

/// `count` traces of the demo turn as the coordinator captures them (after the kernel,
/// whose keyed locators the response needs too): three providers, customer-data
/// retaining content (sealed on write), orders and tickets digests only.
fn demo_traces(answered: &Answered<'_>, key: &DigestKey, count: usize) -> Vec<TurnTrace> {
    let settings = |provider: &str| ProviderTraceSettings {
        provider_type: Some("http"),
        retention: if provider == "customer-data" {
            Retention::Content
        } else {
            Retention::Digest
        },
        retention_ttl: Duration::from_secs(7 * 24 * 3600),
    };
    (0..count)
        .map(|i| {
            let inputs: BTreeMap<String, String> =
                [("customerId".to_owned(), format!("CUST-{:04}", 1000 + i))].into();
            let turn_id = format!("bench-{i:06}");
            let facts = TurnFacts {
                turn_id: &turn_id,
                tenant: "demo",
                binding: Some(("2026-11-30.1", "sha256:b7b7b7b7")),
                ask: Ask {
                    profile: None,
                    objective: Some("support"),
                    consumer: Some("support-agent"),
                    inputs: &inputs,
                },
                deadline: Duration::from_secs(10),
                mode: Source::Live,
                started_at: SystemTime::now(),
                duration: Duration::from_millis(5),
            };
            answered.capture(&facts, key, &settings)
        })
        .collect()
}

fn trace_benches(c: &mut Criterion) {
    let key = DigestKey::from_bytes(b"bench-key-bench-key-bench-key-bench-key".to_vec()).unwrap();

    let clean = clean_text(64 * 1024);
    assert!(secrets::scan(&clean).is_none(), "the text is clean");
    c.bench_function("secrets/scan clean 64 KiB text", |b| {
        b.iter(|| secrets::scan(black_box(&clean)))
    });
    c.bench_function("trace/keyed locator", |b| {
        b.iter(|| key.locator(black_box("customer-data"), black_box("CUST-1042")))
    });

    let project = demo();
    let inputs: BTreeMap<String, String> =
        [("customerId".to_owned(), "CUST-1042".to_owned())].into();
    let ask = Ask {
        profile: None,
        objective: Some("support"),
        consumer: Some("support-agent"),
        inputs: &inputs,
    };
    let source = Immediate::new(|_: &str| true, demo_answer);
    let Ok(mut called) = turn::plan(&project, &ask, &source)
        .expect("the demo profile exists")
        .call_now(&source);
    for call in &mut called.calls {
        call.facts.version_source = Some(VersionSource::Response);
        call.facts.duration = Some(Duration::from_millis(3));
    }
    let answered = called.assemble(Rendering {
        max_bytes: 12_000,
        nonce: NONCE,
        handles: &mut NoHandles,
        locators: Some(&key),
    });
    c.bench_function("trace/capture demo turn", |b| {
        b.iter(|| demo_traces(black_box(&answered), &key, 1))
    });
    let encoded = demo_traces(&answered, &key, 64);
    c.bench_function("trace/encode demo turn rows", |b| {
        let encoder = RowEncoder::new(&key);
        // The build's first turns make its dictionary and give it its statistics.
        for trace in &encoded[..8] {
            encoder.encode(trace);
        }
        let mut next = 0;
        b.iter(|| {
            next = (next + 1) % encoded.len();
            encoder.encode(black_box(&encoded[next]))
        })
    });
    let trace = demo_traces(&answered, &key, 1).remove(0);
    let trace = &trace;
    let records_by = |write: fn(&mut Vec<u8>, &TurnTrace)| {
        move |b: &mut criterion::Bencher<'_>| {
            let mut text = Vec::new();
            b.iter(|| {
                text.clear();
                write(&mut text, black_box(trace));
                text.len()
            })
        }
    };
    c.bench_function(
        "json/demo turn records: serde_json",
        records_by(|text, trace| {
            serde_json::to_writer(&mut *text, &trace.turn).unwrap();
            for provider in &trace.providers {
                serde_json::to_writer(&mut *text, provider).unwrap();
            }
        }),
    );
    c.bench_function(
        "json/demo turn records: ctxd::json",
        records_by(|text, trace| {
            ctxd::json::write(text, &trace.turn).unwrap();
            for provider in &trace.providers {
                ctxd::json::write(text, provider).unwrap();
            }
        }),
    );

    let traces = demo_traces(&answered, &key, TRACE_BATCH);
    let bench_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&bench_dir).unwrap();
    let dir = tempfile::tempdir_in(&bench_dir).unwrap();
    let mut group = c.benchmark_group("trace");
    group.throughput(criterion::Throughput::Elements(TRACE_BATCH as u64));
    group.bench_function("write_batch 64 demo turns (SQLite, WAL)", |b| {
        let mut store_number = 0u64;
        let mut written = 0u64;
        let mut store: Option<TraceStore> = None;
        b.iter_custom(|iterations| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iterations {
                if store.is_none() || written.is_multiple_of(BATCHES_PER_STORE) {
                    drop(store.take());
                    let _ = std::fs::remove_dir_all(dir.path().join(store_number.to_string()));
                    store_number += 1;
                    let path = dir.path().join(store_number.to_string()).join("traces.db");
                    store = Some(TraceStore::open(&path, &key).unwrap());
                }
                // Fresh turn ids: the store skips a turn id it already holds.
                let batch: Vec<TurnTrace> = traces
                    .iter()
                    .enumerate()
                    .map(|(i, trace)| {
                        let mut trace = trace.clone();
                        trace.turn.turn_id = format!("bench-{written:08}-{i:03}");
                        trace
                    })
                    .collect();
                let started = Instant::now();
                store.as_mut().unwrap().write_batch(&batch).unwrap();
                elapsed += started.elapsed();
                written += 1;
            }
            elapsed
        })
    });
    group.finish();
}

criterion_group!(core, benches, trace_benches);
criterion_main!(core);
