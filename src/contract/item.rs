//! The one item shape every provider type returns, and the currentness a provider reports.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One record returned by a provider. Content is reference data: it is bounded, scanned
/// and rendered inside fences, never interpreted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Item {
    /// The provider's record id. Traces never store it; they store a keyed locator.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// How current a provider says its answer is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Currentness {
    Current,
    Stale,
    #[default]
    Unknown,
}

impl Currentness {
    pub fn as_str(self) -> &'static str {
        match self {
            Currentness::Current => "CURRENT",
            Currentness::Stale => "STALE",
            Currentness::Unknown => "UNKNOWN",
        }
    }
}
