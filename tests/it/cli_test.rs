//! `ctxd test`.

use crate::support::{ctxd, demo_project, stdout_of, write};
use serde_json::Value;

#[test]
fn the_demo_project_passes_and_is_deterministic() {
    let output = ctxd()
        .args(["test", demo_project().to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stdout_of(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let tests = report["tests"].as_array().unwrap();
    assert!(tests.len() >= 12);
    for test in tests {
        assert_eq!(test["outcome"], "PASSED", "{test}");
        assert_eq!(test["deterministic"], true, "{test}");
        assert_eq!(test["evaluation"]["providers"], "FIXTURE");
    }
    // The demo covers every layer status and a blocked turn.
    let mut seen: Vec<String> = tests
        .iter()
        .flat_map(|t| t["layers"].as_object().unwrap().values())
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        [
            "EMPTY",
            "EXCLUDED",
            "INCLUDED",
            "NOT_REQUESTED",
            "UNAVAILABLE",
            "UNKNOWN"
        ]
    );
    assert!(tests.iter().any(|t| t["blocked"] == true));
}

#[test]
fn human_output_lists_each_test() {
    let output = ctxd()
        .args(["test", demo_project().to_str().unwrap()])
        .output()
        .unwrap();
    let text = stdout_of(&output);
    assert!(
        text.contains("  PASSED  full-support-turn  (deterministic)"),
        "{text}"
    );
    assert!(
        !text.contains("PASS "),
        "one spelling: PASSED, as the docs say"
    );
    assert!(text.contains("0 failed, 0 unknown"), "{text}");
}

fn project_with_tests(tests: &str) -> String {
    format!(
        r#"{{"id": "p", "version": "1",
            "providers": [{{"id": "crm", "name": "CRM", "lookup": {{"input": "customerId"}}}},
                          {{"id": "orders", "name": "Orders", "lookup": {{"input": "customerId"}}}}],
            "layers": [{{"id": "profile", "name": "Profile", "bindings": [{{"provider": "crm"}}], "required": true}},
                       {{"id": "history", "name": "History", "bindings": [{{"provider": "orders"}}]}}],
            "tests": {tests}}}"#
    )
}

#[test]
fn failing_expectations_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project.json");
    write(
        &project,
        &project_with_tests(
            r#"[{"id": "wrong", "request": {"inputs": {"customerId": "C1"}},
                 "providers": {"crm": {"items": [{"id": "C1", "content": "Gold customer"}]},
                               "orders": {"status": "TIMEOUT"}},
                 "expect": {"blocked": true, "layers": {"history": "INCLUDED"},
                            "providers": {"orders": "OK"},
                            "contains": ["Silver customer"], "notContains": ["Gold"]}}]"#,
        ),
    );
    let output = ctxd()
        .args(["test", project.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let text = stdout_of(&output);
    for expected in [
        "FAILED  wrong",
        "blocked: expected true, got false",
        "layer history: expected INCLUDED, got UNAVAILABLE (PROVIDER_FAILED)",
        "provider orders: expected OK, got TIMEOUT",
        "rendered text does not contain \"Silver customer\"",
        "rendered text contains \"Gold\"",
        "1 tests: 0 passed, 1 failed, 0 unknown",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

#[test]
fn a_missing_fixture_makes_the_test_unknown_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project.json");
    write(
        &project,
        &project_with_tests(
            r#"[{"id": "partial", "request": {"inputs": {"customerId": "C1"}},
                 "providers": {"crm": {"items": [{"id": "C1", "content": "Gold customer"}]}}}]"#,
        ),
    );
    let output = ctxd()
        .args(["test", project.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "UNKNOWN is not a failure by default"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let test = &report["tests"][0];
    assert_eq!(test["outcome"], "UNKNOWN");
    assert_eq!(test["providers"]["orders"], "NOT_EVALUATED");
    assert_eq!(test["warnings"][0]["code"], "PROVIDER_FIXTURE_MISSING");
    assert_eq!(test["warnings"][0]["provider"], "orders");

    let output = ctxd()
        .args(["test", project.to_str().unwrap(), "--strict"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "--strict fails on UNKNOWN");

    let output = ctxd()
        .args(["test", project.to_str().unwrap(), "--format", "junit"])
        .output()
        .unwrap();
    let xml = stdout_of(&output);
    assert!(
        xml.contains("<testsuite name=\"p\" tests=\"1\" failures=\"0\" skipped=\"1\">"),
        "{xml}"
    );
    assert!(
        xml.contains("<skipped message=\"UNKNOWN: PROVIDER_FIXTURE_MISSING (orders)\"/>"),
        "{xml}"
    );
}

#[test]
fn junit_reports_failures() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project.json");
    write(
        &project,
        &project_with_tests(
            r#"[{"id": "ok", "request": {"inputs": {"customerId": "C1"}},
                 "providers": {"crm": {"items": []}, "orders": {"items": []}},
                 "expect": {"layers": {"profile": "EMPTY"}}},
                {"id": "bad <one>", "request": {"inputs": {"customerId": "C1"}},
                 "providers": {"crm": {"items": []}, "orders": {"items": []}},
                 "expect": {"contains": ["<b>"]}}]"#,
        ),
    );
    let output = ctxd()
        .args(["test", project.to_str().unwrap(), "--format", "junit"])
        .output()
        .unwrap();
    // The invalid test id is refused before anything runs.
    assert_eq!(output.status.code(), Some(2));
    write(
        &project,
        &std::fs::read_to_string(&project)
            .unwrap()
            .replace("bad <one>", "bad-one"),
    );
    let output = ctxd()
        .args(["test", project.to_str().unwrap(), "--format", "junit"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let xml = stdout_of(&output);
    assert!(
        xml.contains("<testcase classname=\"p\" name=\"ok\"/>"),
        "{xml}"
    );
    assert!(
        xml.contains("<failure message=\"rendered text does not contain &quot;&lt;b&gt;&quot;\">"),
        "{xml}"
    );
}
