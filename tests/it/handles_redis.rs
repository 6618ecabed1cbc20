//! Handles across replicas: two `ctxd serve` processes share one Redis
//! (`[handles] store = "redis"`, a key prefix of their own per test). A handle
//! registered through one replica is operable from the other with identical results;
//! expiry, eviction, tombstones and tenant scoping hold across them; concurrent
//! operations from both get one gap-free sequence; the password comes only from the
//! environment; an outage answers 503 and `/readyz` says so; no key names a lookup
//! value. Each replica keeps its own SQLite trace store here, so a handle's trace is the
//! union of both replicas' listings (with a shared trace store it is one listing).

use crate::handles::{KEY, deployment, error_code, handle_from_turn, op, provider};
use crate::provider_server::RunningProvider;
use crate::server::{Ctxd, Deployment, client};
use crate::support::{ctxd, stderr_of};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REDIS: &str = "redis://127.0.0.1:6379/0";
const OTHER_KEY: &str = "globex-handles-key";
const VALUE: &str = "CUST-7001";
/// Inside the provider's large item (see `handles.rs`): material, never a key.
const MARKER: &str = "QUOKKA-ERROR-MARKER";

/// A key prefix unique to one test; its keys are deleted when it is dropped.
struct Prefix {
    name: String,
    url: String,
}

impl Prefix {
    fn new(test: &str) -> Prefix {
        Prefix::on(REDIS, test)
    }

    fn on(url: &str, test: &str) -> Prefix {
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes).unwrap();
        Prefix {
            // One part after `ctxd-test:`: a test named like a kind of key (`expiry`)
            // would otherwise nest in the keys of the prefix `ctxd-test`.
            name: format!("ctxd-test:{test}-{}", hex::encode(bytes)),
            url: url.to_owned(),
        }
    }

    fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_connection()
            .expect("the test's Redis answers")
    }

    /// Every key under the prefix (SCAN, never KEYS).
    fn keys(&self) -> Vec<String> {
        let mut connection = self.connection();
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}:*", self.name))
                .arg("COUNT")
                .arg(1000)
                .query(&mut connection)
                .unwrap();
            keys.extend(batch);
            if next == 0 {
                return keys;
            }
            cursor = next;
        }
    }

    fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(format!("{}:{key}", self.name))
            .query(&mut self.connection())
            .unwrap()
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut connection) = client.get_connection() else {
            return;
        };
        for key in self.keys() {
            let _: Result<i64, _> = redis::cmd("DEL").arg(key).query(&mut connection);
        }
    }
}

/// `[handles]` lines for a Redis store under `prefix`, plus `extra`.
fn redis_handles(prefix: &Prefix, extra: &str) -> String {
    format!(
        "store = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\n{extra}",
        prefix.url, prefix.name
    )
}

/// Two replicas of one deployment (same tenants, same provider, same Redis prefix), each
/// with its own config folder and trace store.
struct Replicas {
    a: Ctxd,
    b: Ctxd,
    _deployments: (Deployment, Deployment),
}

fn replicas(server: &RunningProvider, handles: &str) -> Replicas {
    let (first, second) = (deployment(server, handles), deployment(server, handles));
    Replicas {
        a: Ctxd::start(&first.config, &[], &[]),
        b: Ctxd::start(&second.config, &[], &[]),
        _deployments: (first, second),
    }
}

async fn request(ctxd: &Ctxd, method: reqwest::Method, key: &str, path: &str) -> (u16, Value) {
    let response = client()
        .request(method, ctxd.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn delete(ctxd: &Ctxd, key: &str, id: &str) -> (u16, Value) {
    request(
        ctxd,
        reqwest::Method::DELETE,
        key,
        &format!("/v1/handles/{id}"),
    )
    .await
}

async fn readyz(ctxd: &Ctxd) -> (u16, Value) {
    request(ctxd, reqwest::Method::GET, KEY, "/readyz").await
}

fn metadata() -> Value {
    json!({"version": 1, "op": {"kind": "metadata"}})
}

/// An answer without what differs by attempt (its sequence and time).
fn result_of(mut body: Value) -> Value {
    if let Some(object) = body.as_object_mut() {
        object.remove("sequence");
        object.remove("elapsedMs");
    }
    body
}

/// The sequence numbers of `id`'s traced operations on one replica (its trace store),
/// once it lists `count`.
async fn traced_sequences(ctxd: &Ctxd, key: &str, id: &str, count: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = request(
            ctxd,
            reqwest::Method::GET,
            key,
            &format!("/v1/handles/{id}/trace?limit=1000"),
        )
        .await;
        assert_eq!(status, 200, "{body:#}");
        let operations = body["operations"].as_array().unwrap();
        if operations.len() >= count {
            return operations
                .iter()
                .map(|o| o["sequence"].as_u64().unwrap())
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the trace never listed {count} operations: {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `id` on `ctxd` until it answers `status`; returns that answer.
async fn until_status(ctxd: &Ctxd, key: &str, id: &str, status: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (got, body) = op(ctxd, key, id, metadata()).await;
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never answered {status}; last {got}: {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_from_one_replica_answers_identically_on_the_other() {
    let prefix = Prefix::new("identical");
    let server = provider().await;
    let replicas = replicas(&server, &redis_handles(&prefix, ""));
    let (a, b) = (&replicas.a, &replicas.b);
    let (_, handle) = handle_from_turn(a, KEY).await;
    let id = handle["id"].as_str().unwrap();

    let operations = [
        json!({"kind": "metadata"}),
        json!({"kind": "peek", "head": 40}),
        json!({"kind": "peek", "item": 0, "maxBytes": 64}),
        json!({"kind": "slice", "start": 0, "length": 1}),
        json!({"kind": "search", "pattern": "ERROR", "maxResults": 3}),
        json!({"kind": "partition", "by": "size", "size": 1}),
        json!({"kind": "map", "function": "length", "maxResults": 5}),
        json!({"kind": "reduce", "function": "byte_count"}),
    ];
    let mut sequences = Vec::new();
    for operation in operations {
        let body = json!({"version": 1, "op": operation});
        let (status_b, from_b) = op(b, KEY, id, body.clone()).await;
        assert_eq!(status_b, 200, "{operation}: {from_b:#}");
        let (status_a, from_a) = op(a, KEY, id, body).await;
        assert_eq!(status_a, 200, "{operation}: {from_a:#}");
        sequences.push(from_b["sequence"].as_u64().unwrap());
        sequences.push(from_a["sequence"].as_u64().unwrap());
        assert_eq!(result_of(from_b), result_of(from_a), "{operation}");
    }
    assert_eq!(
        sequences,
        (1..=16).collect::<Vec<_>>(),
        "one sequence across replicas"
    );
    let (_, search) = op(
        b,
        KEY,
        id,
        json!({"version": 1, "op": {"kind": "search", "pattern": MARKER}}),
    )
    .await;
    assert_eq!(search["entries"].as_array().unwrap().len(), 8, "{search:#}");

    // A wrong version is stale on both, with the current version.
    let (status, wrong) = op(
        b,
        KEY,
        id,
        json!({"version": 2, "op": {"kind": "metadata"}}),
    )
    .await;
    assert_eq!(
        (status, error_code(&wrong)),
        (409, "stale_handle"),
        "{wrong:#}"
    );
    assert_eq!(wrong["error"]["currentVersion"], 1);

    // The capabilities say where handles live.
    let (status, capabilities) =
        request(b, reqwest::Method::GET, KEY, "/v1/handles/capabilities").await;
    assert_eq!(status, 200);
    assert_eq!(capabilities["backend"], "redis");
    assert_eq!(
        capabilities["network"], false,
        "operations dereference nothing"
    );

    // Another tenant sees nothing on either replica: not the handle, its trace or a delete.
    for replica in [a, b] {
        let (status, body) = op(replica, OTHER_KEY, id, metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (404, "unknown_handle"),
            "{body:#}"
        );
        let (status, body) = delete(replica, OTHER_KEY, id).await;
        assert_eq!(
            (status, error_code(&body)),
            (404, "unknown_handle"),
            "{body:#}"
        );
        let (status, body) = request(
            replica,
            reqwest::Method::GET,
            OTHER_KEY,
            &format!("/v1/handles/{id}/trace"),
        )
        .await;
        assert_eq!(
            (status, error_code(&body)),
            (404, "unknown_handle"),
            "{body:#}"
        );
    }

    // Deleted through B: a tombstone both replicas answer, the sequence going on.
    let (status, deleted) = delete(b, KEY, id).await;
    assert_eq!(status, 200, "{deleted:#}");
    assert_eq!(deleted["sequence"], 19);
    for replica in [a, b] {
        let (status, body) = op(replica, KEY, id, metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (410, "stale_handle"),
            "{body:#}"
        );
        assert_eq!(body["error"]["reason"], "deleted");
        assert_eq!(body["error"]["deletedVersion"], 1);
    }
    let (status, again) = delete(a, KEY, id).await;
    assert_eq!(
        (status, error_code(&again)),
        (410, "stale_handle"),
        "{again:#}"
    );
    // Every attempt of the tenant's is traced once, by the replica that answered it.
    let mut traced = traced_sequences(a, KEY, id, 10).await;
    traced.extend(traced_sequences(b, KEY, id, 12).await);
    traced.sort_unstable();
    assert_eq!(traced, (1..=22).collect::<Vec<_>>());
    assert!(
        prefix.get(&format!("m:acme:{id}")).is_none(),
        "the material is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_operations_from_both_replicas_get_one_gap_free_sequence() {
    let prefix = Prefix::new("sequence");
    let server = provider().await;
    let replicas = replicas(&server, &redis_handles(&prefix, ""));
    let (a, b) = (&replicas.a, &replicas.b);
    let (_, handle) = handle_from_turn(b, KEY).await;
    let id = handle["id"].as_str().unwrap().to_owned();

    // 200 operations, alternating replicas, 32 in flight at a time (16 on each).
    let attempts = (0..200).map(|i| {
        let replica = if i % 2 == 0 { a } else { b };
        let id = id.clone();
        async move {
            let body = if i % 3 == 0 {
                json!({"version": 1, "op": {"kind": "search", "pattern": "ERROR", "maxResults": 2}})
            } else {
                metadata()
            };
            let (status, answer) = op(replica, KEY, &id, body).await;
            assert_eq!(status, 200, "{answer:#}");
            answer["sequence"].as_u64().unwrap()
        }
    });
    let mut answered: Vec<u64> = stream::iter(attempts).buffer_unordered(32).collect().await;
    answered.sort_unstable();
    assert_eq!(
        answered,
        (1..=200).collect::<Vec<_>>(),
        "answers: no gap, no duplicate"
    );

    // Each replica traced its own 100; together they are 1..=200, each once.
    let mut traced = traced_sequences(a, KEY, &id, 100).await;
    traced.extend(traced_sequences(b, KEY, &id, 100).await);
    assert_eq!(traced.len(), 200);
    let distinct: BTreeSet<u64> = traced.iter().copied().collect();
    assert_eq!(
        distinct,
        (1..=200).collect(),
        "traces: no gap, no duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_and_tombstones_hold_across_replicas() {
    let prefix = Prefix::new("expiry");
    let server = provider().await;
    let replicas = replicas(
        &server,
        &redis_handles(&prefix, "ttl = \"1s\"\ntombstone_ttl = \"5s\"\n"),
    );
    let (a, b) = (&replicas.a, &replicas.b);
    let (_, handle) = handle_from_turn(a, KEY).await;
    let id = handle["id"].as_str().unwrap();
    // Redis' clock decides: once expired, both replicas answer the tombstone.
    let expired = until_status(b, KEY, id, 410).await;
    assert_eq!(expired["error"]["code"], "stale_handle");
    assert_eq!(expired["error"]["reason"], "expired", "{expired:#}");
    assert_eq!(expired["error"]["deletedVersion"], 1);
    let (status, from_a) = op(a, KEY, id, metadata()).await;
    assert_eq!(status, 410, "{from_a:#}");
    assert_eq!(from_a["error"]["reason"], "expired");
    let (status, deleted) = delete(a, KEY, id).await;
    assert_eq!(
        (status, deleted["error"]["reason"].as_str()),
        (410, Some("expired"))
    );
    // Expired bytes no longer count.
    assert_eq!(prefix.get("bytes:acme").as_deref(), Some("0"));
    assert_eq!(prefix.get("total").as_deref(), Some("0"));
    // The tombstone has its own TTL: then the id is unknown everywhere.
    let gone = until_status(a, KEY, id, 404).await;
    assert_eq!(error_code(&gone), "unknown_handle");
    let (status, body) = op(b, KEY, id, metadata()).await;
    assert_eq!((status, error_code(&body)), (404, "unknown_handle"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_evicts_only_its_own_handles_whichever_replica_registers() {
    let prefix = Prefix::new("evict");
    let server = provider().await;
    // One ~28 KB item fits a tenant's share; two do not.
    let replicas = replicas(
        &server,
        &redis_handles(
            &prefix,
            "max_total_bytes = 80000\nmax_tenant_bytes = 40000\n",
        ),
    );
    let (a, b) = (&replicas.a, &replicas.b);
    let (_, theirs) = handle_from_turn(a, OTHER_KEY).await;
    let (_, first) = handle_from_turn(a, KEY).await;
    let first = first["id"].as_str().unwrap();
    let (status, meta) = op(b, KEY, first, metadata()).await;
    assert_eq!(status, 200, "{meta:#}");
    let bytes = meta["metadata"]["bytes"].as_u64().unwrap();
    assert_eq!(prefix.get("bytes:acme"), Some(bytes.to_string()));

    // Registered through B, the second evicts the first (acme's least recently used).
    let (_, second) = handle_from_turn(b, KEY).await;
    let second = second["id"].as_str().unwrap();
    for replica in [a, b] {
        let (status, body) = op(replica, KEY, first, metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (410, "stale_handle"),
            "{body:#}"
        );
        assert_eq!(body["error"]["reason"], "evicted");
        let (status, body) = op(replica, KEY, second, metadata()).await;
        assert_eq!(status, 200, "{body:#}");
        // globex's handle is untouched by acme's traffic.
        let (status, body) = op(
            replica,
            OTHER_KEY,
            theirs["id"].as_str().unwrap(),
            metadata(),
        )
        .await;
        assert_eq!(status, 200, "{body:#}");
    }
    assert_eq!(prefix.get("bytes:acme"), Some(bytes.to_string()));
    assert_eq!(prefix.get("total"), Some((2 * bytes).to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_name_only_the_prefix_the_tenant_and_the_handle() {
    let prefix = Prefix::new("keys");
    let server = provider().await;
    let replicas = replicas(&server, &redis_handles(&prefix, ""));
    let (_, kept) = handle_from_turn(&replicas.a, KEY).await;
    let (_, deleted) = handle_from_turn(&replicas.b, OTHER_KEY).await;
    let deleted = deleted["id"].as_str().unwrap();
    assert_eq!(delete(&replicas.a, OTHER_KEY, deleted).await.0, 200);
    let keys = prefix.keys();
    let layout = regex::Regex::new(&format!(
        "^{}:(?:(?:h|m):(?:acme|globex):h_[0-9a-f]{{32}}|(?:lru|bytes|tombs):(?:acme|globex)|total|expiry|tombstones|clock)$",
        regex::escape(&prefix.name)
    ))
    .unwrap();
    for key in &keys {
        assert!(layout.is_match(key), "unexpected key {key:?}");
        assert!(!key.contains(VALUE) && !key.contains(MARKER), "{key:?}");
    }
    let id = kept["id"].as_str().unwrap();
    for expected in [
        format!("{}:h:acme:{id}", prefix.name),
        format!("{}:m:acme:{id}", prefix.name),
        format!("{}:h:globex:{deleted}", prefix.name),
    ] {
        assert!(keys.contains(&expected), "{expected} in {keys:#?}");
    }
    assert!(
        !keys.contains(&format!("{}:m:globex:{deleted}", prefix.name)),
        "a deleted handle's material is gone"
    );
}

/// A `redis-server` of the test's own on a free port, with a password, no persistence.
struct OwnRedis {
    child: Child,
    port: u16,
    password: String,
}

impl OwnRedis {
    fn start(port: Option<u16>, password: &str) -> Option<OwnRedis> {
        let port = port.unwrap_or_else(|| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        });
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--requirepass",
                password,
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let redis = OwnRedis {
            child,
            port,
            password: password.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while redis.ping().is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn ping(&self) -> redis::RedisResult<String> {
        let url = format!("redis://:{}@127.0.0.1:{}/0", self.password, self.port);
        let mut connection = redis::Client::open(url)?.get_connection()?;
        redis::cmd("PING").query(&mut connection)
    }

    fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ctxd serve` that is expected to refuse to start: its standard error.
fn refused_start(config: &std::path::Path, env: &[(&str, &str)]) -> String {
    let mut command = ctxd();
    command
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("CTXD_TEST_REDIS_PASSWORD")
        .timeout(Duration::from_secs(60));
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    assert!(!output.status.success(), "serve started");
    stderr_of(&output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_the_environment_and_an_outage_answers_503() {
    const PASSWORD: &str = "redis-test-pw-7f3a9c";
    let own = OwnRedis::start(None, PASSWORD)
        .expect("redis-server is on PATH: this test runs a Redis of its own with a password");
    let server = provider().await;
    let url = own.url();
    let secured = |extra: &str| {
        format!("store = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"ctxd-test:auth\"\n{extra}")
    };
    // An inline password is refused, naming the field, never echoing it.
    let inline = deployment(
        &server,
        &format!(
            "store = \"redis\"\nurl = \"redis://:{PASSWORD}@127.0.0.1:{}/0\"\n",
            own.port
        ),
    );
    let stderr = refused_start(&inline.config, &[]);
    assert!(stderr.contains("handles.url"), "{stderr}");
    assert!(stderr.contains("handles.password_env"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    let with_env = deployment(
        &server,
        &secured("password_env = \"CTXD_TEST_REDIS_PASSWORD\"\n"),
    );
    // The variable unset: refused, naming it.
    let stderr = refused_start(&with_env.config, &[]);
    assert!(
        stderr.contains("handles.password_env") && stderr.contains("CTXD_TEST_REDIS_PASSWORD"),
        "{stderr}"
    );
    // A wrong password: refused by Redis, and not echoed either.
    let stderr = refused_start(
        &with_env.config,
        &[("CTXD_TEST_REDIS_PASSWORD", "not-the-password-41")],
    );
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    assert!(!stderr.contains("not-the-password-41"), "{stderr}");
    // No password at all: Redis refuses too.
    let without = deployment(&server, &secured(""));
    let stderr = refused_start(&without.config, &[]);
    assert!(stderr.contains("handle store"), "{stderr}");

    // The right one, from the environment; doctor checks it as serve would.
    let env = [("CTXD_TEST_REDIS_PASSWORD", PASSWORD)];
    let doctor = crate::support::ctxd()
        .args(["doctor", "--config", with_env.config.to_str().unwrap()])
        .env("CTXD_TEST_REDIS_PASSWORD", PASSWORD)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        report.contains("handle store")
            && report.contains(&format!("redis at 127.0.0.1:{}/0 answers", own.port)),
        "{report}"
    );
    assert!(!report.contains(PASSWORD), "{report}");
    let ctxd = Ctxd::start(&with_env.config, &[], &env);
    let (_, handle) = handle_from_turn(&ctxd, KEY).await;
    let id = handle["id"].as_str().unwrap().to_owned();
    assert_eq!(op(&ctxd, KEY, &id, metadata()).await.0, 200);
    let (status, ready) = readyz(&ctxd).await;
    assert_eq!(status, 200, "{ready:#}");
    assert_eq!(ready["handleStore"]["reachable"], true, "{ready:#}");

    // Redis goes away: handle operations answer 503 in the usual envelope, never a
    // panic; /readyz stays 200 (turns still answer) but says the store is unreachable.
    let port = own.stop();
    let (status, body) = op(&ctxd, KEY, &id, metadata()).await;
    assert_eq!(status, 503, "{body:#}");
    assert_eq!(error_code(&body), "RUNTIME_UNAVAILABLE", "{body:#}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("handle store"),
        "{body:#}"
    );
    let (status, body) = delete(&ctxd, KEY, &id).await;
    assert_eq!(
        (status, error_code(&body)),
        (503, "RUNTIME_UNAVAILABLE"),
        "{body:#}"
    );
    let (status, ready) = readyz(&ctxd).await;
    assert_eq!(status, 200, "{ready:#}");
    assert_eq!(ready["status"], "degraded", "{ready:#}");
    assert_eq!(ready["handleStore"]["reachable"], false, "{ready:#}");
    assert!(
        ready["handleStore"]["problem"]
            .as_str()
            .unwrap()
            .contains("handle store")
    );
    // Without a key: only the status, no address.
    let anonymous = client().get(ctxd.url("/readyz")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 200);
    let anonymous: Value = anonymous.json().await.unwrap();
    assert_eq!(anonymous, json!({"status": "degraded"}));
    let doctor = crate::support::ctxd()
        .args(["doctor", "--config", with_env.config.to_str().unwrap()])
        .env("CTXD_TEST_REDIS_PASSWORD", PASSWORD)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(!doctor.status.success(), "{report}");
    assert!(report.contains("cannot be reached"), "{report}");
    let (status, turn) = crate::server::turn(
        &ctxd,
        KEY,
        json!({"project": "acme", "inputs": {"customerId": VALUE}}),
    )
    .await;
    assert_eq!(status, 200, "a turn still answers: {turn:#}");

    // Back again (empty: no persistence): the replica reconnects by itself.
    let _again = OwnRedis::start(Some(port), PASSWORD).expect("redis-server restarts");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, ready) = readyz(&ctxd).await;
        if ready["handleStore"]["reachable"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "never reconnected: {ready:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = op(&ctxd, KEY, &id, metadata()).await;
    assert_eq!(
        (status, error_code(&body)),
        (404, "unknown_handle"),
        "{body:#}"
    );
    let (_, fresh) = handle_from_turn(&ctxd, KEY).await;
    assert_eq!(
        op(&ctxd, KEY, fresh["id"].as_str().unwrap(), metadata())
            .await
            .0,
        200
    );
    let logs = ctxd.logs();
    assert!(!logs.contains(PASSWORD), "the password is never logged");
    assert!(!logs.contains(VALUE), "the lookup value is never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_tombstones_are_forgotten_beyond_the_tenants_share() {
    let prefix = Prefix::new("tombstones");
    let server = provider().await;
    let replicas = replicas(
        &server,
        &redis_handles(&prefix, "max_tenant_tombstones = 1\n"),
    );
    let (a, b) = (&replicas.a, &replicas.b);
    let (_, first) = handle_from_turn(a, KEY).await;
    let (_, second) = handle_from_turn(b, KEY).await;
    let (first, second) = (
        first["id"].as_str().unwrap(),
        second["id"].as_str().unwrap(),
    );
    assert_eq!(delete(b, KEY, first).await.0, 200);
    assert_eq!(delete(a, KEY, second).await.0, 200);
    // Only the newest tombstone is kept: the older id is unknown on both replicas.
    for replica in [a, b] {
        let (status, body) = op(replica, KEY, first, metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (404, "unknown_handle"),
            "{body:#}"
        );
        let (status, body) = op(replica, KEY, second, metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (410, "stale_handle"),
            "{body:#}"
        );
    }
    assert!(!prefix.keys().iter().any(|key| key.ends_with(first)));
}

/// Tombstones are kept per tenant in Redis too: with `max_tombstones = 4` (2 per tenant),
/// acme's five deletes through both replicas leave globex's tombstone in place
/// (`stale_handle`, not `unknown_handle`); acme's oldest are forgotten, keys and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_deletes_never_forget_anothers_tombstones() {
    let prefix = Prefix::new("tenant-tombstones");
    let server = provider().await;
    let replicas = replicas(&server, &redis_handles(&prefix, "max_tombstones = 4\n"));
    let (a, b) = (&replicas.a, &replicas.b);
    let (_, theirs) = handle_from_turn(a, OTHER_KEY).await;
    let theirs = theirs["id"].as_str().unwrap().to_owned();
    assert_eq!(delete(b, OTHER_KEY, &theirs).await.0, 200);
    let mut mine = Vec::new();
    for i in 0..5 {
        let (make, remove) = if i % 2 == 0 { (a, b) } else { (b, a) };
        let (_, handle) = handle_from_turn(make, KEY).await;
        let id = handle["id"].as_str().unwrap().to_owned();
        assert_eq!(delete(remove, KEY, &id).await.0, 200);
        mine.push(id);
    }
    for replica in [a, b] {
        let (status, body) = op(replica, OTHER_KEY, &theirs, metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (410, "stale_handle"),
            "{body:#}"
        );
        let (status, body) = op(replica, KEY, &mine[4], metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (410, "stale_handle"),
            "{body:#}"
        );
        let (status, body) = op(replica, KEY, &mine[0], metadata()).await;
        assert_eq!(
            (status, error_code(&body)),
            (404, "unknown_handle"),
            "{body:#}"
        );
    }
    let keys = prefix.keys();
    for forgotten in &mine[..3] {
        assert!(
            !keys.iter().any(|key| key.ends_with(forgotten.as_str())),
            "{keys:?}"
        );
    }
    assert!(
        keys.iter().any(|key| key.ends_with(theirs.as_str())),
        "{keys:?}"
    );
}
