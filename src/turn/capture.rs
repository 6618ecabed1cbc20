//! Capture: turns one answered turn into its provenance — the turn record, one
//! `context.provider.v1` record per provider the turn reached, and the items kept
//! under `retention = "content"`. Pure: the clock, the key and the turn are passed in.
//!
//! The turn record holds a keyed digest of each input the Project declares (a lookup
//! input or a `requiresInput` key) and nothing of any other key a request carries: an
//! input no layer uses cannot change the turn, so it is not part of its provenance, and
//! a request with thousands of unused keys writes no bigger a record than one without.

use super::{Answered, Ask};
use crate::config::Retention;
use crate::contract::{CONTRACT, Source};
use crate::digest::DigestKey;
use crate::gate::ProviderDecision;
use crate::outcome::Call;
use crate::project::Project;
use crate::trace::record::{
    InputDigest, ItemRecord, PROVIDER_RECORD_KIND, ProviderRecord, RetainedItem, RetentionRecord,
    TURN_RECORD_KIND, TurnRecord, TurnTrace, material_digest, timestamp,
};
use std::time::{Duration, SystemTime};

/// How one provider is bound, as provenance needs it.
#[derive(Debug, Clone, Copy)]
pub struct ProviderTraceSettings<'a> {
    /// `http`, `sqlite`, `fixture`; `None` when not bound.
    pub provider_type: Option<&'a str>,
    pub retention: Retention,
    pub retention_ttl: Duration,
}

/// The turn beside what the kernel made of it, as its record and its answer see it.
pub struct TurnFacts<'a> {
    pub turn_id: &'a str,
    pub tenant: &'a str,
    /// `(revision, digest)` of the Deployment Binding.
    pub binding: Option<(&'a str, &'a str)>,
    /// What the turn asked for (its profile is the one the pipeline resolved).
    pub ask: Ask<'a>,
    pub deadline: Duration,
    pub mode: Source,
    pub started_at: SystemTime,
    pub duration: Duration,
}

/// Whether the Project uses the turn input `key`: some provider's lookup input, or some
/// layer's `requiresInput`. Only these inputs are recorded, and only these take part in
/// a replay.
pub(crate) fn declares_input(project: &Project, key: &str) -> bool {
    project.providers.iter().any(|p| p.input == key)
        || project
            .layers
            .iter()
            .any(|l| l.requires_input.iter().any(|k| k == key))
}

impl Answered<'_> {
    /// Builds the turn's trace. `settings(provider_id)` says how each provider is bound.
    pub fn capture<'s>(
        &self,
        turn: &TurnFacts<'_>,
        key: &DigestKey,
        settings: &dyn Fn(&str) -> ProviderTraceSettings<'s>,
    ) -> TurnTrace {
        let (started_at_ms, started_at) = timestamp(turn.started_at);
        let mut providers = Vec::new();
        let mut retained = Vec::new();
        for (p, decision) in self.called.decisions.providers.iter().enumerate() {
            if *decision == ProviderDecision::NotNeeded {
                continue;
            }
            let setting = settings(&self.called.project.providers[p].id);
            let call = self.called.call_of(p);
            if setting.retention == Retention::Content
                && let Some(call) = call
            {
                let expires_at_ms =
                    started_at_ms.saturating_add(setting.retention_ttl.as_millis() as i64);
                retained.extend(
                    call.outcome
                        .items_found()
                        .iter()
                        .zip(&call.fingerprints)
                        .map(|(item, fingerprint)| RetainedItem {
                            fingerprint: fingerprint.clone(),
                            item: item.clone(),
                            expires_at_ms,
                        }),
                );
            }
            providers.extend(self.provider_record(p, *decision, call, turn, key, &setting));
        }
        TurnTrace {
            turn: self.turn_record(turn, key, started_at_ms, started_at, settings),
            providers,
            retained,
            build: None,
        }
    }

    /// The `context.provider.v1` record of one provider the turn reached; `None` when
    /// gating neither decided nor invoked it.
    fn provider_record(
        &self,
        p: usize,
        decision: ProviderDecision,
        call: Option<&Call>,
        turn: &TurnFacts<'_>,
        key: &DigestKey,
        setting: &ProviderTraceSettings<'_>,
    ) -> Option<ProviderRecord> {
        let spec = &self.called.project.providers[p];
        let value = turn.ask.inputs.get(&spec.input).map_or("", String::as_str);
        let (observed_at_ms, observed_at) =
            timestamp(call.map_or(turn.started_at, |c| c.facts.observed_at));
        let outcome = call.map(|c| &c.outcome);
        let fingerprints: &[String] = call.map_or(&[], |c| &c.fingerprints);
        let keep_digests = setting.retention != Retention::None;
        let items: Vec<ItemRecord> = if keep_digests {
            outcome
                .map_or(&[][..], |o| o.items_found())
                .iter()
                .zip(fingerprints)
                .map(|(item, fingerprint)| ItemRecord {
                    locator: match self.locator_reported(&spec.id, fingerprint) {
                        Some(reported) => {
                            debug_assert_eq!(
                                reported,
                                key.locator(&spec.id, &item.id),
                                "the kernel keys locators with the capture's key"
                            );
                            reported.to_owned()
                        }
                        None => key.locator(&spec.id, &item.id),
                    },
                    fingerprint: fingerprint.clone(),
                    bytes: item.content.len(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let status = decision
            .final_status()
            .or_else(|| outcome.map(|o| o.status()))?;
        let detail = match decision {
            ProviderDecision::InvalidRequest(invalid) => Some(invalid.detail().to_owned()),
            _ => outcome.and_then(|o| o.detail()).map(str::to_owned),
        };
        let succeeded = outcome.is_some_and(|o| o.is_success());
        let fingerprint_refs: Vec<&str> = fingerprints.iter().map(String::as_str).collect();
        Some(ProviderRecord {
            kind: PROVIDER_RECORD_KIND.to_owned(),
            provider: spec.id.clone(),
            contract: CONTRACT.to_owned(),
            binding_revision: turn.binding.map(|(revision, _)| revision.to_owned()),
            binding_digest: turn.binding.map(|(_, digest)| digest.to_owned()),
            provider_type: setting.provider_type.map(str::to_owned),
            version: outcome.and_then(|o| o.version.clone()),
            version_source: call.and_then(|c| c.facts.version_source),
            request_digest: key.request_digest(&spec.id, &spec.input, value),
            lookup_key: spec.input.clone(),
            invoked: call.is_some(),
            observed_at,
            observed_at_ms,
            upstream_revision: outcome.and_then(|o| o.revision.clone()),
            currentness: outcome.and_then(|o| o.currentness()),
            item_count: fingerprints.len(),
            material_digest: (keep_digests && succeeded)
                .then(|| material_digest(&fingerprint_refs)),
            items,
            duration_ms: call
                .and_then(|c| c.facts.duration)
                .map(|d| d.as_millis() as u64),
            status,
            detail,
            source: outcome.map(|o| o.source),
            age_ms: call
                .and_then(|c| c.facts.age)
                .map(|age| age.as_millis() as u64),
            redactions: outcome.map(|o| o.redactions.clone()).unwrap_or_default(),
            items_dropped: outcome.map_or(0, |o| o.items_dropped),
            retention: RetentionRecord {
                policy: setting.retention.as_str().to_owned(),
                ttl_ms: setting.retention_ttl.as_millis() as u64,
                content_retained: setting.retention == Retention::Content
                    && !fingerprints.is_empty(),
            },
        })
    }

    /// The locator the kernel already reported for `provider`'s rendered item of
    /// `fingerprint`: the same item of the same provider has the same locator, so it is
    /// not keyed again.
    fn locator_reported(&self, provider: &str, fingerprint: &str) -> Option<&str> {
        self.result.selections.iter().find_map(|s| {
            (s.provider.as_deref() == Some(provider)
                && s.fingerprint.as_deref() == Some(fingerprint))
            .then_some(s.locator.as_deref())
            .flatten()
        })
    }

    /// The turn record: decisions, selections and cuts as the answer reports them (less
    /// locators and fingerprints of providers under `retention = "none"`).
    fn turn_record<'s>(
        &self,
        turn: &TurnFacts<'_>,
        key: &DigestKey,
        started_at_ms: i64,
        started_at: String,
        settings: &dyn Fn(&str) -> ProviderTraceSettings<'s>,
    ) -> TurnRecord {
        let result = &self.result;
        let hide = |provider: &Option<String>| {
            provider
                .as_deref()
                .is_some_and(|p| settings(p).retention == Retention::None)
        };
        let mut selections = result.selections.clone();
        for selection in selections.iter_mut().filter(|s| hide(&s.provider)) {
            selection.locator = None;
            selection.fingerprint = None;
        }
        let mut cuts = result.cuts.clone();
        for cut in cuts.iter_mut().filter(|c| hide(&c.provider)) {
            cut.locator = None;
        }
        TurnRecord {
            kind: TURN_RECORD_KIND.to_owned(),
            turn_id: turn.turn_id.to_owned(),
            tenant: turn.tenant.to_owned(),
            project: self.called.project.id().to_owned(),
            project_version: self.called.project.doc.version.clone(),
            build_digest: self.called.project.digest.clone(),
            binding_revision: turn.binding.map(|(revision, _)| revision.to_owned()),
            binding_digest: turn.binding.map(|(_, digest)| digest.to_owned()),
            profile: self.called.profile.to_owned(),
            objective: turn.ask.objective.map(str::to_owned),
            consumer: turn.ask.consumer.map(str::to_owned),
            inputs: turn
                .ask
                .inputs
                .iter()
                .filter(|(k, _)| declares_input(self.called.project, k))
                .map(|(k, v)| InputDigest {
                    key: k.clone(),
                    digest: key.input_digest(k, v),
                })
                .collect(),
            budget_max_bytes: result.budget.max_bytes,
            deadline_ms: turn.deadline.as_millis() as u64,
            mode: turn.mode,
            layers: result.layers.clone(),
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Currentness, Item, ProviderStatus};
    use crate::digest::canonical_digest;
    use crate::gate::Invocation;
    use crate::kernel::{NoHandles, Rendering};
    use crate::outcome::{Failure, Outcome};
    use crate::project::Project;
    use crate::turn::{Immediate, plan};
    use serde_json::json;
    use std::collections::BTreeMap;

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

    fn key() -> DigestKey {
        DigestKey::from_bytes(vec![9u8; 32]).unwrap()
    }

    fn captured(retention: Retention) -> TurnTrace {
        let inputs: BTreeMap<String, String> = [("customerId".to_owned(), VALUE.to_owned())].into();
        let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
            "crm" => Outcome::items(
                vec![item(VALUE, "Gold tier since 2020")],
                Currentness::Current,
                Source::Live,
            ),
            _ => Outcome::failed(Failure::Deadline, Source::Live),
        };
        capture_turn(&project(), &inputs, &answer, retention)
    }

    /// A turn of `project` with `inputs`, answered by `answer` (every provider but
    /// `ghost` bound), captured under `retention`.
    fn capture_turn(
        project: &Project,
        inputs: &BTreeMap<String, String>,
        answer: &dyn Fn(&Invocation) -> Outcome,
        retention: Retention,
    ) -> TurnTrace {
        run_turn(project, inputs, answer, retention).0
    }

    /// [`capture_turn`], and the turn's answer.
    fn run_turn(
        project: &Project,
        inputs: &BTreeMap<String, String>,
        answer: &dyn Fn(&Invocation) -> Outcome,
        retention: Retention,
    ) -> (TurnTrace, crate::contract::TurnResponse) {
        let key = key();
        let ask = Ask {
            profile: None,
            objective: None,
            consumer: None,
            inputs,
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_500_000);
        let source = Immediate::new(|id: &str| id != "ghost", answer).observed_at(now);
        let mut called = plan(project, &ask, &source)
            .unwrap()
            .call_now(&source)
            .unwrap();
        for call in &mut called.calls {
            call.facts.duration = Some(Duration::from_millis(3));
        }
        let answered = called.assemble(Rendering {
            max_bytes: 10_000,
            nonce: "00ff00ff00ff00ff00ff00ff00ff00ff",
            handles: &mut NoHandles,
            locators: Some(&key),
        });
        let turn = TurnFacts {
            turn_id: "t-1",
            tenant: "acme",
            binding: Some(("r1", "sha256:b")),
            ask,
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
        let trace = answered.capture(&turn, &key, &settings);
        (trace, answered.respond(&turn))
    }

    #[test]
    fn a_turns_answer_and_records_are_written_as_serde_json_writes_them() {
        let inputs: BTreeMap<String, String> = [("customerId".to_owned(), VALUE.to_owned())].into();
        let answer = |invocation: &Invocation| match invocation.provider_id.as_str() {
            "crm" => Outcome::items(
                vec![
                    item(
                        VALUE,
                        "Gold tier since 2020;\n\t\"quoted\" \\ \u{1}\u{7f} é \u{2028}",
                    ),
                    item("second", &"x".repeat(300)),
                ],
                Currentness::Current,
                Source::Live,
            ),
            _ => Outcome::failed(Failure::Deadline, Source::Live),
        };
        let (trace, response) = run_turn(&project(), &inputs, &answer, Retention::Content);
        assert_eq!(
            crate::json::to_vec(&response).unwrap(),
            serde_json::to_vec(&response).unwrap(),
            "the turn answer"
        );
        let joined =
            crate::trace::store::codec::with_joined(&trace.turn, &trace.providers, <[u8]>::to_vec);
        let mut expected = serde_json::to_vec(&trace.turn).unwrap();
        for provider in &trace.providers {
            expected.push(b'\n');
            expected.extend(serde_json::to_vec(provider).unwrap());
        }
        assert_eq!(joined, expected, "the records");
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
    fn only_the_inputs_the_project_declares_are_recorded() {
        // `customerId` is a lookup input, `region` a `requiresInput` key; the thousand
        // other keys no layer uses leave no trace.
        let doc = json!({
            "id": "p", "version": "1",
            "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
            "layers": [
                {"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}],
                 "requiresInput": ["region"]},
                {"id": "policy", "name": "Policy", "content": "x"}
            ]
        });
        let project = Project::from_json(&doc.to_string()).unwrap();
        let mut inputs: BTreeMap<String, String> = (0..1000)
            .map(|i| (format!("unused{i:04}"), "x".repeat(50)))
            .collect();
        inputs.insert("customerId".to_owned(), VALUE.to_owned());
        inputs.insert("region".to_owned(), "eu".to_owned());
        let nothing =
            |_: &Invocation| Outcome::items(Vec::new(), Currentness::Current, Source::Live);
        let trace = capture_turn(&project, &inputs, &nothing, Retention::Digest);
        let recorded: Vec<&str> = trace.turn.inputs.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(recorded, ["customerId", "region"]);
        assert_eq!(
            trace.turn.inputs[1].digest,
            key().input_digest("region", "eu")
        );
        assert!(
            serde_json::to_string(&trace.turn).unwrap().len() < 5_000,
            "the record does not grow with unused keys"
        );
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
