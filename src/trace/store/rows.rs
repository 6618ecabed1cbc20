//! Rows: what one turn or one handle operation writes, serialized (and retained content
//! sealed) on the caller's thread before it reaches the writer, so the single writer
//! thread only runs SQL.

use super::codec::{self, Dictionaries, Dictionary};
use super::seal::RetentionCipher;
use crate::digest::keyed::DigestKey;
use crate::trace::query::{LAYER_KEY, PROVIDER_KEY};
use crate::trace::record::HandleOpRecord;
use crate::trace::record::TurnTrace;
use sha2::{Digest, Sha256};
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
    /// What searches find the turn by: its provider records' and layer decisions'
    /// (name, status) pairs, as one shape.
    pub shape: TurnShape,
    /// How many provider records the turn's body holds.
    pub provider_records: u32,
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

/// One (name, status) pair of a turn: a provider record's ([`PROVIDER_KEY`]) or a layer
/// decision's ([`LAYER_KEY`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShapeKey {
    pub kind: &'static str,
    pub name: String,
    pub status: &'static str,
}

/// The set of a turn's (name, status) pairs, sorted and without repeats, and its id: a
/// digest of the tenant and the set, the same in every process and store, so turns of
/// one shape share one set of `shape_keys` rows and no writer needs to look an id up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnShape {
    pub id: i64,
    pub keys: Vec<ShapeKey>,
}

impl TurnShape {
    /// The shape of `keys` (any order, repeats allowed) in `tenant`.
    pub(crate) fn new(tenant: &str, mut keys: Vec<ShapeKey>) -> TurnShape {
        keys.sort_unstable();
        keys.dedup();
        // Every field length-prefixed: no two different sets hash the same text.
        let mut hasher = Sha256::new();
        hasher.update(b"ctxd.turn-shape.v1");
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        field(tenant.as_bytes());
        for key in &keys {
            field(key.kind.as_bytes());
            field(key.name.as_bytes());
            field(key.status.as_bytes());
        }
        let digest = hasher.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        TurnShape {
            id: i64::from_be_bytes(first) & i64::MAX,
            keys,
        }
    }
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
        // A `shape_keys` entry's bytes beyond its columns: a `WITHOUT ROWID` cell.
        const KEY: usize = 32;
        let bytes = match self {
            Queued::Turn(rows) => {
                let turn = &rows.turn;
                ROW + turn.turn_id.len()
                    + turn.tenant.len()
                    + turn.project.len()
                    + turn.build_digest.len()
                    + turn.rendered_digest.as_ref().map_or(0, String::len)
                    + turn.record.len()
                    // The `turns (tenant, shape, seq, started_at_ms)` entry, and the
                    // shape's keys (written once per shape: counted whenever, to be
                    // sure of the first).
                    + ROW
                    + turn.tenant.len()
                    + rows
                        .shape
                        .keys
                        .iter()
                        .map(|k| KEY + turn.tenant.len() + k.kind.len() + k.name.len() + k.status.len())
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
            shape: TurnShape::new(
                &turn.tenant,
                trace
                    .providers
                    .iter()
                    .map(|provider| ShapeKey {
                        kind: PROVIDER_KEY,
                        name: provider.provider.clone(),
                        status: provider.status.as_str(),
                    })
                    .chain(turn.layers.iter().map(|layer| ShapeKey {
                        kind: LAYER_KEY,
                        name: layer.id.clone(),
                        status: layer.status.as_str(),
                    }))
                    .collect(),
            ),
            provider_records: u32::try_from(trace.providers.len()).unwrap_or(u32::MAX),
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
