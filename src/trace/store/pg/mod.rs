//! The trace store on PostgreSQL, shared by every replica: where it is ([`PgTarget`],
//! read from `[trace] store_env` with the TLS rule of PostgreSQL providers), the one
//! blocking connection type both the writer and the readers use ([`PgConnection`]),
//! and the schema, write, prune and read statements in the rooms below.
//!
//! Design goals:
//! - The record model is the SQLite store's: the same tables and columns, bodies
//!   compressed by the same codec and retained content sealed by the same cipher
//!   ([`super::RowEncoder`] runs before either store sees a row), so every reader
//!   decodes and opens a row the same way whichever store holds it.
//! - Callers stay synchronous, as with SQLite: the writer thread and the readers (on
//!   the blocking pool) each own a [`PgConnection`], a `tokio-postgres` client driven by
//!   a current-thread runtime of its own. The connection's I/O runs only while a call
//!   waits on it, on the caller's thread; nothing is spawned on the server's workers.
//!
//! | module | holds |
//! |---|---|
//! | `schema` | migrations under `pg_advisory_lock`, the version check |
//! | `write` | [`PgTraceStore`]: the batch transaction (multi-row inserts), purge, prune, measure |
//! | `read` | the reader's statements: the same answers the SQLite reader's give |

mod read;
mod schema;
mod write;

pub use write::PgTraceStore;

use super::error::StoreError;
use crate::providers::postgres::{dsn, dsn_masks, shown_words, tls_connector};
use crate::providers::untrusted::Masks;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// How long connecting (and the TLS handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one statement may run before the server cancels it: a trace statement is a
/// few index seeks or one batch, never a scan.
const STATEMENT_TIMEOUT_MS: u32 = 30_000;

/// A PostgreSQL trace store: the parsed connection string from `store_env`, with the
/// TLS rule applied. Its `Debug` and its label never show the string.
#[derive(Clone)]
pub struct PgTarget {
    /// The env var the connection string came from: how messages name the store.
    pub(crate) env: String,
    /// Shared: a target is cloned into every reader pool and is large.
    config: std::sync::Arc<tokio_postgres::Config>,
    tls: bool,
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTarget")
            .field("env", &self.env)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl PgTarget {
    /// Parses `dsn` (the value of the env var `env`) under the providers' TLS rule:
    /// TLS required unless every host is loopback or a Unix socket. The error names
    /// the problem, never the string.
    pub(crate) fn parse(env: &str, dsn: &str) -> Result<PgTarget, String> {
        let parsed = dsn::parse(dsn)?;
        Ok(PgTarget {
            env: env.to_owned(),
            tls: parsed.tls(),
            config: std::sync::Arc::new(parsed.config),
        })
    }

    /// How errors and logs name this store: the env var, never the string.
    pub(crate) fn label(&self) -> PathBuf {
        PathBuf::from(format!("postgres:${}", self.env))
    }

    /// Whether connections use TLS.
    pub(crate) fn tls(&self) -> bool {
        self.tls
    }
}

/// One connection to the store with the runtime that drives it. `Send`: the writer
/// thread owns one, each pooled reader one.
pub(crate) struct PgConnection {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    label: PathBuf,
    /// The connection string's password: the server's words are shown through it.
    masks: Masks,
}

impl fmt::Debug for PgConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConnection")
            .field("store", &self.label)
            .finish_non_exhaustive()
    }
}

impl PgConnection {
    /// Connects (TLS as the target says) and sets the statement timeout. Must not be
    /// called from inside an async runtime: it blocks the calling thread.
    pub(crate) fn connect(target: &PgTarget) -> Result<PgConnection, StoreError> {
        let label = target.label();
        let failed = |reason: String| StoreError::Postgres {
            store: label.clone(),
            action: "connect",
            reason,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| failed(error.to_string()))?;
        let connecting = target.config.connect(tls_connector());
        let (client, connection) = runtime
            .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, connecting).await })
            .map_err(|_| failed(format!("no answer within {CONNECT_TIMEOUT:?}")))?
            .map_err(|error| failed(shown_words(&error, &dsn_masks(&target.config))))?;
        // Polled whenever a call on this thread waits on the runtime.
        runtime.spawn(async move {
            let _ = connection.await;
        });
        let conn = PgConnection {
            runtime,
            client,
            label,
            masks: dsn_masks(&target.config),
        };
        conn.batch(
            "set the statement timeout",
            &format!("SET statement_timeout = {STATEMENT_TIMEOUT_MS}"),
        )?;
        Ok(conn)
    }

    /// Whether the server closed the connection.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub(crate) fn label(&self) -> &PathBuf {
        &self.label
    }

    /// Runs `work` against the client on this connection's runtime, mapping a driver
    /// error to a [`StoreError`] naming `action`.
    pub(crate) fn run<'a, T, F>(
        &'a self,
        action: &'static str,
        work: impl FnOnce(&'a tokio_postgres::Client) -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>> + 'a,
    {
        self.runtime
            .block_on(work(&self.client))
            .map_err(|error| self.error(action, &error))
    }

    /// Runs `work` with mutable access to the client (transactions need it).
    pub(crate) fn run_mut<'a, T, F>(
        &'a mut self,
        action: &'static str,
        work: impl FnOnce(&'a mut tokio_postgres::Client) -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>> + 'a,
    {
        let label = self.label.clone();
        let masks = &self.masks;
        self.runtime
            .block_on(work(&mut self.client))
            .map_err(|error| StoreError::Postgres {
                store: label,
                action,
                reason: shown_words(&error, masks),
            })
    }

    /// Runs statements without parameters.
    pub(crate) fn batch(&self, action: &'static str, sql: &str) -> Result<(), StoreError> {
        self.run(action, |client| client.batch_execute(sql))
    }

    pub(crate) fn error(&self, action: &'static str, error: &tokio_postgres::Error) -> StoreError {
        StoreError::Postgres {
            store: self.label.clone(),
            action,
            reason: shown_words(error, &self.masks),
        }
    }
}

/// What `doctor` shows of a PostgreSQL store: the schema version it is at (`None`: no
/// trace store there yet, `serve` creates it) and this code's, after connecting on a
/// thread of its own (callers may be async).
pub(crate) fn probe(target: &PgTarget) -> Result<(Option<i64>, i64), StoreError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let conn = PgConnection::connect(target)?;
                Ok((schema::schema_version(&conn)?, schema::SCHEMA_VERSION))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(StoreError::Postgres {
                    store: target.label(),
                    action: "connect",
                    reason: "the probing thread panicked".to_owned(),
                })
            })
    })
}
