//! The trace record of one handle operation (`ctxd.handle.operation.v1`), kept in the
//! trace store's `handle_operations` table and listed by `GET /v1/handles/{id}/trace`.
//!
//! It holds what was done and how much, never material or the caller's arguments: no
//! search pattern (it may be a lookup value), no requested function name, no returned
//! text. Only the operation name, the effective limits and the counts.

use super::request::Limits;
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// `kind` of every handle operation record.
pub const HANDLE_OPERATION_KIND: &str = "ctxd.handle.operation.v1";

/// One operation on one handle, successful or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordLimits {
    pub max_results: u64,
    pub max_bytes: u64,
    pub time_limit_ms: u64,
}

impl From<&Limits> for RecordLimits {
    fn from(limits: &Limits) -> Self {
        RecordLimits {
            max_results: limits.max_results as u64,
            max_bytes: limits.max_bytes as u64,
            time_limit_ms: limits.time_limit.as_millis() as u64,
        }
    }
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
        let (at_ms, at) = crate::trace::record::timestamp(at);
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
