//! Handles end to end: a real turn keeps a large provider item behind a handle (layer
//! option `"handles": true`, small budget), and the handle API reads it only through
//! bounded operations — errors with their kinds and fields, deletion and expiry
//! tombstones, the per-handle operation trace and metrics, declared capabilities and
//! tenant isolation.

use crate::provider_server::{ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, get, metrics_of, turn};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub const KEY: &str = "acme-handles-key";
const OTHER_KEY: &str = "globex-handles-key";
const VALUE: &str = "CUST-7001";
/// A marker inside the large item: never in the rendered text, the trace store or logs.
const MARKER: &str = "QUOKKA-ERROR-MARKER";

fn project() -> String {
    project_with_max_items(2)
}

fn project_with_max_items(max_items: u32) -> String {
    json!({
        "id": "acme", "version": "1.0.0",
        "budget": {"maxBytes": 1500},
        "providers": [
            {"id": "logs", "name": "Logs", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": max_items}
        ],
        "layers": [
            {"id": "recent-logs", "name": "Recent logs", "bindings": [{"provider": "logs"}], "handles": true}
        ]
    })
    .to_string()
}

fn binding(server: &RunningProvider) -> String {
    format!(
        "revision = \"h1\"\n[providers.logs]\ntype = \"http\"\nendpoint = \"{}\"\n",
        server.url()
    )
}

/// ~40 KB of log lines; every 100th is an error carrying the marker.
fn large_content() -> String {
    (0..800)
        .map(|i| {
            if i % 100 == 7 {
                format!("{i:04} ERROR {MARKER} payment failed")
            } else {
                format!("{i:04} INFO request served in {} ms", i % 37)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub async fn provider() -> RunningProvider {
    ProviderServer::new()
        .lookup_items(vec![json!({
            "id": "LOG-1", "title": "Application log", "content": large_content()
        })])
        .start()
        .await
}

/// A deployment with two tenants on the same provider, and `[handles]` lines.
pub fn deployment(server: &RunningProvider, handles: &str) -> Deployment {
    let tenants = [
        TenantSpec::new("acme", KEY, project(), binding(server)),
        TenantSpec::new("globex", OTHER_KEY, project(), binding(server)),
    ];
    if handles.is_empty() {
        Deployment::new(&tenants)
    } else {
        // The helper writes these lines inside [trace]; a new table starts after them.
        Deployment::with_trace(&tenants, &format!("\n[handles]\n{handles}"))
    }
}

/// A turn whose large item is kept behind a handle; returns the response and handle.
pub async fn handle_from_turn(ctxd: &Ctxd, key: &str) -> (Value, Value) {
    let (status, body) = turn(
        ctxd,
        key,
        json!({"project": "acme", "inputs": {"customerId": VALUE}}),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    let handle = body["selections"]
        .as_array()
        .and_then(|s| s.iter().find_map(|s| s.get("handle")))
        .unwrap_or_else(|| panic!("no selection carries a handle: {body:#}"))
        .clone();
    assert_eq!(handle["version"], 1);
    let id = handle["id"].as_str().unwrap();
    assert!(id.starts_with("h_") && id.len() == 34, "{id}");
    let rendered = body["rendered"].as_str().unwrap();
    assert!(rendered.contains(id), "the reference names the handle");
    assert!(
        !rendered.contains(MARKER),
        "the material stays out of the text"
    );
    assert!(rendered.len() <= 1500);
    (body, handle)
}

pub async fn op(ctxd: &Ctxd, key: &str, id: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(ctxd.url(&format!("/v1/handles/{id}/ops")))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn delete(ctxd: &Ctxd, key: &str, id: &str) -> (u16, Value) {
    let response = client()
        .delete(ctxd.url(&format!("/v1/handles/{id}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The handle's trace once it lists `count` operations (the writer commits in batches).
pub async fn trace_of(ctxd: &Ctxd, key: &str, id: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = get(ctxd, key, &format!("/v1/handles/{id}/trace")).await;
        assert_eq!(status, 200, "{body:#}");
        let operations = body["operations"].as_array().unwrap().clone();
        if operations.len() >= count {
            return operations;
        }
        assert!(
            Instant::now() < deadline,
            "the trace never listed {count} operations: {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The `error.code` of an API error body (`<none>` when it has none).
pub fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<none>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_item_is_read_only_through_bounded_operations() {
    let server = provider().await;
    let deployment = deployment(&server, "");
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let (_, handle) = handle_from_turn(&ctxd, KEY).await;
    let id = handle["id"].as_str().unwrap();

    let (status, meta) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {"kind": "metadata"}}),
    )
    .await;
    assert_eq!(status, 200, "{meta:#}");
    assert_eq!(meta["metadata"]["kind"], "items");
    assert_eq!(meta["metadata"]["items"], 1);
    assert_eq!(meta["metadata"]["contentBytes"], large_content().len());
    assert_eq!(meta["sequence"], 1);
    assert_eq!(meta["handle"], handle);
    assert_eq!(
        meta["limits"],
        json!({"maxResults": 100, "maxBytes": 16384, "timeLimitMs": 100}),
        "the configured defaults"
    );

    // Bounded search: 8 matching lines, 3 asked for.
    let (status, search) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {
        "kind": "search", "pattern": "ERROR", "maxResults": 3}}),
    )
    .await;
    assert_eq!(status, 200, "{search:#}");
    let entries = search["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(search["truncated"], true);
    assert_eq!(entries[0]["item"], 0);
    assert_eq!(entries[0]["line"], 8);
    assert_eq!(
        entries[0]["text"],
        format!("0007 ERROR {MARKER} payment failed")
    );
    assert_eq!(search["sequence"], 2);
    assert!(search["bytesInspected"].as_u64().unwrap() > 0);

    // Global byte limit across the whole result.
    let (status, bounded) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {
        "kind": "search", "pattern": "INFO", "maxBytes": 100}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(bounded["bytesReturned"], 100);
    assert_eq!(bounded["truncated"], true);
    let returned: usize = bounded["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap().len())
        .sum();
    assert_eq!(returned, 100);

    // Item peek cut to maxBytes, map and reduce.
    let (status, peek) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {
        "kind": "peek", "item": 0, "maxBytes": 600}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(peek["entries"][0]["record"]["id"], "LOG-1");
    assert!(peek["bytesReturned"].as_u64().unwrap() <= 600);
    assert_eq!(peek["entries"][0]["truncated"], true);
    let (_, mapped) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {
        "kind": "map", "function": "length"}}),
    )
    .await;
    assert_eq!(
        mapped["entries"][0]["value"],
        large_content().chars().count()
    );
    let (_, count) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {
        "kind": "reduce", "function": "count"}}),
    )
    .await;
    assert_eq!(count["value"], 1);
    assert_eq!(count["entries"], json!([]));
    let (status, chunks) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {
        "kind": "partition", "by": "size", "size": 1, "maxBytes": 300}}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(chunks["bytesReturned"].as_u64().unwrap() <= 300);

    // Every refusal has its kind, status and fields.
    let cases: Vec<(Value, u16, &str, &str, Value)> = vec![
        (
            json!({"version": 2, "op": {"kind": "metadata"}}),
            409,
            "stale_handle",
            "currentVersion",
            json!(1),
        ),
        (
            json!({"version": 1, "op": {"kind": "map", "function": "eval"}}),
            403,
            "capability_denied",
            "operation",
            json!("map"),
        ),
        (
            json!({"version": 1, "op": {"kind": "reduce", "function": "sum"}}),
            403,
            "capability_denied",
            "operation",
            json!("reduce"),
        ),
        (
            json!({"version": 1, "op": {"kind": "partition", "by": "lines", "size": 2}}),
            400,
            "unsupported_partition",
            "supported",
            json!(["size"]),
        ),
        (
            json!({"version": 1, "op": {"kind": "partition", "by": "tokens", "size": 2}}),
            400,
            "unsupported_partition",
            "supported",
            json!(["size", "lines"]),
        ),
        (
            json!({"version": 1, "op": {"kind": "partition", "by": "size", "size": 0}}),
            400,
            "invalid_argument",
            "field",
            json!("op.size"),
        ),
        (
            json!({"version": 1, "op": {"kind": "metadata", "maxBytes": 1048577}}),
            400,
            "invalid_limit",
            "max",
            json!(1048576),
        ),
        (
            json!({"version": 1, "op": {"kind": "metadata", "maxResults": 0}}),
            400,
            "invalid_limit",
            "field",
            json!("op.maxResults"),
        ),
        (
            json!({"version": 1, "op": {"kind": "search", "pattern": ""}}),
            400,
            "invalid_pattern",
            "field",
            json!("op.pattern"),
        ),
        (
            json!({"version": 1, "op": {"kind": "peek", "item": 1}}),
            400,
            "out_of_range",
            "available",
            json!(1),
        ),
        (
            json!({"version": 1, "op": {"kind": "slice", "start": 2, "length": 1}}),
            400,
            "out_of_range",
            "field",
            json!("op.start"),
        ),
        (
            json!({"version": 1, "op": {"kind": "exec", "command": "cat /etc/passwd"}}),
            400,
            "invalid_argument",
            "field",
            json!("op.kind"),
        ),
    ];
    for (body, status, code, field, value) in &cases {
        let (got, answer) = op(&ctxd, KEY, id, body.clone()).await;
        assert_eq!(
            (got, error_code(&answer)),
            (*status, *code),
            "{body}: {answer:#}"
        );
        assert_eq!(&answer["error"][field], value, "{body}: {answer:#}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let (status, malformed) = op(
        &ctxd,
        KEY,
        "h_not-a-handle",
        json!({"version": 1, "op": {"kind": "metadata"}}),
    )
    .await;
    assert_eq!((status, error_code(&malformed)), (400, "invalid_handle"));
    let unknown_id = format!("h_{}", "0".repeat(32));
    let (status, unknown) = op(
        &ctxd,
        KEY,
        &unknown_id,
        json!({"version": 1, "op": {"kind": "metadata"}}),
    )
    .await;
    assert_eq!((status, error_code(&unknown)), (404, "unknown_handle"));
    let response = client()
        .post(ctxd.url(&format!("/v1/handles/{id}/ops")))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    // The trace lists every attempt on the handle, in sequence order, failures too.
    // 7 operations, the refusals, and the body that is not JSON; the malformed and
    // unknown ids resolve to nothing and are only counted.
    let attempts = 7 + cases.len() + 1;
    let trace = trace_of(&ctxd, KEY, id, attempts).await;
    let sequences: Vec<u64> = trace
        .iter()
        .map(|r| r["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=attempts as u64).collect::<Vec<_>>());
    assert_eq!(trace[0]["operation"], "metadata");
    assert_eq!(trace[0]["kind"], "ctxd.handle.operation.v1");
    assert_eq!(trace[1]["operation"], "search");
    assert_eq!(trace[1]["result"], "ok");
    assert_eq!(trace[1]["entries"], 3);
    assert_eq!(trace[1]["truncated"], true);
    assert_eq!(trace[2]["bytesReturned"], 100);
    assert!(trace[1]["bytesInspected"].as_u64().unwrap() > 0);
    assert_eq!(trace[1]["itemsInspected"], 1);
    for record in &trace {
        assert!(
            record["elapsedMs"].is_u64() && record["atMs"].is_i64(),
            "{record}"
        );
        assert!(record["at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(record["handle"], id);
        assert_eq!(record["tenant"], "acme");
    }
    let results: Vec<&str> = trace[7..]
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        results[..4],
        [
            "stale_handle",
            "capability_denied",
            "capability_denied",
            "unsupported_partition"
        ]
    );
    assert_eq!(
        trace.last().unwrap()["result"],
        "invalid_argument",
        "the body that is not JSON"
    );
    let (status, page) = get(
        &ctxd,
        KEY,
        &format!("/v1/handles/{id}/trace?after=2&limit=3"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(page["operations"].as_array().unwrap().len(), 3);
    assert_eq!(page["operations"][0]["sequence"], 3);
    assert_eq!(page["nextAfter"], 5);
    let (status, unknown_trace) = get(&ctxd, KEY, &format!("/v1/handles/{unknown_id}/trace")).await;
    assert_eq!(
        (status, error_code(&unknown_trace)),
        (404, "unknown_handle")
    );

    // No search pattern, returned text or material ever reaches the trace store.
    let store = std::fs::read(deployment.store()).unwrap();
    let wal = std::fs::read(format!("{}-wal", deployment.store().display())).unwrap_or_default();
    for bytes in [&store, &wal] {
        assert!(
            !bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()),
            "the material leaked into the trace store"
        );
    }
    assert!(
        !ctxd.logs().contains(MARKER),
        "the material leaked into the logs"
    );
    assert!(
        !ctxd.logs().contains(VALUE),
        "the lookup value leaked into the logs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_and_expired_handles_are_stale_and_other_tenants_see_nothing() {
    let server = provider().await;
    let deployment = deployment(&server, "ttl = \"2s\"");
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let (_, handle) = handle_from_turn(&ctxd, KEY).await;
    let id = handle["id"].as_str().unwrap().to_owned();
    let (_, other) = handle_from_turn(&ctxd, OTHER_KEY).await;
    let other_id = other["id"].as_str().unwrap().to_owned();
    assert_ne!(id, other_id);
    let metadata = json!({"version": 1, "op": {"kind": "metadata"}});

    // Tenant isolation: another tenant's handle does not exist for the caller.
    let (status, answer) = op(&ctxd, OTHER_KEY, &id, metadata.clone()).await;
    assert_eq!((status, error_code(&answer)), (404, "unknown_handle"));
    let (status, answer) = op(
        &ctxd,
        OTHER_KEY,
        &id,
        json!({"version": 7, "op": {"kind": "metadata"}}),
    )
    .await;
    assert_eq!(
        (status, error_code(&answer)),
        (404, "unknown_handle"),
        "not stale: its existence is not revealed"
    );
    let (status, answer) = delete(&ctxd, OTHER_KEY, &id).await;
    assert_eq!((status, error_code(&answer)), (404, "unknown_handle"));
    let (status, answer) = get(&ctxd, OTHER_KEY, &format!("/v1/handles/{id}/trace")).await;
    assert_eq!((status, error_code(&answer)), (404, "unknown_handle"));
    let (status, _) = op(&ctxd, OTHER_KEY, &other_id, metadata.clone()).await;
    assert_eq!(status, 200, "each tenant reads its own");

    // Delete leaves a tombstone: operations and a second delete are stale.
    let (status, deleted) = delete(&ctxd, KEY, &id).await;
    assert_eq!(status, 200, "{deleted:#}");
    assert_eq!(deleted["deleted"], true);
    assert_eq!(deleted["sequence"], 1);
    let (status, answer) = op(&ctxd, KEY, &id, metadata.clone()).await;
    assert_eq!((status, error_code(&answer)), (410, "stale_handle"));
    assert_eq!(answer["error"]["reason"], "deleted");
    assert_eq!(answer["error"]["deletedVersion"], 1);
    let (status, answer) = delete(&ctxd, KEY, &id).await;
    assert_eq!((status, error_code(&answer)), (410, "stale_handle"));
    let (status, answer) = op(&ctxd, OTHER_KEY, &id, metadata.clone()).await;
    assert_eq!(
        (status, error_code(&answer)),
        (404, "unknown_handle"),
        "a tombstone is tenant-scoped too"
    );
    let trace = trace_of(&ctxd, KEY, &id, 3).await;
    let summary: Vec<(&str, &str)> = trace
        .iter()
        .map(|r| {
            (
                r["operation"].as_str().unwrap(),
                r["result"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("delete", "ok"),
            ("metadata", "stale_handle"),
            ("delete", "stale_handle")
        ]
    );

    // Expiry: past the TTL the other tenant's handle is stale, with its version.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, answer) = op(&ctxd, OTHER_KEY, &other_id, metadata).await;
    assert_eq!(
        (status, error_code(&answer)),
        (410, "stale_handle"),
        "{answer:#}"
    );
    assert_eq!(answer["error"]["reason"], "expired");
    assert_eq!(answer["error"]["deletedVersion"], 1);
}

/// Each tenant holds its own share of the store, and a turn keeps only the handles it
/// returns: fifteen large items a turn, most dropped for budget, neither fill a tenant's
/// share nor touch another tenant's handles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_items_take_no_room_and_no_tenant_evicts_another() {
    let items: Vec<Value> = (0..15)
        .map(|i| json!({"id": format!("LOG-{i}"), "title": "Application log", "content": large_content()}))
        .collect();
    let server = ProviderServer::new().lookup_items(items).start().await;
    let tenants = [
        TenantSpec::new("acme", KEY, project_with_max_items(15), binding(&server)),
        TenantSpec::new(
            "globex",
            OTHER_KEY,
            project_with_max_items(15),
            binding(&server),
        ),
    ];
    // 1 MiB: half a MiB for each tenant; one turn's fifteen items are ~400 KB.
    let deployment = Deployment::with_trace(&tenants, "\n[handles]\nmax_total_bytes = 1048576");
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let metadata = json!({"version": 1, "op": {"kind": "metadata"}});

    let (_, theirs) = handle_from_turn(&ctxd, OTHER_KEY).await;
    let theirs = theirs["id"].as_str().unwrap().to_owned();
    let (body, mine) = handle_from_turn(&ctxd, KEY).await;
    let mine = mine["id"].as_str().unwrap().to_owned();
    let returned = body["selections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.get("handle").is_some())
        .count();
    let dropped = body["cuts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] == "DROPPED")
        .count();
    assert!(returned < 15 && dropped > 0, "{body:#}");

    // Were the dropped items kept, five more turns would fill acme's share, evicting
    // its first handle — and, in a shared store, globex's.
    for _ in 0..5 {
        handle_from_turn(&ctxd, KEY).await;
    }
    let (status, answer) = op(&ctxd, OTHER_KEY, &theirs, metadata.clone()).await;
    assert_eq!(
        status, 200,
        "another tenant's turns never evict: {answer:#}"
    );
    let (status, answer) = op(&ctxd, KEY, &mine, metadata).await;
    assert_eq!(status, 200, "dropped items took no room: {answer:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_and_metrics_are_declared() {
    let server = provider().await;
    let deployment = deployment(&server, "max_results_cap = 500\ndefault_max_results = 20");
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);

    let (status, capabilities) = get(&ctxd, KEY, "/v1/handles/capabilities").await;
    assert_eq!(status, 200, "{capabilities:#}");
    assert_eq!(capabilities["filesystem"], false);
    assert_eq!(capabilities["network"], false);
    assert_eq!(capabilities["backend"], "memory");
    assert_eq!(capabilities["sources"], json!(["text", "items"]));
    assert_eq!(
        capabilities["mapFunctions"],
        json!(["identity", "lowercase", "uppercase", "length"])
    );
    assert_eq!(
        capabilities["reduceFunctions"],
        json!(["count", "byte_count"])
    );
    assert_eq!(capabilities["limits"]["maxResultsCap"], 500);
    assert_eq!(capabilities["limits"]["defaultMaxResults"], 20);
    let response = client()
        .get(ctxd.url("/v1/handles/capabilities"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "tenant-authenticated");

    let (_, handle) = handle_from_turn(&ctxd, KEY).await;
    let id = handle["id"].as_str().unwrap();
    let (status, search) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {"kind": "search", "pattern": "INFO"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        search["entries"].as_array().unwrap().len(),
        20,
        "the configured default"
    );
    let (status, _) = op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {"kind": "search", "pattern": "INFO", "maxResults": 501}}),
    )
    .await;
    assert_eq!(status, 400, "the configured cap");
    op(
        &ctxd,
        KEY,
        id,
        json!({"version": 1, "op": {"kind": "map", "function": "eval"}}),
    )
    .await;

    let metrics = metrics_of(&ctxd).await;
    for line in [
        "ctxd_handle_operations_total{op=\"search\",result=\"ok\"} 1",
        "ctxd_handle_operations_total{op=\"search\",result=\"invalid_limit\"} 1",
        "ctxd_handle_operations_total{op=\"map\",result=\"capability_denied\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains(id), "no handle id in a label");
}

/// One tenant's burials never forget another's tombstones: `max_tombstones = 4` is 2 per
/// tenant; globex deletes one handle, then acme deletes five — globex's id still answers
/// `stale_handle`, and only acme's own oldest became `unknown_handle`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_deletes_never_forget_anothers_tombstones() {
    let server = provider().await;
    let deployment = deployment(&server, "max_tombstones = 4");
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let metadata = json!({"version": 1, "op": {"kind": "metadata"}});
    let (_, theirs) = handle_from_turn(&ctxd, OTHER_KEY).await;
    let theirs = theirs["id"].as_str().unwrap().to_owned();
    assert_eq!(delete(&ctxd, OTHER_KEY, &theirs).await.0, 200);
    let mut mine = Vec::new();
    for _ in 0..5 {
        let (_, handle) = handle_from_turn(&ctxd, KEY).await;
        let id = handle["id"].as_str().unwrap().to_owned();
        assert_eq!(delete(&ctxd, KEY, &id).await.0, 200);
        mine.push(id);
    }
    let (status, answer) = op(&ctxd, OTHER_KEY, &theirs, metadata.clone()).await;
    assert_eq!(
        (status, error_code(&answer)),
        (410, "stale_handle"),
        "{answer:#}"
    );
    assert_eq!(answer["error"]["reason"], "deleted");
    // acme keeps its own share, its newest two.
    let (status, answer) = op(&ctxd, KEY, &mine[4], metadata.clone()).await;
    assert_eq!((status, error_code(&answer)), (410, "stale_handle"));
    let (status, answer) = op(&ctxd, KEY, &mine[0], metadata).await;
    assert_eq!((status, error_code(&answer)), (404, "unknown_handle"));
}
