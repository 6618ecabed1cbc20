//! The `rest` provider against scripted JSON APIs on 127.0.0.1: the request each API
//! receives (path, query, body, the auth header of each method, the value in its one
//! slot and nowhere else) and the exact (status, detail) of every answer.

use crate::provider_server::{Behaviour, ProviderServer, RecordedRequest, RunningProvider};
use ctxd::config::{Binding, ProviderKind, RestSpec};
use ctxd::contract::{ProviderStatus, Source};
use ctxd::outcome::Outcome;
use ctxd::providers::rest::RestProvider;
use ctxd::providers::{LookupCall, PoolSettings, Secret};
use ctxd::secrets::redact::SecretHandling;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// The bound secret: matches no secret-pattern detector, so only reflection finds it.
const SECRET: &str = "tok-3f9a1c77e2d4";
/// The lookup value; the scripted answers never contain it.
const VALUE: &str = "CUST-5150";
const DEADLINE: Duration = Duration::from_secs(5);

/// A binding file with one rest provider `crm` at `endpoint`, with `keys` in its table.
pub(crate) fn rest_spec(endpoint: &str, keys: &str) -> RestSpec {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("binding.toml");
    let text = format!(
        "revision = \"r1\"\n[providers.crm]\ntype = \"rest\"\nversion = \"v1\"\nendpoint = \"{endpoint}\"\n{keys}"
    );
    std::fs::write(&path, text).expect("write binding");
    let binding = Binding::load(&path).unwrap_or_else(|e| panic!("{e}"));
    match &binding.providers["crm"].kind {
        ProviderKind::Rest(spec) => (**spec).clone(),
        other => panic!("not rest: {other:?}"),
    }
}

pub(crate) fn rest_provider(spec: &RestSpec, secret: Option<&str>) -> RestProvider {
    RestProvider::new(
        spec,
        secret.map(Secret::new),
        &PoolSettings::default(),
        Duration::from_secs(2),
    )
    .expect("a loopback endpoint is accepted")
}

pub(crate) async fn lookup_with(
    provider: &RestProvider,
    value: &str,
    limit: u32,
    secrets: SecretHandling,
) -> Outcome {
    let call = LookupCall {
        provider: "crm",
        key: "customerId",
        value,
        limit,
        deadline: Instant::now() + DEADLINE,
        secrets,
    };
    let outcome = provider.lookup(&call).await;
    let debug = format!("{outcome:?}");
    assert!(!debug.contains(SECRET), "secret in {debug}");
    outcome
}

async fn lookup(provider: &RestProvider) -> Outcome {
    let outcome = lookup_with(provider, VALUE, 5, SecretHandling::Refuse).await;
    assert!(!format!("{outcome:?}").contains(VALUE));
    outcome
}

#[track_caller]
fn assert_failed(outcome: &Outcome, status: ProviderStatus, detail: &str) {
    assert_eq!(
        (outcome.status(), outcome.detail()),
        (status, Some(detail)),
        "{outcome:?}"
    );
    assert!(outcome.items_found().is_empty());
    assert_eq!(outcome.source, Source::Live);
}

/// A complete response with these headers; the connection closes after it.
pub(crate) fn raw(code: u16, headers: &[(&str, &str)], body: &Value) -> Behaviour {
    let body = serde_json::to_vec(body).expect("json");
    let mut head = format!(
        "HTTP/1.1 {code} Status\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&body);
    Behaviour::Raw(bytes)
}

/// `http://127.0.0.1:PORT`: the scripted server's origin, without its default path.
pub(crate) fn origin(server: &RunningProvider) -> String {
    let url = server.endpoint();
    format!(
        "http://{}",
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

async fn serving(answer: Behaviour) -> RunningProvider {
    ProviderServer::new().behaviour(answer).start().await
}

fn customer(id: &str) -> Value {
    json!({
        "id": id, "name": "Acme GmbH", "notes": "Renewal due in March.",
        "modified": "2026-11-02T09:00:00Z", "plan": {"name": "Enterprise"}, "tags": ["vip"]
    })
}

const CUSTOMER_MAPPING: &str = r#"[providers.crm.mapping]
id = "$.id"
title = "$.name"
content = "$.notes"
updated_at = "$.modified"
metadata = { plan = "$.plan.name", tags = "$.tags[*]" }
"#;

/// The one request the server received.
fn only_request(server: &RunningProvider) -> RecordedRequest {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests.into_iter().next().unwrap()
}

/// The value appears exactly once in everything the server received.
#[track_caller]
pub(crate) fn value_once(request: &RecordedRequest, value: &str) {
    let everything = format!(
        "{}\r\n{}",
        request.head_text(),
        String::from_utf8_lossy(&request.body)
    );
    assert_eq!(everything.matches(value).count(), 1, "{everything}");
}

#[tokio::test]
async fn a_path_slot_request_maps_an_object_to_one_item() {
    let server = serving(Behaviour::Json(200, customer("CUST-9"))).await;
    let spec = rest_spec(
        &format!("{}/api/v2", origin(&server)),
        &format!(
            "path = \"/customers/{{value}}\"\nparams = {{ expand = \"plan\" }}\nheaders = {{ X-Tenant = \"acme\" }}\nauth = {{ type = \"bearer\", token_env = \"CRM_TOKEN\" }}\n{CUSTOMER_MAPPING}"
        ),
    );
    let outcome = lookup(&rest_provider(&spec, Some(SECRET))).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    let items = outcome.items_found();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, "CUST-9");
    assert_eq!(items[0].title.as_deref(), Some("Acme GmbH"));
    assert_eq!(items[0].content, "Renewal due in March.");
    assert_eq!(items[0].updated_at.as_deref(), Some("2026-11-02T09:00:00Z"));
    assert_eq!(
        Value::Object(items[0].metadata.clone()),
        json!({"plan": "Enterprise", "tags": ["vip"]})
    );
    assert_eq!(outcome.items_dropped, 0);

    let request = only_request(&server);
    assert_eq!(request.method, "GET");
    assert_eq!(request.path, format!("/api/v2/customers/{VALUE}"));
    assert_eq!(request.query.as_deref(), Some("expand=plan"));
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(request.header("x-tenant"), Some("acme"));
    assert_eq!(request.header("accept"), Some("application/json"));
    assert!(request.body.is_empty());
    value_once(&request, VALUE);
}

#[tokio::test]
async fn query_and_body_slots_carry_the_value_and_the_limit() {
    let server = serving(Behaviour::Json(
        200,
        json!({"results": [customer("A-1"), customer("A-2")]}),
    ))
    .await;
    let query_spec = rest_spec(
        &origin(&server),
        &format!(
            "path = \"/search\"\nparams = {{ customer = \"{{value}}\", size = \"{{limit}}\" }}\n{CUSTOMER_MAPPING}items = \"$.results\"\n"
        ),
    );
    let outcome = lookup(&rest_provider(&query_spec, None)).await;
    assert_eq!(outcome.items_found().len(), 2, "{outcome:?}");
    let request = only_request(&server);
    assert_eq!(request.path, "/search");
    assert_eq!(
        request.query.as_deref(),
        Some(format!("customer={VALUE}&size=5").as_str())
    );
    assert_eq!(request.header("authorization"), None);
    value_once(&request, VALUE);

    let server = serving(Behaviour::Json(200, json!({"results": [customer("B-1")]}))).await;
    let body_spec = rest_spec(
        &origin(&server),
        &format!(
            "method = \"POST\"\npath = \"/search\"\nbody = {{ filter = {{ customer = \"{{value}}\" }}, size = \"{{limit}}\" }}\n{CUSTOMER_MAPPING}items = \"$.results\"\n"
        ),
    );
    let outcome = lookup(&rest_provider(&body_spec, None)).await;
    assert_eq!(outcome.items_found()[0].id, "B-1");
    let request = only_request(&server);
    assert_eq!(request.method, "POST");
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.query, None);
    assert_eq!(
        request.json(),
        json!({"filter": {"customer": VALUE}, "size": 5})
    );
    value_once(&request, VALUE);
}

#[tokio::test]
async fn each_auth_method_sends_the_secret_in_its_one_place() {
    let cases: &[(&str, &str, &str)] = &[
        ("{ type = \"none\" }", "", ""),
        (
            "{ type = \"bearer\", token_env = \"T\" }",
            "authorization",
            "Bearer tok-3f9a1c77e2d4",
        ),
        (
            "{ type = \"basic\", username = \"ctxd-svc\", password_env = \"T\" }",
            "authorization",
            "Basic Y3R4ZC1zdmM6dG9rLTNmOWExYzc3ZTJkNA==",
        ),
        (
            "{ type = \"api_key\", key_env = \"T\" }",
            "x-api-key",
            SECRET,
        ),
        (
            "{ type = \"api_key\", header = \"X-Key\", key_env = \"T\" }",
            "x-key",
            SECRET,
        ),
        (
            "{ type = \"header\", name = \"X-Auth-Token\", value_env = \"T\" }",
            "x-auth-token",
            SECRET,
        ),
        (
            "{ type = \"query\", param = \"api_key\", value_env = \"T\" }",
            "",
            "",
        ),
    ];
    for (auth, header, expected) in cases {
        let server = serving(Behaviour::Json(200, customer("C-1"))).await;
        let spec = rest_spec(
            &origin(&server),
            &format!("path = \"/c/{{value}}\"\nauth = {auth}\n{CUSTOMER_MAPPING}"),
        );
        let secret = (!auth.contains("none")).then_some(SECRET);
        let outcome = lookup(&rest_provider(&spec, secret)).await;
        assert_eq!(outcome.status(), ProviderStatus::Ok, "{auth}: {outcome:?}");
        let request = only_request(&server);
        let head = request.head_text();
        if auth.contains("query") {
            assert_eq!(
                request.query.as_deref(),
                Some(format!("api_key={SECRET}").as_str()),
                "{auth}"
            );
            assert_eq!(request.header("authorization"), None);
            assert_eq!(head.matches(SECRET).count(), 1, "{head}");
        } else if header.is_empty() {
            assert!(
                !head.to_ascii_lowercase().contains("authorization"),
                "{head}"
            );
            assert_eq!(request.query, None);
        } else {
            assert_eq!(request.header(header), Some(*expected), "{auth}: {head}");
            assert_eq!(request.query, None, "{auth}");
            assert_eq!(head.matches(expected).count(), 1, "{auth}: {head}");
        }
        value_once(&request, VALUE);
    }
}

#[tokio::test]
async fn statuses_map_to_outcomes() {
    use ProviderStatus::*;
    let cases: Vec<(Behaviour, ProviderStatus, Option<&str>)> = vec![
        (Behaviour::Status(404), NotFound, None),
        (Behaviour::Status(401), Unavailable, Some("UNAUTHORIZED")),
        (Behaviour::Status(403), Unavailable, Some("UNAUTHORIZED")),
        (Behaviour::Status(400), InvalidRequest, Some("HTTP_400")),
        (
            Behaviour::Json(422, json!({"message": "Validation Failed"})),
            InvalidRequest,
            Some("HTTP_422"),
        ),
        (Behaviour::Status(500), Unavailable, Some("HTTP_500")),
        (Behaviour::Status(503), Unavailable, Some("HTTP_503")),
        (
            Behaviour::Redirect("http://127.0.0.1:9/elsewhere".into()),
            InvalidResponse,
            Some("REDIRECT_REFUSED"),
        ),
        (Behaviour::Garbage, InvalidResponse, Some("NOT_JSON")),
        (
            Behaviour::Json(200, json!("just a string")),
            InvalidResponse,
            Some("NO_ITEM_LIST"),
        ),
        (
            Behaviour::Json(200, json!([{"name": "no id"}])),
            InvalidResponse,
            Some("MAPPING_FAILED"),
        ),
        (Behaviour::Json(200, json!([])), NotFound, None),
        (
            Behaviour::OversizeChunked,
            LimitExceeded,
            Some("RESPONSE_TOO_LARGE"),
        ),
        (
            Behaviour::OversizeContentLength,
            LimitExceeded,
            Some("RESPONSE_TOO_LARGE"),
        ),
        (
            Behaviour::ReflectBody(200),
            SecretDetected,
            Some("CREDENTIAL_REFLECTED"),
        ),
        (
            Behaviour::ReflectBody(401),
            SecretDetected,
            Some("CREDENTIAL_REFLECTED"),
        ),
        (
            Behaviour::ReflectHeader(404),
            SecretDetected,
            Some("CREDENTIAL_REFLECTED"),
        ),
    ];
    for (behaviour, status, detail) in cases {
        let label = format!("{behaviour:?}");
        let label = &label[..label.len().min(60)];
        let server = serving(behaviour).await;
        let spec = rest_spec(
            &origin(&server),
            &format!(
                "path = \"/c/{{value}}\"\nauth = {{ type = \"bearer\", token_env = \"T\" }}\n{CUSTOMER_MAPPING}"
            ),
        );
        let outcome = lookup(&rest_provider(&spec, Some(SECRET))).await;
        assert_eq!(
            (outcome.status(), outcome.detail()),
            (status, detail),
            "{label}: {outcome:?}"
        );
        assert_eq!(server.hits(), 1, "{label}");
    }
}

#[tokio::test]
async fn a_429_holds_every_call_until_retry_after() {
    let server = ProviderServer::new()
        .script(vec![raw(
            429,
            &[("retry-after", "1")],
            &json!({"message": "API rate limit exceeded"}),
        )])
        .behaviour(Behaviour::Json(200, customer("C-1")))
        .start()
        .await;
    let spec = rest_spec(
        &origin(&server),
        &format!("path = \"/c/{{value}}\"\n{CUSTOMER_MAPPING}"),
    );
    let provider = rest_provider(&spec, None);
    let first = lookup(&provider).await;
    assert_failed(&first, ProviderStatus::Unavailable, "RATE_LIMITED");
    let started = std::time::Instant::now();
    // Every call before Retry-After fails fast without reaching the API; clones share it.
    for _ in 0..3 {
        let held = lookup(&provider.clone()).await;
        assert_failed(&held, ProviderStatus::Unavailable, "RATE_LIMITED");
    }
    let probed = provider.clone();
    assert_eq!(server.hits(), 1);
    assert!(started.elapsed() < Duration::from_millis(900));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after = lookup(&probed).await;
    assert_eq!(after.status(), ProviderStatus::Ok, "{after:?}");
    assert_eq!(server.hits(), 2);
}

#[tokio::test]
async fn dot_segments_and_encoded_slashes_stay_inside_their_segment() {
    let server = serving(Behaviour::Json(200, customer("C-1"))).await;
    let spec = rest_spec(
        &format!("{}/base", origin(&server)),
        &format!("path = \"/customers/{{value}}/profile\"\n{CUSTOMER_MAPPING}"),
    );
    let provider = rest_provider(&spec, None);
    for value in ["..", "."] {
        let outcome = lookup_with(&provider, value, 5, SecretHandling::Refuse).await;
        assert_failed(
            &outcome,
            ProviderStatus::InvalidRequest,
            "VALUE_NOT_A_PATH_SEGMENT",
        );
    }
    assert_eq!(server.hits(), 0, "nothing is sent for a dot segment");

    let outcome = lookup_with(&provider, "a%2F..%2Fadmin", 5, SecretHandling::Refuse).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);
    let sneaky = lookup_with(&provider, "a/../../admin?x=1", 5, SecretHandling::Refuse).await;
    assert_eq!(sneaky.status(), ProviderStatus::Ok);
    let requests = server.requests();
    assert_eq!(
        requests[0].path,
        "/base/customers/a%252F..%252Fadmin/profile"
    );
    assert_eq!(
        requests[1].path,
        "/base/customers/a%2F..%2F..%2Fadmin%3Fx=1/profile"
    );
    assert!(requests.iter().all(|r| r.query.is_none()));

    let server = serving(Behaviour::Json(200, customer("C-1"))).await;
    let spec = rest_spec(
        &origin(&server),
        &format!("path = \"/search\"\nparams = {{ q = \"{{value}}\" }}\n{CUSTOMER_MAPPING}"),
    );
    lookup_with(
        &rest_provider(&spec, None),
        "a%2Fb&admin=1",
        5,
        SecretHandling::Refuse,
    )
    .await;
    let request = only_request(&server);
    assert_eq!(request.path, "/search");
    assert_eq!(request.query.as_deref(), Some("q=a%252Fb%26admin%3D1"));
}

#[tokio::test]
async fn an_api_with_5000_items_gives_the_limit_and_counts_the_rest() {
    let items: Vec<Value> = (0..5000).map(|n| customer(&format!("C-{n}"))).collect();
    let server = serving(Behaviour::Json(200, json!({ "data": items }))).await;
    let spec = rest_spec(
        &origin(&server),
        &format!(
            "path = \"/c\"\nparams = {{ q = \"{{value}}\" }}\n{CUSTOMER_MAPPING}items = \"$.data\"\n"
        ),
    );
    let provider = rest_provider(&spec, None);
    let outcome = lookup_with(&provider, VALUE, 7, SecretHandling::Refuse).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found().len(), 7);
    assert_eq!(outcome.items_found()[6].id, "C-6");
    assert_eq!(outcome.items_dropped, 4993);
    // A limit above the contract's 100 items is cut to it.
    let most = lookup_with(&provider, VALUE, 1000, SecretHandling::Refuse).await;
    assert_eq!((most.items_found().len(), most.items_dropped), (100, 4900));
}

#[tokio::test]
async fn a_2_mib_json_body_is_refused_while_streaming() {
    let big: Vec<Value> = (0..45)
        .map(|n| json!({"id": format!("C-{n}"), "notes": "x".repeat(52_000)}))
        .collect();
    let body = json!({ "data": big });
    assert!(serde_json::to_vec(&body).unwrap().len() > 2 * 1024 * 1024);
    let server = serving(Behaviour::Json(200, body)).await;
    let spec = rest_spec(
        &origin(&server),
        &format!("path = \"/c/{{value}}\"\n{CUSTOMER_MAPPING}items = \"$.data\"\n"),
    );
    let outcome = lookup(&rest_provider(&spec, None)).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        "RESPONSE_TOO_LARGE",
    );
}

#[tokio::test]
async fn a_mapped_item_over_64_kib_is_refused() {
    let server = serving(Behaviour::Json(
        200,
        json!({"id": "C-1", "notes": "x".repeat(70_000)}),
    ))
    .await;
    let spec = rest_spec(
        &origin(&server),
        &format!("path = \"/c/{{value}}\"\n{CUSTOMER_MAPPING}"),
    );
    let outcome = lookup(&rest_provider(&spec, None)).await;
    assert_failed(&outcome, ProviderStatus::LimitExceeded, "ITEM_TOO_LARGE");
}

#[tokio::test]
async fn an_aws_key_in_an_item_body_is_refused_or_redacted() {
    let key = format!("{}{}", "AKIA", "Q3RT7KWY2ZZW4N5P");
    let issue = json!({
        "number": 12, "title": "Deploy fails",
        "body": format!("Our CI uses {key} and it stopped working."),
        "updated_at": "2026-11-20T08:00:00Z"
    });
    let server = serving(Behaviour::Json(200, issue)).await;
    let spec = rest_spec(
        &origin(&server),
        "path = \"/issues/{value}\"\nmapping = { id = \"$.number\", title = \"$.title\", content = \"$.body\" }\n",
    );
    let provider = rest_provider(&spec, None);
    let refused = lookup(&provider).await;
    assert_failed(
        &refused,
        ProviderStatus::SecretDetected,
        "aws_access_key_id",
    );
    assert!(!format!("{refused:?}").contains(&key));

    let redacted = lookup_with(&provider, VALUE, 5, SecretHandling::Redact).await;
    assert_eq!(redacted.status(), ProviderStatus::Ok);
    let content = &redacted.items_found()[0].content;
    assert!(!content.contains(&key), "{content}");
    assert!(
        content.contains("[REDACTED:aws_access_key_id]"),
        "{content}"
    );
}

#[tokio::test]
async fn the_probe_wants_2xx_from_probe_path_and_an_up_api_at_the_endpoint() {
    let cases: &[(Option<&str>, u16, Result<(), &str>)] = &[
        (None, 200, Ok(())),
        (None, 404, Ok(())),
        (None, 405, Ok(())),
        (None, 401, Err("UNAVAILABLE (UNAUTHORIZED)")),
        (None, 503, Err("UNAVAILABLE (HTTP_503)")),
        (Some("/health"), 200, Ok(())),
        (
            Some("/health"),
            404,
            Err("NOT_FOUND (HTTP 404 from the probe path)"),
        ),
        (Some("/health"), 400, Err("INVALID_REQUEST (HTTP_400)")),
    ];
    for (probe_path, code, expected) in cases {
        let server = serving(Behaviour::Status(*code)).await;
        let probe = probe_path.map_or(String::new(), |p| format!("probe_path = \"{p}\"\n"));
        let spec = rest_spec(
            &format!("{}/api", origin(&server)),
            &format!(
                "path = \"/c/{{value}}\"\n{probe}auth = {{ type = \"bearer\", token_env = \"T\" }}\n{CUSTOMER_MAPPING}"
            ),
        );
        let probed = rest_provider(&spec, Some(SECRET))
            .probe(Instant::now() + DEADLINE)
            .await;
        assert_eq!(
            probed,
            expected.map_err(str::to_owned),
            "{probe_path:?} {code}"
        );
        let request = only_request(&server);
        assert_eq!(request.method, "GET");
        assert_eq!(
            request.path,
            format!("/api{}", probe_path.unwrap_or_default())
        );
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {SECRET}").as_str())
        );
    }
}
