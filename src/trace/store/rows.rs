//! Rows: what one turn or one handle operation writes, serialized (and retained content
//! sealed) on the caller's thread before it reaches the writer, so the single writer
//! thread only runs SQL.

use super::codec::{self, Dictionaries, Dictionary};
use super::seal::RetentionCipher;
use crate::trace::digest::DigestKey;
use crate::trace::record::HandleOpRecord;
use crate::trace::record::TurnTrace;
use std::fmt;
use std::sync::Arc;

/// One entry of the trace writer's queue: a turn's rows or one handle operation.
/// Boxed, so the queue's slots stay small whatever a turn holds.
#[derive(Debug, Clone)]
pub enum Queued {
    Turn(Box<TraceRows>),
    HandleOperation(Box<HandleOperationRow>),
}

impl Queued {
    /// A writer batch split into its turns and its handle operations, each in queue
    /// order: every store writes the two kinds to their own tables.
    pub(crate) fn split(batch: &[Queued]) -> (Vec<&TraceRows>, Vec<&HandleOperationRow>) {
        let mut turns = Vec::with_capacity(batch.len());
        let mut operations = Vec::new();
        for queued in batch {
            match queued {
                Queued::Turn(rows) => turns.push(&**rows),
                Queued::HandleOperation(row) => operations.push(&**row),
            }
        }
        (turns, operations)
    }
}

/// A handle operation record, serialized off the writer thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleOperationRow {
    pub(crate) tenant: String,
    pub(crate) handle_id: String,
    pub(crate) sequence: i64,
    pub(crate) at_ms: i64,
    /// The record as JSON.
    pub(crate) record: String,
}

impl HandleOperationRow {
    pub(crate) fn encode(record: &HandleOpRecord) -> HandleOperationRow {
        HandleOperationRow {
            tenant: record.tenant.clone(),
            handle_id: record.handle.clone(),
            sequence: i64::try_from(record.sequence).unwrap_or(i64::MAX),
            at_ms: record.at_ms,
            record: serde_json::to_string(record)
                .expect("a handle operation record always serializes"),
        }
    }
}

/// The rows one turn writes, serialized (and retained content sealed) off the writer
/// thread. Produced by [`RowEncoder::encode`].
#[derive(Debug, Clone)]
pub struct TraceRows {
    pub turn: TurnRow,
    pub layers: Vec<LayerRow>,
    pub providers: Vec<ProviderRow>,
    pub retained: Vec<RetainedRow>,
    /// `(digest, build JSON)`.
    pub build: Option<(String, String)>,
    /// What the turn's and its providers' record bodies are compressed with: written
    /// with the batch unless the store already holds it.
    pub(crate) dictionary: Arc<Dictionary>,
    /// The dictionary was made for this turn (the build's first, or its statistics
    /// learned): its row counts toward the bytes the turn reserves.
    pub(crate) dictionary_made: bool,
}

#[derive(Debug, Clone)]
pub struct TurnRow {
    pub turn_id: String,
    pub tenant: String,
    pub project: String,
    pub build_digest: String,
    pub blocked: bool,
    pub rendered_digest: Option<String>,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// The turn record's JSON and its provider records' JSON, one per line, compressed
    /// together ([`super::codec`]): a turn's provider records repeat its digests and
    /// fingerprints, which one frame keeps once.
    pub record: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct LayerRow {
    pub layer: String,
    pub status: &'static str,
    pub reason: &'static str,
}

#[derive(Debug, Clone)]
pub struct ProviderRow {
    pub provider: String,
    pub status: &'static str,
    pub observed_at_ms: i64,
    /// Empty: the record is in its turn's body, at this row's place (rows written before
    /// that hold their JSON text here).
    pub record: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct RetainedRow {
    pub fingerprint: String,
    /// Nonce (24 bytes) followed by the XChaCha20-Poly1305 ciphertext and tag.
    pub ciphertext: Vec<u8>,
    pub expires_at_ms: i64,
}

impl TraceRows {
    /// The id and bytes of the dictionary the record bodies are compressed with: a
    /// `record_dictionaries` row every store that holds these rows needs once.
    pub fn dictionary(&self) -> (i64, &[u8]) {
        (self.dictionary.id, &self.dictionary.bytes)
    }
}

impl Queued {
    /// About how many bytes the entry's rows hold: what the trace writer reserves on
    /// disk for it while it is queued or in the batch being written.
    pub(crate) fn encoded_bytes(&self) -> u64 {
        // A row's bytes beyond its columns: its header, rowid and cell pointer, and the
        // entries of its table's two or three indexes (which repeat the tenant and a
        // name or status).
        const ROW: usize = 160;
        let bytes = match self {
            Queued::Turn(rows) => {
                let turn = &rows.turn;
                ROW + turn.turn_id.len()
                    + turn.tenant.len()
                    + turn.project.len()
                    + turn.build_digest.len()
                    + turn.rendered_digest.as_ref().map_or(0, String::len)
                    + turn.record.len()
                    + rows
                        .layers
                        .iter()
                        .map(|l| {
                            ROW + turn.tenant.len()
                                + l.layer.len()
                                + l.status.len()
                                + l.reason.len()
                        })
                        .sum::<usize>()
                    + rows
                        .providers
                        .iter()
                        .map(|p| {
                            ROW + turn.tenant.len()
                                + p.provider.len()
                                + p.status.len()
                                + p.record.len()
                        })
                        .sum::<usize>()
                    + rows
                        .retained
                        .iter()
                        .map(|r| ROW + turn.tenant.len() + r.fingerprint.len() + r.ciphertext.len())
                        .sum::<usize>()
                    + rows
                        .build
                        .as_ref()
                        .map_or(0, |(d, b)| ROW + d.len() + b.len())
                    + if rows.dictionary_made {
                        ROW + rows.dictionary.bytes.len()
                    } else {
                        0
                    }
            }
            Queued::HandleOperation(row) => {
                ROW + row.tenant.len() + row.handle_id.len() + row.record.len()
            }
        };
        bytes as u64
    }
}

/// Serializes traces into rows, compresses their record bodies and seals retained
/// content. Cheap to clone (clones share the dictionaries); holds the derived retention
/// key (zeroed on drop), never printed.
#[derive(Clone)]
pub struct RowEncoder {
    cipher: RetentionCipher,
    dictionaries: Arc<Dictionaries>,
}

impl fmt::Debug for RowEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RowEncoder(<key redacted>)")
    }
}

impl RowEncoder {
    pub fn new(key: &DigestKey) -> RowEncoder {
        RowEncoder {
            cipher: RetentionCipher::new(key),
            dictionaries: Arc::default(),
        }
    }

    pub fn encode(&self, trace: &TurnTrace) -> TraceRows {
        let turn = &trace.turn;
        let (record, chosen) = codec::with_joined(turn, &trace.providers, |text| {
            let chosen =
                self.dictionaries
                    .for_build(&turn.tenant, &turn.project, &turn.build_digest, text);
            (codec::encode(&chosen.dictionary, text), chosen)
        });
        TraceRows {
            turn: TurnRow {
                turn_id: turn.turn_id.clone(),
                tenant: turn.tenant.clone(),
                project: turn.project.clone(),
                build_digest: turn.build_digest.clone(),
                blocked: turn.blocked,
                rendered_digest: turn.rendered_digest.clone(),
                started_at_ms: turn.started_at_ms,
                duration_ms: i64::try_from(turn.duration_ms).unwrap_or(i64::MAX),
                record,
            },
            layers: turn
                .layers
                .iter()
                .map(|layer| LayerRow {
                    layer: layer.id.clone(),
                    status: layer.status.as_str(),
                    reason: layer.reason.as_str(),
                })
                .collect(),
            providers: trace
                .providers
                .iter()
                .map(|provider| ProviderRow {
                    provider: provider.provider.clone(),
                    status: provider.status.as_str(),
                    observed_at_ms: provider.observed_at_ms,
                    record: Vec::new(),
                })
                .collect(),
            retained: trace
                .retained
                .iter()
                .map(|retained| RetainedRow {
                    fingerprint: retained.fingerprint.clone(),
                    ciphertext: self.cipher.seal(
                        &turn.tenant,
                        &retained.fingerprint,
                        &retained.item,
                    ),
                    expires_at_ms: retained.expires_at_ms,
                })
                .collect(),
            build: trace.build.clone(),
            dictionary: chosen.dictionary,
            dictionary_made: chosen.made,
        }
    }
}
