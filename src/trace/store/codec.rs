//! Record bodies as the store keeps them: a record's JSON compressed with zstd against a
//! dictionary made from the first turn this process traced for the same tenant, project
//! and build. What repeats from turn to turn — keys, names, the contract, build and
//! binding digests, profile and objective — is then kept once, in the dictionary (a row
//! of `record_dictionaries`), and each row holds only what is its own. Decoding gives back
//! the exact JSON text, so every reader answers byte for byte as it did from plain JSON
//! rows (which rows written before this encoding still are: both are read).
//!
//! A build's first dictionary is that turn's records alone (raw content). The next
//! [`STATISTICS_SAMPLES`] turns of the build are kept as samples and then give it a
//! second dictionary: the same content in zstd's dictionary format, with the entropy
//! tables and repeat offsets those turns show ([`Dictionary::with_statistics`]). Against
//! it zstd takes about a quarter less time per body (it starts from tables and offsets
//! that fit instead of building its own tables for every body) and bodies come out about
//! 12 % smaller. Both dictionaries are stored, each once, and every body names the one
//! it was made with.
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
/// Turns after a build's first whose records give its dictionary its statistics.
pub(crate) const STATISTICS_SAMPLES: usize = 4;
/// The most of one turn's records kept as a sample.
const MAX_SAMPLE_BYTES: usize = 8 * 1024;
/// Room for zstd's dictionary header, entropy tables and repeat offsets ahead of the
/// content (they take a few hundred bytes).
const DICTIONARY_HEADER_ROOM: usize = 4 * 1024;
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
        Dictionary::of(bytes)
    }

    /// This dictionary's content in zstd's dictionary format, with the entropy tables and
    /// repeat offsets of `samples` (texts like the ones it will compress). `None` when
    /// zstd reports an error or would not keep the whole content: this dictionary then
    /// serves as it is. (zstd pads content shorter than its format asks for, and takes
    /// any samples.)
    pub(crate) fn with_statistics(&self, samples: &[Vec<u8>]) -> Option<Dictionary> {
        let content = &self.bytes[..];
        let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
        let flat = samples.concat();
        let mut bytes = vec![0u8; content.len() + DICTIONARY_HEADER_ROOM];
        let params = zstd_sys::ZDICT_params_t {
            compressionLevel: LEVEL,
            notificationLevel: 0,
            dictID: zstd_dictionary_id(content),
        };
        // SAFETY: every pointer comes with its length from a live slice or vector:
        // `bytes` is writable for `bytes.len()` bytes, `content` and `flat` readable for
        // theirs, `sizes` holds `sizes.len()` sample lengths that add up to `flat.len()`.
        // zstd keeps none of them after the call and writes only inside `bytes`.
        let written = unsafe {
            zstd_sys::ZDICT_finalizeDictionary(
                bytes.as_mut_ptr().cast(),
                bytes.len(),
                content.as_ptr().cast(),
                content.len(),
                flat.as_ptr().cast(),
                sizes.as_ptr(),
                u32::try_from(sizes.len()).ok()?,
                params,
            )
        };
        // SAFETY: a pure function of the returned code.
        if unsafe { zstd_sys::ZDICT_isError(written) } != 0 {
            return None;
        }
        bytes.truncate(written);
        // The header and tables come first; the whole content must follow them.
        bytes.ends_with(content).then(|| Dictionary::of(bytes))
    }

    fn of(bytes: Vec<u8>) -> Dictionary {
        let digest = Sha256::digest(&bytes);
        let id = i64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        Dictionary {
            id,
            compress: CDict::create(&bytes, LEVEL),
            bytes: bytes.into(),
        }
    }
}

/// The id zstd writes into a dictionary's header and the frames made with it: taken from
/// the content, so the same content and samples always give the same bytes, and kept in
/// the range zstd leaves to private dictionaries (32 768 to 2³¹ − 1).
fn zstd_dictionary_id(content: &[u8]) -> u32 {
    const FIRST: u32 = 32_768;
    const END: u32 = 1 << 31;
    let digest = Sha256::digest(content);
    let bits = u32::from_le_bytes(digest[..4].try_into().expect("4 bytes"));
    FIRST + bits % (END - FIRST)
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
    tenants: HashMap<String, HashMap<String, HashMap<String, Built>>>,
    count: usize,
}

impl Kept {
    fn get(&self, tenant: &str, project: &str, build: &str) -> Option<&Built> {
        self.tenants.get(tenant)?.get(project)?.get(build)
    }

    fn get_mut(&mut self, tenant: &str, project: &str, build: &str) -> Option<&mut Built> {
        self.tenants
            .get_mut(tenant)?
            .get_mut(project)?
            .get_mut(build)
    }
}

/// A build's dictionary, and while it still learns its statistics, the samples so far.
#[derive(Debug)]
struct Built {
    dictionary: Arc<Dictionary>,
    samples: Option<Vec<Vec<u8>>>,
}

impl Built {
    /// Keeps `text` as a sample while the dictionary learns; with the last one, the
    /// dictionary gets its statistics (or stays as it is when zstd can make none).
    fn learn(&mut self, text: &[u8]) -> Chosen {
        let mut made = false;
        if let Some(samples) = &mut self.samples {
            samples.push(text[..text.len().min(MAX_SAMPLE_BYTES)].to_vec());
            if samples.len() >= STATISTICS_SAMPLES {
                if let Some(learned) = self.dictionary.with_statistics(samples) {
                    self.dictionary = Arc::new(learned);
                    made = true;
                }
                self.samples = None;
            }
        }
        Chosen {
            dictionary: Arc::clone(&self.dictionary),
            made,
        }
    }
}

/// The dictionary a turn's records are encoded with.
pub(crate) struct Chosen {
    pub(crate) dictionary: Arc<Dictionary>,
    /// Made for this turn: its row is written with this turn's, and counts toward the
    /// bytes the turn reserves.
    pub(crate) made: bool,
}

impl Dictionaries {
    /// The dictionary to encode `text` (a turn's records, [`with_joined`]) of `tenant`'s
    /// `project` at `build` with: made from `text` when the build has none yet; the next
    /// [`STATISTICS_SAMPLES`] texts are kept to give it its statistics.
    pub(crate) fn for_build(
        &self,
        tenant: &str,
        project: &str,
        build: &str,
        text: &[u8],
    ) -> Chosen {
        if let Some(built) = self
            .by_build
            .read()
            .expect("not poisoned")
            .get(tenant, project, build)
            .filter(|built| built.samples.is_none())
        {
            return Chosen {
                dictionary: Arc::clone(&built.dictionary),
                made: false,
            };
        }
        let mut kept = self.by_build.write().expect("not poisoned");
        if let Some(built) = kept.get_mut(tenant, project, build) {
            return built.learn(text);
        }
        if kept.count >= MAX_DICTIONARIES {
            *kept = Kept::default();
        }
        let dictionary = Arc::new(Dictionary::from_exemplar(records_of(text)));
        kept.tenants
            .entry(tenant.to_owned())
            .or_default()
            .entry(project.to_owned())
            .or_default()
            .insert(
                build.to_owned(),
                Built {
                    dictionary: Arc::clone(&dictionary),
                    samples: Some(Vec::with_capacity(STATISTICS_SAMPLES)),
                },
            );
        kept.count += 1;
        Chosen {
            dictionary,
            made: true,
        }
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
    #[error("the body's dictionary {0} does not load")]
    UnusableDictionary(i64),
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
    /// `None` when zstd cannot load `bytes`: a dictionary in zstd's format whose header
    /// or tables are damaged (any other bytes load, as raw content).
    pub(crate) fn new(bytes: &[u8]) -> Option<DecodingDictionary> {
        DDict::try_create(bytes).map(DecodingDictionary)
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
        let decoding = DecodingDictionary::new(&dictionary.bytes).unwrap();
        assert_eq!(decode(&body, &decoding).unwrap(), other);
        assert!(body.len() < other.len(), "{} bytes", body.len());
    }

    #[test]
    fn the_same_exemplar_gives_the_same_dictionary_and_one_per_build() {
        let a = Dictionary::from_exemplar([TURN, "{}"]);
        let b = Dictionary::from_exemplar([TURN, "{}"]);
        assert_eq!(a.id, b.id);
        let dictionaries = Dictionaries::default();
        let first = dictionaries
            .for_build("acme", "p", "b1", &turn_text(0))
            .dictionary;
        assert_eq!(
            first.id,
            Dictionary::from_exemplar(records_of(&turn_text(0))).id,
            "made from the build's first turn"
        );
        let again = dictionaries
            .for_build("acme", "p", "b1", &turn_text(1))
            .dictionary;
        assert!(Arc::ptr_eq(&first, &again));
        let other = dictionaries
            .for_build("acme", "p", "b2", &turn_text(1))
            .dictionary;
        assert_ne!(other.id, first.id);
    }

    /// zstd's magic number at the start of a dictionary in its own format.
    const ZSTD_DICTIONARY_MAGIC: [u8; 4] = 0xEC30_A437_u32.to_le_bytes();

    /// The records of turn `n` of one build, as [`with_joined`] writes them: a turn
    /// record and four provider records, with what differs from turn to turn (ids,
    /// keyed digests, locators, the nonce, times).
    fn turn_text(n: u32) -> Vec<u8> {
        let hex = |what: &str| -> String {
            Sha256::digest(format!("{what} {n}"))
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect()
        };
        let at = 1_796_177_917_032_u64 + u64::from(n) * 37;
        let mut text = format!(
            r#"{{"kind":"ctxd.turn.v1","turnId":"{}","tenant":"acme","project":"support","buildDigest":"sha256:bb8f3039753f74cf6c7c5317fe6804f970149d193cf997f0061368dfbd30e9f9","profile":"default","inputs":[{{"key":"customerId","digest":"hmac-sha256:{}"}}],"blocked":false,"nonce":"{}","startedAtMs":{at},"durationMs":2}}"#,
            &hex("turn")[..32],
            hex("input"),
            &hex("nonce")[..32],
        );
        for provider in ["crm", "orders", "billing", "tickets"] {
            text.push('\n');
            text.push_str(&format!(
                r#"{{"kind":"context.provider.v1","provider":"{provider}","contract":"context-provider.v1","requestDigest":"hmac-sha256:{}","lookupKey":"customerId","invoked":true,"observedAtMs":{},"items":[{{"locator":"{provider}/item-{}","fingerprint":"sha256:a691d75f6e575adf5a4379446744cdc83760227255c2942f0db904a540cf6cd6","bytes":101}}],"status":"OK","source":"LIVE","retention":{{"policy":"digest","ttlMs":604800000,"contentRetained":false}}}}"#,
                hex(provider),
                at + 2,
                &hex(&format!("{provider} locator"))[..16],
            ));
        }
        text.into_bytes()
    }

    #[test]
    fn a_builds_dictionary_learns_its_statistics_from_the_turns_after_the_first() {
        let dictionaries = Dictionaries::default();
        let chosen = dictionaries.for_build("acme", "p", "b1", &turn_text(0));
        assert!(chosen.made, "the first turn makes the build's dictionary");
        let raw = chosen.dictionary;
        assert!(
            !raw.bytes.starts_with(&ZSTD_DICTIONARY_MAGIC),
            "raw content"
        );
        for n in 1..STATISTICS_SAMPLES as u32 {
            let chosen = dictionaries.for_build("acme", "p", "b1", &turn_text(n));
            assert!(!chosen.made);
            assert!(
                Arc::ptr_eq(&chosen.dictionary, &raw),
                "turn {n}: still the first"
            );
        }
        let chosen =
            dictionaries.for_build("acme", "p", "b1", &turn_text(STATISTICS_SAMPLES as u32));
        assert!(chosen.made, "the last sample's turn makes the learned one");
        let learned = chosen.dictionary;
        assert_ne!(learned.id, raw.id);
        assert!(
            learned.bytes.starts_with(&ZSTD_DICTIONARY_MAGIC),
            "zstd's format"
        );
        assert!(learned.bytes.ends_with(&raw.bytes), "the same content");
        let again = dictionaries.for_build("acme", "p", "b1", &turn_text(99));
        assert!(!again.made);
        assert!(Arc::ptr_eq(&again.dictionary, &learned), "learned once");
        let samples: Vec<Vec<u8>> = (1..=STATISTICS_SAMPLES as u32).map(turn_text).collect();
        assert_eq!(
            raw.with_statistics(&samples).map(|d| d.id),
            Some(learned.id),
            "the same content and samples give the same dictionary"
        );
        // Every body decodes with its own dictionary; the learned one makes smaller ones.
        let mut bytes = [0usize; 2];
        for n in 100..120 {
            let text = turn_text(n);
            for (total, dictionary) in bytes.iter_mut().zip([&raw, &learned]) {
                let body = encode(dictionary, &text);
                assert_eq!(dictionary_of(&body), Ok(dictionary.id));
                let decoding = DecodingDictionary::new(&dictionary.bytes).unwrap();
                assert_eq!(decode(&body, &decoding).unwrap().as_bytes(), &text[..]);
                *total += body.len();
            }
        }
        assert!(
            bytes[1] < bytes[0],
            "learned {} against raw {}",
            bytes[1],
            bytes[0]
        );
        let wrong = DecodingDictionary::new(&raw.bytes).unwrap();
        let body = encode(&learned, turn_text(7));
        assert!(
            decode(&body, &wrong).is_err(),
            "its frames name their dictionary"
        );
    }

    #[test]
    fn a_build_of_tiny_turns_learns_too_and_its_bodies_decode() {
        // Less content than zstd's format takes: it pads the dictionary ahead of it.
        let dictionaries = Dictionaries::default();
        let first = dictionaries
            .for_build("acme", "p", "b1", TURN.as_bytes())
            .dictionary;
        let tiny = |n: usize| TURN.replace("01a2", &format!("{n:04}"));
        let learned = (1..=STATISTICS_SAMPLES)
            .map(|n| {
                dictionaries
                    .for_build("acme", "p", "b1", tiny(n).as_bytes())
                    .dictionary
            })
            .last()
            .unwrap();
        assert_ne!(learned.id, first.id);
        assert!(learned.bytes.ends_with(&first.bytes));
        let decoding = DecodingDictionary::new(&learned.bytes).unwrap();
        for text in [tiny(9), String::new(), "ü".repeat(3)] {
            assert_eq!(decode(&encode(&learned, &text), &decoding).unwrap(), text);
        }
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
        let decoding = DecodingDictionary::new(&dictionary.bytes).unwrap();
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
        let wrong = DecodingDictionary::new(b"another dictionary entirely").unwrap();
        let decoded = decode(&encode(&dictionary, TURN), &wrong);
        assert_ne!(decoded.ok().as_deref(), Some(TURN));
    }
}
