//! Micro-benchmarks of the pure core on the demo project: gating, assembling and
//! rendering a turn, scanning provider items for secrets, and canonical digests.

use criterion::{Criterion, criterion_group, criterion_main};
use ctxd::contract::{Currentness, Item, Source};
use ctxd::gate::{self, GateRequest};
use ctxd::kernel::{self, Outcome};
use ctxd::project::Project;
use ctxd::providers::bounds::check_items;
use std::collections::BTreeMap;
use std::hint::black_box;

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
    let outcomes: Vec<Outcome> = plan
        .invocations
        .iter()
        .map(|i| {
            Outcome::items(
                items(i.limit as usize, 400),
                Currentness::Current,
                Source::Live,
            )
        })
        .collect();
    c.bench_function("kernel/assemble demo turn (11 items)", |b| {
        b.iter(|| {
            kernel::assemble(
                &project,
                &plan,
                black_box(&outcomes),
                12_000,
                "00112233445566778899aabbccddeeff",
            )
        })
    });
    c.bench_function("kernel/assemble with budget cuts (2 KiB)", |b| {
        b.iter(|| {
            kernel::assemble(
                &project,
                &plan,
                black_box(&outcomes),
                2_048,
                "00112233445566778899aabbccddeeff",
            )
        })
    });

    let large = items(100, 4_000);
    c.bench_function("bounds/check_items 100 items x 4 KB", |b| {
        b.iter(|| check_items(black_box(&large), 100))
    });
    c.bench_function("digest/canonical item fingerprint", |b| {
        b.iter(|| ctxd::digest::canonical_digest(black_box(&large[0])))
    });
}

criterion_group!(core, benches);
criterion_main!(core);
