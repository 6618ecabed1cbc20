//! The read-only SQLite provider: one bound query over one database file, the lookup
//! value as its only parameter (`?1`), rows mapped to items.
//!
//! Safety comes from how connections are made, not from reading the SQL:
//! - every pooled connection is opened with `SQLITE_OPEN_READ_ONLY | SQLITE_OPEN_URI |
//!   SQLITE_OPEN_NO_MUTEX` on `file://<percent-encoded absolute path>?mode=ro`, then gets
//!   `PRAGMA query_only = ON`, defensive mode, untrusted schema, and last an authorizer
//!   that allows only `SELECT`, column reads (not of `pragma_*` table-valued functions),
//!   recursive CTEs and an allowlist of built-in functions; everything else (writes, DDL,
//!   `ATTACH`, `PRAGMA`, transactions, `random()`…) fails when the statement is prepared;
//! - [`SqliteProvider::open`] prepares the query once through that same path and refuses
//!   it unless it is a single statement that SQLite reports read-only
//!   (`sqlite3_stmt_readonly`: this catches `VACUUM`, which never reaches the authorizer
//!   while being prepared), whose only parameter is `?1` and which returns an `id`
//!   column. Each lookup checks read-only again before stepping.
//!
//! deadpool-sqlite 0.14 opens connections with `Connection::open` (default flags) and
//! offers no way to pass flags, so its manager is given the `mode=ro` URI (it never
//! creates or writes the file) and a `post_create` hook replaces that connection with one
//! opened with the read-only flags above before hardening it. Every connection the pool
//! hands out has been through the hook.
//!
//! Time: the call's deadline bounds the wait for a connection (`timeout_at`), lock waits
//! (`busy_timeout` = the remaining budget) and the statement itself (a progress handler
//! that interrupts SQLite once the deadline passes; removed after the statement, so a
//! pooled connection never keeps an old deadline).
//!
//! Outcomes: rows → `OK`, zero rows → `NOT_FOUND` (no record), source `LIVE`, currentness
//! `CURRENT` (the database is the system of record); the budget running out → `TIMEOUT`
//! (`DEADLINE` inside SQLite, [`POOL_EXHAUSTED`] while waiting for a connection); a
//! closed pool → `UNAVAILABLE` [`POOL_CLOSED`]; any other database failure (busy, file
//! gone, corrupt) → `UNAVAILABLE` [`DATABASE_ERROR`]; a row that cannot be mapped →
//! `INVALID_RESPONSE` `MALFORMED`; then the shared bounds and secret checks. Lookup-time
//! failures are logged with the SQLite error code only: no message, so no value.
//!
//! Shutdown: a pooled connection is dropped on tokio's blocking pool, which panics
//! outside a runtime. [`SqliteProvider::close`] (and the drop of the last clone) closes
//! the pool inside the current runtime, or inside a small temporary one when there is
//! none, so neither can abort the process.

use super::LookupCall;
use super::PoolSettings;
use super::items::{ItemDraft, ItemsBuilder};
use crate::bounds;
use crate::bounds::BoundsViolation;
use crate::contract::{Currentness, Source};
use crate::outcome::{Failure, Outcome, detail};
use crate::timestamp::rfc3339_utc;
use connection::{connect, harden, read_only_uri, reserve_heap};
use deadpool_sqlite::{Config, Hook, HookError, Pool, PoolConfig, PoolError, Runtime};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, Row, Statement};
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

mod connection;

use detail::{DATABASE_ERROR, POOL_CLOSED};

/// SQLite virtual machine steps between two deadline checks: small enough to stop within
/// well under a millisecond, large enough that the check costs nothing measurable.
const PROGRESS_STEPS: std::ffi::c_int = 1000;
/// Bound on a readiness check and on the checks `open` runs.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// A read-only SQLite provider. Cheap to clone: clones share the connection pool.
#[derive(Clone)]
pub struct SqliteProvider {
    inner: Arc<Inner>,
}

struct Inner {
    /// Connections opened read-only and hardened by the `post_create` hook; at most
    /// `pool.max_size` of them, so at most that many lookups run inside SQLite at once.
    pool: Pool,
    /// The bound query, checked at `open`.
    query: Arc<str>,
    /// The absolute database path, for readiness messages.
    database: PathBuf,
}

impl Drop for Inner {
    fn drop(&mut self) {
        close_pool(&self.pool);
    }
}

/// Why a SQLite provider could not be set up. Messages name the file or the query
/// problem; there is no lookup value at setup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqliteSetupError {
    #[error("database {}: the file does not exist", .path.display())]
    Missing { path: PathBuf },
    #[error("database {}: cannot open it: {reason}", .path.display())]
    Unreadable { path: PathBuf, reason: String },
    #[error("database {}: not a SQLite database ({reason})", .path.display())]
    NotADatabase { path: PathBuf, reason: String },
    #[error("query: does not prepare as a read-only SELECT: {reason}")]
    Query { reason: String },
    #[error("query: must use ?1 as its only parameter ({found})")]
    Parameters { found: String },
    #[error("query: {problem}")]
    Columns { problem: String },
    #[error("database {}: connection pool: {reason}", .path.display())]
    Pool { path: PathBuf, reason: String },
}

impl SqliteSetupError {
    /// The binding key the problem is about: `database` or `query`.
    pub fn key(&self) -> &'static str {
        match self {
            SqliteSetupError::Missing { .. }
            | SqliteSetupError::Unreadable { .. }
            | SqliteSetupError::NotADatabase { .. }
            | SqliteSetupError::Pool { .. } => "database",
            SqliteSetupError::Query { .. }
            | SqliteSetupError::Parameters { .. }
            | SqliteSetupError::Columns { .. } => "query",
        }
    }

    /// The message without the `database …:` or `query:` that [`SqliteSetupError::key`]
    /// says: `/srv/orders.db: the file does not exist`.
    pub fn reason(&self) -> String {
        match self {
            SqliteSetupError::Missing { path } => {
                format!("{}: the file does not exist", path.display())
            }
            SqliteSetupError::Unreadable { path, reason } => {
                format!("{}: cannot open it: {reason}", path.display())
            }
            SqliteSetupError::NotADatabase { path, reason } => {
                format!("{}: not a SQLite database ({reason})", path.display())
            }
            SqliteSetupError::Pool { path, reason } => {
                format!("{}: connection pool: {reason}", path.display())
            }
            SqliteSetupError::Query { reason } => {
                format!("does not prepare as a read-only SELECT: {reason}")
            }
            SqliteSetupError::Parameters { found } => {
                format!("must use ?1 as its only parameter ({found})")
            }
            SqliteSetupError::Columns { problem } => problem.clone(),
        }
    }
}

impl SqliteProvider {
    /// Opens a pool on an existing database file, read-only, and checks up front that
    /// the file opens and the query prepares with exactly one parameter (`?1`), is a
    /// single read-only statement and returns an `id` column.
    pub async fn open(
        database: &Path,
        query: &str,
        pool: &PoolSettings,
    ) -> Result<SqliteProvider, SqliteSetupError> {
        let path = existing_file(database)?;
        let uri: Arc<str> = read_only_uri(&path).into();
        let mut config = Config::new(uri.as_ref());
        config.pool = Some(PoolConfig::new(pool.max_size.max(1)));
        reserve_heap(pool.max_size.max(1));
        let Ok(builder) = config.builder(Runtime::Tokio1);
        let hook_uri = uri.clone();
        let pool = builder
            .post_create(Hook::async_fn(move |wrapper, _| {
                let uri = hook_uri.clone();
                Box::pin(async move {
                    wrapper
                        .interact(move |conn| harden(conn, &uri))
                        .await
                        .map_err(|error| HookError::message(error.to_string()))?
                        .map_err(HookError::Backend)
                })
            }))
            .build()
            .map_err(|error| SqliteSetupError::Pool {
                path: path.clone(),
                reason: error.to_string(),
            })?;

        let provider = SqliteProvider {
            inner: Arc::new(Inner {
                pool,
                query: query.into(),
                database: path,
            }),
        };
        provider.inspect().await?;
        Ok(provider)
    }

    /// One lookup: binds the value as `?1`, reads at most `call.limit` rows (and never
    /// more than [`bounds::MAX_ITEMS`]), maps columns to items and applies the bounds and
    /// secret checks. `TIMEOUT` when `call.deadline` passes. Dropping the future (the
    /// turn was answered without it) stops the statement inside SQLite too.
    pub async fn lookup(&self, call: &LookupCall<'_>) -> Outcome {
        let abandoned = AbandonOnDrop::default();
        let deadline = call.deadline;
        let conn = match tokio::time::timeout_at(deadline, self.inner.pool.get()).await {
            Err(_) => return failed(Failure::PoolExhausted),
            Ok(Err(PoolError::Closed)) => {
                return failed(Failure::PoolClosed);
            }
            Ok(Err(error)) => {
                tracing::warn!(
                    provider = call.provider,
                    error = pool_error_kind(&error),
                    "sqlite connection unavailable"
                );
                return failed(Failure::DatabaseError);
            }
            Ok(Ok(conn)) => conn,
        };

        let query = self.inner.query.clone();
        let value = call.value.to_owned();
        let limit = usize::try_from(call.limit)
            .map_or(bounds::MAX_ITEMS, |limit| limit.min(bounds::MAX_ITEMS));
        let stop = Stop {
            deadline: deadline.into_std(),
            abandoned: Arc::clone(&abandoned.0),
        };
        let read = conn.interact(move |conn| read_items(conn, &query, &value, limit, stop));
        let read = match tokio::time::timeout_at(deadline, read).await {
            Err(_) => return failed(Failure::Deadline),
            Ok(Err(_)) => {
                tracing::warn!(
                    provider = call.provider,
                    "sqlite lookup panicked or was cancelled"
                );
                return failed(Failure::DatabaseError);
            }
            Ok(Ok(read)) => read,
        };
        // Back to the pool before the CPU work of the checks.
        drop(conn);

        let items = match read {
            Ok(items) => items,
            Err(ReadError::Refused(failure)) => return failed(failure),
            Err(ReadError::Bounds(violation)) => return failed(Failure::from(&violation)),
            Err(ReadError::Sqlite(error)) => {
                let failure = classify(&error);
                if failure == Failure::DatabaseError {
                    tracing::warn!(
                        provider = call.provider,
                        code = sqlite_code(&error),
                        "sqlite lookup failed"
                    );
                }
                return failed(failure);
            }
        };
        match items.finish(call.secrets) {
            Ok((items, redactions)) => Outcome::answered(items, Currentness::Current, Source::Live)
                .with_redactions(redactions),
            Err(violation) => failed(Failure::from(&violation)),
        }
    }

    /// Readiness: the file is still there, a connection can be had and the query still
    /// prepares (with the same checks as `open`). The error is a short description with
    /// status and detail; it never holds a lookup value.
    pub async fn check(&self) -> Result<(), String> {
        if self.inner.pool.is_closed() {
            return Err(format!("UNAVAILABLE ({POOL_CLOSED})"));
        }
        if !self.inner.database.is_file() {
            return Err(format!(
                "UNAVAILABLE ({DATABASE_ERROR}): database {} is missing",
                self.inner.database.display()
            ));
        }
        self.inspect()
            .await
            .map_err(|error| format!("UNAVAILABLE ({DATABASE_ERROR}): {error}"))
    }

    /// Closes the pool: idle connections are closed now, checked-out ones when their
    /// lookup ends; later lookups answer `UNAVAILABLE` (`POOL_CLOSED`). Safe to call
    /// more than once, and outside a tokio runtime.
    pub fn close(&self) {
        close_pool(&self.inner.pool);
    }

    /// Gets a connection and runs the setup checks on the query through it.
    async fn inspect(&self) -> Result<(), SqliteSetupError> {
        let path = &self.inner.database;
        let conn = match tokio::time::timeout(CHECK_TIMEOUT, self.inner.pool.get()).await {
            Err(_) => {
                return Err(SqliteSetupError::Pool {
                    path: path.clone(),
                    reason: format!("no connection within {CHECK_TIMEOUT:?}"),
                });
            }
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => return Err(setup_error(path, error)),
        };
        let query = self.inner.query.clone();
        let checked = conn
            .interact(move |conn| {
                conn.busy_timeout(CHECK_TIMEOUT)
                    .map_err(|error| SqliteSetupError::Query {
                        reason: error.to_string(),
                    })?;
                inspect_query(conn, &query)
            })
            .await;
        match checked {
            Ok(result) => result,
            Err(error) => Err(SqliteSetupError::Pool {
                path: path.clone(),
                reason: error.to_string(),
            }),
        }
    }
}

/// Sets its flag when dropped: when the lookup's future is dropped mid-statement, the
/// progress handler sees it and interrupts SQLite, so an abandoned lookup neither runs
/// on to its deadline nor holds its connection.
#[derive(Default)]
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// When a statement must stop: its deadline, or its lookup abandoned.
#[derive(Debug, Clone)]
struct Stop {
    deadline: StdInstant,
    abandoned: Arc<AtomicBool>,
}

impl Stop {
    #[cfg(test)]
    fn at(deadline: StdInstant) -> Stop {
        Stop {
            deadline,
            abandoned: Arc::default(),
        }
    }

    fn now(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) || StdInstant::now() >= self.deadline
    }
}

fn failed(failure: Failure) -> Outcome {
    Outcome::failed(failure, Source::Live)
}

/// The absolute path of `database`, if it is an existing regular file.
fn existing_file(database: &Path) -> Result<PathBuf, SqliteSetupError> {
    let path = std::path::absolute(database).map_err(|error| SqliteSetupError::Unreadable {
        path: database.to_path_buf(),
        reason: error.to_string(),
    })?;
    match std::fs::metadata(&path) {
        Ok(metadata) if metadata.is_file() => Ok(path),
        Ok(_) => Err(SqliteSetupError::Unreadable {
            path,
            reason: "not a regular file".to_owned(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(SqliteSetupError::Missing { path })
        }
        Err(error) => Err(SqliteSetupError::Unreadable {
            path,
            reason: error.to_string(),
        }),
    }
}

/// The checks [`SqliteProvider::open`] runs, on one connection opened exactly as a pooled
/// one and closed after, without a pool or a runtime: the file exists and is a database,
/// and the query prepares read-only with `?1` as its only parameter and an `id` column.
/// For `ctxd validate`, which must refuse what `serve` would.
pub fn inspect(database: &Path, query: &str) -> Result<(), SqliteSetupError> {
    let path = existing_file(database)?;
    let conn = connect(&read_only_uri(&path)).map_err(|error| {
        if error.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
            SqliteSetupError::NotADatabase {
                path: path.clone(),
                reason: error.to_string(),
            }
        } else {
            SqliteSetupError::Unreadable {
                path: path.clone(),
                reason: error.to_string(),
            }
        }
    })?;
    conn.busy_timeout(CHECK_TIMEOUT)
        .map_err(|error| SqliteSetupError::Query {
            reason: error.to_string(),
        })?;
    inspect_query(&conn, query)
}

/// The setup checks on the query, run on a pooled (hardened) connection.
fn inspect_query(conn: &Connection, query: &str) -> Result<(), SqliteSetupError> {
    let unprepared = |error: rusqlite::Error| SqliteSetupError::Query {
        reason: error.to_string(),
    };
    // A statement that reads the file notices a schema changed by another process;
    // `prepare` alone would trust the schema this connection loaded earlier.
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| {
        row.get::<_, i64>(0)
    })
    .map_err(unprepared)?;
    // Not the statement cache: a cached statement would pass without a fresh prepare.
    let statement = conn.prepare(query).map_err(unprepared)?;
    if !statement.readonly() {
        return Err(SqliteSetupError::Query {
            reason: "the statement may write".to_owned(),
        });
    }
    let count = statement.parameter_count();
    if count != 1 || statement.parameter_name(1) != Some("?1") {
        let names: Vec<&str> = (1..=count)
            .filter_map(|index| statement.parameter_name(index))
            .collect();
        let found = match (count, names.is_empty()) {
            (0, _) => "it has no parameter".to_owned(),
            (_, true) => format!("it has {count} anonymous parameter(s)"),
            (_, false) => format!("it has {count} parameter slot(s): {}", names.join(", ")),
        };
        return Err(SqliteSetupError::Parameters { found });
    }
    Layout::of(&statement).map_err(|problem| SqliteSetupError::Columns {
        problem: problem.to_owned(),
    })?;
    Ok(())
}

fn setup_error(path: &Path, error: PoolError) -> SqliteSetupError {
    let path = path.to_path_buf();
    match error {
        PoolError::Backend(error) | PoolError::PostCreateHook(HookError::Backend(error)) => {
            if error.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
                SqliteSetupError::NotADatabase {
                    path,
                    reason: error.to_string(),
                }
            } else {
                SqliteSetupError::Unreadable {
                    path,
                    reason: error.to_string(),
                }
            }
        }
        other => SqliteSetupError::Pool {
            path,
            reason: other.to_string(),
        },
    }
}

fn pool_error_kind(error: &PoolError) -> &'static str {
    match error {
        PoolError::Timeout(_) => "timeout",
        PoolError::Backend(_) => "open failed",
        PoolError::Closed => "closed",
        PoolError::NoRuntimeSpecified => "no runtime",
        PoolError::PostCreateHook(_) => "hardening failed",
    }
}

/// The SQLite extended result code, for logs: the code, never the message.
fn sqlite_code(error: &rusqlite::Error) -> i32 {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => failure.extended_code,
        _ => -1,
    }
}

fn classify(error: &rusqlite::Error) -> Failure {
    match error.sqlite_error_code() {
        Some(ErrorCode::OperationInterrupted) => Failure::Deadline,
        // A value over the connection's length bound, or the heap limit reached: the
        // answer would be larger than ctxd reads.
        Some(ErrorCode::TooBig | ErrorCode::OutOfMemory) => Failure::ResponseTooLarge,
        _ => Failure::DatabaseError,
    }
}

/// Why reading rows stopped short of items.
#[derive(Debug)]
enum ReadError {
    Sqlite(rusqlite::Error),
    /// Refused before all rows were read: malformed, too large, out of time.
    Refused(Failure),
    /// A bound of the contract crossed while the rows were mapped.
    Bounds(BoundsViolation),
}

impl From<rusqlite::Error> for ReadError {
    fn from(error: rusqlite::Error) -> Self {
        ReadError::Sqlite(error)
    }
}

fn malformed() -> ReadError {
    ReadError::Refused(Failure::Malformed)
}

fn too_large() -> ReadError {
    ReadError::Refused(Failure::ResponseTooLarge)
}

/// Runs the query on a pooled connection until `stop` and maps at most `limit` rows.
/// Installs the progress handler and lock-wait bound for this statement only.
fn read_items(
    conn: &mut Connection,
    query: &str,
    value: &str,
    limit: usize,
    stop: Stop,
) -> Result<ItemsBuilder, ReadError> {
    let remaining = match stop.deadline.checked_duration_since(StdInstant::now()) {
        Some(remaining) if !stop.now() => remaining,
        _ => return Err(ReadError::Refused(Failure::Deadline)),
    };
    // Lock waits end with the budget (and never exceed the longest provider timeout:
    // `busy_timeout` panics on durations that overflow an i32 of milliseconds).
    conn.busy_timeout(remaining.min(Duration::from_millis(bounds::MAX_TIMEOUT_MS)))?;
    conn.progress_handler(PROGRESS_STEPS, Some(move || stop.now()))?;
    let read = read_rows(conn, query, value, limit);
    let reset = conn.progress_handler(PROGRESS_STEPS, None::<fn() -> bool>);
    let items = read?;
    reset?;
    Ok(items)
}

fn read_rows(
    conn: &Connection,
    query: &str,
    value: &str,
    limit: usize,
) -> Result<ItemsBuilder, ReadError> {
    let mut statement = conn.prepare_cached(query)?;
    // Checked at open; checked again because it costs nothing. Some statements (VACUUM)
    // never reach the authorizer.
    if !statement.readonly() {
        return Err(ReadError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
            None,
        )));
    }
    let mut rows = statement.query([value])?;
    let mut layout: Option<Layout> = None;
    let mut items = ItemsBuilder::new(u32::try_from(limit).unwrap_or(u32::MAX));
    while items.len() < limit {
        let Some(row) = rows.next()? else { break };
        // From the first row, not the prepared statement: a schema change re-prepares
        // the statement on its first step and may change its columns.
        let layout = match &layout {
            Some(layout) => layout,
            None => layout.insert(Layout::of(row.as_ref()).map_err(|_| malformed())?),
        };
        let mut item = items.item().map_err(ReadError::Bounds)?;
        layout.item(row, &mut item)?;
        items.push(item).map_err(ReadError::Bounds)?;
    }
    Ok(items)
}

/// Which result column feeds which item field.
#[derive(Debug)]
struct Layout {
    id: usize,
    title: Option<usize>,
    content: Option<usize>,
    updated_at: Option<usize>,
    metadata: Vec<(usize, String)>,
}

impl Layout {
    fn of(statement: &Statement<'_>) -> Result<Layout, &'static str> {
        let names = statement.column_names();
        for (index, name) in names.iter().enumerate() {
            if names[..index].contains(name) {
                return Err("returns two columns with the same name: alias one of them");
            }
        }
        let find = |wanted: &str| names.iter().position(|name| *name == wanted);
        let id = find("id").ok_or("returns no `id` column: alias the record id AS id")?;
        let (title, content, updated_at) = (find("title"), find("content"), find("updated_at"));
        let metadata = names
            .iter()
            .enumerate()
            .filter(|(_, name)| !matches!(**name, "id" | "title" | "content" | "updated_at"))
            .map(|(index, name)| (index, (*name).to_owned()))
            .collect();
        Ok(Layout {
            id,
            title,
            content,
            updated_at,
            metadata,
        })
    }

    /// One row into `item`, each value measured by the builder before it is copied.
    fn item(&self, row: &Row<'_>, item: &mut ItemDraft) -> Result<(), ReadError> {
        match value_at(row, self.id)? {
            ValueRef::Integer(id) => item.id(id.to_string()),
            ValueRef::Text(text) => item.id(text_of(text)?),
            ValueRef::Null | ValueRef::Real(_) | ValueRef::Blob(_) => return Err(malformed()),
        }
        .map_err(ReadError::Bounds)?;
        if let Some(index) = self.title
            && let Some(title) = optional_text(value_at(row, index)?)?
        {
            item.title(title).map_err(ReadError::Bounds)?;
        }
        if let Some(index) = self.content
            && let Some(content) = optional_text(value_at(row, index)?)?
        {
            item.content(content).map_err(ReadError::Bounds)?;
        }
        if let Some(index) = self.updated_at {
            match value_at(row, index)? {
                ValueRef::Null => Ok(()),
                ValueRef::Text(text) => item.updated_at(text_of(text)?),
                ValueRef::Integer(seconds) => {
                    item.updated_at(rfc3339_utc(seconds).ok_or_else(malformed)?)
                }
                ValueRef::Real(_) | ValueRef::Blob(_) => return Err(malformed()),
            }
            .map_err(ReadError::Bounds)?;
        }
        for (index, name) in &self.metadata {
            let value = match value_at(row, *index)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(number) => Value::from(number),
                ValueRef::Real(number) => {
                    Value::Number(Number::from_f64(number).ok_or_else(malformed)?)
                }
                ValueRef::Text(text) => {
                    // Measured before it is copied.
                    let text = text_of(text)?;
                    item.metadata_text(name, text).map_err(ReadError::Bounds)?;
                    continue;
                }
                ValueRef::Blob(_) => return Err(malformed()),
            };
            item.metadata_owned(name.clone(), value)
                .map_err(ReadError::Bounds)?;
        }
        Ok(())
    }
}

/// A column's value, refusing any single TEXT or BLOB larger than a whole response
/// before it is copied.
fn value_at<'r>(row: &'r Row<'_>, index: usize) -> Result<ValueRef<'r>, ReadError> {
    let value = row.get_ref(index)?;
    match value {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes)
            if bytes.len() > bounds::MAX_RESPONSE_BYTES =>
        {
            Err(too_large())
        }
        value => Ok(value),
    }
}

/// `title` and `content`: TEXT (borrowed from the row), or a number in its SQL text
/// form; NULL is absent.
fn optional_text(value: ValueRef<'_>) -> Result<Option<Cow<'_, str>>, ReadError> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Text(text) => text_of(text).map(Some),
        ValueRef::Integer(number) => Ok(Some(Cow::Owned(number.to_string()))),
        ValueRef::Real(number) => Ok(Some(Cow::Owned(number.to_string()))),
        ValueRef::Blob(_) => Err(malformed()),
    }
}

/// A TEXT value as text, borrowed from the row: copied only by the builder, once it
/// fits.
fn text_of(bytes: &[u8]) -> Result<Cow<'_, str>, ReadError> {
    std::str::from_utf8(bytes)
        .map(Cow::Borrowed)
        .map_err(|_| malformed())
}

/// Closes a pool where its connections can be dropped: deadpool drops them through
/// `tokio::task::spawn_blocking`, which panics outside a runtime (and a panic in a
/// destructor during unwinding aborts).
fn close_pool(pool: &Pool) {
    if tokio::runtime::Handle::try_current().is_ok() {
        pool.close();
        return;
    }
    match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => {
            {
                let _entered = runtime.enter();
                pool.close();
            }
            // Dropping the runtime waits for the blocking tasks that close connections.
            drop(runtime);
        }
        // No runtime to close them on: keep the connections rather than panic.
        Err(_) => std::mem::forget(pool.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Item, ProviderStatus};
    use detail::POOL_EXHAUSTED;
    use rusqlite::hooks::{AuthContext, Authorization};
    use tokio::time::Instant;

    fn github_token() -> String {
        format!("{}{}", "ghp_", "a".repeat(36))
    }

    /// A database file in `dir` built from `sql` (read-write, then closed).
    fn database(dir: &Path, sql: &str) -> PathBuf {
        let path = dir.join("test.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(sql).unwrap();
        drop(conn);
        path
    }

    async fn open(path: &Path, query: &str) -> SqliteProvider {
        SqliteProvider::open(path, query, &PoolSettings::default())
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn call(value: &str, limit: u32, budget: Duration) -> LookupCall<'_> {
        LookupCall {
            provider: "test",
            key: "k",
            value,
            limit,
            deadline: Instant::now() + budget,
            secrets: Default::default(),
        }
    }

    async fn lookup(provider: &SqliteProvider, value: &str, limit: u32) -> Outcome {
        provider
            .lookup(&call(value, limit, Duration::from_secs(5)))
            .await
    }

    fn assert_failure(outcome: &Outcome, status: ProviderStatus, detail: &str) {
        assert_eq!(
            (outcome.status(), outcome.detail()),
            (status, Some(detail)),
            "{outcome:?}"
        );
        assert!(outcome.items_found().is_empty());
    }

    const RECORDS: &str = "
        CREATE TABLE records (id, k, title, content, updated_at, plan, seats, ratio, note);";

    #[tokio::test]
    async fn maps_every_column_type() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            &format!(
                "{RECORDS}
                INSERT INTO records VALUES
                  ('R-1', 'a', 'First', 'Body one', '2026-11-28T09:14:00Z', 'Enterprise', 240, 0.5, NULL),
                  (42, 'b', NULL, NULL, 1795857240, NULL, -1, 1e300, 'x'),
                  ('R-3', 'c', 7, 2.5, NULL, '', 0, 0.0, NULL);"
            ),
        );
        let provider = open(
            &path,
            "SELECT id, title, content, updated_at, plan, seats, ratio, note FROM records WHERE k = ?1",
        )
        .await;

        let outcome = lookup(&provider, "a", 5).await;
        assert_eq!(outcome.status(), ProviderStatus::Ok);
        assert_eq!(outcome.source, Source::Live);
        assert_eq!(outcome.currentness(), Some(Currentness::Current));
        assert_eq!(outcome.version, None);
        let expected = Item {
            id: "R-1".to_owned(),
            title: Some("First".to_owned()),
            content: "Body one".to_owned(),
            metadata: serde_json::json!({
                "plan": "Enterprise", "seats": 240, "ratio": 0.5, "note": null
            })
            .as_object()
            .unwrap()
            .clone(),
            updated_at: Some("2026-11-28T09:14:00Z".to_owned()),
        };
        assert_eq!(outcome.items_found(), [expected]);
        // Metadata keeps the query's column order.
        let keys: Vec<&String> = outcome.items_found()[0].metadata.keys().collect();
        assert_eq!(keys, ["plan", "seats", "ratio", "note"]);

        // Integer id, NULL title / content, updated_at as unix seconds.
        let outcome = lookup(&provider, "b", 5).await;
        let item = &outcome.items_found()[0];
        assert_eq!(item.id, "42");
        assert_eq!(item.title, None);
        assert_eq!(item.content, "");
        assert_eq!(item.updated_at.as_deref(), Some("2026-11-28T09:14:00Z"));
        assert_eq!(item.metadata["plan"], Value::Null);
        assert_eq!(item.metadata["seats"], -1);
        assert_eq!(item.metadata["ratio"], 1e300);

        // Numbers in title / content take their text form; NULL updated_at is absent.
        let outcome = lookup(&provider, "c", 5).await;
        let item = &outcome.items_found()[0];
        assert_eq!(item.title.as_deref(), Some("7"));
        assert_eq!(item.content, "2.5");
        assert_eq!(item.updated_at, None);
        assert_eq!(item.metadata["plan"], "");
    }

    #[tokio::test]
    async fn aliases_name_the_fields_and_only_id_is_required() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (code TEXT, name TEXT, Title TEXT);
             INSERT INTO t VALUES ('C-1', 'Name', 'upper');",
        );
        let provider = open(
            &path,
            "SELECT code AS id, name AS title, Title FROM t WHERE code = ?1",
        )
        .await;
        let outcome = lookup(&provider, "C-1", 1).await;
        let item = &outcome.items_found()[0];
        assert_eq!(item.id, "C-1");
        assert_eq!(item.title.as_deref(), Some("Name"));
        // Names are case-sensitive: `Title` is metadata.
        assert_eq!(item.metadata["Title"], "upper");
        assert_eq!(item.content, "");
        assert_eq!(item.updated_at, None);
    }

    #[tokio::test]
    async fn unmappable_values_are_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            &format!(
                "{RECORDS}
                INSERT INTO records (id, k) VALUES (NULL, 'null-id'), (1.5, 'real-id'),
                  (x'00', 'blob-id'), ('', 'empty-id'), (CAST(x'ff' AS TEXT), 'bad-utf8');
                INSERT INTO records (id, k, note) VALUES ('R', 'blob-meta', x'0102');
                INSERT INTO records (id, k, content) VALUES ('R', 'blob-content', x'0102');
                INSERT INTO records (id, k, title) VALUES ('R', 'blob-title', x'0102');
                INSERT INTO records (id, k, updated_at) VALUES ('R', 'real-time', 1.5),
                  ('R', 'blob-time', x'01'), ('R', 'far-time', 400000000000);
                INSERT INTO records (id, k, ratio) VALUES ('R', 'inf', 1e999);"
            ),
        );
        let provider = open(
            &path,
            "SELECT id, title, content, updated_at, ratio, note FROM records WHERE k = ?1",
        )
        .await;
        for key in [
            "null-id",
            "real-id",
            "blob-id",
            "empty-id",
            "bad-utf8",
            "blob-meta",
            "blob-content",
            "blob-title",
            "real-time",
            "blob-time",
            "far-time",
            "inf",
        ] {
            let outcome = lookup(&provider, key, 5).await;
            assert_eq!(
                (outcome.status(), outcome.detail()),
                (ProviderStatus::InvalidResponse, Some(detail::MALFORMED)),
                "{key}: {outcome:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_id_column_lost_to_a_schema_change_is_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id TEXT, k TEXT); INSERT INTO t VALUES ('R-1', 'a');",
        );
        let provider = open(&path, "SELECT * FROM t WHERE k = ?1").await;
        assert_eq!(lookup(&provider, "a", 1).await.items_found()[0].id, "R-1");
        // Another process alters the table under the cached statement.
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("ALTER TABLE t RENAME COLUMN id TO ident")
            .unwrap();
        drop(writer);
        let outcome = lookup(&provider, "a", 1).await;
        assert_failure(&outcome, ProviderStatus::InvalidResponse, detail::MALFORMED);
    }

    #[tokio::test]
    async fn the_requested_limit_is_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id INTEGER, k TEXT);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
             INSERT INTO t SELECT i, CASE WHEN i <= 10 THEN 'ten' ELSE 'many' END FROM n;",
        );
        let provider = open(
            &path,
            "SELECT id FROM t WHERE k = ?1 OR ?1 = 'all' ORDER BY id",
        )
        .await;
        let ids = |outcome: &Outcome| -> Vec<String> {
            outcome
                .items_found()
                .iter()
                .map(|item| item.id.clone())
                .collect()
        };
        let outcome = lookup(&provider, "ten", 3).await;
        assert_eq!(outcome.status(), ProviderStatus::Ok);
        assert_eq!(ids(&outcome), ["1", "2", "3"]);
        assert_eq!(lookup(&provider, "ten", 10).await.items_found().len(), 10);
        assert_eq!(lookup(&provider, "ten", 50).await.items_found().len(), 10);
        // A limit of 0 (never asked by a Project: maxItems is at least 1) reads no row.
        let none = lookup(&provider, "ten", 0).await;
        assert_eq!(
            (none.status(), none.items_found().len()),
            (ProviderStatus::NotFound, 0)
        );
        // Never more than MAX_ITEMS, whatever was requested.
        let all = lookup(&provider, "all", u32::MAX).await;
        assert_eq!(all.status(), ProviderStatus::Ok);
        assert_eq!(all.items_found().len(), bounds::MAX_ITEMS);
    }

    #[tokio::test]
    async fn zero_rows_are_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE t (id TEXT, k TEXT);");
        let provider = open(&path, "SELECT id FROM t WHERE k = ?1").await;
        let outcome = lookup(&provider, "nobody", 5).await;
        assert_eq!(outcome.status(), ProviderStatus::NotFound);
        assert_eq!(outcome.detail(), None);
        assert!(outcome.items_found().is_empty());
        assert_eq!(outcome.source, Source::Live);
        assert!(!outcome.found_anything());
    }

    #[tokio::test]
    async fn secrets_are_refused_by_detector_name() {
        let dir = tempfile::tempdir().unwrap();
        let token = github_token();
        let path = database(
            dir.path(),
            &format!(
                "CREATE TABLE t (id TEXT, k TEXT, content TEXT, note TEXT);
                 INSERT INTO t VALUES ('R-1', 'clean', 'nothing here', 'fine'),
                   ('R-2', 'content', 'token: {token}', NULL),
                   ('R-3', 'meta', 'clean', 'see {token}');"
            ),
        );
        let provider = open(&path, "SELECT id, content, note FROM t WHERE k = ?1").await;
        assert_eq!(
            lookup(&provider, "clean", 5).await.status(),
            ProviderStatus::Ok
        );
        for key in ["content", "meta"] {
            let outcome = lookup(&provider, key, 5).await;
            assert_failure(&outcome, ProviderStatus::SecretDetected, "github_token");
            assert!(!format!("{outcome:?}").contains(&token));
        }
    }

    #[tokio::test]
    async fn oversize_items_and_responses_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id TEXT, k TEXT, content TEXT);
             INSERT INTO t VALUES ('big', 'item', printf('%.*c', 70000, 'x'));
             INSERT INTO t VALUES ('huge', 'value', printf('%.*c', 2000000, 'x'));
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20)
             INSERT INTO t SELECT 'r' || i, 'many', printf('%.*c', 60000, 'x') FROM n;",
        );
        let provider = open(&path, "SELECT id, content FROM t WHERE k = ?1").await;
        let outcome = lookup(&provider, "item", 5).await;
        assert_failure(
            &outcome,
            ProviderStatus::LimitExceeded,
            detail::ITEM_TOO_LARGE,
        );
        // 20 items of 60 000 bytes: each fits, together they exceed 1 MiB.
        let outcome = lookup(&provider, "many", 20).await;
        assert_failure(
            &outcome,
            ProviderStatus::LimitExceeded,
            detail::RESPONSE_TOO_LARGE,
        );
        // Within the limit's first 17 rows they still fit.
        assert_eq!(lookup(&provider, "many", 17).await.items_found().len(), 17);
        // One value larger than a whole response is refused before it is copied.
        let outcome = lookup(&provider, "value", 5).await;
        assert_failure(
            &outcome,
            ProviderStatus::LimitExceeded,
            detail::RESPONSE_TOO_LARGE,
        );
    }

    #[tokio::test]
    async fn values_over_the_length_bound_fail_inside_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE unused (id TEXT);");
        let too_large = |outcome: &Outcome| {
            assert_failure(
                outcome,
                ProviderStatus::LimitExceeded,
                detail::RESPONSE_TOO_LARGE,
            )
        };
        // SQLite refuses to make a 200 MB blob at all (it used to build it, and its
        // 400 MB hex, before the bounds applied).
        for query in [
            "SELECT 'x' AS id, hex(zeroblob(200000000)) AS content WHERE ?1 = ?1",
            "SELECT 'x' AS id, length(zeroblob(200000000)) AS size WHERE ?1 = ?1",
            // Aggregates stop at the bound too: 3000 values of 1000 bytes.
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
             SELECT 'x' AS id, length(group_concat(printf('%.*c', 1000, 'x'), '')) AS size
             FROM n WHERE ?1 = ?1",
        ] {
            let provider = open(&path, query).await;
            too_large(&lookup(&provider, "a", 1).await);
        }
        // Within the length bound but over the response bound: read, then refused.
        let provider = open(
            &path,
            "SELECT 'x' AS id, hex(zeroblob(600000)) AS content WHERE ?1 = ?1",
        )
        .await;
        too_large(&lookup(&provider, "a", 1).await);
        // Below both, values are untouched.
        let provider = open(
            &path,
            "SELECT 'x' AS id, length(zeroblob(1000000)) AS size WHERE ?1 = ?1",
        )
        .await;
        let outcome = lookup(&provider, "a", 1).await;
        assert_eq!(outcome.items_found()[0].metadata["size"], 1_000_000);

        let conn = connect(&read_only_uri(&path)).unwrap();
        assert_eq!(
            conn.limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH)
                .unwrap(),
            connection::MAX_VALUE_BYTES
        );
    }

    #[tokio::test]
    async fn every_provider_connection_raises_the_process_heap_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE t (id TEXT, k TEXT);");
        let settings = PoolSettings {
            max_size: 3,
            ..PoolSettings::default()
        };
        let _provider = SqliteProvider::open(&path, "SELECT id FROM t WHERE k = ?1", &settings)
            .await
            .unwrap();
        // Read on a plain connection: a hardened one refuses every PRAGMA.
        let conn = Connection::open_in_memory().unwrap();
        let limit: i64 = conn
            .pragma_query_value(None, "hard_heap_limit", |row| row.get(0))
            .unwrap();
        // Other tests of this process open providers too: at least this one's share.
        assert!(
            limit >= (64 << 20) + 3 * connection::HEAP_PER_CONNECTION,
            "{limit}"
        );
    }

    #[tokio::test]
    async fn an_abandoned_lookup_stops_inside_sqlite_and_frees_its_connection() {
        let dir = tempfile::tempdir().unwrap();
        let provider = counting_on_one_connection(dir.path()).await;
        // A long statement with a distant deadline, on the only connection...
        let busy = provider.clone();
        let slow = tokio::spawn(async move {
            busy.lookup(&call("100000000000", 1, Duration::from_secs(60)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        // ...is abandoned, as when its turn is answered without it.
        slow.abort();
        assert!(slow.await.unwrap_err().is_cancelled());
        // The connection comes back long before that deadline: the statement stopped.
        let outcome = provider
            .lookup(&call("10", 1, Duration::from_secs(20)))
            .await;
        assert_eq!(outcome.items_found()[0].id, "n10", "{outcome:?}");
    }

    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                (
                    entry.file_name().to_string_lossy().into_owned(),
                    std::fs::read(entry.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    #[tokio::test]
    async fn queries_that_write_are_refused_at_open_and_the_file_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id TEXT, k TEXT); INSERT INTO t VALUES ('R-1', 'a');
             CREATE INDEX t_k ON t (k); CREATE VIEW v AS SELECT id, k FROM t;",
        );
        let other = dir.path().join("other.db").display().to_string();
        let vacuum_target = dir.path().join("copy.db");
        let before = snapshot(dir.path());
        let writes = [
            "INSERT INTO t (id, k) VALUES ('R-2', ?1)".to_owned(),
            "INSERT INTO t (id, k) VALUES ('R-2', ?1) RETURNING id".to_owned(),
            "UPDATE t SET k = ?1".to_owned(),
            "UPDATE t SET k = 'x' WHERE k = ?1 RETURNING id".to_owned(),
            "DELETE FROM t WHERE k = ?1".to_owned(),
            "DELETE FROM t WHERE k = ?1 RETURNING id".to_owned(),
            "REPLACE INTO t VALUES ('R-1', ?1)".to_owned(),
            "CREATE TABLE x AS SELECT ?1 AS id".to_owned(),
            "CREATE TEMP TABLE x AS SELECT ?1 AS id".to_owned(),
            "CREATE INDEX i ON t(k) WHERE k = ?1".to_owned(),
            "DROP TABLE t".to_owned(),
            "DROP VIEW v".to_owned(),
            "ALTER TABLE t ADD COLUMN c TEXT DEFAULT ?1".to_owned(),
            "ATTACH DATABASE ?1 AS other".to_owned(),
            format!("ATTACH DATABASE '{other}' AS other"),
            "DETACH DATABASE ?1".to_owned(),
            "PRAGMA writable_schema = 1".to_owned(),
            "PRAGMA query_only = OFF".to_owned(),
            "SELECT writable_schema AS id FROM pragma_writable_schema WHERE ?1".to_owned(),
            "SELECT name AS id FROM pragma_table_info('t') WHERE ?1".to_owned(),
            "SELECT name AS id FROM PRAGMA_table_info('t') WHERE ?1".to_owned(),
            "WITH x AS (SELECT ?1 AS id) INSERT INTO t (id, k) SELECT id, id FROM x".to_owned(),
            "WITH x AS (INSERT INTO t VALUES ('R-9', 'z') RETURNING id) SELECT id FROM x WHERE id = ?1".to_owned(),
            "SELECT id FROM t WHERE k = ?1; DROP TABLE t".to_owned(),
            "SELECT id FROM t WHERE k = ?1; INSERT INTO t VALUES ('R-9', 'z')".to_owned(),
            "BEGIN IMMEDIATE".to_owned(),
            "SAVEPOINT s".to_owned(),
            format!("VACUUM INTO '{}'", vacuum_target.display()),
            "VACUUM".to_owned(),
            "REINDEX".to_owned(),
            "ANALYZE".to_owned(),
            "SELECT load_extension(?1) AS id".to_owned(),
            "SELECT random() AS id, ?1".to_owned(),
            "SELECT last_insert_rowid() AS id, ?1".to_owned(),
        ];
        for query in &writes {
            let result = SqliteProvider::open(&path, query, &PoolSettings::default()).await;
            let error = match result {
                Ok(_) => panic!("{query}: opened"),
                Err(error) => error,
            };
            assert!(
                matches!(error, SqliteSetupError::Query { .. }),
                "{query}: {error}"
            );
        }
        assert_eq!(snapshot(dir.path()), before, "the folder changed");
        assert!(!vacuum_target.exists());
    }

    #[tokio::test]
    async fn every_layer_of_read_only_holds_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE t (id TEXT);");
        let before = snapshot(dir.path());
        let conn = connect(&read_only_uri(&path)).unwrap();
        // VACUUM INTO never consults the authorizer when prepared (`open` refuses it as
        // not read-only), but is denied when it runs.
        let copy = dir.path().join("copy.db");
        let vacuum = conn
            .execute_batch(&format!("VACUUM INTO '{}'", copy.display()))
            .unwrap_err();
        assert_eq!(
            vacuum.sqlite_error_code(),
            Some(ErrorCode::AuthorizationForStatementDenied)
        );
        assert!(!copy.exists());
        let insert = "INSERT INTO t VALUES ('x')";
        let denied = conn.execute(insert, []).unwrap_err();
        assert_eq!(
            denied.sqlite_error_code(),
            Some(ErrorCode::AuthorizationForStatementDenied)
        );
        // Without the authorizer: query_only refuses.
        conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>)
            .unwrap();
        let refused = conn.execute(insert, []).unwrap_err();
        assert_eq!(
            refused.sqlite_error_code(),
            Some(ErrorCode::ReadOnly),
            "{refused}"
        );
        // Without query_only too: the read-only open refuses.
        conn.pragma_update(None, "query_only", false).unwrap();
        let refused = conn.execute(insert, []).unwrap_err();
        assert_eq!(
            refused.sqlite_error_code(),
            Some(ErrorCode::ReadOnly),
            "{refused}"
        );
        assert!(conn.is_readonly("main").unwrap());
        drop(conn);
        assert_eq!(snapshot(dir.path()), before);
    }

    #[tokio::test]
    async fn reads_recursive_ctes_views_and_builtins_are_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id TEXT, k TEXT, at TEXT, doc TEXT);
             INSERT INTO t VALUES ('r1', 'a', '2026-01-02 03:04:05', '{\"n\": 3}');
             CREATE VIEW v AS SELECT id, k, upper(k) AS big FROM t;",
        );
        let query = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3)
             SELECT v.id || '-' || n.i AS id, lower(v.big) AS title,
                    json_extract(t.doc, '$.n') AS n, count(*) OVER () AS total,
                    strftime('%Y', t.at) AS year, coalesce(NULL, 'c') AS content
             FROM v JOIN t USING (id), n WHERE v.k = ?1 ORDER BY n.i";
        let provider = open(&path, query).await;
        let outcome = lookup(&provider, "a", 5).await;
        assert_eq!(outcome.status(), ProviderStatus::Ok, "{outcome:?}");
        assert_eq!(outcome.items_found().len(), 3);
        let item = &outcome.items_found()[2];
        assert_eq!(item.id, "r1-3");
        assert_eq!(item.title.as_deref(), Some("a"));
        assert_eq!(item.metadata["n"], 3);
        assert_eq!(item.metadata["total"], 3);
        assert_eq!(item.metadata["year"], "2026");
        assert_eq!(item.content, "c");
    }

    #[tokio::test]
    async fn the_parameter_must_be_exactly_1() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE t (id TEXT, k TEXT);");
        for query in [
            "SELECT id FROM t WHERE k = ?2",
            "SELECT id FROM t",
            "SELECT id FROM t WHERE k = ?1 OR k = ?2",
            "SELECT id FROM t WHERE k = ?",
            "SELECT id FROM t WHERE k = :key",
            "SELECT id FROM t WHERE k = $key",
        ] {
            let error = SqliteProvider::open(&path, query, &PoolSettings::default())
                .await
                .err()
                .unwrap_or_else(|| panic!("{query}: opened"));
            assert!(
                matches!(error, SqliteSetupError::Parameters { .. }),
                "{query}: {error}"
            );
            assert!(
                error.to_string().starts_with("query: must use ?1"),
                "{error}"
            );
        }
        // ?1 used twice is still one parameter.
        open(&path, "SELECT id FROM t WHERE k = ?1 OR id = ?1").await;
    }

    #[tokio::test]
    async fn queries_without_an_id_or_with_duplicate_columns_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE t (id TEXT, k TEXT, name TEXT);");
        for (query, needle) in [
            ("SELECT name FROM t WHERE k = ?1", "no `id` column"),
            ("SELECT id, k, k FROM t WHERE k = ?1", "same name"),
            ("SELECT id AS ID FROM t WHERE k = ?1", "no `id` column"),
            ("SELECT id FROM t WHERE k = ?1 garbage", "does not prepare"),
            ("SELECT id FROM missing WHERE k = ?1", "no such table"),
        ] {
            let error = SqliteProvider::open(&path, query, &PoolSettings::default())
                .await
                .err()
                .unwrap_or_else(|| panic!("{query}: opened"));
            assert!(error.to_string().contains(needle), "{query}: {error}");
        }
    }

    #[tokio::test]
    async fn the_file_must_exist_and_be_a_database() {
        let dir = tempfile::tempdir().unwrap();
        let query = "SELECT 1 AS id WHERE ?1";
        let missing = dir.path().join("missing.db");
        let error = SqliteProvider::open(&missing, query, &PoolSettings::default())
            .await
            .err()
            .unwrap();
        assert_eq!(
            error,
            SqliteSetupError::Missing {
                path: missing.clone()
            }
        );
        assert!(
            error
                .to_string()
                .ends_with("missing.db: the file does not exist")
        );
        assert!(!missing.exists(), "opening must never create the file");

        let text = dir.path().join("notes.db");
        std::fs::write(&text, "this is not a database, just text long enough to have a header....................................................").unwrap();
        let error = SqliteProvider::open(&text, query, &PoolSettings::default())
            .await
            .err()
            .unwrap();
        assert!(
            matches!(error, SqliteSetupError::NotADatabase { .. }),
            "{error}"
        );

        let error = SqliteProvider::open(dir.path(), query, &PoolSettings::default())
            .await
            .err()
            .unwrap();
        assert!(
            matches!(error, SqliteSetupError::Unreadable { .. }),
            "{error}"
        );

        // An empty file is a valid, empty database: the query's table is missing.
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, "").unwrap();
        let error = SqliteProvider::open(
            &empty,
            "SELECT id FROM t WHERE k = ?1",
            &PoolSettings::default(),
        )
        .await
        .err()
        .unwrap();
        assert!(matches!(error, SqliteSetupError::Query { .. }), "{error}");
    }

    #[tokio::test]
    async fn paths_are_percent_encoded_into_the_uri() {
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("we?ird #dir %41 ü&mode=rw");
        std::fs::create_dir(&odd).unwrap();
        let path = database(
            &odd,
            "CREATE TABLE t (id TEXT); INSERT INTO t VALUES ('R-1');",
        );
        assert!(
            read_only_uri(&path)
                .ends_with("/we%3Fird%20%23dir%20%2541%20%C3%BC%26mode%3Drw/test.db?mode=ro")
        );
        let provider = open(&path, "SELECT id FROM t WHERE ?1 = 'x'").await;
        assert_eq!(lookup(&provider, "x", 1).await.items_found()[0].id, "R-1");
        // Relative paths resolve against the current directory.
        let relative = SqliteProvider::open(
            Path::new("definitely/not/here.db"),
            "SELECT 1 AS id WHERE ?1",
            &PoolSettings::default(),
        )
        .await
        .err()
        .unwrap();
        let SqliteSetupError::Missing { path } = relative else {
            panic!("{relative}")
        };
        assert!(path.is_absolute());
    }

    /// Counts to `?1` in a recursive CTE: slow for large values.
    const COUNTING: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < CAST(?1 AS INTEGER))
         SELECT 'n' || max(x) AS id FROM c";

    /// A provider running [`COUNTING`] on a pool of one connection, over a database in
    /// `dir`.
    async fn counting_on_one_connection(dir: &Path) -> SqliteProvider {
        let path = database(dir, "CREATE TABLE unused (id TEXT);");
        let settings = PoolSettings {
            max_size: 1,
            ..PoolSettings::default()
        };
        SqliteProvider::open(&path, COUNTING, &settings)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_time_budget_is_enforced_inside_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let provider = counting_on_one_connection(dir.path()).await;
        let budget = Duration::from_millis(200);
        let started = std::time::Instant::now();
        let outcome = provider.lookup(&call("1000000000", 5, budget)).await;
        let elapsed = started.elapsed();
        assert_failure(&outcome, ProviderStatus::Timeout, detail::DEADLINE);
        assert!(elapsed < budget + Duration::from_millis(200), "{elapsed:?}");
        // The same (only) connection serves the next lookup: the old deadline is gone.
        let outcome = lookup(&provider, "1000", 1).await;
        assert_eq!(outcome.items_found()[0].id, "n1000");
        assert!(provider.check().await.is_ok());
    }

    #[test]
    fn the_progress_handler_interrupts_and_is_removed_afterwards() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE unused (id TEXT);");
        let mut conn = connect(&read_only_uri(&path)).unwrap();
        let deadline = StdInstant::now() + Duration::from_millis(50);
        let error =
            read_items(&mut conn, COUNTING, "1000000000", 1, Stop::at(deadline)).unwrap_err();
        let ReadError::Sqlite(error) = error else {
            panic!("{error:?}")
        };
        assert_eq!(
            error.sqlite_error_code(),
            Some(ErrorCode::OperationInterrupted)
        );
        assert_eq!(
            (classify(&error).status(), classify(&error).detail()),
            (ProviderStatus::Timeout, Some(detail::DEADLINE))
        );
        // Long past that deadline, a long statement on the same connection still runs.
        let counted: String = conn
            .query_row(COUNTING, ["100000"], |row| row.get(0))
            .unwrap();
        assert_eq!(counted, "n100000");
        // A deadline already past never reaches SQLite.
        let past = StdInstant::now() - Duration::from_millis(1);
        assert!(matches!(
            read_items(&mut conn, COUNTING, "1", 1, Stop::at(past)),
            Err(ReadError::Refused(failure)) if failure.status() == ProviderStatus::Timeout
        ));
    }

    #[tokio::test]
    async fn waiting_for_a_connection_is_bounded_by_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let provider = counting_on_one_connection(dir.path()).await;
        let busy = provider.clone();
        let slow = tokio::spawn(async move {
            busy.lookup(&call("1000000000", 1, Duration::from_millis(600)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let budget = Duration::from_millis(150);
        let started = std::time::Instant::now();
        let outcome = provider.lookup(&call("10", 1, budget)).await;
        assert_failure(&outcome, ProviderStatus::Timeout, POOL_EXHAUSTED);
        let elapsed = started.elapsed();
        assert!(elapsed < budget + Duration::from_millis(200), "{elapsed:?}");
        assert_failure(
            &slow.await.unwrap(),
            ProviderStatus::Timeout,
            detail::DEADLINE,
        );
    }

    #[tokio::test]
    async fn check_reports_readiness() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(dir.path(), "CREATE TABLE t (id TEXT, k TEXT);");
        let provider = open(&path, "SELECT id FROM t WHERE k = ?1").await;
        assert_eq!(provider.check().await, Ok(()));

        // The table goes away: the query no longer prepares.
        let writer = Connection::open(&path).unwrap();
        writer.execute_batch("DROP TABLE t").unwrap();
        drop(writer);
        let problem = provider.check().await.unwrap_err();
        assert!(
            problem.starts_with("UNAVAILABLE (DATABASE_ERROR)"),
            "{problem}"
        );
        assert!(problem.contains("no such table"), "{problem}");
        let outcome = lookup(&provider, "a", 1).await;
        assert_failure(&outcome, ProviderStatus::Unavailable, DATABASE_ERROR);

        // The file goes away.
        std::fs::remove_file(&path).unwrap();
        let problem = provider.check().await.unwrap_err();
        assert!(problem.contains("is missing"), "{problem}");
    }

    #[tokio::test]
    async fn a_closed_provider_answers_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id TEXT, k TEXT); INSERT INTO t VALUES ('R-1', 'a');",
        );
        let provider = open(&path, "SELECT id FROM t WHERE k = ?1").await;
        let clone = provider.clone();
        assert_eq!(lookup(&provider, "a", 1).await.status(), ProviderStatus::Ok);
        provider.close();
        provider.close();
        assert_failure(
            &lookup(&clone, "a", 1).await,
            ProviderStatus::Unavailable,
            POOL_CLOSED,
        );
        assert_eq!(
            clone.check().await,
            Err("UNAVAILABLE (POOL_CLOSED)".to_owned())
        );
    }

    #[test]
    fn closing_or_dropping_outside_a_runtime_does_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = database(
            dir.path(),
            "CREATE TABLE t (id TEXT, k TEXT); INSERT INTO t VALUES ('R-1', 'a');",
        );
        let query = "SELECT id FROM t WHERE k = ?1";
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap()
        };
        let open_and_use = || {
            runtime().block_on(async {
                let provider = open(&path, query).await;
                assert_eq!(lookup(&provider, "a", 1).await.status(), ProviderStatus::Ok);
                provider
            })
        };
        // The runtime is gone; the pool still holds an idle connection.
        let dropped = open_and_use();
        drop(dropped);
        let closed = open_and_use();
        closed.close();
        drop(closed);
    }

    #[test]
    fn unix_seconds_format_like_sqlite_datetime() {
        let conn = Connection::open_in_memory().unwrap();
        for seconds in [
            0,
            1,
            -1,
            86_399,
            86_400,
            951_782_400,   // 2000-02-29
            1_795_857_240, // 2026-11-28T09:14:00Z
            4_107_542_399,
            -62_135_596_800, // 0001-01-01
            -62_167_219_200, // 0000-01-01
            253_402_300_799, // 9999-12-31T23:59:59
        ] {
            let sqlite: String = conn
                .query_row(
                    "SELECT strftime('%Y-%m-%dT%H:%M:%SZ', ?1, 'unixepoch')",
                    [seconds],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(
                rfc3339_utc(seconds).as_deref(),
                Some(sqlite.as_str()),
                "{seconds}"
            );
        }
        assert_eq!(rfc3339_utc(253_402_300_800), None);
        assert_eq!(rfc3339_utc(-62_167_219_201), None);
        assert_eq!(rfc3339_utc(i64::MAX), None);
        assert_eq!(rfc3339_utc(i64::MIN), None);
    }

    /// What one lookup costs, and how much of it is deadpool's recycle round trip:
    /// `cargo test --release --lib providers::sqlite::tests::lookup_cost -- --ignored --nocapture`
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "timing, not behaviour"]
    async fn lookup_cost() {
        const N: u32 = 1000;
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let database = root.join("fixtures/demo/data/support.db");
        let query = "SELECT id, 'Order ' || id AS title, description AS content, status, total_eur, updated_at FROM orders WHERE customer_id = ?1 ORDER BY updated_at DESC LIMIT 20";
        let provider = open(&database, query).await;
        for _ in 0..50 {
            lookup(&provider, "CUST-1042", 5).await;
        }

        let started = std::time::Instant::now();
        for _ in 0..N {
            let outcome = lookup(&provider, "CUST-1042", 5).await;
            assert_eq!(outcome.items_found().len(), 2);
        }
        let full = started.elapsed() / N;

        let started = std::time::Instant::now();
        for _ in 0..N {
            drop(provider.inner.pool.get().await.unwrap());
        }
        let get = started.elapsed() / N;

        let started = std::time::Instant::now();
        let conn = provider.inner.pool.get().await.unwrap();
        for _ in 0..N {
            conn.interact(|_| ()).await.unwrap();
        }
        let hop = started.elapsed() / N;
        drop(conn);

        let mut direct = connect(&read_only_uri(&database)).unwrap();
        let started = std::time::Instant::now();
        for _ in 0..N {
            let deadline = StdInstant::now() + Duration::from_secs(1);
            let items = read_items(&mut direct, query, "CUST-1042", 5, Stop::at(deadline));
            assert_eq!(items.unwrap().len(), 2);
        }
        let query_only = started.elapsed() / N;
        println!(
            "per lookup over {N}: full {full:?}; pool.get() with recycle {get:?}; \
             interact hop {hop:?}; query + mapping on a held connection {query_only:?}"
        );
    }
}
