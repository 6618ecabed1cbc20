//! Secret detection for provider items and Project text: named detectors in one pass, reported by name, never by the secret.
//!
//! The detectors, in the order [`scan`] reports them (the lowest index wins when several
//! match):
//!
//! | # | name | what it matches |
//! |---|------|-----------------|
//! | 0 | `private_key` | a PEM `-----BEGIN … PRIVATE KEY-----` header (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP …) |
//! | 1 | `aws_access_key_id` | `AKIA`/`ASIA`/`AGPA`/`AIDA`/`AROA`/… + 16 uppercase alphanumerics, word-bounded |
//! | 2 | `aws_secret_access_key` | an `aws_secret[_access][_key]` assignment of a 40-character base64 value |
//! | 3 | `github_token` | `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 36 or more, `github_pat_` + 22 or more |
//! | 4 | `gitlab_token` | `glpat-` + 20 or more |
//! | 5 | `slack_token` | `xoxa-`/`xoxb-`/`xoxp-`/`xoxo-`/`xoxs-`/`xoxr-` + 10 or more |
//! | 6 | `slack_webhook` | `hooks.slack.com/services/T…/B…/…` |
//! | 7 | `stripe_key` | `sk_live_`/`rk_live_`/`sk_test_`/`rk_test_` + 16 or more |
//! | 8 | `google_api_key` | `AIza` + 35 of `[0-9A-Za-z_-]` |
//! | 9 | `openai_key` | `sk-` + 20 or more alphanumerics, or `sk-proj-`/`sk-svcacct-`/`sk-admin-` + 20 or more |
//! | 10 | `anthropic_key` | `sk-ant-` + 20 or more |
//! | 11 | `npm_token` | `npm_` + 36 alphanumerics |
//! | 12 | `jwt` | three base64url segments, the first two starting with `eyJ`, each of 10 or more |
//! | 13 | `connection_string_password` | `scheme://user:password@host` with a non-empty password |
//! | 14 | `azure_storage_key` | `AccountKey=` + 40 or more base64 characters |
//! | 15 | `bearer_token` | `Authorization: Bearer <20 or more token chars>`, or `Bearer eyJ…` |
//! | 16 | `generic_api_key_assignment` | a credential-named key (`api_key`, `client_secret`, `secret_key`, …) assigned 16 or more non-space characters |
//!
//! The patterns aim at credentials, not at prose: ordinary URLs, emails, order and customer
//! ids, dates, UUIDs, hex digests and the words "token", "secret" or "password" scan clean.

use regex::RegexSet;
use serde_json::Value;
use std::fmt;
use std::sync::LazyLock;

/// A named secret detector. It holds only the detector's name, so neither its `Debug` nor
/// its `Display` can ever reveal the text it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detector {
    name: &'static str,
}

impl Detector {
    /// The detector's stable snake_case name, e.g. `github_token`.
    pub(crate) fn name(self) -> &'static str {
        self.name
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The detectors as `(name, pattern)`, in reporting order. See the module docs.
///
/// Word boundaries are ASCII (`(?-u:\b)`): a Unicode `\b` makes the regex engine give up
/// its DFA on non-ASCII text and scan a 1 MiB body about a hundred times slower.
const DETECTORS: &[(&str, &str)] = &[
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "aws_access_key_id",
        r"(?-u:\b)(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?-u:\b)",
    ),
    (
        "aws_secret_access_key",
        r#"(?i:(?-u:\b)aws[_.-]?secret(?:[_.-]?access)?(?:[_.-]?key)?)["']?\s*(?:=>|:=|[:=])\s*["']?[A-Za-z0-9/+]{40}"#,
    ),
    (
        "github_token",
        r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("gitlab_token", r"(?-u:\b)glpat-[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"(?-u:\b)xox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "slack_webhook",
        r"hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
    ),
    (
        "stripe_key",
        r"(?-u:\b)[sr]k_(?:live|test)_[0-9A-Za-z]{16,}",
    ),
    ("google_api_key", r"(?-u:\b)AIza[0-9A-Za-z_-]{35}"),
    (
        "openai_key",
        r"(?-u:\b)sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20,})",
    ),
    ("anthropic_key", r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{20,}"),
    ("npm_token", r"(?-u:\b)npm_[A-Za-z0-9]{36}"),
    (
        "jwt",
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{7,}\.eyJ[A-Za-z0-9_-]{7,}\.[A-Za-z0-9_-]{10,}",
    ),
    (
        "connection_string_password",
        r"(?-u:\b)[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:[^\s/?#@]+@[A-Za-z0-9\[._-]",
    ),
    (
        "azure_storage_key",
        r"(?-u:\b)AccountKey\s*=\s*[A-Za-z0-9+/]{40,}",
    ),
    (
        "bearer_token",
        r#"(?i:(?-u:\b)authorization)["']?\s*[:=]\s*["']?(?i:bearer)\s+[A-Za-z0-9._~+/-]{20,}|(?i:(?-u:\b)bearer)\s+eyJ[A-Za-z0-9_-]{7,}"#,
    ),
    (
        "generic_api_key_assignment",
        r#"(?i:(?-u:\b)(?:api[_-]?key|api[_-]?secret|client[_-]?secret|secret[_-]?key|app[_-]?secret|access[_-]?token|auth[_-]?token|private[_-]?token)(?-u:\b))["']?\s*(?:=>|:=|[:=])\s*["']?[^\s"'`,;*<>{}()\[\]]{16,}"#,
    ),
];

/// All detector patterns, compiled once into a single set so a scan is one pass.
static SET: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new(DETECTORS.iter().map(|&(_, pattern)| pattern))
        .expect("the built-in secret patterns compile")
});

/// The first detector (in the documented order) that matches anywhere in `text`.
pub fn scan(text: &str) -> Option<Detector> {
    SET.matches(text).iter().next().map(|index| Detector {
        name: DETECTORS[index].0,
    })
}

/// Scans every string (keys and values, recursively) of a JSON value.
///
/// Strings are visited depth-first in document order and the first string with a match
/// decides the detector. An object entry whose value is a string is also scanned as the
/// assignment `key: value`, so `{"client_secret": "…"}` is caught like `client_secret: …`.
pub(crate) fn scan_json(value: &Value) -> Option<Detector> {
    match value {
        Value::String(text) => scan(text),
        Value::Array(elements) => elements.iter().find_map(scan_json),
        Value::Object(map) => scan_map(map),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// Scans a JSON object's keys and values as [`scan_json`] does, without copying it.
pub(crate) fn scan_map(map: &serde_json::Map<String, Value>) -> Option<Detector> {
    map.iter().find_map(|(key, value)| {
        scan(key).or_else(|| match value {
            Value::String(text) => scan(text).or_else(|| scan(&format!("{key}: {text}"))),
            other => scan_json(other),
        })
    })
}

/// Every detector name, in reporting order, for docs and tests.
#[cfg(test)]
pub(crate) fn detector_names() -> impl Iterator<Item = &'static str> {
    DETECTORS.iter().map(|&(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashSet;

    /// One positive sample per detector. Credential-shaped samples are assembled at run
    /// time so this file never contains a literal that itself looks like a real secret.
    fn positives() -> Vec<(&'static str, String)> {
        let b64_40 = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYab".to_owned();
        assert_eq!(b64_40.len(), 40);
        let jwt = format!(
            "{}{}.{}{}.{}",
            "eyJ",
            "hbGciOiJIUzI1NiJ9",
            "eyJ",
            "zdWIiOiIxMjM0NTY3ODkwIn0",
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        );
        vec![
            (
                "private_key",
                format!(
                    "key:\n{} RSA {}-----\nMIIEow...\n",
                    "-----BEGIN", "PRIVATE KEY"
                ),
            ),
            (
                "aws_access_key_id",
                format!("id is {}{} ok", "AKIA", "IOSFODNN7EXAMPLE"),
            ),
            (
                "aws_secret_access_key",
                format!("{} = {}", "aws_secret_access_key", b64_40),
            ),
            (
                "github_token",
                format!("token {}{}", "ghp_", "a".repeat(36)),
            ),
            (
                "gitlab_token",
                format!("{}{}", "glpat-", "x1Y2z3".repeat(4)),
            ),
            (
                "slack_token",
                format!("{}{}", "xoxb-", "123456789012-abcdefABCDEF"),
            ),
            (
                "slack_webhook",
                format!(
                    "post to https://{}/services/{}/{}/{}",
                    "hooks.slack.com",
                    "T00000000",
                    "B00000000",
                    "X".repeat(24)
                ),
            ),
            (
                "stripe_key",
                format!("{}{}", "sk_live_", "4eC39HqLyjWDarjtT1zdp7dc"),
            ),
            (
                "google_api_key",
                format!("key={}{}", "AIza", "S".repeat(35)),
            ),
            ("openai_key", format!("OPENAI {}{}", "sk-", "Ab3".repeat(8))),
            (
                "anthropic_key",
                format!("{}{}", "sk-ant-", "api03-".to_owned() + &"z9".repeat(20)),
            ),
            ("npm_token", format!("{}{}", "npm_", "n".repeat(36))),
            ("jwt", format!("cookie={jwt};")),
            (
                "connection_string_password",
                format!(
                    "DATABASE_URL={}://app:{}@db.internal:5432/app",
                    "postgres", "hunter2"
                ),
            ),
            (
                "azure_storage_key",
                format!(
                    "DefaultEndpointsProtocol=https;AccountName=acct;{}={}==;",
                    "AccountKey",
                    "q".repeat(86)
                ),
            ),
            (
                "bearer_token",
                format!(
                    "{}: Bearer {}",
                    "Authorization",
                    "opaque.Tok3n-value_".repeat(2)
                ),
            ),
            (
                "generic_api_key_assignment",
                format!("{} = \"{}\"", "api_key", "a8f5f167f44f4964e6c998dee827110c"),
            ),
        ]
    }

    #[test]
    fn every_detector_has_a_positive_sample() {
        let samples = positives();
        let covered: Vec<_> = samples.iter().map(|(name, _)| *name).collect();
        assert_eq!(covered, detector_names().collect::<Vec<_>>());
        for (name, sample) in &samples {
            let found = scan(sample).map(Detector::name);
            assert_eq!(found, Some(*name), "sample for {name}");
        }
    }

    #[test]
    fn variants_are_detected() {
        let cases: Vec<(&str, String)> = vec![
            (
                "private_key",
                format!("{} {}-----", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!("{} EC {}-----", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!("{} DSA {}-----", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!("{} OPENSSH {}-----", "-----BEGIN", "PRIVATE KEY"),
            ),
            (
                "private_key",
                format!("{} ENCRYPTED {}-----", "-----BEGIN", "PRIVATE KEY"),
            ),
            ("aws_access_key_id", format!("{}{}", "ASIA", "Y".repeat(16))),
            ("aws_access_key_id", format!("{}{}", "AROA", "0".repeat(16))),
            (
                "aws_access_key_id",
                format!("café{}{}", "AKIA", "Z".repeat(16)),
            ),
            (
                "aws_secret_access_key",
                format!("{}: \"{}\"", "AWS_SECRET", "k/+9".repeat(10)),
            ),
            ("github_token", format!("{}{}", "ghs_", "b".repeat(40))),
            (
                "github_token",
                format!("{}{}", "github_pat_", "11AB_".repeat(5)),
            ),
            ("stripe_key", format!("{}{}", "rk_live_", "c".repeat(16))),
            ("stripe_key", format!("{}{}", "sk_test_", "d".repeat(16))),
            ("openai_key", format!("{}{}", "sk-proj-", "e_F-".repeat(6))),
            (
                "bearer_token",
                format!("Bearer {}{}", "eyJ", "f".repeat(12)),
            ),
            (
                "connection_string_password",
                format!("{}://{}@cluster0.example.net", "mongodb+srv", "u:p"),
            ),
            (
                "connection_string_password",
                format!("{}://:{}@cache:6379", "redis", "pw"),
            ),
            (
                "connection_string_password",
                format!("{}://me:{}@mq", "amqp", "pw"),
            ),
            (
                "connection_string_password",
                format!("{}://me:{}@example.com/x", "https", "pw"),
            ),
            (
                "generic_api_key_assignment",
                format!("{}: {}", "CLIENT_SECRET", "g".repeat(16)),
            ),
            (
                "generic_api_key_assignment",
                format!("{}={}", "secret_key", "h".repeat(20)),
            ),
        ];
        for (name, sample) in &cases {
            assert_eq!(
                scan(sample).map(Detector::name),
                Some(*name),
                "variant of {name}"
            );
        }
    }

    #[test]
    fn ordinary_prose_scans_clean() {
        let sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let negatives = [
            "See https://example.com/refunds for the refund policy.".to_owned(),
            "Visit https://example.com:8443/account?next=/orders#top today".to_owned(),
            "Your order ORD-77812 shipped on 2024-03-05.".to_owned(),
            "Customer CUST-1042 was created at 2024-03-05T10:15:30Z (2024-03-05T10:15:30+02:00)."
                .to_owned(),
            "Contact alice.smith@example.com or mailto:support@example.com.".to_owned(),
            "https://alice@example.com/profile has no password".to_owned(),
            "The token expired; please request a new token.".to_owned(),
            "Keep your secret safe and never share a secret with anyone.".to_owned(),
            "To reset your password: visit the portal and choose a new password.".to_owned(),
            "Password: use the reset link. Secret: none. Token: n/a.".to_owned(),
            "The API key is shown on the settings page; your client secret is hidden.".to_owned(),
            "api_key: see the dashboard".to_owned(),
            "api_key_id = 1234567890123456789".to_owned(),
            "api_key=****************************".to_owned(),
            "api_key=${API_KEY_FROM_THE_ENVIRONMENT}".to_owned(),
            "Request id 123e4567-e89b-12d3-a456-426614174000".to_owned(),
            format!("digest {sha256}"),
            format!("image@sha256:{sha256}"),
            "We use scikit-learn (sk-learn) and task-runner for the sk-1 model.".to_owned(),
            "Authorization: Bearer tokens are issued by the portal.".to_owned(),
            "Use the Bearer scheme in the Authorization header.".to_owned(),
            "Call 555-0100 between 09:00 and 17:00.".to_owned(),
            "Ticket AKIA-12 is about IAM access keys.".to_owned(),
            "Accounts: AccountKey is rotated monthly.".to_owned(),
            "Ship to 221B Baker Street, London NW1 6XE.".to_owned(),
            String::new(),
        ];
        for text in &negatives {
            assert_eq!(scan(text), None, "false positive on {text:?}");
        }
    }

    #[test]
    fn lowest_index_wins() {
        let text = format!(
            "{}{} and {}{}",
            "ghp_",
            "a".repeat(36),
            "AKIA",
            "IOSFODNN7EXAMPLE"
        );
        assert_eq!(scan(&text).map(Detector::name), Some("aws_access_key_id"));
    }

    #[test]
    fn scan_json_finds_nested_secrets() {
        let token = format!("{}{}", "ghp_", "a".repeat(36));
        let in_key = json!({ "outer": { token.clone(): "plain" } });
        let in_value = json!({ "outer": { "inner": { "note": token.clone() } } });
        let in_array = json!({ "list": [1, true, null, "plain", ["deeper", token.clone()]] });
        let as_assignment = json!({ "client_secret": "a8f5f167f44f4964e6c998dee827110c" });
        for value in [&in_key, &in_value, &in_array] {
            assert_eq!(
                scan_json(value).map(Detector::name),
                Some("github_token"),
                "{value}"
            );
        }
        assert_eq!(
            scan_json(&as_assignment).map(Detector::name),
            Some("generic_api_key_assignment")
        );
        assert_eq!(
            scan_json(&json!(token)).map(Detector::name),
            Some("github_token")
        );
        let clean = json!({
            "orderId": "ORD-77812",
            "customer": { "id": "CUST-1042", "email": "alice@example.com" },
            "url": "https://example.com/refunds",
            "password": "visit the portal to reset it",
            "tags": ["token", "secret", 42, 1.5, false, null],
        });
        assert_eq!(scan_json(&clean), None);
    }

    #[test]
    fn detector_names_are_unique_and_snake_case() {
        let names: Vec<_> = detector_names().collect();
        let unique: HashSet<_> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        assert_eq!(names.len(), SET.len());
        for name in names {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name} is not snake_case"
            );
        }
    }

    #[test]
    fn detector_never_shows_the_matched_text() {
        for (name, sample) in positives() {
            let detector = scan(&sample).expect("positive sample matches");
            assert_eq!(
                format!("{detector:?}"),
                format!("Detector {{ name: {name:?} }}")
            );
            assert_eq!(detector.to_string(), name);
        }
        let token = format!("{}{}", "ghp_", "a".repeat(36));
        let detector = scan(&token).unwrap();
        assert!(!format!("{detector:?}{detector}").contains(&token));
    }
}
