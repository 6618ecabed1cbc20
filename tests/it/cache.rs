//! The response cache end to end: a real `ctxd serve`, scripted provider servers that
//! count every lookup they receive. Identical lookups in flight reach the provider once,
//! a waiter's own deadline still holds, kept answers report `CACHE` and their age in the
//! answer, the trace and the metrics, `NOT_FOUND` is kept only by its own TTL, failures
//! never, and a layer that requires current data takes no answer older than its rule.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, metrics_of, provider, trace_of, turn};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const KEY: &str = "cache-test-key";
const VALUE: &str = "CUST-3141";

/// One provider `crm` behind one layer, whose `currentness` is `currentness`.
fn project(currentness: &str) -> String {
    json!({
        "id": "acme", "version": "1.0.0",
        "providers": [{"id": "crm", "name": "CRM",
                       "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 5}],
        "layers": [{"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}],
                    "currentness": currentness}]
    })
    .to_string()
}

/// `crm` bound to `server` with `extra` settings (the cache table, retention …).
fn binding(server: &RunningProvider, extra: &str) -> String {
    format!(
        "revision = \"cache-1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"{}\"\ntimeout_ms = 2000\n{extra}\n",
        server.url()
    )
}

fn start(server: &RunningProvider, currentness: &str, extra: &str) -> (Deployment, Ctxd) {
    let mut tenant = TenantSpec::new("acme", KEY, project(currentness), binding(server, extra));
    tenant.max_in_flight = 256;
    let deployment = Deployment::new(&[tenant]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    (deployment, ctxd)
}

fn lookup(deadline_ms: Option<u64>) -> Value {
    let mut body = json!({"project": "acme", "inputs": {"customerId": VALUE}});
    if let Some(ms) = deadline_ms {
        body["deadlineMs"] = json!(ms);
    }
    body
}

fn answering(delay: Duration) -> ProviderServer {
    ProviderServer::new()
        .lookup_items(vec![
            json!({"id": "R-1", "title": "Account", "content": "Gold customer since 2019"}),
        ])
        .currentness(Some("CURRENT"))
        .delay(delay)
}

/// The value of one series of the exposition (`name{labels}`), 0 when absent.
fn series(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_turns_with_one_value_reach_the_provider_once() {
    let server = answering(Duration::from_millis(400)).start().await;
    let (_deployment, ctxd) = start(&server, "preferred", "cache = { ttl = \"60s\" }");
    let before = metrics_of(&ctxd).await;
    for name in ["hits", "misses", "coalesced"] {
        let line = format!("ctxd_cache_{name}_total{{provider=\"crm\"}} 0");
        assert!(before.contains(&line), "{line} at start-up in\n{before}");
    }
    assert!(before.contains("ctxd_cache_evictions_total{provider=\"crm\",cause=\"size\"} 0"));
    assert!(before.contains("ctxd_cache_bytes 0"));

    // One client for the hundred turns: building a client reads the system's CA roots,
    // and a hundred of them built at once on the test's two threads would leave early
    // connections unwritten past the server's header deadline.
    let url = ctxd.url("/v1/turns");
    let http = client();
    let turns = (0..100).map(|_| {
        let (url, http) = (url.clone(), http.clone());
        tokio::spawn(async move {
            let response = http
                .post(url)
                .bearer_auth(KEY)
                .json(&lookup(None))
                .send()
                .await
                .expect("ctxd answers");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        })
    });
    let answers: Vec<(u16, Value)> = futures_util::future::join_all(turns)
        .await
        .into_iter()
        .map(|joined| joined.expect("the turn task ends"))
        .collect();
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body:#}");
        let crm = provider(body, "crm");
        assert_eq!(crm["status"], "OK", "{crm}");
        assert!(body["rendered"].as_str().unwrap().contains("Gold customer"));
    }
    assert_eq!(server.lookups(), 1, "one upstream call for a hundred turns");

    // The answer is kept: the next turn is served from the cache, with its age.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, later) = turn(&ctxd, KEY, lookup(None)).await;
    assert_eq!(status, 200);
    let crm = provider(&later, "crm");
    assert_eq!(crm["source"], "CACHE", "{crm}");
    assert!(crm["ageMs"].as_u64().unwrap() >= 50, "{crm}");
    assert_eq!(crm["currentness"], "CURRENT");
    assert_eq!(server.lookups(), 1);

    let after = metrics_of(&ctxd).await;
    let count = |name: &str| {
        series(
            &after,
            &format!("ctxd_cache_{name}_total{{provider=\"crm\"}}"),
        )
    };
    assert_eq!(count("misses"), 1.0, "{after}");
    assert_eq!(count("hits") + count("coalesced"), 100.0, "{after}");
    assert!(count("coalesced") >= 1.0, "{after}");
    assert!(series(&after, "ctxd_cache_bytes") > 0.0, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_deadline_passes_times_out_while_the_call_goes_on() {
    let server = answering(Duration::from_millis(800)).start().await;
    let (_deployment, ctxd) = start(&server, "preferred", "cache = { ttl = \"60s\" }");
    // The impatient turn starts the upstream call; the patient one joins it.
    let started = Instant::now();
    let impatient = async {
        let answer = turn(&ctxd, KEY, lookup(Some(150))).await;
        (answer, started.elapsed())
    };
    let patient = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let answer = turn(&ctxd, KEY, lookup(None)).await;
        (answer, started.elapsed())
    };
    let (((status, short), short_took), ((status_long, long), long_took)) =
        tokio::join!(impatient, patient);
    assert_eq!(status, 200, "{short:#}");
    let crm = provider(&short, "crm");
    assert_eq!(
        (crm["status"].as_str(), crm["detail"].as_str()),
        (Some("TIMEOUT"), Some("DEADLINE"))
    );
    assert!(short_took < Duration::from_millis(700), "{short_took:?}");

    assert_eq!(status_long, 200, "{long:#}");
    let crm = provider(&long, "crm");
    assert_eq!(crm["status"], "OK", "{crm}");
    assert_eq!(crm["source"], "LIVE", "answered while it waited: {crm}");
    assert!(crm.get("ageMs").is_none());
    assert!(long_took >= Duration::from_millis(700), "{long_took:?}");
    assert_eq!(server.lookups(), 1, "the call went on for the patient turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_kept_by_its_own_ttl_and_failures_never() {
    let missing = ProviderServer::new().status(404).start().await;
    let (_d1, kept) = start(
        &missing,
        "preferred",
        "cache = { ttl = \"60s\", not_found_ttl = \"10s\" }",
    );
    for expected_source in ["LIVE", "CACHE"] {
        let (_, body) = turn(&kept, KEY, lookup(None)).await;
        let crm = provider(&body, "crm");
        assert_eq!(crm["status"], "NOT_FOUND");
        assert_eq!(crm["source"], expected_source, "{crm}");
    }
    assert_eq!(missing.lookups(), 1);

    let missing_again = ProviderServer::new().status(404).start().await;
    let (_d2, not_kept) = start(&missing_again, "preferred", "cache = { ttl = \"60s\" }");
    for _ in 0..2 {
        let (_, body) = turn(&not_kept, KEY, lookup(None)).await;
        assert_eq!(provider(&body, "crm")["source"], "LIVE");
    }
    assert_eq!(
        missing_again.lookups(),
        2,
        "NOT_FOUND is not kept without its TTL"
    );

    let failing = ProviderServer::new()
        .behaviour(Behaviour::Status(503))
        .start()
        .await;
    let (_d3, failed) = start(
        &failing,
        "preferred",
        "cache = { ttl = \"60s\", not_found_ttl = \"60s\" }",
    );
    for _ in 0..2 {
        let (_, body) = turn(&failed, KEY, lookup(None)).await;
        assert_eq!(provider(&body, "crm")["detail"], "HTTP_503");
    }
    assert_eq!(failing.lookups(), 2, "a failure is never kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_requiring_current_data_takes_no_answer_older_than_its_rule() {
    // Default rule: a required layer's provider is always asked.
    let server = answering(Duration::ZERO).start().await;
    let (_d1, ctxd) = start(&server, "required", "cache = { ttl = \"60s\" }");
    for _ in 0..2 {
        let (_, body) = turn(&ctxd, KEY, lookup(None)).await;
        assert_eq!(provider(&body, "crm")["source"], "LIVE");
        assert_eq!(body["layers"][0]["status"], "INCLUDED");
    }
    assert_eq!(server.lookups(), 2);

    // Within `required_max_age`, a kept answer is taken.
    let server = answering(Duration::ZERO).start().await;
    let (_d2, ctxd) = start(
        &server,
        "required",
        "cache = { ttl = \"60s\", required_max_age = \"30s\" }",
    );
    turn(&ctxd, KEY, lookup(None)).await;
    let (_, body) = turn(&ctxd, KEY, lookup(None)).await;
    assert_eq!(provider(&body, "crm")["source"], "CACHE");
    assert_eq!(body["layers"][0]["status"], "INCLUDED");
    assert_eq!(server.lookups(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_answer_is_traced_as_such_and_replays_like_any_other() {
    let server = answering(Duration::ZERO).start().await;
    let (_deployment, ctxd) = start(
        &server,
        "preferred",
        "cache = { ttl = \"60s\" }\nretention = \"content\"",
    );
    let (_, live) = turn(&ctxd, KEY, lookup(None)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_, cached) = turn(&ctxd, KEY, lookup(None)).await;
    assert_eq!(server.lookups(), 1);
    let cached_id = cached["turnId"].as_str().unwrap();
    let age = provider(&cached, "crm")["ageMs"].as_u64().unwrap();

    let trace = trace_of(&ctxd, KEY, cached_id).await;
    let record = &trace["providers"][0];
    assert_eq!(record["source"], "CACHE", "{record:#}");
    assert_eq!(record["ageMs"].as_u64(), Some(age));
    let live_trace = trace_of(&ctxd, KEY, live["turnId"].as_str().unwrap()).await;
    let live_record = &live_trace["providers"][0];
    assert_eq!(live_record["source"], "LIVE");
    assert!(live_record.get("ageMs").is_none());
    // The same answer: the same items, observed when the provider gave them.
    assert_eq!(record["items"], live_record["items"]);
    assert_eq!(record["observedAtMs"], live_record["observedAtMs"]);

    // Retained content replays a cached answer exactly, as it does a live one.
    let response = client()
        .post(ctxd.url(&format!("/v1/turns/{cached_id}/replay")))
        .bearer_auth(KEY)
        .json(&json!({"inputs": {"customerId": VALUE}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let replay: Value = response.json().await.unwrap();
    assert_eq!(replay["exact"], true, "{replay:#}");
    assert_eq!(replay["renderedDigestMatches"], true, "{replay:#}");
    assert_eq!(server.lookups(), 1, "a replay contacts no provider");
    let logs = ctxd.logs();
    assert!(
        !logs.contains(VALUE),
        "the lookup value leaked into the logs"
    );
}
