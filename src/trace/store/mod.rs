//! The trace store — a SQLite file, or a PostgreSQL store shared by replicas
//! ([`pg`]) with the same record model: schema and migrations, the write path the
//! [`TraceWriter`](super::writer) owns, and the read-only readers behind
//! `GET /v1/traces`, the handle trace route, replays and `ctxd traces`.
//!
//! Design goals:
//! - One write connection ([`TraceStore`]), owned by the trace writer thread; readers
//!   ([`TraceReader`]) open their own read-only connections, and the server shares a
//!   bounded set of them through a [`ReaderPool`]. WAL lets both run at once.
//! - A turn is committed whole or not at all: its turn row, its shape's keys (when new),
//!   retained content and build go in the batch's one transaction.
//! - The file never holds a lookup value, a secret or unretained content. Records hold
//!   key names, keyed digests, locators and fingerprints by construction
//!   ([`super::record`]); retained items are sealed with XChaCha20-Poly1305 under
//!   `DigestKey::derive("ctxd-retention")`, a random nonce per row, and the tenant and
//!   fingerprint as associated data, so a row moved to another tenant or fingerprint
//!   no longer opens.
//! - Serializing and sealing happen in [`RowEncoder`], on the caller's thread, so the
//!   single writer thread only runs SQL.
//! - The SQL stays plain (no JSON functions, no `INDEXED BY`) so the PostgreSQL store
//!   ([`pg`]) runs the same searches on the same schema; `ON CONFLICT … DO
//!   NOTHING/UPDATE` is in both.
//!
//! # Rooms, and which way they depend
//!
//! Each module uses only those listed above it (and [`super::query`], [`super::record`],
//! which use nothing of the store); this file only declares and re-exports them.
//!
//! | module | holds |
//! |---|---|
//! | `error` | [`StoreError`] and the SQLite-failure helper |
//! | `schema` | migrations, the version check, connection settings |
//! | `seal` | the retention cipher (pure) |
//! | `rows` | [`RowEncoder`] and the rows it encodes ([`TraceRows`], [`Queued`], …) |
//! | `write` | [`TraceStore`]: the write connection and its batch transaction |
//! | `prune` | deleting records past their keep in small transactions, measuring the store; the operator's connection of `ctxd traces prune` |
//! | `pg` | the PostgreSQL store: target, connection, migrations under an advisory lock, batch writes, the reader's statements |
//! | `read` | [`TraceReader`]: a read-only connection to either store (SQLite, or `pg`); runs the searches [`super::query`] plans |
//! | `backend` | [`StoreTarget`] (where the store is) and [`TraceBackend`] (the writer's connection to either) |
//! | `pool` | [`ReaderPool`]: a bounded set of readers, checked out per request |
//!
//! # Schema (version [`SCHEMA_VERSION`])
//!
//! | table | rows | keys and indexes |
//! |---|---|---|
//! | `turns` | one per turn: filter columns, its `shape` and `provider_count` (v6; NULL and 0 for turns written before), the body of its records | `seq` (autoincrement, the cursor), `turn_id` unique, `(tenant, seq, started_at_ms)`, `(tenant, shape, seq, started_at_ms)` where `shape` is set (v6) |
//! | `shape_keys` | one per (name, status) pair of a turn shape (v6): `kind` `provider` or `layer` | primary key `(tenant, kind, name, status, shape)`, `WITHOUT ROWID` |
//! | `layer_decisions` | one per layer decision of a turn written before v6 | `(tenant, layer, status, turn_seq)` (v5 drops `(tenant, status, turn_seq)`) |
//! | `provider_records` | one per provider record of a turn written before v6 (its JSON, or empty: the body's next line) | `(turn_seq)`, `(tenant, provider, status, turn_seq)` (v5 drops `(tenant, status, turn_seq)`) |
//! | `retained_content` | one per tenant and fingerprint: nonce ‖ ciphertext | primary key `(tenant, fingerprint)`, `(expires_at_ms)` |
//! | `builds` | one per build digest | primary key `digest` |
//! | `handle_operations` | one per operation on a handle (v2): filter columns + the record JSON | primary key `(tenant, handle_id, sequence)`, `(tenant, at_ms)` (v3, for pruning) |
//! | `schema_version` | one per applied migration | primary key `version` |
//!
//! Why these indexes: a search walks them newest first, one stream per matching shape
//! (and, for turns written before shapes, one of the row indexes, checking its other
//! filters with point lookups; see [`super::query`]), so a page costs about `limit`
//! index entries per walked stream whatever the store's size. A turn with a shape
//! writes one row and four index entries, whatever its providers and layers. A status
//! filter without its name walks the name-led index under each of the tenant's names,
//! so no index is led by `(tenant, status)`: each cost every turn written one entry per
//! provider record or layer decision. There is
//! no `(tenant, started_at_ms)` index: a time window is checked from the covering
//! `(tenant, seq, started_at_ms)` walk, because results are ordered by `seq` and an
//! index ordered by time would need a sort of the whole window. The cost moves to
//! narrow windows far in the past, which walk every newer turn of the tenant in that
//! covering index (about 4 ms for 83 k turns; `CTXD_BENCH_SEARCH=1 cargo bench --bench
//! trace_writer` measures every shape on a million provider records).
//!
//! Plans are chosen without statistics (ctxd never runs `ANALYZE`), so they are the ones
//! the `EXPLAIN QUERY PLAN` tests in [`super::query`] pin down.

mod backend;
pub(crate) mod codec;
mod error;
mod pg;
mod pool;
pub(crate) mod prune;
mod read;
mod rows;
mod schema;
mod seal;
mod write;

pub use super::query::{SearchPage, SearchQuery};
pub use backend::StoreTarget;
pub(crate) use backend::TraceBackend;
pub use error::StoreError;
pub(crate) use pg::probe as probe_postgres;
pub use pg::{PgTarget, PgTraceStore};
pub(crate) use pool::{ReaderCheckout, ReaderPool, ReaderPoolSettings};
pub use prune::Pruned;
pub(crate) use prune::disk_available;
pub use read::{StoreCounts, TraceReader};
pub use rows::{
    HandleOperationRow, Queued, RetainedRow, RowEncoder, ShapeKey, TraceRows, TurnRow, TurnShape,
};
pub use write::{TraceStore, Written};

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
