//! `ctxd serve` end to end: real ctxd processes, scripted provider servers and real
//! SQLite files on loopback; exact statuses and details, limits, the circuit breaker,
//! fan-out, deadlines, graceful shutdown, and no secret or lookup value in any log.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, layer_status, provider, turn};
use crate::support::root;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub const KEY: &str = "acme-test-key";
pub const SECRET: &str = "crm-bearer-7f3a9c21d8e4b6a0";
/// A distinctive lookup value that must never appear in logs.
const VALUE: &str = "CUST-4242";

/// A project with one optional layer per provider (in order), each provider looked up
/// by `customerId`.
pub fn project(providers: &[&str], required: bool) -> String {
    let provider_specs: Vec<Value> = providers
        .iter()
        .map(|id| json!({"id": id, "name": id, "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 5}))
        .collect();
    let layers: Vec<Value> = providers
        .iter()
        .map(|id| json!({"id": format!("{id}-layer"), "name": format!("{id} layer"), "bindings": [{"provider": id}], "required": required}))
        .collect();
    json!({"id": "acme", "version": "1.0.0", "providers": provider_specs, "layers": layers})
        .to_string()
}

/// A binding of HTTP providers: `(id, endpoint, extra TOML lines)`.
pub fn binding(entries: &[(&str, String, &str)]) -> String {
    let mut text = String::from("revision = \"test-1\"\n[defaults]\ntimeout_ms = 800\n");
    for (id, endpoint, extra) in entries {
        text.push_str(&format!(
            "\n[providers.{id}]\ntype = \"http\"\nendpoint = \"{endpoint}\"\nsecret_env = \"CRM_TOKEN\"\n{extra}\n"
        ));
    }
    text
}

fn start_one(server: &RunningProvider, extra: &str) -> (Deployment, Ctxd) {
    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        KEY,
        project(&["crm"], false),
        binding(&[("crm", server.url(), extra)]),
    )]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    (deployment, ctxd)
}

pub fn lookup(value: &str) -> Value {
    json!({"project": "acme", "inputs": {"customerId": value}})
}

fn assert_clean_logs(ctxd: &Ctxd) {
    let logs = ctxd.logs();
    assert!(
        !logs.contains(SECRET),
        "the secret leaked into the logs:\n{logs}"
    );
    assert!(
        !logs.contains(VALUE),
        "the lookup value leaked into the logs:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_turn_reports_items_source_and_version() {
    let server = ProviderServer::new()
        .lookup_items(vec![json!({"id": VALUE, "title": "Account", "content": "Gold customer", "updatedAt": "2026-11-28"})])
        .version(Some("5.0.1"))
        .revision(Some("crm-r9"))
        .currentness(Some("CURRENT"))
        .start()
        .await;
    let (_deployment, ctxd) = start_one(&server, "");
    let (status, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(layer_status(&body, "crm-layer"), "INCLUDED");
    let crm = provider(&body, "crm");
    assert_eq!(crm["status"], "OK");
    assert_eq!(crm["source"], "LIVE");
    assert_eq!(crm["version"], "5.0.1");
    assert_eq!(crm["versionSource"], "response");
    assert_eq!(crm["revision"], "crm-r9");
    assert_eq!(body["bindingRevision"], "test-1");
    assert!(
        body["bindingDigest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(body["rendered"].as_str().unwrap().contains("Gold customer"));
    let locator = body["selections"][0]["locator"].as_str().unwrap();
    assert!(locator.starts_with("crm/item-") && locator.len() == "crm/item-".len() + 16);
    assert!(
        !body.to_string().contains(VALUE),
        "the response never echoes the value or record ids"
    );

    // The wire: value only in the body, bearer secret sent, exact path, no query.
    let lookups: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| !r.is_describe())
        .collect();
    assert_eq!(lookups.len(), 1);
    let request = &lookups[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.target, "/context");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(
        request.json(),
        json!({"contract": "context-provider.v1", "capability": "lookup", "provider": "crm",
               "key": "customerId", "value": VALUE, "limit": 5})
    );
    assert!(
        !request.head_text().contains(VALUE),
        "the value never reaches host, path or query"
    );
    assert_clean_logs(&ctxd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_misbehaviour_has_its_exact_status_and_detail() {
    let cases: Vec<(&str, Behaviour, &str, Option<&str>, &str)> = vec![
        ("404", Behaviour::Status(404), "NOT_FOUND", None, "EMPTY"),
        (
            "500",
            Behaviour::Status(500),
            "UNAVAILABLE",
            Some("HTTP_500"),
            "UNAVAILABLE",
        ),
        (
            "503",
            Behaviour::Status(503),
            "UNAVAILABLE",
            Some("HTTP_503"),
            "UNAVAILABLE",
        ),
        (
            "401",
            Behaviour::Status(401),
            "UNAVAILABLE",
            Some("UNAUTHORIZED"),
            "UNAVAILABLE",
        ),
        (
            "403",
            Behaviour::Status(403),
            "UNAVAILABLE",
            Some("UNAUTHORIZED"),
            "UNAVAILABLE",
        ),
        (
            "redirect",
            Behaviour::Redirect("http://127.0.0.1:9/elsewhere".into()),
            "INVALID_RESPONSE",
            Some("REDIRECT_REFUSED"),
            "UNAVAILABLE",
        ),
        (
            "oversize",
            Behaviour::OversizeContentLength,
            "LIMIT_EXCEEDED",
            Some("RESPONSE_TOO_LARGE"),
            "UNAVAILABLE",
        ),
        (
            "oversize chunked",
            Behaviour::OversizeChunked,
            "LIMIT_EXCEEDED",
            Some("RESPONSE_TOO_LARGE"),
            "UNAVAILABLE",
        ),
        (
            "too many items",
            Behaviour::TooManyItems(6),
            "LIMIT_EXCEEDED",
            Some("TOO_MANY_ITEMS"),
            "UNAVAILABLE",
        ),
        (
            "item too large",
            Behaviour::ItemTooLarge,
            "LIMIT_EXCEEDED",
            Some("ITEM_TOO_LARGE"),
            "UNAVAILABLE",
        ),
        (
            "reflected header",
            Behaviour::ReflectHeader(200),
            "SECRET_DETECTED",
            Some("CREDENTIAL_REFLECTED"),
            "UNAVAILABLE",
        ),
        (
            "reflected body",
            Behaviour::ReflectBody(200),
            "SECRET_DETECTED",
            Some("CREDENTIAL_REFLECTED"),
            "UNAVAILABLE",
        ),
        (
            "secret pattern",
            Behaviour::SecretItem,
            "SECRET_DETECTED",
            Some("private_key"),
            "UNAVAILABLE",
        ),
        (
            "wrong contract",
            Behaviour::WrongContract,
            "INCOMPATIBLE",
            Some("WRONG_CONTRACT"),
            "UNAVAILABLE",
        ),
        (
            "garbage",
            Behaviour::Garbage,
            "INVALID_RESPONSE",
            Some("MALFORMED"),
            "UNAVAILABLE",
        ),
        (
            "reset",
            Behaviour::ResetMidBody,
            "UNAVAILABLE",
            Some("CONNECTION_RESET"),
            "UNAVAILABLE",
        ),
        (
            "hang",
            Behaviour::Hang,
            "TIMEOUT",
            Some("DEADLINE"),
            "UNAVAILABLE",
        ),
    ];
    let mut servers = Vec::new();
    let mut ids = Vec::new();
    for (i, (_, behaviour, ..)) in cases.iter().enumerate() {
        let server = ProviderServer::new()
            .behaviour(behaviour.clone())
            .start()
            .await;
        ids.push(format!("p{i}"));
        servers.push(server);
    }
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let entries: Vec<(&str, String, &str)> = ids
        .iter()
        .zip(&servers)
        .map(|(id, server)| (id.as_str(), server.url(), "timeout_ms = 400"))
        .collect();
    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        KEY,
        project(&id_refs, false),
        binding(&entries),
    )]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    let started = Instant::now();
    let (status, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{body:#}");
    for (i, (name, _, expected_status, expected_detail, expected_layer)) in cases.iter().enumerate()
    {
        let report = provider(&body, &ids[i]);
        assert_eq!(report["status"], *expected_status, "{name}: {report}");
        assert_eq!(
            report["detail"].as_str(),
            *expected_detail,
            "{name}: {report}"
        );
        assert_eq!(report["source"], "LIVE", "{name}");
        assert_eq!(
            layer_status(&body, &format!("{}-layer", ids[i])),
            *expected_layer,
            "{name}"
        );
    }
    assert!(
        !body["blocked"].as_bool().unwrap(),
        "optional layers never block"
    );
    // Seventeen providers, one hanging for its whole 400 ms timeout: the fan-out is
    // concurrent, so the turn takes about the slowest call.
    assert!(elapsed < Duration::from_millis(2500), "took {elapsed:?}");
    let rendered = body["rendered"].as_str().unwrap();
    assert!(rendered.contains("Current facts are unknown: provider p16 returned TIMEOUT."));
    assert_clean_logs(&ctxd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_turn_answers_within_its_deadline() {
    let server = ProviderServer::new().hang().start().await;
    let (_deployment, ctxd) = start_one(&server, "timeout_ms = 5000");
    let started = Instant::now();
    let mut request = lookup(VALUE);
    request["deadlineMs"] = json!(300);
    let (status, body) = turn(&ctxd, KEY, request).await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(provider(&body, "crm")["status"], "TIMEOUT");
    assert!(
        elapsed < Duration::from_millis(300 + 250),
        "took {elapsed:?}"
    );
    assert!(elapsed >= Duration::from_millis(290), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_takes_the_slowest_provider_not_the_sum() {
    let mut servers = Vec::new();
    for _ in 0..4 {
        servers.push(
            ProviderServer::new()
                .delay(Duration::from_millis(300))
                .start()
                .await,
        );
    }
    let ids = ["a", "b", "c", "d"];
    let entries: Vec<(&str, String, &str)> = ids
        .iter()
        .zip(&servers)
        .map(|(id, s)| (*id, s.url(), ""))
        .collect();
    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        KEY,
        project(&ids, true),
        binding(&entries),
    )]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    // Warm the connections so connect time does not count.
    let _ = turn(&ctxd, KEY, lookup(VALUE)).await;
    let started = Instant::now();
    let (status, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200);
    for id in ids {
        assert_eq!(provider(&body, id)["status"], "OK");
    }
    assert!(elapsed >= Duration::from_millis(300));
    assert!(
        elapsed < Duration::from_millis(700),
        "4 × 300 ms providers took {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_circuit_opens_stops_calling_and_recovers() {
    let mut script = vec![Behaviour::Status(503); 3];
    script.extend(std::iter::repeat_n(Behaviour::Answer, 20));
    let server = ProviderServer::new()
        .describe_behaviour(Behaviour::Answer)
        .script(script)
        .start()
        .await;
    let (_deployment, ctxd) = start_one(
        &server,
        "[providers.crm.circuit]\nconsecutive_failures = 3\nopen_ms = 600\nhalf_open_probes = 1\n",
    );
    for _ in 0..3 {
        let (_, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
        assert_eq!(provider(&body, "crm")["detail"], "HTTP_503");
    }
    let lookups_before = server.lookups();
    let (_, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
    let crm = provider(&body, "crm");
    assert_eq!(crm["status"], "UNAVAILABLE");
    assert_eq!(crm["detail"], "CIRCUIT_OPEN");
    assert_eq!(
        server.lookups(),
        lookups_before,
        "an open circuit does not contact the provider"
    );

    tokio::time::sleep(Duration::from_millis(700)).await;
    let (_, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
    assert_eq!(
        provider(&body, "crm")["status"],
        "OK",
        "the half-open probe succeeds"
    );
    let (_, body) = turn(&ctxd, KEY, lookup(VALUE)).await;
    assert_eq!(provider(&body, "crm")["status"], "OK", "closed again");
    let logs = ctxd.logs();
    assert!(logs.contains("circuit opened"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_concurrency_limit_is_a_fast_overloaded() {
    let server = ProviderServer::new()
        .delay(Duration::from_millis(400))
        .start()
        .await;
    let (_deployment, ctxd) = start_one(&server, "max_concurrency = 1");
    let slow = turn(&ctxd, KEY, lookup(VALUE));
    let fast = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let answer = turn(&ctxd, KEY, lookup(VALUE)).await;
        (answer, started.elapsed())
    };
    let ((_, first), ((_, second), second_elapsed)) = tokio::join!(slow, fast);
    assert_eq!(provider(&first, "crm")["status"], "OK");
    let crm = provider(&second, "crm");
    assert_eq!(crm["status"], "UNAVAILABLE");
    assert_eq!(crm["detail"], "OVERLOADED");
    assert!(
        second_elapsed < Duration::from_millis(250),
        "fast: {second_elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_bad_requests_with_clear_errors() {
    let server = ProviderServer::new().start().await;
    let other = ProviderServer::new().start().await;
    let deployment = Deployment::new(&[
        TenantSpec::new(
            "acme",
            KEY,
            project(&["crm"], false),
            binding(&[("crm", server.url(), "")]),
        ),
        TenantSpec::new(
            "globex",
            "globex-test-key",
            project(&["crm"], false).replace("\"acme\"", "\"globex-support\""),
            binding(&[("crm", other.url(), "")]),
        ),
    ]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    let http = client();

    // No key, a wrong key, another scheme.
    let response = http
        .post(ctxd.url("/v1/turns"))
        .json(&lookup(VALUE))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let (status, body) = turn(&ctxd, "wrong-key", lookup(VALUE)).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "UNAUTHORIZED");
    let response = http
        .post(ctxd.url("/v1/turns"))
        .basic_auth("acme", Some(KEY))
        .json(&lookup(VALUE))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // A tenant sees only its own projects.
    let (status, body) = turn(&ctxd, "globex-test-key", lookup(VALUE)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["message"], "unknown project \"acme\"");
    let (status, _) = turn(
        &ctxd,
        "globex-test-key",
        json!({"project": "globex-support", "inputs": {"customerId": VALUE}}),
    )
    .await;
    assert_eq!(status, 200);

    // Unknown profile.
    let (status, body) = turn(&ctxd, KEY, json!({"project": "acme", "profile": "nope"})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["message"], "unknown profile \"nope\"");

    // Malformed JSON, unknown fields, wrong types — each names the field.
    let response = http
        .post(ctxd.url("/v1/turns"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let (status, body) = turn(&ctxd, KEY, json!({"project": "acme", "input": {}})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "input");
    let (status, body) = turn(
        &ctxd,
        KEY,
        json!({"project": "acme", "inputs": {"customerId": 4242}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "inputs.customerId");
    let (status, body) = turn(
        &ctxd,
        KEY,
        json!({"project": "acme", "budget": {"maxBytes": 10}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "budget.maxBytes");
    let (status, body) = turn(&ctxd, KEY, json!({"project": "acme", "deadlineMs": 1})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "deadlineMs");

    // Bodies over 64 KiB, declared or streamed.
    let big = json!({"project": "acme", "inputs": {"customerId": "x".repeat(70 * 1024)}});
    let (status, body) = turn(&ctxd, KEY, big).await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "PAYLOAD_TOO_LARGE");
    let chunks =
        futures_util::stream::iter((0..80).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024])));
    let response = http
        .post(ctxd.url("/v1/turns"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);

    // Unknown routes and methods.
    let response = http.get(ctxd.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let response = http
        .get(ctxd.url("/v1/turns"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);

    // An invalid value is a status, not an error, and is never sent.
    let lookups = server.lookups();
    let (status, body) = turn(&ctxd, KEY, lookup("../../etc/passwd")).await;
    assert_eq!(status, 200);
    assert_eq!(provider(&body, "crm")["status"], "INVALID_REQUEST");
    assert_eq!(server.lookups(), lookups);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_in_flight_limit_answers_429() {
    let server = ProviderServer::new()
        .delay(Duration::from_millis(500))
        .start()
        .await;
    let mut tenant = TenantSpec::new(
        "acme",
        KEY,
        project(&["crm"], false),
        binding(&[("crm", server.url(), "")]),
    );
    tenant.max_in_flight = 1;
    let deployment = Deployment::new(&[tenant]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    let first = turn(&ctxd, KEY, lookup(VALUE));
    let second = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        client()
            .post(ctxd.url("/v1/turns"))
            .bearer_auth(KEY)
            .json(&lookup(VALUE))
            .send()
            .await
            .unwrap()
    };
    let ((first_status, _), second) = tokio::join!(first, second);
    assert_eq!(first_status, 200);
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "1");
    // The slot is released afterwards.
    let (status, _) = turn(&ctxd, KEY, lookup(VALUE)).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness_follow_describe() {
    let healthy = ProviderServer::new().start().await;
    let incompatible = ProviderServer::new()
        .describe_behaviour(Behaviour::WrongContract)
        .start()
        .await;
    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        KEY,
        project(&["good", "bad"], false),
        binding(&[("good", healthy.url(), ""), ("bad", incompatible.url(), "")]),
    )]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    let http = client();
    let health = http.get(ctxd.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let mut ready: Value = Value::Null;
    for _ in 0..100 {
        // The providers' lines are shown to their tenant's key only.
        let response = http
            .get(ctxd.url("/readyz"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        let status = response.status();
        ready = response.json().await.unwrap();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready["status"], "degraded", "{ready:#}");
    let providers = ready["providers"].as_array().unwrap();
    let good = providers.iter().find(|p| p["provider"] == "good").unwrap();
    let bad = providers.iter().find(|p| p["provider"] == "bad").unwrap();
    assert_eq!(good["ready"], true);
    assert_eq!(bad["ready"], false);
    assert_eq!(bad["problem"], "INCOMPATIBLE (WRONG_CONTRACT)");
}

/// `/readyz`'s count of the coordinators' turns (shown to a tenant's key).
pub async fn readiness_turns(ctxd: &Ctxd) -> (u64, u64) {
    let ready: Value = client()
        .get(ctxd.url("/readyz"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let turns = &ready["turns"];
    (
        turns["inFlight"].as_u64().unwrap(),
        turns["finished"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_shows_the_turns_the_coordinators_are_running() {
    let server = ProviderServer::new()
        .delay(Duration::from_millis(600))
        .start()
        .await;
    let (_deployment, ctxd) = start_one(&server, "");
    assert_eq!(readiness_turns(&ctxd).await, (0, 0));
    let running = {
        let url = ctxd.url("/v1/turns");
        tokio::spawn(async move {
            client()
                .post(url)
                .bearer_auth(KEY)
                .json(&lookup(VALUE))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    let mut seen = (0, 0);
    for _ in 0..50 {
        seen = readiness_turns(&ctxd).await;
        if seen.0 == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, (1, 0), "the slow turn is in flight on a coordinator");
    assert_eq!(running.await.unwrap(), 200);
    assert_eq!(readiness_turns(&ctxd).await, (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_deployment_serves_live_from_sqlite_and_from_fixtures() {
    let config = root().join("config/ctxd.toml");
    let demo = json!({"project": "support", "objective": "support", "consumer": "support-agent",
                      "inputs": {"customerId": "CUST-1042"}});
    let key = "k".repeat(40);
    let env = [("CTXD_DIGEST_KEY", key.as_str())];
    let ctxd = Ctxd::start(&config, &[], &env);
    let (status, body) = turn(&ctxd, "ctxd-demo-key", demo.clone()).await;
    assert_eq!(status, 200, "{body:#}");
    for layer in ["policy", "customer-profile", "orders", "open-tickets"] {
        assert_eq!(layer_status(&body, layer), "INCLUDED", "{layer}: {body:#}");
    }
    let crm = provider(&body, "customer-data");
    assert_eq!(crm["source"], "LIVE");
    assert_eq!(crm["version"], "demo-support-db-1");
    assert_eq!(crm["versionSource"], "binding");
    assert!(
        body["rendered"]
            .as_str()
            .unwrap()
            .contains("Nordwind Logistics GmbH")
    );
    drop(ctxd);

    let ctxd = Ctxd::start(&config, &["--fixtures"], &env);
    let (status, body) = turn(&ctxd, "ctxd-demo-key", demo).await;
    assert_eq!(status, 200);
    assert_eq!(provider(&body, "customer-data")["source"], "TEST_FIXTURE");
    assert_eq!(layer_status(&body, "open-tickets"), "INCLUDED");
}

#[test]
fn a_signal_as_soon_as_the_address_is_announced_shuts_down_in_order() {
    // The signal handlers are in place before the address line: a supervisor that
    // stops ctxd the moment it sees it gets the ordered shutdown, never a killed process.
    for _ in 0..3 {
        let deployment = Deployment::new(&[TenantSpec::new(
            "acme",
            KEY,
            project(&["crm"], false),
            binding(&[("crm", "http://127.0.0.1:9/context".to_owned(), "")]),
        )]);
        let mut ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
        ctxd.terminate();
        let status = ctxd.wait(Duration::from_secs(15));
        assert!(status.success(), "clean exit: {status:?}\n{}", ctxd.logs());
        assert!(ctxd.logs().contains("shut down"), "{}", ctxd.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_accepted_turn() {
    let server = ProviderServer::new()
        .delay(Duration::from_millis(150))
        .start()
        .await;
    let (deployment, mut ctxd) = start_one(&server, "");
    let url = ctxd.url("/v1/turns");
    let http = client();
    let mut workers = Vec::new();
    for _ in 0..16 {
        let http = http.clone();
        let url = url.clone();
        workers.push(tokio::spawn(async move {
            let (mut ok, mut refused, mut unavailable) = (0usize, 0usize, 0usize);
            let mut broken = Vec::new();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(3) {
                match http
                    .post(&url)
                    .bearer_auth(KEY)
                    .json(&lookup(VALUE))
                    .send()
                    .await
                {
                    Ok(response) => match response.status().as_u16() {
                        200 => {
                            let body: Value = response.json().await.expect("a complete body");
                            assert_eq!(body["providers"][0]["status"], "OK");
                            ok += 1;
                        }
                        // Draining: the client goes away for as long as it is told,
                        // as a load balancer would.
                        503 => {
                            assert!(
                                response
                                    .headers()
                                    .get("connection")
                                    .is_some_and(|v| v == "close"),
                                "a draining answer closes its connection"
                            );
                            let retry_after: u64 = response.headers()["retry-after"]
                                .to_str()
                                .unwrap()
                                .parse()
                                .unwrap();
                            let body: Value = response.json().await.expect("a complete body");
                            assert_eq!(body["error"]["code"], "RUNTIME_UNAVAILABLE");
                            unavailable += 1;
                            tokio::time::sleep(Duration::from_secs(retry_after)).await;
                        }
                        other => broken.push(format!("status {other}")),
                    },
                    Err(e) if e.is_connect() => {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => broken.push(format!("{e:?}")),
                }
                if refused > 0 {
                    break;
                }
            }
            (ok, refused, unavailable, broken)
        }));
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    ctxd.terminate();
    let (mut total_ok, mut total_unavailable) = (0, 0);
    for worker in workers {
        let (ok, _, unavailable, broken) = worker.await.unwrap();
        assert!(
            broken.is_empty(),
            "accepted turns must be answered: {broken:?}"
        );
        total_ok += ok;
        total_unavailable += unavailable;
    }
    assert!(
        total_unavailable > 0,
        "the draining server answered new requests 503"
    );
    let status = ctxd.wait(Duration::from_secs(15));
    assert!(status.success(), "clean exit: {status:?}\n{}", ctxd.logs());
    assert!(total_ok > 16, "load was running: {total_ok}");
    // The shutdown flushed every answered turn's trace, and nothing else.
    let reader = ctxd::trace::store::TraceReader::open(&deployment.store(), None).unwrap();
    assert_eq!(reader.counts().unwrap().turns, total_ok as u64);
    let logs = ctxd.logs();
    assert!(logs.contains("shutting down"));
    assert!(logs.contains("shut down"));
    assert_clean_logs(&ctxd);
}
