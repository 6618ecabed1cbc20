//! Record bodies as the store keeps them: a record's JSON compressed with zstd against a
//! dictionary made from the first turn this process traced for the same tenant, project
//! and build. What repeats from turn to turn — keys, names, the contract, build and
//! binding digests, profile and objective — is then kept once, in the dictionary (a row
//! of `record_dictionaries`), and each row holds only what is its own. Decoding gives back
//! the exact JSON text, so every reader answers byte for byte as it did from plain JSON
//! rows (which rows written before this encoding still are: both are read).
//!
//! A turn's body holds its turn record and then its provider records, one per line
//! ([`with_joined`]), so what they share is kept once too; provider rows then hold an
//! empty body.
//!
//! A body is `[format 1][dictionary id: i64 LE][JSON length: u32 LE][zstd frame]`.

use crate::json;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use zstd::zstd_safe::{CCtx, CDict, DCtx, DDict};

/// The first byte of a compressed body.
const FORMAT_ZSTD_DICTIONARY: u8 = 1;
const HEADER_BYTES: usize = 1 + 8 + 4;
/// zstd's level: its fastest standard strategy. Against the build's dictionary a turn's
/// records compress nearly as well as at the default level 3, for about half the CPU
/// on the turn's thread (docs/PERFORMANCE.md).
const LEVEL: i32 = 1;
/// The most of an exemplar turn a dictionary keeps.
const MAX_DICTIONARY_BYTES: usize = 32 * 1024;
/// Dictionaries a process keeps for encoding; beyond it they are made again.
const MAX_DICTIONARIES: usize = 1024;
/// The longest JSON a body may claim to decode to.
const MAX_RECORD_BYTES: usize = 256 * 1024 * 1024;
/// The most a thread's record text buffer keeps between turns; a larger turn's buffer
/// is let go after use.
const MAX_KEPT_TEXT_BYTES: usize = 256 * 1024;

/// What a compressed body was made with: its id is the first 8 bytes of the SHA-256 of
/// its bytes, so the same exemplar always gives the same id.
pub(crate) struct Dictionary {
    pub(crate) id: i64,
    pub(crate) bytes: Arc<[u8]>,
    compress: CDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl Dictionary {
    /// A dictionary of the records of one turn (at most [`MAX_DICTIONARY_BYTES`]).
    pub(crate) fn from_exemplar<R: AsRef<[u8]>>(
        records: impl IntoIterator<Item = R>,
    ) -> Dictionary {
        let mut bytes = Vec::new();
        for record in records {
            let record = record.as_ref();
            let room = MAX_DICTIONARY_BYTES - bytes.len();
            bytes.extend_from_slice(&record[..record.len().min(room)]);
        }
        let digest = Sha256::digest(&bytes);
        let id = i64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        Dictionary {
            id,
            compress: CDict::create(&bytes, LEVEL),
            bytes: bytes.into(),
        }
    }
}

/// The dictionaries records are encoded with, by tenant, project and build: shared by
/// every thread that encodes rows. Keyed level by level, so finding one (every turn)
/// borrows the names instead of copying them.
#[derive(Debug, Default)]
pub(crate) struct Dictionaries {
    by_build: RwLock<Kept>,
}

/// Tenant → project → build → dictionary, and how many are kept.
#[derive(Debug, Default)]
struct Kept {
    tenants: HashMap<String, HashMap<String, HashMap<String, Arc<Dictionary>>>>,
    count: usize,
}

impl Kept {
    fn get(&self, tenant: &str, project: &str, build: &str) -> Option<&Arc<Dictionary>> {
        self.tenants.get(tenant)?.get(project)?.get(build)
    }
}

impl Dictionaries {
    /// The dictionary of `tenant`'s `project` at `build`, made from `exemplar` (the
    /// records of the turn being encoded) when there is none yet.
    pub(crate) fn for_build(
        &self,
        tenant: &str,
        project: &str,
        build: &str,
        exemplar: impl FnOnce() -> Dictionary,
    ) -> Arc<Dictionary> {
        if let Some(found) = self
            .by_build
            .read()
            .expect("not poisoned")
            .get(tenant, project, build)
        {
            return Arc::clone(found);
        }
        let mut kept = self.by_build.write().expect("not poisoned");
        if let Some(found) = kept.get(tenant, project, build) {
            return Arc::clone(found);
        }
        if kept.count >= MAX_DICTIONARIES {
            *kept = Kept::default();
        }
        let dictionary = Arc::new(exemplar());
        kept.tenants
            .entry(tenant.to_owned())
            .or_default()
            .entry(project.to_owned())
            .or_default()
            .insert(build.to_owned(), Arc::clone(&dictionary));
        kept.count += 1;
        dictionary
    }
}

thread_local! {
    static COMPRESSOR: RefCell<CCtx<'static>> = RefCell::new(CCtx::create());
    static DECOMPRESSOR: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
    /// Where a turn's records are serialized before they are compressed: kept from
    /// turn to turn, so serializing them allocates nothing once it has grown.
    static RECORD_TEXT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A turn record and its provider records serialized as one text, a record per line
/// (compact JSON never holds a raw line break: one in a string is written `\n`, so
/// splitting the text at `\n` gives the records back), into this thread's reusable
/// buffer; `then` gets the text.
pub(crate) fn with_joined<T: Serialize, P: Serialize, R>(
    turn: &T,
    providers: &[P],
    then: impl FnOnce(&[u8]) -> R,
) -> R {
    RECORD_TEXT.with(|buffer| {
        let mut text = buffer.borrow_mut();
        text.clear();
        json::write(&mut text, turn).expect("a turn record always serializes");
        for provider in providers {
            text.push(b'\n');
            json::write(&mut text, provider).expect("a provider record always serializes");
        }
        let result = then(&text);
        if text.capacity() > MAX_KEPT_TEXT_BYTES {
            *text = Vec::new();
        }
        result
    })
}

/// The records of a text [`with_joined`] made.
pub(crate) fn records_of(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|&byte| byte == b'\n')
}

/// The body of `json`, compressed against `dictionary`.
pub(crate) fn encode(dictionary: &Dictionary, json: impl AsRef<[u8]>) -> Vec<u8> {
    let json = json.as_ref();
    let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(json.len()));
    COMPRESSOR
        .with(|context| {
            context
                .borrow_mut()
                .compress_using_cdict(&mut frame, json, &dictionary.compress)
        })
        .expect("the frame buffer holds zstd's bound");
    let mut body = Vec::with_capacity(HEADER_BYTES + frame.len());
    body.push(FORMAT_ZSTD_DICTIONARY);
    body.extend_from_slice(&dictionary.id.to_le_bytes());
    body.extend_from_slice(&(json.len() as u32).to_le_bytes());
    body.extend_from_slice(&frame);
    body
}

/// Why a stored body could not be decoded. Names the cause, never content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the body is not a known record encoding")]
    UnknownFormat,
    #[error("the body's dictionary {0} is not in the store")]
    MissingDictionary(i64),
    #[error("the body does not decompress: {0}")]
    Corrupt(String),
}

/// The dictionary id a body was encoded with.
pub(crate) fn dictionary_of(body: &[u8]) -> Result<i64, DecodeError> {
    if body.len() < HEADER_BYTES || body[0] != FORMAT_ZSTD_DICTIONARY {
        return Err(DecodeError::UnknownFormat);
    }
    Ok(i64::from_le_bytes(body[1..9].try_into().expect("8 bytes")))
}

/// A dictionary prepared for decoding.
pub(crate) struct DecodingDictionary(DDict<'static>);

impl DecodingDictionary {
    pub(crate) fn new(bytes: &[u8]) -> DecodingDictionary {
        DecodingDictionary(DDict::create(bytes))
    }
}

/// The JSON text of `body`, decoded with its dictionary.
pub(crate) fn decode(body: &[u8], dictionary: &DecodingDictionary) -> Result<String, DecodeError> {
    dictionary_of(body)?;
    let length = u32::from_le_bytes(body[9..13].try_into().expect("4 bytes")) as usize;
    if length > MAX_RECORD_BYTES {
        return Err(DecodeError::Corrupt(format!(
            "it claims {length} bytes, more than a record may hold"
        )));
    }
    let mut json = Vec::with_capacity(length);
    let written = DECOMPRESSOR
        .with(|context| {
            context.borrow_mut().decompress_using_ddict(
                &mut json,
                &body[HEADER_BYTES..],
                &dictionary.0,
            )
        })
        .map_err(|code| DecodeError::Corrupt(zstd::zstd_safe::get_error_name(code).to_owned()))?;
    if written != length {
        return Err(DecodeError::Corrupt(format!(
            "it gave {written} bytes, not the {length} it claims"
        )));
    }
    String::from_utf8(json).map_err(|_| DecodeError::Corrupt("not UTF-8".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TURN: &str =
        r#"{"kind":"ctxd.turn.v1","turnId":"01a2","tenant":"acme","buildDigest":"sha256:4ca9"}"#;

    #[test]
    fn a_body_decodes_to_the_exact_json_it_was_made_from() {
        let dictionary = Dictionary::from_exemplar([TURN]);
        let other = r#"{"kind":"ctxd.turn.v1","turnId":"77f0","tenant":"acme","buildDigest":"sha256:4ca9","ünïcode":"✓"}"#;
        let body = encode(&dictionary, other);
        assert_eq!(dictionary_of(&body), Ok(dictionary.id));
        let decoding = DecodingDictionary::new(&dictionary.bytes);
        assert_eq!(decode(&body, &decoding).unwrap(), other);
        assert!(body.len() < other.len(), "{} bytes", body.len());
    }

    #[test]
    fn the_same_exemplar_gives_the_same_dictionary_and_one_per_build() {
        let a = Dictionary::from_exemplar([TURN, "{}"]);
        let b = Dictionary::from_exemplar([TURN, "{}"]);
        assert_eq!(a.id, b.id);
        let dictionaries = Dictionaries::default();
        let first = dictionaries.for_build("acme", "p", "b1", || a);
        let again = dictionaries.for_build("acme", "p", "b1", || panic!("made once"));
        assert!(Arc::ptr_eq(&first, &again));
        let other = dictionaries.for_build("acme", "p", "b2", || Dictionary::from_exemplar(["x"]));
        assert_ne!(other.id, first.id);
    }

    #[test]
    fn joined_records_are_their_json_one_per_line() {
        let turn = serde_json::json!({"kind": "ctxd.turn.v1", "note": "two\nlines"});
        let providers = [
            serde_json::json!({"provider": "orders"}),
            serde_json::json!({"provider": "crm", "items": []}),
        ];
        let (text, records) = with_joined(&turn, &providers, |text| {
            let records: Vec<String> = records_of(text)
                .map(|record| String::from_utf8(record.to_vec()).unwrap())
                .collect();
            (String::from_utf8(text.to_vec()).unwrap(), records)
        });
        let expected: Vec<String> = std::iter::once(&turn)
            .chain(&providers)
            .map(|record| serde_json::to_string(record).unwrap())
            .collect();
        assert_eq!(records, expected, "a line break in a string stays escaped");
        assert_eq!(text, expected.join("\n"));
        // The next turn starts from an empty text, whatever the last one held.
        let again = with_joined(&turn, &[] as &[serde_json::Value], |text| text.to_vec());
        assert_eq!(again, expected[0].as_bytes());
    }

    #[test]
    fn a_thread_keeps_its_record_buffer_unless_a_turn_made_it_large() {
        let capacity = || RECORD_TEXT.with(|buffer| buffer.borrow().capacity());
        with_joined(&"small", &[] as &[&str], |_| ());
        let kept = capacity();
        assert!(kept > 0 && kept <= MAX_KEPT_TEXT_BYTES, "{kept}");
        let large = "x".repeat(MAX_KEPT_TEXT_BYTES + 1);
        let length = with_joined(&large, &[] as &[&str], <[u8]>::len);
        assert_eq!(length, large.len() + 2);
        assert_eq!(capacity(), 0, "let go after the turn that grew it");
    }

    #[test]
    fn a_damaged_body_is_an_error_never_a_panic() {
        let dictionary = Dictionary::from_exemplar([TURN]);
        let decoding = DecodingDictionary::new(&dictionary.bytes);
        let body = encode(&dictionary, TURN);
        assert_eq!(decode(b"{}", &decoding), Err(DecodeError::UnknownFormat));
        for cut in [HEADER_BYTES, body.len() - 1] {
            assert!(matches!(
                decode(&body[..cut], &decoding),
                Err(DecodeError::Corrupt(_))
            ));
        }
        let mut lying = body.clone();
        lying[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&lying, &decoding),
            Err(DecodeError::Corrupt(_))
        ));
        // Without a checksum a flipped bit may still decode, but never to the record.
        let mut flipped = body;
        let last = flipped.len() - 2;
        flipped[last] ^= 0xff;
        assert_ne!(decode(&flipped, &decoding).ok().as_deref(), Some(TURN));
        let wrong = DecodingDictionary::new(b"another dictionary entirely");
        let decoded = decode(&encode(&dictionary, TURN), &wrong);
        assert_ne!(decoded.ok().as_deref(), Some(TURN));
    }
}
