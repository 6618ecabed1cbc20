//! docs/WRITING_A_PROVIDER.md, held to what it says: the page shows exactly
//! docs/examples/provider.py; that Python provider passes `ctxd provider-check` and
//! serves a real `ctxd serve` turn; a reply without `currentness` is warned about and
//! blocks a required `currentness: "required"` layer, as the page says.

use crate::provider_server::{Behaviour, ProviderServer};
use crate::server::{Ctxd, Deployment, TenantSpec, layer_status, provider, turn};
use crate::support::{ctxd, root, stderr_of, stdout_of};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const KEY: &str = "docs-test-key";
const SECRET: &str = "example-bearer-5c1d9e7a3b";
const EXAMPLE: &str = "docs/examples/provider.py";

/// The documented example provider, running under `python3` on a free loopback port.
struct ExampleProvider {
    child: Child,
    url: String,
}

impl ExampleProvider {
    /// Starts `python3 docs/examples/provider.py 0` with `PROVIDER_SECRET` set and waits
    /// for the `listening on URL` line.
    fn start() -> ExampleProvider {
        let mut child = Command::new("python3")
            .current_dir(root())
            .args([EXAMPLE, "0"])
            .env("PROVIDER_SECRET", SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the documented example provider");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the example provider prints its address");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        ExampleProvider { child, url }
    }
}

impl Drop for ExampleProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `ctxd provider-check URL ARGS…` with `PROVIDER_TOKEN` set, off the async runtime.
async fn provider_check(url: &str, args: &[&str]) -> Output {
    let mut command = ctxd();
    command
        .arg("provider-check")
        .arg(url)
        .args(args)
        .env("PROVIDER_TOKEN", SECRET);
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// A project whose one layer is required and wants current data, as the page's example.
fn project() -> String {
    json!({
        "id": "crm-demo", "version": "1.0.0",
        "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 3}],
        "layers": [{"id": "customer", "name": "Customer", "bindings": [{"provider": "crm"}],
                    "required": true, "currentness": "required"}]
    })
    .to_string()
}

fn binding(endpoint: &str) -> String {
    format!(
        "revision = \"docs-1\"\n\n[providers.crm]\ntype = \"http\"\nendpoint = \"{endpoint}\"\nsecret_env = \"CRM_TOKEN\"\ntimeout_ms = 2000\n"
    )
}

fn serve(endpoint: &str) -> (Deployment, Ctxd) {
    let deployment = Deployment::new(&[TenantSpec::new("docs", KEY, project(), binding(endpoint))]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    (deployment, ctxd)
}

fn lookup(value: &str) -> Value {
    json!({"project": "crm-demo", "inputs": {"customerId": value}})
}

#[test]
fn the_page_shows_exactly_the_tested_example() {
    let page = std::fs::read_to_string(root().join("docs/WRITING_A_PROVIDER.md")).unwrap();
    let example = std::fs::read_to_string(root().join(EXAMPLE)).unwrap();
    let shown = page
        .split_once("```python\n")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .map(|(code, _)| code)
        .expect("the page has a python block");
    assert_eq!(shown, example, "the page's python block is {EXAMPLE}");
    assert!(page.contains(EXAMPLE), "the page names the file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_example_passes_provider_check() {
    let example = ExampleProvider::start();
    let output = provider_check(&example.url, &["--secret-env", "PROVIDER_TOKEN"]).await;
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|line| line.ends_with("8 passed, 0 failed, 0 skipped")),
        "every rule passes, none warns:\n{stdout}"
    );
    assert!(!stdout.contains(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_runs_through_the_documented_example() {
    let example = ExampleProvider::start();
    let (_deployment, mut ctxd) = serve(&example.url);

    let (status, body) = turn(&ctxd, KEY, lookup("CUST-1042")).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(layer_status(&body, "customer"), "INCLUDED", "{body:#}");
    let crm = provider(&body, "crm");
    assert_eq!(crm["status"], "OK");
    assert_eq!(crm["currentness"], "CURRENT");
    assert_eq!(crm["version"], "crm-1.0");
    assert_eq!(crm["versionSource"], "response");
    assert!(
        body["rendered"]
            .as_str()
            .unwrap()
            .contains("Nordwind Logistics GmbH")
    );

    // No record: the example answers 404, which is NOT_FOUND and an EMPTY layer — a
    // definite answer, so even a required layer does not block.
    let (status, body) = turn(&ctxd, KEY, lookup("CUST-9999")).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(provider(&body, "crm")["status"], "NOT_FOUND");
    assert_eq!(layer_status(&body, "customer"), "EMPTY");
    assert_eq!(body["layers"][0]["reason"], "NOT_FOUND");
    assert_eq!(body["blocked"], false);

    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_without_currentness_is_warned_about_and_blocks_a_required_current_layer() {
    // Holds CUST-1042 only, as the example does, but leaves out currentness.
    let server = ProviderServer::new()
        .currentness(None)
        .respond_with(|request, _| {
            if request.is_describe() || request.json()["value"] == "CUST-1042" {
                Behaviour::Answer
            } else {
                Behaviour::Status(404)
            }
        })
        .start()
        .await;

    let output = provider_check(&server.url(), &["--secret-env", "PROVIDER_TOKEN"]).await;
    let stdout = stdout_of(&output);
    assert!(
        output.status.success(),
        "a warning does not fail the check:\n{stdout}"
    );
    let lookup_line = stdout
        .lines()
        .find(|line| line.contains(" lookup: "))
        .unwrap_or_else(|| panic!("no lookup line:\n{stdout}"));
    assert!(
        lookup_line.starts_with("WARN lookup: ")
            && lookup_line.contains("currentness not given")
            && lookup_line.contains("reads an answer without currentness as UNKNOWN"),
        "{lookup_line}"
    );
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .ends_with("7 passed, 1 warned, 0 failed, 0 skipped"),
        "{stdout}"
    );

    let json = provider_check(&server.url(), &["--format", "json"]).await;
    let report: Value = serde_json::from_str(&stdout_of(&json)).unwrap();
    assert_eq!(report["counts"]["warned"], 1, "{report:#}");
    assert_eq!(report["passed"], true);

    // What the warning is about: the answer is read as UNKNOWN, and the required layer
    // that wants current data blocks the turn; nothing is rendered.
    let (_deployment, ctxd) = serve(&server.url());
    let (status, body) = turn(&ctxd, KEY, lookup("CUST-1042")).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(provider(&body, "crm")["status"], "OK");
    assert_eq!(provider(&body, "crm")["currentness"], "UNKNOWN");
    assert_eq!(layer_status(&body, "customer"), "UNKNOWN");
    assert_eq!(body["layers"][0]["reason"], "NOT_CURRENT");
    assert_eq!(body["blocked"], true);
    assert_eq!(body["blockingLayers"], json!(["customer"]));
    assert_eq!(body["rendered"], Value::Null, "{body:#}");
    assert!(
        body.get("rendered").is_some() && body.get("renderedDigest").is_some(),
        "a blocked turn sends rendered and renderedDigest as null: {body:#}"
    );
    assert_eq!(body["renderedDigest"], Value::Null);
}
