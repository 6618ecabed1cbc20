//! Replicas sharing one PostgreSQL trace store (`[trace] store_env`), against the real
//! server on 127.0.0.1:5432: every turn a replica answered 200 is in the store once it
//! stops gracefully, a SIGKILLed replica loses only what it had not committed, any
//! replica serves search, show and replay of any turn, migrations run once, and an
//! inline connection string is refused. Each test writes a schema of its own.

use crate::provider_server::{ProviderServer, RunningProvider};
use crate::server::{Ctxd, Deployment, TenantSpec, client, get, metrics_of, trace_of, turn};
use crate::support::{POSTGRES_ADMIN_DSN as ADMIN_DSN, postgres_admin as admin};
use crate::support::{ctxd as ctxd_cli, stderr_of, stdout_of};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const KEY: &str = "acme-replica-key";
const DIGEST_KEY: &str = "replicas-share-this-digest-key-0123456789";
const VALUE: &str = "CUST-4242";
const DSN_ENV: &str = "CTXD_TRACE_DSN";

/// A schema of this test's own, dropped at the end; the replicas' DSN writes there.
struct Schema {
    name: String,
}

impl Schema {
    async fn create() -> Schema {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).unwrap();
        let name = format!("ctxd_traces_{}", hex::encode(bytes));
        admin()
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .unwrap();
        Schema { name }
    }

    /// The replicas' connection string: this schema, and an application name of its own
    /// so the test can find the replicas' connections on the server.
    fn dsn(&self) -> String {
        format!(
            "{ADMIN_DSN} options=-csearch_path={0} application_name={0}",
            self.name
        )
    }

    async fn drop(self) {
        admin()
            .await
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await
            .unwrap();
    }
}

fn project() -> String {
    json!({
        "id": "acme", "version": "1.0.0",
        "providers": [
            {"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}, "maxItems": 3}
        ],
        "layers": [
            {"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}], "required": true}
        ],
        "profiles": [{"id": "default"}]
    })
    .to_string()
}

fn binding(crm: &RunningProvider) -> String {
    format!(
        "revision = \"replicas-1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"{}\"\n\
         retention = \"content\"\nretention_ttl = \"1d\"\ntimeout_ms = 2000\n",
        crm.url()
    )
}

/// A deployment whose trace store is the PostgreSQL schema named by `store_env`.
fn postgres_deployment(crm: &RunningProvider, trace_extra: &str) -> Deployment {
    on_postgres(Deployment::with_trace(
        &[TenantSpec::new("acme", KEY, project(), binding(crm))],
        trace_extra,
    ))
}

/// The deployment with its `[trace] store` replaced by `store_env`, and the digest key
/// from its env var only (replicas share it).
fn on_postgres(deployment: Deployment) -> Deployment {
    let text = std::fs::read_to_string(&deployment.config)
        .unwrap()
        .replace(
            "store = \"sqlite:data/traces.db\"",
            &format!("store_env = \"{DSN_ENV}\""),
        )
        .replace("generate_digest_key = true\n", "");
    std::fs::write(&deployment.config, text).unwrap();
    deployment
}

fn env(schema: &Schema) -> Vec<(&'static str, String)> {
    vec![
        (DSN_ENV, schema.dsn()),
        ("CTXD_TEST_DIGEST_KEY", DIGEST_KEY.to_owned()),
    ]
}

fn start(deployment: &Deployment, schema: &Schema) -> Ctxd {
    let env = env(schema);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Ctxd::start(&deployment.config, &[], &pairs)
}

async fn crm() -> RunningProvider {
    ProviderServer::new()
        .lookup_items(vec![
            json!({"id": "REC-1", "title": "Customer", "content": "Retained content of the CRM"}),
        ])
        .start()
        .await
}

fn request() -> Value {
    json!({"project": "acme", "profile": "default", "inputs": {"customerId": VALUE}})
}

/// `GET /v1/traces/{id}` once: whether the replica finds the turn in the store.
async fn stored(replica: &Ctxd, turn_id: &str) -> bool {
    stored_for(replica, KEY, turn_id).await
}

async fn stored_for(replica: &Ctxd, key: &str, turn_id: &str) -> bool {
    let response = client()
        .get(replica.url(&format!("/v1/traces/{turn_id}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    match response.status().as_u16() {
        200 => true,
        404 => false,
        other => panic!("GET /v1/traces/{turn_id}: {other}"),
    }
}

/// One client task's turns on one replica, in the order they were answered 200.
type Answered = Vec<String>;

/// Sends turns to `replica` one after another until `stop` is set, the replica stops
/// answering, or `max` turns; returns the ids answered 200, in order.
async fn drive(
    base: String,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
    max: usize,
) -> Answered {
    let http = client();
    let mut answered = Vec::new();
    for _ in 0..max {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let response = http
            .post(format!("{base}/v1/turns"))
            .bearer_auth(KEY)
            .json(&request())
            .send()
            .await;
        let Ok(response) = response else { break };
        if response.status() != 200 {
            // 503 while the replica shuts down: not answered, not expected in the store.
            continue;
        }
        let Ok(body) = response.json::<Value>().await else {
            break;
        };
        answered.push(body["turnId"].as_str().unwrap().to_owned());
        count.fetch_add(1, Ordering::SeqCst);
    }
    answered
}

async fn wait_for(count: &AtomicUsize, at_least: usize) {
    for _ in 0..6000 {
        if count.load(Ordering::SeqCst) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the load never reached {at_least} turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_keep_every_answered_turn_and_a_killed_one_loses_only_its_last_batch() {
    let schema = Schema::create().await;
    let crm = crm().await;
    // A batch window long enough that a SIGKILL under load finds one open.
    let deployment = postgres_deployment(&crm, "batch_ms = 200\nbatch_size = 64");
    let survivor = start(&deployment, &schema);
    let stopped = start(&deployment, &schema);
    let mut killed = start(&deployment, &schema);
    // One turn of the replica to be killed is committed (and seen by another) before the
    // load: what it loses later is then measured against what it had written.
    let (status, first) = turn(&killed, KEY, request()).await;
    assert_eq!(status, 200, "{first:#}");
    let first = first["turnId"].as_str().unwrap().to_owned();
    trace_of(&survivor, KEY, &first).await;

    const TASKS_PER_REPLICA: usize = 3;
    const MAX_TURNS_PER_TASK: usize = 2000;
    let replicas = [&survivor, &stopped, &killed];
    let stop_all = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let mut tasks = Vec::new();
    for (replica, ctxd) in replicas.iter().enumerate() {
        for _ in 0..TASKS_PER_REPLICA {
            tasks.push((
                replica,
                tokio::spawn(drive(
                    ctxd.base.clone(),
                    Arc::clone(&stop_all),
                    Arc::clone(&counts[replica]),
                    MAX_TURNS_PER_TASK,
                )),
            ));
        }
    }

    // Mid-load: every replica has answered turns, and keeps answering while the other
    // two go.
    for count in &counts {
        wait_for(count, 60).await;
    }
    let killed_pid = killed.pid().to_string();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &killed_pid])
        .status()
        .unwrap();
    assert!(status.success());
    stopped.terminate();
    let survivor_before = counts[0].load(Ordering::SeqCst);
    wait_for(&counts[0], survivor_before + 60).await;
    stop_all.store(true, Ordering::SeqCst);

    let mut answered: BTreeMap<usize, Vec<Answered>> = BTreeMap::new();
    answered.insert(2, vec![vec![first]]);
    for (replica, task) in tasks {
        answered
            .entry(replica)
            .or_default()
            .push(task.await.unwrap());
    }
    let mut stopped = stopped;
    let exit = stopped.wait(Duration::from_secs(30));
    assert!(exit.success(), "graceful stop:\n{}", stopped.logs());
    let _ = killed.wait(Duration::from_secs(10));

    // The survivor answers for every replica's turns: its own once its batch commits,
    // the gracefully stopped replica's at once (flushed before it exited).
    for id in answered[&0].iter().flatten() {
        trace_of(&survivor, KEY, id).await;
    }
    let mut stopped_turns = 0;
    for id in answered[&1].iter().flatten() {
        assert!(
            stored(&survivor, id).await,
            "turn {id} answered 200 by the gracefully stopped replica is missing"
        );
        stopped_turns += 1;
    }

    // The killed replica: what it committed stays; what it lost is, task by task, the
    // turns after its last commit (a batch commits whole and in queue order, and a
    // task's turns were queued in the order they were answered).
    let mut lost = 0;
    let mut killed_turns = 0;
    for sequence in &answered[&2] {
        let mut found = Vec::new();
        for id in sequence {
            found.push(stored(&survivor, id).await);
        }
        killed_turns += sequence.len();
        let kept = found.iter().take_while(|kept| **kept).count();
        assert!(
            found[kept..].iter().all(|kept| !kept),
            "a killed replica loses only the turns after its last commit: {found:?}"
        );
        lost += sequence.len() - kept;
    }
    println!(
        "replicas: survivor answered {}, gracefully stopped {stopped_turns} (all stored), \
         killed {killed_turns} of which {lost} were lost with its open batch and queue",
        answered[&0].iter().flatten().count()
    );
    assert!(
        killed_turns > lost,
        "the killed replica had committed batches"
    );
    let exported = metrics_of(&survivor).await;
    let metric = |name: &str| -> f64 {
        exported
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    };
    let batches = metric("ctxd_trace_write_duration_seconds_count");
    println!(
        "survivor: {batches} batches, {:.1} records a batch, {:.2} ms a commit on average",
        metric("ctxd_trace_records_total") / batches.max(1.0),
        1000.0 * metric("ctxd_trace_write_duration_seconds_sum") / batches.max(1.0)
    );

    // Search from the survivor pages through every stored turn, newest first, once each.
    let mut seen = BTreeSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(cursor) => format!("/v1/traces?limit=200&cursor={cursor}"),
            None => "/v1/traces?limit=200".to_owned(),
        };
        let (_, page) = get(&survivor, KEY, &query).await;
        for trace in page["traces"].as_array().unwrap() {
            let id = trace["turn"]["turnId"].as_str().unwrap().to_owned();
            assert!(seen.insert(id), "a page repeated a turn");
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let total: usize = answered.values().flatten().map(Vec::len).sum();
    assert_eq!(seen.len(), total - lost, "search finds every stored turn");

    let logs = survivor.logs() + &stopped.logs();
    assert!(!logs.contains(VALUE), "the lookup value is never logged");
    assert!(
        !logs.contains("options=-csearch_path"),
        "the DSN is never logged"
    );
    drop(survivor);
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_starting_at_once_migrate_the_schema_once() {
    let schema = Schema::create().await;
    let crm = crm().await;
    let deployment = postgres_deployment(&crm, "");
    let dsn = schema.dsn();
    let config = deployment.config.clone();
    let replicas: Vec<Ctxd> = std::thread::scope(|scope| {
        let starting: Vec<_> = (0..3)
            .map(|_| {
                let (dsn, config) = (dsn.clone(), config.clone());
                scope.spawn(move || {
                    Ctxd::start(
                        &config,
                        &[],
                        &[(DSN_ENV, &dsn), ("CTXD_TEST_DIGEST_KEY", DIGEST_KEY)],
                    )
                })
            })
            .collect();
        starting.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let rows = admin()
        .await
        .query(
            &format!(
                "SELECT version, COUNT(*) FROM {}.schema_version GROUP BY version ORDER BY version",
                schema.name
            ),
            &[],
        )
        .await
        .unwrap();
    let versions: Vec<(i64, i64)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    assert!(!versions.is_empty());
    for (i, (version, count)) in versions.iter().enumerate() {
        assert_eq!(*version, i as i64 + 1, "versions in order: {versions:?}");
        assert_eq!(*count, 1, "each version applied once: {versions:?}");
    }
    let migrated = replicas
        .iter()
        .filter(|replica| replica.logs().contains("trace store schema migrated"))
        .count();
    assert_eq!(migrated, 1, "one replica applied the migrations");
    // Each of them serves turns into the one store.
    for replica in &replicas {
        let (status, body) = turn(replica, KEY, request()).await;
        assert_eq!(status, 200, "{body:#}");
    }
    drop(replicas);
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_written_by_one_replica_is_shown_and_replayed_by_another() {
    let schema = Schema::create().await;
    let crm = crm().await;
    let deployment = postgres_deployment(&crm, "");
    let writer = start(&deployment, &schema);
    let reader = start(&deployment, &schema);

    let (status, answered) = turn(&writer, KEY, request()).await;
    assert_eq!(status, 200, "{answered:#}");
    let turn_id = answered["turnId"].as_str().unwrap().to_owned();

    let shown = trace_of(&reader, KEY, &turn_id).await;
    for query in [
        "provider=crm&providerStatus=OK",
        "provider=crm",
        "layer=profile&status=INCLUDED",
        "status=INCLUDED&since=0",
        "providerStatus=OK&layer=profile",
    ] {
        let (_, page) = get(&reader, KEY, &format!("/v1/traces?{query}")).await;
        assert_eq!(
            page["traces"][0]["turn"]["turnId"], turn_id,
            "{query}: {page:#}"
        );
    }
    let (_, none) = get(
        &reader,
        KEY,
        "/v1/traces?provider=crm&providerStatus=TIMEOUT",
    )
    .await;
    assert_eq!(none["traces"].as_array().unwrap().len(), 0, "{none:#}");
    assert_eq!(shown["turn"]["turnId"], turn_id);
    assert_eq!(shown["providers"].as_array().unwrap().len(), 1, "{shown:#}");

    let response = client()
        .post(reader.url(&format!("/v1/turns/{turn_id}/replay")))
        .bearer_auth(KEY)
        .json(&json!({"inputs": {"customerId": VALUE}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let replayed: Value = response.json().await.unwrap();
    assert_eq!(
        replayed["exact"], true,
        "retained content replays: {replayed:#}"
    );
    assert_eq!(replayed["renderedDigest"], answered["renderedDigest"]);

    // The CLI reads the same store through the config's store_env.
    let env = env(&schema);
    let config = deployment.config.to_str().unwrap();
    let output = ctxd_cli()
        .args([
            "traces", "show", &turn_id, "--config", config, "--format", "json",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let cli: Value = serde_json::from_str(&stdout_of(&output)).unwrap();
    assert_eq!(cli["turn"]["turnId"], turn_id);
    let output = ctxd_cli()
        .args(["traces", "search", "--config", config, "--format", "json"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert!(stdout_of(&output).contains(&turn_id));
    let output = ctxd_cli()
        .args([
            "replay",
            &turn_id,
            "--config",
            config,
            "--input",
            &format!("customerId={VALUE}"),
            "--format",
            "json",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let cli: Value = serde_json::from_str(&stdout_of(&output)).unwrap();
    assert_eq!(cli["exact"], true, "{cli:#}");

    // doctor reports the store and its schema version.
    let output = ctxd_cli()
        .args(["doctor", "--config", config])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let shown = stdout_of(&output) + &stderr_of(&output);
    assert!(
        shown.contains(&format!("postgres:${DSN_ENV} reachable")),
        "{shown}"
    );
    assert!(shown.contains("schema version"), "{shown}");
    assert!(!shown.contains("csearch_path"), "{shown}");
    drop((writer, reader));
    schema.drop().await;
}

/// The server closes every connection of the replica (a restart, a failover): the
/// writer and the readers connect again, and no answered turn is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_connects_again_when_the_server_drops_its_connections() {
    let schema = Schema::create().await;
    let crm = crm().await;
    let deployment = postgres_deployment(&crm, "batch_ms = 5");
    let mut replica = start(&deployment, &schema);
    let (status, before) = turn(&replica, KEY, request()).await;
    assert_eq!(status, 200, "{before:#}");
    let before = before["turnId"].as_str().unwrap().to_owned();
    trace_of(&replica, KEY, &before).await;

    let terminated: i64 = admin()
        .await
        .query_one(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&schema.name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        terminated >= 2,
        "the writer's and a reader's connections: {terminated}"
    );

    let mut after = Vec::new();
    for _ in 0..5 {
        let (status, body) = turn(&replica, KEY, request()).await;
        assert_eq!(status, 200, "{body:#}");
        after.push(body["turnId"].as_str().unwrap().to_owned());
    }
    for id in after.iter().chain([&before]) {
        trace_of(&replica, KEY, id).await;
    }
    replica.terminate();
    assert!(
        replica.wait(Duration::from_secs(20)).success(),
        "{}",
        replica.logs()
    );
    assert!(replica.logs().contains("trace store connection reopened"));
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_their_keep_are_pruned_from_the_shared_store() {
    const ARCHIVE_KEY: &str = "archive-replica-key";
    let schema = Schema::create().await;
    let crm = crm().await;
    let mut archive = TenantSpec::new("archive", ARCHIVE_KEY, project(), binding(&crm));
    archive.trace_keep = Some("forever");
    let deployment = on_postgres(Deployment::with_trace(
        &[
            TenantSpec::new("acme", KEY, project(), binding(&crm)),
            archive,
        ],
        "keep = \"2s\"\nbatch_ms = 5",
    ));
    let replicas = [start(&deployment, &schema), start(&deployment, &schema)];
    let mut old = Vec::new();
    let mut kept = Vec::new();
    for (i, replica) in replicas.iter().cycle().take(6).enumerate() {
        let (status, body) = turn(replica, KEY, request()).await;
        assert_eq!(status, 200, "{body:#}");
        old.push(body["turnId"].as_str().unwrap().to_owned());
        if i % 2 == 0 {
            let (status, body) = turn(replica, ARCHIVE_KEY, request()).await;
            assert_eq!(status, 200, "{body:#}");
            kept.push(body["turnId"].as_str().unwrap().to_owned());
        }
    }
    // Both replicas prune acme's turns once they pass their keep; archive keeps its own.
    let admin = admin().await;
    let count = |table: &str| {
        format!(
            "SELECT COUNT(*) FROM {}.{table} WHERE tenant = 'acme'",
            schema.name
        )
    };
    let mut left = i64::MAX;
    for _ in 0..600 {
        left = 0;
        for table in ["turns", "provider_records", "layer_decisions"] {
            left += admin
                .query_one(&count(table), &[])
                .await
                .unwrap()
                .get::<_, i64>(0);
        }
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left, 0, "acme's rows past their keep are deleted");
    for id in &old {
        assert!(!stored_for(&replicas[1], KEY, id).await, "{id} was pruned");
    }
    for id in &kept {
        assert!(
            stored_for(&replicas[0], ARCHIVE_KEY, id).await,
            "archive keeps {id}"
        );
    }
    drop(replicas);
    schema.drop().await;
}

#[test]
fn an_inline_connection_string_is_refused_and_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ctxd.toml");
    let tenant = "[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n\
                  [[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n";
    for (trace, field, needle) in [
        (
            "store = \"postgres://ctxd:pw-s3cr3t@db.internal/traces\"",
            "trace.store",
            "trace.store_env",
        ),
        (
            "store = \"host=db.internal password=pw-s3cr3t dbname=traces\"",
            "trace.store",
            "trace.store_env",
        ),
        (
            "store = \"sqlite:data/traces.db\"\nstore_env = \"TRACE_DSN\"",
            "trace.store_env",
            "choose one",
        ),
        (
            "store_env = \"TRACE_DSN\"\ngenerate_digest_key = true",
            "trace.generate_digest_key",
            "same key",
        ),
    ] {
        std::fs::write(&config, format!("[trace]\n{trace}\n{tenant}")).unwrap();
        let output = ctxd_cli()
            .args(["validate", "--config", config.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{trace}");
        let shown = stdout_of(&output) + &stderr_of(&output);
        assert!(shown.contains(field), "{field} in {shown}");
        assert!(shown.contains(needle), "{needle} in {shown}");
        assert!(!shown.contains("pw-s3cr3t"), "{shown}");
    }
}

/// A server that quotes the connection string's password (here: a database named like
/// it, which the refusal names) never gets it into `doctor` or `serve`'s output.
#[tokio::test]
async fn a_server_message_quoting_the_stores_password_is_masked() {
    let crm = crm().await;
    let deployment = on_postgres(postgres_deployment(&crm, ""));
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).unwrap();
    let password = format!("wombat_lantern_{}", hex::encode(bytes));
    let dsn = format!(
        "host=127.0.0.1 port=5432 user=postgres password={password} dbname={password} sslmode=disable"
    );
    for command in ["doctor", "serve"] {
        let config = deployment.config.clone();
        let dsn = dsn.clone();
        let output = tokio::task::spawn_blocking(move || {
            ctxd_cli()
                .args([command, "--config", config.to_str().unwrap()])
                .env(DSN_ENV, dsn)
                .env("CTXD_TEST_DIGEST_KEY", DIGEST_KEY)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let shown = stdout_of(&output) + &stderr_of(&output);
        assert!(!output.status.success(), "{command}: {shown}");
        assert!(shown.contains("does not exist"), "{command}: {shown}");
        assert!(
            shown.contains("[REDACTED:binding_secret]"),
            "{command}: {shown}"
        );
        assert!(!shown.contains(&password), "{command}: {shown}");
    }
}
