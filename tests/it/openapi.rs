//! The OpenAPI document at `GET /openapi.json`: OpenAPI 3.1, byte for byte
//! `docs/openapi.json` and what `ctxd openapi` writes, and a complete list of the routes
//! — every route registered in `src/api/` is a path of the document, every documented
//! operation is answered by a route, and every other method on a documented path is
//! `405` with the path's methods in `Allow`.

use crate::readme_demo::demo_binding;
use crate::server::{Ctxd, Deployment, TenantSpec, client};
use crate::support::{ctxd, demo_project, root, stdout_of};
use serde_json::Value;
use std::collections::BTreeSet;

const KEY: &str = "openapi-demo-key";

fn demo_server() -> (Deployment, Ctxd) {
    let project = std::fs::read_to_string(demo_project()).unwrap();
    let deployment = Deployment::new(&[TenantSpec::new("demo", KEY, project, demo_binding())]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    (deployment, ctxd)
}

fn kept_document() -> String {
    std::fs::read_to_string(root().join("docs/openapi.json")).unwrap()
}

/// `/v1/traces/{turnId}` → `/v1/traces/{}`: paths compared whatever their parameters
/// are called.
fn shape(path: &str) -> String {
    regex::Regex::new(r"\{[^}]*\}")
        .unwrap()
        .replace_all(path, "{}")
        .into_owned()
}

/// Every path `src/api/*.rs` registers with `.route("…", …)`.
fn registered_paths() -> BTreeSet<String> {
    let route = regex::Regex::new(r#"\.route\(\s*"([^"]+)""#).unwrap();
    let mut paths = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("src/api")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path).unwrap();
            for found in route.captures_iter(&source) {
                paths.insert(shape(&found[1]));
            }
        }
    }
    paths
}

/// A concrete URL path for a documented one: a well-formed handle id, a turn id, a file.
fn example_path(template: &str) -> String {
    template
        .replace("{id}", "h_0123456789abcdef0123456789abcdef")
        .replace("{turnId}", "01a22eeb-3cc1-77bc-a930-2a5c83ce9d30")
        .replace("{file}", "app.js")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_openapi_3_1_and_the_one_kept_in_docs() {
    let (_deployment, ctxd) = demo_server();
    // No key: the document is public, like the page.
    let response = client()
        .get(ctxd.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let served = response.text().await.unwrap();
    let document: Value = serde_json::from_str(&served).expect("valid JSON");
    let version = document["openapi"].as_str().unwrap();
    assert!(version.starts_with("3.1."), "{version}");
    assert_eq!(
        served,
        kept_document(),
        "docs/openapi.json is stale: regenerate it with `ctxd openapi --output docs/openapi.json`"
    );
    let written = ctxd_openapi();
    assert_eq!(written, served, "ctxd openapi writes what is served");
    let scheme = &document["components"]["securitySchemes"]["tenantKey"];
    assert_eq!(
        (&scheme["type"], &scheme["scheme"]),
        (&"http".into(), &"bearer".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_transports_refusals_say_their_content_type() {
    let (_deployment, ctxd) = demo_server();
    let document: Value = serde_json::from_str(&kept_document()).unwrap();
    let documented = &document["paths"]["/mcp"]["post"]["responses"]["406"]["content"];
    assert!(documented.get("text/plain").is_some(), "{documented}");
    // No Accept header: the MCP library refuses it, in plain text.
    let response = client()
        .post(ctxd.url("/mcp"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 406);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/plain; charset=utf-8"
    );
}

fn ctxd_openapi() -> String {
    let output = ctxd().arg("openapi").output().unwrap();
    assert!(output.status.success());
    stdout_of(&output)
}

#[test]
fn every_registered_route_is_a_path_of_the_document() {
    let document: Value = serde_json::from_str(&kept_document()).unwrap();
    let documented: BTreeSet<String> = document["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(|path| shape(path))
        .collect();
    let registered = registered_paths();
    assert!(registered.contains("/v1/turns"), "{registered:?}");
    let missing: Vec<_> = registered.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "routes missing from the document: {missing:?}"
    );
    let unserved: Vec<_> = documented.difference(&registered).collect();
    assert!(
        unserved.is_empty(),
        "documented paths no route serves: {unserved:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_method_is_served_and_every_other_is_405_with_allow() {
    let (_deployment, ctxd) = demo_server();
    // Each answer as it is: `/ui`'s redirect is what is documented there.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let document: Value = serde_json::from_str(&kept_document()).unwrap();
    let all = ["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"];
    for (template, item) in document["paths"].as_object().unwrap() {
        let documented: Vec<String> = item
            .as_object()
            .unwrap()
            .keys()
            .filter(|key| all.contains(&key.to_ascii_uppercase().as_str()))
            .map(|key| key.to_ascii_uppercase())
            .collect();
        let url = ctxd.url(&example_path(template));
        for method in all {
            let response = http
                .request(method.parse().unwrap(), &url)
                .bearer_auth(KEY)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(if method == "HEAD" || method == "GET" {
                    ""
                } else {
                    "{}"
                })
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            if documented.iter().any(|m| m == method) {
                assert_ne!(status, 405, "{method} {template} is documented");
                let status_listed = item[method.to_ascii_lowercase()]["responses"]
                    .get(status.to_string())
                    .is_some();
                assert!(
                    status_listed,
                    "{method} {template}: {status} is not documented"
                );
            } else {
                assert_eq!(status, 405, "{method} {template} is not documented");
                let allow = response.headers()["allow"].to_str().unwrap().to_owned();
                assert_eq!(allow, documented.join(", "), "{method} {template}");
                if method != "HEAD" {
                    let body: Value = response.json().await.unwrap_or_default();
                    let code = &body["error"]["code"];
                    // rmcp answers its own 405 on /mcp in plain text.
                    assert!(
                        code == "METHOD_NOT_ALLOWED" || template == "/mcp",
                        "{method} {template}: {body}"
                    );
                }
            }
        }
    }
}
