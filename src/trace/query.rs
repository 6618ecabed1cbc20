//! Trace search: filters that AND together, and newest-first pages that stay stable
//! while new turns arrive (their cursors are sealed by [`super::cursor`]).
//!
//! How a search runs, so a page costs about `limit` index entries per stream whatever
//! the store's size:
//! - A turn written since schema version 6 (SQLite; 5 on PostgreSQL) carries its
//!   *shape*: the id of the set of its provider records' and layer decisions' (name,
//!   status) pairs, whose pairs are stored once per tenant in `shape_keys` (a
//!   `WITHOUT ROWID` key, one row per pair and shape). A search with provider or
//!   layer filters first finds the tenant's shapes that hold the pairs asked for
//!   ([`shapes_matching`]: seeks of `shape_keys`, intersected when both kinds are
//!   filtered), then runs one stream per matching shape over `turns (tenant, shape,
//!   seq, started_at_ms)` ([`streams`]). A tenant has few shapes (its turns repeat the
//!   same statuses), so a turn writes one row and four index entries instead of a row
//!   and index entries per provider record and layer decision.
//! - Turns written before keep their rows in `provider_records` and `layer_decisions`,
//!   and the streams below find them; a turn with a shape has no such rows.
//! - It walks one index newest first (`turn_seq DESC`), the *driver*: the provider
//!   index when a provider filter is given (`provider`, `providerStatus` or both), else
//!   the layer index when a layer filter is given, else `turns (tenant, seq, …)`.
//! - Every other filter is a point lookup per candidate (`EXISTS` on the turn's primary
//!   key or on an index whose every column is bound), so SQLite stops after `limit + 1`
//!   matches.
//! - An index whose status column has no filter cannot deliver `turn_seq` order, so the
//!   search runs one stream per status (11 provider statuses, 6 layer statuses) and
//!   merges them; without a tenant (operator tools), one stream set per tenant.
//! - A status filter without its name (`providerStatus` alone, `status` alone) walks
//!   the same name-led index once per name the tenant's rows carry: the names are read
//!   first, one index seek each ([`NameColumn::walk`]), and the search runs one stream
//!   per provider (or checks each layer name with one seek). No index is led by
//!   `(tenant, status)`: each would cost every turn one B-tree entry per provider record
//!   or layer decision written, for a filter a tenant's few names answer as well.
//! - Pages are `seq < cursor`, newest first. `seq` only grows, so turns written between
//!   two pages never shift or repeat results. `seq` counts every tenant's turns, so a
//!   cursor never shows it: the store hands out sealed cursors only.
//! - `provider` + `providerStatus` bind the same provider record; `layer` + `status` the
//!   same layer decision: each pair is one row's predicate.
//!
//! Layering: this module is pure — it plans statements and parses times, and runs
//! nothing. It knows the schema's tables and indexes but not the
//! store: [`super::store`]'s reader runs what it plans, and nothing here imports the
//! store back. Callers (the API, the CLI) validate their input with the same functions
//! the store uses.

use super::record::StoredTurn;
use crate::contract::{LayerStatus, ProviderStatus};
use rusqlite::types::Value;
use serde::Serialize;
use std::time::UNIX_EPOCH;

/// Largest page a search returns; larger limits are clamped (callers validate first).
pub(crate) const MAX_LIMIT: usize = 500;
/// The page size when a caller does not choose one.
pub(crate) const DEFAULT_LIMIT: usize = 20;

/// `shape_keys.kind` of a provider record's (name, status) pair.
pub(crate) const PROVIDER_KEY: &str = "provider";
/// `shape_keys.kind` of a layer decision's (name, status) pair.
pub(crate) const LAYER_KEY: &str = "layer";

/// The statement whose rows are the ids of `tenant`'s turn shapes that hold every pair
/// the query's provider and layer filters ask for; `None` when it has neither filter
/// (every turn matches, whatever its shape).
pub(crate) fn shapes_matching(query: &SearchQuery, tenant: &str) -> Option<Stream> {
    let provider = (query.provider.is_some() || query.provider_status.is_some()).then(|| {
        (
            PROVIDER_KEY,
            query.provider.clone(),
            query.provider_status.map(ProviderStatus::as_str),
        )
    });
    let layer = (query.layer.is_some() || query.layer_status.is_some()).then(|| {
        (
            LAYER_KEY,
            query.layer.clone(),
            query.layer_status.map(LayerStatus::as_str),
        )
    });
    let mut sql = Sql::new("");
    for (i, (kind, name, status)) in provider.into_iter().chain(layer).enumerate() {
        if i > 0 {
            sql.push(" INTERSECT ");
        }
        sql.push("SELECT DISTINCT k.shape FROM shape_keys k WHERE");
        sql.bind(" k.tenant = ?", tenant.to_owned())
            .bind(" AND k.kind = ?", kind.to_owned());
        if let Some(name) = name {
            sql.bind(" AND k.name = ?", name);
        }
        if let Some(status) = status {
            sql.bind(" AND k.status = ?", status.to_owned());
        }
    }
    (!sql.text.is_empty()).then(|| sql.finish())
}

/// Every tenant with turns, by walking `turns (tenant, …)` one distinct value at a time.
pub(crate) const TENANTS: &str = "WITH RECURSIVE tenants (name) AS (
        SELECT MIN(tenant) FROM turns
        UNION ALL
        SELECT (SELECT MIN(tenant) FROM turns WHERE tenant > tenants.name)
        FROM tenants WHERE tenants.name IS NOT NULL
    )
    SELECT name FROM tenants WHERE name IS NOT NULL";

/// A column whose distinct values a search walks when a status filter comes without a
/// name: the providers of a tenant's provider records, or the layers of its decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameColumn {
    Provider,
    Layer,
}

impl NameColumn {
    /// Every distinct name of `tenant`'s rows, in order, walking the
    /// `(tenant, name, status, turn_seq)` index one distinct value at a time.
    pub(crate) fn walk(self, tenant: &str) -> Stream {
        let (table, column) = match self {
            NameColumn::Provider => ("provider_records", "provider"),
            NameColumn::Layer => ("layer_decisions", "layer"),
        };
        let mut sql = Sql::new("WITH RECURSIVE names (name) AS (");
        sql.bind(
            &format!("SELECT MIN({column}) FROM {table} WHERE tenant = ?"),
            tenant.to_owned(),
        );
        sql.push(" UNION ALL ");
        sql.bind(
            &format!(
                "SELECT (SELECT MIN({column}) FROM {table} WHERE tenant = ? AND {column} > names.name)"
            ),
            tenant.to_owned(),
        );
        sql.push(
            " FROM names WHERE names.name IS NOT NULL) SELECT name FROM names WHERE name IS NOT NULL",
        );
        sql.finish()
    }
}

/// The name columns `query` needs walked before [`streams`] can plan it.
pub(crate) fn names_needed(query: &SearchQuery) -> Vec<NameColumn> {
    let mut needed = Vec::new();
    if query.provider.is_none() && query.provider_status.is_some() {
        needed.push(NameColumn::Provider);
    }
    if query.layer.is_none() && query.layer_status.is_some() {
        needed.push(NameColumn::Layer);
    }
    needed
}

/// A tenant's names, as [`names_needed`] asked for them (a column not asked for is
/// empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TenantNames {
    pub(crate) providers: Vec<String>,
    pub(crate) layers: Vec<String>,
}

impl TenantNames {
    pub(crate) fn set(&mut self, column: NameColumn, names: Vec<String>) {
        match column {
            NameColumn::Provider => self.providers = names,
            NameColumn::Layer => self.layers = names,
        }
    }
}

/// Filters of a search; all given filters must hold.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    /// `None` only for operator tools: the API always scopes to the caller's tenant.
    pub tenant: Option<String>,
    pub provider: Option<String>,
    /// With `provider`, the status of that provider's record.
    pub provider_status: Option<ProviderStatus>,
    pub layer: Option<String>,
    /// With `layer`, the status of that layer's decision.
    pub layer_status: Option<LayerStatus>,
    /// `started_at_ms >= since_ms`.
    pub since_ms: Option<i64>,
    /// `started_at_ms < until_ms`.
    pub until_ms: Option<i64>,
    /// 1..=[`MAX_LIMIT`]; clamped defensively.
    pub limit: usize,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page of results, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchPage {
    pub traces: Vec<StoredTurn>,
    /// Present when more results follow; pass it back unchanged as `cursor`, with the
    /// same filters.
    pub(crate) next_cursor: Option<String>,
    /// More results follow — also when no cursor could be sealed (a reader without the
    /// digest key).
    #[serde(skip)]
    pub(crate) more: bool,
}

/// One SQL statement whose rows are matching `seq`s, newest first, at most `take`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stream {
    pub(crate) sql: String,
    pub(crate) params: Vec<Value>,
}

/// SQL text with its positional parameters, in order.
struct Sql {
    text: String,
    params: Vec<Value>,
}

impl Sql {
    fn new(text: &str) -> Sql {
        Sql {
            text: text.to_owned(),
            params: Vec::new(),
        }
    }

    fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends `text`, which holds one `?`, bound to `value`.
    fn bind(&mut self, text: &str, value: impl Into<Value>) -> &mut Sql {
        debug_assert_eq!(text.matches('?').count(), 1);
        self.text.push_str(text);
        self.params.push(value.into());
        self
    }

    fn finish(self) -> Stream {
        Stream {
            sql: self.text,
            params: self.params,
        }
    }
}

/// `IN ('OK', 'NOT_FOUND', …)`: a status column with no filter, still bound so the
/// lookup is a handful of index seeks. The names are ours, never input.
fn every_status(names: impl IntoIterator<Item = &'static str>) -> String {
    let quoted: Vec<String> = names.into_iter().map(|name| format!("'{name}'")).collect();
    format!(" IN ({})", quoted.join(", "))
}

/// `AND EXISTS (…)` on the turn's primary key for the time window, if any.
fn time_check(sql: &mut Sql, query: &SearchQuery, seq: &str) {
    if query.since_ms.is_none() && query.until_ms.is_none() {
        return;
    }
    sql.push(&format!(
        " AND EXISTS (SELECT 1 FROM turns t WHERE t.seq = {seq}"
    ));
    if let Some(since) = query.since_ms {
        sql.bind(" AND t.started_at_ms >= ?", since);
    }
    if let Some(until) = query.until_ms {
        sql.bind(" AND t.started_at_ms < ?", until);
    }
    sql.push(")");
}

/// `AND EXISTS (…)` for the layer filters: one layer decision matching both. A status
/// alone is looked up under each of the tenant's layer names (`layers`, not empty).
fn layer_check(sql: &mut Sql, query: &SearchQuery, layers: &[String], tenant: &str, seq: &str) {
    if query.layer.is_none() && query.layer_status.is_none() {
        return;
    }
    sql.push(&format!(
        " AND EXISTS (SELECT 1 FROM layer_decisions l WHERE l.tenant = {tenant}"
    ));
    match (&query.layer, query.layer_status) {
        (Some(layer), Some(status)) => {
            sql.bind(" AND l.layer = ?", layer.clone())
                .bind(" AND l.status = ?", status.as_str().to_owned());
        }
        (Some(layer), None) => {
            sql.bind(" AND l.layer = ?", layer.clone());
            sql.push(&format!(
                " AND l.status{}",
                every_status(LayerStatus::ALL.map(LayerStatus::as_str))
            ));
        }
        (None, Some(status)) => {
            sql.push(" AND l.layer IN (");
            for (i, layer) in layers.iter().enumerate() {
                sql.bind(if i == 0 { "?" } else { ", ?" }, layer.clone());
            }
            sql.push(")");
            sql.bind(" AND l.status = ?", status.as_str().to_owned());
        }
        (None, None) => unreachable!("checked above"),
    }
    sql.push(&format!(" AND l.turn_seq = {seq})"));
}

/// The statements whose merged rows answer `query` for one tenant: matching seqs below
/// `before`, newest first, at most `take` each. `shapes` holds the ids
/// [`shapes_matching`] found (one stream each, over the turns that carry a shape);
/// `names` holds what [`names_needed`] asked for, for the turns written before shapes:
/// a status filter whose column has no name for this tenant matches none of those, and
/// no statement is planned for them.
pub(crate) fn streams(
    query: &SearchQuery,
    tenant: &str,
    names: &TenantNames,
    shapes: &[i64],
    before: i64,
    take: usize,
) -> Vec<Stream> {
    let take = i64::try_from(take).unwrap_or(i64::MAX);
    let filtered = query.provider.is_some()
        || query.provider_status.is_some()
        || query.layer.is_some()
        || query.layer_status.is_some();
    let mut planned = if filtered {
        unshaped_streams(query, tenant, names, before, take)
    } else {
        Vec::new()
    };
    if filtered {
        planned.extend(shapes.iter().map(|&shape| {
            let mut sql = Sql::new("SELECT t.seq FROM turns t WHERE");
            sql.bind(" t.tenant = ?", tenant.to_owned())
                .bind(" AND t.shape = ?", shape)
                .bind(" AND t.seq < ?", before);
            window(&mut sql, query);
            sql.bind(" ORDER BY t.seq DESC LIMIT ?", take);
            sql.finish()
        }));
    } else {
        let mut sql = Sql::new("SELECT t.seq FROM turns t WHERE");
        sql.bind(" t.tenant = ?", tenant.to_owned())
            .bind(" AND t.seq < ?", before);
        window(&mut sql, query);
        sql.bind(" ORDER BY t.seq DESC LIMIT ?", take);
        planned.push(sql.finish());
    }
    planned
}

/// `AND t.started_at_ms …` for the time window, if any.
fn window(sql: &mut Sql, query: &SearchQuery) {
    if let Some(since) = query.since_ms {
        sql.bind(" AND t.started_at_ms >= ?", since);
    }
    if let Some(until) = query.until_ms {
        sql.bind(" AND t.started_at_ms < ?", until);
    }
}

/// The streams over the rows of turns written before shapes: the provider index when a
/// provider filter is given, else the layer index.
fn unshaped_streams(
    query: &SearchQuery,
    tenant: &str,
    names: &TenantNames,
    before: i64,
    take: i64,
) -> Vec<Stream> {
    let needed = names_needed(query);
    let none_found = |column, found: &[String]| needed.contains(&column) && found.is_empty();
    if none_found(NameColumn::Provider, &names.providers)
        || none_found(NameColumn::Layer, &names.layers)
    {
        return Vec::new();
    }
    if query.provider.is_some() || query.provider_status.is_some() {
        // (provider, status) pairs, each one seek of the provider index.
        let pairs: Vec<(&String, ProviderStatus)> = match (&query.provider, query.provider_status) {
            (Some(provider), Some(status)) => vec![(provider, status)],
            (Some(provider), None) => ProviderStatus::ALL.iter().map(|&s| (provider, s)).collect(),
            (None, Some(status)) => names.providers.iter().map(|p| (p, status)).collect(),
            (None, None) => unreachable!("checked above"),
        };
        pairs
            .into_iter()
            .map(|(provider, status)| {
                let mut sql = Sql::new("SELECT DISTINCT p.turn_seq FROM provider_records p WHERE");
                sql.bind(" p.tenant = ?", tenant.to_owned())
                    .bind(" AND p.provider = ?", provider.clone())
                    .bind(" AND p.status = ?", status.as_str().to_owned())
                    .bind(" AND p.turn_seq < ?", before);
                time_check(&mut sql, query, "p.turn_seq");
                layer_check(&mut sql, query, &names.layers, "p.tenant", "p.turn_seq");
                sql.bind(" ORDER BY p.turn_seq DESC LIMIT ?", take);
                sql.finish()
            })
            .collect()
    } else if query.layer.is_some() || query.layer_status.is_some() {
        // (layer, status) pairs, each one seek of the layer index.
        let pairs: Vec<(&String, LayerStatus)> = match (&query.layer, query.layer_status) {
            (Some(layer), Some(status)) => vec![(layer, status)],
            (Some(layer), None) => LayerStatus::ALL.iter().map(|&s| (layer, s)).collect(),
            (None, Some(status)) => names.layers.iter().map(|l| (l, status)).collect(),
            (None, None) => unreachable!("checked above"),
        };
        pairs
            .into_iter()
            .map(|(layer, status)| {
                let mut sql = Sql::new("SELECT DISTINCT l.turn_seq FROM layer_decisions l WHERE");
                sql.bind(" l.tenant = ?", tenant.to_owned())
                    .bind(" AND l.layer = ?", layer.clone())
                    .bind(" AND l.status = ?", status.as_str().to_owned())
                    .bind(" AND l.turn_seq < ?", before);
                time_check(&mut sql, query, "l.turn_seq");
                sql.bind(" ORDER BY l.turn_seq DESC LIMIT ?", take);
                sql.finish()
            })
            .collect()
    } else {
        unreachable!("called with a provider or layer filter")
    }
}

/// Most handle operation records a page lists; larger limits are clamped (callers
/// validate first).
pub(crate) const MAX_HANDLE_OPERATIONS: usize = 1000;
/// The page size of a handle's operations when a caller does not choose one.
pub(crate) const DEFAULT_HANDLE_OPERATIONS: usize = 100;

/// One handle's operations after a sequence number, in sequence order: a range scan of
/// the primary key `(tenant, handle_id, sequence)`.
pub(crate) const HANDLE_OPERATIONS: &str = "SELECT sequence, record FROM handle_operations
    WHERE tenant = ?1 AND handle_id = ?2 AND sequence > ?3
    ORDER BY sequence LIMIT ?4";

/// One page of a handle's operation records (JSON), in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandleOperationsPage<T> {
    pub(crate) operations: Vec<T>,
    /// The sequence to pass as `after` for the next page, when more follow.
    pub(crate) next_after: Option<u64>,
}

/// Why a time filter does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TimeError {
    #[error("too many digits for milliseconds since the epoch")]
    TooManyDigits,
    #[error("{0}: write RFC 3339, e.g. 2026-11-30T10:00:00Z, or milliseconds since the epoch")]
    NotATime(String),
    #[error("is before 1970")]
    BeforeTheEpoch,
}

/// A time filter (`since`, `until`): milliseconds since the Unix epoch (digits, an
/// optional leading `+`), or RFC 3339 in UTC (`T` or a space, `Z` optional, e.g.
/// `2026-11-30T10:00:00Z`). Negative milliseconds and times before 1970 are refused:
/// no turn started then.
pub(crate) fn parse_time(text: &str) -> Result<i64, TimeError> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return digits.parse::<i64>().map_err(|_| TimeError::TooManyDigits);
    }
    let time = humantime::parse_rfc3339_weak(text)
        .map_err(|error| TimeError::NotATime(error.to_string()))?;
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .map_err(|_| TimeError::BeforeTheEpoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::TurnTrace;
    use crate::trace::store::testing::{key, simple};
    use crate::trace::store::{StoreError, TraceReader, TraceStore};
    use proptest::prelude::*;
    use rusqlite::Connection;
    use std::path::PathBuf;

    use LayerStatus as L;
    use ProviderStatus as P;

    struct Fixture {
        _dir: tempfile::TempDir,
        path: PathBuf,
        store: TraceStore,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("traces.db");
            let store = TraceStore::open(&path, &key()).unwrap();
            Fixture {
                _dir: dir,
                path,
                store,
            }
        }

        fn write(&mut self, traces: &[TurnTrace]) {
            self.store.write_batch(traces).unwrap();
        }

        fn ids(&self, query: &SearchQuery) -> (Vec<String>, Option<String>) {
            let page = TraceReader::open(&self.path, Some(&key()))
                .unwrap()
                .search(query)
                .unwrap();
            (
                page.traces.into_iter().map(|t| t.turn.turn_id).collect(),
                page.next_cursor,
            )
        }

        fn only_ids(&self, query: &SearchQuery) -> Vec<String> {
            self.ids(query).0
        }
    }

    fn query(tenant: &str) -> SearchQuery {
        SearchQuery {
            tenant: Some(tenant.to_owned()),
            limit: 100,
            ..SearchQuery::default()
        }
    }

    /// Four turns of acme and one of globex, started at 100, 200, 300, 400, 500.
    fn standard() -> Fixture {
        let k = key();
        let mut fixture = Fixture::new();
        fixture.write(&[
            simple(
                &k,
                "a1",
                "acme",
                100,
                &[("crm", P::Ok), ("orders", P::Timeout)],
                &[("profile", L::Included), ("orders", L::Unavailable)],
            ),
            simple(
                &k,
                "a2",
                "acme",
                200,
                &[("crm", P::Timeout), ("orders", P::Ok)],
                &[("profile", L::Unavailable), ("orders", L::Included)],
            ),
            simple(
                &k,
                "g1",
                "globex",
                300,
                &[("crm", P::Timeout)],
                &[("profile", L::Unavailable)],
            ),
            simple(
                &k,
                "a3",
                "acme",
                400,
                &[("crm", P::Ok), ("orders", P::Ok)],
                &[("profile", L::Included), ("orders", L::Included)],
            ),
            simple(
                &k,
                "a4",
                "acme",
                500,
                &[("crm", P::NotFound)],
                &[("profile", L::Empty)],
            ),
        ]);
        fixture
    }

    #[test]
    fn a_tenant_sees_only_its_turns_newest_first() {
        let fixture = standard();
        assert_eq!(fixture.only_ids(&query("acme")), ["a4", "a3", "a2", "a1"]);
        assert_eq!(fixture.only_ids(&query("globex")), ["g1"]);
        assert!(fixture.only_ids(&query("initech")).is_empty());
        let all = SearchQuery {
            limit: 100,
            ..SearchQuery::default()
        };
        assert_eq!(fixture.only_ids(&all), ["a4", "a3", "g1", "a2", "a1"]);
    }

    #[test]
    fn provider_and_status_match_the_same_record() {
        let fixture = standard();
        let search = |provider: Option<&str>, status: Option<ProviderStatus>| {
            fixture.only_ids(&SearchQuery {
                provider: provider.map(str::to_owned),
                provider_status: status,
                ..query("acme")
            })
        };
        assert_eq!(search(Some("crm"), Some(P::Ok)), ["a3", "a1"]);
        assert_eq!(search(Some("crm"), Some(P::Timeout)), ["a2"]);
        assert_eq!(search(Some("orders"), Some(P::Timeout)), ["a1"]);
        assert_eq!(search(Some("crm"), None), ["a4", "a3", "a2", "a1"]);
        assert_eq!(search(Some("orders"), None), ["a3", "a2", "a1"]);
        assert_eq!(search(None, Some(P::Timeout)), ["a2", "a1"]);
        assert_eq!(
            search(None, Some(P::Ok)),
            ["a3", "a2", "a1"],
            "a3 once, though two records match"
        );
        assert!(search(Some("tickets"), None).is_empty());
    }

    #[test]
    fn layer_and_status_match_the_same_decision() {
        let fixture = standard();
        let search = |layer: Option<&str>, status: Option<LayerStatus>| {
            fixture.only_ids(&SearchQuery {
                layer: layer.map(str::to_owned),
                layer_status: status,
                ..query("acme")
            })
        };
        assert_eq!(search(Some("profile"), Some(L::Unavailable)), ["a2"]);
        assert_eq!(search(Some("orders"), Some(L::Unavailable)), ["a1"]);
        assert_eq!(search(Some("orders"), None), ["a3", "a2", "a1"]);
        assert_eq!(search(None, Some(L::Included)), ["a3", "a2", "a1"]);
        assert_eq!(search(None, Some(L::Empty)), ["a4"]);
    }

    #[test]
    fn filters_and_together() {
        let fixture = standard();
        let ids = fixture.only_ids(&SearchQuery {
            provider: Some("crm".to_owned()),
            provider_status: Some(P::Ok),
            layer: Some("orders".to_owned()),
            layer_status: Some(L::Unavailable),
            ..query("acme")
        });
        assert_eq!(ids, ["a1"]);
        let ids = fixture.only_ids(&SearchQuery {
            provider: Some("crm".to_owned()),
            layer: Some("orders".to_owned()),
            since_ms: Some(150),
            ..query("acme")
        });
        assert_eq!(ids, ["a3", "a2"]);
        let ids = fixture.only_ids(&SearchQuery {
            layer_status: Some(L::Included),
            until_ms: Some(400),
            ..query("acme")
        });
        assert_eq!(ids, ["a2", "a1"]);
    }

    #[test]
    fn since_is_inclusive_and_until_exclusive() {
        let fixture = standard();
        let window = |since: Option<i64>, until: Option<i64>| {
            fixture.only_ids(&SearchQuery {
                since_ms: since,
                until_ms: until,
                ..query("acme")
            })
        };
        assert_eq!(window(Some(200), Some(400)), ["a2"]);
        assert_eq!(window(Some(200), Some(401)), ["a3", "a2"]);
        assert_eq!(window(Some(500), None), ["a4"]);
        assert_eq!(window(None, Some(100)), Vec::<String>::new());
        assert_eq!(window(Some(400), Some(200)), Vec::<String>::new());
    }

    #[test]
    fn pages_are_stable_while_turns_arrive() {
        let k = key();
        let mut fixture = Fixture::new();
        let batch: Vec<TurnTrace> = (0..7)
            .map(|i| simple(&k, &format!("t{i}"), "acme", i, &[("crm", P::Ok)], &[]))
            .collect();
        fixture.write(&batch);
        let mut page_query = SearchQuery {
            limit: 3,
            provider: Some("crm".to_owned()),
            ..query("acme")
        };
        let (first, cursor) = fixture.ids(&page_query);
        assert_eq!(first, ["t6", "t5", "t4"]);
        // New turns between pages neither shift nor repeat results.
        fixture.write(&[
            simple(&k, "new1", "acme", 99, &[("crm", P::Ok)], &[]),
            simple(&k, "new2", "acme", 99, &[("crm", P::Ok)], &[]),
        ]);
        page_query.cursor = cursor;
        let (second, cursor) = fixture.ids(&page_query);
        assert_eq!(second, ["t3", "t2", "t1"]);
        page_query.cursor = cursor;
        let (third, cursor) = fixture.ids(&page_query);
        assert_eq!(third, ["t0"]);
        assert_eq!(cursor, None, "the last page has no cursor");

        // A page that ends exactly at the last result has no cursor either.
        let exact = SearchQuery {
            limit: 9,
            ..query("acme")
        };
        assert_eq!(fixture.ids(&exact).0.len(), 9);
        assert_eq!(fixture.ids(&exact).1, None);
    }

    #[test]
    fn limits_are_clamped_and_cursors_validated() {
        let k = key();
        let mut fixture = Fixture::new();
        let batch: Vec<TurnTrace> = (0..3)
            .map(|i| simple(&k, &format!("t{i}"), "acme", i, &[], &[]))
            .collect();
        fixture.write(&batch);
        let zero = SearchQuery {
            limit: 0,
            ..query("acme")
        };
        assert_eq!(fixture.only_ids(&zero), ["t2"]);
        let huge = SearchQuery {
            limit: 1_000_000,
            ..query("acme")
        };
        assert_eq!(fixture.only_ids(&huge).len(), 3);
        let reader = TraceReader::open(&fixture.path, Some(&key())).unwrap();
        for bad in [
            "",
            "zz",
            "0000000000000000",
            "ffffffffffffffff",
            "00000000000000001",
        ] {
            let error = reader
                .search(&SearchQuery {
                    cursor: Some(bad.to_owned()),
                    ..query("acme")
                })
                .unwrap_err();
            assert!(matches!(error, StoreError::InvalidCursor), "{bad}: {error}");
        }
        // A reader without the key issues no cursor, and takes none.
        let keyless = TraceReader::open(&fixture.path, None).unwrap();
        let page = keyless
            .search(&SearchQuery {
                limit: 1,
                ..query("acme")
            })
            .unwrap();
        assert!(page.more && page.next_cursor.is_none());
        let error = keyless
            .search(&SearchQuery {
                cursor: Some("0a".repeat(48)),
                ..query("acme")
            })
            .unwrap_err();
        assert!(matches!(error, StoreError::NoCursorKey { .. }), "{error}");
    }

    #[test]
    fn a_cursor_is_bound_to_its_tenant_and_filters() {
        // acme's turns interleave with globex's: acme's cursors must show nothing of
        // that, and open for acme's search only.
        let fixture = standard();
        let first = SearchQuery {
            limit: 1,
            ..query("acme")
        };
        let (ids, cursor) = fixture.ids(&first);
        assert_eq!(ids, ["a4"]);
        let cursor = cursor.unwrap();
        let continued = SearchQuery {
            cursor: Some(cursor.clone()),
            ..first.clone()
        };
        assert_eq!(fixture.ids(&continued).0, ["a3"]);
        let reader = TraceReader::open(&fixture.path, Some(&key())).unwrap();
        for foreign in [
            query("globex"),
            SearchQuery {
                tenant: None,
                ..query("acme")
            },
            SearchQuery {
                provider: Some("crm".to_owned()),
                ..query("acme")
            },
            SearchQuery {
                layer_status: Some(L::Included),
                ..query("acme")
            },
        ] {
            let error = reader
                .search(&SearchQuery {
                    cursor: Some(cursor.clone()),
                    ..foreign
                })
                .unwrap_err();
            assert!(matches!(error, StoreError::InvalidCursor), "{error}");
        }
        // Under another deployment key the cursor is no cursor either.
        let other = crate::digest::DigestKey::from_bytes(vec![1u8; 32]).unwrap();
        let error = TraceReader::open(&fixture.path, Some(&other))
            .unwrap()
            .search(&continued)
            .unwrap_err();
        assert!(matches!(error, StoreError::InvalidCursor), "{error}");
    }

    #[test]
    fn each_result_carries_all_its_provider_records() {
        let fixture = standard();
        let page = TraceReader::open(&fixture.path, None)
            .unwrap()
            .search(&SearchQuery {
                provider: Some("crm".to_owned()),
                provider_status: Some(P::Timeout),
                ..query("acme")
            })
            .unwrap();
        assert_eq!(page.traces.len(), 1);
        let providers: Vec<(&str, ProviderStatus)> = page.traces[0]
            .providers
            .iter()
            .map(|p| (p.provider.as_str(), p.status))
            .collect();
        assert_eq!(providers, [("crm", P::Timeout), ("orders", P::Ok)]);
    }

    #[test]
    fn times_are_epoch_milliseconds_or_rfc3339_not_before_1970() {
        // The API's forms.
        assert_eq!(parse_time("1764500000000"), Ok(1_764_500_000_000));
        assert_eq!(parse_time("2026-11-30T10:00:00Z"), Ok(1_796_032_800_000));
        assert_eq!(parse_time("+5"), Ok(5), "a sign on milliseconds");
        // The CLI's forms.
        assert_eq!(
            parse_time("2025-11-30T10:53:20.123Z"),
            Ok(1_764_500_000_123)
        );
        assert_eq!(parse_time("2025-11-30 10:53:20"), Ok(1_764_500_000_000));
        assert_eq!(parse_time("0"), Ok(0));
        assert_eq!(
            parse_time("99999999999999999999"),
            Err(TimeError::TooManyDigits)
        );
        assert!(parse_time("1969-12-31T23:59:59Z").is_err(), "before 1970");
        for refused in ["", "+", "-5", "yesterday", "2026-13-40T00:00:00Z", " 5"] {
            assert!(
                matches!(parse_time(refused), Err(TimeError::NotATime(_))),
                "{refused:?}"
            );
        }
        let message = parse_time("yesterday").unwrap_err().to_string();
        assert!(message.contains("write RFC 3339"), "{message}");
    }

    // ---- query plans: every search shape walks an index, never a table --------------

    /// Every search shape: (provider, providerStatus, layer, status, time window).
    fn shapes() -> Vec<SearchQuery> {
        let mut shapes = Vec::new();
        for provider in [None, Some("crm".to_owned())] {
            for provider_status in [None, Some(P::Timeout)] {
                for layer in [None, Some("profile".to_owned())] {
                    for layer_status in [None, Some(L::Unavailable)] {
                        for (since_ms, until_ms) in
                            [(None, None), (Some(1), None), (Some(1), Some(2))]
                        {
                            for cursor in [None, Some("cursor".to_owned())] {
                                shapes.push(SearchQuery {
                                    tenant: Some("acme".to_owned()),
                                    provider: provider.clone(),
                                    provider_status,
                                    layer: layer.clone(),
                                    layer_status,
                                    since_ms,
                                    until_ms,
                                    limit: 20,
                                    cursor: cursor.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
        shapes
    }

    /// Names for the streams over rows written before shapes, as a store holding such
    /// rows gives them (the plans do not depend on the rows).
    fn legacy_names(query: &SearchQuery) -> TenantNames {
        let mut names = TenantNames::default();
        for column in names_needed(query) {
            names.set(column, vec!["crm".to_owned(), "orders".to_owned()]);
        }
        names
    }

    /// The shapes `query` matches in the store, as the reader finds them.
    fn shapes_of(conn: &Connection, query: &SearchQuery, tenant: &str) -> Vec<i64> {
        shapes_matching(query, tenant).map_or_else(Vec::new, |statement| {
            conn.prepare(&statement.sql)
                .unwrap()
                .query_map(rusqlite::params_from_iter(&statement.params), |row| {
                    row.get(0)
                })
                .unwrap()
                .collect::<Result<Vec<i64>, _>>()
                .unwrap()
        })
    }

    fn plan(conn: &Connection, stream: &Stream) -> Vec<String> {
        let mut statement = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", stream.sql))
            .unwrap();
        statement
            .query_map(rusqlite::params_from_iter(&stream.params), |row| {
                row.get::<_, String>(3)
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Each plan line that reads a table reads it through an index seek: `SEARCH … USING
    /// (COVERING) INDEX …` or the primary key. No `SCAN` of a table, no sort.
    fn assert_indexed(plan: &[String], context: &str) {
        let mut searches = 0;
        for line in plan {
            assert!(!line.starts_with("SCAN"), "{context}: {line}\n{plan:#?}");
            assert!(
                !line.contains("TEMP B-TREE"),
                "{context}: {line}\n{plan:#?}"
            );
            if line.starts_with("SEARCH") {
                searches += 1;
                assert!(
                    line.contains("USING INDEX")
                        || line.contains("USING COVERING INDEX")
                        || line.contains("USING INTEGER PRIMARY KEY"),
                    "{context}: {line}\n{plan:#?}"
                );
            }
        }
        assert!(searches > 0, "{context}: {plan:#?}");
    }

    #[test]
    fn every_search_shape_uses_indexes() {
        let fixture = standard();
        let conn = fixture.store.connection();
        let shapes = shapes();
        assert_eq!(shapes.len(), 96);
        for shape in &shapes {
            let found = shapes_of(conn, shape, "acme");
            let streams = streams(shape, "acme", &legacy_names(shape), &found, 99, 21);
            assert!(!streams.is_empty(), "{shape:?}");
            for stream in &streams {
                let plan = plan(conn, stream);
                assert_indexed(&plan, &stream.sql);
                // The driver is the index designed for this shape.
                let driver = &plan[0];
                let expected = if stream.sql.contains("t.shape = ?") {
                    "turns_by_shape"
                } else {
                    match (
                        &shape.provider,
                        shape.provider_status,
                        &shape.layer,
                        shape.layer_status,
                    ) {
                        (Some(_), _, _, _) | (None, Some(_), _, _) => {
                            "provider_records_by_provider"
                        }
                        (None, None, Some(_), _) | (None, None, None, Some(_)) => {
                            "layer_decisions_by_layer"
                        }
                        (None, None, None, None) => "turns_by_tenant",
                    }
                };
                assert!(driver.contains(expected), "{}: {driver}", stream.sql);
                if expected != "turns_by_tenant" || shape.since_ms.is_none() {
                    assert!(
                        driver.contains("COVERING INDEX"),
                        "{}: {driver}",
                        stream.sql
                    );
                }
            }
        }
    }

    #[test]
    fn the_plans_as_they_read() {
        // The plans quoted in the docs, one per driver; asserted line by line.
        let fixture = standard();
        let conn = fixture.store.connection();
        let shape = |provider: Option<&str>,
                     status: Option<P>,
                     layer: Option<&str>,
                     layer_status: Option<L>,
                     since: Option<i64>| SearchQuery {
            provider: provider.map(str::to_owned),
            provider_status: status,
            layer: layer.map(str::to_owned),
            layer_status,
            since_ms: since,
            ..query("acme")
        };
        let cases = [
            (
                shape(
                    Some("crm"),
                    Some(P::Timeout),
                    Some("profile"),
                    Some(L::Unavailable),
                    Some(1),
                ),
                vec![
                    "SEARCH p USING COVERING INDEX provider_records_by_provider (tenant=? AND provider=? AND status=? AND turn_seq<?)",
                    "SEARCH l EXISTS USING COVERING INDEX layer_decisions_by_layer (tenant=? AND layer=? AND status=? AND turn_seq=?)",
                    "SEARCH t EXISTS USING INTEGER PRIMARY KEY (rowid=?)",
                ],
            ),
            (
                shape(None, Some(P::Timeout), None, None, None),
                vec![
                    "SEARCH p USING COVERING INDEX provider_records_by_provider (tenant=? AND provider=? AND status=? AND turn_seq<?)",
                ],
            ),
            (
                shape(None, None, Some("profile"), None, None),
                vec![
                    "SEARCH l USING COVERING INDEX layer_decisions_by_layer (tenant=? AND layer=? AND status=? AND turn_seq<?)",
                ],
            ),
            (
                shape(None, None, None, Some(L::Unavailable), None),
                vec![
                    "SEARCH l USING COVERING INDEX layer_decisions_by_layer (tenant=? AND layer=? AND status=? AND turn_seq<?)",
                ],
            ),
            (
                shape(
                    Some("crm"),
                    Some(P::Timeout),
                    None,
                    Some(L::Unavailable),
                    None,
                ),
                vec![
                    "SEARCH p USING COVERING INDEX provider_records_by_provider (tenant=? AND provider=? AND status=? AND turn_seq<?)",
                    "SEARCH l EXISTS USING COVERING INDEX layer_decisions_by_layer (tenant=? AND layer=? AND status=? AND turn_seq=?)",
                ],
            ),
            (
                shape(None, None, None, None, None),
                vec!["SEARCH t USING COVERING INDEX turns_by_tenant (tenant=? AND seq<?)"],
            ),
            (
                shape(None, None, None, None, Some(1)),
                vec!["SEARCH t USING COVERING INDEX turns_by_tenant (tenant=? AND seq<?)"],
            ),
        ];
        for (shape, expected) in cases {
            let stream = &streams(&shape, "acme", &legacy_names(&shape), &[], 99, 21)[0];
            assert_eq!(plan(conn, stream), expected, "{}", stream.sql);
        }
        // A name walk is one seek of the name-led index per name.
        for (column, index) in [
            (
                NameColumn::Provider,
                "provider_records_by_provider (tenant=? AND provider>?)",
            ),
            (
                NameColumn::Layer,
                "layer_decisions_by_layer (tenant=? AND layer>?)",
            ),
        ] {
            let walk_plan = plan(conn, &column.walk("acme"));
            let seeks: Vec<&String> = walk_plan
                .iter()
                .filter(|line| {
                    line.contains("provider_records") || line.contains("layer_decisions")
                })
                .collect();
            assert_eq!(seeks.len(), 2, "{walk_plan:#?}");
            assert!(
                seeks.iter().all(|line| line.starts_with("SEARCH")
                    && line.contains("USING COVERING INDEX")),
                "{walk_plan:#?}"
            );
            assert!(
                seeks[1].ends_with(&format!("USING COVERING INDEX {index}")),
                "{walk_plan:#?}"
            );
        }
        let tenants_plan = plan(
            conn,
            &Stream {
                sql: TENANTS.to_owned(),
                params: Vec::new(),
            },
        );
        for line in &tenants_plan {
            if line.contains("turns") {
                assert!(
                    line.contains("COVERING INDEX turns_by_tenant"),
                    "{tenants_plan:#?}"
                );
            }
        }
    }

    #[test]
    fn shapes_are_found_by_their_keys_and_their_turns_by_the_shape_index() {
        let fixture = standard();
        let conn = fixture.store.connection();
        let shape_query = |provider: Option<&str>,
                           status: Option<P>,
                           layer: Option<&str>,
                           layer_status: Option<L>| SearchQuery {
            provider: provider.map(str::to_owned),
            provider_status: status,
            layer: layer.map(str::to_owned),
            layer_status,
            ..query("acme")
        };
        let key_seek = |columns: &str| format!("SEARCH k USING PRIMARY KEY ({columns})");
        let cases = [
            (
                shape_query(Some("crm"), Some(P::Timeout), None, None),
                vec![key_seek("tenant=? AND kind=? AND name=? AND status=?")],
            ),
            (
                shape_query(Some("crm"), None, None, None),
                vec![key_seek("tenant=? AND kind=? AND name=?")],
            ),
            (
                shape_query(None, Some(P::Timeout), None, None),
                vec![key_seek("tenant=? AND kind=?")],
            ),
            (
                shape_query(None, None, Some("profile"), Some(L::Unavailable)),
                vec![key_seek("tenant=? AND kind=? AND name=? AND status=?")],
            ),
            (
                shape_query(Some("crm"), Some(P::Timeout), Some("profile"), None),
                vec![
                    key_seek("tenant=? AND kind=? AND name=? AND status=?"),
                    key_seek("tenant=? AND kind=? AND name=?"),
                ],
            ),
        ];
        for (shape, seeks) in cases {
            let statement = shapes_matching(&shape, "acme").expect("a filtered query");
            let plan = plan(conn, &statement);
            let searched: Vec<&String> = plan
                .iter()
                .filter(|line| line.starts_with("SEARCH"))
                .collect();
            assert_eq!(searched, seeks.iter().collect::<Vec<_>>(), "{plan:#?}");
            assert!(
                !plan.iter().any(|line| line.starts_with("SCAN")),
                "{plan:#?}"
            );
        }
        assert_eq!(shapes_matching(&query("acme"), "acme"), None);
        // The matching shapes are those holding the pairs: a1 and a3 hold crm OK.
        let crm_ok = shapes_of(
            conn,
            &shape_query(Some("crm"), Some(P::Ok), None, None),
            "acme",
        );
        assert_eq!(crm_ok.len(), 2, "{crm_ok:?}");
        let both = shapes_of(
            conn,
            &shape_query(
                Some("crm"),
                Some(P::Ok),
                Some("orders"),
                Some(L::Unavailable),
            ),
            "acme",
        );
        assert_eq!(both.len(), 1, "a1 alone: {both:?}");
        // One stream per shape, over the shape index, the window checked in it.
        for since in [None, Some(1)] {
            let shaped = SearchQuery {
                since_ms: since,
                ..shape_query(Some("crm"), Some(P::Ok), None, None)
            };
            let planned = streams(&shaped, "acme", &TenantNames::default(), &crm_ok, 99, 21);
            let over_shapes: Vec<&Stream> = planned
                .iter()
                .filter(|stream| stream.sql.contains("t.shape = ?"))
                .collect();
            assert_eq!(over_shapes.len(), 2);
            for stream in over_shapes {
                assert_eq!(
                    plan(conn, stream),
                    [
                        "SEARCH t USING COVERING INDEX turns_by_shape (tenant=? AND shape=? AND seq<?)"
                    ]
                );
            }
        }
    }

    // ---- property: the search equals a naive filter over the same turns -------------

    #[derive(Debug, Clone)]
    struct Generated {
        tenant: usize,
        started_at_ms: i64,
        providers: Vec<(usize, usize)>,
        layers: Vec<(usize, usize)>,
    }

    const TENANTS_: [&str; 2] = ["acme", "globex"];
    const PROVIDERS: [&str; 3] = ["crm", "orders", "tickets"];
    const LAYERS: [&str; 2] = ["profile", "orders"];
    const P_STATUSES: [P; 3] = [P::Ok, P::Timeout, P::NotFound];
    const L_STATUSES: [L; 3] = [L::Included, L::Unavailable, L::Empty];

    fn generated() -> impl Strategy<Value = Generated> {
        (
            0..2usize,
            0..10i64,
            proptest::collection::vec((0..3usize, 0..3usize), 0..3),
            proptest::collection::vec((0..2usize, 0..3usize), 0..3),
        )
            .prop_map(|(tenant, started_at_ms, providers, layers)| Generated {
                tenant,
                started_at_ms,
                providers,
                layers,
            })
    }

    fn generated_query() -> impl Strategy<Value = SearchQuery> {
        (
            proptest::option::of(0..2usize),
            proptest::option::of(0..3usize),
            proptest::option::of(0..3usize),
            proptest::option::of(0..2usize),
            proptest::option::of(0..3usize),
            proptest::option::of(0..10i64),
            proptest::option::of(0..10i64),
            1..6usize,
        )
            .prop_map(
                |(tenant, provider, pstatus, layer, lstatus, since, until, limit)| SearchQuery {
                    tenant: tenant.map(|t| TENANTS_[t].to_owned()),
                    provider: provider.map(|p| PROVIDERS[p].to_owned()),
                    provider_status: pstatus.map(|s| P_STATUSES[s]),
                    layer: layer.map(|l| LAYERS[l].to_owned()),
                    layer_status: lstatus.map(|s| L_STATUSES[s]),
                    since_ms: since,
                    until_ms: until,
                    limit,
                    cursor: None,
                },
            )
    }

    fn naive(turns: &[Generated], q: &SearchQuery) -> Vec<String> {
        let mut ids = Vec::new();
        for (i, turn) in turns.iter().enumerate().rev() {
            let tenant_ok = q
                .tenant
                .as_deref()
                .is_none_or(|t| t == TENANTS_[turn.tenant]);
            let provider_ok = (q.provider.is_none() && q.provider_status.is_none())
                || turn.providers.iter().any(|(p, s)| {
                    q.provider
                        .as_deref()
                        .is_none_or(|want| want == PROVIDERS[*p])
                        && q.provider_status.is_none_or(|want| want == P_STATUSES[*s])
                });
            let layer_ok = (q.layer.is_none() && q.layer_status.is_none())
                || turn.layers.iter().any(|(l, s)| {
                    q.layer.as_deref().is_none_or(|want| want == LAYERS[*l])
                        && q.layer_status.is_none_or(|want| want == L_STATUSES[*s])
                });
            let time_ok = q.since_ms.is_none_or(|s| turn.started_at_ms >= s)
                && q.until_ms.is_none_or(|u| turn.started_at_ms < u);
            if tenant_ok && provider_ok && layer_ok && time_ok {
                ids.push(format!("turn-{i}"));
            }
        }
        ids
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn paging_through_a_search_equals_a_naive_filter(
            turns in proptest::collection::vec(generated(), 0..25),
            mut q in generated_query(),
        ) {
            let k = key();
            let mut fixture = Fixture::new();
            let traces: Vec<TurnTrace> = turns
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let providers: Vec<(&str, P)> =
                        g.providers.iter().map(|(p, s)| (PROVIDERS[*p], P_STATUSES[*s])).collect();
                    let layers: Vec<(&str, L)> =
                        g.layers.iter().map(|(l, s)| (LAYERS[*l], L_STATUSES[*s])).collect();
                    simple(&k, &format!("turn-{i}"), TENANTS_[g.tenant], g.started_at_ms, &providers, &layers)
                })
                .collect();
            fixture.write(&traces);
            let mut all = Vec::new();
            let mut pages = 0;
            loop {
                let (ids, cursor) = fixture.ids(&q);
                prop_assert!(ids.len() <= q.limit);
                all.extend(ids);
                pages += 1;
                prop_assert!(pages <= 30);
                match cursor {
                    Some(cursor) => q.cursor = Some(cursor),
                    None => break,
                }
            }
            prop_assert_eq!(all, naive(&turns, &q));
        }
    }
}
