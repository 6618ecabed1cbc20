//! The README's demo as a new user runs it: the shipped Project and Binding served, the
//! rendered customer profile exactly as the README shows it, and `ctxd replay` exact for a
//! turn that reads only the provider whose content the demo binding retains.

use crate::server::{Ctxd, Deployment, TenantSpec, turn};
use crate::support::{ctxd, demo_project, root, stderr_of, stdout_of};
use serde_json::{Value, json};
use std::time::Duration;

const KEY: &str = "readme-demo-key";

/// The demo Binding as shipped, with its database path made absolute so it can be
/// served from a temp dir.
pub fn demo_binding() -> String {
    let text = std::fs::read_to_string(root().join("config/bindings/demo.toml")).unwrap();
    let database = root().join("fixtures/demo/data/support.db");
    let binding = text.replace(
        "\"../../fixtures/demo/data/support.db\"",
        &format!("{:?}", database.to_str().unwrap()),
    );
    assert_ne!(binding, text, "the demo binding names its database");
    binding
}

fn request(objective: Option<&str>) -> Value {
    let mut body = json!({"project": "support", "inputs": {"customerId": "CUST-1042"}});
    if let Some(objective) = objective {
        body["objective"] = json!(objective);
        body["consumer"] = json!("support-agent");
    }
    body
}

fn replay(config: &std::path::Path, turn_id: &str) -> std::process::Output {
    ctxd()
        .args(["replay", turn_id, "--input", "customerId=CUST-1042"])
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_demo_renders_what_it_shows_and_replays_exactly() {
    let project = std::fs::read_to_string(demo_project()).unwrap();
    let deployment = Deployment::new(&[TenantSpec::new("demo", KEY, project, demo_binding())]);
    let mut ctxd = Ctxd::start(&deployment.config, &[], &[]);

    let (status, full) = turn(&ctxd, KEY, request(Some("support"))).await;
    assert_eq!(status, 200, "{full:#}");
    let rendered = full["rendered"].as_str().unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let fence = rendered
        .split("## Customer profile [layer customer-profile]\n")
        .nth(1)
        .and_then(|rest| rest.split("<<<end ctxd-data").next())
        .expect("a customer profile fence");
    for line in fence.lines().skip(1).filter(|line| !line.is_empty()) {
        assert!(
            readme.contains(line),
            "the README shows the demo's line {line:?}"
        );
    }

    let (status, profile_only) = turn(&ctxd, KEY, request(None)).await;
    assert_eq!(status, 200, "{profile_only:#}");
    assert_eq!(profile_only["providers"].as_array().unwrap().len(), 1);

    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());

    let exact = replay(&deployment.config, profile_only["turnId"].as_str().unwrap());
    let text = stdout_of(&exact);
    assert_eq!(exact.status.code(), Some(0), "{text}{}", stderr_of(&exact));
    assert!(text.contains("exact: yes"), "{text}");
    assert!(text.contains("rendered digest matches: yes"), "{text}");

    // Orders and tickets keep digests only: the full turn cannot be reproduced.
    let not_exact = replay(&deployment.config, full["turnId"].as_str().unwrap());
    assert_eq!(
        not_exact.status.code(),
        Some(1),
        "{}",
        stdout_of(&not_exact)
    );
    assert!(stdout_of(&not_exact).contains("exact: no"));
}
