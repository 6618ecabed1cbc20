//! The secret detector measured against a generated corpus: credential formats built
//! from their public descriptions (prefix, length, alphabet, checksum, structure) in
//! realistic contexts, and near misses that are not secrets. Reports recall and the
//! false-positive rate, per-kind misses and every false positive; fails below a recall
//! of 0.97 or above 0.5 % false positives.
//!
//! A positive counts as found only when the detector's matches cover the whole secret
//! (what redaction replaces), not merely when the text is flagged somewhere.

mod formats;
mod near_misses;
mod rng;

use ctxd::providers::secrets::{self, SecretMatch};
use formats::{FORMATS, Shape, in_context};
use near_misses::NEAR_MISSES;
use rng::Rng;
use std::collections::BTreeMap;
use std::ops::Range;

const SAMPLES_PER_FORMAT: usize = 3;
const SAMPLES_PER_NEAR_MISS: usize = 3;
const SEED: u64 = 0x00C7_5D15_EC7E_7500;

pub(crate) struct Positive {
    pub(crate) kind: &'static str,
    pub(crate) text: String,
    pub(crate) secret: Range<usize>,
}

pub(crate) struct Negative {
    pub(crate) kind: &'static str,
    pub(crate) text: String,
}

/// The positives: every format, `SAMPLES_PER_FORMAT` times, bare tokens in rotating
/// contexts.
pub(crate) fn positives() -> Vec<Positive> {
    let mut rng = Rng::new(SEED);
    let mut out = Vec::new();
    for (index, &(kind, make)) in FORMATS.iter().enumerate() {
        for sample in 0..SAMPLES_PER_FORMAT {
            let (text, secret) = match make(&mut rng) {
                Shape::Token { var, secret } => {
                    let which = index * SAMPLES_PER_FORMAT + sample;
                    (in_context(var, &secret, which, &mut rng), secret)
                }
                Shape::Framed { text, secret } => (text, secret),
            };
            let start = text
                .find(&secret)
                .unwrap_or_else(|| panic!("{kind}: the secret is in its text"));
            out.push(Positive {
                kind,
                secret: start..start + secret.len(),
                text,
            });
        }
    }
    out
}

pub(crate) fn negatives() -> Vec<Negative> {
    let mut rng = Rng::new(SEED ^ 0xFFFF);
    let mut out = Vec::new();
    for &(kind, make) in NEAR_MISSES {
        for _ in 0..SAMPLES_PER_NEAR_MISS {
            out.push(Negative {
                kind,
                text: make(&mut rng),
            });
        }
    }
    out
}

/// Whether the matches together cover all of `secret`.
fn covered(matches: &[SecretMatch], secret: &Range<usize>) -> bool {
    let mut reached = secret.start;
    for found in matches {
        if found.range.start <= reached && found.range.end > reached {
            reached = found.range.end;
        }
    }
    reached >= secret.end
}

#[test]
fn the_corpus_is_as_large_and_varied_as_promised() {
    let positives = positives();
    let kinds: std::collections::BTreeSet<_> = positives.iter().map(|p| p.kind).collect();
    assert!(positives.len() >= 300, "{} positives", positives.len());
    assert!(kinds.len() >= 100, "{} kinds", kinds.len());
    assert!(
        negatives().len() >= 200,
        "{} near misses",
        negatives().len()
    );
    // Deterministic: the same seed gives the same corpus.
    let again = self::positives();
    assert!(positives.iter().zip(&again).all(|(a, b)| a.text == b.text));
}

#[test]
fn recall_and_false_positive_rate_on_the_corpus() {
    let positives = positives();
    let negatives = negatives();
    let mut missed: BTreeMap<&str, usize> = BTreeMap::new();
    let mut partial: Vec<String> = Vec::new();
    for positive in &positives {
        let matches: Vec<SecretMatch> = secrets::scan_all(&positive.text).collect();
        if !covered(&matches, &positive.secret) {
            *missed.entry(positive.kind).or_default() += 1;
            let kinds: Vec<_> = matches.iter().map(|m| m.kind).collect();
            partial.push(format!("{} (found {kinds:?})", positive.kind));
        } else {
            assert!(
                secrets::scan(&positive.text).is_some(),
                "{}: scan_all covers it, scan must flag it",
                positive.kind
            );
        }
    }
    let mut false_positives = Vec::new();
    for negative in &negatives {
        let flagged: Vec<&str> = secrets::scan_all(&negative.text).map(|m| m.kind).collect();
        let scanned = secrets::scan(&negative.text).map(|d| d.to_string());
        if !flagged.is_empty() || scanned.is_some() {
            false_positives.push(format!("{} as {flagged:?}/{scanned:?}", negative.kind));
        }
    }
    let found = positives.len() - missed.values().sum::<usize>();
    let recall = found as f64 / positives.len() as f64;
    let false_positive_rate = false_positives.len() as f64 / negatives.len() as f64;
    println!(
        "secret corpus: {} positives over {} kinds, {} near misses",
        positives.len(),
        FORMATS.len(),
        negatives.len()
    );
    println!("recall {recall:.4} ({found}/{})", positives.len());
    println!(
        "false positives {:.4} % ({}/{})",
        100.0 * false_positive_rate,
        false_positives.len(),
        negatives.len()
    );
    for (kind, count) in &missed {
        println!("missed {kind}: {count}/{SAMPLES_PER_FORMAT}");
    }
    for line in &partial {
        println!("  miss: {line}");
    }
    for line in &false_positives {
        println!("false positive: {line}");
    }
    assert!(recall >= 0.97, "recall {recall:.4} is below 0.97");
    assert!(
        false_positive_rate <= 0.005,
        "false-positive rate {false_positive_rate:.4} is above 0.005"
    );
}
