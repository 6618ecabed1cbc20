//! The read-only SQLite provider on the demo database shipped in
//! `fixtures/demo/data/`, with the queries of `config/bindings/demo.toml`; and the check
//! that `support.db` holds exactly what `support.sql` builds.

use crate::support::root;
use ctxd::config::{Binding, ProviderBinding, ProviderKind};
use ctxd::contract::{Currentness, Item, ProviderStatus, Source};
use ctxd::outcome::Outcome;
use ctxd::providers::LookupCall;
use ctxd::providers::sqlite::SqliteProvider;
use rusqlite::Connection;
use rusqlite::types::Value as SqlValue;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

fn demo_binding() -> Binding {
    Binding::load(&root().join("config/bindings/demo.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn shipped_database() -> PathBuf {
    root().join("fixtures/demo/data/support.db")
}

fn support_sql() -> PathBuf {
    root().join("fixtures/demo/data/support.sql")
}

/// Opens the demo binding's provider `id` on the database it names.
async fn demo_provider(binding: &Binding, id: &str) -> SqliteProvider {
    let provider: &ProviderBinding = &binding.providers[id];
    let ProviderKind::Sqlite { database, query } = &provider.kind else {
        panic!("{id} is not a sqlite provider")
    };
    assert_eq!(
        std::fs::canonicalize(database).unwrap(),
        std::fs::canonicalize(shipped_database()).unwrap()
    );
    SqliteProvider::open(database, query, &provider.pool)
        .await
        .unwrap_or_else(|e| panic!("{id}: {e}"))
}

async fn lookup(provider: &SqliteProvider, id: &str, customer: &str, limit: u32) -> Outcome {
    provider
        .lookup(&LookupCall {
            provider: id,
            key: "customerId",
            value: customer,
            limit,
            deadline: Instant::now() + Duration::from_millis(500),
            secrets: Default::default(),
        })
        .await
}

fn item(value: Value) -> Item {
    serde_json::from_value(value).unwrap()
}

fn assert_ok(outcome: &Outcome) {
    assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.detail(), None);
    assert_eq!(outcome.source, Source::Live);
    assert_eq!(outcome.currentness(), Some(Currentness::Current));
    assert_eq!(
        outcome.version, None,
        "the binding's version is set by the actor"
    );
}

/// Zero rows: `NOT_FOUND`, the one meaning of "no record" for every provider type.
fn assert_no_record(outcome: &Outcome) {
    assert_eq!(outcome.status(), ProviderStatus::NotFound, "{outcome:?}");
    assert_eq!(outcome.detail(), None);
    assert_eq!(outcome.source, Source::Live);
    assert!(outcome.items_found().is_empty());
    assert!(!outcome.found_anything());
}

#[tokio::test]
async fn the_demo_customer_has_a_profile_orders_and_an_open_ticket() {
    let binding = demo_binding();
    let customers = demo_provider(&binding, "customer-data").await;
    let orders = demo_provider(&binding, "orders").await;
    let tickets = demo_provider(&binding, "tickets").await;

    let profile = lookup(&customers, "customer-data", "CUST-1042", 1).await;
    assert_ok(&profile);
    assert_eq!(
        profile.items_found(),
        [item(json!({
            "id": "CUST-1042",
            "title": "Nordwind Logistics GmbH",
            "content": "Enterprise customer since 2021. Account in good standing; payment terms net 30. Primary contact: Jana Ortmann (operations). Preferred language: German or English.",
            "metadata": { "plan": "Enterprise", "region": "EU-Central" },
            "updatedAt": "2026-11-28T09:14:00Z"
        }))]
    );

    let history = lookup(&orders, "orders", "CUST-1042", 5).await;
    assert_ok(&history);
    assert_eq!(
        history.items_found(),
        [
            item(json!({
                "id": "ORD-77812",
                "title": "Order ORD-77812",
                "content": "48 pallet sensors (model PS-4), shipped 2026-11-20 via DHL Freight; delivery confirmed 2026-11-24.",
                "metadata": { "status": "delivered", "total_eur": 1840.0 },
                "updatedAt": "2026-11-24T16:02:00Z"
            })),
            item(json!({
                "id": "ORD-77655",
                "title": "Order ORD-77655",
                "content": "Annual support renewal, invoiced 2026-10-01, paid 2026-10-19.",
                "metadata": { "status": "paid", "total_eur": 12600.0 },
                "updatedAt": "2026-10-19T08:30:00Z"
            })),
        ]
    );
    // The requested limit is honoured.
    let newest = lookup(&orders, "orders", "CUST-1042", 1).await;
    assert_eq!(newest.items_found().len(), 1);
    assert_eq!(newest.items_found()[0].id, "ORD-77812");

    // Only open tickets: TCK-5310 is closed.
    let open = lookup(&tickets, "tickets", "CUST-1042", 5).await;
    assert_ok(&open);
    assert_eq!(
        open.items_found(),
        [item(json!({
            "id": "TCK-5521",
            "title": "Two sensors report offline after firmware update",
            "content": "Customer reports that 2 of 48 PS-4 sensors went offline after firmware 4.2.1. Requested a replacement or rollback instructions. Priority: high.",
            "metadata": { "priority": "high", "status": "open" },
            "updatedAt": "2026-11-29T14:45:00Z"
        }))]
    );

    for provider in [&customers, &orders, &tickets] {
        assert_eq!(provider.check().await, Ok(()));
        provider.close();
    }
}

#[tokio::test]
async fn a_new_customer_has_a_profile_but_no_orders_or_open_tickets() {
    let binding = demo_binding();
    let customers = demo_provider(&binding, "customer-data").await;
    let orders = demo_provider(&binding, "orders").await;
    let tickets = demo_provider(&binding, "tickets").await;

    let profile = lookup(&customers, "customer-data", "CUST-2001", 1).await;
    assert_ok(&profile);
    assert_eq!(profile.items_found().len(), 1);
    assert_eq!(
        profile.items_found()[0].title.as_deref(),
        Some("Fjord Fisheries AS")
    );
    assert_eq!(profile.items_found()[0].metadata["plan"], "Starter");

    let none = lookup(&orders, "orders", "CUST-2001", 5).await;
    assert_no_record(&none);
    // CUST-2001 has a ticket, but it is closed.
    let none = lookup(&tickets, "tickets", "CUST-2001", 5).await;
    assert_no_record(&none);
}

#[tokio::test]
async fn an_unknown_customer_has_no_rows_anywhere() {
    let binding = demo_binding();
    for id in ["customer-data", "orders", "tickets"] {
        let provider = demo_provider(&binding, id).await;
        let outcome = lookup(&provider, id, "CUST-9999", 5).await;
        assert_no_record(&outcome);
    }
}

#[tokio::test]
async fn every_demo_row_passes_the_bounds_and_secret_checks() {
    let binding = demo_binding();
    let conn = Connection::open_with_flags(
        shipped_database(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut statement = conn
        .prepare("SELECT id FROM customers ORDER BY id")
        .unwrap();
    let customers: Vec<String> = statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(customers.len() >= 5, "{customers:?}");
    for id in ["customer-data", "orders", "tickets"] {
        let provider = demo_provider(&binding, id).await;
        for customer in &customers {
            let outcome = lookup(&provider, id, customer, 20).await;
            if outcome.found_anything() {
                assert_ok(&outcome);
            } else {
                assert_no_record(&outcome);
            }
        }
    }
}

/// Every table and index definition, and every row of every table, in a stable order.
fn contents(database: &Path) -> Vec<(String, Vec<Vec<SqlValue>>)> {
    let conn =
        Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut schema = conn
        .prepare("SELECT type, name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name")
        .unwrap();
    let objects: Vec<(String, String, String)> = schema
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut contents = vec![(
        "sqlite_schema".to_owned(),
        objects
            .iter()
            .map(|(kind, name, sql)| {
                vec![
                    SqlValue::Text(kind.clone()),
                    SqlValue::Text(name.clone()),
                    SqlValue::Text(sql.clone()),
                ]
            })
            .collect(),
    )];
    for (kind, name, _) in &objects {
        if kind != "table" {
            continue;
        }
        let mut rows = conn
            .prepare(&format!("SELECT * FROM \"{name}\" ORDER BY rowid"))
            .unwrap();
        let columns = rows.column_count();
        let rows: Vec<Vec<SqlValue>> = rows
            .query_map([], |row| (0..columns).map(|i| row.get(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        contents.push((name.clone(), rows));
    }
    let journal_mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    contents.push((
        "journal_mode".to_owned(),
        vec![vec![SqlValue::Text(journal_mode)]],
    ));
    contents
}

/// Builds a database from `support.sql` at `target`, compacted.
fn build_from_sql(target: &Path) {
    let sql = std::fs::read_to_string(support_sql()).unwrap();
    let conn = Connection::open(target).unwrap();
    conn.execute_batch(&sql).unwrap();
    conn.execute_batch("VACUUM").unwrap();
    let journal_mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(journal_mode, "delete");
    conn.close().map_err(|(_, e)| e).unwrap();
}

#[test]
fn the_shipped_database_holds_exactly_what_the_sql_builds() {
    let dir = tempfile::tempdir().unwrap();
    let rebuilt = dir.path().join("support.db");
    build_from_sql(&rebuilt);
    let shipped = contents(&shipped_database());
    assert!(
        shipped == contents(&rebuilt),
        "fixtures/demo/data/support.db differs from support.sql; rebuild it with \
         `cargo test --test it sqlite_provider::regenerate_demo_database -- --ignored`"
    );
    // Shipped as a plain rollback-journal file with no side files to go with it.
    let data = root().join("fixtures/demo/data");
    for side in ["support.db-wal", "support.db-shm", "support.db-journal"] {
        assert!(!data.join(side).exists(), "{side} must not be shipped");
    }
    let header = std::fs::read(shipped_database()).unwrap();
    // Bytes 18 and 19: file format write/read versions, 1 = rollback journal, 2 = WAL.
    assert_eq!((header[18], header[19]), (1, 1));
}

/// Rebuilds `fixtures/demo/data/support.db` from `support.sql`.
#[test]
#[ignore = "writes the shipped demo database; run after editing support.sql"]
fn regenerate_demo_database() {
    let target = shipped_database();
    let staging = target.with_extension("db.new");
    let _ = std::fs::remove_file(&staging);
    build_from_sql(&staging);
    std::fs::rename(&staging, &target).unwrap();
    println!(
        "wrote {} ({} bytes)",
        target.display(),
        std::fs::metadata(&target).unwrap().len()
    );
}
