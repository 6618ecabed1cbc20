//! Canonical JSON and SHA-256 digests: the one way ctxd turns a value into a stable
//! identity (build digests, binding digests, item fingerprints, rendered digests), and
//! the deployment key's keyed digests ([`keyed`]: locators, request digests).

pub mod keyed;

pub use keyed::{DigestKey, DigestKeyError};

use crate::contract::Item;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// `sha256:<64 hex>` of raw bytes.
pub(crate) fn sha256_tagged(bytes: &[u8]) -> String {
    tagged_hex("sha256:", &Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of raw bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    tagged_hex("", &Sha256::digest(bytes))
}

/// `tag` followed by the lowercase hex of `bytes`, written in one allocation (digests
/// are made several times per turn; `hex::encode` builds its text a char at a time).
pub(crate) fn tagged_hex(tag: &str, bytes: &[u8]) -> String {
    let mut text = vec![0; tag.len() + 2 * bytes.len()];
    text[..tag.len()].copy_from_slice(tag.as_bytes());
    hex::encode_to_slice(bytes, &mut text[tag.len()..]).expect("the slice is twice the bytes");
    String::from_utf8(text).expect("a tag and hex digits are UTF-8")
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no insignificant whitespace,
/// strings and numbers as serde_json writes them. Key order and formatting of the input
/// never change the output.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    write_canonical(value, &mut out);
    String::from_utf8(out).expect("JSON text is UTF-8")
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

/// An item's fingerprint: exactly [`canonical_digest`] of the item, written from its
/// fields — whose JSON names (`content`, `id`, `metadata`, `title`, `updatedAt`) are
/// already in canonical order — instead of through a copy of it as a JSON value. Every
/// item of every answer is fingerprinted once per turn.
pub(crate) fn item_fingerprint(item: &Item) -> String {
    let mut out = Vec::with_capacity(item.content.len() + item.id.len() + 64);
    out.extend_from_slice(b"{\"content\":");
    write_string(&item.content, &mut out);
    out.extend_from_slice(b",\"id\":");
    write_string(&item.id, &mut out);
    if !item.metadata.is_empty() {
        out.extend_from_slice(b",\"metadata\":");
        write_object(&item.metadata, &mut out);
    }
    if let Some(title) = &item.title {
        out.extend_from_slice(b",\"title\":");
        write_string(title, &mut out);
    }
    if let Some(updated_at) = &item.updated_at {
        out.extend_from_slice(b",\"updatedAt\":");
        write_string(updated_at, &mut out);
    }
    out.push(b'}');
    sha256_tagged(&out)
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::String(s) => write_string(s, out),
        scalar => serde_json::to_writer(&mut *out, scalar).expect("scalars always serialize"),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut Vec<u8>) {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(key, out);
        out.push(b':');
        write_canonical(value, out);
    }
    out.push(b'}');
}

/// A string as serde_json writes it (the bytes every digest was defined by), written by
/// [`crate::json`], which escapes many bytes at a time.
fn write_string(s: &str, out: &mut Vec<u8>) {
    crate::json::write(out, s).expect("strings always serialize");
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

    proptest::proptest! {
        #[test]
        fn strings_are_written_as_serde_json_writes_them(
            text in proptest::prop_oneof![
                proptest::arbitrary::any::<String>(),
                "[\\x00-\\x1f\"\\\\/\\x7f\u{2028}\u{2029}a-z]{0,40}",
            ]
        ) {
            let mut out = Vec::new();
            write_string(&text, &mut out);
            proptest::prop_assert_eq!(out, serde_json::to_vec(&text).unwrap());
        }
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(
            canonical_json(&json!({"k\"": "line\nbreak"})),
            r#"{"k\"":"line\nbreak"}"#
        );
    }

    fn item(title: Option<&str>, metadata: Value, updated_at: Option<&str>) -> Item {
        Item {
            id: "CUST-7391 \"quoted\" é".to_owned(),
            title: title.map(str::to_owned),
            content: "line\nbreak\ttab \u{1} ünï 😀 </fence>".to_owned(),
            metadata: serde_json::from_value(metadata).unwrap(),
            updated_at: updated_at.map(str::to_owned),
        }
    }

    #[test]
    fn item_fingerprints_are_the_canonical_digest_of_the_item() {
        let metadata = json!({
            "zeta": [3, 1.5, -2, 1e300, null, true, {"b": "x", "a": {"ü": 1, "u": 2}}],
            "Alpha": "x\u{7f}y",
            "": {},
            "tier": "gold"
        });
        for item in [
            item(None, json!({}), None),
            item(Some("Title \"t\""), json!({}), None),
            item(None, metadata.clone(), None),
            item(None, json!({}), Some("2026-11-30T10:00:00Z")),
            item(Some(""), metadata, Some("")),
            Item {
                id: String::new(),
                title: None,
                content: String::new(),
                metadata: Default::default(),
                updated_at: None,
            },
        ] {
            assert_eq!(item_fingerprint(&item), canonical_digest(&item), "{item:?}");
        }
    }

    #[test]
    fn tagged_hex_is_the_tag_and_lowercase_hex() {
        assert_eq!(tagged_hex("sha256:", &[0x00, 0xab, 0xff]), "sha256:00abff");
        assert_eq!(tagged_hex("", &[]), "");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
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
