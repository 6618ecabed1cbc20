//! The `mcp` provider against real MCP servers written with the official Python SDK
//! (`tests/it/mcp/server.py`), over stdio (a child the provider starts, restarts and
//! kills) and over streamable HTTP with a bearer token.
//!
//! Skipped, with a message, only when the Python package `mcp` is not importable and
//! `CI` is not set; under CI a missing package fails the tests.

use crate::support::root;
use ctxd::config::{Binding, ProviderKind};
use ctxd::contract::ProviderStatus;
use ctxd::outcome::Outcome;
use ctxd::providers::LookupCall;
use ctxd::providers::mcp::McpProvider;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;
use tokio::time::Instant;

const TOKEN: &str = "mcp-test-token-5f1c9a";

/// The Python interpreter that has the `mcp` package, as an absolute path (a stdio
/// child gets no `PATH` unless the binding allows it); `None` means skip.
pub(crate) fn python_with_mcp() -> Option<PathBuf> {
    let probe = Command::new("python3")
        .args(["-c", "import mcp, sys; print(sys.executable)"])
        .output();
    match probe {
        Ok(output) if output.status.success() => Some(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        )),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "CI is set but the Python package `mcp` is not importable: pip install 'mcp>=2,<3'"
            )
        }
        _ => {
            eprintln!(
                "SKIPPED: the Python package `mcp` is not importable (pip install 'mcp>=2,<3')"
            );
            None
        }
    }
}

pub(crate) fn server_script() -> PathBuf {
    root().join("tests/it/mcp/server.py")
}

/// A folder for the binding and for the marks the server writes.
struct Scene {
    dir: TempDir,
    python: PathBuf,
}

impl Scene {
    fn new(python: PathBuf) -> Scene {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("marks")).unwrap();
        Scene { dir, python }
    }

    fn marks(&self) -> PathBuf {
        self.dir.path().join("marks")
    }

    /// Pids the server wrote to `marks/<name>`.
    fn marked(&self, name: &str) -> Vec<u32> {
        std::fs::read_to_string(self.marks().join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// A provider bound to the stdio server with `lookup` as its binding lines.
    fn stdio(&self, lookup: &str) -> McpProvider {
        let text = format!(
            r#"revision = "t1"
[providers.crm]
type = "mcp"
command = {python:?}
args = [{script:?}, "stdio"]
env = ["MCP_TEST_MARKS", "CTXD_MCP_ALLOWED"]
{lookup}
"#,
            python = self.python.display().to_string(),
            script = server_script().display().to_string(),
        );
        self.build(&text, |name| match name {
            "MCP_TEST_MARKS" => Some(self.marks().display().to_string()),
            "CTXD_MCP_ALLOWED" => Some("yes".to_owned()),
            _ => None,
        })
    }

    fn build(&self, text: &str, read: impl Fn(&str) -> Option<String>) -> McpProvider {
        let path = self.dir.path().join("binding.toml");
        std::fs::write(&path, text).unwrap();
        let binding = Binding::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let ProviderKind::Mcp(mcp) = &binding.providers["crm"].kind else {
            panic!("an mcp provider")
        };
        let provider = McpProvider::build("crm", mcp, read).unwrap();
        provider.start();
        provider
    }
}

async fn lookup_within(provider: &McpProvider, value: &str, within: Duration) -> Outcome {
    provider
        .lookup(&LookupCall {
            provider: "crm",
            key: "customerId",
            value,
            limit: 5,
            deadline: Instant::now() + within,
            secrets: Default::default(),
        })
        .await
}

/// A lookup with room for the server to start (Python takes a while to import).
async fn lookup(provider: &McpProvider, value: &str) -> Outcome {
    lookup_within(provider, value, Duration::from_secs(20)).await
}

#[track_caller]
fn assert_failed(outcome: &Outcome, status: ProviderStatus, detail: &str) {
    assert_eq!(outcome.status(), status, "{outcome:?}");
    assert_eq!(outcome.detail(), Some(detail), "{outcome:?}");
    assert!(outcome.items_found().is_empty());
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_tool_answers_with_the_value_in_its_argument_beside_fixed_ones() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let provider = scene.stdio(
        r#"tool = "lookup"
argument = "customer"
arguments = { region = "north" }"#,
    );
    let outcome = lookup(&provider, "c-17").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(
        outcome.items_found()[0].content,
        "customer c-17 in north: plan gold"
    );
    provider.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_becomes_metadata_and_resources_are_read_by_uri() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let tool = scene.stdio("tool = \"profile\"\nargument = \"customer\"");
    let outcome = lookup(&tool, "c-3").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    let item = &outcome.items_found()[0];
    assert_eq!(item.metadata["tier"], "gold");
    assert_eq!(item.metadata["customer"], "c-3");
    tool.close();

    // A failed read fails: no answer kept from an earlier read stands in for it.
    let flaky = scene.stdio("resource = \"flaky://{customer}\"");
    let first = lookup(&flaky, "c-9").await;
    assert_eq!(first.status(), ProviderStatus::Ok, "{first:?}");
    let second = lookup(&flaky, "c-9").await;
    assert_failed(&second, ProviderStatus::Unavailable, "TOOL_ERROR");
    flaky.close();

    let resource = scene.stdio("resource = \"customers://{customer}/profile\"");
    let outcome = lookup(&resource, "c-9").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found()[0].content, "profile of c-9");
    assert_eq!(outcome.items_found()[0].id, "customers://c-9/profile");
    resource.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_sizes_and_secrets_are_refused_as_every_provider_answer_is() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let cases = [
        ("fail", ProviderStatus::Unavailable, "TOOL_ERROR"),
        ("big", ProviderStatus::LimitExceeded, "RESPONSE_TOO_LARGE"),
        ("many", ProviderStatus::LimitExceeded, "TOO_MANY_ITEMS"),
        ("wide", ProviderStatus::LimitExceeded, "ITEM_TOO_LARGE"),
        ("aws", ProviderStatus::SecretDetected, "aws_access_key_id"),
    ];
    for (tool, status, detail) in cases {
        let provider = scene.stdio(&format!("tool = \"{tool}\"\nargument = \"customer\""));
        let outcome = lookup(&provider, "c-1").await;
        assert_failed(&outcome, status, detail);
        provider.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_cancels_a_hanging_call_on_the_server() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let provider = scene.stdio("tool = \"hang\"\nargument = \"customer\"");
    // Let the session come up, so the deadline falls on the call itself.
    assert!(
        provider
            .wait_ready(Instant::now() + Duration::from_secs(20))
            .await
    );
    let outcome = lookup_within(&provider, "c-1", Duration::from_secs(3)).await;
    let started = Instant::now();
    assert_eq!(outcome.status(), ProviderStatus::Timeout, "{outcome:?}");
    eventually("the server saw notifications/cancelled", || {
        !scene.marked("cancelled").is_empty()
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    provider.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_dies_is_restarted_and_killed_on_close() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let dying = scene.stdio("tool = \"die\"\nargument = \"customer\"");
    let outcome = lookup(&dying, "c-1").await;
    assert_eq!(outcome.status(), ProviderStatus::Unavailable, "{outcome:?}");
    assert_eq!(scene.marked("died").len(), 1);
    // The provider starts a new child with backoff: a second call reaches it.
    eventually("a second server started", || {
        scene.marked("started").len() >= 2
    })
    .await;
    let outcome = lookup(&dying, "c-1").await;
    assert_eq!(outcome.status(), ProviderStatus::Unavailable, "{outcome:?}");
    assert_eq!(
        scene.marked("died").len(),
        2,
        "the restarted server took the call"
    );
    dying.close();

    let scene = Scene::new(scene.python.clone());
    let provider = scene.stdio("tool = \"lookup\"\nargument = \"customer\"");
    assert_eq!(lookup(&provider, "c-1").await.status(), ProviderStatus::Ok);
    let pid = scene.marked("started")[0];
    assert!(alive(pid));
    provider.close();
    eventually("the child was killed on close", || !alive(pid)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_sees_only_the_allow_listed_environment() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let provider = scene.stdio("tool = \"env\"\nargument = \"customer\"");
    let outcome = lookup(&provider, "c-1").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    let names: Vec<&str> = outcome.items_found()[0].content.split(' ').collect();
    assert!(names.contains(&"MCP_TEST_MARKS"), "{names:?}");
    assert!(names.contains(&"CTXD_MCP_ALLOWED"), "{names:?}");
    assert!(!names.contains(&"HOME"), "{names:?}");
    assert!(!names.contains(&"PATH"), "{names:?}");
    assert!(!names.contains(&"CARGO"), "{names:?}");
    provider.close();
}

/// The Python server over streamable HTTP on a free loopback port, killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) async fn start_http_server(python: &Path, marks: &Path) -> HttpServerHandle {
    start_http_server_on(python, marks, free_port()).await
}

async fn start_http_server_on(python: &Path, marks: &Path, port: u16) -> HttpServerHandle {
    let child = Command::new(python)
        .arg(server_script())
        .args(["http", &port.to_string()])
        .env("MCP_TEST_TOKEN", TOKEN)
        .env("MCP_TEST_MARKS", marks)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = HttpServer { child, port };
    let until = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < until, "the MCP HTTP server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    HttpServerHandle(server)
}

pub(crate) struct HttpServerHandle(HttpServer);

impl HttpServerHandle {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.0.port)
    }
}

fn http_binding(url: &str, tool: &str) -> String {
    format!(
        r#"revision = "t1"
[providers.crm]
type = "mcp"
url = "{url}"
auth_env = "CRM_MCP_TOKEN"
tool = "{tool}"
argument = "customer"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_with_a_bearer_token() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let server = start_http_server(&scene.python, &scene.marks()).await;
    let token = |name: &str| (name == "CRM_MCP_TOKEN").then(|| TOKEN.to_owned());

    let provider = scene.build(&http_binding(&server.url(), "lookup"), token);
    let outcome = lookup(&provider, "c-5").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(
        outcome.items_found()[0].content,
        "customer c-5 in eu: plan gold"
    );
    assert!(provider.check(Duration::from_secs(10)).await.is_ok());
    provider.close();

    // An answer that echoes the token is refused; nothing of it is kept.
    let reflecting = scene.build(&http_binding(&server.url(), "reflect"), token);
    let outcome = lookup(&reflecting, "c-5").await;
    assert_failed(
        &outcome,
        ProviderStatus::SecretDetected,
        "CREDENTIAL_REFLECTED",
    );
    assert!(!format!("{outcome:?}").contains(TOKEN));
    reflecting.close();

    // A wrong token: the server refuses the session.
    let refused = scene.build(&http_binding(&server.url(), "lookup"), |name: &str| {
        (name == "CRM_MCP_TOKEN").then(|| "wrong-token".to_owned())
    });
    let outcome = lookup(&refused, "c-5").await;
    assert_failed(&outcome, ProviderStatus::Unavailable, "UNAUTHORIZED");
    refused.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_check_finds_a_missing_tool_or_argument() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let good = scene.stdio("tool = \"lookup\"\nargument = \"customer\"");
    let found = good.check(Duration::from_secs(20)).await.unwrap();
    assert!(found.contains("lookup(customer, region)"), "{found}");
    assert!(found.contains("customers://{customer}/profile"), "{found}");
    let missing = scene.stdio("tool = \"nope\"\nargument = \"customer\"");
    let problem = missing.check(Duration::from_secs(20)).await.unwrap_err();
    assert!(problem.contains("no tool \"nope\""), "{problem}");
    let wrong = scene.stdio("tool = \"lookup\"\nargument = \"client\"");
    let problem = wrong.check(Duration::from_secs(20)).await.unwrap_err();
    assert!(problem.contains("no argument \"client\""), "{problem}");
}

fn ctxd_output(args: Vec<String>, env: Vec<(&'static str, String)>) -> std::process::Output {
    let mut command = crate::support::ctxd();
    command.args(&args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_check_has_an_mcp_mode() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let server = start_http_server(&scene.python, &scene.marks()).await;
    let args = |tool: &str| {
        vec![
            "provider-check".to_owned(),
            server.url(),
            "--secret-env".to_owned(),
            "CRM_MCP_TOKEN".to_owned(),
            "--mcp-tool".to_owned(),
            tool.to_owned(),
            "--mcp-argument".to_owned(),
            "customer".to_owned(),
            "--timeout-ms".to_owned(),
            "10000".to_owned(),
        ]
    };
    let env = || vec![("CRM_MCP_TOKEN", TOKEN.to_owned())];

    let (good, bad) = (args("lookup"), args("reflect"));
    let output = tokio::task::spawn_blocking(move || ctxd_output(good, env()))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for line in [
        "PASS https",
        "PASS initialize: a session initialized (server version 1.2.3)",
        "PASS bound-lookup-offered",
        "PASS lookup-answers",
        "PASS no-credential-reflection",
    ] {
        assert!(stdout.contains(line), "{line}:\n{stdout}");
    }

    let output = tokio::task::spawn_blocking(move || ctxd_output(bad, env()))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "FAIL lookup-answers: the lookup answered SECRET_DETECTED (CREDENTIAL_REFLECTED)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("FAIL no-credential-reflection"), "{stdout}");
    assert!(!stdout.contains(TOKEN), "the token is never printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lists_the_servers_tools_and_fails_a_missing_argument() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let project = serde_json::json!({
        "id": "acme", "version": "1.0.0",
        "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "account", "name": "Account", "bindings": [{"provider": "crm"}]}]
    })
    .to_string();
    let binding = |argument: &str| {
        format!(
            "revision = \"d1\"\n[providers.crm]\ntype = \"mcp\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\ntool = \"lookup\"\nargument = \"{argument}\"\n",
            python.display().to_string(),
            server_script().display().to_string(),
        )
    };
    for (argument, expected, code) in [
        (
            "customer",
            "ok    tenant acme, provider crm (mcp): mcp server command",
            0,
        ),
        ("client", "tool \"lookup\" has no argument \"client\"", 1),
    ] {
        let deployment = crate::server::Deployment::new(&[crate::server::TenantSpec::new(
            "acme",
            "acme-doctor-key",
            project.clone(),
            binding(argument),
        )]);
        let config = deployment.config.display().to_string();
        let output = tokio::task::spawn_blocking(move || {
            ctxd_output(vec!["doctor".into(), "--config".into(), config], vec![])
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains(expected), "{expected}:\n{stdout}");
        assert_eq!(output.status.code(), Some(code), "{stdout}");
        if code == 0 {
            assert!(stdout.contains("lookup(customer, region)"), "{stdout}");
            assert!(
                stdout.contains("customers://{customer}/profile"),
                "{stdout}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_http_server_gets_a_new_session() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let server = start_http_server(&scene.python, &scene.marks()).await;
    let port = server.0.port;
    let url = server.url();
    let token = |name: &str| (name == "CRM_MCP_TOKEN").then(|| TOKEN.to_owned());
    let provider = scene.build(&http_binding(&url, "lookup"), token);
    assert_eq!(lookup(&provider, "c-1").await.status(), ProviderStatus::Ok);

    // The server goes away: its sessions are gone with it.
    drop(server);
    let outcome = lookup_within(&provider, "c-1", Duration::from_secs(2)).await;
    assert_ne!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");

    let _restarted = start_http_server_on(&scene.python, &scene.marks(), port).await;
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = lookup_within(&provider, "c-2", Duration::from_secs(2)).await;
        if outcome.status() == ProviderStatus::Ok {
            assert_eq!(
                outcome.items_found()[0].content,
                "customer c-2 in eu: plan gold"
            );
            break;
        }
        assert!(Instant::now() < until, "no new session: {outcome:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    provider.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_share_one_session() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let http_marks = tempfile::tempdir().unwrap();
    let server = start_http_server(&scene.python, http_marks.path()).await;
    let token = |name: &str| (name == "CRM_MCP_TOKEN").then(|| TOKEN.to_owned());
    let http = scene.build(&http_binding(&server.url(), "lookup"), token);
    let stdio = scene.stdio("tool = \"lookup\"\nargument = \"customer\"");
    for provider in [&http, &stdio] {
        let values: Vec<String> = (0..24).map(|i| format!("c-{i}")).collect();
        let outcomes =
            futures_util::future::join_all(values.iter().map(|v| lookup(provider, v))).await;
        for (value, outcome) in values.iter().zip(&outcomes) {
            assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
            assert_eq!(
                outcome.items_found()[0].content,
                format!("customer {value} in eu: plan gold"),
                "each answer is its own call's"
            );
        }
        provider.close();
    }
    assert_eq!(
        scene.marked("started").len(),
        1,
        "one stdio child for every call"
    );
}

#[test]
fn validate_names_an_unset_mcp_token_by_its_key() {
    let project = serde_json::json!({
        "id": "acme", "version": "1.0.0",
        "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "account", "name": "Account", "bindings": [{"provider": "crm"}]}]
    })
    .to_string();
    let binding = http_binding("https://mcp.example.com/mcp", "lookup");
    let deployment = crate::server::Deployment::new(&[crate::server::TenantSpec::new(
        "acme", "acme-key", project, binding,
    )]);
    let output = crate::support::ctxd()
        .args(["validate", "--config"])
        .arg(&deployment.config)
        .env_remove("CRM_MCP_TOKEN")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(
        all.contains("providers.crm.auth_env: environment variable \"CRM_MCP_TOKEN\" is not set"),
        "{all}"
    );
}
