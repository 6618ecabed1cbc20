//! The secret detector measured against a generated corpus: credential formats built
//! from their public descriptions (prefix, length, alphabet, checksum, structure) in
//! realistic contexts, the test cases of gitleaks' default rule set reproduced the same
//! way, and near misses that are not secrets (ctxd's own and gitleaks' false-positive
//! cases). Reports recall, per-kind misses and every false positive; fails below a
//! recall of 0.99 or on any false positive.
//!
//! A positive counts as found only when the detector's matches cover the whole secret
//! (what redaction replaces), not merely when the text is flagged somewhere. With
//! `SECRET_CORPUS_SHOW` set, the test also prints each missed text and each flagged
//! near miss.

mod formats;
mod gitleaks;
mod gitleaks_near_misses;
mod near_misses;
mod rng;

use ctxd::secrets::{self, SecretMatch};
use formats::{FORMATS, Shape, in_context};
use gitleaks::{CASES, Context, SYNTAXES, in_syntax};
use near_misses::NEAR_MISSES;
use rng::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

const SAMPLES_PER_FORMAT: usize = 3;
const SAMPLES_PER_NEAR_MISS: usize = 3;
/// Samples of a gitleaks keyed rule, each in the next assignment syntax.
const SAMPLES_PER_SYNTAX_CASE: usize = 3;
const SEED: u64 = 0x00C7_5D15_EC7E_7500;

/// The corpus's seed: `SEED`, or another one from `SECRET_CORPUS_SEED` to try the
/// detector on a fresh draw of the same formats by hand.
fn seed() -> u64 {
    std::env::var("SECRET_CORPUS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(SEED)
}

pub(crate) struct Positive {
    pub(crate) kind: &'static str,
    pub(crate) text: String,
    pub(crate) secret: Range<usize>,
}

impl Positive {
    /// `secret` of `kind`, at its place in `text`.
    fn at(kind: &'static str, text: String, secret: &str) -> Positive {
        let start = text
            .find(secret)
            .unwrap_or_else(|| panic!("{kind}: the secret is in its text"));
        Positive {
            kind,
            secret: start..start + secret.len(),
            text,
        }
    }
}

pub(crate) struct Negative {
    pub(crate) kind: &'static str,
    pub(crate) text: String,
}

/// The positives: every format, `SAMPLES_PER_FORMAT` times, bare tokens in rotating
/// contexts; then every gitleaks case, keyed ones in `SAMPLES_PER_SYNTAX_CASE`
/// successive assignment syntaxes.
pub(crate) fn positives() -> Vec<Positive> {
    let mut rng = Rng::new(seed());
    let mut out = formats_positives(&mut rng);
    let mut syntax = 0;
    for (kind, context, make) in CASES {
        let kind: &'static str = kind;
        let mut push = |text: String, secret: String| out.push(Positive::at(kind, text, &secret));
        match context {
            Context::Syntaxes(identifier) => {
                for _ in 0..SAMPLES_PER_SYNTAX_CASE {
                    let secret = make(&mut rng);
                    let text = in_syntax(SYNTAXES[syntax % SYNTAXES.len()], identifier, &secret);
                    syntax += 1;
                    push(text, secret);
                }
            }
            Context::Sample(identifier) => {
                let secret = make(&mut rng);
                push(format!("{identifier}_api_token = \"{secret}\""), secret);
            }
            Context::Text(template) => {
                let secret = make(&mut rng);
                push(template.replace("{s}", &secret), secret);
            }
        }
    }
    out
}

fn formats_positives(rng: &mut Rng) -> Vec<Positive> {
    let mut out = Vec::new();
    for (index, &(kind, make)) in FORMATS.iter().enumerate() {
        for sample in 0..SAMPLES_PER_FORMAT {
            let (text, secret) = match make(rng) {
                Shape::Token { var, secret } => {
                    let which = index * SAMPLES_PER_FORMAT + sample;
                    (in_context(var, &secret, which, rng), secret)
                }
                Shape::Framed { text, secret } => (text, secret),
            };
            out.push(Positive::at(kind, text, &secret));
        }
    }
    out
}

pub(crate) fn negatives() -> Vec<Negative> {
    let mut rng = Rng::new(seed() ^ 0xFFFF);
    let mut out = Vec::new();
    for &(kind, make) in NEAR_MISSES {
        for _ in 0..SAMPLES_PER_NEAR_MISS {
            out.push(Negative {
                kind,
                text: make(&mut rng),
            });
        }
    }
    for &(kind, make) in gitleaks_near_misses::NEAR_MISSES {
        out.push(Negative {
            kind,
            text: make(&mut rng),
        });
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
    let kinds: BTreeSet<_> = positives.iter().map(|p| p.kind).collect();
    let gitleaks_rules = kinds.iter().filter(|k| k.starts_with("gitleaks/")).count();
    assert!(positives.len() >= 1_300, "{} positives", positives.len());
    assert!(kinds.len() >= 350, "{} kinds", kinds.len());
    assert!(gitleaks_rules >= 190, "{gitleaks_rules} gitleaks rules");
    assert!(
        negatives().len() >= 600,
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
            if std::env::var_os("SECRET_CORPUS_SHOW").is_some() {
                println!(
                    "MISS {:?} secret {:?}",
                    positive.text,
                    &positive.text[positive.secret.clone()]
                );
            }
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
            if std::env::var_os("SECRET_CORPUS_SHOW").is_some() {
                println!("FP {:?}", negative.text);
            }
            false_positives.push(format!("{} as {flagged:?}/{scanned:?}", negative.kind));
        }
    }
    let found = positives.len() - missed.values().sum::<usize>();
    let recall = found as f64 / positives.len() as f64;
    let kinds: BTreeSet<_> = positives.iter().map(|p| p.kind).collect();
    let from_gitleaks = positives
        .iter()
        .filter(|p| p.kind.starts_with("gitleaks/"))
        .count();
    println!(
        "secret corpus: {} positives over {} kinds ({from_gitleaks} from gitleaks' test cases), {} near misses",
        positives.len(),
        kinds.len(),
        negatives.len()
    );
    println!("recall {recall:.4} ({found}/{})", positives.len());
    println!(
        "false positives {}/{}",
        false_positives.len(),
        negatives.len()
    );
    let samples = |kind: &str| positives.iter().filter(|p| p.kind == kind).count();
    for (kind, count) in &missed {
        println!("missed {kind}: {count}/{}", samples(kind));
    }
    for line in &partial {
        println!("  miss: {line}");
    }
    for line in &false_positives {
        println!("false positive: {line}");
    }
    assert!(recall >= 0.99, "recall {recall:.4} is below 0.99");
    assert!(
        false_positives.is_empty(),
        "{} false positives",
        false_positives.len()
    );
}
