//! `GET /metrics`: the Prometheus exposition carries turns by outcome, durations,
//! coordinator overhead, provider calls, in-flight and circuit gauges and trace writer
//! figures, with low-cardinality labels only, and passes `promtool check metrics`.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, turn};
use serde_json::json;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const KEY: &str = "metrics-test-key";
const SECRET: &str = "metrics-bearer-93b1c0ffee42d7aa";
const VALUE: &str = "CUST-5150";

fn project() -> String {
    json!({
        "id": "acme", "version": "1",
        "providers": [
            {"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}},
            {"id": "billing", "name": "Billing", "lookup": {"input": "customerId"}}
        ],
        "layers": [
            {"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}]},
            {"id": "invoices", "name": "Invoices", "bindings": [{"provider": "billing"}]}
        ]
    })
    .to_string()
}

/// A binding of both of the project's providers to one provider server.
fn both_providers_on(server: &RunningProvider) -> String {
    format!(
        "revision = \"m1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"{0}\"\n\
         [providers.billing]\ntype = \"http\"\nendpoint = \"{0}\"\n",
        server.url()
    )
}

async fn scrape(ctxd: &Ctxd) -> String {
    let response = client().get(ctxd.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "Prometheus text format"
    );
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_cover_turns_providers_and_traces_with_safe_labels() {
    let crm = ProviderServer::new().start().await;
    let billing = ProviderServer::new()
        .behaviour(Behaviour::Status(503))
        .start()
        .await;
    let binding = format!(
        "revision = \"m1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"{}\"\nsecret_env = \"CRM_TOKEN\"\n\
         [providers.billing]\ntype = \"http\"\nendpoint = \"{}\"\n",
        crm.url(),
        billing.url()
    );
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding)]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    let mut turn_ids = Vec::new();
    for _ in 0..3 {
        let (status, body) = turn(
            &ctxd,
            KEY,
            json!({"project": "acme", "inputs": {"customerId": VALUE}}),
        )
        .await;
        assert_eq!(status, 200);
        turn_ids.push(body["turnId"].as_str().unwrap().to_owned());
    }
    let (status, _) = turn(&ctxd, "wrong-key", json!({"project": "acme"})).await;
    assert_eq!(status, 401);
    // Let the trace writer commit and the upkeep tick sample the queue.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let text = scrape(&ctxd).await;

    for expected in [
        "ctxd_turns_total{outcome=\"answered\"} 3",
        "ctxd_turns_total{outcome=\"unauthorized\"} 1",
        "ctxd_provider_calls_total{provider=\"crm\",status=\"OK\",detail=\"\"} 3",
        "ctxd_provider_calls_total{provider=\"billing\",status=\"UNAVAILABLE\",detail=\"HTTP_503\"} 3",
        "ctxd_turn_duration_seconds_bucket{le=\"0.001\"}",
        "ctxd_coordinator_overhead_seconds_bucket{le=\"0.00005\"}",
        "ctxd_provider_call_duration_seconds_bucket{provider=\"crm\",le=\"",
        "ctxd_provider_in_flight{provider=\"crm\"} 0",
        "ctxd_provider_circuits{provider=\"crm\",state=\"closed\"} 1",
        "ctxd_provider_circuits{provider=\"crm\",state=\"open\"} 0",
        "ctxd_trace_batches_total",
        "ctxd_trace_records_total 9",
        "ctxd_trace_write_duration_seconds_bucket",
        "ctxd_trace_queue_depth 0",
        "# HELP ctxd_coordinator_overhead_seconds",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // Low cardinality: no tenant label by default, never ids, values or secrets.
    assert!(!text.contains("tenant="));
    for needle in [VALUE, SECRET] {
        assert!(!text.contains(needle), "{needle} in the metrics");
    }
    for turn_id in &turn_ids {
        assert!(!text.contains(turn_id.as_str()));
    }

    match Command::new("promtool").arg("--version").output() {
        Ok(_) => {
            let mut check = Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            check
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let output = check.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "promtool check metrics failed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("promtool is required in CI (.ci/run installs the prometheus package)")
        }
        Err(_) => eprintln!("promtool not installed: exposition not checked"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_label_is_opt_in_and_metrics_can_be_off() {
    let crm = ProviderServer::new().start().await;
    let binding = both_providers_on(&crm);
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding.clone())]);
    let config = std::fs::read_to_string(&deployment.config).unwrap();
    std::fs::write(
        &deployment.config,
        format!("{config}\n[metrics]\ntenant_label = true\n"),
    )
    .unwrap();
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let (status, _) = turn(
        &ctxd,
        KEY,
        json!({"project": "acme", "inputs": {"customerId": VALUE}}),
    )
    .await;
    assert_eq!(status, 200);
    let text = scrape(&ctxd).await;
    for expected in [
        "ctxd_turns_total{outcome=\"answered\",tenant=\"acme\"} 1",
        "ctxd_provider_circuit_state{provider=\"crm\",tenant=\"acme\"} 0",
        "ctxd_provider_circuits{provider=\"crm\",state=\"closed\"} 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    drop(ctxd);

    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding)]);
    let config = std::fs::read_to_string(&deployment.config).unwrap();
    std::fs::write(
        &deployment.config,
        format!("{config}\n[metrics]\nenabled = false\n"),
    )
    .unwrap();
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let response = client().get(ctxd.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 404);
}

/// Before any turn, the series dashboards and alerts watch are already there, at zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_series_are_exported_at_zero_from_start_up() {
    let crm = ProviderServer::new().start().await;
    let binding = both_providers_on(&crm);
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding)]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let text = scrape(&ctxd).await;
    for expected in [
        "ctxd_turns_total{outcome=\"answered\"} 0",
        "ctxd_turns_total{outcome=\"blocked\"} 0",
        "ctxd_turns_total{outcome=\"too_many_turns\"} 0",
        "ctxd_turns_total{outcome=\"runtime_unavailable\"} 0",
        "ctxd_provider_calls_total{provider=\"crm\",status=\"OK\",detail=\"\"} 0",
        "ctxd_provider_calls_total{provider=\"billing\",status=\"TIMEOUT\",detail=\"\"} 0",
        "ctxd_provider_circuits{provider=\"billing\",state=\"open\"} 0",
        "ctxd_provider_circuits{provider=\"crm\",state=\"closed\"} 1",
        "ctxd_provider_in_flight{provider=\"crm\"} 0",
        "ctxd_trace_batches_total 0",
        "ctxd_trace_records_total 0",
        "ctxd_trace_backpressure_total 0",
        "ctxd_handle_operations_total{op=\"search\",result=\"ok\"} 0",
        "ctxd_handle_operations_total{op=\"delete\",result=\"ok\"} 0",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}
