//! ctxd as an MCP server, driven by the official Python MCP client
//! (`tests/it/mcp/client.py`): `ctxd serve`'s `/mcp` with the tenant's key lists the
//! tools, runs `get_context` and works a handle through metadata/peek/search, with the
//! errors of the HTTP API; a wrong key is refused. And `ctxd serve` with an `mcp`
//! provider (a stdio child) answering turns, its stderr logged redacted.

use crate::mcp_provider::{python_with_mcp, server_script};
use crate::provider_server::{ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, provider, trace_of, turn};
use crate::support::root;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

const KEY: &str = "acme-mcp-key";
const VALUE: &str = "CUST-7001";

fn project() -> String {
    json!({
        "id": "acme", "version": "1.0.0",
        "budget": {"maxBytes": 1500},
        "providers": [
            {"id": "logs", "name": "Logs", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 2}
        ],
        "layers": [
            {"id": "recent-logs", "name": "Recent logs", "bindings": [{"provider": "logs"}], "handles": true}
        ]
    })
    .to_string()
}

/// ~40 KB of log lines, every 100th an error: too large for the budget, so the turn
/// keeps it behind a handle.
async fn logs_provider() -> RunningProvider {
    let content = (0..800)
        .map(|i| {
            if i % 100 == 7 {
                format!("{i:04} ERROR payment failed")
            } else {
                format!("{i:04} INFO request served")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    ProviderServer::new()
        .lookup_items(vec![
            json!({"id": "LOG-1", "title": "Application log", "content": content}),
        ])
        .start()
        .await
}

fn run_client(python: &Path, args: &[&str]) -> Value {
    let output = Command::new(python)
        .arg(root().join("tests/it/mcp/client.py"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "the client printed no report:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn error_code(result: &Value) -> &str {
    result["error"]["code"].as_str().unwrap_or("<none>")
}

/// What every client run must show: the tools, a turn, a handle worked through.
fn assert_scenario(report: &Value) {
    assert!(report.get("refused").is_none(), "{report:#}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in [
        "get_context",
        "handle_metadata",
        "handle_peek",
        "handle_search",
        "handle_slice",
        "search_traces",
        "get_trace",
    ] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }
    // The schema is the turn request's own.
    let schema = report["get_context_schema"].as_array().unwrap();
    for field in ["project", "inputs", "objective", "consumer", "budget"] {
        assert!(schema.contains(&json!(field)), "{field}: {schema:?}");
    }
    assert_eq!(report["context_error"], false, "{report:#}");
    let context = &report["context"];
    assert_eq!(provider(context, "logs")["status"], "OK", "{context:#}");
    assert!(
        context["rendered"]
            .as_str()
            .unwrap()
            .contains("Application log")
    );
    let handle = report["handle"]
        .as_str()
        .expect("the turn returned a handle");
    assert!(handle.starts_with("h_"));

    let operations = report["operations"].as_array().unwrap();
    let metadata = &operations[0];
    assert_eq!(metadata["error"], false, "{metadata:#}");
    assert_eq!(metadata["result"]["metadata"]["items"], 1);
    let peek = &operations[1];
    assert_eq!(peek["error"], false, "{peek:#}");
    assert_eq!(peek["result"]["operation"], "peek");
    let search = &operations[2];
    assert_eq!(search["error"], false, "{search:#}");
    let entries = search["result"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "maxResults bounds the answer");
    assert!(entries[0]["text"].as_str().unwrap().contains("ERROR"));
    assert_eq!(
        search["result"]["sequence"], 3,
        "each call is a traced operation"
    );
    // The same limits and errors as the HTTP API.
    let refused = &operations[3];
    assert_eq!(refused["error"], true);
    assert_eq!(
        error_code(&refused["result"]),
        "invalid_limit",
        "{refused:#}"
    );
    let unknown = &report["unknown_handle"];
    assert_eq!(unknown["error"], true);
    assert_eq!(
        error_code(&unknown["result"]),
        "unknown_handle",
        "{unknown:#}"
    );

    // Provenance: the turn get_context ran, as GET /v1/traces… shows it.
    let turn_id = report["context"]["turnId"].as_str().unwrap();
    let trace = &report["trace"];
    assert_eq!(trace["error"], false, "{trace:#}");
    assert_eq!(trace["result"]["turn"]["turnId"], turn_id, "{trace:#}");
    let search = &report["search"];
    assert_eq!(search["error"], false, "{search:#}");
    let listed = search["result"]["traces"].as_array().unwrap();
    assert!(
        listed.iter().any(|t| t["turn"]["turnId"] == turn_id),
        "{search:#}"
    );
    let bad_search = &report["bad_search"];
    assert_eq!(bad_search["error"], true);
    assert_eq!(
        error_code(&bad_search["result"]),
        "BAD_REQUEST",
        "{bad_search:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_works_a_turn_and_its_handle_through_serve() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let server = logs_provider().await;
    let binding = format!(
        "revision = \"m1\"\n[providers.logs]\ntype = \"http\"\nendpoint = \"{}\"\n",
        server.url()
    );
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding)]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let url = ctxd.url("/mcp");

    let py = python.clone();
    let report = tokio::task::spawn_blocking(move || run_client(&py, &["http", &url, KEY, VALUE]))
        .await
        .unwrap();
    assert_scenario(&report);

    // get_context was a turn like any other: traced, and readable over HTTP.
    let turn_id = report["context"]["turnId"].as_str().unwrap().to_owned();
    let trace = trace_of(&ctxd, KEY, &turn_id).await;
    assert_eq!(trace["turn"]["turnId"], turn_id.as_str(), "{trace:#}");
    // ctxd logs at debug here: still no input value, no rendered material.
    let logs = ctxd.logs();
    assert!(!logs.contains(VALUE), "an input value was logged:\n{logs}");
    assert!(
        !logs.contains("payment failed"),
        "provider material was logged"
    );

    // A wrong key: refused before any MCP message is read.
    let url = ctxd.url("/mcp");
    let refused =
        tokio::task::spawn_blocking(move || run_client(&python, &["http", &url, "wrong", VALUE]))
            .await
            .unwrap();
    let why = refused["refused"].as_str().expect("refused");
    assert!(why.contains("error response"), "{why}");
    assert!(
        refused.get("tools").is_none(),
        "nothing was listed: {refused:#}"
    );
    let response = client()
        .post(ctxd.url("/mcp"))
        .bearer_auth("wrong")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_from_a_stdio_mcp_provider_logs_its_stderr_redacted_and_kills_it_on_stop() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let project = json!({
        "id": "acme", "version": "1.0.0",
        "providers": [
            {"id": "crm", "name": "CRM", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}},
            {"id": "billing", "name": "Billing", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}}
        ],
        "layers": [
            {"id": "account", "name": "Account", "bindings": [{"provider": "crm"}]},
            {"id": "billing", "name": "Billing", "bindings": [{"provider": "billing"}]}
        ]
    })
    .to_string();
    let (python, script) = (
        python.display().to_string(),
        server_script().display().to_string(),
    );
    let binding = format!(
        "revision = \"m2\"\n[providers.crm]\ntype = \"mcp\"\ncommand = {python:?}\nargs = [{script:?}, \"stdio\"]\ntool = \"lookup\"\nargument = \"customer\"\narguments = {{ region = \"west\" }}\nenv = [\"MCP_TEST_MARKS\"]\n\
         [providers.billing]\ntype = \"mcp\"\ncommand = {python:?}\nargs = [{script:?}, \"stdio\"]\ntool = \"fail\"\nargument = \"customer\"\n",
    );
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project, binding)]);
    let marks = tempfile::tempdir().unwrap();
    let marks_path = marks.path().display().to_string();
    let mut ctxd = Ctxd::start(&deployment.config, &[], &[("MCP_TEST_MARKS", &marks_path)]);
    // Ready once the child is up and lists the bound tool.
    let mut ready = false;
    for _ in 0..300 {
        let response = client().get(ctxd.url("/readyz")).send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status == 200 {
            assert_eq!(body["status"], "ready", "{body:#}\n{}", ctxd.logs());
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready, "not ready in 30 s:\n{}", ctxd.logs());
    let (status, body) = turn(
        &ctxd,
        KEY,
        json!({"project": "acme", "inputs": {"customerId": VALUE}}),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(provider(&body, "crm")["status"], "OK", "{body:#}");
    assert!(
        body["rendered"]
            .as_str()
            .unwrap()
            .contains("customer CUST-7001 in west: plan gold"),
        "{body:#}"
    );
    let billing = provider(&body, "billing");
    assert_eq!(billing["status"], "UNAVAILABLE", "{body:#}");
    assert_eq!(billing["detail"], "TOOL_ERROR", "{body:#}");
    let logs = ctxd.logs();
    assert!(logs.contains("mcp tool answered an error"), "{logs}");
    assert!(logs.contains("mcp server stderr"), "{logs}");
    assert!(logs.contains("starting with key [REDACTED"), "{logs}");
    assert!(
        !logs.contains("AKIAQ3RT7KWY2ZZW4N5P"),
        "the secret is never logged"
    );
    assert!(!logs.contains(VALUE), "the lookup value is never logged");

    // The stdio child belongs to its provider: stopping serve kills it.
    let started = std::fs::read_to_string(marks.path().join("started")).unwrap();
    let pid: u32 = started.lines().next().unwrap().trim().parse().unwrap();
    assert!(alive(pid), "the child runs while serve does");
    ctxd.terminate();
    assert!(ctxd.wait(std::time::Duration::from_secs(20)).success());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive(pid) {
        assert!(
            std::time::Instant::now() < until,
            "the child outlived serve"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_works_a_turn_and_its_handle_through_ctxd_mcp_on_stdio() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let server = logs_provider().await;
    let binding = format!(
        "revision = \"m3\"\n[providers.logs]\ntype = \"http\"\nendpoint = \"{}\"\n",
        server.url()
    );
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding)]);
    let config = deployment.config.display().to_string();
    let ctxd = assert_cmd::cargo::cargo_bin("ctxd").display().to_string();
    let report = tokio::task::spawn_blocking(move || {
        run_client(
            &python,
            &[
                "stdio", VALUE, "--", &ctxd, "mcp", "--config", &config, "--tenant", "acme",
            ],
        )
    })
    .await
    .unwrap();
    assert_scenario(&report);
}

#[test]
fn ctxd_mcp_refuses_an_unknown_tenant() {
    let deployment = Deployment::new(&[TenantSpec::new(
        "acme",
        KEY,
        project(),
        "revision = \"m4\"\n".to_owned(),
    )]);
    let output = Command::new(assert_cmd::cargo::cargo_bin("ctxd"))
        .args(["mcp", "--config"])
        .arg(&deployment.config)
        .args(["--tenant", "globex"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--tenant \"globex\": no such tenant in the config (tenants: acme)"),
        "{stderr}"
    );
}

/// One JSON-RPC message to `/mcp` over plain HTTP (stateless: no `initialize` first),
/// `body` sent as written, with the tenant's key and `headers`; the status and the body.
async fn mcp_post(ctxd: &Ctxd, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut request = client()
        .post(ctxd.url("/mcp"))
        .bearer_auth(KEY)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn tool_call(id: u32, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

/// A tool's error envelope: `result.structuredContent.error` of a tool result that is an
/// error.
fn tool_error(answer: &Value) -> &Value {
    assert_eq!(answer["result"]["isError"], true, "{answer:#}");
    &answer["result"]["structuredContent"]["error"]
}

async fn logs_deployment(revision: &str, server_extra: &str) -> (RunningProvider, Deployment) {
    let server = logs_provider().await;
    let binding = format!(
        "revision = \"{revision}\"\n[providers.logs]\ntype = \"http\"\nendpoint = \"{}\"\n",
        server.url()
    );
    let tenants = [TenantSpec::new("acme", KEY, project(), binding)];
    (server, Deployment::with_server(&tenants, server_extra))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_with_a_key_given_twice_are_refused_as_v1_turns_refuses_them() {
    let (server, deployment) = logs_deployment("m5", "").await;
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let twice_in_inputs =
        r#"{"project":"acme","inputs":{"customerId":"CUST-7001","customerId":"CUST-7002"}}"#;
    let twice_at_the_top =
        r#"{"project":"globex","project":"acme","inputs":{"customerId":"CUST-7001"}}"#;
    for (arguments, field, needle) in [
        (
            twice_in_inputs,
            json!("inputs"),
            r#"duplicate key "customerId""#,
        ),
        (twice_at_the_top, Value::Null, "duplicate field `project`"),
    ] {
        let (status, answer) = mcp_post(&ctxd, &[], &tool_call(7, "get_context", arguments)).await;
        assert_eq!(status, 200, "{answer:#}");
        let error = tool_error(&answer);
        assert_eq!(error["code"], "BAD_REQUEST", "{answer:#}");
        assert_eq!(error["field"], field, "{answer:#}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
        assert!(
            !message.contains("CUST-700"),
            "no value is repeated: {message}"
        );
        // The same words as POST /v1/turns for the same body.
        let response = client()
            .post(ctxd.url("/v1/turns"))
            .bearer_auth(KEY)
            .header("Content-Type", "application/json")
            .body(arguments.to_owned())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400);
        let http: Value = response.json().await.unwrap();
        assert_eq!(http["error"], *error, "{http:#}");
    }
    assert_eq!(server.lookups(), 0, "no turn ran on either value");

    // Every tool reads its arguments as sent.
    let (_, answer) = mcp_post(
        &ctxd,
        &[],
        &tool_call(
            8,
            "handle_search",
            &format!(
                r#"{{"handle":"h_{}","pattern":"a","pattern":"b"}}"#,
                "0".repeat(32)
            ),
        ),
    )
    .await;
    let error = tool_error(&answer);
    assert_eq!(error["code"], "BAD_REQUEST", "{answer:#}");
    assert_eq!(error["message"], "duplicate field `pattern`", "{answer:#}");

    // The same call with each key once runs the turn.
    let once = r#"{"project":"acme","inputs":{"customerId":"CUST-7001"}}"#;
    let (status, answer) = mcp_post(&ctxd, &[], &tool_call(9, "get_context", once)).await;
    assert_eq!(status, 200, "{answer:#}");
    assert_eq!(answer["result"]["isError"], false, "{answer:#}");
    assert_eq!(
        provider(&answer["result"]["structuredContent"], "logs")["status"],
        "OK"
    );
    assert_eq!(server.lookups(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_a_json_rpc_invalid_params_error() {
    let (server, deployment) = logs_deployment("m6", "").await;
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    for name in ["no_such_tool", "handle_frobnicate", "get_context2"] {
        let (status, answer) = mcp_post(&ctxd, &[], &tool_call(3, name, "{}")).await;
        assert_eq!(status, 200, "{answer:#}");
        assert_eq!(answer["id"], 3, "{answer:#}");
        assert_eq!(answer["error"]["code"], -32602, "{name}: {answer:#}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown tool"),
            "{answer:#}"
        );
        assert!(
            answer.get("result").is_none(),
            "not a tool result: {answer:#}"
        );
    }
    assert_eq!(server.lookups(), 0);
}

/// What a refused `/mcp` request must look like: 403, a JSON-RPC error naming the header.
fn assert_forbidden(status: u16, answer: &Value, header: &str) {
    assert_eq!(status, 403, "{answer:#}");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer:#}");
    assert_eq!(answer["error"]["code"], -32000, "{answer:#}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("this {header} is not allowed")),
        "{message}"
    );
}

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_answers_loopback_host_and_origin_only_by_default() {
    let (server, deployment) = logs_deployment("m7", "").await;
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let port = ctxd.base.rsplit(':').next().unwrap().to_owned();
    let call = tool_call(
        2,
        "get_context",
        r#"{"project":"acme","inputs":{"customerId":"CUST-7001"}}"#,
    );
    // A page whose name was rebound to 127.0.0.1 sends its own name as Host …
    for host in ["evil.example", &format!("evil.example:{port}"), "10.0.0.5"] {
        let (status, answer) = mcp_post(&ctxd, &[("Host", host)], &call).await;
        assert_forbidden(status, &answer, "Host");
    }
    // … and its own origin.
    for origin in ["http://evil.example", "https://evil.example:8443", "null"] {
        let (status, answer) = mcp_post(&ctxd, &[("Origin", origin)], &call).await;
        assert_forbidden(status, &answer, "Origin");
    }
    assert_eq!(server.lookups(), 0, "no refused call ran");
    // Refused before the key is looked at.
    let response = client()
        .post(ctxd.url("/mcp"))
        .header("Host", "evil.example")
        .header("Content-Type", "application/json")
        .body(TOOLS_LIST)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    // Loopback names and origins, and no Origin at all (no browser), are answered.
    for headers in [
        vec![],
        vec![("Host", format!("localhost:{port}"))],
        vec![("Origin", "http://localhost:5173".to_owned())],
        vec![("Origin", format!("http://127.0.0.1:{port}"))],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (status, answer) = mcp_post(&ctxd, &headers, TOOLS_LIST).await;
        assert_eq!(status, 200, "{headers:?}: {answer:#}");
        assert!(answer["result"]["tools"].is_array(), "{answer:#}");
    }
    let logs = ctxd.logs();
    assert!(
        !logs.contains("evil.example"),
        "a refused header is not logged:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_config_opens_mcp_to_the_hosts_and_origins_it_lists() {
    let (_server, deployment) = logs_deployment(
        "m8",
        "mcp_allowed_hosts = [\"ctxd.example.com\"]\nmcp_allowed_origins = [\"https://app.example.com\"]",
    )
    .await;
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let port = ctxd.base.rsplit(':').next().unwrap().to_owned();
    for headers in [
        vec![("Host", "ctxd.example.com")],
        vec![
            ("Host", "ctxd.example.com"),
            ("Origin", "https://app.example.com"),
        ],
    ] {
        let (status, answer) = mcp_post(&ctxd, &headers, TOOLS_LIST).await;
        assert_eq!(status, 200, "{headers:?}: {answer:#}");
    }
    // The list replaces the default: loopback is no longer answered.
    let (status, answer) =
        mcp_post(&ctxd, &[("Host", &format!("127.0.0.1:{port}"))], TOOLS_LIST).await;
    assert_forbidden(status, &answer, "Host");
    let (status, answer) = mcp_post(
        &ctxd,
        &[
            ("Host", "ctxd.example.com"),
            ("Origin", "http://localhost:3000"),
        ],
        TOOLS_LIST,
    )
    .await;
    assert_forbidden(status, &answer, "Origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctxd_mcp_on_stdio_reads_tool_arguments_as_sent() {
    use std::io::{BufRead, Write};
    let (server, deployment) = logs_deployment("m9", "").await;
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("ctxd"))
        .args(["mcp", "--config"])
        .arg(&deployment.config)
        .args(["--tenant", "acme"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(message) = serde_json::from_str(&line) {
                let _ = tx.send(message);
            }
        }
    });
    let mut answers = std::collections::HashMap::new();
    let mut answer_to = |id: u64| -> Value {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !answers.contains_key(&id) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let message: Value = rx.recv_timeout(left).expect("ctxd mcp answers");
            if let Some(got) = message["id"].as_u64() {
                answers.insert(got, message);
            }
        }
        answers.remove(&id).unwrap()
    };
    let mut send = |line: &str| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}"#,
    );
    assert!(answer_to(1)["result"]["serverInfo"].is_object());
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    send(&tool_call(
        2,
        "get_context",
        r#"{"project":"acme","inputs":{"customerId":"CUST-7001","customerId":"CUST-7002"}}"#,
    ));
    send(&tool_call(3, "no_such_tool", "{}"));
    send(&tool_call(
        4,
        "get_context",
        r#"{"project":"acme","inputs":{"customerId":"CUST-7001"}}"#,
    ));
    let twice = answer_to(2);
    let error = tool_error(&twice);
    assert_eq!(error["code"], "BAD_REQUEST", "{twice:#}");
    assert_eq!(error["field"], "inputs", "{twice:#}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(r#"duplicate key "customerId""#),
        "{twice:#}"
    );
    assert_eq!(answer_to(3)["error"]["code"], -32602);
    let once = answer_to(4);
    assert_eq!(once["result"]["isError"], false, "{once:#}");
    assert_eq!(server.lookups(), 1, "only the call with each key once ran");
    drop(stdin);
    let _ = child.wait();
}
