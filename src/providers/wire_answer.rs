//! A `context-provider.v1` lookup answer parsed straight into the budgeted item builder
//! ([`ItemsBuilder`]): the item count is checked as each item starts, each field is
//! measured as it is added, and metadata values are counted as they are parsed — the
//! parse stops at the first bound an answer crosses, whatever comes after it.
//!
//! The shape is [`crate::contract::LookupResponse`]'s exactly: `contract` and `items`
//! required, `version`, `revision`, `currentness` optional, other top-level keys
//! ignored; an item takes only `id`, `title`, `content`, `metadata`, `updatedAt`, each
//! once.

use super::items::{ItemDraft, ItemsBuilder, MAX_VALUES, ValueCounter};
use crate::bounds::BoundsViolation;
use crate::contract::Currentness;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::cell::{Cell, RefCell};
use std::fmt;

/// A lookup answer with its items mapped (their secret step still to come).
#[derive(Debug)]
pub(crate) struct WireAnswer {
    pub(crate) contract: String,
    pub(crate) version: Option<String>,
    pub(crate) revision: Option<String>,
    pub(crate) currentness: Currentness,
    pub(crate) items: ItemsBuilder,
}

/// Why an answer gave no items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireProblem {
    /// A bound crossed while the items were parsed.
    Bounds(BoundsViolation),
    /// Not a lookup answer: not JSON, a missing or mistyped field, an unknown item key.
    Malformed,
}

/// Parses `bytes` as a lookup answer for a call that asked for `limit` items.
pub(crate) fn parse(bytes: &[u8], limit: u32) -> Result<WireAnswer, WireProblem> {
    let state = State {
        items: RefCell::new(ItemsBuilder::new(limit)),
        values: ValueCounter::new(MAX_VALUES),
        crossed: Cell::new(None),
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = AnswerSeed { state: &state }
        .deserialize(&mut deserializer)
        .and_then(|fields| deserializer.end().map(|()| fields));
    if let Some(violation) = state.crossed.take() {
        return Err(WireProblem::Bounds(violation));
    }
    if state.values.exceeded() {
        return Err(WireProblem::Bounds(BoundsViolation::TooManyValues {
            limit: MAX_VALUES,
        }));
    }
    let fields = parsed.map_err(|_| WireProblem::Malformed)?;
    Ok(WireAnswer {
        contract: fields.contract,
        version: fields.version,
        revision: fields.revision,
        currentness: fields.currentness,
        items: state.items.into_inner(),
    })
}

/// What a parse shares between its seeds.
struct State {
    items: RefCell<ItemsBuilder>,
    values: ValueCounter,
    /// The bound crossed, which stopped the parse.
    crossed: Cell<Option<BoundsViolation>>,
}

impl State {
    /// Records `violation` as what stopped the parse, as an error serde passes up.
    fn cross<E: de::Error>(&self, violation: BoundsViolation) -> E {
        let error = E::custom(&violation);
        self.crossed.set(Some(violation));
        error
    }
}

/// The top-level fields other than the items.
struct AnswerFields {
    contract: String,
    version: Option<String>,
    revision: Option<String>,
    currentness: Currentness,
}

struct AnswerSeed<'s> {
    state: &'s State,
}

impl<'de> DeserializeSeed<'de> for AnswerSeed<'_> {
    type Value = AnswerFields;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<AnswerFields, D::Error> {
        deserializer.deserialize_map(self)
    }
}

/// Sets a field read once; a second occurrence is an error, as serde's derive says.
fn once<T, E: de::Error>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Visitor<'de> for AnswerSeed<'_> {
    type Value = AnswerFields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a lookup answer object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnswerFields, A::Error> {
        let mut contract = None;
        let mut version = None;
        let mut revision = None;
        let mut currentness = None;
        let mut items = false;
        while let Some(key) = map.next_key::<AnswerKey>()? {
            match key {
                AnswerKey::Contract => once(&mut contract, map.next_value()?, "contract")?,
                AnswerKey::Version => once(&mut version, map.next_value()?, "version")?,
                AnswerKey::Revision => once(&mut revision, map.next_value()?, "revision")?,
                AnswerKey::Currentness => {
                    once(&mut currentness, map.next_value()?, "currentness")?;
                }
                AnswerKey::Items => {
                    if items {
                        return Err(de::Error::duplicate_field("items"));
                    }
                    map.next_value_seed(ItemsSeed { state: self.state })?;
                    items = true;
                }
                AnswerKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !items {
            return Err(de::Error::missing_field("items"));
        }
        Ok(AnswerFields {
            contract: contract.ok_or_else(|| de::Error::missing_field("contract"))?,
            version: version.flatten(),
            revision: revision.flatten(),
            currentness: currentness.unwrap_or_default(),
        })
    }
}

/// A field name read without allocating.
macro_rules! keys {
    ($name:ident { $($variant:ident = $text:literal),* $(,)? } else $other:ident) => {
        enum $name { $($variant,)* $other }

        impl<'de> de::Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct KeyVisitor;
                impl Visitor<'_> for KeyVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a field name")
                    }
                    fn visit_str<E: de::Error>(self, key: &str) -> Result<$name, E> {
                        Ok(match key {
                            $($text => $name::$variant,)*
                            _ => $name::$other,
                        })
                    }
                }
                deserializer.deserialize_identifier(KeyVisitor)
            }
        }
    };
}

keys!(AnswerKey {
    Contract = "contract",
    Version = "version",
    Revision = "revision",
    Currentness = "currentness",
    Items = "items",
} else Other);

keys!(ItemKey {
    Id = "id",
    Title = "title",
    Content = "content",
    Metadata = "metadata",
    UpdatedAt = "updatedAt",
} else Unknown);

struct ItemsSeed<'s> {
    state: &'s State,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(draft) = seq.next_element_seed(ItemSeed { state: self.state })? {
            let pushed = self.state.items.borrow_mut().push(draft);
            pushed.map_err(|violation| self.state.cross(violation))?;
        }
        Ok(())
    }
}

/// One item: its draft is taken from the builder only once the item starts, so a list
/// of exactly the limit is not refused.
struct ItemSeed<'s> {
    state: &'s State,
}

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = ItemDraft;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ItemDraft, D::Error> {
        let draft = self.state.items.borrow().item();
        let draft = draft.map_err(|violation| self.state.cross(violation))?;
        deserializer.deserialize_map(ItemVisitor {
            state: self.state,
            draft,
        })
    }
}

struct ItemVisitor<'s> {
    state: &'s State,
    draft: ItemDraft,
}

impl<'de> Visitor<'de> for ItemVisitor<'_> {
    type Value = ItemDraft;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an item object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<ItemDraft, A::Error> {
        let state = self.state;
        let mut seen = [false; 5];
        let mut first = |index: usize, name: &'static str| {
            if std::mem::replace(&mut seen[index], true) {
                Err(de::Error::duplicate_field(name))
            } else {
                Ok(())
            }
        };
        while let Some(key) = map.next_key::<ItemKey>()? {
            let added = match key {
                ItemKey::Id => {
                    first(0, "id")?;
                    self.draft.id(map.next_value::<String>()?)
                }
                ItemKey::Title => {
                    first(1, "title")?;
                    match map.next_value::<Option<String>>()? {
                        Some(title) => self.draft.title(title),
                        None => Ok(()),
                    }
                }
                ItemKey::Content => {
                    first(2, "content")?;
                    self.draft.content(map.next_value::<String>()?)
                }
                ItemKey::Metadata => {
                    first(3, "metadata")?;
                    map.next_value_seed(MetadataSeed {
                        state,
                        draft: &mut self.draft,
                    })?;
                    Ok(())
                }
                ItemKey::UpdatedAt => {
                    first(4, "updatedAt")?;
                    match map.next_value::<Option<String>>()? {
                        Some(updated_at) => self.draft.updated_at(updated_at),
                        None => Ok(()),
                    }
                }
                ItemKey::Unknown => return Err(de::Error::custom("unknown item field")),
            };
            added.map_err(|violation| state.cross(violation))?;
        }
        if !seen[0] {
            return Err(de::Error::missing_field("id"));
        }
        Ok(self.draft)
    }
}

/// An item's metadata: each value parsed with its values counted, then measured into
/// the draft before it is kept.
struct MetadataSeed<'s, 'd> {
    state: &'s State,
    draft: &'d mut ItemDraft,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a metadata object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.state.values.seed())?;
            // A key given twice keeps its last value, as a JSON object read by serde does.
            let added = self.draft.metadata_owned(key, value);
            added.map_err(|violation| self.state.cross(violation))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::{MAX_ITEM_BYTES, MAX_ITEMS};
    use crate::contract::{CONTRACT, Item, LookupResponse};
    use crate::secrets::redact::SecretHandling;
    use serde_json::json;

    fn body(value: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&value).unwrap()
    }

    fn items_of(answer: WireAnswer) -> Vec<Item> {
        answer.items.finish(SecretHandling::Refuse).unwrap().0
    }

    /// Whatever serde's derive accepts, this parse gives the same; whatever it refuses,
    /// this refuses.
    #[test]
    fn the_parse_agrees_with_the_derived_shape() {
        let cases = [
            json!({"contract": CONTRACT, "items": []}),
            json!({"contract": CONTRACT, "version": "5.0.1", "revision": null, "currentness": "STALE",
                   "extra": {"ignored": [1, 2]},
                   "items": [{"id": "a", "title": null, "content": "x\n\"y\"", "updatedAt": "2026-01-01",
                              "metadata": {"n": 1.5, "deep": {"l": [null, true]}, "s": "t"}},
                             {"id": "b"}]}),
            json!({"items": [], "contract": "other.v9"}),
            json!({"contract": CONTRACT}),
            json!({"items": []}),
            json!({"contract": CONTRACT, "items": [{"title": "no id"}]}),
            json!({"contract": CONTRACT, "items": [{"id": "a", "surprise": 1}]}),
            json!({"contract": CONTRACT, "items": [{"id": "a", "content": null}]}),
            json!({"contract": CONTRACT, "items": [{"id": "a", "metadata": null}]}),
            json!({"contract": CONTRACT, "items": [{"id": "a", "metadata": [1]}]}),
            json!({"contract": CONTRACT, "items": [{"id": 7}]}),
            json!({"contract": CONTRACT, "items": {"id": "a"}}),
            json!({"contract": CONTRACT, "currentness": "FRESH", "items": []}),
            json!([1, 2]),
        ];
        for case in cases {
            let bytes = body(case.clone());
            let derived = serde_json::from_slice::<LookupResponse>(&bytes);
            let parsed = parse(&bytes, 100);
            match (derived, parsed) {
                (Ok(derived), Ok(parsed)) => {
                    assert_eq!(parsed.contract, derived.contract, "{case}");
                    assert_eq!(parsed.version, derived.version, "{case}");
                    assert_eq!(parsed.revision, derived.revision, "{case}");
                    assert_eq!(parsed.currentness, derived.currentness, "{case}");
                    assert_eq!(items_of(parsed), derived.items, "{case}");
                }
                (Err(_), Err(WireProblem::Malformed)) => {}
                (derived, parsed) => panic!("{case}: derive {derived:?}, parse {parsed:?}"),
            }
        }
        // Duplicates are refused as the derive refuses them.
        let repeated = r#"{"contract": "x", "items": [{"id": "a", "metadata": {"k": [1, 2], "j": 0, "k": "last"}}]}"#;
        let derived = serde_json::from_str::<LookupResponse>(repeated).unwrap();
        let parsed = parse(repeated.as_bytes(), 5).unwrap();
        let mut draft = ItemsBuilder::new(1).item().unwrap();
        draft.id("a").unwrap();
        let items = items_of(parsed);
        assert_eq!(items, derived.items);
        assert_eq!(
            crate::bounds::serialized_len(&items[0]),
            serde_json::to_vec(&derived.items[0]).unwrap().len()
        );
        for text in [
            r#"{"contract": "x", "contract": "y", "items": []}"#,
            r#"{"contract": "x", "items": [{"id": "a", "id": "b"}]}"#,
        ] {
            assert!(serde_json::from_str::<LookupResponse>(text).is_err());
            assert_eq!(
                parse(text.as_bytes(), 5).unwrap_err(),
                WireProblem::Malformed
            );
        }
        assert_eq!(
            parse(b"{} trailing", 5).unwrap_err(),
            WireProblem::Malformed
        );
    }

    #[test]
    fn the_item_count_stops_the_parse_at_the_first_item_past_the_limit() {
        let many: Vec<_> = (0..5000).map(|i| json!({"id": format!("r{i}")})).collect();
        let bytes = body(json!({"contract": CONTRACT, "items": many}));
        assert_eq!(
            parse(&bytes, 2).unwrap_err(),
            WireProblem::Bounds(BoundsViolation::TooManyItems { count: 3, limit: 2 })
        );
        assert_eq!(
            parse(&bytes, u32::MAX).unwrap_err(),
            WireProblem::Bounds(BoundsViolation::TooManyItems {
                count: MAX_ITEMS + 1,
                limit: MAX_ITEMS
            })
        );
        // Exactly the limit is fine.
        let two = body(json!({"contract": CONTRACT, "items": [{"id": "a"}, {"id": "b"}]}));
        assert_eq!(items_of(parse(&two, 2).unwrap()).len(), 2);
    }

    #[test]
    fn item_bounds_stop_the_parse() {
        let big = body(json!({"contract": CONTRACT, "items": [
            {"id": "a", "content": "x".repeat(MAX_ITEM_BYTES)}
        ]}));
        assert!(matches!(
            parse(&big, 5).unwrap_err(),
            WireProblem::Bounds(BoundsViolation::ItemOverLimit { index: 0, .. })
        ));
        let no_id = body(json!({"contract": CONTRACT, "items": [{"id": ""}]}));
        assert!(matches!(
            parse(&no_id, 5).unwrap_err(),
            WireProblem::Bounds(BoundsViolation::InvalidItem { index: 0, .. })
        ));
        let tiny_values: Vec<u8> = (0..200_000).map(|_| 0).collect();
        let values = body(json!({"contract": CONTRACT, "items": [
            {"id": "a", "metadata": {"zeros": tiny_values}}
        ]}));
        assert_eq!(
            parse(&values, 5).unwrap_err(),
            WireProblem::Bounds(BoundsViolation::TooManyValues { limit: MAX_VALUES })
        );
    }

    #[test]
    fn parsing_a_hostile_answer_costs_about_the_bounds_in_memory() {
        // 1 MiB of one-byte values would be ~36 MiB of JSON values in memory; the count
        // of values stops the parse long before.
        let mut text = String::from(
            r#"{"contract":"context-provider.v1","items":[{"id":"a","metadata":{"m":["#,
        );
        while text.len() < (1 << 20) - 16 {
            text.push_str("0,");
        }
        text.push_str("0]}}]}");
        let (parsed, peak) = crate::alloc_meter::peak_extra(|| parse(text.as_bytes(), 5));
        assert!(matches!(parsed, Err(WireProblem::Bounds(_))));
        assert!(peak < 12 << 20, "the parse held {peak} bytes at its peak");
    }
}
