//! Trace builders for the tests of the store, the writer, search, replay and the CLI.

use crate::contract::{
    Currentness, Item, LayerReason, LayerStatus, ProviderStatus, Source, VersionSource,
};
use crate::digest::canonical_digest;
use crate::digest::keyed::DigestKey;
use crate::trace::record::{
    InputDigest, ItemRecord, LayerDecisionRecord, PROVIDER_RECORD_KIND, ProviderRecord,
    RetainedItem, RetentionRecord, SelectionRecord, TURN_RECORD_KIND, TurnRecord, TurnTrace,
    material_digest,
};

pub(crate) fn key() -> DigestKey {
    DigestKey::from_bytes(b"test-key-test-key-test-key-test-key!".to_vec()).unwrap()
}

/// What one provider of a test turn answered.
#[derive(Debug, Clone)]
pub(crate) struct ProviderSpec {
    pub(crate) provider: String,
    pub(crate) status: ProviderStatus,
    /// `none`, `digest` or `content`.
    pub(crate) retention: &'static str,
    pub(crate) items: Vec<Item>,
    /// The lookup value: only its keyed digest reaches the record.
    pub(crate) value: String,
}

impl ProviderSpec {
    pub(crate) fn new(provider: &str, status: ProviderStatus) -> ProviderSpec {
        ProviderSpec {
            provider: provider.to_owned(),
            status,
            retention: "digest",
            items: Vec::new(),
            value: "CUST-0001".to_owned(),
        }
    }

    pub(crate) fn items(mut self, items: Vec<Item>) -> ProviderSpec {
        self.items = items;
        self
    }

    pub(crate) fn retention(mut self, retention: &'static str) -> ProviderSpec {
        self.retention = retention;
        self
    }

    pub(crate) fn value(mut self, value: &str) -> ProviderSpec {
        self.value = value.to_owned();
        self
    }
}

pub(crate) fn item(id: &str, title: &str, content: &str) -> Item {
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "plan".to_owned(),
        serde_json::json!(format!("plan-of-{id}")),
    );
    Item {
        id: id.to_owned(),
        title: Some(title.to_owned()),
        content: content.to_owned(),
        metadata,
        updated_at: Some("2026-10-08".to_owned()),
    }
}

/// A turn shaped as `trace::capture` shapes one: locators, fingerprints and digests
/// instead of ids and values, retained items only under `retention = "content"`.
pub(crate) fn turn(
    key: &DigestKey,
    turn_id: &str,
    tenant: &str,
    started_at_ms: i64,
    providers: &[ProviderSpec],
    layers: &[(&str, LayerStatus)],
) -> TurnTrace {
    let ttl_ms: u64 = 7 * 24 * 3_600_000;
    let mut records = Vec::new();
    let mut retained = Vec::new();
    let mut selections = Vec::new();
    for spec in providers {
        let fingerprints: Vec<String> = spec.items.iter().map(canonical_digest).collect();
        let keep = spec.retention != "none";
        let content = spec.retention == "content" && !spec.items.is_empty();
        if content {
            for (item, fingerprint) in spec.items.iter().zip(&fingerprints) {
                retained.push(RetainedItem {
                    fingerprint: fingerprint.clone(),
                    item: item.clone(),
                    expires_at_ms: started_at_ms + ttl_ms as i64,
                });
            }
        }
        let items: Vec<ItemRecord> = if keep {
            spec.items
                .iter()
                .zip(&fingerprints)
                .map(|(item, fingerprint)| ItemRecord {
                    locator: key.locator(&spec.provider, &item.id),
                    fingerprint: fingerprint.clone(),
                    bytes: item.content.len(),
                })
                .collect()
        } else {
            Vec::new()
        };
        for item in &items {
            selections.push(SelectionRecord {
                layer: format!("{}-layer", spec.provider),
                provider: Some(spec.provider.clone()),
                locator: Some(item.locator.clone()),
                fingerprint: Some(item.fingerprint.clone()),
                bytes: item.bytes,
                truncated: false,
                handle: None,
            });
        }
        let refs: Vec<&str> = fingerprints.iter().map(String::as_str).collect();
        records.push(ProviderRecord {
            kind: PROVIDER_RECORD_KIND.to_owned(),
            provider: spec.provider.clone(),
            contract: "context-provider.v1".to_owned(),
            binding_revision: Some("2026-11-30.1".to_owned()),
            binding_digest: Some(format!("sha256:{}", "b".repeat(64))),
            provider_type: Some("http".to_owned()),
            version: Some("5.0.1".to_owned()),
            version_source: Some(VersionSource::Response),
            request_digest: key.request_digest(&spec.provider, "customerId", &spec.value),
            lookup_key: "customerId".to_owned(),
            invoked: true,
            observed_at: "2026-11-30T10:53:20.123Z".to_owned(),
            observed_at_ms: started_at_ms + 5,
            upstream_revision: Some("crm-r9".to_owned()),
            currentness: spec.status.is_success().then_some(Currentness::Current),
            item_count: spec.items.len(),
            material_digest: (keep && spec.status.is_success()).then(|| material_digest(&refs)),
            items,
            duration_ms: Some(12),
            status: spec.status,
            detail: None,
            source: Some(Source::Live),
            age_ms: None,
            redactions: Default::default(),
            items_dropped: 0,
            retention: RetentionRecord {
                policy: spec.retention.to_owned(),
                ttl_ms,
                content_retained: content,
            },
        });
    }
    let value = providers.first().map_or("CUST-0001", |p| p.value.as_str());
    TurnTrace {
        turn: TurnRecord {
            kind: TURN_RECORD_KIND.to_owned(),
            turn_id: turn_id.to_owned(),
            tenant: tenant.to_owned(),
            project: "support".to_owned(),
            project_version: "1.4.0".to_owned(),
            build_digest: format!("sha256:{}", "a".repeat(64)),
            binding_revision: Some("2026-11-30.1".to_owned()),
            binding_digest: Some(format!("sha256:{}", "b".repeat(64))),
            profile: "default".to_owned(),
            objective: Some("billing".to_owned()),
            consumer: Some("support-agent".to_owned()),
            inputs: vec![InputDigest {
                key: "customerId".to_owned(),
                digest: key.input_digest("customerId", value),
            }],
            budget_max_bytes: 8000,
            deadline_ms: 800,
            mode: Source::Live,
            layers: layers
                .iter()
                .map(|(id, status)| LayerDecisionRecord {
                    id: (*id).to_owned(),
                    status: *status,
                    reason: match status {
                        LayerStatus::Included => LayerReason::ProviderItems,
                        LayerStatus::Empty => LayerReason::NotFound,
                        LayerStatus::Unknown => LayerReason::ProviderInputNotProvided,
                        LayerStatus::Unavailable => LayerReason::ProviderFailed,
                        LayerStatus::NotRequested => LayerReason::ObjectiveOutOfScope,
                        LayerStatus::Excluded => LayerReason::ProfileExcluded,
                    },
                    required: false,
                    providers: Vec::new(),
                    missing_inputs: Vec::new(),
                    currentness: None,
                })
                .collect(),
            selections,
            cuts: Vec::new(),
            blocked: false,
            blocking_layers: Vec::new(),
            rendered_digest: Some(format!("sha256:{}", "c".repeat(64))),
            rendered_bytes: 1234,
            nonce: "0123456789abcdef".to_owned(),
            started_at: "2026-11-30T10:53:20.000Z".to_owned(),
            started_at_ms,
            duration_ms: 15,
        },
        providers: records,
        retained,
        build: Some((
            format!("sha256:{}", "a".repeat(64)),
            r#"{"id":"support","version":"1.4.0"}"#.to_owned(),
        )),
    }
}

/// A turn with one provider per `(provider, status)` and one layer per
/// `(layer, status)`; successful providers answer one item.
pub(crate) fn simple(
    key: &DigestKey,
    turn_id: &str,
    tenant: &str,
    started_at_ms: i64,
    providers: &[(&str, ProviderStatus)],
    layers: &[(&str, LayerStatus)],
) -> TurnTrace {
    let specs: Vec<ProviderSpec> = providers
        .iter()
        .map(|(provider, status)| {
            let spec = ProviderSpec::new(provider, *status);
            if *status == ProviderStatus::Ok {
                let id = format!("{turn_id}-{provider}");
                spec.items(vec![item(&id, "title", "content")])
            } else {
                spec
            }
        })
        .collect();
    turn(key, turn_id, tenant, started_at_ms, &specs, layers)
}

/// Writes `traces` as a store of schema version 5 held them (what ctxd wrote before turn
/// shapes): each turn's row without a shape, a `layer_decisions` row per layer
/// decision, a `provider_records` row per provider record (empty: its record is the
/// body's next line), its retained content and the dictionary of its body.
pub(crate) fn write_unshaped(
    conn: &rusqlite::Connection,
    encoder: &super::RowEncoder,
    traces: &[TurnTrace],
) {
    for trace in traces {
        let rows = encoder.encode(trace);
        let turn = &rows.turn;
        let (id, bytes) = rows.dictionary();
        conn.execute(
            "INSERT INTO record_dictionaries (id, bytes) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            rusqlite::params![id, bytes],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO turns (turn_id, tenant, project, build_digest, blocked, rendered_digest, started_at_ms, duration_ms, record)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params![
                turn.turn_id,
                turn.tenant,
                turn.project,
                turn.build_digest,
                turn.blocked,
                turn.rendered_digest,
                turn.started_at_ms,
                turn.duration_ms,
                turn.record
            ],
        )
        .unwrap();
        let seq = conn.last_insert_rowid();
        for layer in &trace.turn.layers {
            conn.execute(
                "INSERT INTO layer_decisions (turn_seq, tenant, layer, status, reason) VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![seq, turn.tenant, layer.id, layer.status.as_str(), layer.reason.as_str()],
            )
            .unwrap();
        }
        for provider in &trace.providers {
            conn.execute(
                "INSERT INTO provider_records (turn_seq, tenant, provider, status, observed_at_ms, record)
                 VALUES (?1, ?2, ?3, ?4, ?5, x'')",
                rusqlite::params![
                    seq,
                    turn.tenant,
                    provider.provider,
                    provider.status.as_str(),
                    provider.observed_at_ms
                ],
            )
            .unwrap();
        }
        for retained in &rows.retained {
            conn.execute(
                "INSERT INTO retained_content (tenant, fingerprint, ciphertext, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT DO NOTHING",
                rusqlite::params![turn.tenant, retained.fingerprint, retained.ciphertext, retained.expires_at_ms],
            )
            .unwrap();
        }
    }
}

/// Takes a store's schema back to `version` (at least 1): what the migrations after it
/// added is removed, and what they dropped comes back. The rows of turns written with a
/// shape are not unwritten: write the rows of such a store with [`write_unshaped`].
pub(crate) fn as_version(conn: &rusqlite::Connection, version: i64) {
    if version < 6 {
        conn.execute_batch(
            "DROP INDEX turns_by_shape;
             ALTER TABLE turns DROP COLUMN shape;
             ALTER TABLE turns DROP COLUMN provider_count;
             DROP TABLE shape_keys;",
        )
        .unwrap();
    }
    if version < 5 {
        conn.execute_batch(
            "CREATE INDEX layer_decisions_by_status ON layer_decisions (tenant, status, turn_seq);
             CREATE INDEX provider_records_by_status ON provider_records (tenant, status, turn_seq);",
        )
        .unwrap();
    }
    if version < 4 {
        conn.execute_batch("DROP TABLE record_dictionaries")
            .unwrap();
    }
    if version < 3 {
        conn.execute_batch("DROP INDEX handle_operations_by_age")
            .unwrap();
    }
    if version < 2 {
        conn.execute_batch("DROP TABLE handle_operations").unwrap();
    }
    conn.execute("DELETE FROM schema_version WHERE version > ?1", [version])
        .unwrap();
}
