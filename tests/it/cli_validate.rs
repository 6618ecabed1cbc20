//! `ctxd validate`, and the start-up refusals of `ctxd serve` it must agree with: what
//! `serve` refuses, `validate` reports, both naming the file and the key.

use crate::server::{Deployment, TenantSpec};
use crate::support::{ctxd, stderr_of, stdout_of};
use serde_json::json;
use std::path::Path;
use std::process::Output;

#[test]
fn the_shipped_config_validates() {
    let output = ctxd()
        .args(["validate"])
        .env_remove("CTXD_DIGEST_KEY")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        stdout_of(&output),
        stderr_of(&output)
    );
    assert!(stdout_of(&output).contains("ok"), "{}", stdout_of(&output));
}

const KEY: &str = "validate-test-key";

/// A deployment whose tenant `acme` serves provider `orders` from the SQLite `database`
/// (relative to the deployment's folder) with `query`.
fn sqlite_deployment(database: &str, query: &str) -> Deployment {
    let project = json!({
        "id": "acme", "version": "1",
        "providers": [{"id": "orders", "name": "Orders", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "orders-layer", "name": "Orders", "bindings": [{"provider": "orders"}]}]
    })
    .to_string();
    let binding = format!(
        "revision = \"r1\"\n[providers.orders]\ntype = \"sqlite\"\ndatabase = {database:?}\nquery = {query:?}\nversion = \"v1\"\n"
    );
    Deployment::new(&[TenantSpec::new("acme", KEY, project, binding)])
}

fn folder(deployment: &Deployment) -> &Path {
    deployment.config.parent().unwrap()
}

fn run(command: &str, deployment: &Deployment) -> Output {
    ctxd()
        .args([command, "--config", deployment.config.to_str().unwrap()])
        .env_remove("CTXD_TEST_DIGEST_KEY")
        .output()
        .unwrap()
}

/// `validate` fails with a line holding `needle`; `serve` refuses to start with the same
/// text after `tenant acme: `.
fn assert_both_refuse(deployment: &Deployment, needle: &str) {
    let validate = run("validate", deployment);
    let stdout = stdout_of(&validate);
    assert_eq!(validate.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().any(|line| line == needle),
        "validate: no line {needle:?}:\n{stdout}"
    );
    let serve = run("serve", deployment);
    let stderr = stderr_of(&serve);
    assert!(!serve.status.success(), "serve started:\n{stderr}");
    assert!(
        stderr.contains(&format!("tenant acme: {needle}")),
        "serve does not say {needle:?}:\n{stderr}"
    );
}

#[test]
fn a_missing_database_is_refused_by_validate_and_serve_alike() {
    let deployment = sqlite_deployment("orders.db", "SELECT id FROM orders WHERE k = ?1");
    let binding = folder(&deployment).join("acme-binding-0.toml");
    let database = folder(&deployment).join("orders.db");
    assert_both_refuse(
        &deployment,
        &format!(
            "{}: providers.orders.database: {}: the file does not exist",
            binding.display(),
            database.display()
        ),
    );
    assert!(!database.exists(), "neither command creates the file");
}

#[test]
fn a_query_that_does_not_prepare_read_only_is_refused_by_validate_and_serve_alike() {
    let deployment = sqlite_deployment("orders.db", "DELETE FROM orders WHERE k = ?1 RETURNING id");
    let database = folder(&deployment).join("orders.db");
    rusqlite::Connection::open(&database)
        .unwrap()
        .execute_batch(
            "CREATE TABLE orders (id TEXT, k TEXT); INSERT INTO orders VALUES ('1', 'a');",
        )
        .unwrap();
    let binding = folder(&deployment).join("acme-binding-0.toml");
    assert_both_refuse(
        &deployment,
        &format!(
            "{}: providers.orders.query: does not prepare as a read-only SELECT: not authorized",
            binding.display()
        ),
    );
    let rows: i64 = rusqlite::Connection::open(&database)
        .unwrap()
        .query_row("SELECT count(*) FROM orders", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1, "nothing was deleted");
}

#[test]
fn the_trace_store_is_refused_as_a_provider_database() {
    // The test deployment's trace store is `data/traces.db` beside its config.
    let deployment = sqlite_deployment("data/traces.db", "SELECT id FROM turns WHERE ?1");
    std::fs::create_dir_all(folder(&deployment).join("data")).unwrap();
    std::fs::write(deployment.store(), "").unwrap();
    let binding = folder(&deployment).join("acme-binding-0.toml");
    let store = std::fs::canonicalize(deployment.store()).unwrap();
    assert_both_refuse(
        &deployment,
        &format!(
            "{}: providers.orders.database: {} is the trace store of {} (trace.store): a provider never serves ctxd's own records",
            binding.display(),
            store.display(),
            deployment.config.display()
        ),
    );
}

#[test]
fn a_short_digest_key_is_refused_by_validate_and_serve_alike() {
    let deployment = sqlite_deployment("orders.db", "SELECT id FROM orders WHERE k = ?1");
    rusqlite::Connection::open(folder(&deployment).join("orders.db"))
        .unwrap()
        .execute_batch("CREATE TABLE orders (id TEXT, k TEXT);")
        .unwrap();
    let needle = format!(
        "{}: trace.digest_key_env: environment variable \"CTXD_TEST_DIGEST_KEY\" is shorter than 32 bytes: serve refuses such a digest key",
        deployment.config.display()
    );
    let with_key = |command: &str| {
        ctxd()
            .args([command, "--config", deployment.config.to_str().unwrap()])
            .env("CTXD_TEST_DIGEST_KEY", "12345")
            .output()
            .unwrap()
    };
    let validate = with_key("validate");
    assert_eq!(validate.status.code(), Some(1));
    assert!(
        stdout_of(&validate).lines().any(|line| line == needle),
        "{}",
        stdout_of(&validate)
    );
    let serve = with_key("serve");
    assert!(!serve.status.success());
    assert!(stderr_of(&serve).contains(&needle), "{}", stderr_of(&serve));
    assert!(!stdout_of(&validate).contains("12345") && !stderr_of(&serve).contains("12345"));
}

#[test]
fn every_problem_of_a_project_is_reported_in_one_run() {
    let deployment = sqlite_deployment("orders.db", "SELECT id FROM orders WHERE k = ?1");
    let project = folder(&deployment).join("acme-project-0.json");
    std::fs::write(
        &project,
        json!({
            "id": "acme", "version": "1",
            "budget": {"maxBytes": "4096"},
            "providers": [{"id": "orders", "name": "Orders", "endpoint": "https://orders.internal",
                           "lookup": {"input": "customerId", "pattern": "^CUST-[0-9"}}],
            "layers": [{"id": "orders-layer", "name": "Orders", "requried": true,
                        "bindings": [{"provider": "orders"}]}]
        })
        .to_string(),
    )
    .unwrap();
    let output = run("validate", &deployment);
    let stdout = stdout_of(&output);
    let project = project.display();
    for line in [
        format!(
            "{project}: $.providers[0].endpoint: `endpoint` belongs in a Deployment Binding, not in a Project"
        ),
        format!("{project}: $.budget.maxBytes: must be a whole number (found a string)"),
        format!("{project}: $.layers[0].requried: unknown field `requried`, expected one of "),
        format!("{project}: $.providers[0].lookup.pattern: invalid regex: "),
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&line)),
            "no line {line:?}:\n{stdout}"
        );
    }
}
