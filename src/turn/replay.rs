//! Reproduction (SPEC §4): replays a recorded turn from its trace alone — no provider is
//! contacted. The caller proves it holds the turn's original inputs (each one is checked
//! against its recorded keyed digest), the Build the turn ran is planned again with
//! them, and each invocation's outcome is rebuilt from its provider record:
//!
//! Inputs: the turn record holds only the inputs the Project declares (see
//! `turn::capture`). A replay request must carry each of them; an extra key the Build
//! declares is refused (the turn did not carry it, so it would plan another turn), and
//! an extra key the Build does not declare is ignored, as the turn ignored it — so a
//! caller may replay with the very inputs of its original request.
//!
//! - a recorded failure, `NOT_FOUND` or an `OK` without items carries no content and
//!   replays exactly: same status, same detail;
//! - an `OK` with items replays exactly only from retained content, every item present
//!   and digesting to its recorded fingerprint, in the recorded order;
//! - anything else reports `LIVE_DEPENDENCY_UNAVAILABLE`: the kernel sees the provider
//!   as `NOT_EVALUATED`, so a replay never invents facts it no longer has.
//!
//! The kernel then assembles the turn with the recorded budget and fence nonce, so an
//! exact replay renders byte-identical text and its rendered digest matches the record.
//!
//! Errors name input keys, providers and digests — never an input value.

use super::capture::declares_input;
use super::{Ask, OutcomeSource, UnknownProfile, plan};
use crate::contract::{Item, LayerReason, LayerStatus, ProviderStatus};
use crate::digest::DigestKey;
use crate::digest::canonical_digest;
use crate::gate::{Invocation, Plan, ProviderDecision};
use crate::kernel::{self, Rendering};
use crate::outcome::{CallFacts, Failure, Outcome, detail::LIVE_DEPENDENCY_UNAVAILABLE};
use crate::project::Project;
use crate::trace::record::{ProviderRecord, StoredTurn, TurnRecord};
use crate::trace::store::{StoreError, TraceReader};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Hands back, for an item that did not fit, the handle the original turn kept it
/// behind (matched by its keyed locator). No handle is registered by a replay.
struct RecordedHandles<'a> {
    turn: &'a TurnRecord,
    key: &'a DigestKey,
}

impl kernel::HandleSink for RecordedHandles<'_> {
    fn offer(
        &mut self,
        layer: &str,
        provider: &str,
        item: &Item,
    ) -> Option<crate::contract::HandleRef> {
        let locator = self.key.locator(provider, &item.id);
        self.turn
            .selections
            .iter()
            .find(|s| s.layer == layer && s.locator.as_deref() == Some(locator.as_str()))
            .and_then(|s| s.handle.clone())
    }
}

/// How one provider of the turn was replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum ProviderReplay {
    /// The recorded answer was reproduced: a failure, no content, or verified content.
    Exact,
    /// The answer had content that the trace store cannot give back verified.
    LiveDependencyUnavailable,
    /// Gating decided the provider's status without invoking it (`NOT_BOUND`,
    /// `INVALID_REQUEST`, `NOT_EVALUATED` of a blocked turn): nothing to reproduce.
    NotInvoked,
}

impl ProviderReplay {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProviderReplay::Exact => "EXACT",
            ProviderReplay::LiveDependencyUnavailable => LIVE_DEPENDENCY_UNAVAILABLE,
            ProviderReplay::NotInvoked => "NOT_INVOKED",
        }
    }
}

/// What a replay reproduced, beside what the turn originally recorded.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplayResult {
    pub(crate) turn_id: String,
    /// Every invoked provider replayed `EXACT`.
    pub(crate) exact: bool,
    /// The replayed rendered digest equals the recorded one (both absent for a turn
    /// that was blocked and replays blocked).
    pub(crate) rendered_digest_matches: bool,
    pub(crate) rendered_digest: Option<String>,
    pub(crate) original_rendered_digest: Option<String>,
    pub(crate) blocked: bool,
    pub(crate) original_blocked: bool,
    pub(crate) layers: Vec<ReplayedLayer>,
    pub(crate) providers: Vec<ReplayedProvider>,
    /// The replayed text; `None` when the replay is blocked.
    pub(crate) rendered: Option<String>,
}

impl ReplayResult {
    /// The replay reproduced the turn: every provider exact and the same rendered digest.
    pub(crate) fn reproduced(&self) -> bool {
        self.exact && self.rendered_digest_matches
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplayedLayer {
    pub(crate) id: String,
    pub(crate) status: LayerStatus,
    pub(crate) reason: LayerReason,
    /// `None` when the turn record has no decision for this layer.
    pub(crate) original_status: Option<LayerStatus>,
    pub(crate) original_reason: Option<LayerReason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplayedProvider {
    pub(crate) id: String,
    pub(crate) replay: ProviderReplay,
    /// The replayed status: the recorded one, or `NOT_EVALUATED` with detail
    /// `LIVE_DEPENDENCY_UNAVAILABLE`.
    pub(crate) status: ProviderStatus,
    pub(crate) detail: Option<String>,
    /// The status the turn recorded; `None` when it recorded none for this provider.
    pub(crate) original_status: Option<ProviderStatus>,
}

/// Why a turn cannot be replayed. Messages name keys, providers and digests, never an
/// input value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("unknown turn {0}")]
    UnknownTurn(String),
    #[error("input {0} is missing: a replay needs every input of the recorded turn")]
    MissingInput(String),
    #[error("input {0} was not part of the recorded turn")]
    UnexpectedInput(String),
    /// Also what a replay under another digest key than the turn's reports: the key is
    /// part of every recorded digest.
    #[error("input {0} does not match the recorded turn")]
    InputMismatch(String),
    #[error("the build {0} of the turn is not in the trace store")]
    BuildUnavailable(String),
    #[error("the recorded build does not load or does not match the turn's build digest")]
    BuildMismatch,
    /// The verified inputs and build plan a request other than the recorded one: the
    /// record was altered, or written under another digest key.
    #[error("provider {0}: the replayed request does not match the recorded request digest")]
    RequestMismatch(String),
    /// The replayed plan and the provider records disagree on whether or how a provider
    /// was reached: the records do not belong to this build and these inputs.
    #[error("provider {provider}: {problem}")]
    RecordMismatch { provider: String, problem: String },
    /// The store could not be read; its error, as text, so the error stays `Clone` and
    /// crosses threads and API layers unchanged.
    #[error("trace store: {0}")]
    Store(String),
}

impl From<StoreError> for ReplayError {
    fn from(error: StoreError) -> Self {
        ReplayError::Store(error.to_string())
    }
}

/// Checks the given inputs against the turn's keyed input digests: every recorded key
/// given, each with the same value. Keys the turn did not record are for
/// [`recorded_inputs`] to judge, once the Build is known.
pub(crate) fn verify_inputs(
    turn: &TurnRecord,
    inputs: &BTreeMap<String, String>,
    key: &DigestKey,
) -> Result<(), ReplayError> {
    if let Some(missing) = turn.inputs.iter().find(|r| !inputs.contains_key(&r.key)) {
        return Err(ReplayError::MissingInput(missing.key.clone()));
    }
    for recorded in &turn.inputs {
        let given = key.input_digest(&recorded.key, &inputs[&recorded.key]);
        if !same_digest(&given, &recorded.digest) {
            return Err(ReplayError::InputMismatch(recorded.key.clone()));
        }
    }
    Ok(())
}

/// The inputs a replay plans with: the recorded ones. A given key the turn did not record
/// is refused when the Build declares it — the turn did not carry it — and left out
/// otherwise: the turn carried it or not, no layer used it.
fn recorded_inputs(
    project: &Project,
    turn: &TurnRecord,
    inputs: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ReplayError> {
    let is_recorded = |key: &str| turn.inputs.iter().any(|r| r.key == key);
    if let Some(extra) = inputs
        .keys()
        .find(|k| !is_recorded(k) && declares_input(project, k))
    {
        return Err(ReplayError::UnexpectedInput(extra.clone()));
    }
    Ok(inputs
        .iter()
        .filter(|(k, _)| is_recorded(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

/// A recorded turn as the source of its own outcomes: each invocation is answered from
/// its provider record, after checking that the replayed request is the recorded one.
struct RecordedTurn<'a> {
    stored: &'a StoredTurn,
    key: &'a DigestKey,
    retained: &'a HashMap<String, Item>,
}

impl RecordedTurn<'_> {
    fn record_of(&self, provider: &str) -> Option<&ProviderRecord> {
        self.stored
            .providers
            .iter()
            .find(|r| r.provider == provider)
    }
}

impl OutcomeSource for RecordedTurn<'_> {
    type Error = ReplayError;

    /// The binding as the turn saw it: a provider is bound unless it recorded
    /// `NOT_BOUND`. One the turn never recorded counts as bound, so a plan that invokes
    /// it is caught instead of silently rendering "not bound".
    fn is_bound(&self, provider: &str) -> bool {
        self.record_of(provider)
            .is_none_or(|r| r.status != ProviderStatus::NotBound)
    }

    async fn answer(&self, invocation: &Invocation) -> Result<(Outcome, CallFacts), ReplayError> {
        let provider = &invocation.provider_id;
        let record = self
            .record_of(provider)
            .ok_or_else(|| ReplayError::RecordMismatch {
                provider: provider.clone(),
                problem: "the replay invokes it but the turn has no record of it".to_owned(),
            })?;
        let request_digest = self
            .key
            .request_digest(provider, &invocation.key, &invocation.value);
        if !same_digest(&request_digest, &record.request_digest) {
            return Err(ReplayError::RequestMismatch(provider.clone()));
        }
        let outcome = replay_outcome(record, self.retained, &self.stored.turn)?;
        let facts = CallFacts {
            version_source: record.version_source,
            duration: record.duration_ms.map(Duration::from_millis),
            observed_at: std::time::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(record.observed_at_ms).unwrap_or(0)),
            age: record.age_ms.map(Duration::from_millis),
        };
        Ok((outcome, facts))
    }
}

/// Replays a recorded turn from the record alone: no provider is contacted.
///
/// `project` is the Build the turn ran; `retained` maps fingerprints to the content the
/// store kept for this turn's tenant.
pub(crate) fn replay(
    stored: &StoredTurn,
    project: &Project,
    inputs: &BTreeMap<String, String>,
    key: &DigestKey,
    retained: &HashMap<String, Item>,
) -> Result<ReplayResult, ReplayError> {
    let turn = &stored.turn;
    verify_inputs(turn, inputs, key)?;
    if project.digest != turn.build_digest {
        return Err(ReplayError::BuildMismatch);
    }
    let inputs = &recorded_inputs(project, turn, inputs)?;
    let source = RecordedTurn {
        stored,
        key,
        retained,
    };
    let ask = Ask {
        profile: Some(&turn.profile),
        objective: turn.objective.as_deref(),
        consumer: turn.consumer.as_deref(),
        inputs,
    };
    let planned =
        plan(project, &ask, &source).map_err(|UnknownProfile(_)| ReplayError::BuildMismatch)?;
    check_plan(project, planned.plan(), stored)?;
    let called = planned.call_now(&source)?;
    // Items kept behind handles get the handles the turn recorded, so the replayed
    // references — and the rendered digest — are the original ones; the recorded budget
    // and nonce make an exact replay render byte-identical text.
    let answered = called.assemble(Rendering {
        max_bytes: turn.budget_max_bytes,
        nonce: &turn.nonce,
        handles: &mut RecordedHandles { turn, key },
        locators: None,
    });
    let result = &answered.result;
    let providers = result
        .providers
        .iter()
        .map(|p| {
            let call = project
                .provider_index(&p.id)
                .and_then(|index| answered.called.call_of(index));
            let replay = match call.and_then(|call| call.outcome.failure()) {
                None if call.is_none() => ProviderReplay::NotInvoked,
                Some(Failure::LiveDependencyUnavailable) => {
                    ProviderReplay::LiveDependencyUnavailable
                }
                _ => ProviderReplay::Exact,
            };
            ReplayedProvider {
                id: p.id.clone(),
                replay,
                status: p.status,
                detail: p.detail.clone(),
                original_status: source.record_of(&p.id).map(|r| r.status),
            }
        })
        .collect::<Vec<_>>();
    let layers = result
        .layers
        .iter()
        .map(|l| {
            let original = turn.layers.iter().find(|o| o.id == l.id);
            ReplayedLayer {
                id: l.id.clone(),
                status: l.status,
                reason: l.reason,
                original_status: original.map(|o| o.status),
                original_reason: original.map(|o| o.reason),
            }
        })
        .collect();
    let exact = providers
        .iter()
        .all(|p| p.replay != ProviderReplay::LiveDependencyUnavailable);
    let result = answered.result;
    Ok(ReplayResult {
        turn_id: turn.turn_id.clone(),
        exact,
        rendered_digest_matches: result.rendered_digest == turn.rendered_digest,
        rendered_digest: result.rendered_digest,
        original_rendered_digest: turn.rendered_digest.clone(),
        blocked: result.blocked,
        original_blocked: turn.blocked,
        layers,
        providers,
        rendered: result.rendered,
    })
}

/// Loads the turn (tenant-scoped), its Build and the retained items it needs from the
/// store, then calls [`replay`].
pub(crate) fn replay_from_store(
    reader: &TraceReader,
    tenant: Option<&str>,
    turn_id: &str,
    inputs: &BTreeMap<String, String>,
    key: &DigestKey,
) -> Result<ReplayResult, ReplayError> {
    let stored = reader
        .turn(tenant, turn_id)?
        .ok_or_else(|| ReplayError::UnknownTurn(turn_id.to_owned()))?;
    // The caller proves it holds the inputs before anything else of the turn — the
    // retained content above all — is read and decrypted.
    verify_inputs(&stored.turn, inputs, key)?;
    let digest = &stored.turn.build_digest;
    let build = reader
        .build(digest)?
        .ok_or_else(|| ReplayError::BuildUnavailable(digest.clone()))?;
    let project = Project::from_json(&build).map_err(|_| ReplayError::BuildMismatch)?;
    let mut fingerprints: Vec<&str> = stored
        .providers
        .iter()
        .filter(|r| r.status == ProviderStatus::Ok && r.retention.content_retained)
        .flat_map(|r| r.items.iter().map(|i| i.fingerprint.as_str()))
        .collect();
    fingerprints.sort_unstable();
    fingerprints.dedup();
    let retained = if fingerprints.is_empty() {
        HashMap::new()
    } else {
        reader.retained(&stored.turn.tenant, &fingerprints)?
    };
    replay(&stored, &project, inputs, key, &retained)
}

/// The replayed plan must reach providers exactly as the records say the turn did.
fn check_plan(project: &Project, plan: &Plan, stored: &StoredTurn) -> Result<(), ReplayError> {
    let mismatch = |provider: &str, problem: String| ReplayError::RecordMismatch {
        provider: provider.to_owned(),
        problem,
    };
    for record in &stored.providers {
        let decision = project
            .provider_index(&record.provider)
            .map(|p| plan.decisions.providers[p]);
        match decision {
            None => {
                return Err(mismatch(
                    &record.provider,
                    "the turn recorded it but the build has no such provider".to_owned(),
                ));
            }
            Some(ProviderDecision::Invoke(_)) if !record.invoked => {
                return Err(mismatch(
                    &record.provider,
                    format!(
                        "the replay invokes it but the turn recorded {} without invoking it",
                        record.status
                    ),
                ));
            }
            Some(ProviderDecision::NotNeeded) if record.invoked => {
                return Err(mismatch(
                    &record.provider,
                    "the turn invoked it but the replay does not reach it".to_owned(),
                ));
            }
            Some(decision) => {
                if let Some(status) = decision.final_status()
                    && (record.invoked || record.status != status)
                {
                    return Err(mismatch(
                        &record.provider,
                        format!(
                            "the replay decides {status} but the turn recorded {}",
                            record.status
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The outcome one provider record replays as: the recorded answer, or — for items
/// that cannot be given back verified — `NOT_EVALUATED` (`LIVE_DEPENDENCY_UNAVAILABLE`).
fn replay_outcome(
    record: &ProviderRecord,
    retained: &HashMap<String, Item>,
    turn: &TurnRecord,
) -> Result<Outcome, ReplayError> {
    let source = record.source.unwrap_or(turn.mode);
    let mut outcome = match record.status {
        ProviderStatus::Timeout
        | ProviderStatus::Unavailable
        | ProviderStatus::LimitExceeded
        | ProviderStatus::InvalidResponse
        | ProviderStatus::SecretDetected
        | ProviderStatus::Incompatible
        | ProviderStatus::NotEvaluated
        | ProviderStatus::NotFound => Outcome::stated(record.status, record.detail.clone(), source),
        // An invoked provider's own refusal of the request (a REST API's 4xx).
        ProviderStatus::InvalidRequest if record.invoked => {
            Outcome::stated(record.status, record.detail.clone(), source)
        }
        ProviderStatus::Ok => match retained_items(record, retained) {
            Some(items) => Outcome::items(items, record.currentness.unwrap_or_default(), source),
            None => return Ok(Outcome::failed(Failure::LiveDependencyUnavailable, source)),
        },
        // Gating decides these before any invocation; `check_plan` already refused a
        // record that says the turn invoked such a provider.
        ProviderStatus::NotBound | ProviderStatus::InvalidRequest => {
            return Err(ReplayError::RecordMismatch {
                provider: record.provider.clone(),
                problem: format!(
                    "the replay invokes it but the turn recorded {}",
                    record.status
                ),
            });
        }
    };
    outcome.version = record.version.clone();
    outcome.revision = record.upstream_revision.clone();
    Ok(outcome
        .with_redactions(record.redactions.clone())
        .with_items_dropped(record.items_dropped))
}

/// The items of an `OK` answer in their recorded order, or `None` when they cannot be
/// reproduced: not retained, one missing (expired), or one not digesting to its
/// recorded fingerprint.
fn retained_items(record: &ProviderRecord, retained: &HashMap<String, Item>) -> Option<Vec<Item>> {
    if record.item_count == 0 && record.items.is_empty() {
        // An empty answer has no content to lose.
        return Some(Vec::new());
    }
    if !record.retention.content_retained || record.items.len() != record.item_count {
        return None;
    }
    record
        .items
        .iter()
        .map(|recorded| {
            // The store verified it on read; a replay that claims EXACT checks again.
            retained
                .get(&recorded.fingerprint)
                .filter(|item| canonical_digest(item) == recorded.fingerprint)
                .cloned()
        })
        .collect()
}

/// Equality of two digests in time independent of where they differ.
fn same_digest(a: &str, b: &str) -> bool {
    // `subtle` compares lengths first (not secret: every digest has the same length),
    // then every byte without an early exit.
    bool::from(subtle::ConstantTimeEq::ct_eq(a.as_bytes(), b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Retention;
    use crate::contract::{Currentness, Source, TurnResult};
    use crate::kernel::NoHandles;
    use crate::outcome::Answer;
    use crate::trace::record::TurnTrace;
    use crate::trace::store::TraceStore;
    use crate::turn::{Immediate, ProviderTraceSettings, TurnFacts};
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::{Duration, SystemTime};

    const CUSTOMER: &str = "CUST-1042";
    const REGION: &str = "eu-west-7";
    const CRM: &str = "customer-data";
    const ORDERS: &str = "orders";

    /// A required layer on `customer-data`, an optional billing-only layer on `orders`.
    fn project() -> Project {
        let doc = json!({
            "id": "support", "version": "1.4.0",
            "budget": {"maxBytes": 12000},
            "providers": [
                {"id": CRM, "name": "Customer data",
                 "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 3},
                {"id": ORDERS, "name": "Orders", "lookup": {"input": "customerId"}}
            ],
            "layers": [
                {"id": "policy", "name": "Support policy", "content": "Refunds over 500 EUR need approval."},
                {"id": "customer-profile", "name": "Customer profile",
                 "bindings": [{"provider": CRM}], "required": true,
                 "requiresInput": ["customerId", "region"], "currentness": "required"},
                {"id": "orders", "name": "Recent orders", "bindings": [{"provider": ORDERS}],
                 "scope": {"objectives": ["billing"]}}
            ],
            "profiles": [{"id": "default"}, {"id": "lite", "exclude": ["orders"]}]
        });
        Project::from_json(&doc.to_string()).expect("test project is valid")
    }

    fn key() -> DigestKey {
        DigestKey::from_bytes(vec![7u8; 32]).unwrap()
    }

    fn item(id: &str, content: &str) -> Item {
        Item {
            id: id.to_owned(),
            title: Some(format!("Record {id}")),
            content: content.to_owned(),
            metadata: [("plan".to_owned(), json!("Enterprise"))]
                .into_iter()
                .collect(),
            updated_at: Some("2026-10-08".to_owned()),
        }
    }

    fn ok(items: Vec<Item>) -> Outcome {
        let mut outcome = Outcome::items(items, Currentness::Current, Source::Live);
        outcome.version = Some("5.0.1".to_owned());
        outcome.revision = Some("crm-r9".to_owned());
        outcome
    }

    fn failed(status: ProviderStatus, detail: Option<&str>) -> Outcome {
        Outcome::stated(status, detail.map(str::to_owned), Source::Live)
    }

    fn inputs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn original_inputs() -> BTreeMap<String, String> {
        inputs(&[("customerId", CUSTOMER), ("region", REGION)])
    }

    /// A turn answered and recorded the way the coordinator does it: plan, outcomes,
    /// assemble with a fresh random nonce, capture.
    struct Recorded {
        /// Everything the turn writes, its Build included.
        trace: TurnTrace,
        stored: StoredTurn,
        retained: HashMap<String, Item>,
        result: TurnResult,
    }

    struct TurnSpec<'a> {
        profile: &'a str,
        inputs: BTreeMap<String, String>,
        unbound: &'a [&'a str],
        max_bytes: usize,
        retention: Retention,
    }

    impl Default for TurnSpec<'_> {
        fn default() -> Self {
            TurnSpec {
                profile: "default",
                inputs: original_inputs(),
                unbound: &[],
                max_bytes: 12000,
                retention: Retention::Content,
            }
        }
    }

    fn record_turn(
        project: &Project,
        spec: &TurnSpec<'_>,
        answer: &dyn Fn(&Invocation) -> Outcome,
        key: &DigestKey,
    ) -> Recorded {
        let ask = Ask {
            profile: Some(spec.profile),
            objective: Some("billing"),
            consumer: Some("support-agent"),
            inputs: &spec.inputs,
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_500_000);
        let source =
            Immediate::new(|id: &str| !spec.unbound.contains(&id), answer).observed_at(now);
        let mut called = plan(project, &ask, &source)
            .unwrap()
            .call_now(&source)
            .unwrap();
        for call in &mut called.calls {
            call.facts.duration = Some(Duration::from_millis(4));
        }
        let answered = called.assemble(Rendering {
            max_bytes: spec.max_bytes,
            nonce: &kernel::random_nonce(),
            handles: &mut NoHandles,
            locators: Some(key),
        });
        let turn = TurnFacts {
            turn_id: "turn-1",
            tenant: "acme",
            binding: Some(("2026-11-30.1", "sha256:binding")),
            ask,
            deadline: Duration::from_secs(1),
            mode: Source::Live,
            started_at: now,
            duration: Duration::from_millis(9),
        };
        let settings = |id: &str| ProviderTraceSettings {
            provider_type: (!spec.unbound.contains(&id)).then_some("http"),
            retention: spec.retention,
            retention_ttl: Duration::from_secs(3600),
        };
        let mut trace = answered.capture(&turn, key, &settings);
        let result = answered.result;
        trace.build = Some((project.digest.clone(), project.build().to_json_pretty()));
        Recorded {
            retained: trace
                .retained
                .iter()
                .map(|r| (r.fingerprint.clone(), r.item.clone()))
                .collect(),
            stored: StoredTurn {
                turn: trace.turn.clone(),
                providers: trace.providers.clone(),
            },
            trace,
            result,
        }
    }

    /// Customer data answers two items, orders one.
    fn answered(invocation: &Invocation) -> Outcome {
        match invocation.provider_id.as_str() {
            CRM => ok(vec![
                item(CUSTOMER, "Gold tier since 2020; open invoice INV-77."),
                item("CUST-1042-note", "Prefers email."),
            ]),
            _ => ok(vec![item("ORD-9", "Order ORD-9 shipped 2026-11-27.")]),
        }
    }

    fn copy(stored: &StoredTurn) -> StoredTurn {
        StoredTurn {
            turn: stored.turn.clone(),
            providers: stored.providers.clone(),
        }
    }

    fn replay_of(recorded: &Recorded) -> Result<ReplayResult, ReplayError> {
        replay(
            &recorded.stored,
            &project(),
            &original_inputs(),
            &key(),
            &recorded.retained,
        )
    }

    fn provider<'r>(result: &'r ReplayResult, id: &str) -> &'r ReplayedProvider {
        result.providers.iter().find(|p| p.id == id).unwrap()
    }

    #[test]
    fn exact_replay_of_a_retained_turn_renders_the_same_digest() {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        assert!(recorded.result.rendered.is_some());
        let replayed = replay_of(&recorded).unwrap();
        assert!(replayed.exact);
        assert!(replayed.rendered_digest_matches);
        assert!(replayed.reproduced());
        assert_eq!(replayed.rendered_digest, recorded.result.rendered_digest);
        assert_eq!(replayed.rendered, recorded.result.rendered);
        assert_eq!(replayed.turn_id, "turn-1");
        assert!(!replayed.blocked && !replayed.original_blocked);
        for p in &replayed.providers {
            assert_eq!(p.replay, ProviderReplay::Exact, "{}", p.id);
            assert_eq!(p.status, ProviderStatus::Ok);
            assert_eq!(p.original_status, Some(ProviderStatus::Ok));
        }
        for layer in &replayed.layers {
            assert_eq!(Some(layer.status), layer.original_status, "{}", layer.id);
            assert_eq!(Some(layer.reason), layer.original_reason, "{}", layer.id);
        }
    }

    #[test]
    fn exact_replay_keeps_budget_cuts_stale_data_and_provenance() {
        let project = project();
        let spec = TurnSpec {
            max_bytes: 900,
            ..TurnSpec::default()
        };
        let long = |invocation: &Invocation| {
            let mut outcome = answered(invocation);
            if let Answer::Items { items, currentness } = &mut outcome.answer {
                for item in items {
                    item.content = item.content.repeat(20);
                }
                if invocation.provider_id == ORDERS {
                    *currentness = Currentness::Stale;
                }
            }
            outcome
        };
        let recorded = record_turn(&project, &spec, &long, &key());
        assert!(!recorded.result.cuts.is_empty(), "the budget cuts material");
        let replayed = replay_of(&recorded).unwrap();
        assert!(replayed.reproduced());
        assert_eq!(replayed.rendered, recorded.result.rendered);
    }

    #[test]
    fn digest_only_content_is_a_live_dependency() {
        for retention in [Retention::Digest, Retention::None] {
            let spec = TurnSpec {
                retention,
                ..TurnSpec::default()
            };
            let recorded = record_turn(&project(), &spec, &answered, &key());
            let replayed = replay_of(&recorded).unwrap();
            assert!(!replayed.exact, "{retention:?}");
            assert!(!replayed.rendered_digest_matches, "{retention:?}");
            for id in [CRM, ORDERS] {
                let p = provider(&replayed, id);
                assert_eq!(p.replay, ProviderReplay::LiveDependencyUnavailable);
                assert_eq!(p.status, ProviderStatus::NotEvaluated);
                assert_eq!(p.detail.as_deref(), Some(LIVE_DEPENDENCY_UNAVAILABLE));
                assert_eq!(p.original_status, Some(ProviderStatus::Ok));
            }
            // The required layer cannot be established again: the replay blocks, and
            // says so, rather than render facts it no longer has.
            assert!(replayed.blocked && !replayed.original_blocked);
            assert_eq!(replayed.rendered, None);
            let layer = &replayed.layers[1];
            assert_eq!(layer.status, LayerStatus::Unknown);
            assert_eq!(layer.original_status, Some(LayerStatus::Included));
        }
    }

    #[test]
    fn recorded_failures_replay_exactly() {
        let failures = [
            ProviderStatus::Timeout,
            ProviderStatus::Unavailable,
            ProviderStatus::LimitExceeded,
            ProviderStatus::InvalidResponse,
            ProviderStatus::SecretDetected,
            ProviderStatus::Incompatible,
            ProviderStatus::NotEvaluated,
        ];
        for status in failures {
            // Digest retention: a failure has no content, so nothing needs retaining.
            let spec = TurnSpec {
                retention: Retention::Digest,
                ..TurnSpec::default()
            };
            let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
                CRM => failed(status, Some("DEADLINE")),
                _ => failed(ProviderStatus::Unavailable, Some("CIRCUIT_OPEN")),
            };
            let recorded = record_turn(&project(), &spec, &answer, &key());
            let replayed = replay_of(&recorded).unwrap();
            assert!(replayed.reproduced(), "{status}");
            let crm = provider(&replayed, CRM);
            assert_eq!(crm.replay, ProviderReplay::Exact);
            assert_eq!(
                (crm.status, crm.detail.as_deref()),
                (status, Some("DEADLINE"))
            );
            let orders = provider(&replayed, ORDERS);
            assert_eq!(orders.detail.as_deref(), Some("CIRCUIT_OPEN"));
            assert!(replayed.blocked && replayed.original_blocked, "{status}");
        }
    }

    #[test]
    fn a_failed_optional_provider_renders_the_same_text() {
        let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
            CRM => answered(invocation),
            _ => failed(ProviderStatus::Timeout, Some("DEADLINE")),
        };
        let recorded = record_turn(&project(), &TurnSpec::default(), &answer, &key());
        let replayed = replay_of(&recorded).unwrap();
        assert!(replayed.reproduced());
        assert!(
            replayed
                .rendered
                .as_deref()
                .unwrap()
                .contains("returned TIMEOUT")
        );
        assert_eq!(provider(&replayed, ORDERS).status, ProviderStatus::Timeout);
    }

    #[test]
    fn a_request_the_provider_refused_replays_the_same() {
        let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
            CRM => answered(invocation),
            _ => failed(ProviderStatus::InvalidRequest, Some("HTTP_422")),
        };
        let recorded = record_turn(&project(), &TurnSpec::default(), &answer, &key());
        let replayed = replay_of(&recorded).unwrap();
        assert!(replayed.reproduced());
        let orders = provider(&replayed, ORDERS);
        assert_eq!(orders.status, ProviderStatus::InvalidRequest);
        assert_eq!(orders.detail.as_deref(), Some("HTTP_422"));
    }

    #[test]
    fn not_found_and_empty_answers_replay_exactly_without_content() {
        // Retention none: nothing of any content was kept, and none is needed.
        let spec = TurnSpec {
            retention: Retention::None,
            ..TurnSpec::default()
        };
        let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
            CRM => failed(ProviderStatus::NotFound, None),
            _ => ok(Vec::new()),
        };
        let recorded = record_turn(&project(), &spec, &answer, &key());
        let replayed = replay(
            &recorded.stored,
            &project(),
            &original_inputs(),
            &key(),
            &HashMap::new(),
        )
        .unwrap();
        assert!(replayed.reproduced());
        assert_eq!(provider(&replayed, CRM).status, ProviderStatus::NotFound);
        assert_eq!(provider(&replayed, ORDERS).status, ProviderStatus::Ok);
        assert!(
            replayed
                .providers
                .iter()
                .all(|p| p.replay == ProviderReplay::Exact)
        );
        assert_eq!(replayed.layers[1].status, LayerStatus::Empty);
    }

    #[test]
    fn tampered_or_missing_retained_content_is_a_live_dependency() {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        let crm_fingerprint = recorded.stored.providers[0].items[1].fingerprint.clone();

        let mut tampered = recorded.retained.clone();
        tampered.get_mut(&crm_fingerprint).unwrap().content = "Prefers phone.".to_owned();
        let mut expired = recorded.retained.clone();
        expired.remove(&crm_fingerprint);

        for retained in [tampered, expired] {
            let replayed = replay(
                &recorded.stored,
                &project(),
                &original_inputs(),
                &key(),
                &retained,
            )
            .unwrap();
            assert!(!replayed.exact);
            let crm = provider(&replayed, CRM);
            assert_eq!(crm.replay, ProviderReplay::LiveDependencyUnavailable);
            assert_eq!(crm.detail.as_deref(), Some(LIVE_DEPENDENCY_UNAVAILABLE));
            assert_eq!(provider(&replayed, ORDERS).replay, ProviderReplay::Exact);
            assert!(!replayed.rendered.iter().any(|r| r.contains("Prefers")));
        }
    }

    #[test]
    fn a_partial_record_is_not_exact() {
        let mut recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        recorded.stored.providers[0].items.pop();
        let replayed = replay_of(&recorded).unwrap();
        assert_eq!(
            provider(&replayed, CRM).replay,
            ProviderReplay::LiveDependencyUnavailable
        );
    }

    #[test]
    fn a_blocked_turn_replays_blocked() {
        // The value fails the declared pattern: INVALID_REQUEST, the required layer is
        // unavailable, nothing is invoked.
        let bad = inputs(&[("customerId", "CUST-12"), ("region", REGION)]);
        let spec = TurnSpec {
            inputs: bad.clone(),
            ..TurnSpec::default()
        };
        let recorded = record_turn(&project(), &spec, &answered, &key());
        assert!(recorded.result.blocked);
        let replayed = replay(
            &recorded.stored,
            &project(),
            &bad,
            &key(),
            &recorded.retained,
        )
        .unwrap();
        assert!(replayed.reproduced());
        assert!(replayed.blocked && replayed.original_blocked);
        assert_eq!(replayed.rendered, None);
        assert_eq!(replayed.rendered_digest, None);
        let crm = provider(&replayed, CRM);
        assert_eq!(crm.replay, ProviderReplay::NotInvoked);
        assert_eq!(crm.status, ProviderStatus::InvalidRequest);
        assert_eq!(
            provider(&replayed, ORDERS).status,
            ProviderStatus::NotEvaluated
        );
    }

    #[test]
    fn an_unbound_provider_replays_unbound() {
        let spec = TurnSpec {
            unbound: &[ORDERS],
            ..TurnSpec::default()
        };
        let recorded = record_turn(&project(), &spec, &answered, &key());
        let replayed = replay_of(&recorded).unwrap();
        assert!(replayed.reproduced());
        let orders = provider(&replayed, ORDERS);
        assert_eq!(
            (orders.replay, orders.status),
            (ProviderReplay::NotInvoked, ProviderStatus::NotBound)
        );
    }

    #[test]
    fn the_recorded_profile_and_objective_are_replayed() {
        let spec = TurnSpec {
            profile: "lite",
            ..TurnSpec::default()
        };
        let recorded = record_turn(&project(), &spec, &answered, &key());
        let replayed = replay_of(&recorded).unwrap();
        assert!(replayed.reproduced());
        assert_eq!(
            replayed.providers.len(),
            1,
            "orders is excluded by the profile"
        );
        assert_eq!(replayed.layers[2].status, LayerStatus::Excluded);
    }

    #[test]
    fn a_turn_with_unused_inputs_replays_with_or_without_them() {
        let mut carried = original_inputs();
        carried.extend((0..50).map(|i| (format!("unused{i}"), format!("value-{i}"))));
        let spec = TurnSpec {
            inputs: carried.clone(),
            ..TurnSpec::default()
        };
        let recorded = record_turn(&project(), &spec, &answered, &key());
        assert_eq!(recorded.stored.turn.inputs.len(), 2, "only declared inputs");
        let with = |given: &BTreeMap<String, String>| {
            replay(
                &recorded.stored,
                &project(),
                given,
                &key(),
                &recorded.retained,
            )
        };
        // The declared inputs alone verify…
        assert!(with(&original_inputs()).unwrap().reproduced());
        // …and so does the original request's whole input set: the unused keys are
        // ignored, as the turn ignored them, whatever their values.
        assert!(with(&carried).unwrap().reproduced());
        let mut other_values = carried;
        other_values.insert("unused7".to_owned(), "anything".to_owned());
        assert!(with(&other_values).unwrap().reproduced());
    }

    /// Every error a wrong replay request can cause, with the values it must not show.
    fn input_errors() -> Vec<(ReplayError, &'static str)> {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        let attempt = |given: &[(&str, &str)], key: &DigestKey| {
            replay(
                &recorded.stored,
                &project(),
                &inputs(given),
                key,
                &recorded.retained,
            )
            .unwrap_err()
        };
        let other_key = DigestKey::from_bytes(vec![8u8; 32]).unwrap();
        // A turn that carried no region: a replay that brings one asks for another turn.
        let without_region = TurnSpec {
            inputs: inputs(&[("customerId", CUSTOMER)]),
            ..TurnSpec::default()
        };
        let without_region = record_turn(&project(), &without_region, &answered, &key());
        let declared_extra = replay(
            &without_region.stored,
            &project(),
            &original_inputs(),
            &key(),
            &without_region.retained,
        )
        .unwrap_err();
        vec![
            (
                attempt(&[("customerId", "CUST-1043"), ("region", REGION)], &key()),
                "CUST-1043",
            ),
            (attempt(&[("region", REGION)], &key()), REGION),
            (declared_extra, REGION),
            (
                attempt(&[("customerId", CUSTOMER), ("region", REGION)], &other_key),
                CUSTOMER,
            ),
        ]
    }

    #[test]
    fn inputs_are_verified_against_the_recorded_digests() {
        let errors = input_errors();
        assert!(matches!(&errors[0].0, ReplayError::InputMismatch(k) if k == "customerId"));
        assert_eq!(
            errors[0].0.to_string(),
            "input customerId does not match the recorded turn"
        );
        assert!(matches!(&errors[1].0, ReplayError::MissingInput(k) if k == "customerId"));
        assert!(matches!(&errors[2].0, ReplayError::UnexpectedInput(k) if k == "region"));
        assert!(matches!(&errors[3].0, ReplayError::InputMismatch(k) if k == "customerId"));
    }

    #[test]
    fn no_error_message_contains_an_input_value() {
        for (error, value) in input_errors() {
            for text in [error.to_string(), format!("{error:?}")] {
                assert!(!text.contains(value), "{text}");
                assert!(!text.contains(CUSTOMER), "{text}");
                assert!(!text.contains(REGION), "{text}");
            }
        }
        for error in record_errors() {
            for text in [error.to_string(), format!("{error:?}")] {
                assert!(!text.contains(CUSTOMER), "{text}");
                assert!(!text.contains(REGION), "{text}");
            }
        }
    }

    /// Errors of records that do not belong to the build and inputs given.
    fn record_errors() -> Vec<ReplayError> {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        let attempt = |stored: &StoredTurn, project: &Project| {
            replay(
                stored,
                project,
                &original_inputs(),
                &key(),
                &recorded.retained,
            )
            .unwrap_err()
        };
        let mut altered_request = copy(&recorded.stored);
        altered_request.providers[0].request_digest =
            key().request_digest(CRM, "customerId", "CUST-1043");
        let mut not_invoked = copy(&recorded.stored);
        not_invoked.providers[1].invoked = false;
        let mut unrecorded = copy(&recorded.stored);
        unrecorded.providers.remove(0);
        let mut foreign = copy(&recorded.stored);
        foreign.providers[1].provider = "ghost".to_owned();
        let mut other_build = project().doc;
        other_build.version = "1.4.1".to_owned();
        let other_build = Project::from_doc(other_build).unwrap();
        vec![
            attempt(&altered_request, &project()),
            attempt(&not_invoked, &project()),
            attempt(&unrecorded, &project()),
            attempt(&foreign, &project()),
            attempt(&recorded.stored, &other_build),
        ]
    }

    #[test]
    fn records_that_do_not_fit_the_build_and_inputs_are_refused() {
        let errors = record_errors();
        assert!(matches!(&errors[0], ReplayError::RequestMismatch(p) if p == CRM));
        assert!(
            matches!(&errors[1], ReplayError::RecordMismatch { provider, .. } if provider == ORDERS)
        );
        assert!(
            matches!(&errors[2], ReplayError::RecordMismatch { provider, .. } if provider == CRM)
        );
        assert!(
            matches!(&errors[3], ReplayError::RecordMismatch { provider, .. } if provider == "ghost")
        );
        assert!(matches!(&errors[4], ReplayError::BuildMismatch));
    }

    #[test]
    fn the_result_serializes_in_camel_case() {
        let spec = TurnSpec {
            retention: Retention::Digest,
            ..TurnSpec::default()
        };
        let recorded = record_turn(&project(), &spec, &answered, &key());
        let value = serde_json::to_value(replay_of(&recorded).unwrap()).unwrap();
        assert_eq!(value["turnId"], "turn-1");
        assert_eq!(value["exact"], false);
        assert_eq!(value["renderedDigestMatches"], false);
        assert_eq!(value["originalBlocked"], false);
        assert!(
            value["originalRenderedDigest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        assert_eq!(
            value["providers"][0]["replay"],
            "LIVE_DEPENDENCY_UNAVAILABLE"
        );
        assert_eq!(value["providers"][0]["originalStatus"], "OK");
        assert_eq!(value["layers"][1]["originalStatus"], "INCLUDED");
        assert_eq!(value["rendered"], serde_json::Value::Null);
        let text = value.to_string();
        assert!(!text.contains(CUSTOMER) && !text.contains(REGION));
    }

    #[test]
    fn digests_compare_whole() {
        assert!(same_digest("hmac-sha256:ab", "hmac-sha256:ab"));
        assert!(!same_digest("hmac-sha256:ab", "hmac-sha256:ac"));
        assert!(!same_digest("hmac-sha256:ab", "hmac-sha256:abc"));
    }

    /// Writes traces into a fresh store the way the trace writer does.
    fn store_with(traces: &[TurnTrace]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traces.db");
        let mut store = TraceStore::open(&path, &key()).unwrap();
        store.write_batch(traces).unwrap();
        (dir, path)
    }

    #[test]
    fn replays_from_the_store_exactly() {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        let (_dir, path) = store_with(std::slice::from_ref(&recorded.trace));
        let reader = TraceReader::open(&path, Some(&key())).unwrap();
        let replayed =
            replay_from_store(&reader, Some("acme"), "turn-1", &original_inputs(), &key()).unwrap();
        assert!(replayed.reproduced());
        assert_eq!(replayed.rendered, recorded.result.rendered);
        // Operator tools read unscoped.
        let unscoped =
            replay_from_store(&reader, None, "turn-1", &original_inputs(), &key()).unwrap();
        assert_eq!(unscoped, replayed);
    }

    #[test]
    fn the_store_scopes_turns_to_their_tenant() {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        let (_dir, path) = store_with(&[recorded.trace]);
        let reader = TraceReader::open(&path, Some(&key())).unwrap();
        for (tenant, turn) in [(Some("other"), "turn-1"), (Some("acme"), "turn-2")] {
            let error =
                replay_from_store(&reader, tenant, turn, &original_inputs(), &key()).unwrap_err();
            assert_eq!(error, ReplayError::UnknownTurn(turn.to_owned()));
        }
    }

    #[test]
    fn from_the_store_digest_only_content_is_a_live_dependency() {
        let spec = TurnSpec {
            retention: Retention::Digest,
            ..TurnSpec::default()
        };
        let recorded = record_turn(&project(), &spec, &answered, &key());
        let (_dir, path) = store_with(&[recorded.trace]);
        // No retained content is needed, so a reader without the key replays too.
        let reader = TraceReader::open(&path, None).unwrap();
        let replayed =
            replay_from_store(&reader, Some("acme"), "turn-1", &original_inputs(), &key()).unwrap();
        assert!(!replayed.exact);
        assert_eq!(
            provider(&replayed, CRM).replay,
            ProviderReplay::LiveDependencyUnavailable
        );
    }

    #[test]
    fn from_the_store_inputs_are_checked_before_content_is_read() {
        let recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        let (_dir, path) = store_with(&[recorded.trace]);
        // A reader that cannot decrypt would fail on the retained content: the wrong
        // input is refused first.
        let reader = TraceReader::open(&path, None).unwrap();
        let wrong = inputs(&[("customerId", "CUST-1043"), ("region", REGION)]);
        let error = replay_from_store(&reader, Some("acme"), "turn-1", &wrong, &key()).unwrap_err();
        assert_eq!(error, ReplayError::InputMismatch("customerId".to_owned()));
        let error = replay_from_store(&reader, Some("acme"), "turn-1", &original_inputs(), &key())
            .unwrap_err();
        assert!(matches!(error, ReplayError::Store(_)), "{error}");
    }

    #[test]
    fn a_turn_without_its_build_cannot_be_replayed() {
        let mut recorded = record_turn(&project(), &TurnSpec::default(), &answered, &key());
        recorded.trace.build = None;
        let (_dir, path) = store_with(&[recorded.trace]);
        let reader = TraceReader::open(&path, Some(&key())).unwrap();
        let error = replay_from_store(&reader, Some("acme"), "turn-1", &original_inputs(), &key())
            .unwrap_err();
        assert_eq!(error, ReplayError::BuildUnavailable(project().digest));
    }

    fn arb_item() -> impl Strategy<Value = Item> {
        (
            "[A-Z]{2,4}-[0-9]{1,4}",
            prop::option::of("[ -~]{0,20}"),
            "\\PC{0,300}",
            prop::option::of("2026-1[0-2]-[0-2][0-9]"),
        )
            .prop_map(|(id, title, content, updated_at)| Item {
                id,
                title,
                content,
                metadata: Default::default(),
                updated_at,
            })
    }

    fn arb_outcome() -> impl Strategy<Value = Outcome> {
        let currentness = prop_oneof![
            Just(Currentness::Current),
            Just(Currentness::Stale),
            Just(Currentness::Unknown)
        ];
        let failure = prop_oneof![
            Just(ProviderStatus::NotFound),
            Just(ProviderStatus::Timeout),
            Just(ProviderStatus::Unavailable),
            Just(ProviderStatus::SecretDetected),
        ];
        prop_oneof![
            3 => (prop::collection::vec(arb_item(), 0..4), currentness)
                .prop_map(|(items, c)| Outcome::items(items, c, Source::Live)),
            1 => (failure, prop::option::of(Just("DEADLINE".to_owned())))
                .prop_map(|(s, d)| Outcome::stated(s, d, Source::Live)),
        ]
    }

    proptest! {
        /// The core property: a turn whose content was retained replays exactly and
        /// renders the same digest, whatever the answers, the cuts and the nonce.
        #[test]
        fn a_retained_turn_always_reproduces(
            crm in arb_outcome(),
            orders in arb_outcome(),
            max_bytes in 256usize..4000,
        ) {
            let spec = TurnSpec { max_bytes, ..TurnSpec::default() };
            let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
                CRM => crm.clone(),
                _ => orders.clone(),
            };
            let recorded = record_turn(&project(), &spec, &answer, &key());
            let replayed = replay_of(&recorded).unwrap();
            prop_assert!(replayed.exact);
            prop_assert!(replayed.rendered_digest_matches);
            prop_assert_eq!(&replayed.rendered, &recorded.result.rendered);
            prop_assert_eq!(replayed.blocked, recorded.result.blocked);
        }
    }
}
