//! Which store a process writes and reads: a SQLite file of its own, or the PostgreSQL
//! store its replicas share. [`StoreTarget`] says where; [`TraceBackend`] is the writer
//! thread's connection to either, with the few operations the writer needs, so the
//! [`TraceWriter`](crate::trace::writer) stays the same actor over both.

use super::error::StoreError;
use super::pg::{PgTarget, PgTraceStore};
use super::prune::Pruned;
use super::read::TraceReader;
use super::rows::Queued;
use super::write::{TraceStore, Written};
use crate::digest::keyed::DigestKey;
use crate::trace::upkeep::StoreUsage;
use std::path::{Path, PathBuf};

/// Where the trace store is.
#[derive(Debug, Clone)]
pub enum StoreTarget {
    /// A SQLite file (WAL) this process writes alone.
    Sqlite(PathBuf),
    /// A PostgreSQL schema every replica writes.
    Postgres(PgTarget),
}

impl StoreTarget {
    /// How messages name the store: the file, or `postgres:$ENV`.
    pub(crate) fn label(&self) -> PathBuf {
        match self {
            StoreTarget::Sqlite(path) => path.clone(),
            StoreTarget::Postgres(target) => target.label(),
        }
    }

    /// The local file, whose filesystem the room check measures; `None` for PostgreSQL.
    pub(crate) fn local_file(&self) -> Option<&Path> {
        match self {
            StoreTarget::Sqlite(path) => Some(path),
            StoreTarget::Postgres(_) => None,
        }
    }

    /// A reader of this store. Blocks: call it off the async workers.
    pub(crate) fn open_reader(&self, key: Option<&DigestKey>) -> Result<TraceReader, StoreError> {
        match self {
            StoreTarget::Sqlite(path) => TraceReader::open(path, key),
            StoreTarget::Postgres(target) => TraceReader::open_postgres(target, key),
        }
    }
}

/// The writer thread's connection to its store.
#[derive(Debug)]
pub(crate) enum TraceBackend {
    Sqlite(TraceStore),
    Postgres(PgTraceStore),
}

impl TraceBackend {
    /// Opens (and migrates) the store, and reads what the writer needs before its
    /// first batch: the store's measure and its tenants. For PostgreSQL this runs on a
    /// thread of its own: its connection is driven by a runtime of its own, which cannot
    /// block inside the server's (`serve` opens the store from its async start-up).
    pub(crate) fn open_surveyed(
        target: &StoreTarget,
        key: &DigestKey,
    ) -> Result<(TraceBackend, StoreUsage, Vec<String>), StoreError> {
        let survey = || {
            let store = match target {
                StoreTarget::Sqlite(path) => TraceBackend::Sqlite(TraceStore::open(path, key)?),
                StoreTarget::Postgres(target) => {
                    TraceBackend::Postgres(PgTraceStore::open(target)?)
                }
            };
            let usage = store.usage()?;
            let tenants = store.tenants()?;
            Ok((store, usage, tenants))
        };
        match target {
            StoreTarget::Sqlite(_) => survey(),
            StoreTarget::Postgres(pg) => std::thread::scope(|scope| {
                scope.spawn(survey).join().unwrap_or_else(|_| {
                    Err(StoreError::Postgres {
                        store: pg.label(),
                        action: "open the store",
                        reason: "the opening thread panicked".to_owned(),
                    })
                })
            }),
        }
    }

    pub(crate) fn write_queued(&mut self, batch: &[Queued]) -> Result<Written, StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.write_queued(batch),
            TraceBackend::Postgres(store) => store.write_queued(batch),
        }
    }

    pub(crate) fn purge_expired(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.purge_expired(now_ms),
            TraceBackend::Postgres(store) => store.purge_expired(now_ms),
        }
    }

    pub(crate) fn prune_batch(
        &mut self,
        tenant: &str,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<Pruned, StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.prune_batch(tenant, cutoff_ms, batch),
            TraceBackend::Postgres(store) => store.prune_batch(tenant, cutoff_ms, batch),
        }
    }

    pub(crate) fn tenants(&self) -> Result<Vec<String>, StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.tenants(),
            TraceBackend::Postgres(store) => store.tenants(),
        }
    }

    pub(crate) fn oldest_started_ms(&self) -> Result<Option<i64>, StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.oldest_started_ms(),
            TraceBackend::Postgres(store) => store.oldest_started_ms(),
        }
    }

    /// Gives free pages back to the filesystem (SQLite); PostgreSQL's autovacuum does
    /// its own.
    pub(crate) fn release_free_pages(&self, pages: u32) -> Result<(), StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.release_free_pages(pages),
            TraceBackend::Postgres(_) => Ok(()),
        }
    }

    pub(crate) fn usage(&self) -> Result<StoreUsage, StoreError> {
        match self {
            TraceBackend::Sqlite(store) => store.usage(),
            TraceBackend::Postgres(store) => store.usage(),
        }
    }
}
