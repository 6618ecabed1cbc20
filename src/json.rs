//! Compact JSON for the turn path's large bodies — the turn answer and a turn's trace
//! records — written by sonic-rs, whose string escaping scans many bytes at a time
//! (serde_json's looks each byte up in a table). The bytes are serde_json's own: the
//! same escapes (`\"`, `\\`, `\n`-style short forms, `\u00XX` for the other control
//! characters, nothing else), the same shortest float forms, `null` for a non-finite
//! float, maps and struct fields in the order given. The tests hold that against
//! serde_json. Parsing stays with serde_json, whose recursion limit guards untrusted
//! input.

use serde::Serialize;

/// Appends `value` as compact JSON to `out`.
///
/// Fails only where serde_json would: a map key it refuses (a sequence, say), or a
/// `Serialize` implementation that fails.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), sonic_rs::Error> {
    sonic_rs::to_writer(out, value)
}

/// `value` as compact JSON, in a buffer of its own.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, sonic_rs::Error> {
    sonic_rs::to_vec(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, Number, Value};
    use std::collections::BTreeMap;

    fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
        let ours = to_vec(value).expect("serializes");
        let theirs = serde_json::to_vec(value).expect("serializes");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
        assert_eq!(ours, theirs);
    }

    /// Any JSON value: strings of any characters (control characters, quotes,
    /// backslashes, line and paragraph separators, astral planes), integers at both
    /// ends of their ranges, finite floats of every magnitude, nested arrays and maps.
    fn any_value() -> impl Strategy<Value = Value> {
        let text = prop_oneof![
            any::<String>(),
            "[\\x00-\\x1f\"\\\\/\\x7f\u{2028}\u{2029}a-z ]{0,40}",
            "[a-z0-9 ]{0,200}",
        ];
        let number = prop_oneof![
            any::<i64>().prop_map(Number::from),
            any::<u64>().prop_map(Number::from),
            any::<f64>().prop_filter_map("finite", Number::from_f64),
            (any::<i32>(), -30i32..30).prop_filter_map("finite", |(m, e)| Number::from_f64(
                f64::from(m) * 10f64.powi(e)
            )),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number.prop_map(Value::Number),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..8)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_value_is_written_as_serde_json_writes_it(value in any_value()) {
            same_as_serde_json(&value);
        }

        #[test]
        fn any_float_is_written_as_serde_json_writes_it(bits in any::<u64>(), small in any::<f32>()) {
            same_as_serde_json(&f64::from_bits(bits));
            same_as_serde_json(&small);
        }
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    enum Status {
        Ok,
        #[serde(rename = "SECRET_DETECTED")]
        SecretDetected,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Record {
        turn_id: String,
        status: Status,
        other: Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<String>,
        absent: Option<u64>,
        duration_ms: u64,
        offset: i64,
        blocked: bool,
        ratio: f32,
        counts: BTreeMap<String, u32>,
        by_number: BTreeMap<u16, &'static str>,
        pair: (u8, char),
        nested: Vec<Record>,
        unit: (),
    }

    #[test]
    fn derived_structs_enums_options_and_maps_are_written_as_serde_json_writes_them() {
        let leaf = Record {
            turn_id: "0193a8e4-7c1e-7000-8000-00000000002a".to_owned(),
            status: Status::Ok,
            other: Status::SecretDetected,
            skipped: None,
            absent: None,
            duration_ms: u64::MAX,
            offset: i64::MIN,
            blocked: true,
            ratio: 0.1,
            counts: [("github_token".to_owned(), 2), ("jwt".to_owned(), 0)].into(),
            by_number: [(404, "not found"), (7, "seven")].into(),
            pair: (255, '\u{1F600}'),
            nested: Vec::new(),
            unit: (),
        };
        let outer = Record {
            turn_id: "tab\there \"quoted\" back\\slash \u{0} \u{7f} é".to_owned(),
            status: Status::SecretDetected,
            other: Status::Ok,
            skipped: Some("kept".to_owned()),
            absent: Some(0),
            duration_ms: 0,
            offset: -1,
            blocked: false,
            ratio: f32::NAN,
            counts: BTreeMap::new(),
            by_number: BTreeMap::new(),
            pair: (0, '"'),
            nested: vec![leaf],
            unit: (),
        };
        same_as_serde_json(&outer);
        let mut out = b"[".to_vec();
        write(&mut out, &outer.nested).unwrap();
        assert_eq!(
            &out[1..],
            serde_json::to_vec(&outer.nested).unwrap(),
            "write appends"
        );
    }

    #[test]
    fn a_map_key_serde_json_refuses_is_refused() {
        let map: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        assert!(serde_json::to_vec(&map).is_err());
        assert!(to_vec(&map).is_err());
    }
}
