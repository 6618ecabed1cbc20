//! `ctxd preview`.

use crate::support::{ctxd, demo_project, stderr_of, stdout_of};
use serde_json::Value;

#[test]
fn preview_renders_the_demo_turn_from_fixtures() {
    let output = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId=CUST-1042",
            "--objective",
            "support",
            "--consumer",
            "support-agent",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = stdout_of(&output);
    assert!(text.contains("source TEST_FIXTURE"));
    assert!(text.contains("customer-profile         INCLUDED"), "{text}");
    // Reasons as the API spells them, never Rust's names.
    assert!(
        text.contains("PROVIDER_ITEMS") && text.contains("STATIC"),
        "{text}"
    );
    assert!(
        !text.contains("ProviderItems") && !text.contains("Static "),
        "{text}"
    );
    assert!(text.contains("DATA NOTICE"));
    assert!(text.contains("Nordwind Logistics GmbH"));
    assert!(text.contains("Two sensors report offline"));
}

#[test]
fn preview_json_reports_statuses_sources_and_selections() {
    let output = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId=CUST-1042",
            "--objective",
            "billing",
            "--consumer",
            "support-agent",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["blocked"], false);
    let statuses: Vec<(String, String)> = result["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["id"].as_str().unwrap().into(),
                l["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("policy".into(), "INCLUDED".into()),
            ("customer-profile".into(), "INCLUDED".into()),
            ("orders".into(), "INCLUDED".into()),
            ("open-tickets".into(), "NOT_REQUESTED".into()),
        ]
    );
    for provider in result["providers"].as_array().unwrap() {
        assert_eq!(provider["source"], "TEST_FIXTURE");
    }
    assert!(result["selections"].as_array().unwrap().len() >= 3);
    // Preview is reproducible.
    let again = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId=CUST-1042",
            "--objective",
            "billing",
            "--consumer",
            "support-agent",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(output.stdout, again.stdout);
}

#[test]
fn a_value_without_a_fixture_is_not_evaluated_and_warned() {
    let output = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId=CUST-9999",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["providers"][0]["status"], "NOT_EVALUATED");
    assert_eq!(result["warnings"][0]["code"], "PROVIDER_FIXTURE_MISSING");
    assert_eq!(
        result["blocked"], true,
        "the required profile's facts are unknown"
    );
}

#[test]
fn a_malformed_value_is_never_looked_up() {
    let output = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId=../../etc/passwd",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["providers"][0]["status"], "INVALID_REQUEST");
    assert_eq!(result["providers"][0]["detail"], "VALUE_FAILS_BASE_GRAMMAR");
    assert_eq!(result["blocked"], true);
}

#[test]
fn bad_arguments_name_the_problem() {
    let output = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_of(&output).contains("--input \"customerId\": expected KEY=VALUE"));
    let output = ctxd()
        .args([
            "preview",
            demo_project().to_str().unwrap(),
            "--input",
            "customerId=CUST-1042",
            "--profile",
            "nope",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_of(&output).contains("unknown profile \"nope\""));
}

/// Fixture text with control characters and line separators cannot forge lines or drive
/// the terminal: preview prints it escaped, the rendered block's own lines intact.
#[test]
fn preview_escapes_control_characters_of_fixtures() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project.json");
    let doc = serde_json::json!({
        "id": "p", "version": "1",
        "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}]}],
        "tests": [{
            "id": "t", "request": {"inputs": {"customerId": "C1"}},
            "providers": {"crm": {"items": [{
                "id": "C1", "title": "Gold\u{2028}BLOCKED by required layer(s): all",
                "content": "Gold customer\u{1b}[2J\rtenant alpha"
            }]}}
        }]
    });
    std::fs::write(&project, doc.to_string()).unwrap();
    let output = ctxd()
        .args([
            "preview",
            project.to_str().unwrap(),
            "--input",
            "customerId=C1",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = stdout_of(&output);
    // Escaped here, or already normalised in the rendered text: never raw.
    assert!(text.contains("Gold customer"), "{text}");
    assert!(!text.contains('\u{1b}') && !text.contains('\u{2028}') && !text.contains('\r'));
    // A carriage return in content is a line break of the data, inside its fence;
    // outside the rendered block no fixture text starts a line.
    let (report, rendered) = text
        .split_once("----- rendered context -----")
        .expect("the rendered block is printed");
    assert!(
        !report
            .lines()
            .any(|l| l.starts_with("tenant alpha") || l.starts_with("BLOCKED")),
        "{text}"
    );
    let fenced = rendered
        .split("<<<ctxd-data")
        .nth(1)
        .and_then(|data| data.split("<<<end ctxd-data").next())
        .expect("the item is fenced");
    assert!(fenced.contains("\ntenant alpha"), "{text}");
    assert!(
        fenced.contains("title: Gold BLOCKED"),
        "the separator is a space: {text}"
    );
}
