//! Handles: provider material too large for a turn's budget, kept outside the rendered
//! context behind an opaque, versioned, tenant-scoped reference and reachable only
//! through bounded operations (seed 004, SPEC §6).
//!
//! Design goals:
//! - Only material ctxd itself produced is accepted ([`HandleMaterial`]: text or an item
//!   list). There is no variant for a path, a URL, a stream or a callable, so nothing
//!   can ever be dereferenced; the store declares `filesystem: false, network: false`.
//! - Ids are 128 random bits (`h_` + 32 lowercase hex), validated on input, and mean
//!   nothing outside the tenant that holds them: another tenant's id is
//!   `unknown_handle`, never `stale_handle`.
//! - Every operation is bounded three ways — `maxResults` entries, a global `maxBytes`
//!   across the whole result (cut on a UTF-8 boundary, `truncated: true`) and a wall-time
//!   limit — with defaults and caps from `[handles]`; a request over a cap is refused
//!   (`invalid_limit`), never clamped.
//! - The operations are pure functions of the material, the request and an injected
//!   clock ([`ops`]), so tests are deterministic; the store ([`store`]) only hands out
//!   material and sequence numbers.
//!
//! Layout: [`backend`] (the [`HandleStore`] the rest of ctxd uses: memory or Redis),
//! [`store`] (the in-memory store: TTL, byte cap, LRU, tombstones), [`redis_store`] (the
//! same rules in a Redis shared by replicas, as Lua scripts), [`request`]
//! (the operation request JSON and its limits), [`ops`] (the operations), [`bounds`]
//! (the clock, the meter and the result budget they run under), [`output`] (what they
//! answer), [`record`] (the per-operation trace record), [`attempt`] (one operation or
//! delete from the parsed request to its answer and record — what the API's routes
//! call), [`error`] (why an operation or the store failed).
//!
//! Versions: a handle's material never changes after registration, and no operation
//! derives new material, so every handle has version 1. The version is still part of
//! the reference and checked on every operation, so a client holding a reference to
//! material that was replaced or removed fails structurally (`stale_handle`) instead of
//! reading something else.

pub(crate) mod attempt;
pub(crate) mod backend;
pub(crate) mod bounds;
pub(crate) mod error;
pub(crate) mod ops;
#[cfg(test)]
mod ops_tests;
pub(crate) mod output;
pub(crate) mod redis_store;
pub(crate) mod request;
pub(crate) mod store;

pub(crate) use backend::{HandleBackend, HandleStore};
pub(crate) use bounds::SystemClock;
pub(crate) use error::{HandleError, StaleReason, StoreUnavailable};
pub(crate) use output::OpOutput;

use crate::contract::Item;
use serde::Serialize;
use std::time::Duration;

/// Length of every handle id: `h_` + 32 lowercase hex (128 random bits). The kernel
/// sizes references with it.
pub(crate) const HANDLE_ID_LEN: usize = 34;
/// The prefix of every handle id.
pub(crate) const HANDLE_ID_PREFIX: &str = "h_";

/// What ctxd itself registers; nothing else is accepted (no paths, URLs, callables…).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HandleMaterial {
    /// Seed 004's text source: the store and every operation take it (the capabilities
    /// declare it), though turns register items only.
    Text(String),
    Items(Vec<Item>),
}

impl HandleMaterial {
    /// Text bytes, or the sum of the canonical JSON sizes of the items. This is what
    /// counts against a tenant's share and `max_total_bytes`, and what `metadata` and
    /// `reduce byte_count` report.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            HandleMaterial::Text(text) => text.len(),
            HandleMaterial::Items(items) => items.iter().map(item_bytes).sum(),
        }
    }
}

/// The canonical JSON size of one item.
pub(crate) fn item_bytes(item: &Item) -> usize {
    crate::digest::canonical_json_of(item).len()
}

/// Whether `id` has the shape of a handle id (`h_` + 32 lowercase hex). Anything else
/// is `invalid_handle` before the store is consulted.
pub(crate) fn is_valid_id(id: &str) -> bool {
    id.len() == HANDLE_ID_LEN
        && id.starts_with(HANDLE_ID_PREFIX)
        && id[HANDLE_ID_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the store may reach besides its own memory: nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Capabilities {
    pub(crate) filesystem: bool,
    pub(crate) network: bool,
    /// Where material lives.
    pub(crate) backend: &'static str,
    /// The material kinds accepted.
    pub(crate) sources: &'static [&'static str],
    pub(crate) operations: &'static [&'static str],
    pub(crate) map_functions: &'static [&'static str],
    pub(crate) reduce_functions: &'static [&'static str],
    pub(crate) partitions: &'static [&'static str],
}

impl Capabilities {
    pub(crate) const DECLARED: Capabilities = Capabilities {
        filesystem: false,
        network: false,
        backend: "memory",
        sources: &["text", "items"],
        operations: request::OPERATIONS,
        map_functions: request::MAP_FUNCTIONS,
        reduce_functions: request::REDUCE_FUNCTIONS,
        partitions: request::PARTITIONS,
    };
}

/// Operation limits: what applies when a request names none, and the most a request
/// may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitSettings {
    pub(crate) default_max_results: usize,
    pub(crate) max_results_cap: usize,
    pub(crate) default_max_bytes: usize,
    pub(crate) max_bytes_cap: usize,
    pub(crate) default_time_limit: Duration,
    pub(crate) time_limit_cap: Duration,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            default_max_results: 100,
            max_results_cap: 10_000,
            default_max_bytes: 16_384,
            max_bytes_cap: 1_048_576,
            default_time_limit: Duration::from_millis(100),
            time_limit_cap: Duration::from_millis(1000),
        }
    }
}

/// The `[handles]` section of the server config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandleSettings {
    /// How long a handle lives after registration (not extended by use).
    pub(crate) ttl: Duration,
    /// Bytes of material the store holds across all tenants.
    pub(crate) max_total_bytes: usize,
    /// Bytes of material one tenant holds (its share): beyond it that tenant's least
    /// recently used handles are evicted, never another tenant's. The config defaults it
    /// to an equal share of `max_total_bytes` and refuses shares that do not fit in it.
    pub(crate) max_tenant_bytes: usize,
    /// Tombstones kept across all tenants: the tenants' shares fit in it.
    pub(crate) max_tombstones: usize,
    /// Tombstones one tenant keeps (its share): beyond it that tenant's oldest are
    /// forgotten (their ids become `unknown_handle`), never another tenant's. The config
    /// defaults it to an equal share of `max_tombstones` and refuses shares that do not
    /// fit in it.
    pub(crate) max_tenant_tombstones: usize,
    pub(crate) limits: LimitSettings,
}

impl Default for HandleSettings {
    fn default() -> Self {
        HandleSettings {
            ttl: Duration::from_secs(15 * 60),
            max_total_bytes: 268_435_456,
            // A store with one tenant: the whole store is its share.
            max_tenant_bytes: 268_435_456,
            max_tombstones: 100_000,
            max_tenant_tombstones: 100_000,
            limits: LimitSettings::default(),
        }
    }
}

/// One handle operation finished (or was refused): counts
/// `ctxd_handle_operations_total{op, result}`. Both labels come from fixed sets.
pub(crate) struct HandleOperationFinished {
    /// An operation name from [`request::OPERATIONS`], `delete`, or `unknown`.
    pub(crate) op: &'static str,
    /// `ok` or an error kind.
    pub(crate) result: &'static str,
}

impl HandleOperationFinished {
    /// Every operation's `ok` series at zero, so they exist before the first operation
    /// (the error results appear when they happen).
    pub(crate) fn zero_for_every_operation() {
        for op in request::OPERATIONS.iter().copied().chain(["delete"]) {
            metrics::counter!(
                crate::telemetry::metrics::HANDLE_OPERATIONS,
                "op" => op,
                "result" => "ok"
            )
            .increment(0);
        }
    }

    pub(crate) fn emit(&self) {
        metrics::counter!(
            crate::telemetry::metrics::HANDLE_OPERATIONS,
            "op" => self.op,
            "result" => self.result
        )
        .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    #[test]
    fn ids_are_validated_by_shape() {
        assert!(is_valid_id(&format!("h_{}", "0123456789abcdef".repeat(2))));
        for bad in [
            String::new(),
            "h_".to_owned(),
            format!("h_{}", "a".repeat(31)),
            format!("h_{}", "a".repeat(33)),
            format!("h_{}", "A".repeat(32)),
            format!("x_{}", "a".repeat(32)),
            format!("h_{}g", "a".repeat(31)),
            format!("h_{}é", "a".repeat(30)),
            "../../etc/passwd".to_owned(),
            "https://example.com/h".to_owned(),
        ] {
            assert!(!is_valid_id(&bad), "{bad:?}");
        }
    }

    #[test]
    fn material_bytes_are_text_bytes_or_canonical_item_sizes() {
        assert_eq!(HandleMaterial::Text("héllo".into()).bytes(), 6);
        let item = Item {
            id: "a".into(),
            title: None,
            content: "xyz".into(),
            metadata: Map::new(),
            updated_at: None,
        };
        let one = crate::digest::canonical_json_of(&item).len();
        assert_eq!(one, r#"{"content":"xyz","id":"a"}"#.len());
        assert_eq!(
            HandleMaterial::Items(vec![item.clone(), item]).bytes(),
            2 * one
        );
        assert_eq!(HandleMaterial::Items(Vec::new()).bytes(), 0);
    }

    #[test]
    fn declared_capabilities_reach_nothing_outside_memory() {
        let json = serde_json::to_value(Capabilities::DECLARED).unwrap();
        assert_eq!(json["filesystem"], false);
        assert_eq!(json["network"], false);
        assert_eq!(json["backend"], "memory");
        assert_eq!(json["sources"], json!(["text", "items"]));
        assert_eq!(
            json["mapFunctions"],
            json!(["identity", "lowercase", "uppercase", "length"])
        );
        assert_eq!(json["reduceFunctions"], json!(["count", "byte_count"]));
    }

    #[test]
    fn stale_errors_carry_the_version() {
        let wrong = HandleError::StaleHandle {
            id: "h_x".into(),
            reason: StaleReason::WrongVersion,
            requested: Some(2),
            version: 1,
        };
        assert_eq!(wrong.kind(), "stale_handle");
        let fields = wrong.fields();
        assert_eq!(fields["currentVersion"], 1);
        assert_eq!(fields["requestedVersion"], 2);
        assert_eq!(fields["reason"], "wrong_version");
        let deleted = HandleError::StaleHandle {
            id: "h_x".into(),
            reason: StaleReason::Deleted,
            requested: None,
            version: 1,
        };
        assert_eq!(deleted.fields()["deletedVersion"], 1);
        assert!(deleted.to_string().contains("deleted"), "{deleted}");
    }
}
