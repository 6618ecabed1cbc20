//! The Context Project document as authored (JSON, camelCase). Parsing rejects unknown
//! keys; meaning is checked in `validate`.

use crate::contract::{Currentness, Item, LayerStatus, ProviderStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ProjectDoc {
    pub(crate) id: String,
    pub(crate) version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) budget: Option<Budget>,
    #[serde(default)]
    pub(crate) providers: Vec<ProviderRequirement>,
    pub(crate) layers: Vec<Layer>,
    #[serde(default)]
    pub(crate) profiles: Vec<Profile>,
    #[serde(default)]
    pub(crate) tests: Vec<ContextTest>,
}

/// `{"maxBytes": N}`: the same shape in a Project, a Context Test and a turn request.
pub(crate) use crate::contract::TurnBudget as Budget;

/// What a layer needs from the outside world; never how to reach it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ProviderRequirement {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) lookup: Lookup,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_items: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Lookup {
    /// The turn input whose value is the lookup value.
    pub(crate) input: String,
    /// Applies in addition to the base grammar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pattern: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Layer {
    pub(crate) id: String,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bindings: Option<Vec<LayerBinding>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) requires_input: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) currentness: Option<CurrentnessRule>,
    /// Items that do not fit the budget are kept behind handles and referenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) handles: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LayerBinding {
    pub(crate) provider: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Scope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) objectives: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) consumers: Option<Vec<String>>,
}

/// How strictly a layer needs current data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CurrentnessRule {
    /// Anything but `CURRENT` makes the layer `UNKNOWN` (`NOT_CURRENT`).
    Required,
    /// Rendered either way; non-current data is labelled.
    #[default]
    Preferred,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Profile {
    pub(crate) id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) include: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exclude: Option<Vec<String>>,
}

/// A Context Test: a turn request, per-provider fixtures and expectations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ContextTest {
    pub(crate) id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    pub(crate) request: TestRequest,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) providers: BTreeMap<String, Fixture>,
    #[serde(default)]
    pub(crate) expect: Expectations,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TestRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) objective: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) consumer: Option<String>,
    #[serde(default)]
    pub(crate) inputs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) budget: Option<Budget>,
}

/// Synthetic provider answer for a test: items, or a failure status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Fixture {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) items: Option<Vec<Item>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<ProviderStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) currentness: Option<Currentness>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Expectations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) blocked: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) layers: BTreeMap<String, LayerStatus>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) providers: BTreeMap<String, ProviderStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) contains: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) not_contains: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) equals: Option<String>,
}
