//! The provenance record model: a turn record and one `context.provider.v1` record per
//! provider the turn reached, plus the content retained under `retention = "content"`.
//! Records hold key names, keyed digests, locators and fingerprints — never a lookup
//! value, a secret or a provider record id.

use crate::contract::{Currentness, Item, ProviderStatus, RedactionCounts, Source, VersionSource};
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// `kind` of every provider record.
pub const PROVIDER_RECORD_KIND: &str = "context.provider.v1";
/// `kind` of every turn record.
pub const TURN_RECORD_KIND: &str = "ctxd.turn.v1";

/// What one turn decided and rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    pub kind: String,
    pub turn_id: String,
    pub tenant: String,
    pub project: String,
    pub project_version: String,
    pub build_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_digest: Option<String>,
    pub profile: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Input key names with a keyed digest of each `key=value`, sorted by key.
    pub inputs: Vec<InputDigest>,
    pub budget_max_bytes: usize,
    pub deadline_ms: u64,
    /// `LIVE` for bound providers, `TEST_FIXTURE` for `serve --fixtures`.
    pub mode: Source,
    pub layers: Vec<LayerDecisionRecord>,
    pub selections: Vec<SelectionRecord>,
    pub cuts: Vec<CutRecord>,
    pub blocked: bool,
    pub blocking_layers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered_digest: Option<String>,
    pub rendered_bytes: usize,
    /// The fence nonce used, so a replay can render byte-identical text.
    pub nonce: String,
    /// RFC 3339 with milliseconds, UTC.
    pub started_at: String,
    pub started_at_ms: i64,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputDigest {
    pub key: String,
    /// `hmac-sha256:<hex>` of the key and value, with the deployment key.
    pub digest: String,
}

/// A layer's decision, including layers that were never invoked (gating status and
/// reason): recorded exactly as the turn answer reports it.
pub type LayerDecisionRecord = crate::contract::LayerReport;

/// One rendered material, marked with its provider: recorded as the turn answer
/// reports it, less the locator and fingerprint under `retention = "none"`.
pub type SelectionRecord = crate::contract::SelectionReport;

/// A budget cut, recorded exactly as the turn answer reports it.
pub type CutRecord = crate::contract::CutReport;

/// One provider the turn reached: invoked, or refused before invocation
/// (`INVALID_REQUEST`, `NOT_BOUND`, `NOT_EVALUATED`, with `invoked: false`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRecord {
    pub kind: String,
    pub provider: String,
    pub contract: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_digest: Option<String>,
    /// `http`, `sqlite`, or `fixture`; absent when not bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_source: Option<VersionSource>,
    /// `hmac-sha256:<hex>` of provider, key name and value.
    pub request_digest: String,
    /// The lookup key's name; never its value.
    pub lookup_key: String,
    pub invoked: bool,
    pub observed_at: String,
    pub observed_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currentness: Option<Currentness>,
    /// How many items the provider answered with (whatever the retention).
    pub item_count: usize,
    /// Locators and fingerprints, in answer order; empty under `retention = "none"`.
    pub items: Vec<ItemRecord>,
    /// SHA-256 over the ordered fingerprints; absent under `retention = "none"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub material_digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    pub status: ProviderStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// For a `CACHE` answer: milliseconds between the provider giving it
    /// (`observedAt`) and the turn getting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// Secrets replaced by `[REDACTED:<kind>]` in the items, counted by kind; absent
    /// when nothing was redacted. Never a secret.
    #[serde(default, skip_serializing_if = "RedactionCounts::is_empty")]
    #[schema(value_type = std::collections::BTreeMap<String, u32>)]
    pub redactions: RedactionCounts,
    /// Items past the layer's limit that the provider left out (a REST API does not
    /// know the limit): recorded, not a failure; absent when none were.
    #[serde(default, skip_serializing_if = "crate::contract::turn::is_zero")]
    pub items_dropped: u32,
    pub retention: RetentionRecord,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemRecord {
    /// `<provider>/item-<16 hex>`, keyed; never the record id.
    pub locator: String,
    /// SHA-256 of the canonical item.
    pub fingerprint: String,
    pub bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionRecord {
    /// `none`, `digest` or `content`.
    pub policy: String,
    pub ttl_ms: u64,
    /// Whether this invocation's items are in the retained-content store.
    pub content_retained: bool,
}

/// An item kept under `retention = "content"`, stored once per tenant and fingerprint
/// (encrypted at rest) until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetainedItem {
    pub fingerprint: String,
    pub item: Item,
    pub expires_at_ms: i64,
}

/// Everything one turn writes, committed together.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnTrace {
    pub turn: TurnRecord,
    pub providers: Vec<ProviderRecord>,
    pub retained: Vec<RetainedItem>,
    /// The Build the turn ran (digest, JSON), so a replay runs the same build.
    pub build: Option<(String, String)>,
}

/// A turn as the trace store gives it back: the turn record and all its provider
/// records (retained content stays sealed until a replay asks for it).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StoredTurn {
    pub turn: TurnRecord,
    pub providers: Vec<ProviderRecord>,
}

/// SHA-256 over the ordered item fingerprints of one invocation.
pub fn material_digest(fingerprints: &[&str]) -> String {
    crate::digest::sha256_tagged(fingerprints.join("\n").as_bytes())
}

/// Milliseconds since the Unix epoch and the RFC 3339 (ms, UTC) form of `time`.
pub fn timestamp(time: std::time::SystemTime) -> (i64, String) {
    let ms = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    (ms, crate::timestamp::rfc3339_millis(time))
}

/// The trace record of one handle operation (`ctxd.handle.operation.v1`), kept in the
/// trace store's `handle_operations` table and listed by `GET /v1/handles/{id}/trace`.
/// It holds what was done and how much, never material or the caller's arguments: no
/// search pattern (it may be a lookup value), no requested function name, no returned
/// text. Only the operation name, the effective limits and the counts.
/// `kind` of every handle operation record.
pub const HANDLE_OPERATION_KIND: &str = "ctxd.handle.operation.v1";

/// One operation on one handle, successful or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandleOpRecord {
    pub kind: String,
    pub tenant: String,
    /// The handle id.
    pub handle: String,
    /// The handle's version (for a stale handle: its current or deleted version).
    pub version: u64,
    /// Per-handle, monotonic from 1; shared by operations and the delete.
    pub sequence: u64,
    /// `metadata` … `reduce`, `delete`, or `unknown` for a request that did not parse.
    pub operation: String,
    /// `ok` or the error kind.
    pub result: String,
    pub bytes_inspected: u64,
    pub items_inspected: u64,
    pub bytes_returned: u64,
    pub entries: u64,
    pub truncated: bool,
    pub elapsed_ms: u64,
    /// When the operation started (RFC 3339, UTC, milliseconds).
    pub at: String,
    pub at_ms: i64,
    /// The limits it ran under (absent when the request did not parse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RecordLimits>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordLimits {
    pub max_results: u64,
    pub max_bytes: u64,
    pub time_limit_ms: u64,
}

impl HandleOpRecord {
    /// A record with no counts yet, started at `at`.
    pub fn new(
        tenant: &str,
        handle: &str,
        version: u64,
        sequence: u64,
        operation: &str,
        at: SystemTime,
    ) -> HandleOpRecord {
        let (at_ms, at) = timestamp(at);
        HandleOpRecord {
            kind: HANDLE_OPERATION_KIND.to_owned(),
            tenant: tenant.to_owned(),
            handle: handle.to_owned(),
            version,
            sequence,
            operation: operation.to_owned(),
            result: "ok".to_owned(),
            bytes_inspected: 0,
            items_inspected: 0,
            bytes_returned: 0,
            entries: 0,
            truncated: false,
            elapsed_ms: 0,
            at,
            at_ms,
            limits: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_digest_depends_on_order() {
        assert_ne!(
            material_digest(&["sha256:a", "sha256:b"]),
            material_digest(&["sha256:b", "sha256:a"])
        );
    }

    #[test]
    fn timestamps_are_utc_milliseconds() {
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_764_500_000_123);
        let (ms, text) = timestamp(time);
        assert_eq!(ms, 1_764_500_000_123);
        assert_eq!(text, "2025-11-30T10:53:20.123Z");
    }
}
