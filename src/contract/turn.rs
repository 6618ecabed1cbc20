//! The turn API's request and response bodies (`POST /v1/turns`) and the error body.

use super::{Currentness, LayerReason, LayerStatus, ProviderStatus, Source};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// `POST /v1/turns`. Unknown fields are refused, naming the field.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    rmcp::schemars::JsonSchema,
    utoipa::ToSchema,
)]
#[schemars(crate = "rmcp::schemars")]
#[schema(example = json!({"project": "support", "profile": "default", "objective": "billing",
    "consumer": "support-agent", "inputs": {"customerId": "CUST-1042"},
    "budget": {"maxBytes": 8000}, "deadlineMs": 1500}))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TurnRequest {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// A duplicate key is refused like a duplicate field; a value that is not a string is
    /// refused by its kind, never echoed.
    #[serde(default, deserialize_with = "input_map")]
    #[schemars(with = "BTreeMap<String, String>")]
    #[schema(schema_with = input_map_schema)]
    pub inputs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<TurnBudget>,
    /// The turn's deadline in milliseconds: 50 ..= 10000, or up to `limits.max_turn_ms`
    /// when that is larger; `max_turn_ms` caps the time the turn takes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_whole_number"
    )]
    #[schema(minimum = 50, maximum = 10000)]
    pub deadline_ms: Option<u64>,
}

/// `limits.max_input_keys` when the config does not set it.
pub(crate) const DEFAULT_MAX_INPUT_KEYS: usize = 64;

/// The OpenAPI schema of an `inputs` object (turns and replays): string values, at most
/// `limits.max_input_keys` keys (the default, as the shipped config serves it).
pub(crate) fn input_map_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::{ObjectBuilder, schema::Type};
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
        .max_properties(Some(DEFAULT_MAX_INPUT_KEYS))
        .description(Some(
            "String values only, each key once, at most `limits.max_input_keys` (64) keys; values are never echoed or logged",
        ))
        .build()
}

/// Reads a count or a duration: a whole number as JSON writes it, `8000` or `8000.0`
/// (JSON has one number type, and the OpenAPI document's `integer` is both). A fraction,
/// a negative number or one past the type's range is refused by its kind.
pub(crate) fn whole_number<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    let value = deserializer.deserialize_any(WholeNumberVisitor)?;
    T::try_from(value)
        .map_err(|_| de::Error::invalid_value(de::Unexpected::Unsigned(value), &WholeNumberVisitor))
}

/// [`whole_number`] for an optional field: `null` is absent.
pub(crate) fn optional_whole_number<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    struct Optional<T>(std::marker::PhantomData<T>);
    impl<'de, T: TryFrom<u64>> Visitor<'de> for Optional<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a whole number")
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
            whole_number(deserializer).map(Some)
        }
    }
    deserializer.deserialize_option(Optional(std::marker::PhantomData))
}

struct WholeNumberVisitor;

impl<'de> Visitor<'de> for WholeNumberVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::invalid_value(de::Unexpected::Signed(value), &self))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        whole(value).ok_or_else(|| E::invalid_type(de::Unexpected::Float(value), &self))
    }
}

/// `value` as a `u64` when it is a whole number in range (`8000.0`); `None` for a
/// fraction, a negative number or one past `u64::MAX`.
pub(crate) fn whole(value: f64) -> Option<u64> {
    // 2^64: the first float past `u64::MAX`.
    const PAST_U64: f64 = 18_446_744_073_709_551_616.0;
    (value.fract() == 0.0 && (0.0..PAST_U64).contains(&value)).then_some(value as u64)
}

/// Reads an `inputs` object: string values only, every key once. Two values for one key
/// would let a gateway that reads the first see another value than ctxd, which would read
/// the last; and an input value is never repeated in an error, whatever its type.
pub fn input_map<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    deserializer.deserialize_map(InputMapVisitor)
}

struct InputMapVisitor;

impl<'de> Visitor<'de> for InputMapVisitor {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of string values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut inputs = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            if inputs.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key {key:?}: each input is given once"
                )));
            }
            let value = map.next_value::<InputValue>()?;
            inputs.insert(key, value.0);
        }
        Ok(inputs)
    }
}

/// One input value: a string, or an error that names only the kind of what came.
struct InputValue(String);

impl<'de> Deserialize<'de> for InputValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InputValueVisitor)
    }
}

struct InputValueVisitor;

impl InputValueVisitor {
    fn refuse<E: de::Error>(found: &str) -> Result<InputValue, E> {
        Err(E::custom(format_args!(
            "must be a string, not {found} (the value is not repeated)"
        )))
    }
}

impl<'de> Visitor<'de> for InputValueVisitor {
    type Value = InputValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<InputValue, E> {
        Ok(InputValue(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<InputValue, E> {
        Ok(InputValue(value))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<InputValue, E> {
        Self::refuse("a boolean")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<InputValue, E> {
        Self::refuse("a number")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<InputValue, E> {
        Self::refuse("a number")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<InputValue, E> {
        Self::refuse("a number")
    }

    fn visit_unit<E: de::Error>(self) -> Result<InputValue, E> {
        Self::refuse("null")
    }

    fn visit_none<E: de::Error>(self) -> Result<InputValue, E> {
        Self::refuse("null")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<InputValue, A::Error> {
        Self::refuse("an array")
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<InputValue, A::Error> {
        Self::refuse("an object")
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    rmcp::schemars::JsonSchema,
    utoipa::ToSchema,
)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TurnBudget {
    /// 256 ..= 1048576; the project's budget caps it.
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 256, maximum = 1048576)]
    pub max_bytes: usize,
}

/// A `200` answer: every layer's status, every provider's status, what was rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnResponse {
    pub turn_id: String,
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
    #[serde(flatten)]
    pub result: TurnResult,
    pub duration_ms: u64,
}

/// What the kernel made of a turn: every layer's and provider's status, the rendered
/// text, what was selected and cut, and the budget. The turn answer, Preview and replay
/// report it as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnResult {
    pub blocked: bool,
    pub blocking_layers: Vec<String>,
    pub layers: Vec<LayerReport>,
    pub providers: Vec<ProviderReport>,
    /// `None` when the turn is blocked. Sent as `null` rather than left out, so a client
    /// sees one shape whatever the turn's outcome (replay answers do the same).
    #[serde(default)]
    pub rendered: Option<String>,
    /// `null` exactly when `rendered` is.
    #[serde(default)]
    pub rendered_digest: Option<String>,
    pub selections: Vec<SelectionReport>,
    pub cuts: Vec<CutReport>,
    pub budget: BudgetReport,
    /// The fence nonce actually used (never found inside any material). Recorded in the
    /// trace so a replay renders the same text; not part of the answer.
    #[serde(skip)]
    pub nonce: String,
}

/// One layer's status and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LayerReport {
    pub id: String,
    pub status: LayerStatus,
    pub reason: LayerReason,
    pub required: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
    /// Names of missing inputs, for `PROVIDER_INPUT_NOT_PROVIDED`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_inputs: Vec<String>,
    /// Worst currentness of the layer's provider data, for bound layers that got data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currentness: Option<Currentness>,
}

/// Where a provider's reported version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VersionSource {
    Response,
    Describe,
    Binding,
}

/// One provider the turn reached: invoked, or decided by gating (`INVALID_REQUEST`,
/// `NOT_BOUND`, `NOT_EVALUATED`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderReport {
    pub id: String,
    pub status: ProviderStatus,
    /// Why a fast failure happened (`CIRCUIT_OPEN`, `OVERLOADED`, a secret detector …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Set when the provider was invoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currentness: Option<Currentness>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_source: Option<VersionSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub items: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How old a `CACHE` answer was when the turn got it: milliseconds since the
    /// provider gave it. Absent for every other source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// Secrets replaced by `[REDACTED:<kind>]` in the items (`secrets = "redact"`),
    /// counted by kind; absent when nothing was redacted. Never the secrets themselves.
    #[serde(default, skip_serializing_if = "RedactionCounts::is_empty")]
    #[schema(value_type = BTreeMap<String, u32>)]
    pub redactions: RedactionCounts,
    /// Items past the layer's limit that the provider left out (a REST API does not
    /// know the limit): recorded, not a failure; absent when none were.
    #[serde(default, skip_serializing_if = "crate::contract::turn::is_zero")]
    pub items_dropped: u32,
}

/// Whether a count is zero (serde's `skip_serializing_if` for counts shown only when set).
pub(crate) fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// How many secrets of each kind (the detector's name, e.g. `github_token`) were
/// replaced in one provider's answer.
pub type RedactionCounts = BTreeMap<String, u32>;

/// One rendered material (static text or a provider item).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectionReport {
    pub layer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `<provider>/item-<16 hex>`, keyed: never the record id. Absent for static text,
    /// and in a trace under `retention = "none"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    /// SHA-256 of the canonical item (or of the static text). Always in a turn answer;
    /// absent in a trace under `retention = "none"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Content bytes rendered.
    pub bytes: usize,
    pub truncated: bool,
    /// `{id, version}` when the item is kept behind a handle instead of rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<HandleRef>,
}

/// The opaque reference to material kept behind a handle: `{"id": "h_…", "version": 1}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HandleRef {
    pub id: String,
    pub version: u64,
}

/// One budget cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CutReport {
    pub layer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    pub action: CutAction,
    pub bytes_before: usize,
    pub bytes_after: usize,
}

/// What a budget cut did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CutAction {
    /// Content shortened at a UTF-8 boundary.
    Truncated,
    /// One material left out.
    Dropped,
    /// A whole layer section (heading and statements) left out.
    SectionDropped,
    /// Kept whole behind a handle; a short reference is rendered instead.
    Handle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub max_bytes: usize,
    pub used_bytes: usize,
}

/// Every non-`200` answer: `{"error": {"code", "message", "field"?}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_whole_numbers_written_either_way() {
        let turn: TurnRequest = serde_json::from_str(
            r#"{"project": "p", "budget": {"maxBytes": 8000.0}, "deadlineMs": 1500.0}"#,
        )
        .unwrap();
        assert_eq!(turn.budget.unwrap().max_bytes, 8000);
        assert_eq!(turn.deadline_ms, Some(1500));
        let turn: TurnRequest =
            serde_json::from_str(r#"{"project": "p", "deadlineMs": null}"#).unwrap();
        assert_eq!(turn.deadline_ms, None);
        for refused in [
            r#"{"project": "p", "deadlineMs": 1500.5}"#,
            r#"{"project": "p", "deadlineMs": -1}"#,
            r#"{"project": "p", "deadlineMs": 1e30}"#,
            r#"{"project": "p", "deadlineMs": "1500"}"#,
            r#"{"project": "p", "budget": {"maxBytes": -8000.0}}"#,
        ] {
            let error = serde_json::from_str::<TurnRequest>(refused).unwrap_err();
            assert!(
                error.to_string().contains("a whole number"),
                "{refused}: {error}"
            );
        }
    }

    #[test]
    fn a_blocked_result_sends_rendered_as_null() {
        let blocked = TurnResult {
            blocked: true,
            blocking_layers: vec!["customer-profile".to_owned()],
            layers: Vec::new(),
            providers: Vec::new(),
            rendered: None,
            rendered_digest: None,
            selections: Vec::new(),
            cuts: Vec::new(),
            budget: BudgetReport {
                max_bytes: 12000,
                used_bytes: 0,
            },
            nonce: String::new(),
        };
        let value = serde_json::to_value(&blocked).unwrap();
        let object = value.as_object().unwrap();
        assert_eq!(object.get("rendered"), Some(&serde_json::Value::Null));
        assert_eq!(object.get("renderedDigest"), Some(&serde_json::Value::Null));
        let back: TurnResult = serde_json::from_value(value).unwrap();
        assert_eq!(back.rendered, None);
    }
}
