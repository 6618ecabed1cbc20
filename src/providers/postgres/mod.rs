//! The read-only PostgreSQL provider: one bound query against a PostgreSQL server, the
//! lookup value as its only parameter (`$1`, text), rows mapped to items by the column
//! contract the `sqlite` provider follows ([`columns`]).
//!
//! Safety comes from the server, not from reading the SQL:
//! - every lookup runs in its own `BEGIN READ ONLY` transaction, ended by `ROLLBACK`,
//!   with `SET LOCAL statement_timeout` = the time left until the call's deadline; a
//!   write anywhere in it (a writable CTE, a function that writes, `set_config` of
//!   `transaction_read_only`) is refused by the server;
//! - [`PostgresProvider::open`] prepares the query as written (the server's message when
//!   it does not: two statements, a syntax error, an unknown table), requires exactly one
//!   parameter (`$1`, typed `text`) and a statement that returns rows (so `CREATE
//!   TABLE`, `VACUUM`, `SET` or `COPY … TO PROGRAM` is never executed: some utility
//!   statements are not stopped by a read-only transaction), runs it once inside a
//!   read-only transaction with a NULL value so that the server refuses what would write
//!   (`INSERT … RETURNING`, a writable CTE, `CREATE TABLE … AS`) at start-up, and checks
//!   its columns; readiness only prepares it again;
//! - lookups run the query inside `SELECT * FROM (<query>) q LIMIT $2`, prepared once
//!   per connection (`prepare_typed_cached`): rows beyond the limit are never produced.
//!
//! One round trip per lookup: `BEGIN READ ONLY; SET LOCAL …`, the bound query and
//! `ROLLBACK; SELECT pg_advisory_unlock_all()` are pipelined on the connection. The
//! rollback undoes what the transaction did, settings made with `set_config` included;
//! a session-level advisory lock (`pg_try_advisory_lock`, which a read-only transaction
//! allows) outlives it, so the unlock goes with it: a connection goes back to the pool
//! with no lock of a lookup's on it. A connection whose reset did not succeed is
//! discarded. (`DISCARD ALL` would reset more, but also drop the statements prepared on
//! the connection, which every lookup reuses.) Rows are read as they arrive; the wire
//! size of each value is checked before it is decoded (a value larger than a whole
//! response is refused without being copied) and reading stops as soon as the rows read
//! exceed the 1 MiB response bound; each row is mapped through the budgeted item builder
//! (each value measured before it is copied, JSON parsed within the value count), then
//! the secret scan runs on the bounded items.
//!
//! Time: the wait for a pooled connection ends at the call's deadline; the statement is
//! bounded by `statement_timeout` on the server and, when the deadline passes or the
//! lookup is abandoned, cancelled on the server (a cancel request with the connection's
//! key) while the connection is discarded, so nothing of it runs on after the turn is
//! answered and no later lookup can be hit by a late cancel.
//!
//! Outcomes: rows → `OK`, zero rows → `NOT_FOUND`, source `LIVE`, currentness
//! `CURRENT`; no free connection by the deadline → `UNAVAILABLE` (`OVERLOADED`: the pool
//! is exhausted, the server is not failing, so the breaker does not count it); the
//! server unreachable or a connection lost → `UNAVAILABLE` (`CONNECT_FAILED`,
//! `CONNECTION_RESET`); the deadline → `TIMEOUT` (`DEADLINE`); any error the server
//! reports → `UNAVAILABLE` (`DATABASE_ERROR`), logged with its SQLSTATE only (a message
//! may quote the value); a row that does not fit the contract → `INVALID_RESPONSE`
//! (`MALFORMED`). A connection that was lost, cut at the deadline or left in a state the
//! driver cannot vouch for is dropped, never returned to the pool, so calls recover on
//! their own once the server is back.
//!
//! What the server says (an error's message and hint, the driver's words) is the
//! server's text, shown only as [`UntrustedText`] with the connection string's password
//! masked: a server that quotes it — in a failed login, an unknown database or role, a
//! query error — never gets it into `validate`, `doctor`, `/readyz` or a log.

use super::items::ItemsBuilder;
use super::untrusted::{Masks, UntrustedText};
use super::{LookupCall, PoolSettings, RecycleCheck};
use crate::bounds;
use crate::bounds::BoundsViolation;
use crate::contract::{Currentness, Source};
use crate::outcome::{Failure, Outcome};
use columns::{Layout, RowProblem};
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, Timeouts,
};
use futures_util::{StreamExt, pin_mut};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{CancelToken, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

pub(crate) mod columns;
pub(crate) mod dsn;

/// Bound on the checks `open`, readiness and `doctor` run.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on the dry run of the query at `open` (with a NULL value): long enough for the
/// server to refuse a write, which it does before executing anything.
const DRY_RUN_TIMEOUT_MS: u64 = 1000;

/// A read-only PostgreSQL provider. Cheap to clone: clones share the connection pool.
#[derive(Clone)]
pub struct PostgresProvider {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    tls: MakeRustlsConnect,
    /// The env var the connection string came from, for messages.
    dsn_env: String,
    /// `SELECT * FROM (<query>) q LIMIT $2`, what lookups run.
    limited: String,
    layout: Layout,
    connect_timeout: Duration,
    tls_required: bool,
    /// The connection string's password, masked in every text of the server's.
    masks: Masks,
}

/// Why a PostgreSQL provider could not be set up. Messages carry the server's words for
/// the query; never the connection string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostgresSetupError {
    #[error("dsn_env: environment variable {name:?} is not set or empty")]
    DsnNotSet { name: String },
    #[error("dsn_env: the connection string in {name:?} {reason}")]
    Dsn { name: String, reason: String },
    #[error("dsn_env: cannot connect to the server named in {name:?}: {reason}")]
    Connect { name: String, reason: String },
    #[error("query: does not prepare: {reason}")]
    Query { reason: String },
    #[error("query: must use $1 as its only parameter ({found})")]
    Parameters { found: String },
    #[error("query: refused by the server in a read-only transaction: {reason}")]
    Refused { reason: String },
    #[error("query: {problem}")]
    Columns { problem: String },
}

impl PostgresSetupError {
    /// The binding key the problem is about: `dsn_env` or `query`.
    pub fn key(&self) -> &'static str {
        match self {
            PostgresSetupError::DsnNotSet { .. }
            | PostgresSetupError::Dsn { .. }
            | PostgresSetupError::Connect { .. } => "dsn_env",
            _ => "query",
        }
    }

    /// The message without the key [`PostgresSetupError::key`] names.
    pub fn reason(&self) -> String {
        let full = self.to_string();
        let prefix = format!("{}: ", self.key());
        full.strip_prefix(&prefix).unwrap_or(&full).to_owned()
    }
}

/// What `doctor` reports about the server behind a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    /// `server_version`, e.g. `15.4 (Debian 15.4-1)`.
    pub version: String,
    /// Whether the connection uses TLS (as the server sees it).
    pub tls: bool,
    /// Whether the role can write somewhere: superuser, a write privilege on a table,
    /// `CREATE` on a schema outside the system catalogs, or membership in
    /// `pg_write_all_data`, `pg_write_server_files` or `pg_execute_server_program` (what
    /// `COPY … TO PROGRAM` needs: a read-only transaction does not stop it).
    pub role_can_write: bool,
    /// The role ctxd connects as.
    pub role: String,
}

impl PostgresProvider {
    /// Reads the connection string from `dsn` (the value of `dsn_env`), builds the pool
    /// and checks the query against the server (see the module docs).
    pub async fn open(
        dsn_env: &str,
        dsn: Option<&str>,
        query: &str,
        pool: &PoolSettings,
    ) -> Result<PostgresProvider, PostgresSetupError> {
        let name = dsn_env.to_owned();
        let text = dsn
            .filter(|text| !text.trim().is_empty())
            .ok_or_else(|| PostgresSetupError::DsnNotSet { name: name.clone() })?;
        let mut parsed = dsn::parse(text).map_err(|reason| PostgresSetupError::Dsn {
            name: name.clone(),
            reason,
        })?;
        parsed.config.connect_timeout(pool.connect_timeout);
        let masks = dsn_masks(&parsed.config);
        let tls = tls_connector();
        let recycling_method = match pool.recycle {
            RecycleCheck::Fast => RecyclingMethod::Fast,
            RecycleCheck::Verified => RecyclingMethod::Verified,
        };
        let manager = Manager::from_config(
            parsed.config.clone(),
            tls.clone(),
            ManagerConfig { recycling_method },
        );
        let built = Pool::builder(manager)
            .max_size(pool.max_size.max(1))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|error| PostgresSetupError::Connect {
                name: name.clone(),
                reason: UntrustedText::new(&error.to_string(), &masks).into_string(),
            })?;
        let limited = limited_query(query);
        let layout = inspect(&built, pool.connect_timeout, &name, query, &limited, &masks).await?;
        let provider = PostgresProvider {
            inner: Arc::new(Inner {
                pool: built,
                tls,
                dsn_env: name,
                limited,
                layout,
                connect_timeout: pool.connect_timeout,
                tls_required: parsed.tls(),
                masks,
            }),
        };
        Ok(provider)
    }

    /// One lookup (see the module docs): `TIMEOUT` when `call.deadline` passes; dropping
    /// the future cancels the statement on the server.
    pub async fn lookup(&self, call: &LookupCall<'_>) -> Outcome {
        let deadline = call.deadline;
        let Some(remaining) = deadline.checked_duration_since(Instant::now()) else {
            return failed(Failure::Deadline);
        };
        if remaining.is_zero() {
            return failed(Failure::Deadline);
        }
        let timeouts = Timeouts {
            wait: Some(remaining),
            create: Some(remaining.min(self.inner.connect_timeout)),
            recycle: Some(remaining),
        };
        let got = tokio::time::timeout_at(deadline, self.inner.pool.timeout_get(&timeouts)).await;
        let client = match got {
            Err(_) => return failed(Failure::Deadline),
            Ok(Ok(client)) => client,
            Ok(Err(PoolError::Timeout(deadpool_postgres::TimeoutType::Wait))) => {
                return failed(Failure::Overloaded);
            }
            Ok(Err(PoolError::Closed)) => return failed(Failure::PoolClosed),
            Ok(Err(error)) => {
                tracing::warn!(
                    provider = call.provider,
                    error = pool_error_kind(&error),
                    "postgres connection unavailable"
                );
                return failed(Failure::ConnectFailed);
            }
        };
        let mut in_flight = InFlight::new(client, self.inner.tls.clone());
        let limit = usize::try_from(call.limit)
            .map_or(bounds::MAX_ITEMS, |limit| limit.min(bounds::MAX_ITEMS));
        let read = tokio::time::timeout_at(
            deadline,
            read_items(
                in_flight.client(),
                &self.inner.limited,
                &self.inner.layout,
                call.value,
                limit,
                deadline,
            ),
        )
        .await;
        let items = match read {
            // Cancelled on the server and discarded as `in_flight` drops armed.
            Err(_) => return failed(Failure::Deadline),
            Ok(Read { items, reset }) => {
                let reusable = match &items {
                    Ok(_) => reset,
                    Err(problem) => reset && !problem.connection_unusable(in_flight.client()),
                };
                // Otherwise dropped armed: cancelled on the server and discarded.
                if reusable {
                    in_flight.settled();
                }
                match items {
                    Ok(items) => items,
                    Err(problem) => return failed(problem.failure(call.provider)),
                }
            }
        };
        drop(in_flight);
        match items.finish(call.secrets) {
            Ok((items, redactions)) => Outcome::answered(items, Currentness::Current, Source::Live)
                .with_redactions(redactions),
            Err(violation) => failed(Failure::from(&violation)),
        }
    }

    /// Readiness: a connection can be had and the limited query still prepares with
    /// columns that fit the contract (the statement is not run: the dry run at `open`
    /// judged it). The error is a short description, never a value.
    pub async fn check(&self) -> Result<(), String> {
        let inner = &self.inner;
        if inner.pool.is_closed() {
            return Err("UNAVAILABLE (POOL_CLOSED)".to_owned());
        }
        let client = checkout(&inner.pool, inner.connect_timeout, &inner.masks)
            .await
            .map_err(|reason| {
                format!(
                    "UNAVAILABLE (CONNECT_FAILED): the server named in {:?}: {reason}",
                    inner.dsn_env
                )
            })?;
        let prepared = tokio::time::timeout(
            CHECK_TIMEOUT,
            client.prepare_typed(&inner.limited, &[Type::TEXT, Type::INT8]),
        )
        .await
        .map_err(|_| format!("UNAVAILABLE (DEADLINE): no answer within {CHECK_TIMEOUT:?}"))?
        .map_err(|error| {
            format!(
                "UNAVAILABLE (DATABASE_ERROR): query: does not prepare: {}",
                shown_words(&error, &inner.masks)
            )
        })?;
        Layout::of(prepared.columns())
            .map(|_| ())
            .map_err(|problem| format!("UNAVAILABLE (DATABASE_ERROR): query: {problem}"))
    }

    /// What `doctor` shows: server version, TLS, and whether the role can write.
    pub async fn report(&self) -> Result<ServerReport, String> {
        let masks = &self.inner.masks;
        let client = checkout(&self.inner.pool, self.inner.connect_timeout, masks)
            .await
            .map_err(|reason| format!("cannot connect: {reason}"))?;
        let row = tokio::time::timeout(CHECK_TIMEOUT, client.query_one(SERVER_REPORT, &[]))
            .await
            .map_err(|_| format!("no answer within {CHECK_TIMEOUT:?}"))?
            .map_err(|error| shown_words(&error, masks))?;
        Ok(ServerReport {
            version: row.try_get(0).map_err(|error| error.to_string())?,
            tls: row
                .try_get::<_, Option<bool>>(1)
                .map_err(|error| error.to_string())?
                .unwrap_or(false),
            role_can_write: row.try_get(2).map_err(|error| error.to_string())?,
            role: row.try_get(3).map_err(|error| error.to_string())?,
        })
    }

    /// Whether the connection string asks for TLS (after the TLS rule).
    pub fn tls_required(&self) -> bool {
        self.inner.tls_required
    }

    /// Closes the pool: idle connections are closed now, checked-out ones when their
    /// lookup ends; later lookups answer `UNAVAILABLE` (`POOL_CLOSED`).
    pub fn close(&self) {
        self.inner.pool.close();
    }
}

/// A connection for the checks, within [`CHECK_TIMEOUT`]; the error in the server's or
/// the driver's words, shown as untrusted text.
async fn checkout(pool: &Pool, connect_timeout: Duration, masks: &Masks) -> Result<Object, String> {
    let timeouts = Timeouts {
        wait: Some(CHECK_TIMEOUT),
        create: Some(CHECK_TIMEOUT.min(connect_timeout)),
        recycle: Some(CHECK_TIMEOUT),
    };
    pool.timeout_get(&timeouts)
        .await
        .map_err(|error| match &error {
            PoolError::Backend(error) => shown_words(error, masks),
            other => UntrustedText::new(&other.to_string(), masks).into_string(),
        })
}

/// The checks of `open` on one pooled connection; the layout of the limited query.
async fn inspect(
    pool: &Pool,
    connect_timeout: Duration,
    dsn_env: &str,
    query: &str,
    limited: &str,
    masks: &Masks,
) -> Result<Layout, PostgresSetupError> {
    let client = checkout(pool, connect_timeout, masks)
        .await
        .map_err(|reason| PostgresSetupError::Connect {
            name: dsn_env.to_owned(),
            reason,
        })?;
    match tokio::time::timeout(CHECK_TIMEOUT, inspect_query(&client, query, limited, masks)).await {
        Ok(result) => result,
        Err(_) => Err(PostgresSetupError::Query {
            reason: format!("the server did not answer within {CHECK_TIMEOUT:?}"),
        }),
    }
}

/// The query as lookups run it: rows beyond `$2` are never produced. Newlines keep a
/// trailing `--` comment from swallowing the wrapper; a trailing `;` is dropped.
fn limited_query(query: &str) -> String {
    let body = query.trim_end().trim_end_matches(';').trim_end();
    format!("SELECT * FROM (\n{body}\n) AS ctxd_lookup LIMIT $2")
}

/// The checks of `open`: prepares as written, exactly one parameter, refused writes
/// (dry run with NULL in a read-only transaction), then the limited query's columns.
async fn inspect_query(
    client: &Object,
    query: &str,
    limited: &str,
    masks: &Masks,
) -> Result<Layout, PostgresSetupError> {
    // Untyped first, so a query without `$1` shows no parameter; a `$1` whose type
    // the query leaves open (`$1 IS NULL`, `SELECT $1`) is typed `text` below.
    // An untyped failure is left to the typed prepare, which either fixes it or gives
    // the server's message.
    if let Ok(as_written) = client.prepare(query).await {
        let found = match as_written.params().len() {
            1 => None,
            0 => Some("it has no parameter".to_owned()),
            count => Some(format!("it has {count} parameters")),
        };
        if let Some(found) = found {
            return Err(PostgresSetupError::Parameters { found });
        }
    }
    let typed = match client.prepare_typed(query, &[Type::TEXT]).await {
        Ok(typed) if typed.params().len() == 1 => typed,
        Ok(typed) => {
            return Err(PostgresSetupError::Parameters {
                found: format!("it has {} parameters", typed.params().len()),
            });
        }
        Err(error) if error.code() == Some(&SqlState::INDETERMINATE_DATATYPE) => {
            return Err(PostgresSetupError::Parameters {
                found: shown_words(&error, masks),
            });
        }
        Err(error) => {
            return Err(PostgresSetupError::Query {
                reason: format!(
                    "{} ($1 is the lookup value, of type text: cast it in the query, e.g. $1::bigint)",
                    shown_words(&error, masks)
                ),
            });
        }
    };
    // Nothing that returns no rows is ever executed: such a statement is no lookup, and
    // among them are the utility statements a read-only transaction does not stop.
    if typed.columns().is_empty() {
        return Err(PostgresSetupError::Columns {
            problem: "returns no rows: a lookup is a SELECT (or VALUES, TABLE, or a statement with RETURNING) with an `id` column".to_owned(),
        });
    }
    dry_run(client, &typed, masks).await?;
    let statement = client
        .prepare_typed(limited, &[Type::TEXT, Type::INT8])
        .await
        .map_err(|error| PostgresSetupError::Query {
            reason: format!(
                "{} (ctxd runs it as a subquery: one SELECT, VALUES or TABLE statement)",
                shown_words(&error, masks)
            ),
        })?;
    Layout::of(statement.columns()).map_err(|problem| PostgresSetupError::Columns { problem })
}

/// Runs the statement with a NULL value and no row fetched beyond the first, read-only,
/// rolled back: the server refuses here what would write. Running out of time is not a
/// refusal: the read-only check precedes execution.
async fn dry_run(
    client: &Object,
    statement: &Statement,
    masks: &Masks,
) -> Result<(), PostgresSetupError> {
    let begin = format!("BEGIN READ ONLY; SET LOCAL statement_timeout = {DRY_RUN_TIMEOUT_MS}");
    let value: Option<&str> = None;
    let params: [&(dyn ToSql + Sync); 1] = [&value];
    let run = async {
        let stream = client.query_raw(statement, params).await?;
        pin_mut!(stream);
        if let Some(row) = stream.next().await {
            row?;
        }
        Ok::<(), tokio_postgres::Error>(())
    };
    let (begun, ran, ended) = tokio::join!(
        client.batch_execute(&begin),
        run,
        client.batch_execute(END_AND_RESET)
    );
    let refused = |error: &tokio_postgres::Error| PostgresSetupError::Refused {
        reason: shown_words(error, masks),
    };
    begun.map_err(|error| refused(&error))?;
    match ran {
        Err(error) if error.code() == Some(&SqlState::QUERY_CANCELED) => {}
        Err(error) => return Err(refused(&error)),
        Ok(()) => {}
    }
    ended.map_err(|error| refused(&error))
}

/// The server's message (and hint) for an error; the driver's words otherwise (with
/// their causes: "error performing TLS handshake: invalid peer certificate: …").
fn words(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.hint() {
            Some(hint) => format!("{} (hint: {hint})", db.message()),
            None => db.message().to_owned(),
        },
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

/// [`words`] as a provider or the trace store shows them: untrusted text, the connection
/// string's password (`masks`) masked with the secret patterns, bounded and escaped.
pub(crate) fn shown_words(error: &tokio_postgres::Error, masks: &Masks) -> String {
    UntrustedText::new(&words(error), masks).into_string()
}

/// The masks of a connection string: its password (and its percent-encoded form).
pub(crate) fn dsn_masks(config: &tokio_postgres::Config) -> Masks {
    let mut masks = Masks::none();
    if let Some(password) = config.get_password() {
        masks.secret(&String::from_utf8_lossy(password));
    }
    masks
}

/// A checked-out connection with a statement possibly running on it. Dropped before
/// [`InFlight::settled`] (deadline, abandoned lookup, lost connection), it sends the
/// server a cancel request for whatever runs and discards the connection, so it never
/// returns to the pool with a statement, a transaction or a pending cancel on it.
struct InFlight {
    client: Option<Object>,
    tls: MakeRustlsConnect,
    settled: bool,
}

impl InFlight {
    fn new(client: Object, tls: MakeRustlsConnect) -> InFlight {
        InFlight {
            client: Some(client),
            tls,
            settled: false,
        }
    }

    fn client(&self) -> &Object {
        self.client.as_ref().expect("present until drop")
    }

    /// Nothing runs on the connection any more: it may go back to the pool.
    fn settled(&mut self) {
        self.settled = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if self.settled {
            return;
        }
        let token: CancelToken = client.cancel_token();
        drop(Object::take(client));
        let tls = self.tls.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if tokio::time::timeout(CHECK_TIMEOUT, token.cancel_query(tls))
                    .await
                    .is_err()
                {
                    tracing::warn!("postgres cancel request timed out");
                }
            });
        }
    }
}

/// Why a lookup gave no items.
#[derive(Debug)]
enum ReadProblem {
    Postgres(tokio_postgres::Error),
    Row(RowProblem),
    TooLarge,
}

impl ReadProblem {
    fn failure(&self, provider: &str) -> Failure {
        match self {
            ReadProblem::Row(RowProblem::Malformed) => Failure::Malformed,
            ReadProblem::Row(RowProblem::TooLarge) | ReadProblem::TooLarge => {
                Failure::ResponseTooLarge
            }
            ReadProblem::Row(RowProblem::Bounds(violation)) => Failure::from(violation),
            ReadProblem::Postgres(error) => match error.code() {
                Some(code) if *code == SqlState::QUERY_CANCELED => Failure::Deadline,
                Some(code) if connection_lost(code) => Failure::ConnectionReset,
                Some(code) => {
                    tracing::warn!(
                        provider,
                        sqlstate = code.code(),
                        "postgres lookup refused by the server"
                    );
                    Failure::DatabaseError
                }
                None if error.is_closed() => Failure::ConnectionReset,
                None => {
                    tracing::warn!(provider, "postgres lookup failed in the driver");
                    Failure::DatabaseError
                }
            },
        }
    }

    /// Whether the connection must not be reused: it closed, or the driver failed
    /// outside a server error (the protocol state is unknown).
    fn connection_unusable(&self, client: &Object) -> bool {
        client.is_closed()
            || matches!(self, ReadProblem::Postgres(error) if error.code().is_none_or(connection_lost))
    }
}

/// A server shutting down or restarting (`57P01`…`57P03`) or a connection exception
/// (class `08`): the connection is gone.
fn connection_lost(code: &SqlState) -> bool {
    code.code().starts_with("08") || code.code().starts_with("57P0")
}

/// What ends every transaction a lookup (or the dry run at `open`) begins: the rollback,
/// then the release of any session-level advisory lock the query took — the one state a
/// read-only transaction can leave on a session past its end.
const END_AND_RESET: &str = "ROLLBACK; SELECT pg_advisory_unlock_all()";

/// A lookup's rows, and whether the connection was reset after it (`END_AND_RESET` ran):
/// only then may it go back to the pool.
struct Read {
    items: Result<ItemsBuilder, ReadProblem>,
    reset: bool,
}

/// The pipelined lookup: begin read-only with the remaining budget as statement
/// timeout, the limited query, rollback and reset.
async fn read_items(
    client: &Object,
    limited: &str,
    layout: &Layout,
    value: &str,
    limit: usize,
    deadline: Instant,
) -> Read {
    let statement = match client
        .prepare_typed_cached(limited, &[Type::TEXT, Type::INT8])
        .await
    {
        Ok(statement) => statement,
        // No transaction was begun: nothing of the query's is on the session.
        Err(error) => {
            return Read {
                items: Err(ReadProblem::Postgres(error)),
                reset: true,
            };
        }
    };
    let remaining_ms = deadline
        .checked_duration_since(Instant::now())
        .map_or(1, |left| left.as_millis().max(1));
    let begin = format!(
        "BEGIN READ ONLY; SET LOCAL statement_timeout = {remaining_ms}; SET LOCAL log_parameter_max_length_on_error = 0"
    );
    let row_limit = limit as i64;
    let params: [&(dyn ToSql + Sync); 2] = [&value, &row_limit];
    let rows = async {
        let stream = client
            .query_raw(&statement, params)
            .await
            .map_err(ReadProblem::Postgres)?;
        pin_mut!(stream);
        let mut items = ItemsBuilder::new(u32::try_from(limit).unwrap_or(u32::MAX));
        let mut read_bytes = 0usize;
        while items.len() < limit {
            let Some(row) = stream.next().await else {
                break;
            };
            let row = row.map_err(ReadProblem::Postgres)?;
            read_bytes += Layout::row_bytes(&row).map_err(ReadProblem::Row)?;
            if read_bytes > bounds::MAX_RESPONSE_BYTES {
                return Err(ReadProblem::TooLarge);
            }
            let mut item = items.item().map_err(bounded)?;
            layout.item(&row, &mut item).map_err(ReadProblem::Row)?;
            items.push(item).map_err(bounded)?;
        }
        Ok(items)
    };
    let (begun, read, ended) = tokio::join!(
        client.batch_execute(&begin),
        rows,
        client.batch_execute(END_AND_RESET)
    );
    let reset = ended.is_ok();
    let items = begun
        .map_err(ReadProblem::Postgres)
        .and(read)
        .and_then(|items| ended.map(|()| items).map_err(ReadProblem::Postgres));
    Read { items, reset }
}

/// A bound crossed by the builder, as the read's problem.
fn bounded(violation: BoundsViolation) -> ReadProblem {
    ReadProblem::Row(RowProblem::Bounds(violation))
}

/// TLS with the system's root certificates and host name verification (rustls, the
/// aws-lc provider reqwest uses too).
pub(crate) fn tls_connector() -> MakeRustlsConnect {
    let mut roots = rustls::RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(loaded.certs);
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map(|builder| builder.with_root_certificates(roots).with_no_client_auth());
    match config {
        Ok(config) => MakeRustlsConnect::new(config),
        // The aws-lc provider supports the default versions; unreachable in practice.
        Err(error) => panic!("rustls configuration: {error}"),
    }
}

fn failed(failure: Failure) -> Outcome {
    Outcome::failed(failure, Source::Live)
}

fn pool_error_kind(error: &PoolError) -> &'static str {
    match error {
        PoolError::Timeout(_) => "timeout",
        PoolError::Backend(_) => "connect failed",
        PoolError::Closed => "closed",
        PoolError::NoRuntimeSpecified => "no runtime",
        PoolError::PostCreateHook(_) => "post-create hook failed",
    }
}

/// Server version, TLS of this connection, whether the role can write anywhere, role.
const SERVER_REPORT: &str = "SELECT current_setting('server_version'), \
    (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), \
    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) \
    OR EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
        WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
        AND n.nspname NOT LIKE 'pg\\_toast%' \
        AND (has_table_privilege(c.oid, 'INSERT') OR has_table_privilege(c.oid, 'UPDATE') \
             OR has_table_privilege(c.oid, 'DELETE') OR has_table_privilege(c.oid, 'TRUNCATE'))) \
    OR EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
        AND n.nspname NOT LIKE 'pg\\_%' AND has_schema_privilege(n.oid, 'CREATE')) \
    OR EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname IN \
        ('pg_write_all_data', 'pg_write_server_files', 'pg_execute_server_program') \
        AND pg_has_role(r.oid, 'MEMBER')), \
    current_user::text";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_run_the_query_under_a_limit() {
        assert_eq!(
            limited_query("SELECT id FROM t WHERE k = $1 ; \n"),
            "SELECT * FROM (\nSELECT id FROM t WHERE k = $1\n) AS ctxd_lookup LIMIT $2"
        );
        assert!(
            limited_query("SELECT id FROM t WHERE k = $1 -- newest first")
                .ends_with("-- newest first\n) AS ctxd_lookup LIMIT $2")
        );
    }

    #[test]
    fn a_server_going_away_is_a_lost_connection() {
        for lost in [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::CONNECTION_FAILURE,
        ] {
            assert!(connection_lost(&lost), "{}", lost.code());
        }
        for kept in [
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::QUERY_CANCELED,
            SqlState::UNDEFINED_TABLE,
        ] {
            assert!(!connection_lost(&kept), "{}", kept.code());
        }
    }

    #[test]
    fn setup_errors_name_their_key() {
        let error = PostgresSetupError::Refused {
            reason: "cannot execute INSERT in a read-only transaction".to_owned(),
        };
        assert_eq!(error.key(), "query");
        assert_eq!(
            error.reason(),
            "refused by the server in a read-only transaction: cannot execute INSERT in a read-only transaction"
        );
        let error = PostgresSetupError::DsnNotSet {
            name: "ORDERS_DSN".to_owned(),
        };
        assert_eq!(error.key(), "dsn_env");
    }
}
