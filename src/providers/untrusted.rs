//! Text ctxd did not write — an upstream's error message, a child's stderr line, a tool's
//! error text, a label such as a version — made fit to show: every such text passes
//! [`UntrustedText`] before it reaches a log line, `/readyz`, `doctor`, `validate` or a
//! trace, and every label passes [`check_label`] before it is kept.
//!
//! [`UntrustedText`] applies one rule, in this order:
//! 1. **Bounded.** At most [`WINDOW_BYTES`] of the input are looked at, whatever its
//!    length; what is shown is cut to a limit ([`MAX_SHOWN_BYTES`] by default) and ends
//!    with [`CUT_MARK`] when cut.
//! 2. **The binding's own secrets masked.** [`Masks`] holds what the binding sends or
//!    gives away — bearer and auth tokens, a DSN's password, the values of the
//!    environment given to a stdio child — and each occurrence becomes
//!    `[REDACTED:binding_secret]`
//!    (the lookup value, where one is known, becomes `[VALUE]`).
//! 3. **Secret patterns masked** by the detector (`[REDACTED:<kind>]`,
//!    [`crate::secrets::redact`]); should one still be found, the whole text is its marker.
//! 4. **Escaped.** Bytes that are not UTF-8 are written `\xNN`; control characters
//!    (newline, CR, ESC, …, C1), line separators and bidirectional formatting characters
//!    are written as escapes (`\n`, `\r`, `\t`, `\u{1b}`), so the text can neither start
//!    a log line nor move a terminal's cursor.
//!
//! When the input is longer than the window, the last [`WINDOW_TAIL_BYTES`] of what the
//! window gives are never shown: a secret cut in two by the window's end is not matched
//! whole, so no part of it may be shown.

use crate::outcome::Failure;
use crate::secrets;
use crate::secrets::redact;
use aho_corasick::{AhoCorasick, MatchKind};
use std::borrow::Cow;
use std::fmt;
use std::fmt::Write as _;
use std::sync::Arc;

/// The most bytes of an untrusted text shown, unless a caller asks for another limit.
pub(crate) const MAX_SHOWN_BYTES: usize = 512;
/// The most bytes of an input ever looked at.
pub(crate) const WINDOW_BYTES: usize = 64 * 1024;
/// Of an input longer than the window, this much of the window's end is never shown.
pub(crate) const WINDOW_TAIL_BYTES: usize = 4 * 1024;
/// What ends a text that was cut.
pub(crate) const CUT_MARK: &str = "…[cut]";
/// The longest label (a version, a revision) a provider may report, in bytes.
pub(crate) const MAX_LABEL_BYTES: usize = 256;
/// Masked values shorter than this are not masked: they are flags and counts (`1`,
/// `yes`), not credentials, and masking them would wreck every line they occur in.
pub(crate) const MIN_MASKED_BYTES: usize = 4;

/// What replaces one of the binding's own secrets: a redaction marker, which the
/// detector knows for one and never reports again.
const MASKED: &str = "[REDACTED:binding_secret]";
const VALUE: &str = "[VALUE]";

/// The values of one binding (and call) that must never be shown, with what replaces
/// each. Cheap to clone: the matcher is built once and shared.
#[derive(Clone, Default)]
pub struct Masks {
    /// Each masked value with its replacement, as registered.
    entries: Vec<(Box<str>, &'static str)>,
    /// One leftmost-longest matcher over every entry; `None` with no entry.
    matcher: Option<Arc<AhoCorasick>>,
}

impl fmt::Debug for Masks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Masks")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl Masks {
    /// No masks: only secret patterns, bounds and escapes apply.
    pub fn none() -> Masks {
        Masks::default()
    }

    /// Registers a secret of the binding (a token, a password, an env value given to a
    /// child): it and its percent-encoded form become `[REDACTED:binding_secret]`. Values shorter than
    /// [`MIN_MASKED_BYTES`] are ignored.
    pub fn secret(&mut self, value: &str) -> &mut Masks {
        self.add(value, MASKED);
        let encoded: String =
            percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC)
                .collect();
        if encoded != value {
            self.add(&encoded, MASKED);
        }
        self
    }

    /// Registers the lookup value of a call: it becomes `[VALUE]`.
    pub fn value(&mut self, value: &str) -> &mut Masks {
        self.add(value, VALUE)
    }

    /// These masks with `other`'s added.
    pub fn with(&self, other: &Masks) -> Masks {
        let mut joined = self.clone();
        for (text, replacement) in &other.entries {
            joined.add(text, replacement);
        }
        joined
    }

    fn add(&mut self, value: &str, replacement: &'static str) -> &mut Masks {
        if value.len() < MIN_MASKED_BYTES || self.entries.iter().any(|(t, _)| &**t == value) {
            return self;
        }
        self.entries.push((value.into(), replacement));
        self.matcher = Some(Arc::new(
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(self.entries.iter().map(|(text, _)| text.as_bytes()))
                .expect("a matcher over a handful of literal values builds"),
        ));
        self
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `bytes` with every registered value replaced.
    fn apply(&self, bytes: &[u8]) -> Vec<u8> {
        let Some(matcher) = &self.matcher else {
            return bytes.to_vec();
        };
        let mut out = Vec::with_capacity(bytes.len());
        let mut copied = 0;
        for found in matcher.find_iter(bytes) {
            out.extend_from_slice(&bytes[copied..found.start()]);
            out.extend_from_slice(self.entries[found.pattern().as_usize()].1.as_bytes());
            copied = found.end();
        }
        out.extend_from_slice(&bytes[copied..]);
        out
    }

    /// Whether `text` holds a registered value.
    pub(crate) fn occurs_in(&self, text: &str) -> bool {
        self.matcher
            .as_ref()
            .is_some_and(|matcher| matcher.is_match(text))
    }
}

/// Text from outside ctxd after the rule of this module: bounded, masked, escaped. Its
/// `Display` is what may be shown.
#[derive(Clone, PartialEq, Eq)]
pub struct UntrustedText(Box<str>);

impl UntrustedText {
    /// `text`, shown within [`MAX_SHOWN_BYTES`].
    pub fn new(text: &str, masks: &Masks) -> UntrustedText {
        UntrustedText::from_bytes(text.as_bytes(), masks)
    }

    /// `bytes` (not necessarily UTF-8), shown within [`MAX_SHOWN_BYTES`].
    pub fn from_bytes(bytes: &[u8], masks: &Masks) -> UntrustedText {
        UntrustedText::with_limit(bytes, masks, MAX_SHOWN_BYTES)
    }

    /// `bytes`, shown within `limit` bytes (the cut mark included).
    pub fn with_limit(bytes: &[u8], masks: &Masks, limit: usize) -> UntrustedText {
        let cut = bytes.len() > WINDOW_BYTES;
        let window = &bytes[..bytes.len().min(WINDOW_BYTES)];
        let masked = masks.apply(window);
        let decoded = decode(&masked);
        let redacted = redact::redacted(&decoded);
        let mut shown = escaped(&redacted, false).into_owned();
        let mut truncated = cut;
        if cut {
            let keep = shown.floor_char_boundary(shown.len().saturating_sub(WINDOW_TAIL_BYTES));
            shown.truncate(keep);
        }
        if shown.len() > limit {
            let keep = shown.floor_char_boundary(limit.saturating_sub(CUT_MARK.len()));
            shown.truncate(keep);
            truncated = true;
        }
        if truncated {
            shown.push_str(CUT_MARK);
        }
        UntrustedText(shown.into_boxed_str())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0.into_string()
    }
}

impl fmt::Display for UntrustedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for UntrustedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// `bytes` as text, each byte that is not part of valid UTF-8 written `\xNN`.
fn decode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

/// Whether `c` must not reach a log line or a terminal raw: control characters (C0,
/// DEL, C1), the line and paragraph separators and the bidirectional formatting
/// characters.
pub(crate) fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every character of [`needs_escape`] written as an escape: `\n`, `\r`,
/// `\t`, else `\u{1b}`. Such text can neither start a line, nor move a terminal's
/// cursor or clear its screen, nor reorder what is shown. `keep_lines` keeps newlines and
/// tabs (multi-line text printed for people). Borrowed when nothing needs escaping.
pub(crate) fn escaped(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let escape = |c: char| !(keep_lines && matches!(c, '\n' | '\t')) && needs_escape(c);
    if !text.chars().any(escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !escape(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// Why a label (a version, a revision) an upstream reported is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LabelProblem {
    #[error("is {bytes} bytes, over the {limit}-byte label limit")]
    TooLong { bytes: usize, limit: usize },
    #[error("holds a control or formatting character")]
    Unprintable,
    #[error("holds a secret ({0})")]
    Secret(&'static str),
    #[error("holds one of the binding's own secrets")]
    BindingSecret,
}

impl LabelProblem {
    /// The failure a refused label gives the call, the same for every provider type:
    /// a secret is `SECRET_DETECTED`, anything else `INVALID_RESPONSE` (`INVALID_LABEL`).
    pub(crate) fn failure(self) -> Failure {
        match self {
            LabelProblem::Secret(detector) => Failure::SecretPattern(detector),
            LabelProblem::BindingSecret => Failure::CredentialReflected,
            LabelProblem::TooLong { .. } | LabelProblem::Unprintable => Failure::InvalidLabel,
        }
    }
}

/// A label an upstream reported — an answer's or a server's version, a revision — is
/// kept only when it is at most [`MAX_LABEL_BYTES`], printable on one line, and holds
/// neither a secret pattern nor one of the binding's own secrets.
pub(crate) fn check_label(label: &str, masks: &Masks) -> Result<(), LabelProblem> {
    if label.len() > MAX_LABEL_BYTES {
        return Err(LabelProblem::TooLong {
            bytes: label.len(),
            limit: MAX_LABEL_BYTES,
        });
    }
    if label.chars().any(needs_escape) {
        return Err(LabelProblem::Unprintable);
    }
    if masks.occurs_in(label) {
        return Err(LabelProblem::BindingSecret);
    }
    if let Some(detector) = secrets::scan(label) {
        return Err(LabelProblem::Secret(detector.name()));
    }
    Ok(())
}

/// Counts of what [`UntrustedText`] would redact in `text`, for tests.
#[cfg(test)]
fn redaction_counts(text: &str) -> crate::contract::RedactionCounts {
    let mut counts = crate::contract::RedactionCounts::new();
    let _ = redact::redact_text(text, &mut counts);
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn github_token() -> String {
        format!("{}{}", "ghp_", "aB3".repeat(14))
    }

    fn masks(secrets: &[&str]) -> Masks {
        let mut masks = Masks::none();
        for secret in secrets {
            masks.secret(secret);
        }
        masks
    }

    fn shown(text: &str, masks: &Masks) -> String {
        UntrustedText::new(text, masks).into_string()
    }

    #[test]
    fn plain_text_passes_unchanged() {
        assert_eq!(
            shown("connection refused (os error 111)", &Masks::none()),
            "connection refused (os error 111)"
        );
        assert_eq!(
            shown("Café Zürich — 東京 ✓", &Masks::none()),
            "Café Zürich — 東京 ✓"
        );
    }

    #[test]
    fn the_bindings_secrets_are_masked_in_every_form_they_are_sent() {
        let token = "tok-3d9f81c2b7";
        let password = "p@ss w0rd/x";
        let all = masks(&[token, password]);
        for (text, expected) in [
            (
                format!("401: bad token {token}"),
                "401: bad token [REDACTED:binding_secret]".to_owned(),
            ),
            (
                format!("auth failed for user app password {password}"),
                "auth failed for user app password [REDACTED:binding_secret]".to_owned(),
            ),
            (
                "dsn postgres://app:p%40ss%20w0rd%2Fx@db/app".to_owned(),
                "dsn postgres://app:[REDACTED:binding_secret]@db/app".to_owned(),
            ),
        ] {
            assert_eq!(shown(&text, &all), expected);
        }
    }

    #[test]
    fn the_longest_registered_value_wins() {
        let all = masks(&["secret-value", "secret-value-long"]);
        assert_eq!(
            shown("x secret-value-long y", &all),
            "x [REDACTED:binding_secret] y"
        );
    }

    #[test]
    fn short_values_are_not_masked() {
        let all = masks(&["1", "yes"]);
        assert!(all.is_empty());
        assert_eq!(shown("retry 1 yes", &all), "retry 1 yes");
    }

    #[test]
    fn the_lookup_value_is_masked_as_a_value() {
        let mut all = Masks::none();
        all.value("CUST-1042");
        assert_eq!(shown("no record CUST-1042", &all), "no record [VALUE]");
    }

    #[test]
    fn secret_patterns_are_masked() {
        let token = github_token();
        let text = shown(&format!("echo {token} back"), &Masks::none());
        assert_eq!(text, "echo [REDACTED:github_token] back");
        assert_eq!(redaction_counts(&token).get("github_token"), Some(&1));
    }

    #[test]
    fn control_characters_and_bad_bytes_are_escaped() {
        let text = UntrustedText::from_bytes(
            b"line\nforged INFO\r\x1b[2J\x1b]0;title\x07 \xff\xfe ok \xe2\x80\xae",
            &Masks::none(),
        );
        assert_eq!(
            text.as_str(),
            "line\\nforged INFO\\r\\u{1b}[2J\\u{1b}]0;title\\u{7} \\xff\\xfe ok \\u{202e}"
        );
        assert!(!text.as_str().chars().any(needs_escape));
    }

    #[test]
    fn long_text_is_cut_at_the_limit_on_a_char_boundary() {
        let text = UntrustedText::new(&"é".repeat(1000), &Masks::none());
        assert!(
            text.as_str().len() <= MAX_SHOWN_BYTES,
            "{}",
            text.as_str().len()
        );
        assert!(text.as_str().ends_with(CUT_MARK));
        let short = UntrustedText::with_limit(b"abcdefghijklmnop", &Masks::none(), 12);
        assert_eq!(short.as_str(), format!("abcd{CUT_MARK}"));
        assert!(short.as_str().len() <= 12);
        // Escapes count toward the limit.
        let escaped = UntrustedText::with_limit(&[b'\n'; 100], &Masks::none(), 40);
        assert!(escaped.as_str().len() <= 40);
    }

    #[test]
    fn a_huge_input_is_looked_at_only_within_its_window() {
        let token = github_token();
        let mut huge = "x".repeat(WINDOW_BYTES - 10).into_bytes();
        // A secret cut in two by the window's end: neither half is ever shown, however
        // large a limit the caller asks for.
        huge.extend_from_slice(token.as_bytes());
        huge.extend(std::iter::repeat_n(b'y', 1 << 20));
        let text = UntrustedText::with_limit(&huge, &Masks::none(), usize::MAX);
        assert!(
            !text.as_str().contains("ghp_"),
            "the secret's start is shown"
        );
        assert!(text.as_str().len() <= WINDOW_BYTES);
        assert!(text.as_str().ends_with(CUT_MARK));
    }

    #[test]
    fn labels_are_bounded_printable_and_free_of_secrets() {
        let none = Masks::none();
        assert_eq!(check_label("orders-db-7", &none), Ok(()));
        assert_eq!(check_label(&"v".repeat(MAX_LABEL_BYTES), &none), Ok(()));
        let long = check_label(&"v".repeat(MAX_LABEL_BYTES + 1), &none).unwrap_err();
        assert_eq!(
            long,
            LabelProblem::TooLong {
                bytes: MAX_LABEL_BYTES + 1,
                limit: MAX_LABEL_BYTES
            }
        );
        assert_eq!(long.failure(), Failure::InvalidLabel);
        assert_eq!(
            check_label("1.0\nINFO forged", &none),
            Err(LabelProblem::Unprintable)
        );
        let secret = check_label(&format!("v1 {}", github_token()), &none).unwrap_err();
        assert_eq!(secret, LabelProblem::Secret("github_token"));
        assert_eq!(
            secret.failure().status(),
            crate::contract::ProviderStatus::SecretDetected
        );
        let own = masks(&["tok-3d9f81c2b7"]);
        assert_eq!(
            check_label("build tok-3d9f81c2b7", &own),
            Err(LabelProblem::BindingSecret)
        );
    }

    #[test]
    fn masks_join() {
        let joined = masks(&["first-secret"]).with(masks(&["second-secret"]).value("CUST-1"));
        assert_eq!(
            shown("first-secret second-secret CUST-1", &joined),
            "[REDACTED:binding_secret] [REDACTED:binding_secret] [VALUE]"
        );
    }
}
