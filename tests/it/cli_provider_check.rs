//! `ctxd provider-check URL`: a conforming provider passes every rule; each kind of
//! misbehaviour fails its own rule; a plain-http URL to a non-loopback host fails
//! `https` without any request; the secret is never printed.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::support::{ctxd, stderr_of, stdout_of};
use serde_json::{Value, json};
use std::process::Output;
use std::time::{Duration, Instant};

const SECRET: &str = "check-secret-8b2e4f6a1c3d";
/// The record the scripted providers hold (and the command's default `--value`).
const KNOWN: &str = "CUST-1042";

/// Runs `ctxd provider-check ARGS…` off the async runtime, with `CHECK_TOKEN` set.
async fn provider_check(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        ctxd()
            .arg("provider-check")
            .args(&args)
            .env("CHECK_TOKEN", SECRET)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// A provider that holds [`KNOWN`] only: describe and that value answered compatibly,
/// every other value 404.
fn conforming() -> ProviderServer {
    ProviderServer::new().respond_with(|request, _| {
        if request.is_describe() || request.json()["value"] == KNOWN {
            Behaviour::Answer
        } else {
            Behaviour::Status(404)
        }
    })
}

/// The `VERDICT rule: detail` line of `rule`.
fn rule_line(output: &Output, rule: &str) -> String {
    let stdout = stdout_of(output);
    stdout
        .lines()
        .find(|line| {
            line.split_once(' ')
                .is_some_and(|(_, rest)| rest.starts_with(&format!("{rule}: ")))
        })
        .unwrap_or_else(|| panic!("no line for rule {rule}:\n{stdout}"))
        .to_owned()
}

fn assert_rule(output: &Output, rule: &str, verdict: &str, needle: &str) {
    let line = rule_line(output, rule);
    assert!(
        line.starts_with(&format!("{verdict} {rule}: ")) && line.contains(needle),
        "expected {verdict} {rule} with {needle:?}, got: {line}\n{}",
        stdout_of(output)
    );
}

fn assert_failed(output: &Output) {
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}{}",
        stdout_of(output),
        stderr_of(output)
    );
    assert!(!stdout_of(output).contains(SECRET), "{}", stdout_of(output));
    assert!(!stderr_of(output).contains(SECRET));
}

fn with_secret(server: &RunningProvider) -> Vec<String> {
    vec![
        server.url(),
        "--secret-env".to_owned(),
        "CHECK_TOKEN".to_owned(),
    ]
}

async fn check_with_secret(server: &RunningProvider, extra: &[&str]) -> Output {
    let mut args = with_secret(server);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    provider_check(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conforming_provider_passes_every_rule() {
    let server = conforming().start().await;
    let output = check_with_secret(&server, &[]).await;
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    for rule in [
        "https",
        "describe",
        "lookup",
        "limit-honoured",
        "not-found",
        "no-redirects",
        "no-credential-reflection",
        "value-in-body-only",
    ] {
        assert!(
            rule_line(&output, rule).starts_with("PASS "),
            "{rule}:\n{stdout}"
        );
    }
    assert_rule(&output, "describe", "PASS", "version \"5.0.1\"");
    assert_rule(&output, "lookup", "PASS", "1 item (limit 2)");
    assert_rule(&output, "not-found", "PASS", "answered 404");
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .ends_with("8 passed, 0 failed, 0 skipped"),
        "{stdout}"
    );
    assert!(!stdout.contains(SECRET), "{stdout}");

    // The wire: describe, two lookups of the value (limits 2 and 1), one of a fresh value;
    // always POST to the same path with no query, the value only in the body.
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests[0].is_describe());
    assert_eq!(
        requests[1].json(),
        json!({"contract": "context-provider.v1", "capability": "lookup", "provider": "customer-data",
               "key": "customerId", "value": KNOWN, "limit": 2})
    );
    assert_eq!(requests[2].json()["limit"], 1);
    let absent = requests[3].json()["value"].as_str().unwrap().to_owned();
    assert!(absent.starts_with("ctxd-check-") && absent.len() == "ctxd-check-".len() + 16);
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.target, "/context");
        assert!(!request.head_text().contains(KNOWN));
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {SECRET}").as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_lists_every_rule() {
    let server = conforming().start().await;
    let output = provider_check(&[&server.url(), "--format", "json"]).await;
    assert!(output.status.success(), "{}", stdout_of(&output));
    let report: Value = serde_json::from_str(&stdout_of(&output)).unwrap();
    assert_eq!(report["passed"], true);
    assert_eq!(report["contract"], "context-provider.v1");
    let rules = report["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 8);
    // Without a secret the reflection rule cannot be judged: SKIP, not a failure.
    let reflection = rules
        .iter()
        .find(|r| r["rule"] == "no-credential-reflection")
        .unwrap();
    assert_eq!(reflection["verdict"], "SKIP");
    assert_eq!(
        report["counts"],
        json!({"passed": 7, "warned": 0, "failed": 0, "skipped": 1})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirecting_provider_fails_no_redirects() {
    let server = ProviderServer::new()
        .redirect("http://127.0.0.1:9/elsewhere")
        .start()
        .await;
    let output = check_with_secret(&server, &[]).await;
    assert_failed(&output);
    assert_rule(&output, "no-redirects", "FAIL", "describe answered 302");
    assert_rule(&output, "describe", "FAIL", "a redirect");
    // Never followed: every request went to the provider itself.
    assert_eq!(server.hits(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_reflecting_the_secret_fails_no_credential_reflection() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::ReflectHeader(200))
        .start()
        .await;
    let output = check_with_secret(&server, &[]).await;
    assert_failed(&output);
    assert_rule(
        &output,
        "no-credential-reflection",
        "FAIL",
        "describe header x-echo",
    );

    let server = ProviderServer::new()
        .behaviour(Behaviour::ReflectBody(200))
        .start()
        .await;
    let output = check_with_secret(&server, &[]).await;
    assert_failed(&output);
    assert_rule(&output, "no-credential-reflection", "FAIL", "lookup body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_contract_fails_describe() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::WrongContract)
        .start()
        .await;
    let output = provider_check(&[&server.url()]).await;
    assert_failed(&output);
    assert_rule(&output, "describe", "FAIL", "\"context-provider.v2\"");
    assert_rule(&output, "lookup", "FAIL", "contract");

    let server = ProviderServer::new()
        .behaviour(Behaviour::NoLookupCapability)
        .start()
        .await;
    let output = provider_check(&[&server.url()]).await;
    assert_failed(&output);
    assert_rule(&output, "describe", "FAIL", "do not include \"lookup\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_items_for_an_unknown_value_is_warned_about() {
    let server = ProviderServer::new()
        .respond_with(|request, _| {
            if request.is_describe() || request.json()["value"] == KNOWN {
                Behaviour::Answer
            } else {
                Behaviour::Json(200, json!({"contract": "context-provider.v1", "items": []}))
            }
        })
        .start()
        .await;
    let output = provider_check(&[&server.url()]).await;
    // ctxd reads zero items as NOT_FOUND, like a 404: a warning, not a failure.
    assert_eq!(output.status.code(), Some(0), "{}", stdout_of(&output));
    assert_rule(
        &output,
        "not-found",
        "WARN",
        "200 with zero items: ctxd reads it as NOT_FOUND like a 404, but the contract says 404 means no record",
    );
    assert_rule(&output, "lookup", "PASS", "1 item");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_items_fail_lookup() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::TooManyItems(5))
        .start()
        .await;
    let output = provider_check(&[&server.url()]).await;
    assert_failed(&output);
    assert_rule(&output, "lookup", "FAIL", "5 items exceed the limit of 2");
    assert_rule(
        &output,
        "limit-honoured",
        "FAIL",
        "limit 1 returned 5 items",
    );

    let server = ProviderServer::new()
        .behaviour(Behaviour::ItemTooLarge)
        .start()
        .await;
    let output = provider_check(&[&server.url()]).await;
    assert_failed(&output);
    assert_rule(&output, "lookup", "FAIL", "over the 65536-byte item limit");
}

#[test]
fn a_plain_http_url_to_a_non_loopback_host_fails_https_without_a_request() {
    let started = Instant::now();
    // TEST-NET-1 (RFC 5737): never routed. A request attempt would wait out the 10 s timeout.
    let output = ctxd()
        .args([
            "provider-check",
            "http://192.0.2.1/x",
            "--timeout-ms",
            "10000",
        ])
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_failed(&output);
    assert_rule(&output, "https", "FAIL", "no request was sent");
    let rules = stdout_of(&output)
        .lines()
        .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL ") || l.starts_with("SKIP "))
        .count();
    assert_eq!(rules, 1, "{}", stdout_of(&output));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_refused_before_any_request() {
    let server = conforming().start().await;
    let output = provider_check(&[&server.url(), "--value=not valid!"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_of(&output).contains("--value: does not match the base grammar"),
        "{}",
        stderr_of(&output)
    );
    assert!(!stderr_of(&output).contains("not valid!"));

    let output = provider_check(&[&server.url(), "--secret-env", "CTXD_CHECK_UNSET_VAR"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_of(&output).contains("\"CTXD_CHECK_UNSET_VAR\" is not set"));

    let output = provider_check(&[&format!("{}?k=v", server.url())]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_of(&output).contains("query string"));
    assert_eq!(server.hits(), 0);
}
