//! What one provider invocation produced, whatever the provider type or source.

use crate::contract::{Currentness, Item, ProviderStatus, Source};

#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: ProviderStatus,
    /// Why a fast failure happened (`CIRCUIT_OPEN`, `OVERLOADED`, a secret detector …).
    pub detail: Option<String>,
    /// Items, only when `status` is `OK`.
    pub items: Vec<Item>,
    pub currentness: Currentness,
    pub version: Option<String>,
    pub revision: Option<String>,
    pub source: Source,
}

impl Outcome {
    /// A successful answer; zero items means "no record".
    pub fn items(items: Vec<Item>, currentness: Currentness, source: Source) -> Self {
        Outcome {
            status: ProviderStatus::Ok,
            detail: None,
            items,
            currentness,
            version: None,
            revision: None,
            source,
        }
    }

    /// Any answer without items: `NOT_FOUND` or a failure.
    pub fn status(status: ProviderStatus, detail: Option<String>, source: Source) -> Self {
        Outcome {
            status,
            detail,
            items: Vec::new(),
            currentness: Currentness::Unknown,
            version: None,
            revision: None,
            source,
        }
    }

    /// `OK` with items, or `NOT_FOUND` (404 / zero items).
    pub fn found_anything(&self) -> bool {
        self.status == ProviderStatus::Ok && !self.items.is_empty()
    }
}
