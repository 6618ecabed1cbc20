//! What ctxd writes where a user reads it: a closed standard output ends a command
//! quietly with its own exit code; logs carry no colour codes outside a terminal;
//! `--log-format json` (or `CTXD_LOG_FORMAT=json`) gives one JSON object per line; a
//! provider that becomes unready is a warning.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec};
use crate::support::{demo_project, root, stderr_of, write};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "logs-test-key";
const SECRET: &str = "logs-bearer-2f9e41c07a";

/// Runs `ctxd ARGS…` from the repository root with standard output a pipe whose reader
/// is already gone, as under `ctxd … | head` once `head` has exited.
fn with_stdout_closed(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(assert_cmd::cargo::cargo_bin("ctxd"))
        .current_dir(root())
        .args(args)
        .env_remove("CTXD_DIGEST_KEY")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_each_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("traces.db");
    let key = ctxd::digest::DigestKey::from_bytes(vec![7u8; 32]).unwrap();
    drop(ctxd::trace::store::TraceStore::open(&store, &key).unwrap());
    let project = demo_project();
    let project = project.to_str().unwrap();
    let store = store.to_str().unwrap();
    let commands: &[&[&str]] = &[
        &["test", project],
        &["test", project, "--format", "json"],
        &["test", project, "--format", "junit"],
        &["build", project],
        &[
            "preview",
            project,
            "--input",
            "customerId=CUST-1042",
            "--objective",
            "support",
        ],
        &["validate"],
        &["doctor"],
        &["traces", "search", "--store", store],
    ];
    for args in commands {
        let output = with_stdout_closed(args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "ctxd {args:?}: {}",
            stderr_of(&output)
        );
        assert_eq!(
            stderr_of(&output),
            "",
            "ctxd {args:?} says nothing on a closed stdout"
        );
    }
}

#[test]
fn a_closed_stdout_keeps_the_commands_own_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project.json");
    write(
        &project,
        r#"{"id": "p", "version": "1",
            "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
            "layers": [{"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}]}],
            "tests": [{"id": "wrong", "request": {"inputs": {"customerId": "C1"}},
                       "providers": {"crm": {"items": [{"id": "C1", "content": "Gold"}]}},
                       "expect": {"contains": ["Silver"]}}]}"#,
    );
    let output = with_stdout_closed(&["test", project.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
    assert_eq!(stderr_of(&output), "");
}

fn deployment(server: &RunningProvider) -> Deployment {
    let project = json!({
        "id": "logs", "version": "1.0.0",
        "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "customer", "name": "Customer", "bindings": [{"provider": "crm"}]}]
    })
    .to_string();
    let binding = format!(
        "revision = \"logs-1\"\n\n[providers.crm]\ntype = \"http\"\nendpoint = \"{}\"\nsecret_env = \"CRM_TOKEN\"\n",
        server.url()
    );
    Deployment::new(&[TenantSpec::new("logs", KEY, project, binding)])
}

/// A provider whose readiness probe fails: ctxd finds it unready at start.
async fn unready_provider() -> RunningProvider {
    ProviderServer::new()
        .describe_behaviour(Behaviour::Status(503))
        .start()
        .await
}

/// Waits until the logs hold `needle`.
fn logs_with(ctxd: &Ctxd, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let logs = ctxd.logs();
        if logs.contains(needle) {
            return logs;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no {needle:?} in the logs:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_in_a_pipe_have_no_colour_codes() {
    let server = unready_provider().await;
    let deployment = deployment(&server);
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("ctxd"))
        .current_dir(root())
        .args(["serve", "--config", deployment.config.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .env("CRM_TOKEN", SECRET)
        .env_remove("NO_COLOR")
        .env_remove("CTXD_LOG_FORMAT")
        .env_remove("CTXD_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ctxd listening on "), "{line}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let logs = stderr_of(&output);
    assert!(logs.contains("ctxd serving"), "{logs}");
    assert!(
        !output.stderr.contains(&0x1b),
        "no escape codes in a pipe:\n{logs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unready_provider_is_a_warning() {
    let server = unready_provider().await;
    let deployment = deployment(&server);
    let ctxd = Ctxd::start(&deployment.config, &[], &[("CRM_TOKEN", SECRET)]);
    let logs = logs_with(&ctxd, "provider readiness changed");
    let line = logs
        .lines()
        .find(|line| line.contains("provider readiness changed"))
        .unwrap();
    assert!(
        line.contains("WARN") && line.contains("ready=false") && line.contains("HTTP_503"),
        "{line}"
    );
    assert!(
        !logs.contains('\u{1b}'),
        "no escape codes in a file:\n{logs:?}"
    );
}

/// Every line of `logs` as JSON.
fn json_lines(logs: &str) -> Vec<Value> {
    logs.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_one_object_per_line() {
    let server = unready_provider().await;
    let deployment = deployment(&server);
    for (extra, env) in [
        (&["--log-format", "json"][..], &[("CRM_TOKEN", SECRET)][..]),
        (
            &[][..],
            &[("CRM_TOKEN", SECRET), ("CTXD_LOG_FORMAT", "json")][..],
        ),
    ] {
        let ctxd = Ctxd::start(&deployment.config, extra, env);
        let lines = json_lines(&logs_with(&ctxd, "provider readiness changed"));
        let unready = lines
            .iter()
            .find(|line| line["fields"]["message"] == "provider readiness changed")
            .unwrap_or_else(|| panic!("{lines:#?}"));
        assert_eq!(unready["level"], "WARN");
        assert_eq!(unready["fields"]["ready"], false);
        assert_eq!(unready["fields"]["provider"], "crm");
        assert!(
            lines
                .iter()
                .any(|line| line["fields"]["message"] == "ctxd serving"),
            "{lines:#?}"
        );
    }
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_option() {
    let output = Command::new(assert_cmd::cargo::cargo_bin("ctxd"))
        .current_dir(root())
        .args(["serve", "--log-format", "xml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains("--log-format") && stderr.contains("xml"),
        "{stderr}"
    );
}
