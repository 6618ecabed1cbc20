//! The worked example of docs/REST_PROVIDERS.md, as a new user runs it: its Context
//! Tests pass on their fixtures, `validate --explain` shows the expanded preset, and
//! `ctxd serve` with the example's files (only the endpoint pointed at a fake GitHub)
//! puts the issue and its labels into a support turn.

use crate::provider_server::{Behaviour, ProviderServer};
use crate::rest_provider::origin;
use crate::server::{Ctxd, layer_status, provider, turn};
use crate::support::{ctxd, root, stderr_of, stdout_of};
use serde_json::json;
use std::path::Path;

const EXAMPLE: &str = "docs/examples/github-support";
const API_KEY: &str = "support-example-key-0d61";
const TOKEN: &str = "gh-example-token-77f2";

/// The example's files in a fresh folder (serve writes its trace store next to them).
fn copy_example(to: &Path) {
    for file in ["ctxd.toml", "binding.toml", "project.json"] {
        std::fs::copy(root().join(EXAMPLE).join(file), to.join(file)).unwrap();
    }
}

#[test]
fn the_example_context_tests_pass_on_their_fixtures() {
    let output = ctxd()
        .args(["test", &format!("{EXAMPLE}/project.json")])
        .output()
        .unwrap();
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    assert!(
        stdout.contains("3 tests: 3 passed, 0 failed, 0 unknown"),
        "{stdout}"
    );
}

#[test]
fn validate_explains_the_example_preset() {
    let folder = tempfile::tempdir().unwrap();
    copy_example(folder.path());
    let config = folder.path().join("ctxd.toml");
    let output = ctxd()
        .args(["validate", "--config", config.to_str().unwrap()])
        .args(["--explain", "github-issue"])
        .env("SUPPORT_API_KEY", API_KEY)
        .env("GITHUB_TOKEN", TOKEN)
        .env_remove("CTXD_DIGEST_KEY")
        .output()
        .unwrap();
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}{}", stderr_of(&output));
    for needle in [
        "ok: 1 tenant, 1 project, 1 provider",
        "endpoint = \"https://api.github.com/\"",
        "path = \"/repos/acme/widgets/issues/{value}\"",
        "labels = \"$.labels[*].name\"",
    ] {
        assert!(stdout.contains(needle), "{needle} in:\n{stdout}");
    }
    assert!(!stdout.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_puts_the_issue_and_its_labels_into_a_support_turn() {
    let github = ProviderServer::new()
        .respond_with(|request, _| {
            if request.path == "/repos/acme/widgets/issues/1347" {
                Behaviour::Json(
                    200,
                    json!({
                        "number": 1347, "state": "open",
                        "title": "Export to CSV drops the last row",
                        "body": "Exporting any report with more than 100 rows loses the last row.",
                        "user": {"login": "octocat", "id": 1},
                        "labels": [
                            {"id": 1, "name": "bug", "color": "d73a4a", "default": true},
                            {"id": 2, "name": "export", "color": "0e8a16", "default": false}
                        ],
                        "html_url": "https://github.com/acme/widgets/issues/1347",
                        "updated_at": "2026-11-28T16:40:00Z"
                    }),
                )
            } else if request.path == "/repos/acme/widgets" {
                Behaviour::Json(200, json!({"full_name": "acme/widgets"}))
            } else {
                Behaviour::Json(404, json!({"message": "Not Found"}))
            }
        })
        .start()
        .await;
    let folder = tempfile::tempdir().unwrap();
    copy_example(folder.path());
    let binding = folder.path().join("binding.toml");
    let text = std::fs::read_to_string(&binding).unwrap().replace(
        "[providers.github-issue]\n",
        &format!(
            "[providers.github-issue]\nendpoint = \"{}\"\n",
            origin(&github)
        ),
    );
    std::fs::write(&binding, text).unwrap();

    let ctxd = Ctxd::start(
        &folder.path().join("ctxd.toml"),
        &[],
        &[("SUPPORT_API_KEY", API_KEY), ("GITHUB_TOKEN", TOKEN)],
    );
    let (status, body) = turn(
        &ctxd,
        API_KEY,
        json!({
            "project": "github-support", "objective": "support", "consumer": "support-agent",
            "inputs": {"issueNumber": "1347"}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["blocked"], false, "{body:#}");
    assert_eq!(provider(&body, "github-issue")["status"], "OK");
    assert_eq!(layer_status(&body, "issue"), "INCLUDED");
    let rendered = body["rendered"].as_str().unwrap();
    for needle in [
        "Export to CSV drops the last row",
        "\"labels\":[\"bug\",\"export\"]",
        "Never promise a fix date",
    ] {
        assert!(rendered.contains(needle), "{needle} in:\n{rendered}");
    }
    let lookup = github
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/1347"))
        .expect("the issue was read");
    assert_eq!(
        lookup.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(lookup.header("accept"), Some("application/vnd.github+json"));
}
