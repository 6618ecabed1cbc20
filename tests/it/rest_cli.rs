//! REST providers through the `ctxd` binary: a turn served by `ctxd serve` from a fake
//! GitHub API (labels in the rendered context, items past the limit counted in the
//! answer and the trace, neither the secret nor the value in the logs even with `query`
//! auth), `doctor`'s probe and warnings, and `validate --explain`.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::rest_provider::{origin, raw};
use crate::server::{Ctxd, Deployment, TenantSpec, layer_status, provider, trace_of, turn};
use crate::support::{ctxd, stderr_of, stdout_of};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const KEY: &str = "rest-cli-test-key";
const SECRET: &str = "qs-4c1f9e27b0d8a6";
const VALUE: &str = "CUST-6170";

fn project() -> String {
    json!({
        "id": "support", "version": "1.0.0",
        "providers": [{
            "id": "customer-issues", "name": "Customer issues",
            "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 5
        }],
        "layers": [{
            "id": "open-issues", "name": "Open issues of the customer",
            "bindings": [{"provider": "customer-issues"}]
        }]
    })
    .to_string()
}

fn issue(number: usize) -> Value {
    json!({
        "number": number, "title": format!("Sync stalls #{number}"),
        "body": "The nightly sync stops after the first page.",
        "updated_at": "2026-11-29T12:00:00Z", "state": "open",
        "user": {"login": "octocat"},
        "labels": [{"name": "sync"}, {"name": "priority:high"}]
    })
}

/// A `github.issues`-like binding at `server`, authenticated by a query parameter.
fn binding(server: &RunningProvider) -> String {
    format!(
        r#"revision = "rest-1"
[providers.customer-issues]
type = "rest"
version = "github-v3"
endpoint = "{endpoint}"
path = "/repos/acme/widgets/issues"
params = {{ labels = "{{value}}", state = "all", per_page = "{{limit}}" }}
auth = {{ type = "query", param = "access_token", value_env = "ISSUES_TOKEN" }}
retention = "content"
[providers.customer-issues.mapping]
id = "$.number"
title = "$.title"
content = "$.body"
updated_at = "$.updated_at"
metadata = {{ labels = "$.labels[*].name", author = "$.user.login" }}
"#,
        endpoint = origin(server)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_gets_issues_with_labels_and_the_drop_is_recorded() {
    let issues: Vec<Value> = (1..=30).map(issue).collect();
    let server = ProviderServer::new()
        .behaviour(raw(
            200,
            &[(
                "link",
                "<https://api.github.com/issues?page=2>; rel=\"next\"",
            )],
            &Value::Array(issues),
        ))
        .start()
        .await;
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding(&server))]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("ISSUES_TOKEN", SECRET)]);
    let (status, body) = turn(
        &ctxd,
        KEY,
        json!({"project": "support", "inputs": {"customerId": VALUE}}),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    let issues = provider(&body, "customer-issues");
    assert_eq!(issues["status"], "OK", "{issues}");
    assert_eq!(issues["items"], 5);
    assert_eq!(issues["itemsDropped"], 25);
    assert_eq!(layer_status(&body, "open-issues"), "INCLUDED");
    let rendered = body["rendered"].as_str().unwrap();
    assert!(rendered.contains("Sync stalls #1"), "{rendered}");
    assert!(rendered.contains("priority:high"), "{rendered}");

    // The readiness probe is a GET of the endpoint; the lookup is the only other request.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.path == "/" || r.path == "/repos/acme/widgets/issues")
    );
    let lookups: Vec<_> = requests.iter().filter(|r| r.path != "/").collect();
    assert_eq!(lookups.len(), 1, "{requests:?}");
    let request = lookups[0];
    assert_eq!(
        request.query.as_deref(),
        Some(format!("labels={VALUE}&per_page=5&state=all&access_token={SECRET}").as_str())
    );

    let trace = trace_of(&ctxd, KEY, body["turnId"].as_str().unwrap()).await;
    let record = &trace["providers"][0];
    assert_eq!(record["providerType"], "rest", "{record}");
    assert_eq!(record["itemsDropped"], 25, "{record}");
    assert_eq!(record["itemCount"], 5, "{record}");

    let mut ctxd = ctxd;
    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
    let logs = ctxd.logs();
    assert!(logs.contains("rest provider call finished"), "{logs}");
    for hidden in [SECRET, VALUE, "access_token="] {
        assert!(!logs.contains(hidden), "{hidden} in the logs:\n{logs}");
    }
}

async fn run(args: Vec<String>, env: &[(&str, &str)]) -> Output {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut command = ctxd();
        command
            .args(&args)
            .env_remove("ISSUES_TOKEN")
            .env_remove("CTXD_TEST_DIGEST_KEY");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    })
    .await
    .unwrap()
}

fn config_arg(command: &str, config: &Path) -> Vec<String> {
    vec![
        command.to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_probes_the_endpoint_and_warns_about_query_auth() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::Json(200, json!({"current_user_url": "x"})))
        .start()
        .await;
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding(&server))]);
    let output = run(
        config_arg("doctor", &deployment.config),
        &[("ISSUES_TOKEN", SECRET)],
    )
    .await;
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    let line = |prefix: &str, needle: &str| {
        stdout.lines().any(|l| {
            l.starts_with(prefix)
                && l.contains("provider customer-issues (rest)")
                && l.contains(needle)
        })
    };
    assert!(line("warn", "sends the secret in the URL"), "{stdout}");
    assert!(line("warn", "access logs"), "{stdout}");
    assert!(
        line("ok", "environment variable \"ISSUES_TOKEN\" is set"),
        "{stdout}"
    );
    assert!(
        line("ok", "is reachable: GET of the endpoint was answered"),
        "{stdout}"
    );
    assert!(!stdout.contains(SECRET), "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one probe, no lookup");
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].path, "/");
    assert_eq!(
        requests[0].query.as_deref(),
        Some(format!("access_token={SECRET}").as_str())
    );

    let missing = run(config_arg("doctor", &deployment.config), &[]).await;
    let stdout = stdout_of(&missing);
    assert_eq!(missing.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("FAIL")
            && l.contains("provider customer-issues (rest)")
            && l.contains("\"ISSUES_TOKEN\" is not set")),
        "{stdout}"
    );
    assert_eq!(server.hits(), 1, "nothing is sent without the secret");

    let refusing = ProviderServer::new().status(401).start().await;
    let deployment =
        Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding(&refusing))]);
    let output = run(
        config_arg("doctor", &deployment.config),
        &[("ISSUES_TOKEN", SECRET)],
    )
    .await;
    let stdout = stdout_of(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("FAIL")
            && l.contains("GET failed: UNAVAILABLE (UNAUTHORIZED)")
            && !l.contains(SECRET)),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_explain_prints_the_expanded_preset() {
    let binding = "revision = \"r1\"\n[providers.customer-issues]\ntype = \"rest\"\nversion = \"v3\"\npreset = \"github.issues\"\nrepository = \"acme/widgets\"\ntoken_env = \"ISSUES_TOKEN\"\n";
    let deployment =
        Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding.to_owned())]);
    let mut args = config_arg("validate", &deployment.config);
    args.extend(["--explain".to_owned(), "customer-issues".to_owned()]);
    let output = run(args, &[("ISSUES_TOKEN", SECRET)]).await;
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    for needle in [
        "# tenant \"acme\", binding ",
        "[providers.customer-issues]",
        "endpoint = \"https://api.github.com/\"",
        "path = \"/repos/acme/widgets/issues\"",
        "labels = \"{value}\"",
        "per_page = \"{limit}\"",
        "[providers.customer-issues.auth]",
        "type = \"bearer\"",
        "token_env = \"ISSUES_TOKEN\"",
        "id = \"$.number\"",
        "labels = \"$.labels[*].name\"",
    ] {
        assert!(stdout.contains(needle), "{needle} in:\n{stdout}");
    }
    assert!(!stdout.contains(SECRET));

    let mut args = config_arg("validate", &deployment.config);
    args.extend(["--explain".to_owned(), "nobody".to_owned()]);
    let output = run(args, &[("ISSUES_TOKEN", SECRET)]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout_of(&output).contains("provider \"nobody\" is in no binding"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_check_runs_a_rest_binding_and_names_the_mapping_problem() {
    let server = ProviderServer::new()
        .respond_with(|request, _| {
            let query = request.query.clone().unwrap_or_default();
            if request.path == "/" {
                Behaviour::Json(200, json!({}))
            } else if query.contains(&format!("labels={VALUE}")) {
                Behaviour::Json(200, Value::Array((1..=3).map(issue).collect()))
            } else {
                Behaviour::Json(200, json!([]))
            }
        })
        .start()
        .await;
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("binding.toml");
    let broken = binding(&server)
        .replace("[providers.customer-issues]", "[providers.broken]")
        .replace(
            "[providers.customer-issues.mapping]",
            "[providers.broken.mapping]",
        )
        .replace("id = \"$.number\"", "id = \"$.key\"");
    std::fs::write(
        &path,
        format!(
            "{}{}",
            binding(&server),
            broken.replacen("revision = \"rest-1\"\n", "", 1)
        ),
    )
    .unwrap();
    let check = |provider: &str| {
        vec![
            "provider-check".to_owned(),
            "--binding".to_owned(),
            path.display().to_string(),
            "--value".to_owned(),
            VALUE.to_owned(),
            provider.to_owned(),
        ]
    };

    let output = run(check("customer-issues"), &[("ISSUES_TOKEN", SECRET)]).await;
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    for needle in [
        "PASS secret: environment variable \"ISSUES_TOKEN\" is set (query)",
        "PASS reachable: GET of the endpoint was answered (no 401/403, 429 or 5xx)",
        "PASS lookup: --value mapped to 2 item(s); 1 more past --limit 2 were dropped",
        "PASS limit: limit 1 gave 1 item (2 dropped)",
        "PASS not-found: a value no record can have gave NOT_FOUND",
    ] {
        assert!(stdout.contains(needle), "{needle} in:\n{stdout}");
    }
    assert!(!stdout.contains(SECRET), "{stdout}");

    let output = run(check("broken"), &[("ISSUES_TOKEN", SECRET)]).await;
    let stdout = stdout_of(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL lookup: INVALID_RESPONSE (MAPPING_FAILED): item 0: mapping.id \"$.key\" found no id"),
        "{stdout}"
    );

    let output = run(check("customer-issues"), &[]).await;
    let stdout = stdout_of(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL secret: environment variable \"ISSUES_TOKEN\" is not set"),
        "{stdout}"
    );
}
