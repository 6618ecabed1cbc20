//! Capture: turns one answered turn into its provenance — the turn record, one
//! `context.provider.v1` record per provider the turn reached, and the items kept
//! under `retention = "content"`. Pure: the clock, the key and the turn are passed in.

use super::DigestKey;
use super::record::{
    CutRecord, InputDigest, ItemRecord, LayerDecisionRecord, PROVIDER_RECORD_KIND, ProviderRecord,
    RetainedItem, RetentionRecord, SelectionRecord, TURN_RECORD_KIND, TurnRecord, TurnTrace,
    material_digest, timestamp,
};
use crate::config::Retention;
use crate::contract::{CONTRACT, Source, VersionSource};
use crate::digest::canonical_digest;
use crate::gate::{Plan, ProviderDecision};
use crate::kernel::{Outcome, TurnResult};
use crate::project::Project;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// How one provider is bound, as provenance needs it.
#[derive(Debug, Clone, Copy)]
pub struct ProviderTraceSettings<'a> {
    /// `http`, `sqlite`, `fixture`; `None` when not bound.
    pub provider_type: Option<&'a str>,
    pub retention: Retention,
    pub retention_ttl: Duration,
}

/// Facts of one invocation beside its outcome.
#[derive(Debug, Clone, Copy)]
pub struct InvocationFacts {
    pub version_source: Option<VersionSource>,
    pub duration: Duration,
    pub observed_at: SystemTime,
}

/// The turn as provenance sees it.
pub struct TurnFacts<'a> {
    pub turn_id: &'a str,
    pub tenant: &'a str,
    pub project: &'a Project,
    /// `(revision, digest)` of the Deployment Binding.
    pub binding: Option<(&'a str, &'a str)>,
    pub profile: &'a str,
    pub objective: Option<&'a str>,
    pub consumer: Option<&'a str>,
    pub inputs: &'a BTreeMap<String, String>,
    pub deadline: Duration,
    pub mode: Source,
    pub started_at: SystemTime,
    pub duration: Duration,
}

/// Keyed locators of a turn's selections and cuts, computed once for the response and
/// the trace. `None` for static text.
pub struct Locators {
    pub selections: Vec<Option<String>>,
    pub cuts: Vec<Option<String>>,
}

impl Locators {
    pub fn of(result: &TurnResult, key: &DigestKey) -> Locators {
        let locator =
            |provider: &Option<String>, item_id: &Option<String>| match (provider, item_id) {
                (Some(provider), Some(id)) => Some(key.locator(provider, id)),
                _ => None,
            };
        Locators {
            selections: result
                .selections
                .iter()
                .map(|s| locator(&s.provider, &s.item_id))
                .collect(),
            cuts: result
                .cuts
                .iter()
                .map(|c| locator(&c.provider, &c.item_id))
                .collect(),
        }
    }
}

/// Builds a turn's trace. `outcomes[i]` and `facts[i]` belong to `plan.invocations[i]`;
/// `settings(provider_id)` says how each provider is bound.
#[allow(clippy::too_many_arguments)]
pub fn capture<'s>(
    turn: &TurnFacts<'_>,
    plan: &Plan,
    outcomes: &[Outcome],
    facts: &[InvocationFacts],
    result: &TurnResult,
    locators: &Locators,
    key: &DigestKey,
    settings: &dyn Fn(&str) -> ProviderTraceSettings<'s>,
) -> TurnTrace {
    let project = turn.project;
    let (started_at_ms, started_at) = timestamp(turn.started_at);
    let retention_of = |provider: &str| settings(provider).retention;

    let rendered: std::collections::HashMap<(&str, usize), &str> = result
        .selections
        .iter()
        .filter_map(|s| Some(((s.provider.as_deref()?, s.item?), s.fingerprint.as_str())))
        .collect();
    let mut providers = Vec::new();
    let mut retained = Vec::new();
    for (p, decision) in plan.providers.iter().enumerate() {
        if *decision == ProviderDecision::NotNeeded {
            continue;
        }
        let spec = &project.providers[p];
        let value = turn.inputs.get(&spec.input).map_or("", String::as_str);
        let setting = settings(&spec.id);
        let invoked = match decision {
            ProviderDecision::Invoke(i) => Some((&outcomes[*i], &facts[*i])),
            _ => None,
        };
        let (observed_at_ms, observed_at) =
            timestamp(invoked.map_or(turn.started_at, |(_, f)| f.observed_at));
        let outcome = invoked.map(|(o, _)| o);
        // Rendered items were fingerprinted by the kernel already; only the others
        // (dropped by the budget) are fingerprinted here.
        let fingerprints: Vec<String> = outcome
            .map(|o| {
                o.items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match rendered.get(&(spec.id.as_str(), i + 1)) {
                        Some(fingerprint) => (*fingerprint).to_owned(),
                        None => canonical_digest(item),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let keep_digests = setting.retention != Retention::None;
        let keep_content = setting.retention == Retention::Content && !fingerprints.is_empty();
        if keep_content {
            let expires_at_ms =
                started_at_ms.saturating_add(setting.retention_ttl.as_millis() as i64);
            for (item, fingerprint) in outcome
                .into_iter()
                .flat_map(|o| &o.items)
                .zip(&fingerprints)
            {
                retained.push(RetainedItem {
                    fingerprint: fingerprint.clone(),
                    item: item.clone(),
                    expires_at_ms,
                });
            }
        }
        let items: Vec<ItemRecord> = if keep_digests {
            outcome
                .into_iter()
                .flat_map(|o| &o.items)
                .zip(&fingerprints)
                .map(|(item, fingerprint)| ItemRecord {
                    locator: key.locator(&spec.id, &item.id),
                    fingerprint: fingerprint.clone(),
                    bytes: item.content.len(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let status = match (decision.final_status(), outcome) {
            (Some(status), _) => status,
            (None, Some(outcome)) => outcome.status,
            (None, None) => continue,
        };
        let detail = match decision {
            ProviderDecision::InvalidRequest(invalid) => Some(invalid.detail().to_owned()),
            _ => outcome.and_then(|o| o.detail.clone()),
        };
        let fingerprint_refs: Vec<&str> = fingerprints.iter().map(String::as_str).collect();
        providers.push(ProviderRecord {
            kind: PROVIDER_RECORD_KIND.to_owned(),
            provider: spec.id.clone(),
            contract: CONTRACT.to_owned(),
            binding_revision: turn.binding.map(|(revision, _)| revision.to_owned()),
            binding_digest: turn.binding.map(|(_, digest)| digest.to_owned()),
            provider_type: setting.provider_type.map(str::to_owned),
            version: outcome.and_then(|o| o.version.clone()),
            version_source: invoked.and_then(|(_, f)| f.version_source),
            request_digest: key.request_digest(&spec.id, &spec.input, value),
            lookup_key: spec.input.clone(),
            invoked: invoked.is_some(),
            observed_at,
            observed_at_ms,
            upstream_revision: outcome.and_then(|o| o.revision.clone()),
            currentness: outcome
                .filter(|o| o.status.is_success())
                .map(|o| o.currentness),
            item_count: fingerprints.len(),
            material_digest: (keep_digests && outcome.is_some_and(|o| o.status.is_success()))
                .then(|| material_digest(&fingerprint_refs)),
            items,
            duration_ms: invoked.map(|(_, f)| f.duration.as_millis() as u64),
            status,
            detail,
            source: outcome.map(|o| o.source),
            retention: RetentionRecord {
                policy: setting.retention.as_str().to_owned(),
                ttl_ms: setting.retention_ttl.as_millis() as u64,
                content_retained: keep_content,
            },
        });
    }

    let hide = |provider: &Option<String>| {
        provider
            .as_deref()
            .is_some_and(|p| retention_of(p) == Retention::None)
    };
    let selections = result
        .selections
        .iter()
        .zip(&locators.selections)
        .map(|(s, locator)| SelectionRecord {
            layer: s.layer.clone(),
            provider: s.provider.clone(),
            locator: if hide(&s.provider) {
                None
            } else {
                locator.clone()
            },
            fingerprint: (!hide(&s.provider)).then(|| s.fingerprint.clone()),
            bytes: s.bytes,
            truncated: s.truncated,
            handle: s.handle.clone(),
        })
        .collect();
    let cuts = result
        .cuts
        .iter()
        .zip(&locators.cuts)
        .map(|(c, locator)| CutRecord {
            layer: c.layer.clone(),
            provider: c.provider.clone(),
            locator: if hide(&c.provider) {
                None
            } else {
                locator.clone()
            },
            action: c.action,
            bytes_before: c.bytes_before,
            bytes_after: c.bytes_after,
        })
        .collect();

    TurnTrace {
        turn: TurnRecord {
            kind: TURN_RECORD_KIND.to_owned(),
            turn_id: turn.turn_id.to_owned(),
            tenant: turn.tenant.to_owned(),
            project: project.id().to_owned(),
            project_version: project.doc.version.clone(),
            build_digest: project.digest.clone(),
            binding_revision: turn.binding.map(|(revision, _)| revision.to_owned()),
            binding_digest: turn.binding.map(|(_, digest)| digest.to_owned()),
            profile: turn.profile.to_owned(),
            objective: turn.objective.map(str::to_owned),
            consumer: turn.consumer.map(str::to_owned),
            inputs: turn
                .inputs
                .iter()
                .map(|(k, v)| InputDigest {
                    key: k.clone(),
                    digest: key.input_digest(k, v),
                })
                .collect(),
            budget_max_bytes: result.budget.max_bytes,
            deadline_ms: turn.deadline.as_millis() as u64,
            mode: turn.mode,
            layers: result
                .layers
                .iter()
                .map(|l| LayerDecisionRecord {
                    id: l.id.clone(),
                    status: l.status,
                    reason: l.reason,
                    required: l.required,
                    providers: l.providers.clone(),
                    missing_inputs: l.missing_inputs.clone(),
                    currentness: l.currentness,
                })
                .collect(),
            selections,
            cuts,
            blocked: result.blocked,
            blocking_layers: result.blocking_layers.clone(),
            rendered_digest: result.rendered_digest.clone(),
            rendered_bytes: result.budget.used_bytes,
            nonce: result.nonce.clone(),
            started_at,
            started_at_ms,
            duration_ms: turn.duration.as_millis() as u64,
        },
        providers,
        retained,
        build: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Currentness, Item, ProviderStatus};
    use crate::gate::{self, GateRequest};
    use crate::kernel;
    use serde_json::json;

    const VALUE: &str = "CUST-7391";

    fn project() -> Project {
        let doc = json!({
            "id": "p", "version": "1",
            "providers": [
                {"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}},
                {"id": "orders", "name": "Orders", "lookup": {"input": "customerId"}},
                {"id": "ghost", "name": "Ghost", "lookup": {"input": "customerId"}}
            ],
            "layers": [
                {"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}]},
                {"id": "history", "name": "History", "bindings": [{"provider": "orders"}]},
                {"id": "unbound", "name": "Unbound", "bindings": [{"provider": "ghost"}]},
                {"id": "scoped", "name": "Scoped", "content": "x", "scope": {"objectives": ["billing"]}}
            ]
        });
        Project::from_json(&doc.to_string()).unwrap()
    }

    fn item(id: &str, content: &str) -> Item {
        Item {
            id: id.to_owned(),
            title: Some(format!("Title of {id}")),
            content: content.to_owned(),
            metadata: Default::default(),
            updated_at: None,
        }
    }

    fn captured(retention: Retention) -> TurnTrace {
        let project = project();
        let key = DigestKey::from_bytes(vec![9u8; 32]).unwrap();
        let inputs: BTreeMap<String, String> = [("customerId".to_owned(), VALUE.to_owned())].into();
        let request = GateRequest {
            profile: project.profile("default").unwrap(),
            objective: None,
            consumer: None,
            inputs: &inputs,
        };
        let plan = gate::plan(&project, &request, &|id| id != "ghost");
        let outcomes = vec![
            Outcome::items(
                vec![item(VALUE, "Gold tier since 2020")],
                Currentness::Current,
                Source::Live,
            ),
            Outcome::status(
                ProviderStatus::Timeout,
                Some("DEADLINE".into()),
                Source::Live,
            ),
        ];
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_500_000);
        let facts = vec![
            InvocationFacts {
                version_source: None,
                duration: Duration::from_millis(3),
                observed_at: now
            };
            2
        ];
        let result = kernel::assemble(
            &project,
            &plan,
            &outcomes,
            10_000,
            "00ff00ff00ff00ff00ff00ff00ff00ff",
        );
        let locators = Locators::of(&result, &key);
        let turn = TurnFacts {
            turn_id: "t-1",
            tenant: "acme",
            project: &project,
            binding: Some(("r1", "sha256:b")),
            profile: "default",
            objective: None,
            consumer: None,
            inputs: &inputs,
            deadline: Duration::from_secs(1),
            mode: Source::Live,
            started_at: now,
            duration: Duration::from_millis(5),
        };
        let settings = |id: &str| ProviderTraceSettings {
            provider_type: (id != "ghost").then_some("http"),
            retention,
            retention_ttl: Duration::from_secs(3600),
        };
        capture(
            &turn, &plan, &outcomes, &facts, &result, &locators, &key, &settings,
        )
    }

    fn text_of(trace: &TurnTrace) -> String {
        let mut text = serde_json::to_string(&trace.turn).unwrap();
        for provider in &trace.providers {
            text.push_str(&serde_json::to_string(provider).unwrap());
        }
        text
    }

    #[test]
    fn records_every_reached_provider_and_every_layer() {
        let trace = captured(Retention::Digest);
        let statuses: Vec<_> = trace
            .providers
            .iter()
            .map(|p| (p.provider.as_str(), p.status, p.invoked))
            .collect();
        assert_eq!(
            statuses,
            [
                ("crm", ProviderStatus::Ok, true),
                ("orders", ProviderStatus::Timeout, true),
                ("ghost", ProviderStatus::NotBound, false)
            ]
        );
        let crm = &trace.providers[0];
        assert_eq!(crm.kind, "context.provider.v1");
        assert_eq!(crm.lookup_key, "customerId");
        assert!(crm.request_digest.starts_with("hmac-sha256:"));
        assert_eq!(crm.item_count, 1);
        assert!(crm.items[0].locator.starts_with("crm/item-"));
        assert!(crm.material_digest.is_some());
        assert_eq!(crm.observed_at, "2025-11-30T10:53:20.000Z");
        assert_eq!(trace.providers[1].detail.as_deref(), Some("DEADLINE"));
        assert_eq!(trace.providers[2].provider_type, None);
        let layers: Vec<_> = trace
            .turn
            .layers
            .iter()
            .map(|l| (l.id.as_str(), l.status))
            .collect();
        assert_eq!(
            layers.len(),
            4,
            "non-invoked layers are recorded too: {layers:?}"
        );
        assert_eq!(trace.turn.inputs[0].key, "customerId");
        assert!(trace.retained.is_empty());
        assert_eq!(trace.turn.selections[0].provider.as_deref(), Some("crm"));
    }

    #[test]
    fn no_lookup_value_record_id_or_content_in_records() {
        for retention in [Retention::None, Retention::Digest, Retention::Content] {
            let text = text_of(&captured(retention));
            assert!(!text.contains(VALUE), "{retention:?}: {text}");
            assert!(!text.contains("Gold tier"), "{retention:?}");
            assert!(!text.contains("Title of"), "{retention:?}");
        }
    }

    #[test]
    fn retention_decides_digests_and_content() {
        let none = captured(Retention::None);
        assert!(none.providers[0].items.is_empty());
        assert_eq!(none.providers[0].item_count, 1);
        assert!(none.providers[0].material_digest.is_none());
        assert!(none.turn.selections[0].fingerprint.is_none());
        assert!(none.turn.selections[0].locator.is_none());
        assert!(none.retained.is_empty());

        let content = captured(Retention::Content);
        assert!(content.providers[0].retention.content_retained);
        assert!(
            !content.providers[1].retention.content_retained,
            "a failure retains nothing"
        );
        assert_eq!(content.retained.len(), 1);
        let kept = &content.retained[0];
        assert_eq!(kept.fingerprint, content.providers[0].items[0].fingerprint);
        assert_eq!(kept.fingerprint, canonical_digest(&kept.item));
        assert_eq!(kept.expires_at_ms, 1_764_500_000_000 + 3_600_000);
    }
}
