//! Provenance end to end: what the trace store holds (and never holds), search, tenant
//! scoping, replay, crash durability, shutdown flushing and backpressure.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, layer_status, provider, turn};
use crate::support::{ctxd as ctxd_cli, stdout_of};
use ctxd::trace::store::TraceReader;
use serde_json::{Value, json};
use std::time::Duration;

const KEY: &str = "acme-trace-key";
const OTHER_KEY: &str = "globex-trace-key";
const SECRET: &str = "crm-bearer-5c1d9e77a0b3f214";
const VALUE: &str = "CUST-8675";
const RECORD_ID: &str = "REC-ZX81-4711";
const TITLE: &str = "Title-QWERTY-9";
const CONTENT: &str = "Content-PLUGH-7 lives at the old mill";

/// crm (retention content), orders (retention digest), slow (hangs: TIMEOUT).
fn project(id: &str) -> String {
    json!({
        "id": id, "version": "1.0.0",
        "providers": [
            {"id": "crm", "name": "CRM", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 3},
            {"id": "orders", "name": "Orders", "lookup": {"input": "customerId"}, "maxItems": 3},
            {"id": "slow", "name": "Slow", "lookup": {"input": "customerId"}, "maxItems": 3}
        ],
        "layers": [
            {"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}], "required": true},
            {"id": "history", "name": "History", "bindings": [{"provider": "orders"}]},
            {"id": "slow-layer", "name": "Slow layer", "bindings": [{"provider": "slow"}]}
        ],
        "profiles": [{"id": "default"}, {"id": "retained-only", "exclude": ["history"]}]
    })
    .to_string()
}

fn binding(crm: &RunningProvider, orders: &RunningProvider, slow: &RunningProvider) -> String {
    format!(
        "revision = \"trace-1\"\n[defaults]\ntimeout_ms = 300\n\
         [providers.crm]\ntype = \"http\"\nendpoint = \"{}\"\nsecret_env = \"CRM_TOKEN\"\nretention = \"content\"\nretention_ttl = \"1d\"\n\
         [providers.orders]\ntype = \"http\"\nendpoint = \"{}\"\nsecret_env = \"CRM_TOKEN\"\nretention = \"digest\"\n\
         [providers.slow]\ntype = \"http\"\nendpoint = \"{}\"\nsecret_env = \"CRM_TOKEN\"\n",
        crm.url(),
        orders.url(),
        slow.url()
    )
}

struct World {
    deployment: Deployment,
    ctxd: Ctxd,
    _servers: Vec<RunningProvider>,
}

async fn world(trace_extra: &str) -> World {
    let crm = ProviderServer::new()
        .lookup_items(vec![
            json!({"id": RECORD_ID, "title": TITLE, "content": CONTENT, "updatedAt": "2026-11-28"}),
        ])
        .start()
        .await;
    let orders = ProviderServer::new()
        .lookup_items(vec![
            json!({"id": "ORD-1", "title": "Order", "content": "Order content"}),
        ])
        .start()
        .await;
    let slow = ProviderServer::new().hang().start().await;
    let other = ProviderServer::new()
        .behaviour(Behaviour::Status(503))
        .start()
        .await;
    let acme = TenantSpec::new("acme", KEY, project("acme"), binding(&crm, &orders, &slow));
    let globex = TenantSpec::new(
        "globex",
        OTHER_KEY,
        project("globex"),
        binding(&crm, &other, &slow),
    );
    let deployment = Deployment::with_trace(&[acme, globex], trace_extra);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    World {
        deployment,
        ctxd,
        _servers: vec![crm, orders, slow, other],
    }
}

fn request(project: &str, profile: &str) -> Value {
    json!({"project": project, "profile": profile, "inputs": {"customerId": VALUE}})
}

/// Polls the search API until it returns `count` traces (the writer commits in
/// batches: traces appear within the batch window).
async fn search_until(ctxd: &Ctxd, key: &str, query: &str, count: usize) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let response = client()
            .get(ctxd.url(&format!("/v1/traces?{query}")))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        last = response.json().await.unwrap();
        if last["traces"].as_array().unwrap().len() >= count {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("search {query} never reached {count} traces: {last:#}");
}

fn turn_ids(page: &Value) -> Vec<String> {
    page["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turn"]["turnId"].as_str().unwrap().to_owned())
        .collect()
}

fn stop(world: &mut World) {
    world.ctxd.terminate();
    let status = world.ctxd.wait(Duration::from_secs(20));
    assert!(status.success(), "{}", world.ctxd.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_logs_never_hold_values_secrets_or_unretained_content() {
    let mut world = world("").await;
    let mut answered = 0;
    for profile in ["default", "retained-only", "default"] {
        let (status, body) = turn(&world.ctxd, KEY, request("acme", profile)).await;
        assert_eq!(status, 200, "{body:#}");
        assert_eq!(layer_status(&body, "profile"), "INCLUDED");
        answered += 1;
    }
    stop(&mut world);

    let store = world.deployment.store();
    let reader = TraceReader::open(&store, None).unwrap();
    assert_eq!(
        reader.counts().unwrap().turns,
        answered,
        "every 200 turn is recorded"
    );
    assert!(
        reader.counts().unwrap().retained_items >= 1,
        "crm content is retained"
    );
    drop(reader);
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", store.display());
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for needle in [
            VALUE,
            SECRET,
            RECORD_ID,
            TITLE,
            "Content-PLUGH",
            "Order content",
        ] {
            assert!(!text.contains(needle), "{needle} found in {path}");
        }
    }
    let logs = world.ctxd.logs();
    for needle in [VALUE, SECRET, RECORD_ID, TITLE, "Content-PLUGH"] {
        assert!(!logs.contains(needle), "{needle} found in the logs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_is_exact_paginated_and_tenant_scoped() {
    let world = world("").await;
    let mut acme_turns = Vec::new();
    for _ in 0..5 {
        let (status, body) = turn(&world.ctxd, KEY, request("acme", "default")).await;
        assert_eq!(status, 200);
        acme_turns.push(body["turnId"].as_str().unwrap().to_owned());
    }
    let (_, globex) = turn(&world.ctxd, OTHER_KEY, request("globex", "default")).await;
    assert_eq!(provider(&globex, "orders")["status"], "UNAVAILABLE");
    let globex_turn = globex["turnId"].as_str().unwrap().to_owned();

    let page = search_until(&world.ctxd, KEY, "provider=slow&providerStatus=TIMEOUT", 5).await;
    let mut found = turn_ids(&page);
    found.sort();
    let mut expected = acme_turns.clone();
    expected.sort();
    assert_eq!(found, expected, "exactly acme's turns");
    for trace in page["traces"].as_array().unwrap() {
        let slow = trace["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["provider"] == "slow")
            .unwrap();
        assert_eq!(slow["status"], "TIMEOUT");
        assert_eq!(slow["kind"], "context.provider.v1");
        assert_eq!(slow["lookupKey"], "customerId");
        assert!(
            slow["requestDigest"]
                .as_str()
                .unwrap()
                .starts_with("hmac-sha256:")
        );
        assert_eq!(slow["bindingRevision"], "trace-1");
    }
    // The same record must match both filters: crm is never TIMEOUT.
    let none = search_until(&world.ctxd, KEY, "provider=crm&providerStatus=TIMEOUT", 0).await;
    assert!(turn_ids(&none).is_empty());
    // orders is UNAVAILABLE only for globex: acme never sees it.
    let none = search_until(&world.ctxd, KEY, "providerStatus=UNAVAILABLE", 0).await;
    assert!(turn_ids(&none).is_empty());
    let theirs = search_until(
        &world.ctxd,
        OTHER_KEY,
        "provider=orders&providerStatus=UNAVAILABLE",
        1,
    )
    .await;
    assert_eq!(turn_ids(&theirs), [globex_turn]);
    let by_layer = search_until(&world.ctxd, KEY, "layer=slow-layer&status=UNAVAILABLE", 5).await;
    assert_eq!(turn_ids(&by_layer).len(), 5);

    // Stable cursor pagination, newest first, no duplicates.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=2&cursor={c}"),
            None => "limit=2".to_owned(),
        };
        let page = search_until(&world.ctxd, KEY, &query, 1).await;
        paged.extend(turn_ids(&page));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut newest_first = acme_turns.clone();
    newest_first.reverse();
    assert_eq!(paged, newest_first);

    // Cursors are sealed for one tenant and one search: a bare row number, another
    // tenant's cursor and another search's are refused, naming the parameter.
    let page = search_until(&world.ctxd, KEY, "limit=1", 1).await;
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    for (key, query) in [
        (KEY, "limit=1&cursor=0000000000000001".to_owned()),
        (KEY, format!("limit=1&cursor={}", "0".repeat(cursor.len()))),
        (OTHER_KEY, format!("limit=1&cursor={cursor}")),
        (KEY, format!("limit=1&provider=crm&cursor={cursor}")),
    ] {
        let response = client()
            .get(world.ctxd.url(&format!("/v1/traces?{query}")))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["field"], "cursor", "{query}: {body:#}");
    }
    let next = search_until(&world.ctxd, KEY, &format!("limit=5&cursor={cursor}"), 1).await;
    assert_eq!(
        turn_ids(&next)[0],
        newest_first[1],
        "the same search continues"
    );

    // One turn, tenant-scoped.
    let http = client();
    let mine = http
        .get(world.ctxd.url(&format!("/v1/traces/{}", acme_turns[0])))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(mine.status(), 200);
    let stored: Value = mine.json().await.unwrap();
    assert_eq!(stored["turn"]["tenant"], "acme");
    assert_eq!(stored["providers"].as_array().unwrap().len(), 3);
    let not_theirs = http
        .get(world.ctxd.url(&format!("/v1/traces/{}", acme_turns[0])))
        .bearer_auth(OTHER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(not_theirs.status(), 404);
    let bad = http
        .get(world.ctxd.url("/v1/traces?providerStatus=SLOW"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["field"], "providerStatus");
    let anonymous = http.get(world.ctxd.url("/v1/traces")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

/// Trace reads share a bounded pool of read connections: a burst of concurrent searches
/// and lookups, several times the pool's size, is answered in full and correctly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_trace_reads_all_succeed() {
    let world = world("").await;
    let mut acme_turns = Vec::new();
    for _ in 0..3 {
        let (status, body) = turn(&world.ctxd, KEY, request("acme", "default")).await;
        assert_eq!(status, 200, "{body:#}");
        acme_turns.push(body["turnId"].as_str().unwrap().to_owned());
    }
    search_until(&world.ctxd, KEY, "", 3).await;
    acme_turns.sort();

    let http = client();
    let mut reads = tokio::task::JoinSet::new();
    for i in 0..48 {
        let path = match i % 3 {
            0 => "/v1/traces?provider=slow&providerStatus=TIMEOUT".to_owned(),
            1 => "/v1/traces?limit=2".to_owned(),
            _ => format!("/v1/traces/{}", acme_turns[i % acme_turns.len()]),
        };
        let request = http.get(world.ctxd.url(&path)).bearer_auth(KEY);
        reads.spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (path, status, response.json::<Value>().await.unwrap())
        });
    }
    let mut answered = 0;
    while let Some(read) = reads.join_next().await {
        let (path, status, body) = read.unwrap();
        assert_eq!(status, 200, "{path}: {body:#}");
        if path.contains("TIMEOUT") {
            let mut found = turn_ids(&body);
            found.sort();
            assert_eq!(found, acme_turns, "{path}");
        } else if path.contains("limit=2") {
            assert_eq!(turn_ids(&body).len(), 2, "{path}");
            assert!(body["nextCursor"].is_string(), "{path}");
        } else {
            assert_eq!(body["turn"]["tenant"], "acme", "{path}");
        }
        answered += 1;
    }
    assert_eq!(answered, 48);
}

async fn replay(ctxd: &Ctxd, key: &str, turn_id: &str, inputs: Value) -> (u16, Value) {
    let response = client()
        .post(ctxd.url(&format!("/v1/turns/{turn_id}/replay")))
        .bearer_auth(key)
        .json(&json!({"inputs": inputs}))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn replayed<'a>(result: &'a Value, id: &str) -> &'a Value {
    result["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_is_exact_only_with_retained_content() {
    let mut world = world("").await;
    let (_, retained) = turn(&world.ctxd, KEY, request("acme", "retained-only")).await;
    let (_, mixed) = turn(&world.ctxd, KEY, request("acme", "default")).await;
    let retained_id = retained["turnId"].as_str().unwrap().to_owned();
    let mixed_id = mixed["turnId"].as_str().unwrap().to_owned();
    search_until(&world.ctxd, KEY, "", 2).await;
    let inputs = json!({"customerId": VALUE});

    // Retained content (crm) and a recorded TIMEOUT (slow): exact, same rendering.
    let (status, result) = replay(&world.ctxd, KEY, &retained_id, inputs.clone()).await;
    assert_eq!(status, 200, "{result:#}");
    assert_eq!(result["exact"], true, "{result:#}");
    assert_eq!(result["renderedDigestMatches"], true);
    assert_eq!(result["renderedDigest"], retained["renderedDigest"]);
    assert_eq!(replayed(&result, "crm")["replay"], "EXACT");
    assert_eq!(replayed(&result, "slow")["replay"], "EXACT");
    assert_eq!(replayed(&result, "slow")["status"], "TIMEOUT");

    // orders kept digests only: its content cannot come back.
    let (status, result) = replay(&world.ctxd, KEY, &mixed_id, inputs.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(result["exact"], false);
    assert_eq!(result["renderedDigestMatches"], false);
    assert_eq!(
        replayed(&result, "orders")["replay"],
        "LIVE_DEPENDENCY_UNAVAILABLE"
    );
    assert_eq!(replayed(&result, "crm")["replay"], "EXACT");

    // The inputs must be the original ones; errors name the key, never the value.
    let (status, body) = replay(
        &world.ctxd,
        KEY,
        &retained_id,
        json!({"customerId": "CUST-0000"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "inputs.customerId");
    assert!(!body.to_string().contains("CUST-0000"));
    let (status, _) = replay(&world.ctxd, KEY, &retained_id, json!({})).await;
    assert_eq!(status, 400);
    // Another tenant's turn is unknown.
    let (status, _) = replay(&world.ctxd, OTHER_KEY, &retained_id, inputs.clone()).await;
    assert_eq!(status, 404);

    stop(&mut world);
    // The CLI reads the store directly, with the same key.
    let config = world.deployment.config.to_str().unwrap().to_owned();
    let output = ctxd_cli()
        .args([
            "replay",
            &retained_id,
            "--input",
            &format!("customerId={VALUE}"),
            "--config",
            &config,
            "--tenant",
            "acme",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["exact"], true);
    let output = ctxd_cli()
        .args([
            "replay",
            &mixed_id,
            "--input",
            &format!("customerId={VALUE}"),
            "--config",
            &config,
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "not exact: exit 1");
    let output = ctxd_cli()
        .args([
            "traces",
            "search",
            "--config",
            &config,
            "--tenant",
            "acme",
            "--provider",
            "slow",
            "--provider-status",
            "TIMEOUT",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let page: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(page["traces"].as_array().unwrap().len(), 2);
    let output = ctxd_cli()
        .args(["traces", "show", &retained_id, "--config", &config])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(stdout_of(&output).contains(&retained_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_at_most_the_last_batch_window() {
    let mut world = world("batch_ms = 20").await;
    for _ in 0..8 {
        let (status, _) = turn(&world.ctxd, KEY, request("acme", "retained-only")).await;
        assert_eq!(status, 200);
    }
    // Past the batch window everything is committed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = std::process::Command::new("kill")
        .args(["-KILL", &world.ctxd.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    world.ctxd.wait(Duration::from_secs(10));
    let store = world.deployment.store();
    let connection = rusqlite::Connection::open(&store).unwrap();
    let check: String = connection
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(connection);
    let reader = TraceReader::open(&store, None).unwrap();
    assert_eq!(reader.counts().unwrap().turns, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_trace_queue_is_a_503_never_a_silent_drop() {
    let mut world = world("queue_capacity = 1\nbatch_size = 1\nbackpressure_ms = 50").await;
    let (status, _) = turn(&world.ctxd, KEY, request("acme", "retained-only")).await;
    assert_eq!(status, 200);
    search_until(&world.ctxd, KEY, "", 1).await;
    // Another writer holds the database: the trace writer stalls and its queue fills.
    let store = world.deployment.store();
    let blocker = rusqlite::Connection::open(&store).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let (status, body) = turn(&world.ctxd, KEY, request("acme", "retained-only")).await;
        if status == 503 {
            assert_eq!(body["error"]["code"], "RUNTIME_UNAVAILABLE");
        }
        statuses.push(status);
    }
    assert!(statuses.contains(&503), "{statuses:?}");
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    let answered = 1 + statuses.iter().filter(|s| **s == 200).count() as u64;
    stop(&mut world);
    let reader = TraceReader::open(&world.deployment.store(), None).unwrap();
    assert_eq!(
        reader.counts().unwrap().turns,
        answered,
        "every 200 has its trace; no 503 has one"
    );
}
