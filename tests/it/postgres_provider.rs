//! The `postgres` provider against the real PostgreSQL server on 127.0.0.1:5432 (trust
//! auth, database `test`): each test works in a schema of its own, with a random name,
//! dropped after. Read-only is the server's doing: every write is refused by it.

use crate::server::{Ctxd, Deployment, TenantSpec, layer_status, provider, turn};
use crate::support::{POSTGRES_ADMIN_DSN as ADMIN_DSN, postgres_admin as admin};
use ctxd::config::Binding;
use ctxd::contract::{ProviderStatus, Source};
use ctxd::outcome::Outcome;
use ctxd::providers::postgres::PostgresProvider;
use ctxd::providers::{LookupCall, PoolSettings};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_postgres::Client;

/// The lookup value of every test: it must never show in ctxd's logs.
const CUSTOMER: &str = "CUST-7f3a9c-lookup-value";

/// A schema with a random name holding `records`, dropped when the value drops.
struct Schema {
    name: String,
}

impl Schema {
    async fn create() -> Schema {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).unwrap();
        let name = format!("ctxd_it_{}", hex::encode(bytes));
        admin()
            .await
            .batch_execute(&format!(
                "CREATE SCHEMA {name};
                 CREATE TABLE {name}.records (
                     id text PRIMARY KEY, customer text NOT NULL, title text, content text,
                     updated_at timestamptz, metadata jsonb, priority int);
                 INSERT INTO {name}.records VALUES
                     ('ORD-1', '{CUSTOMER}', 'Order 1', 'Two boxes of tea', '2026-11-30T10:00:00Z',
                      '{{\"channel\": \"web\"}}', 2),
                     ('ORD-2', '{CUSTOMER}', 'Order 2', 'A kettle', '2026-11-29T09:30:00Z', NULL, 1),
                     ('ORD-3', 'CUST-other', 'Order 3', 'Not theirs', NULL, NULL, NULL);"
            ))
            .await
            .unwrap();
        Schema { name }
    }

    /// `records` of this schema, qualified.
    fn records(&self) -> String {
        format!("{}.records", self.name)
    }

    async fn count(&self) -> i64 {
        admin()
            .await
            .query_one(&format!("SELECT count(*) FROM {}", self.records()), &[])
            .await
            .unwrap()
            .get(0)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let name = self.name.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = admin()
                    .await
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await;
            });
        })
        .join()
        .unwrap();
    }
}

/// The pool settings a binding with `pool = { max_size = … }` gives.
fn pool(max_size: usize) -> PoolSettings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("binding.toml");
    std::fs::write(
        &path,
        format!(
            "revision = \"r1\"\n[providers.orders]\ntype = \"postgres\"\ndsn_env = \"ORDERS_DSN\"\n\
             query = \"SELECT $1 AS id\"\nversion = \"v1\"\npool = {{ max_size = {max_size} }}\n"
        ),
    )
    .unwrap();
    Binding::load(&path).unwrap().providers["orders"].pool
}

async fn open(query: &str) -> Result<PostgresProvider, String> {
    open_with(ADMIN_DSN, query, 4).await
}

async fn open_with(dsn: &str, query: &str, max_size: usize) -> Result<PostgresProvider, String> {
    PostgresProvider::open("ORDERS_DSN", Some(dsn), query, &pool(max_size))
        .await
        .map_err(|error| error.to_string())
}

async fn lookup_within(
    provider: &PostgresProvider,
    value: &str,
    limit: u32,
    within: Duration,
) -> Outcome {
    provider
        .lookup(&LookupCall {
            provider: "orders",
            key: "customerId",
            value,
            limit,
            deadline: Instant::now() + within,
            secrets: Default::default(),
        })
        .await
}

async fn lookup(provider: &PostgresProvider, value: &str) -> Outcome {
    lookup_within(provider, value, 10, Duration::from_secs(2)).await
}

fn assert_failed(outcome: &Outcome, status: ProviderStatus, detail: &str) {
    assert_eq!(outcome.status(), status, "{outcome:?}");
    assert_eq!(outcome.detail(), Some(detail), "{outcome:?}");
    assert!(outcome.items_found().is_empty());
}

fn orders_query(schema: &Schema) -> String {
    format!(
        "SELECT id, title, content, updated_at, metadata, priority FROM {} WHERE customer = $1 ORDER BY updated_at DESC",
        schema.records()
    )
}

#[tokio::test]
async fn a_lookup_maps_rows_to_items_and_no_row_is_not_found() {
    let schema = Schema::create().await;
    let provider = open(&orders_query(&schema)).await.unwrap();

    let outcome = lookup(&provider, CUSTOMER).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.source, Source::Live);
    let items = serde_json::to_value(outcome.items_found()).unwrap();
    assert_eq!(
        items,
        json!([
            {"id": "ORD-1", "title": "Order 1", "content": "Two boxes of tea",
             "metadata": {"channel": "web", "priority": 2}, "updatedAt": "2026-11-30T10:00:00Z"},
            {"id": "ORD-2", "title": "Order 2", "content": "A kettle",
             "metadata": {"priority": 1}, "updatedAt": "2026-11-29T09:30:00Z"},
        ])
    );
    let limited = lookup_within(&provider, CUSTOMER, 1, Duration::from_secs(2)).await;
    assert_eq!(limited.items_found().len(), 1);

    let none = lookup(&provider, "CUST-nobody").await;
    assert_eq!(none.status(), ProviderStatus::NotFound, "{none:?}");
    assert_eq!(none.detail(), None);
}

#[tokio::test]
async fn queries_that_do_not_prepare_are_refused_with_the_servers_message() {
    let schema = Schema::create().await;
    let records = schema.records();
    for (query, needle) in [
        (
            format!("SELECT id FROM {records} WHERE customer = $1; SELECT 1"),
            "cannot insert multiple commands into a prepared statement",
        ),
        (
            format!("SELECT id FROM {records} WHERE customer = $2"),
            "must use $1 as its only parameter",
        ),
        (
            format!("SELECT id FROM {records} WHERE customer = $1 AND title = $2"),
            "must use $1 as its only parameter (it has 2 parameters)",
        ),
        (
            format!("SELECT id FROM {records}"),
            "must use $1 as its only parameter (it has no parameter)",
        ),
        (
            format!("SELECT id FROM {}.missing WHERE k = $1", schema.name),
            "does not exist",
        ),
        ("SELEKT id WHERE $1".to_owned(), "syntax error"),
        (
            format!("SELECT id FROM {records} WHERE priority = $1"),
            "operator does not exist: integer = text",
        ),
        (
            format!("SELECT title FROM {records} WHERE customer = $1"),
            "returns no `id` column",
        ),
        (
            format!("SELECT id, 1.5::numeric AS price FROM {records} WHERE customer = $1"),
            "column `price` has type numeric",
        ),
    ] {
        let error = open(&query)
            .await
            .err()
            .unwrap_or_else(|| panic!("{query} opened"));
        assert!(error.starts_with("query: "), "{query}: {error}");
        assert!(error.contains(needle), "{query}: {error}");
    }
}

#[tokio::test]
async fn every_write_is_refused_by_the_server() {
    let schema = Schema::create().await;
    let records = schema.records();
    let name = &schema.name;
    let before = schema.count().await;
    for (query, needle) in [
        (
            format!("INSERT INTO {records} (id, customer) VALUES ('new', $1) RETURNING id"),
            "cannot execute INSERT in a read-only transaction",
        ),
        (
            format!("UPDATE {records} SET title = 'x' WHERE customer = $1 RETURNING id"),
            "cannot execute UPDATE in a read-only transaction",
        ),
        (
            format!("DELETE FROM {records} WHERE customer = $1 OR true RETURNING id"),
            "cannot execute DELETE in a read-only transaction",
        ),
        (
            format!("WITH gone AS (DELETE FROM {records} RETURNING id) SELECT id FROM gone WHERE $1 IS NULL OR true"),
            "in a read-only transaction",
        ),
        (
            format!("CREATE TABLE {name}.copied AS SELECT id FROM {records} WHERE customer = $1"),
            "",
        ),
        (
            format!("CREATE TABLE {name}.made (id text)"),
            "must use $1 as its only parameter",
        ),
        (
            format!("INSERT INTO {records} (id, customer) VALUES ('new', $1)"),
            "returns no rows",
        ),
        (
            format!("COPY (SELECT id FROM {records}) TO PROGRAM 'touch /tmp/ctxd-copy-{name}'"),
            "must use $1 as its only parameter",
        ),
        (
            format!("COPY (SELECT id FROM {records} WHERE customer = $1) TO PROGRAM 'touch /tmp/ctxd-copy-{name}'"),
            "must use $1 as its only parameter",
        ),
        (
            "SET transaction_read_only = off".to_owned(),
            "must use $1 as its only parameter",
        ),
        (
            "SELECT set_config('transaction_read_only', 'off', false) AS id WHERE $1 IS NULL OR true".to_owned(),
            "transaction read-write mode must be set before any query",
        ),
        (format!("VACUUM {records}"), "must use $1 as its only parameter"),
    ] {
        let error = open(&query).await.err().unwrap_or_else(|| panic!("{query} opened"));
        assert!(error.starts_with("query: "), "{query}: {error}");
        assert!(error.contains(needle), "{query}: {error}");
    }
    assert_eq!(schema.count().await, before);
    assert!(!std::path::Path::new(&format!("/tmp/ctxd-copy-{name}")).exists());
    let tables: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&schema.name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "only `records`");
}

#[tokio::test]
async fn a_write_the_dry_run_does_not_reach_is_refused_at_lookup() {
    let schema = Schema::create().await;
    let name = &schema.name;
    // Writes only for a real value, so opening (which runs the query with NULL) passes.
    admin()
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION {name}.sneaky(k text) RETURNS text LANGUAGE plpgsql AS $$
             BEGIN
               IF k IS NOT NULL THEN
                 INSERT INTO {name}.records (id, customer) VALUES ('sneaky', k);
                 PERFORM set_config('transaction_read_only', 'off', true);
               END IF;
               RETURN k;
             END $$;"
        ))
        .await
        .unwrap();
    let before = schema.count().await;
    let provider = open(&format!("SELECT {name}.sneaky($1) AS id"))
        .await
        .unwrap();
    let outcome = lookup(&provider, CUSTOMER).await;
    assert_failed(&outcome, ProviderStatus::Unavailable, "DATABASE_ERROR");
    assert_eq!(schema.count().await, before);

    // `default_transaction_read_only` is not the guard: each lookup says READ ONLY
    // itself, and the setting is rolled back with the lookup's transaction anyway.
    let provider = open(&format!(
        "SELECT set_config('default_transaction_read_only', 'off', false) AS id, \
         (SELECT count(*) FROM {name}.records)::text AS content WHERE $1 IS NOT NULL"
    ))
    .await
    .unwrap();
    let outcome = lookup(&provider, CUSTOMER).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    let writer = open(&format!("SELECT {name}.sneaky($1) AS id"))
        .await
        .unwrap();
    let outcome = lookup(&writer, CUSTOMER).await;
    assert_failed(&outcome, ProviderStatus::Unavailable, "DATABASE_ERROR");
    assert_eq!(schema.count().await, before);
}

/// The backends of ctxd running a query that holds `marker` (each test sleeps in a
/// query of its own), as the server lists them.
async fn sleeping_backends(admin: &Client, marker: &str) -> i64 {
    let pattern = format!("%{marker}%");
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = 'ctxd' AND query LIKE $1 AND state = 'active'",
            &[&pattern],
        )
        .await
        .unwrap()
        .get(0)
}

/// Polls (for at most 2 s, else fails saying `never`) until the number of ctxd's
/// sleeping backends satisfies `done`; how long it took.
async fn poll_sleepers(
    admin: &Client,
    marker: &str,
    done: impl Fn(i64) -> bool,
    never: &str,
) -> Duration {
    let started = Instant::now();
    while !done(sleeping_backends(admin, marker).await) {
        assert!(started.elapsed() < Duration::from_secs(2), "{never}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

/// Polls until no backend of ctxd sleeps; how long it took.
async fn sleepers_gone(admin: &Client, marker: &str) -> Duration {
    poll_sleepers(admin, marker, |n| n == 0, "a pg_sleep query kept running").await
}

/// Sleeps a minute for a real value; NULL (the dry run at open) does not sleep.
fn slow(marker: &str) -> String {
    format!(
        "SELECT $1 AS id, pg_sleep(CASE WHEN $1 IS NULL THEN 0 ELSE 60 END)::text AS content /* {marker} */"
    )
}

#[tokio::test]
async fn a_slow_query_is_cut_at_the_deadline_and_cancelled_on_the_server() {
    let admin = admin().await;
    let provider = open(&slow("cut-at-deadline")).await.unwrap();
    let started = Instant::now();
    let outcome = lookup_within(&provider, CUSTOMER, 10, Duration::from_millis(400)).await;
    assert_failed(&outcome, ProviderStatus::Timeout, "DEADLINE");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    sleepers_gone(&admin, "cut-at-deadline").await;

    // Abandoned before its deadline (the turn was answered without it): cancelled too.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        lookup_within(&provider, CUSTOMER, 10, Duration::from_secs(5)),
    )
    .await;
    assert!(abandoned.is_err());
    sleepers_gone(&admin, "cut-at-deadline").await;

    // The pool still serves: a fresh connection replaced the discarded ones.
    let fast = open("SELECT $1 AS id").await.unwrap();
    assert_eq!(lookup(&fast, CUSTOMER).await.status(), ProviderStatus::Ok);
}

#[tokio::test]
async fn an_exhausted_pool_answers_overloaded() {
    let provider = open_with(ADMIN_DSN, &slow("exhausted-pool"), 1)
        .await
        .unwrap();
    let holder = {
        let provider = provider.clone();
        tokio::spawn(
            async move { lookup_within(&provider, CUSTOMER, 10, Duration::from_secs(2)).await },
        )
    };
    // The pool's one connection is taken once the holder's query runs on the server: a
    // fixed pause could end before that on a busy machine.
    let admin = admin().await;
    poll_sleepers(
        &admin,
        "exhausted-pool",
        |n| n >= 1,
        "the holder's query never started",
    )
    .await;
    let started = Instant::now();
    let outcome = lookup_within(&provider, CUSTOMER, 10, Duration::from_millis(300)).await;
    assert_failed(&outcome, ProviderStatus::Unavailable, "OVERLOADED");
    assert!(started.elapsed() < Duration::from_millis(1500));
    let held = holder.await.unwrap();
    assert_failed(&held, ProviderStatus::Timeout, "DEADLINE");
    sleepers_gone(&admin, "exhausted-pool").await;
}

#[tokio::test]
async fn metadata_must_be_a_json_object() {
    let schema = Schema::create().await;
    let records = schema.records();
    let error = open(&format!(
        "SELECT id, title AS metadata FROM {records} WHERE customer = $1"
    ))
    .await
    .err()
    .unwrap();
    assert!(
        error.contains("column `metadata` has type text: it must be json or jsonb"),
        "{error}"
    );
    let provider = open(&format!(
        "SELECT id, '[1, 2]'::jsonb AS metadata FROM {records} WHERE customer = $1"
    ))
    .await
    .unwrap();
    let outcome = lookup(&provider, CUSTOMER).await;
    assert_failed(&outcome, ProviderStatus::InvalidResponse, "MALFORMED");
}

#[tokio::test]
async fn a_ten_megabyte_content_is_refused() {
    let provider = open("SELECT $1 AS id, repeat('x', 10 * 1024 * 1024) AS content")
        .await
        .unwrap();
    let outcome = lookup(&provider, CUSTOMER).await;
    assert_failed(
        &outcome,
        ProviderStatus::LimitExceeded,
        "RESPONSE_TOO_LARGE",
    );
    // Just over the per-item bound, under the response bound: the item is refused.
    let provider = open("SELECT $1 AS id, repeat('x', 70 * 1024) AS content")
        .await
        .unwrap();
    let outcome = lookup(&provider, CUSTOMER).await;
    assert_failed(&outcome, ProviderStatus::LimitExceeded, "ITEM_TOO_LARGE");
}

#[tokio::test]
async fn ten_thousand_matching_rows_give_the_limit() {
    let schema = Schema::create().await;
    let records = schema.records();
    admin()
        .await
        .batch_execute(&format!(
            "INSERT INTO {records} (id, customer, content)
             SELECT 'bulk-' || n, 'CUST-bulk', repeat('y', 20000) FROM generate_series(1, 10000) n"
        ))
        .await
        .unwrap();
    let provider = open(&format!(
        "SELECT id, content FROM {records} WHERE customer = $1 ORDER BY id"
    ))
    .await
    .unwrap();
    let started = Instant::now();
    // 10 rows of 20 kB are read; all 10,000 (200 MB) would break the response bound.
    let outcome = lookup_within(&provider, "CUST-bulk", 10, Duration::from_secs(5)).await;
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.items_found().len(), 10);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A TCP proxy on 127.0.0.1 in front of the server that can be stopped (listener closed,
/// every connection cut) and started again on the same port: the server going away and
/// coming back without touching the shared server.
struct Proxy {
    port: u16,
    running: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    async fn start_on(port: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let running = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect("127.0.0.1:5432").await else {
                        let _ = inbound.shutdown().await;
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        Proxy {
            port,
            running,
            task: Some(task),
        }
    }

    fn dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=test",
            self.port
        )
    }

    /// Closes the listener and cuts every connection (aborting the task drops them).
    async fn stop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

const KEY: &str = "pg-test-key";

fn deployment(query: &str, extra: &str) -> Deployment {
    let project = json!({
        "id": "orders", "version": "1",
        "providers": [{"id": "orders", "name": "Orders", "lookup": {"input": "customerId"}}],
        "layers": [{"id": "orders-layer", "name": "Orders", "bindings": [{"provider": "orders"}]}]
    })
    .to_string();
    let binding = format!(
        "revision = \"r1\"\n[providers.orders]\ntype = \"postgres\"\ndsn_env = \"ORDERS_DSN\"\n\
         query = {query:?}\nversion = \"orders-pg-1\"\n{extra}\n"
    );
    Deployment::new(&[TenantSpec::new(KEY, KEY, project, binding)])
}

async fn turn_for(ctxd: &Ctxd, value: &str) -> serde_json::Value {
    let (status, body) = turn(
        ctxd,
        KEY,
        json!({"project": "orders", "inputs": {"customerId": value}}),
    )
    .await;
    assert_eq!(status, 200, "{body:#}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_turns_answer_cut_slow_queries_and_never_log_the_value() {
    let schema = Schema::create().await;
    let admin = admin().await;
    let query = format!(
        "SELECT id, title, content, updated_at, pg_sleep(CASE WHEN $1 = 'slow-{CUSTOMER}' THEN 60 ELSE 0 END)::text AS slept /* served-turns */ \
         FROM {} WHERE customer = $1 OR $1 = 'slow-{CUSTOMER}'",
        schema.records()
    );
    let deployment = deployment(&query, "timeout_ms = 500");
    let ctxd = Ctxd::start(&deployment.config, &[], &[("ORDERS_DSN", ADMIN_DSN)]);

    let body = turn_for(&ctxd, CUSTOMER).await;
    assert_eq!(provider(&body, "orders")["status"], "OK", "{body:#}");
    assert_eq!(layer_status(&body, "orders-layer"), "INCLUDED", "{body:#}");

    let body = turn_for(&ctxd, "CUST-nobody").await;
    assert_eq!(provider(&body, "orders")["status"], "NOT_FOUND", "{body:#}");

    let slow = format!("slow-{CUSTOMER}");
    let started = Instant::now();
    let body = turn_for(&ctxd, &slow).await;
    assert_eq!(provider(&body, "orders")["status"], "TIMEOUT", "{body:#}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let gone_after = sleepers_gone(&admin, "served-turns").await;
    assert!(gone_after < Duration::from_secs(1), "{gone_after:?}");

    let logs = ctxd.logs();
    assert!(!logs.is_empty());
    assert!(
        !logs.contains(CUSTOMER),
        "the lookup value is in the logs:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_going_away_opens_the_breaker_and_calls_recover_when_it_returns() {
    let schema = Schema::create().await;
    let mut proxy = Proxy::start_on(0).await;
    let port = proxy.port;
    let deployment = deployment(
        &orders_query(&schema),
        "timeout_ms = 1000\ncircuit = { failure_rate = 1.0, consecutive_failures = 2, min_calls = 4, window = 4, open_ms = 500 }\npool = { connect_timeout_ms = 500 }",
    );
    let ctxd = Ctxd::start(&deployment.config, &[], &[("ORDERS_DSN", &proxy.dsn())]);
    let body = turn_for(&ctxd, CUSTOMER).await;
    assert_eq!(provider(&body, "orders")["status"], "OK", "{body:#}");

    proxy.stop().await;
    let mut details = Vec::new();
    for _ in 0..4 {
        let body = turn_for(&ctxd, CUSTOMER).await;
        let orders = provider(&body, "orders");
        assert_eq!(orders["status"], "UNAVAILABLE", "{body:#}");
        details.push(orders["detail"].as_str().unwrap_or_default().to_owned());
    }
    assert!(
        details[..2]
            .iter()
            .all(|d| d == "CONNECT_FAILED" || d == "CONNECTION_RESET"),
        "{details:?}"
    );
    assert_eq!(
        details[2..],
        ["CIRCUIT_OPEN", "CIRCUIT_OPEN"],
        "{details:?}"
    );

    let _proxy = Proxy::start_on(port).await;
    let started = Instant::now();
    loop {
        let body = turn_for(&ctxd, CUSTOMER).await;
        if provider(&body, "orders")["status"] == "OK" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no recovery: {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = ctxd.logs();
    assert!(
        !logs.contains(CUSTOMER),
        "the lookup value is in the logs:\n{logs}"
    );
}

/// `ctxd COMMAND --config …` of `deployment`, with `ORDERS_DSN` set to `dsn`.
async fn run_with_dsn(
    command: &'static str,
    deployment: &Deployment,
    dsn: &str,
) -> std::process::Output {
    let config = deployment.config.clone();
    let dsn = dsn.to_owned();
    tokio::task::spawn_blocking(move || {
        crate::support::ctxd()
            .args([command, "--config", config.to_str().unwrap()])
            .env_remove("CTXD_TEST_DIGEST_KEY")
            .env("ORDERS_DSN", dsn)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn validate_and_serve_refuse_a_write_with_the_servers_words() {
    let schema = Schema::create().await;
    let deployment = deployment(
        &format!(
            "UPDATE {} SET title = 'x' WHERE customer = $1 RETURNING id",
            schema.records()
        ),
        "",
    );
    let needle = "providers.orders.query: refused by the server in a read-only transaction: cannot execute UPDATE in a read-only transaction";
    let validate = run_with_dsn("validate", &deployment, ADMIN_DSN).await;
    let stdout = crate::support::stdout_of(&validate);
    assert_eq!(validate.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(needle), "{stdout}");
    let serve = run_with_dsn("serve", &deployment, ADMIN_DSN).await;
    let stderr = crate::support::stderr_of(&serve);
    assert!(!serve.status.success(), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");

    // A remote server without TLS is refused before anything is sent; the string, which
    // holds a password, is never shown.
    let remote =
        "host=db.example.invalid user=reader password=hunter2hunter2 dbname=orders sslmode=disable";
    let validate = run_with_dsn("validate", &deployment, remote).await;
    let stdout = crate::support::stdout_of(&validate);
    assert!(
        stdout.contains("providers.orders.dsn_env: the connection string in \"ORDERS_DSN\" sslmode=disable to a host that is not loopback"),
        "{stdout}"
    );
    assert!(!stdout.contains("hunter2"), "{stdout}");

    let good = deployment_for_schema(&schema);
    let validate = run_with_dsn("validate", &good, ADMIN_DSN).await;
    assert!(
        validate.status.success(),
        "{}",
        crate::support::stdout_of(&validate)
    );
}

fn deployment_for_schema(schema: &Schema) -> Deployment {
    deployment(&orders_query(schema), "")
}

#[tokio::test]
async fn doctor_reports_version_tls_and_a_role_that_can_write() {
    let schema = Schema::create().await;
    let deployment = deployment_for_schema(&schema);
    let output = run_with_dsn("doctor", &deployment, ADMIN_DSN).await;
    let stdout = crate::support::stdout_of(&output);
    assert!(stdout.contains("PostgreSQL 15"), "{stdout}");
    assert!(
        stdout.contains("the query prepares with $1 as its only parameter and runs read-only"),
        "{stdout}"
    );
    assert!(
        stdout.contains("does not use TLS, which is allowed only to a loopback host"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("warn") && line.contains("role \"postgres\" can write")),
        "{stdout}"
    );
}

#[tokio::test]
async fn tls_is_used_when_asked_and_verifies_the_server_certificate() {
    // The local server's certificate names `localhost` and sits among the system's
    // roots on these machines: asked for TLS to `localhost`, the connection uses it.
    let provider = open_with(
        "host=localhost port=5432 user=postgres dbname=test sslmode=require",
        "SELECT $1 AS id",
        1,
    )
    .await
    .unwrap();
    assert!(provider.tls_required());
    let report = provider.report().await.unwrap();
    assert!(report.tls, "{report:?}");
    assert_eq!(
        lookup(&provider, CUSTOMER).await.status(),
        ProviderStatus::Ok
    );

    // The same certificate does not name 127.0.0.1: verification refuses it.
    let error = open_with(
        "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=require",
        "SELECT $1 AS id",
        1,
    )
    .await
    .err()
    .expect("a certificate for another name is refused");
    assert!(error.starts_with("dsn_env: cannot connect"), "{error}");
    assert!(error.to_lowercase().contains("certificate"), "{error}");

    // Loopback without sslmode: no TLS.
    let plain = open("SELECT $1 AS id").await.unwrap();
    assert!(!plain.tls_required());
    assert!(!plain.report().await.unwrap().tls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_quoting_the_value_stays_out_of_the_logs() {
    // NULL casts (the dry run at start-up passes); the value does not, and the server's
    // message quotes it: `invalid input syntax for type integer: "CUST-…"`.
    let deployment = deployment("SELECT ($1::int)::text AS id", "");
    let ctxd = Ctxd::start(&deployment.config, &[], &[("ORDERS_DSN", ADMIN_DSN)]);
    let body = turn_for(&ctxd, CUSTOMER).await;
    let orders = provider(&body, "orders");
    assert_eq!(orders["status"], "UNAVAILABLE", "{body:#}");
    assert_eq!(orders["detail"], "DATABASE_ERROR", "{body:#}");
    let logs = ctxd.logs();
    assert!(logs.contains("sqlstate=\"22P02\""), "{logs}");
    assert!(
        !logs.contains(CUSTOMER),
        "the lookup value is in the logs:\n{logs}"
    );
    assert!(
        !body.to_string().contains("invalid input syntax"),
        "{body:#}"
    );
}

#[tokio::test]
async fn readiness_prepares_the_query_without_running_it() {
    let schema = Schema::create().await;
    let provider = open(&orders_query(&schema)).await.unwrap();
    provider.check().await.unwrap();
    admin()
        .await
        .batch_execute(&format!("DROP TABLE {}", schema.records()))
        .await
        .unwrap();
    let problem = provider.check().await.unwrap_err();
    assert!(
        problem.starts_with("UNAVAILABLE (DATABASE_ERROR): query: does not prepare:")
            && problem.contains("does not exist"),
        "{problem}"
    );
    provider.close();
    assert_eq!(
        provider.check().await.unwrap_err(),
        "UNAVAILABLE (POOL_CLOSED)"
    );
}

/// Whether another session can take session-level advisory lock `key` now (and releases
/// it at once if so).
async fn lock_is_free(admin: &Client, key: i64) -> bool {
    let taken: bool = admin
        .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
        .await
        .unwrap()
        .get(0);
    if taken {
        admin
            .execute("SELECT pg_advisory_unlock($1)", &[&key])
            .await
            .unwrap();
    }
    taken
}

/// A read-only transaction allows `pg_try_advisory_lock`, and a session-level lock
/// outlives `ROLLBACK`: a connection goes back to the pool reset, with no lock of a
/// lookup's (or of the dry run at open) on it, and it is reused, not discarded.
#[tokio::test]
async fn a_lookup_that_takes_an_advisory_lock_leaves_none_on_the_pooled_connection() {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    let key = i64::from_le_bytes(bytes);
    let query = format!(
        "SELECT $1::text AS id, pg_backend_pid()::text AS content, pg_try_advisory_lock({key})::text AS title"
    );
    // One connection: every lookup runs on the one the dry run used.
    let provider = open_with(ADMIN_DSN, &query, 1).await.unwrap();
    let admin = admin().await;
    assert!(
        lock_is_free(&admin, key).await,
        "the dry run at open left its lock"
    );
    let mut backends = Vec::new();
    for _ in 0..2 {
        let outcome = lookup(&provider, CUSTOMER).await;
        assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
        let item = &outcome.items_found()[0];
        assert_eq!(
            item.title.as_deref(),
            Some("true"),
            "the lookup took the lock"
        );
        backends.push(item.content.clone());
        assert!(
            lock_is_free(&admin, key).await,
            "the pooled connection still holds the lookup's lock"
        );
    }
    assert_eq!(backends[0], backends[1], "the reset connection was reused");
}

/// A server that quotes the connection string's password — here the name of a database
/// that does not exist, which the server repeats in its refusal — never gets it into
/// `validate`, `doctor` or `serve`, nor into a readiness problem; the rest of its words
/// are kept.
#[tokio::test]
async fn a_server_message_quoting_the_dsn_password_is_masked() {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).unwrap();
    let password = format!("quokka_horizon_{}", hex::encode(bytes));
    let quoting =
        format!("host=127.0.0.1 port=5432 user=postgres password={password} dbname={password}");
    let Err(error) = open_with(&quoting, "SELECT $1 AS id", 1).await else {
        panic!("a database that does not exist opened");
    };
    assert!(error.contains("does not exist"), "{error}");
    assert!(error.contains("[REDACTED:binding_secret]"), "{error}");
    assert!(!error.contains(&password), "{error}");

    let deployment = deployment("SELECT $1 AS id", "");
    for command in ["validate", "doctor", "serve"] {
        let output = run_with_dsn(command, &deployment, &quoting).await;
        let shown = format!(
            "{}{}",
            crate::support::stdout_of(&output),
            crate::support::stderr_of(&output)
        );
        assert!(!output.status.success(), "{command}: {shown}");
        assert!(shown.contains("does not exist"), "{command}: {shown}");
        assert!(!shown.contains(&password), "{command}: {shown}");
    }

    // A database that goes away under a running provider: readiness names it masked.
    let admin = admin().await;
    admin
        .batch_execute(&format!("CREATE DATABASE {password}"))
        .await
        .unwrap();
    let provider = open_with(&quoting, "SELECT $1 AS id", 1).await.unwrap();
    assert_eq!(provider.check().await, Ok(()));
    admin
        .batch_execute(&format!("DROP DATABASE {password} WITH (FORCE)"))
        .await
        .unwrap();
    let problem = provider.check().await.unwrap_err();
    assert!(problem.contains("does not exist"), "{problem}");
    assert!(!problem.contains(&password), "{problem}");
    let outcome = lookup(&provider, CUSTOMER).await;
    assert_eq!(outcome.status(), ProviderStatus::Unavailable, "{outcome:?}");
    provider.close();
}
