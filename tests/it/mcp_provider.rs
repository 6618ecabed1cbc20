//! The `mcp` provider against real MCP servers written with the official Python SDK
//! (`tests/it/mcp/server.py`), over stdio (a child the provider starts, restarts and
//! kills) and over streamable HTTP with a bearer token.
//!
//! Servers that misbehave are scripted: a raw JSON-RPC server over HTTP
//! (`tests/it/mcp/hostile.rs`) that holds `initialize`, forgets or stalls its sessions and
//! echoes the token, a stdio child that never answers (`tests/it/mcp/silent.py`), and the
//! Python server's hostile tools (stderr floods, bytes that are not UTF-8, control
//! characters). Time-driven behaviour (deadlines, backoff, the stalled-session check) is
//! tested on paused time.
//!
//! Skipped, with a message, only when the Python package `mcp` is not importable and
//! `CI` is not set; under CI a missing package fails the tests.

#[path = "mcp/hostile.rs"]
mod hostile;

use crate::server::{Ctxd, Deployment, TenantSpec, get, provider, trace_of, turn};
use crate::support::root;
use ctxd::config::{Binding, ProviderKind};
use ctxd::contract::ProviderStatus;
use ctxd::outcome::Outcome;
use ctxd::providers::LookupCall;
use ctxd::providers::mcp::McpProvider;
use hostile::{Forgotten, Hostile};
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
        self.stdio_with(&server_script(), &["stdio"], lookup)
    }

    /// A provider bound to `script` run with `args` over stdio.
    fn stdio_with(&self, script: &Path, args: &[&str], lookup: &str) -> McpProvider {
        let args: Vec<String> = args.iter().map(|arg| format!("{arg:?}")).collect();
        let text = format!(
            r#"revision = "t1"
[providers.crm]
type = "mcp"
command = {python:?}
args = [{script:?}, {args}]
env = ["MCP_TEST_MARKS", "CTXD_MCP_ALLOWED"]
{lookup}
"#,
            python = self.python.display().to_string(),
            script = script.display().to_string(),
            args = args.join(", "),
        );
        self.build(&text, |name| match name {
            "MCP_TEST_MARKS" => Some(self.marks().display().to_string()),
            "CTXD_MCP_ALLOWED" => Some("yes".to_owned()),
            _ => None,
        })
    }

    fn build(&self, text: &str, read: impl Fn(&str) -> Option<String>) -> McpProvider {
        build_provider(self.dir.path(), text, read)
    }
}

/// The provider `crm` of the binding `text`, written into `dir`, started.
fn build_provider(dir: &Path, text: &str, read: impl Fn(&str) -> Option<String>) -> McpProvider {
    let path = dir.join("binding.toml");
    std::fs::write(&path, text).unwrap();
    let binding = Binding::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let ProviderKind::Mcp(mcp) = &binding.providers["crm"].kind else {
        panic!("an mcp provider")
    };
    let provider = McpProvider::build("crm", mcp, read).unwrap();
    provider.start();
    provider
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

/// A provider bound to the scripted server at `url`, with the test token.
fn hostile_provider(url: &str) -> (TempDir, McpProvider) {
    let dir = tempfile::tempdir().unwrap();
    let provider = build_provider(dir.path(), &http_binding(url, "lookup"), |name| {
        (name == "CRM_MCP_TOKEN").then(|| TOKEN.to_owned())
    });
    (dir, provider)
}

/// Paused time that moves only when the test moves it (`tokio::time::advance`). Paused
/// time on its own jumps to the next timer whenever the runtime waits, a real socket's
/// answer or a child's start still on its way; tokio does not move a paused clock while a
/// blocking task runs, so one is held open for as long as this lives. Real events are
/// waited for in real time, bounded, with the clock standing still.
struct ManualTime {
    _release: std::sync::mpsc::Sender<()>,
}

impl ManualTime {
    fn start() -> ManualTime {
        let (release, held) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let _ = held.recv();
        });
        ManualTime { _release: release }
    }
}

/// Lets the runtime run what is ready, in real time, without moving the clock.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Waits in real time (bounded) until `check` holds; the clock stands still.
async fn busy_until(what: &str, mut check: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
        tokio::task::yield_now().await;
    }
}

/// Moves the clock on in 10 ms steps, letting real events happen between steps, until
/// `check` holds (a backoff has passed and what follows it has happened).
async fn advance_until(what: &str, mut check: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting until {what}"
        );
        tokio::time::advance(Duration::from_millis(10)).await;
        std::thread::sleep(Duration::from_millis(1));
        settle().await;
    }
}

/// A lookup of `value` with a 1 s deadline, run as its own task.
fn spawn_lookup(provider: &McpProvider, value: &'static str) -> tokio::task::JoinHandle<Outcome> {
    let provider = provider.clone();
    tokio::spawn(async move { lookup_within(&provider, value, Duration::from_secs(1)).await })
}

/// The outcome of a lookup task that must finish without the clock moving: it did not
/// wait for its deadline.
async fn finished_at_once(lookup: tokio::task::JoinHandle<Outcome>) -> Outcome {
    busy_until(
        "the lookup finished without waiting for its deadline",
        || lookup.is_finished(),
    )
    .await;
    lookup.await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_http_server_holding_initialize_fails_lookups_at_once_after_the_first_deadline() {
    let _time = ManualTime::start();
    let server = Hostile::start().await;
    server.hold_initialize(true);
    let (_dir, provider) = hostile_provider(&server.url("plain"));
    busy_until("the first initialize arrived", || server.initializes() == 1).await;
    // Lookups wait for the first attempt, each until its own deadline.
    let first = spawn_lookup(&provider, "c-1");
    settle().await;
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_failed(
        &finished_at_once(first).await,
        ProviderStatus::Timeout,
        "DEADLINE",
    );
    // `initialize` has 10 s: then the attempt is given up, and lookups answer the
    // failure at once, also while the next attempts run (and are held too).
    tokio::time::advance(Duration::from_secs(9)).await;
    settle().await;
    let outcome = finished_at_once(spawn_lookup(&provider, "c-1")).await;
    assert_failed(&outcome, ProviderStatus::Unavailable, "CONNECT_FAILED");
    for attempt in 2..=3 {
        advance_until("the next attempt", || server.initializes() == attempt).await;
        let outcome = finished_at_once(spawn_lookup(&provider, "c-1")).await;
        assert_failed(&outcome, ProviderStatus::Unavailable, "CONNECT_FAILED");
        tokio::time::advance(Duration::from_secs(10)).await;
    }
    // The server answers again: the next attempt brings the session up.
    server.hold_initialize(false);
    advance_until("the next attempt", || server.initializes() == 4).await;
    let outcome = finished_at_once(spawn_lookup(&provider, "c-2")).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found()[0].content, "customer c-2 ok");
    provider.close();
}

#[tokio::test(start_paused = true)]
async fn a_stdio_server_that_never_answers_initialize_is_killed_and_restarted() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let _time = ManualTime::start();
    let scene = Scene::new(python);
    let silent = root().join("tests/it/mcp/silent.py");
    let provider = scene.stdio_with(&silent, &[], "tool = \"lookup\"\nargument = \"customer\"");
    busy_until("the first child started", || {
        scene.marked("started").len() == 1
    })
    .await;
    let first = scene.marked("started")[0];
    // A stdio child has 30 s to answer `initialize`; then it is killed, and lookups
    // answer the failure at once until a new child, started after the backoff, answers.
    tokio::time::advance(Duration::from_secs(30)).await;
    settle().await;
    let outcome = finished_at_once(spawn_lookup(&provider, "c-1")).await;
    assert_failed(&outcome, ProviderStatus::Unavailable, "CONNECT_FAILED");
    busy_until("the first child was killed", || !alive(first)).await;
    advance_until("a second child started", || {
        scene.marked("started").len() == 2
    })
    .await;
    let second = scene.marked("started")[1];
    assert!(alive(second));
    provider.close();
    busy_until("the second child was killed on close", || !alive(second)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_forgets_its_sessions_gets_a_new_one_within_the_same_lookup() {
    for forgotten in [Forgotten::NotFound, Forgotten::TypeScript400] {
        let server = Hostile::start().await;
        let (_dir, provider) = hostile_provider(&server.url("plain"));
        let outcome = lookup_within(&provider, "c-1", Duration::from_secs(5)).await;
        assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
        // The server restarts: it knows none of its sessions. The next lookup's request
        // is refused, a new session starts and the request is sent again, once.
        server.forget_sessions(forgotten);
        let outcome = lookup_within(&provider, "c-2", Duration::from_secs(5)).await;
        assert_eq!(
            outcome.status(),
            ProviderStatus::Ok,
            "{forgotten:?}: {outcome:?}"
        );
        assert_eq!(outcome.items_found()[0].content, "customer c-2 ok");
        assert_eq!(server.initializes(), 2, "{forgotten:?}");
        assert_eq!(server.unknown_session_requests(), 1, "{forgotten:?}");
        assert_eq!(server.calls(), 2, "{forgotten:?}");
        provider.close();
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_session_is_checked_with_a_ping_and_replaced() {
    let _time = ManualTime::start();
    let server = Hostile::start().await;
    let (_dir, provider) = hostile_provider(&server.url("plain"));
    let outcome = finished_at_once(spawn_lookup(&provider, "c-1")).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    // The session stalls: nothing sent in it is answered any more (a new one would be).
    server.stall_sessions();
    for held in 1..=3 {
        let pending = spawn_lookup(&provider, "c-1");
        busy_until("the call arrived", || server.held() == held).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_failed(
            &finished_at_once(pending).await,
            ProviderStatus::Timeout,
            "DEADLINE",
        );
    }
    // Three lookups in a row without an answer: the session is pinged; the ping is not
    // answered within 5 s either, and a new session takes the stalled one's place.
    busy_until("the ping arrived", || server.held() == 4).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    advance_until("a new session", || server.initializes() == 2).await;
    let outcome = finished_at_once(spawn_lookup(&provider, "c-9")).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found()[0].content, "customer c-9 ok");
    provider.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_asks_for_the_latest_released_protocol_version() {
    let server = Hostile::start().await;
    let (_dir, provider) = hostile_provider(&server.url("plain"));
    let outcome = lookup(&provider, "c-1").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(server.initialize_versions(), ["2025-11-25"]);
    provider.close();

    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let provider = scene.stdio("tool = \"version\"\nargument = \"customer\"");
    let outcome = lookup(&provider, "c-1").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found()[0].content, "2025-11-25");
    provider.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_runs_in_an_empty_working_directory_of_its_own() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    let provider = scene.stdio("tool = \"cwd\"\nargument = \"customer\"");
    let outcome = lookup(&provider, "c-1").await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    let seen: serde_json::Value = serde_json::from_str(&outcome.items_found()[0].content).unwrap();
    let cwd = PathBuf::from(seen["cwd"].as_str().unwrap());
    assert_ne!(cwd, std::env::current_dir().unwrap(), "not ctxd's");
    assert_eq!(seen["entries"], serde_json::json!([]), "empty");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&cwd).unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "private: {mode:o}");
    provider.close();
    eventually("the directory was removed with the child", || !cwd.exists()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_that_is_not_utf8_never_stops_the_reader() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let scene = Scene::new(python);
    // The child writes bytes that are not UTF-8 first, writes to stderr on every call,
    // and would die of SIGPIPE if no one read its stderr any more.
    let provider = scene.stdio_with(
        &server_script(),
        &["stdio", "--hostile-stderr"],
        "tool = \"noisy\"\nargument = \"customer\"",
    );
    for _ in 0..3 {
        let outcome = lookup(&provider, "c-1").await;
        assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
        assert_eq!(outcome.items_found()[0].content, "noisy answer");
    }
    assert_eq!(
        scene.marked("started").len(),
        1,
        "the same child throughout"
    );
    provider.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_version_that_is_no_fit_label_refuses_the_session() {
    let server = Hostile::start().await;
    for (mode, status, detail) in [
        (
            "version-long",
            ProviderStatus::InvalidResponse,
            "INVALID_LABEL",
        ),
        (
            "version-secret",
            ProviderStatus::SecretDetected,
            "github_token",
        ),
    ] {
        let (_dir, provider) = hostile_provider(&server.url(mode));
        let outcome = lookup(&provider, "c-1").await;
        assert_failed(&outcome, status, detail);
        assert_eq!(outcome.version, None);
        let problem = provider.check(Duration::from_secs(5)).await.unwrap_err();
        assert!(problem.contains(detail), "{problem}");
        assert!(
            !problem.contains("ghp_") && !problem.contains("999"),
            "{problem}"
        );
        assert_eq!(server.calls(), 0, "no call went to a refused session");
    }
}

/// A served deployment of tenant `acme` whose project has one layer per provider, each
/// looking up `customerId`; `providers` are (id, binding lines) pairs.
fn served(providers: &[(&str, String)], env: &[(&str, &str)]) -> (Deployment, Ctxd) {
    let project = serde_json::json!({
        "id": "acme", "version": "1.0.0",
        "providers": providers.iter().map(|(id, _)| serde_json::json!(
            {"id": id, "name": id, "lookup": {"input": "customerId"}}
        )).collect::<Vec<_>>(),
        "layers": providers.iter().map(|(id, _)| serde_json::json!(
            {"id": format!("l{id}"), "name": id, "bindings": [{"provider": id}]}
        )).collect::<Vec<_>>(),
    })
    .to_string();
    let mut binding = "revision = \"h1\"\n".to_owned();
    for (id, lines) in providers {
        binding.push_str(&format!(
            "[providers.{id}]\ntype = \"mcp\"\ntimeout_ms = 10000\n{lines}\n"
        ));
    }
    let deployment = Deployment::new(&[TenantSpec::new("acme", SERVED_KEY, project, binding)]);
    let ctxd = Ctxd::start(&deployment.config, &[], env);
    (deployment, ctxd)
}

const SERVED_KEY: &str = "acme-mcp-hostile-key";

/// `/readyz` for the tenant once every provider's first probe has finished.
async fn probed(ctxd: &Ctxd) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = get(ctxd, SERVED_KEY, "/readyz").await;
        let providers = body["providers"].as_array().cloned().unwrap_or_default();
        if !providers.is_empty() && providers.iter().all(|p| !p["ready"].is_null()) {
            return body;
        }
        assert!(
            Instant::now() < until,
            "never probed: {body:#}\n{}",
            ctxd.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn problem_of<'a>(readiness: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    &readiness["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == id)
        .unwrap_or_else(|| panic!("no provider {id} in {readiness:#}"))["problem"]
}

/// The stdio binding lines of the Python server's `tool`.
fn stdio_lines(python: &Path, tool: &str) -> String {
    format!(
        "command = {:?}\nargs = [{:?}, \"stdio\"]\nenv = [\"MCP_TEST_MARKS\"]\ntool = \"{tool}\"\nargument = \"customer\"",
        python.display().to_string(),
        server_script().display().to_string(),
    )
}

fn http_lines(url: &str) -> String {
    format!(
        "url = \"{url}\"\nauth_env = \"CRM_MCP_TOKEN\"\ntool = \"lookup\"\nargument = \"customer\""
    )
}

/// A stdio server answering with one line of a million and a half JSON values (3 MB):
/// parsed whole, it would cost ctxd well over a hundred MiB; the line's value count ends
/// the session first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_a_message_of_too_many_values_costs_bounded_memory() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let script = root().join("tests/it/mcp/values.py");
    let lines = format!(
        "command = {:?}\nargs = [{:?}]\ntool = \"zeros\"\nargument = \"customer\"",
        python.display().to_string(),
        script.display().to_string(),
    );
    let (_deployment, mut ctxd) = served(&[("zeros", lines)], &[]);
    probed(&ctxd).await;
    let memory = PeakSince::now(ctxd.pid());
    let (status, body) = turn(
        &ctxd,
        SERVED_KEY,
        serde_json::json!({"project": "acme", "inputs": {"customerId": "CUST-7001"}}),
    )
    .await;
    let growth_mib = memory.growth_mib("");
    assert_eq!(status, 200, "{body:#}");
    assert_ne!(provider(&body, "zeros")["status"], "OK", "{body:#}");
    assert!(
        growth_mib < 32,
        "a message of 1.5 M values cost {growth_mib} MiB"
    );
    ctxd.terminate();
    ctxd.wait(Duration::from_secs(20));
    assert!(
        ctxd.logs()
            .contains("mcp server message holds more JSON values than a lookup may take"),
        "{}",
        ctxd.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_a_token_the_server_echoes_is_in_no_log_line_readiness_problem_or_trace() {
    let server = Hostile::start().await;
    let modes = [
        ("toolerror", "tool-error"),
        ("rpcerror", "rpc-error"),
        ("listerror", "list-error"),
        ("unauthorized", "unauthorized"),
        ("contenttype", "content-type"),
        ("versionsecret", "version-secret"),
    ];
    let providers: Vec<(&str, String)> = modes
        .iter()
        .map(|(id, mode)| (*id, http_lines(&server.url(mode))))
        .collect();
    let (_deployment, mut ctxd) = served(&providers, &[("CRM_MCP_TOKEN", TOKEN)]);
    let readiness = probed(&ctxd).await;
    let (status, body) = turn(
        &ctxd,
        SERVED_KEY,
        serde_json::json!({"project": "acme", "inputs": {"customerId": "CUST-7001"}}),
    )
    .await;
    let trace = trace_of(&ctxd, SERVED_KEY, body["turnId"].as_str().unwrap()).await;
    ctxd.terminate();
    ctxd.wait(Duration::from_secs(20));
    let logs = ctxd.logs();
    for (place, text) in [
        ("the log", logs.as_str()),
        ("/readyz", &readiness.to_string()),
        ("the answer", &body.to_string()),
        ("the trace", &trace.to_string()),
    ] {
        assert!(!text.contains(TOKEN), "the token is in {place}:\n{text}");
        assert!(
            !text.contains(&hostile::github_token()),
            "the version's secret is in {place}:\n{text}"
        );
    }
    assert!(logs.contains("mcp server not connected"), "{logs}");
    assert_eq!(status, 200, "{body:#}");
    for (id, status, detail) in [
        ("toolerror", "SECRET_DETECTED", "CREDENTIAL_REFLECTED"),
        ("rpcerror", "SECRET_DETECTED", "CREDENTIAL_REFLECTED"),
        ("unauthorized", "UNAVAILABLE", "UNAUTHORIZED"),
        ("contenttype", "UNAVAILABLE", "CONNECT_FAILED"),
        ("versionsecret", "SECRET_DETECTED", "github_token"),
    ] {
        let found = provider(&body, id);
        assert_eq!(found["status"], status, "{id}: {body:#}");
        assert_eq!(found["detail"], detail, "{id}: {body:#}");
    }
    let listing = problem_of(&readiness, "listerror").as_str().unwrap();
    assert!(listing.contains("CREDENTIAL_REFLECTED"), "{listing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_control_characters_from_a_server_stay_escaped_on_one_log_line() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let server = Hostile::start().await;
    let marks = tempfile::tempdir().unwrap();
    let providers = [
        ("forge", stdio_lines(&python, "forge")),
        ("control", http_lines(&server.url("control"))),
    ];
    let marks_path = marks.path().display().to_string();
    let (_deployment, mut ctxd) = served(
        &providers,
        &[("CRM_MCP_TOKEN", TOKEN), ("MCP_TEST_MARKS", &marks_path)],
    );
    let readiness = probed(&ctxd).await;
    let (status, body) = turn(
        &ctxd,
        SERVED_KEY,
        serde_json::json!({"project": "acme", "inputs": {"customerId": "CUST-7001"}}),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    for id in ["forge", "control"] {
        assert_eq!(provider(&body, id)["detail"], "TOOL_ERROR", "{body:#}");
    }
    ctxd.terminate();
    ctxd.wait(Duration::from_secs(20));
    let logs = ctxd.logs();
    for (what, raw) in [("ESC", '\x1b'), ("BEL", '\x07'), ("CR", '\r')] {
        assert!(!logs.contains(raw), "a raw {what} in the log:\n{logs:?}");
    }
    for line in logs.lines() {
        assert!(
            !line.starts_with("2026-01-01T00:00:00.000000Z"),
            "a forged log line: {line}"
        );
    }
    let escaped = "forged line\\r\\u{1b}[31mred\\u{1b}]0;owned\\u{7}";
    for event in ["mcp tool answered an error", "mcp server stderr"] {
        assert!(
            logs.lines()
                .any(|line| line.contains(event) && line.contains(escaped)),
            "{event} with the text escaped:\n{logs}"
        );
    }
    let problem = problem_of(&readiness, "control").as_str().unwrap();
    assert!(
        problem.contains("has no argument \"customer\""),
        "{problem}"
    );
    assert!(!problem.chars().any(char::is_control), "{problem:?}");
    assert!(problem.contains("\\n2026-01-01"), "{problem}");
}

/// A line of `/proc/<pid>/status`, in KiB.
/// A process's resident memory from now on: its RSS now, and its peak reset to it.
struct PeakSince {
    pid: u32,
    before: u64,
}

impl PeakSince {
    fn now(pid: u32) -> PeakSince {
        let before = status_kib(pid, "VmRSS:");
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
        PeakSince { pid, before }
    }

    /// How far the peak rose above the RSS of [`PeakSince::now`], in MiB (printed with
    /// `what`).
    fn growth_mib(&self, what: &str) -> u64 {
        let (before, peak) = (self.before, status_kib(self.pid, "VmHWM:"));
        let growth_mib = peak.saturating_sub(before) / 1024;
        eprintln!("ctxd RSS {before} KiB before, peak {peak} KiB: +{growth_mib} MiB{what}");
        growth_mib
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_a_128_mib_stderr_line_costs_bounded_memory() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let marks = tempfile::tempdir().unwrap();
    let marks_path = marks.path().display().to_string();
    let (_deployment, mut ctxd) = served(
        &[("flood", stdio_lines(&python, "flood"))],
        &[("MCP_TEST_MARKS", &marks_path)],
    );
    probed(&ctxd).await;
    // From here the peak is what the flood costs.
    let memory = PeakSince::now(ctxd.pid());
    let (status, body) = turn(
        &ctxd,
        SERVED_KEY,
        serde_json::json!({"project": "acme", "inputs": {"customerId": "CUST-7001"}}),
    )
    .await;
    eventually("the child wrote its 128 MiB", || {
        marks.path().join("flooded").exists()
    })
    .await;
    let growth_mib = memory.growth_mib(" for a 128 MiB stderr line");
    assert!(
        growth_mib < 32,
        "a 128 MiB stderr line cost {growth_mib} MiB"
    );
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(provider(&body, "flood")["status"], "OK", "{body:#}");
    // The line is logged once it ends: its head shown, the rest counted.
    let flood_lines = |logs: &str| -> Vec<String> {
        logs.lines()
            .filter(|line| line.contains("mcp server stderr") && line.contains("zzzz"))
            .map(str::to_owned)
            .collect()
    };
    eventually("the line was logged", || {
        !flood_lines(&ctxd.logs()).is_empty()
    })
    .await;
    ctxd.terminate();
    ctxd.wait(Duration::from_secs(20));
    let logged = flood_lines(&ctxd.logs());
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].contains(&format!("dropped_bytes={}", 128 * 1024 * 1024 - 4096)),
        "{}",
        logged[0]
    );
    assert!(logged[0].len() < 1024, "{}", logged[0]);
}
