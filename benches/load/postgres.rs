//! The PostgreSQL variant of the load bench (`--postgres`): four providers, each served
//! by one query against the real server on 127.0.0.1:5432 (database `test`), four
//! layers per turn; and its raw baseline: the same four queries through the same driver
//! (tokio-postgres with deadpool-postgres pools of the same size), prepared once per
//! connection and run concurrently per "turn" — no read-only transaction, statement
//! timeout, limit wrapper, bounds, secret scan, rendering or tracing, and no HTTP hop.
//!
//! The data: schema [`SCHEMA`] (dropped and created at the start), tables `t1`…`t4`, one
//! row per customer `CUST-0000`…`CUST-9999` each, indexed on `customer`.

use super::{CUSTOMERS, Values};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

/// The schema the bench owns: dropped and created on every run.
pub(crate) const SCHEMA: &str = "ctxd_load_bench";
/// Where the server is, for ctxd (via [`DSN_ENV`]) and the baseline alike.
pub(crate) const DSN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
pub(crate) const DSN_ENV: &str = "CTXD_LOAD_PG_DSN";
/// Providers (and queries) per turn.
pub(crate) const PROVIDERS: usize = 4;
/// Connections per provider, on both sides: 2 × 4 × 8 stays well under the server's
/// default `max_connections` (100).
pub(crate) const POOL_SIZE: usize = 8;

/// The query of provider `k` (1-based).
pub(crate) fn query(k: usize) -> String {
    format!(
        "SELECT id, title, content, updated_at FROM {SCHEMA}.t{k} WHERE customer = $1 ORDER BY updated_at DESC"
    )
}

/// One postgres binding per provider, the same settings as the HTTP variant's.
pub(crate) fn binding_toml() -> String {
    let mut text = String::from("revision = \"load-pg-1\"\n\n[defaults]\nmax_concurrency = 1024\n");
    for k in 1..=PROVIDERS {
        text.push_str(&format!(
            "\n[providers.p{k}]\ntype = \"postgres\"\ndsn_env = \"{DSN_ENV}\"\nquery = {:?}\nversion = \"load-pg\"\npool = {{ max_size = {POOL_SIZE} }}\n",
            query(k)
        ));
    }
    text
}

/// Drops and recreates [`SCHEMA`] with its four tables.
pub(crate) async fn prepare_data() -> Result<(), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(DSN, NoTls).await?;
    let connection = tokio::spawn(connection);
    let mut sql = format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};");
    for k in 1..=PROVIDERS {
        sql.push_str(&format!(
            "CREATE TABLE {SCHEMA}.t{k} (id text PRIMARY KEY, customer text NOT NULL, title text, content text, updated_at timestamptz);
             INSERT INTO {SCHEMA}.t{k}
               SELECT 'R{k}-' || n, 'CUST-' || lpad(n::text, 4, '0'), 'Record ' || n || ' of table {k}',
                      'Customer ' || n || ' has a record in table {k}: two boxes of tea, shipped.',
                      timestamptz '2026-11-30 10:00:00+00' - n * interval '1 minute'
               FROM generate_series(0, {last}) n;
             CREATE INDEX ON {SCHEMA}.t{k} (customer);
             ANALYZE {SCHEMA}.t{k};",
            last = CUSTOMERS - 1
        ));
    }
    client.batch_execute(&sql).await?;
    drop(client);
    let _ = connection.await;
    Ok(())
}

/// Drops [`SCHEMA`].
pub(crate) async fn drop_data() {
    if let Ok((client, connection)) = tokio_postgres::connect(DSN, NoTls).await {
        let connection = tokio::spawn(connection);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            .await;
        drop(client);
        let _ = connection.await;
    }
}

/// The raw baseline: one pool per query.
pub(crate) struct Raw {
    pools: Vec<Pool>,
}

impl Raw {
    pub(crate) fn new() -> Raw {
        let config: tokio_postgres::Config = DSN.parse().expect("the bench DSN parses");
        let pools = (1..=PROVIDERS)
            .map(|_| {
                let manager = Manager::from_config(
                    config.clone(),
                    NoTls,
                    ManagerConfig {
                        recycling_method: RecyclingMethod::Fast,
                    },
                );
                Pool::builder(manager)
                    .max_size(POOL_SIZE)
                    .build()
                    .expect("the baseline pool builds")
            })
            .collect();
        Raw { pools }
    }

    /// One "turn": the four queries for `value`, concurrently; each row's fields read.
    pub(crate) async fn turn(&self, value: &str) -> Result<(), String> {
        let calls: Vec<super::Call<'_, Result<(), String>>> = self
            .pools
            .iter()
            .enumerate()
            .map(|(index, pool)| {
                Box::pin(async move {
                    let client = pool.get().await.map_err(|e| format!("pg pool: {e}"))?;
                    let statement = client
                        .prepare_cached(&query(index + 1))
                        .await
                        .map_err(|e| format!("pg prepare: {e}"))?;
                    let rows = client
                        .query(&statement, &[&value])
                        .await
                        .map_err(|e| format!("pg query: {e}"))?;
                    let mut fields = 0usize;
                    for row in &rows {
                        let id: String = row.get(0);
                        let title: Option<String> = row.get(1);
                        let content: Option<String> = row.get(2);
                        let updated: Option<std::time::SystemTime> = row.get(3);
                        fields += id.len()
                            + title.map_or(0, |t| t.len())
                            + content.map_or(0, |c| c.len())
                            + usize::from(updated.is_some());
                    }
                    if rows.len() != 1 || fields == 0 {
                        return Err(format!("pg: {} rows", rows.len()));
                    }
                    Ok(())
                }) as super::Call<'_, _>
            })
            .collect();
        super::join_all(calls).await.into_iter().collect()
    }
}

/// The values the PostgreSQL turns ask: the same cycle as the HTTP variant.
pub(crate) const VALUES: Values = Values::Cycle;
