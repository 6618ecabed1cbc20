//! Gating: for every layer of a turn, decide whether it takes part and exactly which
//! provider invocations (provider, key name, value, limit) the turn makes. Pure: the same
//! request always yields the same plan, and nothing outside the plan is ever fetched.
//!
//! Per layer, in order (SPEC §2): not in the profile → `EXCLUDED`; out of scope for the
//! objective or consumer → `NOT_REQUESTED`; a `requiresInput` key or a bound provider's
//! lookup input missing → `UNKNOWN` (`PROVIDER_INPUT_NOT_PROVIDED`); a lookup value
//! failing the base grammar or the declared pattern → `INVALID_REQUEST`, layer
//! `UNAVAILABLE`; a provider with no binding → `NOT_BOUND`, layer `UNAVAILABLE`;
//! otherwise the provider is invoked. When a required layer is already `UNKNOWN` or
//! `UNAVAILABLE` the turn is decided (blocked) and nothing is invoked: those providers
//! are `NOT_EVALUATED`.

use crate::contract::{LayerReason, ProviderStatus};
use crate::project::{BASE_VALUE_GRAMMAR, LayerKind, LayerSpec, ProfileSpec, Project};
use regex::Regex;
use std::collections::BTreeMap;
use std::sync::LazyLock;

static BASE_GRAMMAR: LazyLock<Regex> = LazyLock::new(|| Regex::new(BASE_VALUE_GRAMMAR).unwrap());

/// What the turn asks for, as gating sees it.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    pub profile: &'a ProfileSpec,
    pub objective: Option<&'a str>,
    pub consumer: Option<&'a str>,
    pub inputs: &'a BTreeMap<String, String>,
}

/// The decision for one layer before any provider answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LayerDecision {
    /// Not in the profile.
    Excluded,
    /// Out of scope; the reason says for what.
    NotRequested(LayerReason),
    /// Input keys missing (names only, sorted).
    MissingInput(Vec<String>),
    /// Static content: included as authored.
    Static,
    /// Every bound provider will be invoked (or was decided not to be, see `Plan::blocked`).
    Fetch,
    /// At least one bound provider was refused (`INVALID_REQUEST`) or is `NOT_BOUND`.
    Refused,
}

/// Why a lookup value was refused. Never carries the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvalidValue {
    /// Fails `^[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}$`.
    BaseGrammar,
    /// Fails the provider's declared `lookup.pattern`.
    Pattern,
}

impl InvalidValue {
    pub(crate) fn detail(self) -> &'static str {
        match self {
            InvalidValue::BaseGrammar => "VALUE_FAILS_BASE_GRAMMAR",
            InvalidValue::Pattern => "VALUE_FAILS_PATTERN",
        }
    }
}

/// The decision for one provider of the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProviderDecision {
    /// No layer of this turn reached the provider.
    NotNeeded,
    /// Invoke it: index into `Plan::invocations` (and into the turn's calls, which
    /// answer the invocations in order).
    Invoke(usize),
    InvalidRequest(InvalidValue),
    NotBound,
    /// Would have been invoked, but the turn was already decided.
    NotEvaluated,
}

impl ProviderDecision {
    /// The provider status this decision reports before any invocation, if it is final.
    pub(crate) fn final_status(self) -> Option<ProviderStatus> {
        match self {
            ProviderDecision::NotNeeded | ProviderDecision::Invoke(_) => None,
            ProviderDecision::InvalidRequest(_) => Some(ProviderStatus::InvalidRequest),
            ProviderDecision::NotBound => Some(ProviderStatus::NotBound),
            ProviderDecision::NotEvaluated => Some(ProviderStatus::NotEvaluated),
        }
    }
}

/// One provider call the turn makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Index into `Project::providers`.
    pub(crate) provider: usize,
    pub(crate) provider_id: String,
    /// Lookup key name (the input name); the only part of the request that is traced.
    pub(crate) key: String,
    /// The lookup value: validated against the base grammar and the declared pattern.
    pub(crate) value: String,
    pub limit: u32,
}

/// Everything gating decided for a turn: the decisions, and the invocations to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub decisions: Decisions,
    /// The exact invocations, each provider at most once, in provider order.
    pub invocations: Vec<Invocation>,
}

/// Per layer and per provider, what gating decided before any provider answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decisions {
    /// Per layer index.
    pub(crate) layers: Vec<LayerDecision>,
    /// Per provider index.
    pub(crate) providers: Vec<ProviderDecision>,
    /// A required layer is already `UNKNOWN` or `UNAVAILABLE`: the turn is blocked and
    /// nothing is invoked.
    pub(crate) blocked: bool,
}

/// Decides a turn. `is_bound(provider_id)` says whether the deployment binds a provider.
pub fn plan(project: &Project, request: &GateRequest<'_>, is_bound: &dyn Fn(&str) -> bool) -> Plan {
    let mut layers: Vec<LayerDecision> = project
        .layers
        .iter()
        .enumerate()
        .map(|(index, layer)| pre_provider_decision(project, layer, index, request))
        .collect();

    // Steps 4 and 5 are per provider: the value and the binding are the same for every
    // layer that reaches the provider.
    let mut providers = vec![ProviderDecision::NotNeeded; project.providers.len()];
    let mut checked = vec![false; project.providers.len()];
    for (layer, decision) in project.layers.iter().zip(&mut layers) {
        let LayerKind::Bound { providers: bound } = &layer.kind else {
            continue;
        };
        if *decision != LayerDecision::Fetch {
            continue;
        }
        let mut refused = false;
        for &p in bound {
            if !checked[p] {
                checked[p] = true;
                if let Some(refusal) = refusal(project, p, request, is_bound) {
                    providers[p] = refusal;
                }
            }
            refused |= providers[p] != ProviderDecision::NotNeeded;
        }
        if refused {
            *decision = LayerDecision::Refused;
        }
    }

    let blocked = project.layers.iter().zip(&layers).any(|(layer, decision)| {
        layer.required
            && matches!(
                decision,
                LayerDecision::MissingInput(_) | LayerDecision::Refused
            )
    });

    // Invoke each provider still wanted by at least one layer that will fetch.
    let mut wanted = vec![false; project.providers.len()];
    for (layer, decision) in project.layers.iter().zip(&layers) {
        if let (LayerKind::Bound { providers: bound }, LayerDecision::Fetch) =
            (&layer.kind, decision)
        {
            for &p in bound {
                wanted[p] = true;
            }
        }
    }
    let mut invocations = Vec::new();
    for (p, decision) in providers.iter_mut().enumerate() {
        // Only providers that passed steps 4 and 5 and that a fetching layer still wants.
        if !wanted[p] || *decision != ProviderDecision::NotNeeded {
            continue;
        }
        if blocked {
            *decision = ProviderDecision::NotEvaluated;
        } else {
            let spec = &project.providers[p];
            *decision = ProviderDecision::Invoke(invocations.len());
            invocations.push(Invocation {
                provider: p,
                provider_id: spec.id.clone(),
                key: spec.input.clone(),
                value: request.inputs[&spec.input].clone(),
                limit: spec.max_items,
            });
        }
    }

    Plan {
        decisions: Decisions {
            layers,
            providers,
            blocked,
        },
        invocations,
    }
}

/// Steps 1–3, which need no provider.
fn pre_provider_decision(
    project: &Project,
    layer: &LayerSpec,
    index: usize,
    request: &GateRequest<'_>,
) -> LayerDecision {
    if !request.profile.includes[index] {
        return LayerDecision::Excluded;
    }
    if !in_scope(&layer.objectives, request.objective) {
        return LayerDecision::NotRequested(LayerReason::ObjectiveOutOfScope);
    }
    if !in_scope(&layer.consumers, request.consumer) {
        return LayerDecision::NotRequested(LayerReason::ConsumerOutOfScope);
    }
    let mut missing: Vec<String> = layer
        .requires_input
        .iter()
        .filter(|key| !request.inputs.contains_key(*key))
        .cloned()
        .collect();
    if let LayerKind::Bound { providers } = &layer.kind {
        for &p in providers {
            let input = &project.providers[p].input;
            if !request.inputs.contains_key(input) {
                missing.push(input.clone());
            }
        }
    }
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return LayerDecision::MissingInput(missing);
    }
    match layer.kind {
        LayerKind::Static { .. } => LayerDecision::Static,
        LayerKind::Bound { .. } => LayerDecision::Fetch,
    }
}

/// A scoped layer is in scope only when the turn names one of its values.
fn in_scope(scope: &Option<Vec<String>>, requested: Option<&str>) -> bool {
    match scope {
        None => true,
        Some(allowed) => requested.is_some_and(|r| allowed.iter().any(|a| a == r)),
    }
}

/// Steps 4 and 5 for one provider: the refusal, or `None` when it may be invoked.
fn refusal(
    project: &Project,
    p: usize,
    request: &GateRequest<'_>,
    is_bound: &dyn Fn(&str) -> bool,
) -> Option<ProviderDecision> {
    let spec = &project.providers[p];
    let value = &request.inputs[&spec.input];
    if let Some(invalid) = check_value(value, spec.pattern.as_ref()) {
        return Some(ProviderDecision::InvalidRequest(invalid));
    }
    if !is_bound(&spec.id) {
        return Some(ProviderDecision::NotBound);
    }
    None
}

/// Whether a lookup value may be sent: base grammar first, then the declared pattern.
pub(crate) fn check_value(value: &str, pattern: Option<&Regex>) -> Option<InvalidValue> {
    if !BASE_GRAMMAR.is_match(value) {
        return Some(InvalidValue::BaseGrammar);
    }
    if pattern.is_some_and(|p| !p.is_match(value)) {
        return Some(InvalidValue::Pattern);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::Project;
    use proptest::prelude::*;
    use serde_json::json;

    fn project() -> Project {
        let doc = json!({
            "id": "gating", "version": "1",
            "providers": [
                {"id": "a", "name": "A", "lookup": {"input": "customerId", "pattern": "^CUST-[0-9]{4}$"}, "maxItems": 3},
                {"id": "b", "name": "B", "lookup": {"input": "orderId"}}
            ],
            "layers": [
                {"id": "policy", "name": "Policy", "content": "Be kind."},
                {"id": "l1", "name": "L1", "bindings": [{"provider": "a"}], "required": true},
                {"id": "l2", "name": "L2", "bindings": [{"provider": "b"}], "scope": {"objectives": ["billing"]}},
                {"id": "l3", "name": "L3", "bindings": [{"provider": "a"}, {"provider": "b"}], "scope": {"consumers": ["agent"]}},
                {"id": "l4", "name": "L4", "bindings": [{"provider": "a"}], "requiresInput": ["region"]}
            ],
            "profiles": [
                {"id": "default"},
                {"id": "lite", "exclude": ["l2", "l3"]},
                {"id": "policy-only", "include": ["policy"]}
            ]
        });
        Project::from_json(&doc.to_string()).expect("test project is valid")
    }

    struct Case {
        name: &'static str,
        profile: &'static str,
        objective: Option<&'static str>,
        consumer: Option<&'static str>,
        inputs: &'static [(&'static str, &'static str)],
        unbound: &'static [&'static str],
        layers: [LayerDecision; 5],
        /// (provider, value) in order.
        invocations: &'static [(&'static str, &'static str)],
        providers: [ProviderDecisionKind; 2],
        blocked: bool,
    }

    /// `ProviderDecision` without the invocation index, for readable tables.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum ProviderDecisionKind {
        NotNeeded,
        Invoke,
        InvalidGrammar,
        InvalidPattern,
        NotBound,
        NotEvaluated,
    }

    fn kind(decision: ProviderDecision) -> ProviderDecisionKind {
        match decision {
            ProviderDecision::NotNeeded => ProviderDecisionKind::NotNeeded,
            ProviderDecision::Invoke(_) => ProviderDecisionKind::Invoke,
            ProviderDecision::InvalidRequest(InvalidValue::BaseGrammar) => {
                ProviderDecisionKind::InvalidGrammar
            }
            ProviderDecision::InvalidRequest(InvalidValue::Pattern) => {
                ProviderDecisionKind::InvalidPattern
            }
            ProviderDecision::NotBound => ProviderDecisionKind::NotBound,
            ProviderDecision::NotEvaluated => ProviderDecisionKind::NotEvaluated,
        }
    }

    use LayerDecision::{Excluded, Fetch, MissingInput, NotRequested, Refused, Static};
    use ProviderDecisionKind as P;

    const ALL_INPUTS: &[(&str, &str)] = &[
        ("customerId", "CUST-1042"),
        ("orderId", "ORD-7"),
        ("region", "eu"),
    ];

    fn missing(keys: &[&str]) -> LayerDecision {
        MissingInput(keys.iter().map(|k| k.to_string()).collect())
    }

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "everything present and bound: every provider once",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: ALL_INPUTS,
                unbound: &[],
                layers: [Static, Fetch, Fetch, Fetch, Fetch],
                invocations: &[("a", "CUST-1042"), ("b", "ORD-7")],
                providers: [P::Invoke, P::Invoke],
                blocked: false,
            },
            Case {
                name: "step 1: excluded layers fetch nothing",
                profile: "lite",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: ALL_INPUTS,
                unbound: &[],
                layers: [Static, Fetch, Excluded, Excluded, Fetch],
                invocations: &[("a", "CUST-1042")],
                providers: [P::Invoke, P::NotNeeded],
                blocked: false,
            },
            Case {
                name: "step 1 before step 3: excluded even when inputs are missing",
                profile: "policy-only",
                objective: None,
                consumer: None,
                inputs: &[],
                unbound: &[],
                layers: [Static, Excluded, Excluded, Excluded, Excluded],
                invocations: &[],
                providers: [P::NotNeeded, P::NotNeeded],
                blocked: false,
            },
            Case {
                name: "step 2: no objective means out of scope for an objective-scoped layer",
                profile: "default",
                objective: None,
                consumer: Some("agent"),
                inputs: ALL_INPUTS,
                unbound: &[],
                layers: [
                    Static,
                    Fetch,
                    NotRequested(LayerReason::ObjectiveOutOfScope),
                    Fetch,
                    Fetch,
                ],
                invocations: &[("a", "CUST-1042"), ("b", "ORD-7")],
                providers: [P::Invoke, P::Invoke],
                blocked: false,
            },
            Case {
                name: "step 2: another consumer; b is then needed by no layer",
                profile: "default",
                objective: Some("support"),
                consumer: Some("bot"),
                inputs: ALL_INPUTS,
                unbound: &[],
                layers: [
                    Static,
                    Fetch,
                    NotRequested(LayerReason::ObjectiveOutOfScope),
                    NotRequested(LayerReason::ConsumerOutOfScope),
                    Fetch,
                ],
                invocations: &[("a", "CUST-1042")],
                providers: [P::Invoke, P::NotNeeded],
                blocked: false,
            },
            Case {
                name: "step 2 before step 3: out of scope even when inputs are missing",
                profile: "default",
                objective: Some("support"),
                consumer: Some("bot"),
                inputs: &[("customerId", "CUST-1042")],
                unbound: &[],
                layers: [
                    Static,
                    Fetch,
                    NotRequested(LayerReason::ObjectiveOutOfScope),
                    NotRequested(LayerReason::ConsumerOutOfScope),
                    missing(&["region"]),
                ],
                invocations: &[("a", "CUST-1042")],
                providers: [P::Invoke, P::NotNeeded],
                blocked: false,
            },
            Case {
                name: "step 3: a missing requiresInput key makes only that layer unknown",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: &[("customerId", "CUST-1042"), ("orderId", "ORD-7")],
                unbound: &[],
                layers: [Static, Fetch, Fetch, Fetch, missing(&["region"])],
                invocations: &[("a", "CUST-1042"), ("b", "ORD-7")],
                providers: [P::Invoke, P::Invoke],
                blocked: false,
            },
            Case {
                name: "step 3: a missing lookup input on a required layer decides the turn",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: &[("orderId", "ORD-7"), ("region", "eu")],
                unbound: &[],
                layers: [
                    Static,
                    missing(&["customerId"]),
                    Fetch,
                    missing(&["customerId"]),
                    missing(&["customerId"]),
                ],
                invocations: &[],
                providers: [P::NotNeeded, P::NotEvaluated],
                blocked: true,
            },
            Case {
                name: "step 3: every missing key is named once",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: &[("orderId", "ORD-7")],
                unbound: &[],
                layers: [
                    Static,
                    missing(&["customerId"]),
                    Fetch,
                    missing(&["customerId"]),
                    missing(&["customerId", "region"]),
                ],
                invocations: &[],
                providers: [P::NotNeeded, P::NotEvaluated],
                blocked: true,
            },
            Case {
                name: "step 4: the declared pattern refuses the value; nothing is sent",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: &[
                    ("customerId", "CUST-12"),
                    ("orderId", "ORD-7"),
                    ("region", "eu"),
                ],
                unbound: &[],
                layers: [Static, Refused, Fetch, Refused, Refused],
                invocations: &[],
                providers: [P::InvalidPattern, P::NotEvaluated],
                blocked: true,
            },
            Case {
                name: "step 4: the base grammar refuses the value even without a pattern",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: &[
                    ("customerId", "CUST-1042"),
                    ("orderId", "ORD 7/../x"),
                    ("region", "eu"),
                ],
                unbound: &[],
                layers: [Static, Fetch, Refused, Refused, Fetch],
                invocations: &[("a", "CUST-1042")],
                providers: [P::Invoke, P::InvalidGrammar],
                blocked: false,
            },
            Case {
                name: "step 4: the base grammar is checked before the pattern",
                profile: "lite",
                objective: None,
                consumer: None,
                inputs: &[("customerId", "-CUST-1042"), ("region", "eu")],
                unbound: &[],
                layers: [Static, Refused, Excluded, Excluded, Refused],
                invocations: &[],
                providers: [P::InvalidGrammar, P::NotNeeded],
                blocked: true,
            },
            Case {
                name: "step 5: an unbound provider is NOT_BOUND and its required layer blocks",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: ALL_INPUTS,
                unbound: &["a"],
                layers: [Static, Refused, Fetch, Refused, Refused],
                invocations: &[],
                providers: [P::NotBound, P::NotEvaluated],
                blocked: true,
            },
            Case {
                name: "step 5: an unbound optional provider spares the others",
                profile: "default",
                objective: Some("billing"),
                consumer: Some("agent"),
                inputs: ALL_INPUTS,
                unbound: &["b"],
                layers: [Static, Fetch, Refused, Refused, Fetch],
                invocations: &[("a", "CUST-1042")],
                providers: [P::Invoke, P::NotBound],
                blocked: false,
            },
            Case {
                name: "step 4 before step 5: an invalid value on an unbound provider is INVALID_REQUEST",
                profile: "lite",
                objective: None,
                consumer: None,
                inputs: &[("customerId", "nope"), ("region", "eu")],
                unbound: &["a"],
                layers: [Static, Refused, Excluded, Excluded, Refused],
                invocations: &[],
                providers: [P::InvalidPattern, P::NotNeeded],
                blocked: true,
            },
        ]
    }

    fn run(project: &Project, case: &Case) -> Plan {
        let inputs: BTreeMap<String, String> = case
            .inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let request = GateRequest {
            profile: project.profile(case.profile).expect("profile exists"),
            objective: case.objective,
            consumer: case.consumer,
            inputs: &inputs,
        };
        plan(project, &request, &|id| !case.unbound.contains(&id))
    }

    #[test]
    fn every_rule_and_their_combinations() {
        let project = project();
        for case in cases() {
            let plan = run(&project, &case);
            assert_eq!(plan.decisions.layers, case.layers, "{}: layers", case.name);
            let invocations: Vec<(&str, &str)> = plan
                .invocations
                .iter()
                .map(|i| (i.provider_id.as_str(), i.value.as_str()))
                .collect();
            assert_eq!(invocations, case.invocations, "{}: invocations", case.name);
            let providers: Vec<_> = plan.decisions.providers.iter().map(|d| kind(*d)).collect();
            assert_eq!(providers, case.providers, "{}: providers", case.name);
            assert_eq!(
                plan.decisions.blocked, case.blocked,
                "{}: blocked",
                case.name
            );
        }
    }

    #[test]
    fn invocations_carry_key_name_and_limit() {
        let project = project();
        let case = &cases()[0];
        let plan = run(&project, case);
        assert_eq!(
            plan.invocations[0],
            Invocation {
                provider: 0,
                provider_id: "a".into(),
                key: "customerId".into(),
                value: "CUST-1042".into(),
                limit: 3,
            }
        );
        assert_eq!(plan.invocations[1].limit, crate::project::DEFAULT_MAX_ITEMS);
        assert_eq!(plan.decisions.providers[1], ProviderDecision::Invoke(1));
    }

    #[test]
    fn base_grammar_edges() {
        let ok = ["a", "A0", "x.y_z:w@v-1", &"a".repeat(256)];
        let bad = [
            "",
            "-a",
            ".a",
            "a b",
            "a/b",
            "a?b",
            "a#b",
            "é",
            &"a".repeat(257),
            "a\n",
        ];
        for value in ok {
            assert_eq!(check_value(value, None), None, "{value:?} passes");
        }
        for value in bad {
            assert_eq!(
                check_value(value, None),
                Some(InvalidValue::BaseGrammar),
                "{value:?} fails"
            );
        }
    }

    proptest! {
        /// No invocation is ever planned for a value that fails either pattern.
        #[test]
        fn no_invocation_for_a_value_failing_either_pattern(
            value in prop_oneof![
                "\\PC{0,12}",
                "[A-Za-z0-9._:@/ ?#-]{0,12}",
                "CUST-[0-9]{0,5}",
                "[a-z]{1,3}",
            ],
            other in "\\PC{0,8}",
            objective in prop::option::of(prop_oneof![Just("billing"), Just("support")]),
        ) {
            let project = project();
            let inputs: BTreeMap<String, String> = [
                ("customerId".to_string(), value.clone()),
                ("orderId".to_string(), other.clone()),
                ("region".to_string(), "eu".to_string()),
            ].into_iter().collect();
            let request = GateRequest {
                profile: project.profile("default").unwrap(),
                objective,
                consumer: Some("agent"),
                inputs: &inputs,
            };
            let plan = plan(&project, &request, &|_| true);
            for invocation in &plan.invocations {
                let spec = &project.providers[invocation.provider];
                prop_assert!(BASE_GRAMMAR.is_match(&invocation.value));
                prop_assert!(spec.pattern.as_ref().is_none_or(|p| p.is_match(&invocation.value)));
            }
            // And a valid value for the required layer is always sent.
            let valid = check_value(&value, project.providers[0].pattern.as_ref()).is_none();
            prop_assert_eq!(valid, plan.invocations.iter().any(|i| i.provider_id == "a"));
        }
    }
}
