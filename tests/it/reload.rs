//! Reload without restart, end to end: a real `ctxd serve` under load while its config,
//! Projects and Bindings are rewritten and reloaded by SIGHUP and `POST /admin/reload`;
//! a config that does not validate is refused with every problem and the running set
//! keeps serving; a provider whose binding did not change keeps its breaker and its
//! pool; the admin key is required, compared and never logged.

use crate::provider_server::{Behaviour, ProviderServer, RunningProvider};
use crate::server::{Ctxd, client, provider, turn};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ACME_KEY: &str = "acme-reload-key-31f0";
const GLOBEX_KEY: &str = "globex-reload-key-8b2d";
const ADMIN_KEY: &str = "admin-reload-key-5c1e9a77d0";
const ADMIN_ENV: &str = "CTXD_TEST_ADMIN_KEY";
const SECRET: &str = "crm-bearer-reload-4d61e0";
const RELOADED: &str = "reloaded: new turns use the new set";
const REFUSED: &str = "reload refused: the running set keeps serving";

/// A deployment's files, rewritten between reloads.
struct Files {
    dir: tempfile::TempDir,
}

/// What [`Files::write`] puts in the files.
#[derive(Clone)]
struct Spec {
    tenants: Vec<(&'static str, &'static str)>,
    /// The static layer's text.
    policy: String,
    /// `(provider id, endpoint, extra binding lines)`.
    providers: Vec<(&'static str, String, String)>,
    /// Lines appended to `[limits]`.
    limits: &'static str,
    admin: bool,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("ctxd.toml")
    }

    fn put(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).unwrap();
    }

    fn write(&self, spec: &Spec) {
        let admin = if spec.admin {
            format!("admin_key_env = \"{ADMIN_ENV}\"\n")
        } else {
            String::new()
        };
        // Explicit shares: tenants come and go by reload.
        let mut config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace_ms = 5000\n{admin}\n\
             [trace]\nstore = \"sqlite:data/traces.db\"\ndigest_key_env = \"CTXD_TEST_DIGEST_KEY\"\n\
             generate_digest_key = true\n\n[limits]\nmax_turn_ms = 10000\n{}\n\
             [cache]\nmax_tenant_bytes = 1048576\n\n[handles]\nmax_tenant_bytes = 1048576\nmax_tenant_tombstones = 10000\n",
            spec.limits
        );
        for (id, key) in &spec.tenants {
            let hash = hex::encode(Sha256::digest(key.as_bytes()));
            config.push_str(&format!(
                "\n[[tenants]]\nid = \"{id}\"\napi_key_sha256 = \"{hash}\"\nmax_in_flight = 64\n\
                 [[tenants.projects]]\npath = \"{id}-project.json\"\nbinding = \"{id}-binding.toml\"\n"
            ));
            self.put(&format!("{id}-project.json"), &project(spec));
            self.put(&format!("{id}-binding.toml"), &binding(spec));
        }
        self.put("ctxd.toml", &config);
    }
}

/// Project `support`: the static policy layer, then one optional layer per provider.
fn project(spec: &Spec) -> String {
    let providers: Vec<Value> = spec
        .providers
        .iter()
        .map(|(id, ..)| json!({"id": id, "name": id, "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 5}))
        .collect();
    let mut layers = vec![json!({"id": "policy", "name": "Policy", "content": spec.policy})];
    layers.extend(spec.providers.iter().map(|(id, ..)| {
        json!({"id": format!("{id}-layer"), "name": format!("{id} layer"), "bindings": [{"provider": id}], "required": false})
    }));
    json!({"id": "support", "version": "1.0.0", "providers": providers, "layers": layers})
        .to_string()
}

fn binding(spec: &Spec) -> String {
    let mut text = String::from("revision = \"r1\"\n[defaults]\ntimeout_ms = 800\n");
    for (id, endpoint, extra) in &spec.providers {
        text.push_str(&format!(
            "\n[providers.{id}]\ntype = \"http\"\nendpoint = \"{endpoint}\"\nsecret_env = \"CRM_TOKEN\"\n{extra}\n"
        ));
    }
    text
}

fn spec(providers: Vec<(&'static str, String, String)>) -> Spec {
    Spec {
        tenants: vec![("acme", ACME_KEY)],
        policy: "Policy revision 0.".to_owned(),
        providers,
        limits: "",
        admin: true,
    }
}

fn start(files: &Files) -> Ctxd {
    Ctxd::start(
        &files.config(),
        &[],
        &[("CRM_TOKEN", SECRET), (ADMIN_ENV, ADMIN_KEY)],
    )
}

fn lookup() -> Value {
    json!({"project": "support", "inputs": {"customerId": "CUST-4242"}})
}

/// `POST /admin/reload` with this bearer key (none: no header).
async fn admin_reload(ctxd: &Ctxd, key: Option<&str>) -> (u16, Value) {
    let mut request = client().post(ctxd.url("/admin/reload"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("ctxd answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn sighup(ctxd: &Ctxd) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &ctxd.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until the log holds `count` lines with `text` (a reload's outcome is logged
/// when it is done).
async fn wait_for_log(ctxd: &Ctxd, text: &str, count: usize) {
    for _ in 0..1500 {
        if ctxd.logs().matches(text).count() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the log never held {count} × {text:?}:\n{}", ctxd.logs());
}

fn rendered(body: &Value) -> &str {
    body["rendered"].as_str().unwrap_or_default()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn assert_clean_logs(ctxd: &Ctxd) {
    let logs = ctxd.logs();
    for secret in [ADMIN_KEY, ACME_KEY, GLOBEX_KEY, SECRET] {
        assert!(!logs.contains(secret), "{secret:?} leaked into the logs");
    }
}

/// Turns sent continuously by `clients` tasks until stopped; every answer that is not
/// 200 is kept.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    failed: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(ctxd: &Ctxd, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..clients)
            .map(|_| {
                let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
                let url = ctxd.url("/v1/turns");
                tokio::spawn(async move {
                    let client = client();
                    while !stop.load(Ordering::SeqCst) {
                        let response = client
                            .post(&url)
                            .bearer_auth(ACME_KEY)
                            .json(&lookup())
                            .send()
                            .await;
                        match response {
                            Ok(response) if response.status() == 200 => {
                                answered.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(response) => {
                                let status = response.status();
                                let body = response.text().await.unwrap_or_default();
                                failed.lock().unwrap().push(format!("{status}: {body}"));
                            }
                            Err(error) => failed.lock().unwrap().push(error.to_string()),
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            answered,
            failed,
            tasks,
        }
    }

    /// Stops the clients; returns the turns answered and every failure.
    async fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.unwrap();
        }
        let failed = self.failed.lock().unwrap().clone();
        (self.answered.load(Ordering::SeqCst), failed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_reloads_under_load_fail_no_turn_and_an_invalid_config_changes_nothing() {
    let crm = ProviderServer::new().start().await;
    let files = Files::new();
    let mut current = spec(vec![("crm", crm.url(), String::new())]);
    files.write(&current);
    let ctxd = start(&files);
    let load = Load::start(&ctxd, 4);
    let mut reloaded = 0;
    for round in 1..=10 {
        let answered_before = load.answered.load(Ordering::SeqCst);
        if round == 6 {
            refuse_an_invalid_config(&ctxd, &files, &current).await;
            // The files as the running set has them, for the rounds after.
            files.write(&current);
            continue;
        }
        current.policy = format!("Policy revision {round}.");
        let globex = round % 2 == 0;
        current.tenants = if globex {
            vec![("acme", ACME_KEY), ("globex", GLOBEX_KEY)]
        } else {
            vec![("acme", ACME_KEY)]
        };
        files.write(&current);
        reloaded += 1;
        if round % 2 == 1 {
            sighup(&ctxd);
            wait_for_log(&ctxd, RELOADED, reloaded).await;
        } else {
            let (status, body) = admin_reload(&ctxd, Some(ADMIN_KEY)).await;
            assert_eq!(status, 200, "round {round}: {body:#}");
            assert_eq!(body["status"], "reloaded");
            let changes = &body["changes"];
            assert_eq!(
                strings(&changes["tenants"]["added"]),
                ["globex"],
                "{body:#}"
            );
            assert_eq!(strings(&changes["tenants"]["kept"]), ["acme"], "{body:#}");
            assert_eq!(
                strings(&changes["projects"]["changed"]),
                ["acme/support"],
                "{body:#}"
            );
            assert_eq!(
                strings(&changes["bindings"]["kept"]),
                ["acme/acme-binding.toml#crm"],
                "{body:#}"
            );
        }
        // A turn after the reload is answered by the new set.
        let (status, body) = turn(&ctxd, ACME_KEY, lookup()).await;
        assert_eq!(status, 200, "{body:#}");
        assert!(
            rendered(&body).contains(&current.policy),
            "round {round}: {}",
            rendered(&body)
        );
        assert_eq!(provider(&body, "crm")["status"], "OK");
        let (status, body) = turn(&ctxd, GLOBEX_KEY, lookup()).await;
        if globex {
            assert_eq!(
                status, 200,
                "round {round}: the added tenant's key works: {body:#}"
            );
            assert!(rendered(&body).contains(&current.policy));
        } else {
            assert_eq!(
                status, 401,
                "round {round}: the removed tenant's key is refused"
            );
        }
        // The load went on through the reload.
        for _ in 0..1500 {
            if load.answered.load(Ordering::SeqCst) > answered_before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            load.answered.load(Ordering::SeqCst) > answered_before,
            "round {round}: the load stalled"
        );
    }
    let (answered, failed) = load.stop().await;
    assert!(
        failed.is_empty(),
        "{} failed turns: {failed:#?}",
        failed.len()
    );
    assert!(answered >= 10, "{answered} turns answered");
    assert_eq!(ctxd.logs().matches(RELOADED).count(), 9);
    assert_eq!(ctxd.logs().matches(REFUSED).count(), 1);
    // The removed tenant's provider stopped once its last turns were done.
    wait_for_log(
        &ctxd,
        "provider stopped: its binding changed or was removed",
        1,
    )
    .await;
    assert_clean_logs(&ctxd);
}

/// Writes a deployment with four problems — a restart-only setting, a Project that does
/// not validate, a binding that does not, a tenant without projects' files — asks for a
/// reload, and checks every problem is answered and logged while `running` still serves.
async fn refuse_an_invalid_config(ctxd: &Ctxd, files: &Files, running: &Spec) {
    let mut invalid = running.clone();
    invalid.limits = "replay_burst = 3\n";
    files.write(&invalid);
    files.put(
        "acme-project.json",
        r#"{"id": "support", "version": "1.0.0", "layers": [], "colour": "blue"}"#,
    );
    let broken_binding = binding(running).replace("timeout_ms = 800", "timeout_ms = -5");
    files.put("acme-binding.toml", &broken_binding);
    let (status, body) = admin_reload(ctxd, Some(ADMIN_KEY)).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["code"], "RELOAD_REFUSED");
    let problems = strings(&body["problems"]);
    for expected in [
        "limits.replay_burst",
        "acme-project.json",
        "acme-binding.toml",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "no problem names {expected}: {problems:#?}"
        );
    }
    wait_for_log(ctxd, REFUSED, 1).await;
    let logs = ctxd.logs();
    for problem in &problems {
        assert!(logs.contains(problem), "not logged: {problem}\n{logs}");
    }
    // The running set is untouched.
    let (status, body) = turn(ctxd, ACME_KEY, lookup()).await;
    assert_eq!(status, 200, "{body:#}");
    assert!(
        rendered(&body).contains(&running.policy),
        "{}",
        rendered(&body)
    );
    assert_eq!(provider(&body, "crm")["status"], "OK");
}

fn failing_upstream(failing: &Arc<AtomicBool>) -> ProviderServer {
    let failing = failing.clone();
    ProviderServer::new()
        .describe_behaviour(Behaviour::Answer)
        .respond_with(move |_, _| {
            if failing.load(Ordering::SeqCst) {
                Behaviour::Status(503)
            } else {
                Behaviour::Answer
            }
        })
}

async fn circuit_of(ctxd: &Ctxd, id: &str) -> String {
    let response = client()
        .get(ctxd.url("/readyz"))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    body["providers"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["provider"] == id))
        .and_then(|p| p["circuit"].as_str())
        .unwrap_or_else(|| panic!("no provider {id} in {body:#}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_binding_keeps_its_open_breaker_and_its_pool_and_a_changed_one_starts_afresh() {
    let failing = Arc::new(AtomicBool::new(true));
    let crm: RunningProvider = failing_upstream(&failing).start().await;
    let orders = ProviderServer::new().start().await;
    let circuit = "[providers.crm.circuit]\nconsecutive_failures = 3\nopen_ms = 600000\nhalf_open_probes = 1\n";
    let files = Files::new();
    let mut current = spec(vec![
        ("crm", crm.url(), circuit.to_owned()),
        ("orders", orders.url(), String::new()),
    ]);
    files.write(&current);
    let ctxd = start(&files);

    for _ in 0..3 {
        let (_, body) = turn(&ctxd, ACME_KEY, lookup()).await;
        assert_eq!(provider(&body, "crm")["detail"], "HTTP_503", "{body:#}");
        assert_eq!(provider(&body, "orders")["status"], "OK", "{body:#}");
    }
    let (_, body) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert_eq!(provider(&body, "crm")["detail"], "CIRCUIT_OPEN");
    assert_eq!(circuit_of(&ctxd, "crm").await, "open");
    let crm_lookups = crm.lookups();
    let orders_connections = orders.connections();

    // Only the admin key reloads.
    for key in [None, Some(ACME_KEY), Some("admin-reload-key-5c1e9a77d1")] {
        let (status, body) = admin_reload(&ctxd, key).await;
        assert_eq!(status, 401, "{key:?}: {body:#}");
        assert_eq!(body["error"]["code"], "UNAUTHORIZED");
    }
    let response = client()
        .get(ctxd.url("/admin/reload"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert!(!ctxd.logs().contains("reloading"), "{}", ctxd.logs());

    // The upstream recovers: a new breaker would call it and succeed.
    failing.store(false, Ordering::SeqCst);
    current.policy = "Policy revision 1.".to_owned();
    files.write(&current);
    let (status, body) = admin_reload(&ctxd, Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(
        strings(&body["changes"]["bindings"]["kept"]),
        [
            "acme/acme-binding.toml#crm",
            "acme/acme-binding.toml#orders"
        ],
        "{body:#}"
    );
    let (_, body) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert!(rendered(&body).contains("Policy revision 1."));
    assert_eq!(
        provider(&body, "crm")["detail"],
        "CIRCUIT_OPEN",
        "the breaker survived the reload: {body:#}"
    );
    assert_eq!(circuit_of(&ctxd, "crm").await, "open");
    assert_eq!(crm.lookups(), crm_lookups, "an open breaker calls nobody");
    assert_eq!(provider(&body, "orders")["status"], "OK");
    assert_eq!(
        orders.connections(),
        orders_connections,
        "the kept pool's connection served the turn after the reload"
    );

    // A changed binding is a new actor: a closed breaker, a new pool.
    current.providers = vec![
        ("crm", crm.url(), circuit.replace("600000", "599000")),
        ("orders", orders.url(), "timeout_ms = 900\n".to_owned()),
    ];
    files.write(&current);
    let (status, body) = admin_reload(&ctxd, Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(
        strings(&body["changes"]["bindings"]["changed"]),
        [
            "acme/acme-binding.toml#crm",
            "acme/acme-binding.toml#orders"
        ],
        "{body:#}"
    );
    // The new actors were probed before they served: the replica stays ready.
    let ready = client().get(ctxd.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let (_, body) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert_eq!(provider(&body, "crm")["status"], "OK", "{body:#}");
    assert_eq!(crm.lookups(), crm_lookups + 1);
    assert_eq!(circuit_of(&ctxd, "crm").await, "closed");
    assert!(orders.connections() > orders_connections);
    assert_clean_logs(&ctxd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_key_the_route_is_not_found_and_sighup_still_reloads() {
    let crm = ProviderServer::new().start().await;
    let files = Files::new();
    let mut current = spec(vec![("crm", crm.url(), String::new())]);
    current.admin = false;
    files.write(&current);
    let ctxd = start(&files);
    for key in [Some(ADMIN_KEY), None] {
        let (status, body) = admin_reload(&ctxd, key).await;
        assert_eq!(status, 404, "{body:#}");
        assert_eq!(body["error"]["code"], "NOT_FOUND");
    }

    // A config that does not parse: refused, every problem logged.
    files.put(
        "ctxd.toml",
        "[server]\nlisten = \"nowhere\"\n[trace]\nbatch_size = 0\n",
    );
    sighup(&ctxd);
    wait_for_log(&ctxd, REFUSED, 1).await;
    let logs = ctxd.logs();
    assert!(logs.contains("server.listen"), "{logs}");
    assert!(logs.contains("trace.batch_size"), "{logs}");
    let (status, body) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert_eq!(status, 200, "{body:#}");
    assert!(rendered(&body).contains("Policy revision 0."));

    // Turning the admin key on is a restart-only change.
    current.admin = true;
    files.write(&current);
    sighup(&ctxd);
    wait_for_log(&ctxd, REFUSED, 2).await;
    assert!(
        ctxd.logs().contains("server.admin_key: changed"),
        "{}",
        ctxd.logs()
    );

    current.admin = false;
    current.policy = "Policy revision 2.".to_owned();
    files.write(&current);
    sighup(&ctxd);
    wait_for_log(&ctxd, RELOADED, 1).await;
    let (status, body) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert_eq!(status, 200, "{body:#}");
    assert!(rendered(&body).contains("Policy revision 2."));
    assert_clean_logs(&ctxd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_in_flight_finishes_on_the_set_it_started_on() {
    // Lookups take long enough to be in flight across the reload; probes answer at once.
    let crm = ProviderServer::new()
        .describe_behaviour(Behaviour::Answer)
        .behaviour(Behaviour::Delay(
            Duration::from_secs(3),
            Box::new(Behaviour::Answer),
        ))
        .start()
        .await;
    let files = Files::new();
    let mut current = spec(vec![("crm", crm.url(), "timeout_ms = 8000\n".to_owned())]);
    files.write(&current);
    let ctxd = start(&files);
    let (status, before) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert_eq!(status, 200, "{before:#}");
    let lookups = crm.lookups();

    let in_flight = {
        let url = ctxd.url("/v1/turns");
        tokio::spawn(async move {
            let response = client()
                .post(url)
                .bearer_auth(ACME_KEY)
                .json(&lookup())
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        })
    };
    assert!(
        crm.wait_for(Duration::from_secs(10), |s| s.lookups() > lookups)
            .await,
        "the turn reached its provider"
    );
    // Its provider's binding and its policy change while it waits for the answer.
    current.policy = "Policy revision 1.".to_owned();
    current.providers = vec![("crm", crm.url(), "timeout_ms = 8100\n".to_owned())];
    files.write(&current);
    let (status, body) = admin_reload(&ctxd, Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(
        strings(&body["changes"]["bindings"]["changed"]),
        ["acme/acme-binding.toml#crm"]
    );
    assert!(!in_flight.is_finished(), "the turn is still in flight");

    let (status, old) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{old:#}");
    assert_eq!(provider(&old, "crm")["status"], "OK", "{old:#}");
    assert!(
        rendered(&old).contains("Policy revision 0."),
        "{}",
        rendered(&old)
    );
    assert_eq!(
        old["bindingDigest"], before["bindingDigest"],
        "the old set's binding"
    );

    let (status, new) = turn(&ctxd, ACME_KEY, lookup()).await;
    assert_eq!(status, 200, "{new:#}");
    assert_eq!(provider(&new, "crm")["status"], "OK", "{new:#}");
    assert!(rendered(&new).contains("Policy revision 1."));
    assert_ne!(new["bindingDigest"], before["bindingDigest"]);
    wait_for_log(
        &ctxd,
        "provider stopped: its binding changed or was removed",
        1,
    )
    .await;
}
