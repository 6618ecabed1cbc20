//! `secrets = "redact"` end to end: an HTTP provider and a SQLite provider whose items
//! hold secrets, served by a real `ctxd serve`. The items are kept with each secret
//! replaced by `[REDACTED:<kind>]`; the answer and the trace count the redactions by
//! kind; no secret reaches the answer, the trace store or the logs; a binding that
//! keeps the default still refuses the answer (`SECRET_DETECTED`).

use crate::provider_server::{Behaviour, ProviderServer};
use crate::server::{Ctxd, Deployment, TenantSpec, layer_status, provider, trace_of, turn};
use rusqlite::Connection;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const KEY: &str = "redaction-test-key";
const VALUE: &str = "CUST-2718";

/// A GitHub token shape, built at run time so no literal here looks like a secret.
fn github_token() -> String {
    format!("{}{}", "ghp_", "Zq7".repeat(12))
}

fn project() -> String {
    let provider =
        |id: &str| json!({"id": id, "name": id, "lookup": {"input": "customerId"}, "maxItems": 5});
    let layer =
        |id: &str| json!({"id": format!("{id}-layer"), "name": id, "bindings": [{"provider": id}]});
    json!({
        "id": "acme", "version": "1.0.0",
        "providers": [provider("crm"), provider("notes"), provider("strict")],
        "layers": [layer("crm"), layer("notes"), layer("strict")]
    })
    .to_string()
}

/// A SQLite file with one note for `VALUE` that quotes a token twice.
fn notes_database(folder: &Path) -> String {
    let path = folder.join("notes.db");
    let connection = Connection::open(&path).unwrap();
    connection
        .execute_batch("CREATE TABLE notes (id TEXT, title TEXT, content TEXT, customer_id TEXT);")
        .unwrap();
    let token = github_token();
    connection
        .execute(
            "INSERT INTO notes VALUES ('N-1', 'Deploy note', ?1, ?2)",
            (
                format!("use {token} to deploy; rotate {token} monthly"),
                VALUE,
            ),
        )
        .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redacted_items_are_kept_counted_and_never_carry_the_secret() {
    let leaking = ProviderServer::new()
        .behaviour(Behaviour::SecretItem)
        .start()
        .await;
    let folder = tempfile::tempdir().unwrap();
    let database = notes_database(folder.path());
    let binding = format!(
        "revision = \"redact-1\"\n[defaults]\nsecrets = \"redact\"\n\
         [providers.crm]\ntype = \"http\"\nendpoint = \"{url}\"\nretention = \"content\"\n\
         cache = {{ ttl = \"60s\" }}\n\
         [providers.notes]\ntype = \"sqlite\"\ndatabase = \"{database}\"\nversion = \"notes-1\"\n\
         query = \"SELECT id, title, content FROM notes WHERE customer_id = ?1\"\n\
         [providers.strict]\ntype = \"http\"\nendpoint = \"{url}\"\nsecrets = \"refuse\"\n",
        url = leaking.url()
    );
    let deployment = Deployment::new(&[TenantSpec::new("acme", KEY, project(), binding)]);
    let ctxd = Ctxd::start(&deployment.config, &[], &[]);
    let request = json!({"project": "acme", "inputs": {"customerId": VALUE}});

    let (status, body) = turn(&ctxd, KEY, request.clone()).await;
    assert_eq!(status, 200, "{body:#}");
    let crm = provider(&body, "crm");
    assert_eq!(crm["status"], "OK", "{crm}");
    assert_eq!(crm["redactions"], json!({"private_key": 1}));
    let notes = provider(&body, "notes");
    assert_eq!(notes["status"], "OK", "{notes}");
    assert_eq!(notes["redactions"], json!({"github_token": 2}));
    assert_eq!(layer_status(&body, "crm-layer"), "INCLUDED");
    let strict = provider(&body, "strict");
    assert_eq!(strict["status"], "SECRET_DETECTED", "{strict}");
    assert_eq!(strict["detail"], "private_key");
    assert!(strict.get("redactions").is_none());

    let rendered = body["rendered"].as_str().unwrap();
    assert!(rendered.contains("[REDACTED:private_key]"), "{rendered}");
    assert!(
        rendered.contains(
            "use [REDACTED:github_token] to deploy; rotate [REDACTED:github_token] monthly"
        ),
        "{rendered}"
    );
    let token = github_token();
    for secret in [token.as_str(), "MIIEow", "PRIVATE KEY-----"] {
        assert!(!body.to_string().contains(secret), "{secret} in the answer");
    }

    // A kept answer is the redacted one, and says so again.
    let (_, again) = turn(&ctxd, KEY, request).await;
    let crm = provider(&again, "crm");
    assert_eq!(crm["source"], "CACHE");
    assert_eq!(crm["redactions"], json!({"private_key": 1}));

    let trace = trace_of(&ctxd, KEY, body["turnId"].as_str().unwrap()).await;
    let records = trace["providers"].as_array().unwrap();
    let record = |id: &str| records.iter().find(|r| r["provider"] == id).unwrap();
    assert_eq!(record("crm")["redactions"], json!({"private_key": 1}));
    assert_eq!(record("notes")["redactions"], json!({"github_token": 2}));
    assert_eq!(record("crm")["retention"]["contentRetained"], true);

    let mut ctxd = ctxd;
    ctxd.terminate();
    assert!(ctxd.wait(Duration::from_secs(20)).success());
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", deployment.store().display());
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for secret in [token.as_str(), "MIIEow"] {
            assert!(!text.contains(secret), "{secret} in {path}");
        }
    }
    let logs = ctxd.logs();
    for secret in [token.as_str(), "MIIEow", VALUE] {
        assert!(!logs.contains(secret), "{secret} in the logs");
    }
}
