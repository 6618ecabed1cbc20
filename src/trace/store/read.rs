//! The read side: read-only connections behind `GET /v1/traces`, the handle trace
//! route, replays and `ctxd traces`. A reader runs the statements [`crate::trace::query`]
//! plans, decodes and parses the stored records and opens sealed content.

use super::codec::{self, DecodingDictionary};
use super::error::{StoreError, sqlite};
use super::pg::{PgConnection, PgTarget};
use super::schema::{BUSY_TIMEOUT, STATEMENT_CACHE, require_current};
use super::seal::RetentionCipher;
use crate::contract::Item;
use crate::digest::keyed::DigestKey;
use crate::trace::cursor::CursorSeal;
use crate::trace::query::{
    self, HANDLE_OPERATIONS, HandleOperationsPage, MAX_HANDLE_OPERATIONS, MAX_LIMIT, SearchPage,
    SearchQuery, Stream, TENANTS, TenantNames,
};
use crate::trace::record::HandleOpRecord;
use crate::trace::record::{StoredTurn, TurnRecord};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde::Serialize;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SELECT_DICTIONARY: &str = "SELECT bytes FROM record_dictionaries WHERE id = ?1";
/// Record dictionaries a reader keeps prepared.
const DICTIONARY_CACHE: usize = 256;
/// With each turn, whether it has a shape: then all its provider records are in its body.
const SELECT_TURN_BY_ID: &str =
    "SELECT seq, tenant, record, shape IS NOT NULL FROM turns WHERE turn_id = ?1";
const SELECT_TURN_BY_SEQ: &str = "SELECT record, shape IS NOT NULL FROM turns WHERE seq = ?1";
/// Provider records: the rows of turns written before shapes, and the count of those since.
const COUNT_PROVIDER_ROWS: &str = "SELECT COUNT(*) FROM provider_records";
const COUNT_SHAPED_PROVIDERS: &str =
    "SELECT CAST(COALESCE(SUM(provider_count), 0) AS BIGINT) FROM turns";
const SELECT_PROVIDERS: &str =
    "SELECT record FROM provider_records WHERE turn_seq = ?1 ORDER BY rowid";
const SELECT_RETAINED: &str =
    "SELECT ciphertext FROM retained_content WHERE tenant = ?1 AND fingerprint = ?2";

/// Row counts of a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreCounts {
    pub turns: u64,
    pub provider_records: u64,
    pub retained_items: u64,
}

/// A read-only connection (`SQLITE_OPEN_READ_ONLY`, `query_only`). Used by one thread
/// at a time (it is `Send`, not `Sync`): the server shares a few through a
/// [`ReaderPool`](super::ReaderPool), the CLI opens its own.
pub struct TraceReader {
    conn: ReadConnection,
    path: PathBuf,
    cipher: Option<RetentionCipher>,
    /// Seals and opens search cursors; without the key a search gives no cursor.
    cursors: Option<CursorSeal>,
    /// Record dictionaries read so far, prepared for decoding.
    dictionaries: RefCell<HashMap<i64, Arc<DecodingDictionary>>>,
}

/// The connection a reader runs its statements on: a SQLite file, or the PostgreSQL
/// store replicas share.
enum ReadConnection {
    Sqlite(Connection),
    Postgres(PgConnection),
}

/// A record body as a row holds it: JSON text (rows written before compression) or a
/// compressed body ([`codec`]).
enum Body {
    Json(String),
    Compressed(Vec<u8>),
}

impl FromSql for Body {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Text(text) => String::from_utf8(text.to_vec())
                .map(Body::Json)
                .map_err(|error| FromSqlError::Other(Box::new(error))),
            ValueRef::Blob(bytes) => Ok(Body::Compressed(bytes.to_vec())),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("path", &self.path)
            .field("retention_key", &self.cipher.is_some())
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// `key` decrypts retained content and seals search cursors; without it `retained`
    /// errors and a search issues no cursor (and takes none). The store must exist and
    /// have exactly this code's schema version.
    pub fn open(path: &Path, key: Option<&DigestKey>) -> Result<TraceReader, StoreError> {
        let open_error = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_error)?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite(path, "set busy_timeout"))?;
        conn.pragma_update(None, "query_only", true)
            .map_err(sqlite(path, "set query_only"))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        require_current(&conn, path)?;
        Ok(TraceReader {
            conn: ReadConnection::Sqlite(conn),
            path: path.to_path_buf(),
            cipher: key.map(RetentionCipher::new),
            cursors: key.map(CursorSeal::new),
            dictionaries: RefCell::default(),
        })
    }

    /// A reader of the PostgreSQL store at `target` (read-only transactions); the
    /// schema must be at exactly this code's version. Blocks: call it off the async
    /// workers.
    pub fn open_postgres(
        target: &PgTarget,
        key: Option<&DigestKey>,
    ) -> Result<TraceReader, StoreError> {
        let conn = PgConnection::open_reader(target)?;
        Ok(TraceReader {
            path: conn.label().clone(),
            conn: ReadConnection::Postgres(conn),
            cipher: key.map(RetentionCipher::new),
            cursors: key.map(CursorSeal::new),
            dictionaries: RefCell::default(),
        })
    }

    /// Whether the connection can still run statements (a PostgreSQL connection the
    /// server closed cannot).
    pub(crate) fn is_usable(&self) -> bool {
        match &self.conn {
            ReadConnection::Sqlite(_) => true,
            ReadConnection::Postgres(conn) => !conn.is_closed(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Turns matching every filter, newest first, each with all its provider records.
    /// A cursor is taken, and the next one given, only for this very search (tenant and
    /// filters): another one's is [`StoreError::InvalidCursor`].
    pub fn search(&self, query: &SearchQuery) -> Result<SearchPage, StoreError> {
        let before = match (&query.cursor, &self.cursors) {
            (None, _) => i64::MAX,
            (Some(cursor), Some(cursors)) => cursors.open(query, cursor)?,
            (Some(_), None) => {
                return Err(StoreError::NoCursorKey {
                    path: self.path.clone(),
                });
            }
        };
        let (seqs, last) = matching_seqs(&self.conn, &self.path, query, before)?;
        let next_cursor = last.and_then(|seq| Some(self.cursors.as_ref()?.seal(query, seq)));
        let mut traces = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let record: Option<(Body, bool)> = match &self.conn {
                ReadConnection::Sqlite(conn) => conn
                    .prepare_cached(SELECT_TURN_BY_SEQ)
                    .and_then(|mut statement| {
                        statement
                            .query_row([seq], |row| Ok((row.get(0)?, row.get(1)?)))
                            .optional()
                    })
                    .map_err(sqlite(&self.path, "read a turn"))?,
                ReadConnection::Postgres(conn) => conn
                    .turn_body_by_seq(seq)?
                    .map(|(body, shaped)| (Body::Compressed(body), shaped)),
            };
            // Only a concurrent deletion could remove it; there is none today.
            let Some((record, shaped)) = record else {
                continue;
            };
            traces.push(self.stored_turn(seq, &record, shaped)?);
        }
        Ok(SearchPage {
            traces,
            next_cursor,
            more: last.is_some(),
        })
    }

    /// `tenant: None` is for operator tools (CLI); the API always passes `Some` — another
    /// tenant's turn is `None`.
    pub(crate) fn turn(
        &self,
        tenant: Option<&str>,
        turn_id: &str,
    ) -> Result<Option<StoredTurn>, StoreError> {
        let row: Option<(i64, String, Body, bool)> = match &self.conn {
            ReadConnection::Sqlite(conn) => conn
                .prepare_cached(SELECT_TURN_BY_ID)
                .and_then(|mut statement| {
                    statement
                        .query_row([turn_id], |row| {
                            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                        })
                        .optional()
                })
                .map_err(sqlite(&self.path, "read a turn"))?,
            ReadConnection::Postgres(conn) => conn
                .turn_by_id(turn_id)?
                .map(|(seq, tenant, body, shaped)| (seq, tenant, Body::Compressed(body), shaped)),
        };
        match row {
            Some((seq, owner, record, shaped)) if tenant.is_none_or(|tenant| tenant == owner) => {
                self.stored_turn(seq, &record, shaped).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The turn at `seq` from its body. A turn with a shape (`shaped`) has all its
    /// provider records in its body, a line each after the turn's; one written before
    /// has a `provider_records` row per record, which holds the record or, empty, stands
    /// for the body's next line.
    fn stored_turn(&self, seq: i64, record: &Body, shaped: bool) -> Result<StoredTurn, StoreError> {
        let what = || format!("turn record at seq {seq}");
        let text = self.json_of(record, what)?;
        let mut lines = text.split('\n');
        let turn: TurnRecord = self.parse(lines.next().unwrap_or_default(), what)?;
        let mut embedded = lines;
        if shaped {
            let what = || format!("a provider record of seq {seq}");
            let providers = embedded
                .map(|json| self.parse(json, what))
                .collect::<Result<_, _>>()?;
            return Ok(StoredTurn { turn, providers });
        }
        let records: Vec<Body> = match &self.conn {
            ReadConnection::Sqlite(conn) => conn
                .prepare_cached(SELECT_PROVIDERS)
                .and_then(|mut statement| {
                    statement
                        .query_map([seq], |row| row.get::<_, Body>(0))
                        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                })
                .map_err(sqlite(&self.path, "read provider records"))?,
            ReadConnection::Postgres(conn) => conn
                .provider_bodies(seq)?
                .into_iter()
                .map(Body::Compressed)
                .collect(),
        };
        let what = || format!("a provider record of seq {seq}");
        let providers = records
            .iter()
            .map(|record| match record {
                Body::Compressed(bytes) if bytes.is_empty() => {
                    let json = embedded.next().ok_or_else(|| StoreError::Undecodable {
                        path: self.path.clone(),
                        what: what(),
                        reason: codec::DecodeError::Corrupt(
                            "its turn's body holds fewer provider records".to_owned(),
                        ),
                    })?;
                    self.parse(json, what)
                }
                stored => self.parse(&self.json_of(stored, what)?, what),
            })
            .collect::<Result<_, _>>()?;
        Ok(StoredTurn { turn, providers })
    }

    /// The JSON text of a record body: as stored, or decoded with its dictionary.
    fn json_of<'b>(
        &self,
        body: &'b Body,
        what: impl Fn() -> String,
    ) -> Result<Cow<'b, str>, StoreError> {
        let bytes = match body {
            Body::Json(text) => return Ok(Cow::Borrowed(text)),
            Body::Compressed(bytes) => bytes,
        };
        let undecodable = |reason| StoreError::Undecodable {
            path: self.path.clone(),
            what: what(),
            reason,
        };
        let id = codec::dictionary_of(bytes).map_err(undecodable)?;
        let dictionary = self.dictionary(id)?.map_err(undecodable)?;
        codec::decode(bytes, &dictionary)
            .map(Cow::Owned)
            .map_err(undecodable)
    }

    /// The record dictionary `id`, read once per reader; missing or damaged, the reason a
    /// body made with it cannot be decoded.
    fn dictionary(
        &self,
        id: i64,
    ) -> Result<Result<Arc<DecodingDictionary>, codec::DecodeError>, StoreError> {
        if let Some(found) = self.dictionaries.borrow().get(&id) {
            return Ok(Ok(Arc::clone(found)));
        }
        let bytes: Option<Vec<u8>> = match &self.conn {
            ReadConnection::Sqlite(conn) => conn
                .prepare_cached(SELECT_DICTIONARY)
                .and_then(|mut statement| statement.query_row([id], |row| row.get(0)).optional())
                .map_err(sqlite(&self.path, "read a record dictionary"))?,
            ReadConnection::Postgres(conn) => conn.dictionary_bytes(id)?,
        };
        let Some(bytes) = bytes else {
            return Ok(Err(codec::DecodeError::MissingDictionary(id)));
        };
        let Some(dictionary) = DecodingDictionary::new(&bytes) else {
            return Ok(Err(codec::DecodeError::UnusableDictionary(id)));
        };
        let dictionary = Arc::new(dictionary);
        let mut cache = self.dictionaries.borrow_mut();
        if cache.len() >= DICTIONARY_CACHE {
            cache.clear();
        }
        cache.insert(id, Arc::clone(&dictionary));
        Ok(Ok(dictionary))
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        json: &str,
        what: impl FnOnce() -> String,
    ) -> Result<T, StoreError> {
        serde_json::from_str(json).map_err(|error| StoreError::Corrupt {
            path: self.path.clone(),
            what: what(),
            line: error.line(),
            column: error.column(),
        })
    }

    /// Retained items by fingerprint (decrypted, and only if the item's canonical digest
    /// equals its fingerprint — a tampered row is left out), for one tenant.
    pub(crate) fn retained(
        &self,
        tenant: &str,
        fingerprints: &[&str],
    ) -> Result<HashMap<String, Item>, StoreError> {
        let Some(cipher) = &self.cipher else {
            return Err(StoreError::NoRetentionKey {
                path: self.path.clone(),
            });
        };
        let mut found = HashMap::new();
        let mut refused = 0usize;
        for &fingerprint in fingerprints {
            if found.contains_key(fingerprint) {
                continue;
            }
            let blob: Option<Vec<u8>> = match &self.conn {
                ReadConnection::Sqlite(conn) => conn
                    .prepare_cached(SELECT_RETAINED)
                    .and_then(|mut statement| {
                        statement
                            .query_row([tenant, fingerprint], |row| row.get(0))
                            .optional()
                    })
                    .map_err(sqlite(&self.path, "read retained content"))?,
                ReadConnection::Postgres(conn) => conn.retained_blob(tenant, fingerprint)?,
            };
            let Some(blob) = blob else { continue };
            match cipher.open(tenant, fingerprint, &blob) {
                Some(item) => {
                    found.insert(fingerprint.to_owned(), item);
                }
                None => refused += 1,
            }
        }
        if refused > 0 {
            tracing::warn!(
                store = %self.path.display(),
                refused,
                "retained content failed verification and was left out"
            );
        }
        Ok(found)
    }

    /// One page of a handle's operation records for `tenant`, in sequence order, after
    /// sequence `after` (0 for the first page). Another tenant's handle has none.
    pub(crate) fn handle_operations(
        &self,
        tenant: &str,
        handle: &str,
        after: u64,
        limit: usize,
    ) -> Result<HandleOperationsPage<HandleOpRecord>, StoreError> {
        let page = match &self.conn {
            ReadConnection::Sqlite(conn) => {
                handle_operations(conn, &self.path, tenant, handle, after, limit)?
            }
            ReadConnection::Postgres(conn) => {
                let limit = limit.clamp(1, MAX_HANDLE_OPERATIONS);
                let after = i64::try_from(after).unwrap_or(i64::MAX);
                let mut rows =
                    conn.handle_operation_rows(tenant, handle, after, limit as i64 + 1)?;
                let next_after = if rows.len() > limit {
                    rows.truncate(limit);
                    rows.last().map(|(sequence, _)| *sequence as u64)
                } else {
                    None
                };
                HandleOperationsPage {
                    operations: rows.into_iter().map(|(_, record)| record).collect(),
                    next_after,
                }
            }
        };
        let operations = page
            .operations
            .iter()
            .map(|record| self.parse(record, || "a handle operation record".to_owned()))
            .collect::<Result<_, _>>()?;
        Ok(HandleOperationsPage {
            operations,
            next_after: page.next_after,
        })
    }

    /// The Build JSON recorded for a build digest.
    pub(crate) fn build(&self, digest: &str) -> Result<Option<String>, StoreError> {
        match &self.conn {
            ReadConnection::Sqlite(conn) => conn
                .prepare_cached("SELECT build FROM builds WHERE digest = ?1")
                .and_then(|mut statement| {
                    statement.query_row([digest], |row| row.get(0)).optional()
                })
                .map_err(sqlite(&self.path, "read a build")),
            ReadConnection::Postgres(conn) => conn.build_json(digest),
        }
    }

    /// Turns, provider records (rows of turns written before shapes, counts of those
    /// since) and retained items in the store.
    pub fn counts(&self) -> Result<StoreCounts, StoreError> {
        let count = |sql: &'static str| -> Result<u64, StoreError> {
            match &self.conn {
                ReadConnection::Sqlite(conn) => conn
                    .query_row(sql, [], |row| row.get::<_, i64>(0))
                    .map(|n| n.max(0) as u64)
                    .map_err(sqlite(&self.path, "count rows")),
                ReadConnection::Postgres(conn) => conn.count(sql),
            }
        };
        Ok(StoreCounts {
            turns: count("SELECT COUNT(*) FROM turns")?,
            provider_records: count(COUNT_PROVIDER_ROWS)? + count(COUNT_SHAPED_PROVIDERS)?,
            retained_items: count("SELECT COUNT(*) FROM retained_content")?,
        })
    }

    #[cfg(test)]
    pub(crate) fn connection(&self) -> &Connection {
        match &self.conn {
            ReadConnection::Sqlite(conn) => conn,
            ReadConnection::Postgres(_) => panic!("a PostgreSQL reader has no SQLite connection"),
        }
    }
}

/// Tenants with at least one turn, in name order.
fn tenants(conn: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    let error = |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        action: "list tenants",
        source,
    };
    let mut statement = conn.prepare_cached(TENANTS).map_err(error)?;
    let names = statement
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
        .map_err(error)?;
    Ok(names)
}

/// The first column of every row of one planned statement.
fn first_column<T>(
    conn: &ReadConnection,
    path: &Path,
    stream: &Stream,
) -> Result<Vec<T>, StoreError>
where
    T: FromSql + for<'r> tokio_postgres::types::FromSql<'r>,
{
    match conn {
        ReadConnection::Sqlite(conn) => conn
            .prepare_cached(&stream.sql)
            .and_then(|mut statement| {
                statement
                    .query_map(rusqlite::params_from_iter(&stream.params), |row| row.get(0))?
                    .collect()
            })
            .map_err(|source| StoreError::Sqlite {
                path: path.to_path_buf(),
                action: "search traces",
                source,
            }),
        ReadConnection::Postgres(conn) => conn.first_column(&stream.sql, &stream.params),
    }
}

/// The seqs of one page below `before`, newest first, and — when more follow — the seq
/// the next page starts below.
fn matching_seqs(
    conn: &ReadConnection,
    path: &Path,
    query: &SearchQuery,
    before: i64,
) -> Result<(Vec<i64>, Option<i64>), StoreError> {
    let limit = query.limit.clamp(1, MAX_LIMIT);
    let tenants = match &query.tenant {
        Some(tenant) => vec![tenant.clone()],
        None => match conn {
            ReadConnection::Sqlite(conn) => tenants(conn, path)?,
            ReadConnection::Postgres(conn) => conn.turn_tenants()?,
        },
    };
    // One more than the page: whether it exists decides `next_cursor`.
    let take = limit + 1;
    let mut seqs = Vec::new();
    for tenant in &tenants {
        let mut names = TenantNames::default();
        for column in query::names_needed(query) {
            names.set(column, first_column(conn, path, &column.walk(tenant))?);
        }
        let shapes: Vec<i64> = match query::shapes_matching(query, tenant) {
            Some(statement) => first_column(conn, path, &statement)?,
            None => Vec::new(),
        };
        for stream in query::streams(query, tenant, &names, &shapes, before, take) {
            seqs.extend(first_column::<i64>(conn, path, &stream)?);
        }
    }
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    seqs.dedup();
    let next = if seqs.len() > limit {
        seqs.truncate(limit);
        seqs.last().copied()
    } else {
        None
    };
    Ok((seqs, next))
}

/// The operation records (JSON) of `handle` for `tenant` with a sequence above `after`,
/// at most `limit` (clamped to 1..=[`MAX_HANDLE_OPERATIONS`]). Another tenant's handle
/// has none.
fn handle_operations(
    conn: &Connection,
    path: &Path,
    tenant: &str,
    handle: &str,
    after: u64,
    limit: usize,
) -> Result<HandleOperationsPage<String>, StoreError> {
    let limit = limit.clamp(1, MAX_HANDLE_OPERATIONS);
    let error = |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        action: "list handle operations",
        source,
    };
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut statement = conn.prepare_cached(HANDLE_OPERATIONS).map_err(error)?;
    // One more than the page: whether it exists decides `next_after`.
    let mut rows = statement
        .query_map(
            rusqlite::params![tenant, handle, after, (limit + 1) as i64],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
        )
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(error)?;
    let next_after = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|(sequence, _)| *sequence as u64)
    } else {
        None
    };
    Ok(HandleOperationsPage {
        operations: rows.into_iter().map(|(_, record)| record).collect(),
        next_after,
    })
}
