//! Status taxonomies of layers and provider invocations, and where material came from.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The result of one layer in one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LayerStatus {
    /// Material was rendered (static content or provider items).
    Included,
    /// The providers answered that there is no record (404 or zero items).
    Empty,
    /// Facts could not be established: missing input, or data not current enough.
    Unknown,
    /// A provider failed, was not bound, or the lookup value was refused.
    Unavailable,
    /// Out of scope for the turn's objective or consumer.
    NotRequested,
    /// Not part of the turn's profile.
    Excluded,
}

impl LayerStatus {
    pub const ALL: [LayerStatus; 6] = [
        LayerStatus::Included,
        LayerStatus::Empty,
        LayerStatus::Unknown,
        LayerStatus::Unavailable,
        LayerStatus::NotRequested,
        LayerStatus::Excluded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LayerStatus::Included => "INCLUDED",
            LayerStatus::Empty => "EMPTY",
            LayerStatus::Unknown => "UNKNOWN",
            LayerStatus::Unavailable => "UNAVAILABLE",
            LayerStatus::NotRequested => "NOT_REQUESTED",
            LayerStatus::Excluded => "EXCLUDED",
        }
    }

    /// Whether a `required` layer ending in this status blocks the turn.
    pub fn blocks_when_required(self) -> bool {
        matches!(self, LayerStatus::Unknown | LayerStatus::Unavailable)
    }
}

impl fmt::Display for LayerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a layer ended in its status. Provider-caused reasons carry the provider status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LayerReason {
    /// The profile does not include the layer.
    ProfileExcluded,
    /// The turn's objective is not in the layer's `scope.objectives`.
    ObjectiveOutOfScope,
    /// The turn's consumer is not in the layer's `scope.consumers`.
    ConsumerOutOfScope,
    /// A `requiresInput` key or a bound provider's lookup input is missing.
    ProviderInputNotProvided,
    /// `currentness: required` and a provider's data was not `CURRENT`.
    NotCurrent,
    /// Static content, always included.
    Static,
    /// Provider items were rendered.
    ProviderItems,
    /// The providers had no matching record.
    NotFound,
    /// A provider invocation failed or was refused; the layer's provider statuses say how.
    ProviderFailed,
    /// A bound provider was not evaluated: the turn was already decided, or a fixture is
    /// missing.
    NotEvaluated,
}

impl LayerReason {
    /// The reason as the API spells it (`PROVIDER_ITEMS`): the one spelling of human
    /// output too.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerReason::ProfileExcluded => "PROFILE_EXCLUDED",
            LayerReason::ObjectiveOutOfScope => "OBJECTIVE_OUT_OF_SCOPE",
            LayerReason::ConsumerOutOfScope => "CONSUMER_OUT_OF_SCOPE",
            LayerReason::ProviderInputNotProvided => "PROVIDER_INPUT_NOT_PROVIDED",
            LayerReason::NotCurrent => "NOT_CURRENT",
            LayerReason::Static => "STATIC",
            LayerReason::ProviderItems => "PROVIDER_ITEMS",
            LayerReason::NotFound => "NOT_FOUND",
            LayerReason::ProviderFailed => "PROVIDER_FAILED",
            LayerReason::NotEvaluated => "NOT_EVALUATED",
        }
    }
}

impl fmt::Display for LayerReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one provider invocation (or of the decision not to invoke it).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProviderStatus {
    Ok,
    NotFound,
    Timeout,
    Unavailable,
    LimitExceeded,
    InvalidResponse,
    SecretDetected,
    Incompatible,
    NotBound,
    InvalidRequest,
    NotEvaluated,
}

impl ProviderStatus {
    pub const ALL: [ProviderStatus; 11] = [
        ProviderStatus::Ok,
        ProviderStatus::NotFound,
        ProviderStatus::Timeout,
        ProviderStatus::Unavailable,
        ProviderStatus::LimitExceeded,
        ProviderStatus::InvalidResponse,
        ProviderStatus::SecretDetected,
        ProviderStatus::Incompatible,
        ProviderStatus::NotBound,
        ProviderStatus::InvalidRequest,
        ProviderStatus::NotEvaluated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderStatus::Ok => "OK",
            ProviderStatus::NotFound => "NOT_FOUND",
            ProviderStatus::Timeout => "TIMEOUT",
            ProviderStatus::Unavailable => "UNAVAILABLE",
            ProviderStatus::LimitExceeded => "LIMIT_EXCEEDED",
            ProviderStatus::InvalidResponse => "INVALID_RESPONSE",
            ProviderStatus::SecretDetected => "SECRET_DETECTED",
            ProviderStatus::Incompatible => "INCOMPATIBLE",
            ProviderStatus::NotBound => "NOT_BOUND",
            ProviderStatus::InvalidRequest => "INVALID_REQUEST",
            ProviderStatus::NotEvaluated => "NOT_EVALUATED",
        }
    }

    /// Whether the invocation produced usable data (items or a definite "no record").
    pub fn is_success(self) -> bool {
        matches!(self, ProviderStatus::Ok | ProviderStatus::NotFound)
    }
}

impl fmt::Display for ProviderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a provider outcome came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Source {
    /// Fetched from the bound provider during this turn.
    Live,
    /// Served from the provider's response cache.
    Cache,
    /// Taken from a Context Test fixture.
    TestFixture,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Live => "LIVE",
            Source::Cache => "CACHE",
            Source::TestFixture => "TEST_FIXTURE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialize_as_their_names() {
        for status in ProviderStatus::ALL {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
        }
        for status in LayerStatus::ALL {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
        }
    }

    #[test]
    fn reasons_are_spelled_as_they_serialize() {
        use LayerReason::*;
        for reason in [
            ProfileExcluded,
            ObjectiveOutOfScope,
            ConsumerOutOfScope,
            ProviderInputNotProvided,
            NotCurrent,
            Static,
            ProviderItems,
            NotFound,
            ProviderFailed,
            NotEvaluated,
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{reason}\""));
        }
    }

    #[test]
    fn only_unknown_and_unavailable_block() {
        let blocking: Vec<_> = LayerStatus::ALL
            .into_iter()
            .filter(|s| s.blocks_when_required())
            .collect();
        assert_eq!(blocking, [LayerStatus::Unknown, LayerStatus::Unavailable]);
    }
}
