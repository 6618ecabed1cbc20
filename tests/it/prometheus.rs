//! The operator kit around `/metrics`: the recording and alerting rules of
//! `config/prometheus/` pass `promtool check rules` and their own unit tests, every query
//! of the Grafana dashboard is valid PromQL over series ctxd exports or the rules record,
//! and a real Prometheus server scraping a ctxd under load evaluates the rules.

use crate::provider_server::{Behaviour, ProviderServer};
use crate::server::{Ctxd, Deployment, TenantSpec, client, turn};
use crate::support::root;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "prometheus-test-key";

fn rules() -> PathBuf {
    root().join("config/prometheus/ctxd-rules.yml")
}

/// `tool` on this machine, or `None` when it is missing outside CI (CI installs the
/// Debian `prometheus` package, which has both `promtool` and `prometheus`).
fn tool(tool: &str) -> Option<&str> {
    match Command::new(tool).arg("--version").output() {
        Ok(_) => Some(tool),
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{tool} is required in CI (.ci/run installs the prometheus package)")
        }
        Err(_) => {
            eprintln!("skipped: {tool} is not installed");
            None
        }
    }
}

fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_rules_pass_promtool_and_their_unit_tests() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(rules())
        .output()
        .unwrap();
    assert_success(&check, "promtool check rules");
    let test = Command::new(promtool)
        .current_dir(root().join("config/prometheus"))
        .args(["test", "rules", "ctxd-rules.test.yml"])
        .output()
        .unwrap();
    assert_success(&test, "promtool test rules");
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("config/grafana/ctxd-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().expect("targets").clone())
        .map(|target| target["expr"].as_str().expect("an expr").to_owned())
        .collect()
}

#[test]
fn every_dashboard_query_is_valid_promql_over_series_that_exist() {
    let queries = dashboard_queries();
    // Names a query reads: ctxd's series (docs/METRICS.md lists every one) or a series
    // the rules record.
    let documented = std::fs::read_to_string(root().join("docs/METRICS.md")).unwrap();
    let recorded = std::fs::read_to_string(rules()).unwrap();
    let names = regex::Regex::new(r"ctxd[_:][a-z0-9_:]+").unwrap();
    for query in &queries {
        for name in names.find_iter(query).map(|m| m.as_str()) {
            let series = name
                .strip_suffix("_bucket")
                .filter(|_| name.starts_with("ctxd_"))
                .unwrap_or(name);
            assert!(
                documented.contains(&format!("`{series}`"))
                    || recorded.contains(&format!("record: {name}")),
                "{name} in {query:?} is neither a documented series nor a recorded rule"
            );
        }
    }
    let Some(promtool) = tool("promtool") else {
        return;
    };
    // promtool parses PromQL in rule files: each query becomes a recording rule.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-queries.yml");
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, query)| json!({"record": format!("dashboard:query_{i}"), "expr": query}))
        .collect();
    let groups = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    // JSON is YAML.
    std::fs::write(&file, groups.to_string()).unwrap();
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert_success(&check, "promtool check rules (dashboard queries)");
}

/// A Prometheus server on `127.0.0.1`, scraping `target` every second and evaluating
/// `rules` every second; killed when dropped.
struct Prometheus {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &str, target: &str, rules: &Path) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: ctxd\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n",
                rules.display()
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// The result vector of an instant query; empty while Prometheus is not up yet.
    async fn query(&self, query: &str) -> Vec<Value> {
        let mut url = url::Url::parse(&format!("{}/api/v1/query", self.base)).unwrap();
        url.query_pairs_mut().append_pair("query", query);
        let Ok(response) = client().get(url).send().await else {
            return Vec::new();
        };
        let body: Value = response.json().await.unwrap_or(Value::Null);
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_ctxd_under_load_and_evaluates_the_rules() {
    let Some(binary) = tool("prometheus") else {
        return;
    };
    // crm fails every call; billing answers.
    let crm = ProviderServer::new()
        .behaviour(Behaviour::Status(503))
        .start()
        .await;
    let billing = ProviderServer::new()
        .lookup_items(vec![
            json!({"id": "B-1", "title": "Invoice", "content": "Paid."}),
        ])
        .start()
        .await;
    let project = json!({
        "id": "acme", "version": "1",
        "providers": [
            {"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}},
            {"id": "billing", "name": "Billing", "lookup": {"input": "customerId"}}
        ],
        "layers": [
            {"id": "customer", "name": "Customer", "bindings": [{"provider": "crm"}]},
            {"id": "invoices", "name": "Invoices", "bindings": [{"provider": "billing"}]}
        ],
        "profiles": [{"id": "default"}]
    })
    .to_string();
    let binding = format!(
        "revision = \"prom-1\"\n[defaults]\ntimeout_ms = 1000\n\
         [providers.crm]\ntype = \"http\"\nendpoint = \"{}\"\n\
         [providers.billing]\ntype = \"http\"\nendpoint = \"{}\"\n",
        crm.url(),
        billing.url()
    );
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project, binding)]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let target = ctxd.base.trim_start_matches("http://").to_owned();
    let prometheus = Prometheus::start(binary, &target, &rules());

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0;
    let ratio = loop {
        assert!(
            Instant::now() < deadline,
            "Prometheus never recorded ctxd:provider_error_ratio:rate5m for crm"
        );
        for _ in 0..20 {
            let (status, _) = turn(
                &ctxd,
                KEY,
                json!({"project": "acme", "inputs": {"customerId": format!("CUST-{sent:04}")}}),
            )
            .await;
            assert_eq!(status, 200);
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let result = prometheus.query("ctxd:provider_error_ratio:rate5m").await;
        let crm = result
            .iter()
            .find(|sample| sample["metric"]["provider"] == "crm");
        let billing = result
            .iter()
            .find(|sample| sample["metric"]["provider"] == "billing");
        if let (Some(crm), Some(billing)) = (crm, billing) {
            let value =
                |sample: &Value| -> f64 { sample["value"][1].as_str().unwrap().parse().unwrap() };
            assert_eq!(value(billing), 0.0, "billing answers every call");
            break value(crm);
        }
    };
    // The breaker opens after crm's failures, so some calls are CIRCUIT_OPEN fast
    // failures (not counted as errors of the provider): most counted calls failed.
    assert!(ratio > 0.5, "crm's error ratio {ratio}");
    let turns = prometheus.query("sum(ctxd:turns:rate5m)").await;
    assert!(!turns.is_empty(), "turns are recorded");
}
