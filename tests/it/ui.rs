//! The trace explorer at `GET /ui/`: its headers (a strict Content-Security-Policy,
//! content types, revalidation), that nothing it serves points at another origin, and
//! the page itself in headless Chromium (tests/ui/explorer.py, Playwright) against a
//! `ctxd serve` that has answered the demo's turns.

use crate::handles;
use crate::readme_demo::demo_binding;
use crate::server::{Ctxd, Deployment, TenantSpec, client, trace_of, turn};
use crate::support::{demo_project, root};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const KEY: &str = "ui-demo-key";

fn demo_server() -> (Deployment, Ctxd) {
    let project = std::fs::read_to_string(demo_project()).unwrap();
    let deployment = Deployment::new(&[TenantSpec::new("demo", KEY, project, demo_binding())]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    (deployment, ctxd)
}

const FILES: [(&str, &str); 6] = [
    ("/ui/", "text/html; charset=utf-8"),
    ("/ui/style.css", "text/css; charset=utf-8"),
    ("/ui/app.js", "text/javascript; charset=utf-8"),
    ("/ui/api.js", "text/javascript; charset=utf-8"),
    ("/ui/dom.js", "text/javascript; charset=utf-8"),
    ("/ui/views.js", "text/javascript; charset=utf-8"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_is_served_with_a_strict_policy_and_nothing_from_elsewhere() {
    let (_deployment, ctxd) = demo_server();
    let http = client();
    let index = http.get(ctxd.url("/ui/")).send().await.unwrap();
    let index_text = index.text().await.unwrap();
    for (path, content_type) in FILES {
        // No key: the page is public; its data is not.
        let response = http.get(ctxd.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        let header = |name: &str| {
            headers
                .get(name)
                .unwrap_or_else(|| panic!("{path} has no {name}"))
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(header("content-type"), content_type, "{path}");
        let policy = header("content-security-policy");
        for directive in [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert!(!policy.contains("unsafe"), "{path}: {policy}");
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert_eq!(header("x-frame-options"), "DENY");
        assert_eq!(header("referrer-policy"), "no-referrer");
        assert_eq!(header("cache-control"), "no-cache");
        let tag = header("etag");

        let body = response.text().await.unwrap();
        let lower = body.to_ascii_lowercase();
        for external in [
            "http://",
            "https://",
            "src=\"//",
            "href=\"//",
            "url(",
            "@import",
        ] {
            assert!(!lower.contains(external), "{path} contains {external:?}");
        }
        // Revalidation: the same tag is a 304 without a body, with the same policy.
        let again = http
            .get(ctxd.url(path))
            .header("If-None-Match", &tag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
        assert!(again.headers().contains_key("content-security-policy"));
        assert!(again.text().await.unwrap().is_empty());

        let head = http.head(ctxd.url(path)).send().await.unwrap();
        assert_eq!(head.status(), 200, "HEAD {path}");
    }
    assert!(index_text.contains("<script type=\"module\" src=\"app.js\"></script>"));
    assert!(index_text.contains("<link rel=\"stylesheet\" href=\"style.css\">"));

    let bare = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(ctxd.url("/ui"))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 308);
    assert_eq!(bare.headers()["location"], "/ui/");

    let missing = http.get(ctxd.url("/ui/other.js")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let envelope: Value = missing.json().await.unwrap();
    assert_eq!(envelope["error"]["code"], "NOT_FOUND");
    let escaping = http
        .get(ctxd.url("/ui/..%2FCargo.toml"))
        .send()
        .await
        .unwrap();
    assert_eq!(escaping.status(), 404);

    // The page gives no way around the key: the API it calls still asks for one.
    let traces = http.get(ctxd.url("/v1/traces")).send().await.unwrap();
    assert_eq!(traces.status(), 401);
}

/// Where the browser check's screenshots go: `target/ui-screenshots/`.
fn screenshot_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                root().join(dir)
            }
        })
        .unwrap_or_else(|| root().join("target"))
        .join("ui-screenshots")
}

/// Runs tests/ui/explorer.py against `ctxd` with `args`, its screenshots into `shots`.
async fn run_explorer_check(ctxd: &Ctxd, chromium: &Path, shots: &Path, args: &[&str]) {
    let _ = std::fs::remove_dir_all(shots);
    let mut check = Command::new("python3");
    check
        .arg(root().join("tests/ui/explorer.py"))
        .args(["--base", &ctxd.base])
        .args(args)
        .arg("--screenshots")
        .arg(shots)
        .arg("--chromium")
        .arg(chromium);
    let output = tokio::task::spawn_blocking(move || check.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser check failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        ctxd.logs()
    );
}

/// The browser, or `None` (and why, on standard error) when the check is skipped:
/// without Chromium or Playwright outside CI. Under `CI=true` a missing one fails.
fn browser_or_skip(check: &str) -> Option<PathBuf> {
    match browser() {
        Ok(chromium) => Some(chromium),
        Err(missing) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED the trace explorer's {check}: {missing}; under CI=true it runs");
            None
        }
        Err(missing) => panic!("the trace explorer's {check} needs a browser: {missing}"),
    }
}

/// Chromium and Python's Playwright, or why not.
fn browser() -> Result<PathBuf, String> {
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return Err(format!(
            "no Chromium at {} (apt-get install chromium, or set CHROMIUM)",
            chromium.display()
        ));
    }
    let playwright = Command::new("python3")
        .args(["-c", "import playwright.sync_api"])
        .output();
    match playwright {
        Ok(output) if output.status.success() => Ok(chromium),
        _ => Err("python3 cannot import playwright (python3 -m pip install playwright)".to_owned()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_shows_the_demo_turns_in_a_real_browser() {
    let chromium = match browser() {
        Ok(chromium) => chromium,
        Err(missing) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!(
                "SKIPPED the trace explorer's browser check: {missing}; under CI=true it runs"
            );
            return;
        }
        Err(missing) => panic!("the trace explorer's browser check needs a browser: {missing}"),
    };
    let (_deployment, ctxd) = demo_server();
    let support = json!({"project": "support", "objective": "support", "consumer": "support-agent",
                         "inputs": {"customerId": "CUST-1042"}});
    let (status, full) = turn(&ctxd, KEY, support).await;
    assert_eq!(status, 200, "{full:#}");
    let profile_only = json!({"project": "support", "inputs": {"customerId": "CUST-1042"}});
    let (status, profile_only) = turn(&ctxd, KEY, profile_only).await;
    assert_eq!(status, 200, "{profile_only:#}");
    let refused = json!({"project": "support", "objective": "support", "consumer": "support-agent",
                         "inputs": {"customerId": "CUST-12"}});
    let (status, blocked) = turn(&ctxd, KEY, refused).await;
    assert_eq!(status, 200, "{blocked:#}");
    let markup = json!({"project": "support", "objective": "support", "inputs": {"customerId": "CUST-2001"},
                        "consumer": "<img src=x onerror=\"document.title='ran'\"><b>bold</b>"});
    let (status, markup) = turn(&ctxd, KEY, markup).await;
    assert_eq!(status, 200, "{markup:#}");
    let ids: Vec<String> = [&full, &profile_only, &blocked, &markup]
        .iter()
        .map(|answer| answer["turnId"].as_str().unwrap().to_owned())
        .collect();
    for id in &ids {
        trace_of(&ctxd, KEY, id).await;
    }

    let shots = screenshot_dir().join("demo");
    run_explorer_check(
        &ctxd,
        &chromium,
        &shots,
        &[
            "--key",
            KEY,
            "--full",
            &ids[0],
            "--profile-only",
            &ids[1],
            "--blocked",
            &ids[2],
            "--markup",
            &ids[3],
        ],
    )
    .await;
    for shot in [
        "wrong-key-1280.png",
        "search-1280.png",
        "turn-1280.png",
        "replay-1280.png",
        "search-390.png",
        "turn-390.png",
    ] {
        let bytes = std::fs::read(shots.join(shot)).unwrap_or_else(|_| panic!("no {shot}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{shot} is a PNG");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_shows_a_handle_s_operations_in_a_real_browser() {
    let Some(chromium) = browser_or_skip("handle check") else {
        return;
    };
    let provider = handles::provider().await;
    let deployment = handles::deployment(&provider, "");
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let (answer, handle) = handles::handle_from_turn(&ctxd, handles::KEY).await;
    let turn_id = answer["turnId"].as_str().unwrap().to_owned();
    let id = handle["id"].as_str().unwrap().to_owned();
    for op in [
        json!({"kind": "metadata"}),
        json!({"kind": "search", "pattern": "ERROR", "maxResults": 3}),
    ] {
        let (status, body) =
            handles::op(&ctxd, handles::KEY, &id, json!({"version": 1, "op": op})).await;
        assert_eq!(status, 200, "{body:#}");
    }
    handles::trace_of(&ctxd, handles::KEY, &id, 2).await;
    trace_of(&ctxd, handles::KEY, &turn_id).await;
    let shots = screenshot_dir().join("handle");
    run_explorer_check(
        &ctxd,
        &chromium,
        &shots,
        &[
            "--key",
            handles::KEY,
            "--handle-turn",
            &turn_id,
            "--handle",
            &id,
            "--operations",
            "2",
        ],
    )
    .await;
    assert!(shots.join("handle-1280.png").exists());
}
