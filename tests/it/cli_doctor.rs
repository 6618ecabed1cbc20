//! `ctxd doctor`: the shipped config passes; each broken piece of a deployment (a missing
//! secret, a missing database, an incompatible or absent provider) is a `FAIL` line naming
//! the tenant and the provider, and the exit code is 1; no secret is ever printed.

use crate::provider_server::{Behaviour, ProviderServer};
use crate::server::{Deployment, TenantSpec};
use crate::support::{ctxd, stderr_of, stdout_of};
use serde_json::json;
use std::path::Path;
use std::process::Output;

const SECRET: &str = "doctor-secret-5e1d0c9b7a3f";

/// A project requiring the providers `ids`, each looked up by `customerId`.
fn project(ids: &[&str]) -> String {
    let providers: Vec<_> = ids
        .iter()
        .map(|id| json!({"id": id, "name": id, "lookup": {"input": "customerId"}}))
        .collect();
    let layers: Vec<_> = ids
        .iter()
        .map(|id| json!({"id": format!("{id}-layer"), "name": id, "bindings": [{"provider": id}]}))
        .collect();
    json!({"id": "acme", "version": "1.0.0", "providers": providers, "layers": layers}).to_string()
}

/// A binding with one HTTP provider `crm` at `endpoint`, authenticated by `CRM_TOKEN`.
fn http_binding(endpoint: &str) -> String {
    format!(
        "revision = \"r1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"{endpoint}\"\nsecret_env = \"CRM_TOKEN\"\ntimeout_ms = 800\n"
    )
}

fn http_deployment(endpoint: &str) -> Deployment {
    Deployment::new(&[TenantSpec::new(
        "acme",
        "acme-doctor-key",
        project(&["crm"]),
        http_binding(endpoint),
    )])
}

/// Runs `ctxd doctor --config CONFIG` off the async runtime, with `CRM_TOKEN` set to
/// `secret` (or unset).
async fn doctor(config: &Path, secret: Option<&str>) -> Output {
    let config = config.to_path_buf();
    let secret = secret.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut command = ctxd();
        command
            .args(["doctor", "--config", config.to_str().unwrap()])
            .env_remove("CRM_TOKEN")
            .env_remove("CTXD_TEST_DIGEST_KEY");
        if let Some(secret) = secret {
            command.env("CRM_TOKEN", secret);
        }
        command.output().unwrap()
    })
    .await
    .unwrap()
}

/// The output's `FAIL` lines.
fn fails(output: &Output) -> Vec<String> {
    stdout_of(output)
        .lines()
        .filter(|line| line.starts_with("FAIL"))
        .map(str::to_owned)
        .collect()
}

fn assert_fails_with(output: &Output, needles: &[&str]) {
    let stdout = stdout_of(output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        stderr_of(output)
    );
    assert!(
        fails(output)
            .iter()
            .any(|line| needles.iter().all(|needle| line.contains(needle))),
        "no FAIL line with {needles:?}:\n{stdout}"
    );
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        summary.starts_with("doctor: ") && !summary.ends_with(" 0 FAIL"),
        "{stdout}"
    );
    assert!(
        !stdout.contains(SECRET),
        "the secret was printed:\n{stdout}"
    );
    assert!(!stderr_of(output).contains(SECRET));
}

#[test]
fn the_shipped_config_passes() {
    let output = ctxd()
        .args(["doctor"])
        .env_remove("CTXD_DIGEST_KEY")
        .output()
        .unwrap();
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    for provider in ["customer-data", "orders", "tickets"] {
        let prefix = format!("ok    tenant demo, provider {provider} (sqlite): database ");
        assert!(
            stdout
                .lines()
                .any(|line| line.starts_with(&prefix) && line.contains("opens read-only")),
            "no ok line for {provider}:\n{stdout}"
        );
    }
    assert!(stdout.contains("ok    trace store: "), "{stdout}");
    assert!(stdout.contains("digest key: "), "{stdout}");
    assert!(fails(&output).is_empty(), "{stdout}");
    assert!(
        stdout.lines().last().unwrap().ends_with(" 0 FAIL"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_http_provider_passes_and_its_secret_is_not_printed() {
    let server = ProviderServer::new().start().await;
    let deployment = http_deployment(&server.url());
    let output = doctor(&deployment.config, Some(SECRET)).await;
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    assert!(
        stdout.contains("ok    tenant acme, provider crm (http): describe answered context-provider.v1 with the lookup capability, version 5.0.1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok    tenant acme, provider crm (http): secret_env: environment variable \"CRM_TOKEN\" is set"),
        "{stdout}"
    );
    assert!(stdout.contains("plain http to a loopback host"), "{stdout}");
    assert!(!stdout.contains(SECRET), "{stdout}");
    // One describe probe, with the secret, and no lookup: doctor never looks anything up.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].is_describe());
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_env_var_fails_naming_tenant_and_provider() {
    let server = ProviderServer::new().start().await;
    let deployment = http_deployment(&server.url());
    let output = doctor(&deployment.config, None).await;
    assert_fails_with(
        &output,
        &[
            "tenant acme, provider crm (http)",
            "\"CRM_TOKEN\" is not set",
        ],
    );
    assert_eq!(server.hits(), 0, "no probe without the secret");
    let empty = doctor(&deployment.config, Some("")).await;
    assert_fails_with(
        &empty,
        &["tenant acme, provider crm (http)", "\"CRM_TOKEN\" is empty"],
    );
}

/// A deployment whose project requires `orders`, a SQLite provider on `database`.
fn sqlite_deployment(database: &str) -> Deployment {
    let binding = format!(
        "revision = \"r1\"\n[providers.orders]\ntype = \"sqlite\"\ndatabase = {database:?}\nquery = \"SELECT id FROM orders WHERE customer_id = ?1\"\nversion = \"v1\"\n"
    );
    Deployment::new(&[TenantSpec::new(
        "acme",
        "acme-doctor-key",
        project(&["orders"]),
        binding,
    )])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_file_fails_naming_tenant_and_provider() {
    let deployment = sqlite_deployment("missing.db");
    let output = doctor(&deployment.config, None).await;
    assert_fails_with(
        &output,
        &[
            "tenant acme, provider orders (sqlite)",
            "missing.db",
            "does not exist",
        ],
    );
    // Doctor opens read-only: it never creates the file.
    let folder = deployment.config.parent().unwrap();
    assert!(!folder.join("missing.db").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_store_as_a_provider_database_fails() {
    // The test deployment's trace store is `data/traces.db` beside its config.
    let deployment = sqlite_deployment("data/traces.db");
    let output = doctor(&deployment.config, None).await;
    assert_fails_with(
        &output,
        &[
            "tenant acme, provider orders (sqlite)",
            "providers.orders.database: ",
            "traces.db is the trace store of",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_answering_another_contract_fails() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::WrongContract)
        .start()
        .await;
    let deployment = http_deployment(&server.url());
    let output = doctor(&deployment.config, Some(SECRET)).await;
    assert_fails_with(
        &output,
        &[
            "tenant acme, provider crm (http)",
            "describe failed: INCOMPATIBLE (WRONG_CONTRACT)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_with_nothing_listening_fails() {
    // Bind, note the port, close: nothing listens there any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let deployment = http_deployment(&format!("http://{addr}/context"));
    let output = doctor(&deployment.config, Some(SECRET)).await;
    assert_fails_with(
        &output,
        &[
            "tenant acme, provider crm (http)",
            "UNAVAILABLE (CONNECT_FAILED)",
            "nothing answered",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_reflecting_the_secret_fails_without_printing_it() {
    let server = ProviderServer::new()
        .behaviour(Behaviour::ReflectHeader(200))
        .start()
        .await;
    let deployment = http_deployment(&server.url());
    let output = doctor(&deployment.config, Some(SECRET)).await;
    assert_fails_with(
        &output,
        &[
            "tenant acme, provider crm (http)",
            "SECRET_DETECTED (CREDENTIAL_REFLECTED)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_problems_are_fail_lines() {
    let server = ProviderServer::new().start().await;
    // The project requires `orders`, which the binding lacks; the binding's timeout is
    // out of range.
    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        "acme-doctor-key",
        project(&["crm", "orders"]),
        http_binding(&server.url()).replace("timeout_ms = 800", "timeout_ms = 5"),
    )]);
    let output = doctor(&deployment.config, Some(SECRET)).await;
    assert_fails_with(
        &output,
        &["tenant acme", "providers.crm.timeout_ms: 5 is out of range"],
    );

    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        "acme-doctor-key",
        project(&["crm", "orders"]),
        http_binding(&server.url()),
    )]);
    let output = doctor(&deployment.config, Some(SECRET)).await;
    assert_fails_with(&output, &["tenant acme, provider orders", "NOT_BOUND"]);

    std::fs::write(&deployment.config, "[limits]\nmax_turn_ms = 1\n").unwrap();
    let output = doctor(&deployment.config, Some(SECRET)).await;
    assert_fails_with(&output, &["config: ", "limits.max_turn_ms"]);
}
