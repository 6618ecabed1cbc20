//! Why a handle operation, a registration or the store itself failed: the errors every
//! part of `handles` answers with, and the reasons a handle is stale.

use serde_json::{Map, Value, json};

/// Why a handle operation (or a registration) was refused. Each variant is one `kind`
/// of seed 004; [`HandleError::fields`] gives its structured fields. Messages never
/// carry material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HandleError {
    #[error("a handle id is \"h_\" followed by 32 lowercase hexadecimal digits")]
    InvalidHandle,
    #[error("no such handle")]
    UnknownHandle { id: String },
    #[error("{}", stale_message(*reason, *requested, *version))]
    StaleHandle {
        id: String,
        reason: StaleReason,
        /// The version the request named (absent for a delete).
        requested: Option<u64>,
        /// The handle's current version (wrong version) or the version that was
        /// deleted, expired or evicted.
        version: u64,
    },
    #[error("{field}: {message}")]
    InvalidLimit {
        field: String,
        message: String,
        max: Option<u64>,
    },
    #[error("{field}: {message}")]
    InvalidPattern { field: String, message: String },
    #[error("{field}: {value} is out of range: the material has {available}")]
    OutOfRange {
        field: String,
        value: u64,
        available: u64,
    },
    #[error("{}", unsupported_partition_message(by, *material, supported))]
    UnsupportedPartition {
        by: String,
        /// Set when the partition exists but not for this material (`lines` of items).
        material: Option<&'static str>,
        supported: Vec<&'static str>,
    },
    #[error("{operation} function {function:?} is not allowed: use one of {}", allowed.join(", "))]
    CapabilityDenied {
        operation: &'static str,
        function: String,
        allowed: &'static [&'static str],
    },
    #[error("{message}")]
    InvalidArgument {
        field: Option<String>,
        message: String,
    },
    #[error("the operation did not finish within its time limit of {limit_ms} ms")]
    TimeLimitExceeded { limit_ms: u64 },
    #[error("the material is {bytes} bytes, more than the store holds for the tenant ({cap})")]
    MaterialTooLarge { bytes: usize, cap: usize },
}

fn stale_message(reason: StaleReason, requested: Option<u64>, version: u64) -> String {
    match (reason, requested) {
        (StaleReason::WrongVersion, Some(requested)) => {
            format!("version {requested} is not the handle's current version {version}")
        }
        (StaleReason::WrongVersion, None) => format!("the handle's version is {version}"),
        (reason, _) => format!("version {version} of the handle was {}", reason.as_str()),
    }
}

fn unsupported_partition_message(
    by: &str,
    material: Option<&'static str>,
    supported: &[&'static str],
) -> String {
    match material {
        Some(material) => format!(
            "partition by {by:?} is not supported for {material} material: use {}",
            supported.join(" or ")
        ),
        None => format!(
            "partition by {by:?} is not supported: use {}",
            supported.join(" or ")
        ),
    }
}

impl HandleError {
    /// The error `kind` (`stale_handle`, …): the API's error code and the trace's and
    /// metric's `result`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            HandleError::InvalidHandle => "invalid_handle",
            HandleError::UnknownHandle { .. } => "unknown_handle",
            HandleError::StaleHandle { .. } => "stale_handle",
            HandleError::InvalidLimit { .. } => "invalid_limit",
            HandleError::InvalidPattern { .. } => "invalid_pattern",
            HandleError::OutOfRange { .. } => "out_of_range",
            HandleError::UnsupportedPartition { .. } => "unsupported_partition",
            HandleError::CapabilityDenied { .. } => "capability_denied",
            HandleError::InvalidArgument { .. } => "invalid_argument",
            HandleError::TimeLimitExceeded { .. } => "time_limit_exceeded",
            HandleError::MaterialTooLarge { .. } => "material_too_large",
        }
    }

    /// The structured fields that go beside `code` and `message` in an error body.
    pub(crate) fn fields(&self) -> Map<String, Value> {
        let value = match self {
            HandleError::InvalidHandle | HandleError::MaterialTooLarge { .. } => json!({}),
            HandleError::UnknownHandle { id } => json!({"handle": id}),
            HandleError::StaleHandle {
                id,
                reason,
                requested,
                version,
            } => {
                let mut fields = json!({"handle": id, "reason": reason.as_str()});
                if let Some(requested) = requested {
                    fields["requestedVersion"] = json!(requested);
                }
                let key = match reason {
                    StaleReason::WrongVersion => "currentVersion",
                    _ => "deletedVersion",
                };
                fields[key] = json!(version);
                fields
            }
            HandleError::InvalidLimit { field, max, .. } => match max {
                Some(max) => json!({"field": field, "max": max}),
                None => json!({"field": field}),
            },
            HandleError::InvalidPattern { field, .. } => json!({"field": field}),
            HandleError::OutOfRange {
                field,
                value,
                available,
            } => json!({"field": field, "value": value, "available": available}),
            HandleError::UnsupportedPartition { supported, .. } => {
                json!({"field": "op.by", "supported": supported})
            }
            HandleError::CapabilityDenied {
                operation, allowed, ..
            } => json!({"field": "op.function", "operation": operation, "allowed": allowed}),
            HandleError::InvalidArgument { field, .. } => match field {
                Some(field) => json!({"field": field}),
                None => json!({}),
            },
            HandleError::TimeLimitExceeded { limit_ms } => json!({"timeLimitMs": limit_ms}),
        };
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    pub(crate) fn invalid_argument(field: &str, message: impl Into<String>) -> HandleError {
        HandleError::InvalidArgument {
            field: Some(field.to_owned()),
            message: format!("{field}: {}", message.into()),
        }
    }
}

/// Why a handle is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StaleReason {
    /// The handle is live but the request named another version.
    WrongVersion,
    Deleted,
    Expired,
    /// Evicted (least recently used) to make room in its tenant's share.
    Evicted,
}

impl StaleReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StaleReason::WrongVersion => "wrong_version",
            StaleReason::Deleted => "deleted",
            StaleReason::Expired => "expired",
            StaleReason::Evicted => "evicted",
        }
    }
}

/// The store could not be asked: Redis unreachable, too slow, or refusing. The message
/// names the server, never a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct StoreUnavailable {
    message: String,
}

impl StoreUnavailable {
    pub(crate) fn new(message: impl Into<String>) -> StoreUnavailable {
        StoreUnavailable {
            message: message.into(),
        }
    }
}
