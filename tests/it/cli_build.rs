//! `ctxd build`.

use crate::support::{ctxd, demo_project, stderr_of, stdout_of, write};
use serde_json::Value;

#[test]
fn build_writes_a_digested_build_that_loads_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("build.json");
    let output = ctxd()
        .args([
            "build",
            demo_project().to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let build: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(build["format"], "ctxd.build.v1");
    let digest = build["digest"].as_str().unwrap();
    assert!(digest.starts_with("sha256:") && digest.len() == 71);
    let kinds: Vec<&str> = build["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "STATIC_LAYER",
            "RUNTIME_PROVIDER",
            "RUNTIME_PROVIDER",
            "RUNTIME_PROVIDER"
        ]
    );
    assert_eq!(build["entries"][1]["pinned"], false);
    assert_eq!(build["entries"][0]["pinned"], true);

    // The Build runs its tests like the Project, with the same digest.
    let output = ctxd()
        .args(["test", out.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["buildDigest"], digest);

    // Building the Build reproduces it byte for byte.
    let output = ctxd()
        .args(["build", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(stdout_of(&output), std::fs::read_to_string(&out).unwrap());
}

#[test]
fn reformatting_a_project_keeps_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    let original: Value =
        serde_json::from_str(&std::fs::read_to_string(demo_project()).unwrap()).unwrap();
    let compact = dir.path().join("compact.json");
    write(&compact, &original.to_string());
    let digest_of = |path: &std::path::Path| {
        let output = ctxd()
            .args(["build", path.to_str().unwrap()])
            .output()
            .unwrap();
        let build: Value = serde_json::from_slice(&output.stdout).unwrap();
        build["digest"].as_str().unwrap().to_owned()
    };
    assert_eq!(digest_of(&compact), digest_of(&demo_project()));
}

#[test]
fn a_refused_project_fails_with_every_path_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project.json");
    write(
        &project,
        r#"{"id": "p", "version": "1",
            "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"},
                           "endpoint": "https://crm.internal/context"}],
            "layers": [{"id": "l", "name": "L", "bindings": [{"provider": "crm", "secret": "x"}]}]}"#,
    );
    let out = dir.path().join("build.json");
    let output = ctxd()
        .args([
            "build",
            project.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains("$.providers[0].endpoint: `endpoint` belongs in a Deployment Binding"),
        "{stderr}"
    );
    assert!(
        stderr.contains("$.layers[0].bindings[0].secret"),
        "{stderr}"
    );
    assert!(stderr.contains("2 problems"), "{stderr}");
    assert!(!out.exists(), "nothing half-written");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().count() == 1,
        "no temporary file left"
    );
}
