//! The reader's statements on PostgreSQL: each answers what the SQLite reader's
//! statement of the same name answers, so [`crate::trace::store::TraceReader`] decodes,
//! parses and opens rows the same way whichever store holds them. Searches run the
//! statements [`crate::trace::query`] plans, with `?` turned into `$n`.

use super::PgConnection;
use super::schema::require_current;
use crate::trace::store::error::StoreError;
use rusqlite::types::Value;
use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

/// The search plan's SQL with its `?` placeholders numbered for PostgreSQL. The plan
/// quotes only status names, never a `?`.
fn postgres_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// A plan's parameter as PostgreSQL takes it (the plan binds only integers and text).
enum Param {
    Int(i64),
    Text(String),
}

impl Param {
    fn of(value: &Value) -> Param {
        match value {
            Value::Integer(n) => Param::Int(*n),
            Value::Text(text) => Param::Text(text.clone()),
            Value::Real(x) => Param::Int(*x as i64),
            Value::Null | Value::Blob(_) => Param::Text(String::new()),
        }
    }

    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Int(n) => n,
            Param::Text(text) => text,
        }
    }
}

/// A turn found by its id: its seq, tenant and body, and whether it has a shape.
pub(crate) type TurnById = (i64, String, Vec<u8>, bool);

impl PgConnection {
    /// A reader's connection: the schema must be a trace store of this code's version.
    pub(crate) fn open_reader(target: &super::PgTarget) -> Result<PgConnection, StoreError> {
        let conn = PgConnection::connect(target)?;
        conn.batch(
            "make the connection read-only",
            "SET default_transaction_read_only = on",
        )?;
        require_current(&conn)?;
        Ok(conn)
    }

    /// A turn's body, and whether the turn has a shape (its provider records are all
    /// in its body).
    pub(crate) fn turn_body_by_seq(&self, seq: i64) -> Result<Option<(Vec<u8>, bool)>, StoreError> {
        self.run("read a turn", |client| async move {
            let row = client
                .query_opt(
                    "SELECT record, shape IS NOT NULL FROM turns WHERE seq = $1",
                    &[&seq],
                )
                .await?;
            Ok(row.map(|row| (row.get(0), row.get(1))))
        })
    }

    pub(crate) fn turn_by_id(&self, turn_id: &str) -> Result<Option<TurnById>, StoreError> {
        self.run("read a turn", |client| async move {
            let row = client
                .query_opt(
                    "SELECT seq, tenant, record, shape IS NOT NULL FROM turns WHERE turn_id = $1",
                    &[&turn_id],
                )
                .await?;
            Ok(row.map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))))
        })
    }

    pub(crate) fn provider_bodies(&self, seq: i64) -> Result<Vec<Vec<u8>>, StoreError> {
        self.run("read provider records", |client| async move {
            let rows = client
                .query(
                    "SELECT record FROM provider_records WHERE turn_seq = $1 ORDER BY id",
                    &[&seq],
                )
                .await?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    pub(crate) fn dictionary_bytes(&self, id: i64) -> Result<Option<Vec<u8>>, StoreError> {
        self.run("read a record dictionary", |client| async move {
            let row = client
                .query_opt(
                    "SELECT bytes FROM record_dictionaries WHERE id = $1",
                    &[&id],
                )
                .await?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    pub(crate) fn retained_blob(
        &self,
        tenant: &str,
        fingerprint: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.run("read retained content", |client| async move {
            let row = client
                .query_opt(
                    "SELECT ciphertext FROM retained_content WHERE tenant = $1 AND fingerprint = $2",
                    &[&tenant, &fingerprint],
                )
                .await?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    pub(crate) fn build_json(&self, digest: &str) -> Result<Option<String>, StoreError> {
        self.run("read a build", |client| async move {
            let row = client
                .query_opt("SELECT build FROM builds WHERE digest = $1", &[&digest])
                .await?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    /// `(sequence, record)` of a handle's operations after `after`, at most `take`.
    pub(crate) fn handle_operation_rows(
        &self,
        tenant: &str,
        handle: &str,
        after: i64,
        take: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        self.run("list handle operations", |client| async move {
            let rows = client
                .query(
                    "SELECT sequence, record FROM handle_operations
                    WHERE tenant = $1 AND handle_id = $2 AND sequence > $3
                    ORDER BY sequence LIMIT $4",
                    &[&tenant, &handle, &after, &take],
                )
                .await?;
            Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        })
    }

    /// Rows in one of the store's tables (a name of ours, never input).
    /// The one integer a counting statement answers.
    pub(crate) fn count(&self, sql: &'static str) -> Result<u64, StoreError> {
        self.run("count rows", |client| async move {
            let n: i64 = client.query_one(sql, &[]).await?.get(0);
            Ok(n.max(0) as u64)
        })
    }

    /// Tenants with at least one turn, in name order.
    pub(crate) fn turn_tenants(&self) -> Result<Vec<String>, StoreError> {
        self.run("list tenants", |client| async move {
            let rows = client
                .query("SELECT DISTINCT tenant FROM turns ORDER BY tenant", &[])
                .await?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    /// The first column of every row of one planned statement.
    pub(crate) fn first_column<T>(&self, sql: &str, params: &[Value]) -> Result<Vec<T>, StoreError>
    where
        T: for<'r> tokio_postgres::types::FromSql<'r>,
    {
        self.run("search traces", |client| {
            planned_first_column(client, sql, params)
        })
    }
}

/// The first column of every row of one planned statement (`?` placeholders, SQLite
/// values), run on a connection or inside a transaction.
pub(super) async fn planned_first_column<T>(
    client: &impl GenericClient,
    sql: &str,
    params: &[Value],
) -> Result<Vec<T>, tokio_postgres::Error>
where
    T: for<'r> tokio_postgres::types::FromSql<'r>,
{
    let sql = postgres_placeholders(sql);
    let params: Vec<Param> = params.iter().map(Param::of).collect();
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::as_sql).collect();
    let rows = client.query(&sql, &refs).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(
            postgres_placeholders(
                "SELECT t.seq FROM turns t WHERE t.tenant = ? AND t.seq < ? AND x IN ('OK') LIMIT ?"
            ),
            "SELECT t.seq FROM turns t WHERE t.tenant = $1 AND t.seq < $2 AND x IN ('OK') LIMIT $3"
        );
        assert_eq!(postgres_placeholders("SELECT 1"), "SELECT 1");
    }
}
