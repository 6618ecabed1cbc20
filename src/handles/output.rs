//! What an operation answers: its entries, each with one payload and where it comes
//! from, the scalar results (`metadata`, `reduce`), and what it inspected. Plain data:
//! [`super::bounds`] fills it within the limits, [`super::ops`] decides what goes in.

use super::{HandleError, item_bytes};
use crate::contract::Item;
use serde::Serialize;
use std::time::Duration;

/// What an operation read of the material.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Inspected {
    pub(crate) bytes: u64,
    pub(crate) items: u64,
}

/// An operation's result, what it inspected (also when it failed) and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Execution {
    pub(crate) result: Result<OpOutput, HandleError>,
    pub(crate) inspected: Inspected,
    pub(crate) elapsed: Duration,
}

/// A successful operation's result.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OpOutput {
    pub(crate) entries: Vec<Entry>,
    /// `metadata` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<Metadata>,
    /// `reduce` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<u64>,
    /// Whether `maxResults` or `maxBytes` left something out.
    pub(crate) truncated: bool,
    /// Payload bytes of `entries`: never more than `maxBytes`.
    pub(crate) bytes_returned: usize,
}

/// One entry of a result: where it comes from, and one payload.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    /// Partition chunk index (0-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chunk: Option<usize>,
    /// Item index (0-based): the item the entry is, or comes from, or a chunk's first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) item: Option<usize>,
    /// Line number (1-based): the line, or a line chunk's first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) line: Option<usize>,
    /// Lines in a line chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lines: Option<usize>,
    /// Character offset (0-based) of the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) start: Option<usize>,
    #[serde(flatten)]
    pub(crate) payload: Payload,
    /// Whether this entry's payload was cut to stay within `maxBytes`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) truncated: bool,
}

impl Entry {
    pub(super) fn at() -> Entry {
        Entry {
            chunk: None,
            item: None,
            line: None,
            lines: None,
            start: None,
            payload: Payload::Text(String::new()),
            truncated: false,
        }
    }

    pub(super) fn chunk(mut self, chunk: usize) -> Entry {
        self.chunk = Some(chunk);
        self
    }

    pub(super) fn item(mut self, item: usize) -> Entry {
        self.item = Some(item);
        self
    }

    pub(super) fn line(mut self, line: usize) -> Entry {
        self.line = Some(line);
        self
    }

    pub(super) fn start(mut self, start: usize) -> Entry {
        self.start = Some(start);
        self
    }

    /// The bytes this entry counts against `maxBytes`.
    pub(crate) fn payload_bytes(&self) -> usize {
        self.payload.bytes()
    }
}

/// Exactly one payload per entry, serialized as its key (`"text": …`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Payload {
    Text(String),
    /// A `map` output: a string, or a number for `length`.
    Value(MapValue),
    /// One item of an item list.
    Record(Item),
    /// The items of a chunk of an item list.
    Records(Vec<Item>),
}

impl Payload {
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Payload::Text(text) => text.len(),
            Payload::Value(MapValue::Text(text)) => text.len(),
            Payload::Value(MapValue::Number(n)) => digits(*n),
            Payload::Record(item) => item_bytes(item),
            Payload::Records(items) => items.iter().map(item_bytes).sum(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum MapValue {
    Text(String),
    Number(u64),
}

/// `metadata`: kind, sizes and counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Metadata {
    /// `text` or `items`.
    pub(crate) kind: &'static str,
    /// As [`HandleMaterial::bytes`].
    pub(crate) bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chars: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lines: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) items: Option<u64>,
    /// Sum of the items' `content` bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content_bytes: Option<u64>,
}

/// The scalar part of a result.
#[derive(Default)]
pub(super) struct Summary {
    pub(super) metadata: Option<Metadata>,
    pub(super) value: Option<u64>,
}

/// Decimal digits of `n`: the payload bytes of a number.
pub(super) fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}
