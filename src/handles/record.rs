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
pub(crate) const HANDLE_OPERATION_KIND: &str = "ctxd.handle.operation.v1";

/// One operation on one handle, successful or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HandleOpRecord {
    pub(crate) kind: String,
    pub(crate) tenant: String,
    /// The handle id.
    pub(crate) handle: String,
    /// The handle's version (for a stale handle: its current or deleted version).
    pub(crate) version: u64,
    /// Per-handle, monotonic from 1; shared by operations and the delete.
    pub(crate) sequence: u64,
    /// `metadata` … `reduce`, `delete`, or `unknown` for a request that did not parse.
    pub(crate) operation: String,
    /// `ok` or the error kind.
    pub(crate) result: String,
    pub(crate) bytes_inspected: u64,
    pub(crate) items_inspected: u64,
    pub(crate) bytes_returned: u64,
    pub(crate) entries: u64,
    pub(crate) truncated: bool,
    pub(crate) elapsed_ms: u64,
    /// When the operation started (RFC 3339, UTC, milliseconds).
    pub(crate) at: String,
    pub(crate) at_ms: i64,
    /// The limits it ran under (absent when the request did not parse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limits: Option<RecordLimits>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecordLimits {
    pub(crate) max_results: u64,
    pub(crate) max_bytes: u64,
    pub(crate) time_limit_ms: u64,
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
    pub(crate) fn new(
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
