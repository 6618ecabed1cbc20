//! The builder's bounds, each crossed by one byte, and its sizes against serde_json's.

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn draft() -> ItemDraft {
    ItemsBuilder::new(100).item().expect("room for an item")
}

/// The draft's own count equals the item's canonical JSON length.
fn assert_exact(draft: &ItemDraft) {
    assert_eq!(
        draft.bytes(),
        serde_json::to_vec(&draft.item).unwrap().len(),
        "{:?}",
        draft.item
    );
}

proptest! {
    #[test]
    fn string_lengths_are_serde_jsons(text in any::<String>()) {
        prop_assert_eq!(json_string_len(&text), serde_json::to_string(&text).unwrap().len());
    }

    #[test]
    fn item_sizes_are_serde_jsons(
        id in "[a-z0-9\"\\\\\n]{1,20}",
        title in proptest::option::of(any::<String>()),
        content in any::<String>(),
        updated_at in proptest::option::of("[0-9TZ:\u{1}-]{0,30}"),
        keys in proptest::collection::vec("[a-z\"\u{7}]{0,8}", 0..5),
        number in any::<f64>().prop_filter("finite", |n| n.is_finite()),
        integer in any::<i64>(),
    ) {
        let mut draft = draft();
        draft.id(id.as_str()).unwrap();
        if let Some(title) = &title {
            draft.title(title.as_str()).unwrap();
        }
        draft.content(content.as_str()).unwrap();
        if let Some(updated_at) = &updated_at {
            draft.updated_at(updated_at.as_str()).unwrap();
        }
        for (n, key) in keys.iter().enumerate() {
            let value = match n % 4 {
                0 => json!(number),
                1 => json!(integer),
                2 => json!({"nested": [null, true, false, "x\n", {}], "k": []}),
                _ => json!(content),
            };
            if draft.item.metadata.contains_key(key) {
                continue;
            }
            draft.metadata_copy(key, &value).unwrap();
        }
        assert_exact(&draft);
    }
}

#[test]
fn ids_must_be_present_and_short() {
    let mut empty = draft();
    assert_eq!(
        empty.id(""),
        Err(BoundsViolation::InvalidItem {
            index: 0,
            problem: "has an empty id"
        })
    );
    let mut long = draft();
    assert!(matches!(
        long.id("i".repeat(257)),
        Err(BoundsViolation::InvalidItem { .. })
    ));
    let mut longest = draft();
    longest.id("i".repeat(256)).unwrap();
    assert_exact(&longest);
    // An item never given an id is refused when it is taken.
    let mut builder = ItemsBuilder::new(5);
    let untitled = builder.item().unwrap();
    assert!(matches!(
        builder.push(untitled),
        Err(BoundsViolation::InvalidItem { index: 0, .. })
    ));
}

#[test]
fn an_item_may_be_exactly_the_limit_and_not_a_byte_more() {
    let mut fits = draft();
    fits.id("big").unwrap();
    let room = MAX_ITEM_BYTES - fits.bytes();
    fits.content("x".repeat(room)).unwrap();
    assert_eq!(fits.bytes(), MAX_ITEM_BYTES);
    assert_exact(&fits);

    let mut over = draft();
    over.id("big").unwrap();
    assert_eq!(
        over.content("x".repeat(room + 1)),
        Err(BoundsViolation::ItemOverLimit {
            index: 0,
            limit: MAX_ITEM_BYTES
        })
    );
    assert!(
        over.item.content.is_empty(),
        "nothing over the bound is kept"
    );
    // Escapes count: one newline is two bytes.
    let mut escaped = draft();
    escaped.id("big").unwrap();
    assert!(escaped.content("\n".repeat(room / 2 + 1)).is_err());
}

#[test]
fn metadata_is_measured_before_it_is_copied() {
    let huge = Json::Array((0..100_000).map(Json::from).collect());
    let mut over = draft();
    over.id("a").unwrap();
    assert_eq!(
        over.metadata_copy("numbers", &huge),
        Err(BoundsViolation::ItemOverLimit {
            index: 0,
            limit: MAX_ITEM_BYTES
        })
    );
    assert!(over.item.metadata.is_empty());
    let structured = json!({"tier": "gold", "seats": 12});
    let mut copied = draft();
    copied.id("a").unwrap();
    copied
        .metadata_copy_all(structured.as_object().unwrap())
        .unwrap();
    assert_eq!(Json::Object(copied.item.metadata.clone()), structured);
    assert_exact(&copied);
    assert!(matches!(
        copied.metadata_copy("tier", &json!("again")),
        Err(BoundsViolation::InvalidItem { .. })
    ));
}

#[test]
fn the_count_stops_at_the_requested_limit_and_at_100() {
    let mut builder = ItemsBuilder::new(2);
    for id in ["a", "b"] {
        let mut item = builder.item().unwrap();
        item.id(id).unwrap();
        builder.push(item).unwrap();
    }
    assert_eq!(
        builder.item().unwrap_err(),
        BoundsViolation::TooManyItems { count: 3, limit: 2 }
    );
    assert_eq!(
        ItemsBuilder::new(u32::MAX).expect(101),
        Err(BoundsViolation::TooManyItems {
            count: 101,
            limit: MAX_ITEMS
        })
    );
    assert_eq!(ItemsBuilder::new(u32::MAX).expect(100), Ok(()));
    assert_eq!(ItemsBuilder::new(0).limit(), 0);
}

#[test]
fn the_answer_stops_at_its_byte_bound() {
    let mut builder = ItemsBuilder::new(100);
    let mut taken = 0;
    let result = loop {
        let mut item = builder.item().unwrap();
        item.id(format!("i{taken}")).unwrap();
        let room = MAX_ITEM_BYTES - item.bytes();
        item.content("x".repeat(room)).unwrap();
        if let Err(violation) = builder.push(item) {
            break violation;
        }
        taken += 1;
    };
    assert_eq!(
        result,
        BoundsViolation::AnswerTooLarge {
            limit: MAX_RESPONSE_BYTES
        }
    );
    assert_eq!(taken, MAX_RESPONSE_BYTES / MAX_ITEM_BYTES);
    assert_eq!(
        crate::outcome::Failure::from(&result),
        crate::outcome::Failure::ResponseTooLarge
    );
}

#[test]
fn values_are_bounded_across_the_answer() {
    let many = Json::Array((0..1000).map(|_| Json::Null).collect());
    let mut builder = ItemsBuilder::new(100);
    let mut crossed = None;
    for index in 0..100 {
        let mut item = builder.item().unwrap();
        item.id(format!("i{index}")).unwrap();
        for key in 0..2 {
            if let Err(violation) = item.metadata_copy(&format!("k{key}"), &many) {
                crossed = Some(violation);
                break;
            }
        }
        if crossed.is_some() {
            break;
        }
        builder.push(item).unwrap();
    }
    assert_eq!(
        crossed,
        Some(BoundsViolation::TooManyValues { limit: MAX_VALUES })
    );
}

#[test]
fn secrets_are_refused_or_redacted_after_the_bounds() {
    let token = format!("{}{}", "ghp_", "a".repeat(36));
    let build = || {
        let mut builder = ItemsBuilder::new(5);
        let mut item = builder.item().unwrap();
        item.id("a").unwrap();
        item.content(format!("key {token}")).unwrap();
        builder.push(item).unwrap();
        builder
    };
    assert_eq!(
        build().finish(SecretHandling::Refuse).unwrap_err(),
        BoundsViolation::SecretDetected {
            index: 0,
            field: "content",
            detector: "github_token"
        }
    );
    let (items, counts) = build().finish(SecretHandling::Redact).unwrap();
    assert_eq!(items[0].content, "key [REDACTED:github_token]");
    assert_eq!(counts.get("github_token"), Some(&1));
}

#[test]
fn bounded_parses_stop_at_their_value_count() {
    assert_eq!(
        parse_bounded(br#"[1, 2, {"a": null}]"#, 5),
        Ok(json!([1, 2, {"a": null}]))
    );
    assert_eq!(
        parse_bounded(br#"[1, 2, {"a": null}]"#, 4),
        Err(ParseProblem::TooManyValues)
    );
    assert_eq!(parse_bounded(b"[1, 2", 100), Err(ParseProblem::NotJson));
    assert_eq!(parse_bounded(b"[1] x", 100), Err(ParseProblem::NotJson));
    // Exactly the room, then a syntax error: not JSON, not too many.
    assert_eq!(parse_bounded(b"[1, 2, x", 3), Err(ParseProblem::NotJson));
    let nested = format!("{}{}", "[".repeat(200), "]".repeat(200));
    assert_eq!(
        parse_bounded(nested.as_bytes(), 1000),
        Err(ParseProblem::NotJson),
        "serde_json's recursion limit holds"
    );
}
