//! Redaction: what `secrets = "redact"` does to a provider's items, and what every log
//! line or error made of outside text passes through. Each detected secret is replaced
//! by `[REDACTED:<kind>]` (the detector's name); only kinds and counts are kept, never
//! a secret.
//!
//! [`scan_all`] (the detector's own `secrets::scan_all`) is the one place that locates
//! secrets (kind and byte range). Every redaction goes through it.

use crate::contract::{Item, RedactionCounts};
use crate::secrets;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// What a provider answer with a detected secret gives (`secrets` in a binding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecretHandling {
    /// The answer is refused: `SECRET_DETECTED` with the detector's name.
    #[default]
    Refuse,
    /// Each secret is replaced by `[REDACTED:<kind>]`; the items are kept.
    Redact,
}

impl SecretHandling {
    /// `refuse` or `redact`, as a binding spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SecretHandling::Refuse => "refuse",
            SecretHandling::Redact => "redact",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<SecretHandling> {
        match text {
            "refuse" => Some(SecretHandling::Refuse),
            "redact" => Some(SecretHandling::Redact),
            _ => None,
        }
    }
}

pub(crate) use crate::secrets::SecretMatch;

/// Every secret in `text` (kind and byte range), in order, without overlaps: the
/// detector's own [`secrets::scan_all`]. A private key's range runs through its `END`
/// line; a password in a URL is the password alone. A text without secrets costs one
/// keyword pass.
pub(crate) fn scan_all(text: &str) -> impl Iterator<Item = SecretMatch> + use<> {
    secrets::scan_all(text)
}

/// The marker that replaces a secret of `kind`.
pub(crate) fn marker(kind: &str) -> String {
    format!("[REDACTED:{kind}]")
}

fn count(counts: &mut RedactionCounts, kind: &str) {
    *counts.entry(kind.to_owned()).or_insert(0) += 1;
}

/// `text` with every secret replaced by its marker, counted into `counts`; `None` when
/// it holds none (the common case: one scan, no copy).
pub(crate) fn redact_text(text: &str, counts: &mut RedactionCounts) -> Option<String> {
    let mut found = scan_all(text).peekable();
    found.peek()?;
    let mut redacted = String::with_capacity(text.len());
    let mut copied = 0;
    for SecretMatch { kind, range } in found {
        redacted.push_str(&text[copied..range.start]);
        redacted.push_str(&marker(kind));
        count(counts, kind);
        copied = range.end;
    }
    redacted.push_str(&text[copied..]);
    Some(redacted)
}

fn redact_string(text: &mut String, counts: &mut RedactionCounts) {
    if let Some(redacted) = redact_text(text, counts) {
        *text = redacted;
    }
}

/// Redacts every string of a JSON value, keys included.
fn redact_json(value: &mut Value, counts: &mut RedactionCounts) {
    match value {
        Value::String(text) => redact_string(text, counts),
        Value::Array(elements) => elements.iter_mut().for_each(|v| redact_json(v, counts)),
        Value::Object(map) => redact_map(map, counts),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Redacts keys and values, in place and in order. A string value that holds no secret
/// on its own but does as the assignment `key: value` (`{"client_secret": "…"}`, which
/// the detector reads like `client_secret: …`) is replaced whole.
fn redact_map(map: &mut Map<String, Value>, counts: &mut RedactionCounts) {
    if secrets::scan_map(map).is_none() {
        return;
    }
    for (key, mut value) in std::mem::take(map) {
        let mut key = redact_text(&key, counts).unwrap_or(key);
        match &mut value {
            Value::String(text) => {
                redact_string(text, counts);
                if let Some(detector) = secrets::scan(&format!("{key}: {text}")) {
                    *text = marker(detector.name());
                    count(counts, detector.name());
                }
            }
            other => redact_json(other, counts),
        }
        // Two keys redacted alike stay two entries.
        while map.contains_key(&key) {
            key.push('\'');
        }
        map.insert(key, value);
    }
}

/// Redacts every field of an item (id, title, content, metadata keys and values,
/// `updatedAt`), counting into `counts`. `Err` names the field and detector when a
/// secret is still found afterwards — never expected, and then the answer is refused.
pub(crate) fn redact_item(
    item: &mut Item,
    counts: &mut RedactionCounts,
) -> Result<(), (&'static str, &'static str)> {
    redact_string(&mut item.id, counts);
    if let Some(title) = &mut item.title {
        redact_string(title, counts);
    }
    redact_string(&mut item.content, counts);
    if !item.metadata.is_empty() {
        redact_map(&mut item.metadata, counts);
    }
    if let Some(updated_at) = &mut item.updated_at {
        redact_string(updated_at, counts);
    }
    let left = [
        ("id", secrets::scan(&item.id)),
        ("title", item.title.as_deref().and_then(secrets::scan)),
        ("content", secrets::scan(&item.content)),
        ("metadata", secrets::scan_map(&item.metadata)),
        (
            "updatedAt",
            item.updated_at.as_deref().and_then(secrets::scan),
        ),
    ];
    match left
        .into_iter()
        .find_map(|(field, d)| d.map(|d| (field, d.name())))
    {
        Some(found) => Err(found),
        None => Ok(()),
    }
}

/// Text from outside ctxd (a provider's error, a database's message) as a log line or
/// an error may show it: every secret replaced by its marker, and — should one still be
/// found — the whole text replaced by the marker.
pub(crate) fn redacted(text: &str) -> Cow<'_, str> {
    let mut counts = RedactionCounts::new();
    match redact_text(text, &mut counts) {
        None => Cow::Borrowed(text),
        Some(redacted) => match secrets::scan(&redacted) {
            None => Cow::Owned(redacted),
            Some(detector) => Cow::Owned(marker(detector.name())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Credential-shaped samples are assembled at run time, as in the detector's tests.
    fn github_token() -> String {
        format!("{}{}", "ghp_", "aB3".repeat(14))
    }

    fn private_key() -> String {
        format!(
            "{} RSA {}-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\nAbCdEf==\n{} RSA {}-----",
            "-----BEGIN", "PRIVATE KEY", "-----END", "PRIVATE KEY"
        )
    }

    fn connection_string() -> String {
        format!("{}://app:{}@db.internal:5432/app", "postgres", "hunter2")
    }

    fn redact(text: &str) -> (String, RedactionCounts) {
        let mut counts = RedactionCounts::new();
        let redacted = redact_text(text, &mut counts).unwrap_or_else(|| text.to_owned());
        (redacted, counts)
    }

    #[test]
    fn clean_text_is_left_alone() {
        for text in [
            "",
            "Order ORD-77812 for CUST-1042, refund issued on 2024-03-05.",
            "see https://example.com/refunds and the token docs",
            "€ ünïcödé text with no secret at all",
        ] {
            let mut counts = RedactionCounts::new();
            assert_eq!(redact_text(text, &mut counts), None, "{text}");
            assert!(counts.is_empty());
            assert_eq!(scan_all(text).count(), 0);
        }
    }

    #[test]
    fn a_secret_is_replaced_whole_and_the_text_around_it_kept() {
        let token = github_token();
        let long = format!("{token}{}", "Z9".repeat(30));
        for secret in [token.clone(), long] {
            let text = format!("Deploy with {secret} today.");
            let (redacted, counts) = redact(&text);
            assert_eq!(redacted, "Deploy with [REDACTED:github_token] today.");
            assert_eq!(
                counts,
                RedactionCounts::from([("github_token".to_owned(), 1)])
            );
        }
    }

    #[test]
    fn every_secret_of_a_text_is_found_in_order_with_its_range() {
        let token = github_token();
        let url = connection_string();
        let text = format!("a {token} b\nDATABASE_URL={url}\nc {token}");
        let found: Vec<SecretMatch> = scan_all(&text).collect();
        let kinds: Vec<&str> = found.iter().map(|m| m.kind).collect();
        assert_eq!(
            kinds,
            ["github_token", "connection_string_password", "github_token"]
        );
        assert_eq!(&text[found[0].range.clone()], token);
        assert!(text[found[1].range.clone()].contains("hunter2"));
        assert_eq!(&text[found[2].range.clone()], token);
        let (redacted, counts) = redact(&text);
        assert!(!redacted.contains("hunter2") && !redacted.contains(&token));
        assert_eq!(counts["github_token"], 2);
        assert_eq!(counts["connection_string_password"], 1);
        assert!(secrets::scan(&redacted).is_none(), "{redacted}");
    }

    #[test]
    fn a_private_key_is_redacted_to_its_end_line() {
        let text = format!("key:\n{}\nafter the key", private_key());
        let (redacted, counts) = redact(&text);
        assert_eq!(redacted, "key:\n[REDACTED:private_key]\nafter the key");
        assert_eq!(counts["private_key"], 1);
        // Without an END line, everything after the header goes.
        let (cut, _) = redact(&format!(
            "x {} EC {}-----\nMIIB",
            "-----BEGIN", "PRIVATE KEY"
        ));
        assert_eq!(cut, "x [REDACTED:private_key]");
    }

    #[test]
    fn secrets_far_into_a_long_text_and_beside_multibyte_characters() {
        let token = github_token();
        let text = format!("{}é {token} €{}", "prose ".repeat(20_000), "ü".repeat(100));
        let (redacted, counts) = redact(&text);
        assert_eq!(counts["github_token"], 1);
        assert!(redacted.ends_with(&format!("é [REDACTED:github_token] €{}", "ü".repeat(100))));
        assert_eq!(
            redacted.len(),
            text.len() - token.len() + "[REDACTED:github_token]".len()
        );
    }

    #[test]
    fn items_are_redacted_in_every_field_and_kept() {
        let token = github_token();
        let mut item = Item {
            id: format!("R-1 {token}"),
            title: Some(format!("about {token}")),
            content: format!("body {}", private_key()),
            metadata: serde_json::from_value(json!({
                "notes": {"nested": [format!("x {token}")]},
                "client_secret": "abcdefghijklmnopqrstuvwxyz0123",
                token.clone(): "key is the secret",
                "plan": "Enterprise"
            }))
            .unwrap(),
            updated_at: Some(token.clone()),
        };
        let mut counts = RedactionCounts::new();
        redact_item(&mut item, &mut counts).unwrap();
        let text = serde_json::to_string(&item).unwrap();
        assert!(!text.contains(&token), "{text}");
        assert!(!text.contains("abcdefghijklmnop"), "{text}");
        assert!(!text.contains("MIIEow"), "{text}");
        assert_eq!(item.id, "R-1 [REDACTED:github_token]");
        assert_eq!(item.metadata["plan"], "Enterprise");
        assert_eq!(
            item.metadata["client_secret"],
            "[REDACTED:generic_api_key_assignment]"
        );
        assert_eq!(counts["github_token"], 5);
        assert_eq!(counts["private_key"], 1);
        assert_eq!(counts["generic_api_key_assignment"], 1);
        let keys: Vec<&String> = item.metadata.keys().collect();
        assert_eq!(
            keys,
            ["notes", "client_secret", "[REDACTED:github_token]", "plan"]
        );
    }

    #[test]
    fn log_text_never_carries_a_secret() {
        assert_eq!(redacted("disk I/O error"), "disk I/O error");
        let token = github_token();
        let said = format!("upstream said: bad token {token}");
        assert_eq!(
            redacted(&said),
            "upstream said: bad token [REDACTED:github_token]"
        );
    }

    #[test]
    fn handling_is_spelled_as_in_a_binding() {
        for handling in [SecretHandling::Refuse, SecretHandling::Redact] {
            assert_eq!(SecretHandling::parse(handling.as_str()), Some(handling));
        }
        assert_eq!(SecretHandling::parse("mask"), None);
        assert_eq!(SecretHandling::default(), SecretHandling::Refuse);
    }
}
