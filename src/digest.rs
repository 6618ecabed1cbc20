//! Canonical JSON and SHA-256 digests: the one way ctxd turns a value into a stable
//! identity (build digests, binding digests, item fingerprints, rendered digests).

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `sha256:<64 hex>` of raw bytes.
pub(crate) fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Lowercase hex SHA-256 of raw bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no insignificant whitespace,
/// strings and numbers as serde_json writes them. Key order and formatting of the input
/// never change the output.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_canonical(value, &mut out);
    out
}

/// Canonical JSON of any serializable value.
pub(crate) fn canonical_json_of<T: Serialize>(value: &T) -> String {
    let value = serde_json::to_value(value).expect("ctxd types always serialize to JSON");
    canonical_json(&value)
}

/// `sha256:<hex>` of the canonical JSON of a value.
pub fn canonical_digest<T: Serialize>(value: &T) -> String {
    sha256_tagged(canonical_json_of(value).as_bytes())
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push_str(&serde_json::to_string(s).expect("strings always serialize"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_digest() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(canonical_digest(&a), canonical_digest(&b));
    }

    #[test]
    fn array_order_and_values_do_change_the_digest() {
        assert_ne!(
            canonical_digest(&json!([1, 2])),
            canonical_digest(&json!([2, 1]))
        );
        assert_ne!(
            canonical_digest(&json!({"a": "x"})),
            canonical_digest(&json!({"a": "y"}))
        );
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(
            canonical_json(&json!({"k\"": "line\nbreak"})),
            r#"{"k\"":"line\nbreak"}"#
        );
    }

    #[test]
    fn tagged_digest_has_the_expected_shape() {
        let digest = sha256_tagged(b"abc");
        assert_eq!(
            digest,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
