//! What one provider invocation produced, whatever the provider type or source: items,
//! "no record" (`NOT_FOUND`, one meaning for every provider type: [`Outcome::answered`]),
//! or a typed [`Failure`] — never items beside a failure. A [`Call`] carries
//! one invocation of a turn's plan with its outcome and the facts provenance needs.

use crate::bounds::BoundsViolation;
use crate::contract::{Currentness, Item, ProviderStatus, RedactionCounts, Source, VersionSource};
use crate::digest::item_fingerprint;
use crate::gate::Invocation;
use std::time::{Duration, SystemTime};

/// The `detail` codes of fast failures and refusals, as the API, traces and metrics
/// spell them. [`Failure::detail`] is the one place that maps a failure to its code.
pub(crate) mod detail {
    pub(crate) const CIRCUIT_OPEN: &str = "CIRCUIT_OPEN";
    pub(crate) const OVERLOADED: &str = "OVERLOADED";
    pub(crate) const REDIRECT_REFUSED: &str = "REDIRECT_REFUSED";
    pub(crate) const CREDENTIAL_REFLECTED: &str = "CREDENTIAL_REFLECTED";
    pub(crate) const UNAUTHORIZED: &str = "UNAUTHORIZED";
    pub(crate) const CONNECT_FAILED: &str = "CONNECT_FAILED";
    pub(crate) const TOOL_ERROR: &str = "TOOL_ERROR";
    pub(crate) const CONNECTION_RESET: &str = "CONNECTION_RESET";
    pub(crate) const RESPONSE_TOO_LARGE: &str = "RESPONSE_TOO_LARGE";
    pub(crate) const TOO_MANY_ITEMS: &str = "TOO_MANY_ITEMS";
    pub(crate) const ITEM_TOO_LARGE: &str = "ITEM_TOO_LARGE";
    pub(crate) const WRONG_CONTRACT: &str = "WRONG_CONTRACT";
    pub(crate) const NO_LOOKUP_CAPABILITY: &str = "NO_LOOKUP_CAPABILITY";
    pub(crate) const MALFORMED: &str = "MALFORMED";
    pub(crate) const DEADLINE: &str = "DEADLINE";
    /// `TIMEOUT`: the budget ran out while waiting for a pooled connection.
    pub(crate) const POOL_EXHAUSTED: &str = "POOL_EXHAUSTED";
    /// `UNAVAILABLE`: the pool was closed (shutdown).
    pub(crate) const POOL_CLOSED: &str = "POOL_CLOSED";
    /// `UNAVAILABLE`: the database failed (busy, locked, file gone, corrupt, I/O error).
    pub(crate) const DATABASE_ERROR: &str = "DATABASE_ERROR";
    /// `NOT_EVALUATED`: a Context Test or Preview has no fixture for the invocation.
    pub(crate) const PROVIDER_FIXTURE_MISSING: &str = "PROVIDER_FIXTURE_MISSING";
    /// `NOT_EVALUATED`: a replay cannot reproduce the recorded answer (its content was
    /// not retained, has expired, or no longer matches its fingerprint).
    pub(crate) const LIVE_DEPENDENCY_UNAVAILABLE: &str = "LIVE_DEPENDENCY_UNAVAILABLE";
    /// `UNAVAILABLE`: a REST API answered 429, or its `Retry-After` has not passed yet.
    pub(crate) const RATE_LIMITED: &str = "RATE_LIMITED";
    /// `INVALID_RESPONSE`: a REST API's 2xx body is not JSON.
    pub(crate) const NOT_JSON: &str = "NOT_JSON";
    /// `INVALID_RESPONSE`: a REST binding's `mapping.items` found no list or object.
    pub(crate) const NO_ITEM_LIST: &str = "NO_ITEM_LIST";
    /// `INVALID_RESPONSE`: an item field does not map (the log names path and index).
    pub(crate) const MAPPING_FAILED: &str = "MAPPING_FAILED";
    /// `INVALID_REQUEST`: the value cannot be a path segment (`.` or `..`).
    pub(crate) const VALUE_NOT_A_PATH_SEGMENT: &str = "VALUE_NOT_A_PATH_SEGMENT";
    /// `INVALID_RESPONSE`: a label the upstream reported (a version, a revision) is over
    /// its bound or not printable on one line.
    pub(crate) const INVALID_LABEL: &str = "INVALID_LABEL";
}

/// Why an invocation gave no usable answer. Each variant is one cause with a fixed
/// status and detail; [`Failure::Stated`] holds a failure known only by the status and
/// detail someone wrote down (a Context Test fixture, a recorded trace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Admission refused the call: the circuit is open. The provider was not contacted.
    CircuitOpen,
    /// Admission refused the call: every concurrency permit is in use.
    Overloaded,
    /// No complete answer by the deadline (the provider's or the turn's).
    Deadline,
    /// The deadline passed while waiting for a pooled connection.
    PoolExhausted,
    /// Nothing answered: connection refused, unreachable, DNS or TLS.
    ConnectFailed,
    /// The connection closed before a complete answer.
    ConnectionReset,
    /// The provider refused the bound credential (401/403).
    Unauthorized,
    /// The provider answered another non-2xx status (`HTTP_503`).
    HttpStatus(u16),
    /// The connection pool was closed (shutdown).
    PoolClosed,
    /// The database failed (busy, locked, file gone, corrupt, I/O error).
    DatabaseError,
    /// The provider answered a redirect, which is never followed.
    RedirectRefused,
    /// The answer (or an item) does not have the contract's shape.
    Malformed,
    /// The answer is larger than the response bound.
    ResponseTooLarge,
    /// More items than the limit.
    TooManyItems,
    /// An item larger than the per-item bound.
    ItemTooLarge,
    /// The answer echoed the bound credential.
    CredentialReflected,
    /// A secret pattern in the answer; the detector's name, never the secret.
    SecretPattern(&'static str),
    /// The answer is of another contract.
    WrongContract,
    /// The provider does not offer `lookup`.
    NoLookupCapability,
    /// The request could not be encoded.
    RequestUnencodable,
    /// The HTTP client refused to build the request.
    RequestNotBuilt,
    /// A Context Test or Preview has no fixture for the invocation.
    FixtureMissing,
    /// A replay cannot reproduce the recorded answer.
    LiveDependencyUnavailable,
    /// The deployment binds no implementation to the provider.
    NotBound,
    /// A REST API answered 429 (`Retry-After` is honoured: see [`Failure::BackingOff`]).
    RateLimited,
    /// A REST API's `Retry-After` has not passed: the provider was not contacted.
    BackingOff,
    /// A REST API refused the request with a 4xx other than 401, 403, 404 and 429.
    RequestRefused(u16),
    /// A REST API's 2xx body is not JSON.
    NotJson,
    /// A REST binding's item list path found no list or object.
    NoItemList,
    /// A REST item field does not map to the item's shape.
    MappingFailed,
    /// The value cannot be a path segment (`.` or `..`): the request was not sent.
    ValueNotAPathSegment,
    /// An MCP server answered the call with an error (`isError`, or a JSON-RPC error).
    ToolError,
    /// A label the upstream reported (a version, a revision) is over its bound or not
    /// printable on one line.
    InvalidLabel,
    /// A failure as a fixture or a trace record states it. The status is never `OK` or
    /// `NOT_FOUND` (see [`Outcome::stated`]).
    Stated {
        status: ProviderStatus,
        detail: Option<String>,
    },
}

impl Failure {
    /// The provider status the failure reports.
    pub(crate) fn status(&self) -> ProviderStatus {
        use ProviderStatus as S;
        match self {
            Failure::CircuitOpen
            | Failure::Overloaded
            | Failure::ConnectFailed
            | Failure::ConnectionReset
            | Failure::Unauthorized
            | Failure::HttpStatus(_)
            | Failure::PoolClosed
            | Failure::DatabaseError
            | Failure::RateLimited
            | Failure::BackingOff
            | Failure::ToolError => S::Unavailable,
            Failure::RequestRefused(_) | Failure::ValueNotAPathSegment => S::InvalidRequest,
            Failure::NotJson
            | Failure::NoItemList
            | Failure::MappingFailed
            | Failure::InvalidLabel => S::InvalidResponse,
            Failure::Deadline | Failure::PoolExhausted => S::Timeout,
            Failure::RedirectRefused | Failure::Malformed => S::InvalidResponse,
            Failure::ResponseTooLarge | Failure::TooManyItems | Failure::ItemTooLarge => {
                S::LimitExceeded
            }
            Failure::CredentialReflected | Failure::SecretPattern(_) => S::SecretDetected,
            Failure::WrongContract | Failure::NoLookupCapability => S::Incompatible,
            Failure::RequestUnencodable | Failure::RequestNotBuilt => S::InvalidRequest,
            Failure::FixtureMissing | Failure::LiveDependencyUnavailable => S::NotEvaluated,
            Failure::NotBound => S::NotBound,
            Failure::Stated { status, .. } => *status,
        }
    }

    /// The detail code the API, traces and metrics report beside the status.
    pub(crate) fn detail(&self) -> Option<&str> {
        Some(match self {
            Failure::CircuitOpen => detail::CIRCUIT_OPEN,
            Failure::Overloaded => detail::OVERLOADED,
            Failure::Deadline => detail::DEADLINE,
            Failure::PoolExhausted => detail::POOL_EXHAUSTED,
            Failure::ConnectFailed => detail::CONNECT_FAILED,
            Failure::ConnectionReset => detail::CONNECTION_RESET,
            Failure::Unauthorized => detail::UNAUTHORIZED,
            Failure::HttpStatus(code) => http_code_detail(*code),
            Failure::PoolClosed => detail::POOL_CLOSED,
            Failure::DatabaseError => detail::DATABASE_ERROR,
            Failure::ToolError => detail::TOOL_ERROR,
            Failure::RedirectRefused => detail::REDIRECT_REFUSED,
            Failure::Malformed | Failure::RequestUnencodable => detail::MALFORMED,
            Failure::ResponseTooLarge => detail::RESPONSE_TOO_LARGE,
            Failure::TooManyItems => detail::TOO_MANY_ITEMS,
            Failure::ItemTooLarge => detail::ITEM_TOO_LARGE,
            Failure::CredentialReflected => detail::CREDENTIAL_REFLECTED,
            Failure::SecretPattern(detector) => detector,
            Failure::WrongContract => detail::WRONG_CONTRACT,
            Failure::NoLookupCapability => detail::NO_LOOKUP_CAPABILITY,
            Failure::RequestNotBuilt | Failure::NotBound => return None,
            Failure::FixtureMissing => detail::PROVIDER_FIXTURE_MISSING,
            Failure::LiveDependencyUnavailable => detail::LIVE_DEPENDENCY_UNAVAILABLE,
            Failure::RateLimited | Failure::BackingOff => detail::RATE_LIMITED,
            Failure::RequestRefused(code) => http_code_detail(*code),
            Failure::NotJson => detail::NOT_JSON,
            Failure::NoItemList => detail::NO_ITEM_LIST,
            Failure::MappingFailed => detail::MAPPING_FAILED,
            Failure::InvalidLabel => detail::INVALID_LABEL,
            Failure::ValueNotAPathSegment => detail::VALUE_NOT_A_PATH_SEGMENT,
            Failure::Stated { detail, .. } => return detail.as_deref(),
        })
    }

    /// Whether the failure says the provider itself is failing — a timeout or an
    /// unavailable provider — and so counts toward opening its circuit. A refusal by
    /// admission never does: the provider was not contacted.
    pub(crate) fn counts_toward_breaker(&self) -> bool {
        !self.is_refused_by_admission()
            && matches!(
                self.status(),
                ProviderStatus::Timeout | ProviderStatus::Unavailable
            )
    }

    /// Whether ctxd's own admission (circuit, permits, a REST API's pending
    /// `Retry-After`) refused the call: the provider was not contacted.
    pub(crate) fn is_refused_by_admission(&self) -> bool {
        matches!(
            self,
            Failure::CircuitOpen | Failure::Overloaded | Failure::BackingOff
        )
    }

    /// Whether the provider was contacted and answered something: an answer that was
    /// refused (bounds, secrets, contract) still shows the provider is up.
    pub(crate) fn provider_answered(&self) -> bool {
        matches!(
            self.status(),
            ProviderStatus::LimitExceeded
                | ProviderStatus::InvalidResponse
                | ProviderStatus::SecretDetected
                | ProviderStatus::Incompatible
        )
    }
}

impl From<&BoundsViolation> for Failure {
    /// The failure a violation gives the invocation: which limit, or the secret
    /// detector's name (never the secret).
    fn from(violation: &BoundsViolation) -> Failure {
        match violation {
            BoundsViolation::TooManyItems { .. } => Failure::TooManyItems,
            BoundsViolation::ItemTooLarge { .. } | BoundsViolation::ItemOverLimit { .. } => {
                Failure::ItemTooLarge
            }
            BoundsViolation::AnswerTooLarge { .. } | BoundsViolation::TooManyValues { .. } => {
                Failure::ResponseTooLarge
            }
            BoundsViolation::InvalidItem { .. } => Failure::Malformed,
            BoundsViolation::SecretDetected { detector, .. } => Failure::SecretPattern(detector),
        }
    }
}

impl std::fmt::Display for Failure {
    /// `STATUS (DETAIL)`, or the status alone.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.detail() {
            Some(detail) => write!(f, "{} ({detail})", self.status()),
            None => write!(f, "{}", self.status()),
        }
    }
}

/// `HTTP_100` … `HTTP_999`, built at compile time so details stay `&'static str`.
static HTTP_CODE_DETAILS: [[u8; 8]; 900] = {
    let mut table = [*b"HTTP_000"; 900];
    let mut index = 0;
    while index < 900 {
        let code = index + 100;
        table[index][5] = b'0' + (code / 100) as u8;
        table[index][6] = b'0' + (code / 10 % 10) as u8;
        table[index][7] = b'0' + (code % 10) as u8;
        index += 1;
    }
    table
};

fn http_code_detail(code: u16) -> &'static str {
    usize::from(code)
        .checked_sub(100)
        .and_then(|index| HTTP_CODE_DETAILS.get(index))
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .unwrap_or(detail::MALFORMED)
}

/// The answer part of an outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// `OK`: the items. Provider answers always hold at least one ([`Outcome::answered`]);
    /// only a record from before that rule can state an `OK` without items.
    Items {
        items: Vec<Item>,
        currentness: Currentness,
    },
    /// `NOT_FOUND`: the provider has no record for the value (HTTP 404, zero items,
    /// zero rows, a fixture with `"items": []`).
    NotFound,
    Failed(Failure),
}

/// What one provider invocation produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub(crate) answer: Answer,
    /// The data version the answer reports.
    pub version: Option<String>,
    /// The upstream revision the answer reports.
    pub revision: Option<String>,
    pub source: Source,
    /// Secrets replaced in the items under `secrets = "redact"`, by kind: the answer is
    /// kept, and the turn's answer and trace say what was taken out of it.
    pub(crate) redactions: RedactionCounts,
    /// Items past the layer's limit that the provider left out (a REST API does not
    /// know the limit): recorded, not a failure.
    pub items_dropped: u32,
}

impl Outcome {
    /// What a provider answered with a list of items, whatever its type (HTTP, SQLite, a
    /// Context Test fixture): `OK` with the items, or — for an empty list — `NOT_FOUND`.
    /// The one place that says what "no record" is: the provider has no record for the
    /// value, whether it answered 404, zero items or zero rows.
    pub fn answered(items: Vec<Item>, currentness: Currentness, source: Source) -> Self {
        if items.is_empty() {
            Outcome::not_found(source)
        } else {
            Outcome::items(items, currentness, source)
        }
    }

    /// `OK` with exactly these items, as a record states them: a replay rebuilds a
    /// recorded `OK` (an empty one from before "no record" became `NOT_FOUND` included).
    /// Provider answers go through [`Outcome::answered`].
    pub fn items(items: Vec<Item>, currentness: Currentness, source: Source) -> Self {
        Outcome::of(Answer::Items { items, currentness }, source)
    }

    /// `NOT_FOUND`: the provider has no record for the value.
    pub fn not_found(source: Source) -> Self {
        Outcome::of(Answer::NotFound, source)
    }

    pub fn failed(failure: Failure, source: Source) -> Self {
        Outcome::of(Answer::Failed(failure), source)
    }

    /// An answer without items as a fixture or a trace record states it: `OK` (no
    /// items, currentness unknown), `NOT_FOUND`, or a failure with its detail.
    pub(crate) fn stated(status: ProviderStatus, detail: Option<String>, source: Source) -> Self {
        let answer = match status {
            ProviderStatus::Ok => Answer::Items {
                items: Vec::new(),
                currentness: Currentness::Unknown,
            },
            ProviderStatus::NotFound => Answer::NotFound,
            status => Answer::Failed(Failure::Stated { status, detail }),
        };
        Outcome::of(answer, source)
    }

    fn of(answer: Answer, source: Source) -> Self {
        Outcome {
            answer,
            version: None,
            revision: None,
            source,
            redactions: RedactionCounts::new(),
            items_dropped: 0,
        }
    }

    /// The outcome with the count of items left out past the limit.
    pub(crate) fn with_items_dropped(mut self, dropped: u32) -> Self {
        self.items_dropped = dropped;
        self
    }

    /// The outcome with the counts of the secrets its items had redacted.
    pub(crate) fn with_redactions(mut self, redactions: RedactionCounts) -> Self {
        self.redactions = redactions;
        self
    }

    pub fn status(&self) -> ProviderStatus {
        match &self.answer {
            Answer::Items { .. } => ProviderStatus::Ok,
            Answer::NotFound => ProviderStatus::NotFound,
            Answer::Failed(failure) => failure.status(),
        }
    }

    pub fn detail(&self) -> Option<&str> {
        self.failure().and_then(Failure::detail)
    }

    pub(crate) fn failure(&self) -> Option<&Failure> {
        match &self.answer {
            Answer::Failed(failure) => Some(failure),
            _ => None,
        }
    }

    /// The items of an `OK` answer; none otherwise.
    pub fn items_found(&self) -> &[Item] {
        match &self.answer {
            Answer::Items { items, .. } => items,
            _ => &[],
        }
    }

    /// The currentness a usable answer reports: the provider's for `OK`, `UNKNOWN` for
    /// `NOT_FOUND`; `None` for a failure.
    pub fn currentness(&self) -> Option<Currentness> {
        match &self.answer {
            Answer::Items { currentness, .. } => Some(*currentness),
            Answer::NotFound => Some(Currentness::Unknown),
            Answer::Failed(_) => None,
        }
    }

    /// `OK` with at least one item.
    pub fn found_anything(&self) -> bool {
        !self.items_found().is_empty()
    }

    /// A usable answer: items or a definite "no record".
    pub(crate) fn is_success(&self) -> bool {
        !matches!(self.answer, Answer::Failed(_))
    }
}

/// When and how an invocation was answered, beside its outcome: what the answer and
/// the trace report of the call itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFacts {
    /// Where the reported version came from (`None` when there is none).
    pub version_source: Option<VersionSource>,
    /// How long the call took; `None` when it is not timed (Context Tests and Preview,
    /// whose output must not vary from run to run).
    pub duration: Option<Duration>,
    /// When the provider gave the answer: for an answer from the response cache, when it
    /// was fetched, not when the turn got it.
    pub(crate) observed_at: SystemTime,
    /// How old the answer was when the turn got it; set only for an answer from the
    /// response cache (source `CACHE`).
    pub age: Option<Duration>,
}

impl CallFacts {
    /// Facts of an answer that was not timed: Context Tests, Preview, replays.
    pub fn untimed(outcome: &Outcome) -> CallFacts {
        CallFacts {
            version_source: outcome.version.is_some().then_some(VersionSource::Response),
            duration: None,
            observed_at: SystemTime::now(),
            age: None,
        }
    }
}

/// One invocation of a turn's plan, answered: the invocation, its outcome, the call's
/// facts, and the fingerprint of every item (computed once, for rendering and trace).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub(crate) invocation: Invocation,
    pub(crate) outcome: Outcome,
    pub facts: CallFacts,
    /// SHA-256 of each item's canonical JSON, in answer order.
    pub(crate) fingerprints: Vec<String>,
}

impl Call {
    pub fn new(invocation: Invocation, outcome: Outcome, facts: CallFacts) -> Call {
        let fingerprints = outcome.items_found().iter().map(item_fingerprint).collect();
        Call {
            invocation,
            outcome,
            facts,
            fingerprints,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_reports_a_failure_status() {
        let failures = [
            Failure::CircuitOpen,
            Failure::Overloaded,
            Failure::Deadline,
            Failure::PoolExhausted,
            Failure::ConnectFailed,
            Failure::ConnectionReset,
            Failure::Unauthorized,
            Failure::HttpStatus(503),
            Failure::PoolClosed,
            Failure::DatabaseError,
            Failure::RedirectRefused,
            Failure::Malformed,
            Failure::ResponseTooLarge,
            Failure::TooManyItems,
            Failure::ItemTooLarge,
            Failure::CredentialReflected,
            Failure::SecretPattern("github_token"),
            Failure::WrongContract,
            Failure::NoLookupCapability,
            Failure::RequestUnencodable,
            Failure::RequestNotBuilt,
            Failure::FixtureMissing,
            Failure::LiveDependencyUnavailable,
            Failure::NotBound,
        ];
        for failure in failures {
            assert!(!failure.status().is_success(), "{failure:?}");
            let outcome = Outcome::failed(failure.clone(), Source::Live);
            assert!(outcome.items_found().is_empty());
            assert_eq!(outcome.currentness(), None);
        }
    }

    #[test]
    fn only_provider_failures_count_toward_the_breaker() {
        let counted: Vec<bool> = [
            Failure::Deadline,
            Failure::HttpStatus(502),
            Failure::CircuitOpen,
            Failure::Overloaded,
            Failure::Malformed,
            Failure::FixtureMissing,
        ]
        .iter()
        .map(Failure::counts_toward_breaker)
        .collect();
        assert_eq!(counted, [true, true, false, false, false, false]);
        assert!(Failure::SecretPattern("x").provider_answered());
        assert!(!Failure::CircuitOpen.provider_answered());
    }

    #[test]
    fn details_spell_the_codes() {
        assert_eq!(Failure::HttpStatus(503).detail(), Some("HTTP_503"));
        assert_eq!(Failure::HttpStatus(100).detail(), Some("HTTP_100"));
        assert_eq!(Failure::HttpStatus(999).detail(), Some("HTTP_999"));
        assert_eq!(Failure::HttpStatus(42).detail(), Some(detail::MALFORMED));
        assert_eq!(Failure::RequestNotBuilt.detail(), None);
        assert_eq!(Failure::Deadline.to_string(), "TIMEOUT (DEADLINE)");
    }

    #[test]
    fn an_answer_without_items_is_not_found() {
        let item = Item {
            id: "R-1".to_owned(),
            title: None,
            content: "x".to_owned(),
            metadata: serde_json::Map::new(),
            updated_at: None,
        };
        for source in [Source::Live, Source::TestFixture] {
            let none = Outcome::answered(Vec::new(), Currentness::Current, source);
            assert_eq!(none.status(), ProviderStatus::NotFound);
            assert_eq!(none.source, source);
            assert!(none.is_success());
            assert!(!none.found_anything());
            assert_eq!(none.currentness(), Some(Currentness::Unknown));
            let some = Outcome::answered(vec![item.clone()], Currentness::Stale, source);
            assert_eq!(some.status(), ProviderStatus::Ok);
            assert_eq!(some.currentness(), Some(Currentness::Stale));
            assert_eq!(some.items_found(), std::slice::from_ref(&item));
        }
        // A record is rebuilt as it was stated.
        let recorded = Outcome::items(Vec::new(), Currentness::Current, Source::Live);
        assert_eq!(recorded.status(), ProviderStatus::Ok);
    }

    #[test]
    fn stated_answers_keep_their_status_and_detail() {
        let ok = Outcome::stated(ProviderStatus::Ok, None, Source::TestFixture);
        assert_eq!(ok.status(), ProviderStatus::Ok);
        assert_eq!(ok.currentness(), Some(Currentness::Unknown));
        let missing = Outcome::stated(ProviderStatus::NotFound, None, Source::TestFixture);
        assert_eq!(missing.status(), ProviderStatus::NotFound);
        let down = Outcome::stated(
            ProviderStatus::Timeout,
            Some("slow".into()),
            Source::TestFixture,
        );
        assert_eq!(down.status(), ProviderStatus::Timeout);
        assert_eq!(down.detail(), Some("slow"));
        assert!(!down.is_success());
    }
}
