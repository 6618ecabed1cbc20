//! The `context-provider.v1` HTTP provider against scripted servers: the wire it sends,
//! and the exact (status, detail) of every way a provider can answer or misbehave.

use crate::provider_server::{
    Behaviour, OVERSIZE_BYTES, ProviderServer, RecordedRequest, RunningProvider,
};
use ctxd::contract::{Currentness, Item, ProviderStatus, Source};
use ctxd::outcome::Outcome;
use ctxd::providers::PoolSettings;
use ctxd::providers::http::{DescribeError, Described, HttpProvider, HttpSetupError};
use ctxd::providers::{LookupCall, Secret};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;
use url::Url;

/// The bound bearer secret. Matches no secret-pattern detector, so only the reflection
/// check can find it.
const SECRET: &str = "tok-3f9a1c77e2d4";
/// The lookup value. The default server items never contain it, so no outcome may.
const VALUE: &str = "CUST-5150";
const PROVIDER: &str = "customer-data";
const KEY: &str = "customerId";
/// Generous deadline for calls that are expected to finish.
const DEADLINE: Duration = Duration::from_secs(5);
/// Calls to a hung provider must return by their deadline, not when the server gives up
/// (30 s): a bound far from both, so a loaded machine cannot make it flaky. The tight
/// "deadline + 100 ms" bound is asserted once, for the slow provider.
const HUNG_BOUND: Duration = Duration::from_secs(2);

fn provider_for(url: Url, secret: Option<&str>) -> HttpProvider {
    HttpProvider::new(
        url,
        secret.map(Secret::new),
        &PoolSettings::default(),
        Duration::from_secs(2),
    )
    .expect("a loopback endpoint is accepted")
}

fn with_secret(server: &RunningProvider) -> HttpProvider {
    provider_for(server.endpoint(), Some(SECRET))
}

async fn lookup_within(provider: &HttpProvider, limit: u32, within: Duration) -> Outcome {
    let call = LookupCall {
        provider: PROVIDER,
        key: KEY,
        value: VALUE,
        limit,
        deadline: Instant::now() + within,
        secrets: Default::default(),
    };
    let outcome = provider.lookup(&call).await;
    assert_clean(&outcome);
    outcome
}

async fn lookup(provider: &HttpProvider) -> Outcome {
    lookup_within(provider, 2, DEADLINE).await
}

/// Neither the secret nor the lookup value may ever show in an outcome.
fn assert_clean(outcome: &Outcome) {
    let debug = format!("{outcome:?}");
    assert!(!debug.contains(SECRET), "secret in {debug}");
    assert!(!debug.contains(VALUE), "value in {debug}");
}

/// The provider's answer was refused for echoing the bound credential.
#[track_caller]
fn assert_reflected(outcome: &Outcome) {
    assert_failed(
        outcome,
        ProviderStatus::SecretDetected,
        Some("CREDENTIAL_REFLECTED"),
    );
}

#[track_caller]
fn assert_failed(outcome: &Outcome, status: ProviderStatus, detail: Option<&str>) {
    assert_eq!(
        (outcome.status(), outcome.detail()),
        (status, detail),
        "{outcome:?}"
    );
    assert!(outcome.items_found().is_empty());
    assert_eq!(outcome.source, Source::Live);
    assert_eq!(
        outcome.currentness().unwrap_or_default(),
        Currentness::Unknown
    );
}

async fn lookup_against(server: ProviderServer) -> (Outcome, RunningProvider) {
    let server = server.start().await;
    let outcome = lookup(&with_secret(&server)).await;
    (outcome, server)
}

async fn describe(provider: &HttpProvider) -> Result<Described, Outcome> {
    let described = describe_by(provider, Instant::now() + DEADLINE).await;
    if let Err(outcome) = &described {
        assert_clean(outcome);
    }
    described
}

/// A describe, its refusal as the outcome a lookup would report.
async fn describe_by(provider: &HttpProvider, deadline: Instant) -> Result<Described, Outcome> {
    provider
        .describe(deadline)
        .await
        .map_err(|error| match error {
            DescribeError::NotFound => Outcome::not_found(Source::Live),
            DescribeError::Failed(failure) => Outcome::failed(failure, Source::Live),
        })
}

fn only_request(server: &RunningProvider) -> RecordedRequest {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    requests.into_iter().next().unwrap()
}

#[tokio::test]
async fn ok_answer_carries_items_and_provider_labels() {
    let (outcome, _server) = lookup_against(
        ProviderServer::new()
            .lookup_items(vec![
                json!({"id": "CUST-1042", "title": "Current account state", "content": "Plan Enterprise",
                       "metadata": {"plan": "Enterprise"}, "updatedAt": "2026-10-08"}),
                json!({"id": "CUST-1042-b", "content": "second"}),
            ])
            .version(Some("5.0.1"))
            .revision(Some("crm-r9"))
            .currentness(Some("STALE")),
    )
    .await;
    assert_eq!(
        (outcome.status(), outcome.detail()),
        (ProviderStatus::Ok, None)
    );
    assert_eq!(outcome.source, Source::Live);
    assert_eq!(outcome.version.as_deref(), Some("5.0.1"));
    assert_eq!(outcome.revision.as_deref(), Some("crm-r9"));
    assert_eq!(outcome.currentness(), Some(Currentness::Stale));
    assert_eq!(outcome.items_found().len(), 2);
    assert_eq!(
        outcome.items_found()[0],
        Item {
            id: "CUST-1042".into(),
            title: Some("Current account state".into()),
            content: "Plan Enterprise".into(),
            metadata: json!({"plan": "Enterprise"}).as_object().unwrap().clone(),
            updated_at: Some("2026-10-08".into()),
        }
    );
    assert_eq!(outcome.items_found()[1].id, "CUST-1042-b");
}

#[tokio::test]
async fn labels_left_out_stay_unknown() {
    let (outcome, _server) = lookup_against(
        ProviderServer::new()
            .version(None)
            .revision(None)
            .currentness(None),
    )
    .await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);
    assert_eq!((&outcome.version, &outcome.revision), (&None, &None));
    assert_eq!(outcome.currentness(), Some(Currentness::Unknown));
}

#[tokio::test]
async fn zero_items_is_not_found_as_a_404_is() {
    let (outcome, _server) = lookup_against(ProviderServer::new().lookup_items(vec![])).await;
    assert_eq!(
        (outcome.status(), outcome.detail()),
        (ProviderStatus::NotFound, None)
    );
    assert!(outcome.items_found().is_empty());
    assert!(!outcome.found_anything());
}

#[tokio::test]
async fn the_request_is_a_post_to_the_bound_path_with_the_value_only_in_the_body() {
    let server = ProviderServer::new().path("/api/v1/context").start().await;
    let provider = with_secret(&server);
    let outcome = lookup(&provider).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);

    let request = only_request(&server);
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/api/v1/context");
    assert_eq!(request.target, "/api/v1/context");
    assert_eq!(request.query, None);
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("accept"), Some("application/json"));
    assert_eq!(
        request.header("host"),
        Some(format!("127.0.0.1:{}", server.addr.port()).as_str())
    );
    // Exactly seed 000's lookup body, in its field order.
    assert_eq!(
        String::from_utf8(request.body.clone()).unwrap(),
        r#"{"contract":"context-provider.v1","capability":"lookup","provider":"customer-data","key":"customerId","value":"CUST-5150","limit":2}"#
    );
    assert!(
        !request.head_text().contains(VALUE),
        "{}",
        request.head_text()
    );
}

#[tokio::test]
async fn no_authorization_header_without_a_bound_secret() {
    let server = ProviderServer::new().start().await;
    let provider = provider_for(server.endpoint(), None);
    let outcome = lookup(&provider).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);
    assert_eq!(only_request(&server).header("authorization"), None);
    // Without a secret there is nothing to reflect: an echoing server is just a server.
    let echo = ProviderServer::new()
        .behaviour(Behaviour::ReflectHeader(200))
        .start()
        .await;
    let outcome = lookup(&provider_for(echo.endpoint(), None)).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);
}

#[tokio::test]
async fn not_found_is_no_record() {
    let (outcome, _server) = lookup_against(ProviderServer::new().status(404)).await;
    assert_failed(&outcome, ProviderStatus::NotFound, None);
}

#[tokio::test]
async fn refused_credentials_are_unauthorized() {
    for code in [401, 403] {
        let (outcome, _server) = lookup_against(ProviderServer::new().status(code)).await;
        assert_failed(&outcome, ProviderStatus::Unavailable, Some("UNAUTHORIZED"));
    }
}

#[tokio::test]
async fn other_error_statuses_are_unavailable_with_the_code() {
    for (code, detail) in [
        (500, "HTTP_500"),
        (503, "HTTP_503"),
        (502, "HTTP_502"),
        (429, "HTTP_429"),
        (400, "HTTP_400"),
    ] {
        let (outcome, _server) = lookup_against(ProviderServer::new().status(code)).await;
        assert_failed(&outcome, ProviderStatus::Unavailable, Some(detail));
    }
}

#[tokio::test]
async fn redirects_are_refused_and_never_followed() {
    let target = ProviderServer::new().start().await;
    let (outcome, server) = lookup_against(ProviderServer::new().redirect(&target.url())).await;
    assert_failed(
        &outcome,
        ProviderStatus::InvalidResponse,
        Some("REDIRECT_REFUSED"),
    );
    assert_eq!(server.hits(), 1);
    assert_eq!(target.hits(), 0);
    assert_eq!(target.connections(), 0, "the Location target was contacted");
    // Other redirect statuses too.
    for code in [301, 307, 308] {
        let location = target.url();
        let (outcome, _server) = lookup_against(
            ProviderServer::new().behaviour(Behaviour::Raw(
                format!(
                    "HTTP/1.1 {code} Moved\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n"
                )
                .into_bytes(),
            )),
        )
        .await;
        assert_failed(
            &outcome,
            ProviderStatus::InvalidResponse,
            Some("REDIRECT_REFUSED"),
        );
    }
    assert_eq!(target.connections(), 0);
}

#[tokio::test]
async fn an_answer_within_the_deadline_is_used() {
    let server = ProviderServer::new()
        .delay(Duration::from_millis(100))
        .start()
        .await;
    let outcome = lookup_within(&with_secret(&server), 2, Duration::from_secs(3)).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);
}

#[tokio::test]
async fn a_slow_answer_past_the_deadline_times_out_at_the_deadline() {
    let server = ProviderServer::new()
        .delay(Duration::from_secs(3))
        .start()
        .await;
    let provider = with_secret(&server);
    let deadline = Duration::from_millis(200);
    let started = Instant::now();
    let outcome = lookup_within(&provider, 2, deadline).await;
    let elapsed = started.elapsed();
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    // A behavioural bound: the caller gets its answer at the deadline, not when the
    // provider eventually answers.
    assert!(elapsed >= deadline, "{elapsed:?}");
    assert!(
        elapsed < deadline + Duration::from_millis(100),
        "{elapsed:?}"
    );
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn a_deadline_already_past_sends_nothing() {
    let server = ProviderServer::new().start().await;
    let provider = with_secret(&server);
    let call = LookupCall {
        provider: PROVIDER,
        key: KEY,
        value: VALUE,
        limit: 2,
        deadline: Instant::now(),
        secrets: Default::default(),
    };
    let outcome = provider.lookup(&call).await;
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    let outcome = describe_by(&provider, Instant::now()).await.unwrap_err();
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_hung_provider_times_out() {
    let server = ProviderServer::new().hang().start().await;
    let deadline = Duration::from_millis(150);
    let started = Instant::now();
    let outcome = lookup_within(&with_secret(&server), 2, deadline).await;
    let elapsed = started.elapsed();
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    assert!(elapsed < HUNG_BOUND, "{elapsed:?}");
}

#[tokio::test]
async fn a_body_that_stalls_after_the_head_times_out() {
    // The head arrives promptly, then nothing: the deadline covers the body too.
    let server = ProviderServer::new()
        .behaviour(Behaviour::StallAfterHead)
        .start()
        .await;
    let deadline = Duration::from_millis(150);
    let started = Instant::now();
    let outcome = lookup_within(&with_secret(&server), 2, deadline).await;
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    assert!(started.elapsed() < HUNG_BOUND);
}

#[tokio::test]
async fn a_body_cut_short_by_a_close_is_a_reset() {
    // A Content-Length promise broken by an orderly close (FIN, not RST).
    let server = ProviderServer::new()
        .behaviour(Behaviour::Raw(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"
                .to_vec(),
        ))
        .start()
        .await;
    let outcome = lookup(&with_secret(&server)).await;
    assert_failed(
        &outcome,
        ProviderStatus::Unavailable,
        Some("CONNECTION_RESET"),
    );
}

#[tokio::test]
async fn an_oversize_content_length_is_refused_without_reading_the_body() {
    let (outcome, server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::OversizeContentLength)).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        Some("RESPONSE_TOO_LARGE"),
    );
    assert!(
        server
            .wait_for(Duration::from_secs(3), |s| s.aborted_writes() == 1)
            .await,
        "the client did not hang up"
    );
    assert!(server.body_bytes_written() < OVERSIZE_BYTES as u64);
}

#[tokio::test]
async fn an_oversize_chunked_body_is_cut_off_while_streaming() {
    let (outcome, server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::OversizeChunked)).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        Some("RESPONSE_TOO_LARGE"),
    );
    assert!(
        server
            .wait_for(Duration::from_secs(3), |s| s.aborted_writes() == 1)
            .await,
        "the client read the whole body (wrote {} bytes)",
        server.body_bytes_written()
    );
    let written = server.body_bytes_written();
    assert!(
        written > 1024 * 1024 && written < OVERSIZE_BYTES as u64,
        "{written}"
    );
}

/// A compatible lookup answer padded with trailing whitespace to exactly `size` bytes.
fn padded_answer(size: usize) -> Vec<u8> {
    let mut body = serde_json::to_vec(&json!({
        "contract": "context-provider.v1",
        "items": [{"id": "rec-1", "content": "padded"}]
    }))
    .unwrap();
    body.resize(size, b' ');
    body
}

fn raw_answer(body: &[u8], chunked: bool) -> Behaviour {
    let mut bytes = if chunked {
        format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
            body.len()
        )
    } else {
        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
    }
    .into_bytes();
    bytes.extend_from_slice(body);
    if chunked {
        bytes.extend_from_slice(b"\r\n0\r\n\r\n");
    }
    Behaviour::Raw(bytes)
}

#[tokio::test]
async fn the_response_size_limit_is_exact() {
    const LIMIT: usize = 1024 * 1024;
    for chunked in [false, true] {
        let (outcome, _server) = lookup_against(
            ProviderServer::new().behaviour(raw_answer(&padded_answer(LIMIT), chunked)),
        )
        .await;
        assert_eq!(
            (outcome.status(), outcome.items_found().len()),
            (ProviderStatus::Ok, 1),
            "chunked {chunked}: {outcome:?}"
        );
        let (outcome, _server) = lookup_against(
            ProviderServer::new().behaviour(raw_answer(&padded_answer(LIMIT + 1), chunked)),
        )
        .await;
        assert_failed(
            &outcome,
            ProviderStatus::LimitExceeded,
            Some("RESPONSE_TOO_LARGE"),
        );
    }
}

#[tokio::test]
async fn more_items_than_requested_are_refused() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::TooManyItems(3))
        .start()
        .await;
    let provider = with_secret(&server);
    let outcome = lookup_within(&provider, 2, DEADLINE).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        Some("TOO_MANY_ITEMS"),
    );
    // The same answer is fine for a limit of 3.
    let outcome = lookup_within(&provider, 3, DEADLINE).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok);
    assert_eq!(outcome.items_found().len(), 3);
}

#[tokio::test]
async fn more_than_a_hundred_items_are_refused_whatever_the_limit() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::TooManyItems(101))
        .start()
        .await;
    let outcome = lookup_within(&with_secret(&server), 500, DEADLINE).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        Some("TOO_MANY_ITEMS"),
    );
    let hundred = ProviderServer::new()
        .behaviour(Behaviour::TooManyItems(100))
        .start()
        .await;
    let outcome = lookup_within(&with_secret(&hundred), 500, DEADLINE).await;
    assert_eq!(
        (outcome.status(), outcome.items_found().len()),
        (ProviderStatus::Ok, 100)
    );
}

#[tokio::test]
async fn an_item_over_64_kib_is_refused() {
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::ItemTooLarge)).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        Some("ITEM_TOO_LARGE"),
    );
}

#[tokio::test]
async fn the_credential_reflected_in_a_header_is_refused_whatever_the_status() {
    for code in [200, 404, 401, 500, 302] {
        let (outcome, _server) =
            lookup_against(ProviderServer::new().behaviour(Behaviour::ReflectHeader(code))).await;
        assert_reflected(&outcome);
    }
}

#[tokio::test]
async fn the_credential_reflected_in_the_body_is_refused() {
    for code in [200, 401, 503] {
        let (outcome, _server) =
            lookup_against(ProviderServer::new().behaviour(Behaviour::ReflectBody(code))).await;
        assert_reflected(&outcome);
    }
    // The secret alone, not only `Bearer <secret>`, anywhere in the bytes.
    let (outcome, _server) = lookup_against(ProviderServer::new().lookup_items(vec![
        json!({"id": "a", "metadata": {"note": format!("k={SECRET};")}}),
    ]))
    .await;
    assert_reflected(&outcome);
}

#[tokio::test]
async fn a_secret_pattern_in_an_item_is_refused_by_detector_name() {
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::SecretItem)).await;
    assert_failed(
        &outcome,
        ProviderStatus::SecretDetected,
        Some("private_key"),
    );
}

#[tokio::test]
async fn a_wrong_contract_is_incompatible() {
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::WrongContract)).await;
    assert_failed(
        &outcome,
        ProviderStatus::Incompatible,
        Some("WRONG_CONTRACT"),
    );
}

#[tokio::test]
async fn garbage_is_an_invalid_response() {
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::Garbage)).await;
    assert_failed(&outcome, ProviderStatus::InvalidResponse, Some("MALFORMED"));
    // Valid JSON of the wrong shape too.
    let (outcome, _server) = lookup_against(ProviderServer::new().behaviour(Behaviour::Json(
        200,
        json!({"contract": "context-provider.v1", "items": [{"id": 7}]}),
    )))
    .await;
    assert_failed(&outcome, ProviderStatus::InvalidResponse, Some("MALFORMED"));
}

#[tokio::test]
async fn a_reset_mid_body_is_unavailable() {
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::ResetMidBody)).await;
    assert_failed(
        &outcome,
        ProviderStatus::Unavailable,
        Some("CONNECTION_RESET"),
    );
}

#[tokio::test]
async fn a_connection_closed_before_any_answer_is_unavailable() {
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::Raw(Vec::new()))).await;
    assert_failed(
        &outcome,
        ProviderStatus::Unavailable,
        Some("CONNECTION_RESET"),
    );
}

#[tokio::test]
async fn an_answer_that_is_not_http_is_an_invalid_response() {
    let (outcome, _server) = lookup_against(
        ProviderServer::new().behaviour(Behaviour::Raw(b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec())),
    )
    .await;
    assert_failed(&outcome, ProviderStatus::InvalidResponse, Some("MALFORMED"));
    // Two lengths that disagree: where the body ends cannot be known.
    let (outcome, _server) = lookup_against(ProviderServer::new().behaviour(Behaviour::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}".to_vec(),
    )))
    .await;
    assert_failed(&outcome, ProviderStatus::InvalidResponse, Some("MALFORMED"));
    // A broken chunked coding.
    let (outcome, _server) = lookup_against(ProviderServer::new().behaviour(Behaviour::Raw(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".to_vec(),
    )))
    .await;
    assert_failed(&outcome, ProviderStatus::InvalidResponse, Some("MALFORMED"));
}

#[tokio::test]
async fn a_response_head_over_64_kib_is_refused() {
    let head = |pad: usize| {
        let mut bytes = format!("HTTP/1.1 404 Not Found\r\nx-pad: {}\r\n", "p".repeat(pad));
        bytes.push_str("content-length: 0\r\n\r\n");
        bytes.into_bytes()
    };
    let fixed = head(0).len();
    let (outcome, _server) = lookup_against(
        ProviderServer::new().behaviour(Behaviour::Raw(head(64 * 1024 - fixed + 1))),
    )
    .await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        Some("RESPONSE_TOO_LARGE"),
    );
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::Raw(head(64 * 1024 - fixed))))
            .await;
    assert_eq!(
        outcome.status(),
        ProviderStatus::NotFound,
        "a head of exactly 64 KiB is read"
    );
}

#[tokio::test]
async fn the_credential_in_the_status_line_is_reflected() {
    let (outcome, _server) = lookup_against(ProviderServer::new().behaviour(Behaviour::Raw(
        format!("HTTP/1.1 401 Refused {SECRET}\r\ncontent-length: 0\r\n\r\n").into_bytes(),
    )))
    .await;
    assert_reflected(&outcome);
}

#[tokio::test]
async fn an_interim_answer_before_the_answer_is_skipped() {
    let body = json!({"contract": "context-provider.v1", "items": [{"id": "a", "content": "x"}]})
        .to_string();
    let raw = format!(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (outcome, _server) =
        lookup_against(ProviderServer::new().behaviour(Behaviour::Raw(raw.into_bytes()))).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found().len(), 1);
}

#[tokio::test]
async fn connection_refused_is_connect_failed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = Url::parse(&format!("http://{addr}/context")).unwrap();
    let outcome = lookup(&provider_for(url, Some(SECRET))).await;
    assert_failed(
        &outcome,
        ProviderStatus::Unavailable,
        Some("CONNECT_FAILED"),
    );
}

#[tokio::test]
async fn a_script_answers_in_order_on_reused_connections() {
    let server = ProviderServer::new()
        .script(vec![
            Behaviour::Status(503),
            Behaviour::Status(503),
            Behaviour::Hang,
        ])
        .start()
        .await;
    let provider = with_secret(&server);
    for _ in 0..2 {
        let outcome = lookup(&provider).await;
        assert_failed(&outcome, ProviderStatus::Unavailable, Some("HTTP_503"));
    }
    let outcome = lookup_within(&provider, 2, Duration::from_millis(100)).await;
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    for _ in 0..3 {
        assert_eq!(lookup(&provider).await.status(), ProviderStatus::Ok);
    }
    assert_eq!(server.hits(), 6);
    // The two 503s shared one pooled connection; the hang cost its own.
    assert!(server.connections() <= 3, "{}", server.connections());
}

/// Each calling thread keeps its own keep-alive connections (while there are no more
/// calling threads than CPUs): a call never borrows a connection whose I/O another
/// thread's runtime drives (which would wake that thread for every request and answer).
/// Two threads, each with its own runtime, both alive, take turns calling one provider:
/// two connections, each reused by its own thread.
#[tokio::test]
async fn each_calling_thread_reuses_its_own_connection() {
    let server = ProviderServer::new().start().await;
    let provider = with_secret(&server);
    let turns = std::sync::Arc::new(std::sync::Barrier::new(2));
    let callers: Vec<_> = (0..2)
        .map(|thread| {
            let (provider, turns) = (provider.clone(), turns.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime per calling thread");
                let mut statuses = Vec::new();
                for round in 0..6 {
                    if round % 2 == thread {
                        statuses.push(runtime.block_on(lookup(&provider)).status());
                    }
                    turns.wait();
                }
                statuses
            })
        })
        .collect();
    let statuses = tokio::task::spawn_blocking(move || {
        callers
            .into_iter()
            .flat_map(|caller| caller.join().expect("the caller finishes"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("the callers are joined");
    assert_eq!(statuses, vec![ProviderStatus::Ok; 6]);
    assert_eq!(server.lookups(), 6);
    assert_eq!(
        server.connections(),
        2,
        "one connection per calling thread, each kept alive and reused"
    );
}

#[tokio::test]
async fn describe_of_a_compatible_provider() {
    let server = ProviderServer::new().version(Some("5.0.1")).start().await;
    let described = describe(&with_secret(&server)).await;
    assert_eq!(
        described,
        Ok(Described {
            version: Some("5.0.1".into())
        })
    );
    let request = only_request(&server);
    assert_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("POST", "/context")
    );
    assert_eq!(
        String::from_utf8(request.body.clone()).unwrap(),
        r#"{"contract":"context-provider.v1","capability":"describe"}"#
    );
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert!(request.is_describe());
}

#[tokio::test]
async fn describe_refuses_incompatible_providers() {
    let cases = [
        (
            ProviderServer::new().behaviour(Behaviour::WrongContract),
            ProviderStatus::Incompatible,
            Some("WRONG_CONTRACT"),
        ),
        (
            ProviderServer::new().behaviour(Behaviour::NoLookupCapability),
            ProviderStatus::Incompatible,
            Some("NO_LOOKUP_CAPABILITY"),
        ),
        (
            ProviderServer::new().capabilities(&["describe", "search"]),
            ProviderStatus::Incompatible,
            Some("NO_LOOKUP_CAPABILITY"),
        ),
        (
            ProviderServer::new().behaviour(Behaviour::Garbage),
            ProviderStatus::InvalidResponse,
            Some("MALFORMED"),
        ),
        (
            ProviderServer::new().status(503),
            ProviderStatus::Unavailable,
            Some("HTTP_503"),
        ),
        (
            ProviderServer::new().status(401),
            ProviderStatus::Unavailable,
            Some("UNAUTHORIZED"),
        ),
        (
            ProviderServer::new().status(404),
            ProviderStatus::NotFound,
            None,
        ),
        (
            ProviderServer::new().redirect("http://127.0.0.1:9/elsewhere"),
            ProviderStatus::InvalidResponse,
            Some("REDIRECT_REFUSED"),
        ),
        (
            ProviderServer::new().behaviour(Behaviour::ReflectHeader(200)),
            ProviderStatus::SecretDetected,
            Some("CREDENTIAL_REFLECTED"),
        ),
        (
            ProviderServer::new().behaviour(Behaviour::OversizeChunked),
            ProviderStatus::LimitExceeded,
            Some("RESPONSE_TOO_LARGE"),
        ),
        (
            ProviderServer::new().behaviour(Behaviour::ResetMidBody),
            ProviderStatus::Unavailable,
            Some("CONNECTION_RESET"),
        ),
    ];
    for (server, status, detail) in cases {
        let server = server.start().await;
        let outcome = describe(&with_secret(&server)).await.unwrap_err();
        assert_failed(&outcome, status, detail);
    }
}

#[tokio::test]
async fn describe_times_out_at_its_deadline() {
    let server = ProviderServer::new().hang().start().await;
    let started = Instant::now();
    let outcome = describe_by(
        &with_secret(&server),
        Instant::now() + Duration::from_millis(100),
    )
    .await
    .unwrap_err();
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    assert!(started.elapsed() < HUNG_BOUND);
}

#[tokio::test]
async fn the_describe_behaviour_answers_probes_without_consuming_the_script() {
    let server = ProviderServer::new()
        .describe_behaviour(Behaviour::Answer)
        .script(vec![Behaviour::Status(500)])
        .start()
        .await;
    let provider = with_secret(&server);
    assert!(describe(&provider).await.is_ok());
    let outcome = lookup(&provider).await;
    assert_failed(&outcome, ProviderStatus::Unavailable, Some("HTTP_500"));
    assert_eq!(lookup(&provider).await.status(), ProviderStatus::Ok);
    assert_eq!(server.lookups(), 2);
}

#[test]
fn plain_http_is_refused_unless_the_host_is_loopback() {
    let pool = PoolSettings::default();
    let timeout = Duration::from_millis(500);
    for text in [
        "http://crm.internal/context",
        "http://10.1.2.3:8080/context",
        "http://localhost.example.com/context",
    ] {
        let url = Url::parse(text).unwrap();
        let refused = HttpProvider::new(url, Some(Secret::new(SECRET)), &pool, timeout);
        assert!(
            matches!(refused, Err(HttpSetupError::InsecureEndpoint { .. })),
            "{text}: {refused:?}"
        );
        let message = refused.unwrap_err().to_string();
        assert!(!message.contains(SECRET), "{message}");
    }
    for text in [
        "https://crm.internal/context",
        "http://localhost:1/context",
        "http://127.0.0.1:1/context",
        "http://127.9.9.9:1/context",
        "http://[::1]:1/context",
    ] {
        let url = Url::parse(text).unwrap();
        HttpProvider::new(url, Some(Secret::new(SECRET)), &pool, timeout)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

#[tokio::test]
async fn an_endless_run_of_interim_answers_times_out_at_the_deadline() {
    // A raw TCP server that reads the request and answers `100 Continue` and `103`
    // heads for ever: hyper skips each and keeps none, and the call ends at its deadline.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = Url::parse(&format!(
        "http://{}/context",
        listener.local_addr().unwrap()
    ))
    .unwrap();
    let flood = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).await;
        let heads = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
            .repeat(512);
        let mut sent = 0usize;
        while stream.write_all(&heads).await.is_ok() && sent < 512 * 1024 * 1024 {
            sent += heads.len();
        }
        sent
    });
    let started = Instant::now();
    let outcome = lookup_within(
        &provider_for(url, Some(SECRET)),
        2,
        Duration::from_millis(300),
    )
    .await;
    assert_failed(&outcome, ProviderStatus::Timeout, Some("DEADLINE"));
    assert!(
        started.elapsed() < HUNG_BOUND,
        "ended {:?} after the call began",
        started.elapsed()
    );
    let sent = flood.await.unwrap();
    assert!(sent > 0, "the server flooded the connection");
}
