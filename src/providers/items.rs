//! The one way every provider type turns an upstream answer into items: a budgeted
//! builder that enforces the contract's bounds while it maps — the item count, the bytes
//! of each item, the bytes of the whole answer, and the JSON values it may copy — and
//! stops at the first bound it crosses. Nothing is copied that would not fit: a text is
//! measured before it is copied, a JSON subtree is measured (stopping at the room left)
//! before it is cloned, so whatever an answer's shape, mapping it costs at most about
//! the bounds themselves.
//!
//! Sizes are those of the item's canonical JSON (`serde_json::to_vec(&item).len()`),
//! the measure [`crate::bounds`] defines, kept exactly as fields are added.
//!
//! A built set of items then passes the secret check of its binding
//! ([`ItemsBuilder::finish`]): refused, or redacted and measured again.

use crate::bounds::{
    self, BoundsViolation, MAX_ID_BYTES, MAX_ITEM_BYTES, MAX_ITEMS, MAX_RESPONSE_BYTES,
};
use crate::contract::{Item, RedactionCounts};
use crate::secrets::redact::SecretHandling;
use serde_json::{Map, Value as Json};
use std::borrow::Cow;

/// The most JSON values (nodes: every scalar, list and object) an answer's mapped items
/// may hold in their metadata, and the most an answer parsed by
/// [`parse_bounded`] may hold. A value costs ctxd tens of bytes however few it takes
/// on the wire (`0,` is two), so the byte bounds alone would let a 1 MiB answer become
/// tens of MiB; this keeps a parsed answer within about 10 MiB.
pub(crate) const MAX_VALUES: usize = 131_072;

/// `{"id":` + `,"content":` + `}` and the empty strings of both.
const EMPTY_ITEM_BYTES: usize = 6 + 11 + 1 + 2 + 2;
/// `,"title":`
const TITLE_KEY_BYTES: usize = 9;
/// `,"updatedAt":`
const UPDATED_AT_KEY_BYTES: usize = 13;
/// `,"metadata":{}`
const METADATA_KEY_BYTES: usize = 14;

/// The length of `text` as a JSON string (quotes and escapes included), exactly as
/// serde_json writes it.
pub(crate) fn json_string_len(text: &str) -> usize {
    let mut length = text.len() + 2;
    for &byte in text.as_bytes() {
        length += match byte {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
            0x00..=0x1f => 5,
            _ => 0,
        };
    }
    length
}

/// The canonical JSON length of `value`, or `None` when it is longer than `limit`: found
/// without writing it out and walking no further than `limit` bytes.
pub(crate) fn json_len_within(value: &Json, limit: usize) -> Option<usize> {
    measure(value, limit, usize::MAX)
        .ok()
        .map(|(bytes, _)| bytes)
}

/// [`json_len_within`] of an object given as its map.
pub(crate) fn map_len_within(map: &Map<String, Json>, limit: usize) -> Option<usize> {
    let mut meter = Meter {
        bytes: 0,
        values: 0,
        room: limit,
        values_room: usize::MAX,
    };
    meter.walk_map(map).ok().map(|()| meter.bytes)
}

/// Where a measure stopped: past its room of bytes or of values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    Bytes,
    Values,
}

/// The canonical JSON length of `value` and the values it holds, walking no further
/// than `room` bytes and `values` values.
fn measure(value: &Json, room: usize, values: usize) -> Result<(usize, usize), Over> {
    let mut meter = Meter {
        bytes: 0,
        values: 0,
        room,
        values_room: values,
    };
    meter.walk(value)?;
    Ok((meter.bytes, meter.values))
}

struct Meter {
    bytes: usize,
    values: usize,
    room: usize,
    values_room: usize,
}

impl Meter {
    fn add(&mut self, bytes: usize) -> Result<(), Over> {
        self.bytes += bytes;
        if self.bytes > self.room {
            Err(Over::Bytes)
        } else {
            Ok(())
        }
    }

    fn walk(&mut self, value: &Json) -> Result<(), Over> {
        self.values += 1;
        if self.values > self.values_room {
            return Err(Over::Values);
        }
        match value {
            Json::Null => self.add(4),
            Json::Bool(true) => self.add(4),
            Json::Bool(false) => self.add(5),
            Json::Number(number) => self.add(number_len(number)),
            Json::String(text) => self.add(json_string_len(text)),
            Json::Array(elements) => {
                self.add(2 + elements.len().saturating_sub(1))?;
                elements.iter().try_for_each(|element| self.walk(element))
            }
            Json::Object(map) => self.walk_map(map),
        }
    }

    fn walk_map(&mut self, map: &Map<String, Json>) -> Result<(), Over> {
        self.add(2 + map.len().saturating_sub(1))?;
        for (key, element) in map {
            self.add(json_string_len(key) + 1)?;
            self.walk(element)?;
        }
        Ok(())
    }
}

fn number_len(number: &serde_json::Number) -> usize {
    if let Some(n) = number.as_u64() {
        itoa::Buffer::new().format(n).len()
    } else if let Some(n) = number.as_i64() {
        itoa::Buffer::new().format(n).len()
    } else {
        // Floats: serde_json writes them with ryu; counting what it writes is exact.
        let mut counted = bounds::ByteCount(0);
        let _ = serde_json::to_writer(&mut counted, number);
        counted.0
    }
}

/// An answer's items as they are mapped: at most the requested limit (and never more
/// than [`MAX_ITEMS`]), each at most [`MAX_ITEM_BYTES`], together at most
/// [`MAX_RESPONSE_BYTES`] and [`MAX_VALUES`] metadata values.
#[derive(Debug)]
pub(crate) struct ItemsBuilder {
    limit: usize,
    items: Vec<Item>,
    /// The canonical bytes of the items taken so far.
    bytes: usize,
    /// Metadata values the items taken so far hold.
    values: usize,
}

impl ItemsBuilder {
    /// A builder for an answer to a call that asked for `requested_limit` items.
    pub(crate) fn new(requested_limit: u32) -> ItemsBuilder {
        let limit = usize::try_from(requested_limit).map_or(MAX_ITEMS, |l| l.min(MAX_ITEMS));
        ItemsBuilder {
            limit,
            items: Vec::new(),
            bytes: 0,
            values: 0,
        }
    }

    /// The most items this answer may hold.
    #[cfg(test)]
    fn limit(&self) -> usize {
        self.limit
    }

    /// Refuses an answer that says up front it holds `count` items, more than the limit:
    /// before any of them is mapped.
    pub(crate) fn expect(&self, count: usize) -> Result<(), BoundsViolation> {
        if count > self.limit {
            return Err(BoundsViolation::TooManyItems {
                count,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// The next item, or `TooManyItems` when the limit is already reached.
    pub(crate) fn item(&self) -> Result<ItemDraft, BoundsViolation> {
        let index = self.items.len();
        if index >= self.limit {
            return Err(BoundsViolation::TooManyItems {
                count: index + 1,
                limit: self.limit,
            });
        }
        Ok(ItemDraft {
            index,
            item: Item {
                id: String::new(),
                title: None,
                content: String::new(),
                metadata: Map::new(),
                updated_at: None,
            },
            bytes: EMPTY_ITEM_BYTES,
            values_room: MAX_VALUES - self.values,
            values: 0,
            has_id: false,
        })
    }

    /// Takes a mapped item: it must have its id, and fit in what the answer has left.
    pub(crate) fn push(&mut self, draft: ItemDraft) -> Result<(), BoundsViolation> {
        if !draft.has_id {
            return Err(BoundsViolation::InvalidItem {
                index: draft.index,
                problem: "has an empty id",
            });
        }
        self.bytes += draft.bytes;
        if self.bytes > MAX_RESPONSE_BYTES {
            return Err(BoundsViolation::AnswerTooLarge {
                limit: MAX_RESPONSE_BYTES,
            });
        }
        self.values += draft.values;
        self.items.push(draft.item);
        Ok(())
    }

    /// How many items were taken.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The items, after the binding's rule for secrets ([`bounds::check_secrets`]):
    /// refused, or redacted and measured again.
    pub(crate) fn finish(
        self,
        secrets: SecretHandling,
    ) -> Result<(Vec<Item>, RedactionCounts), BoundsViolation> {
        let mut items = self.items;
        let counts = bounds::check_secrets(&mut items, secrets)?;
        Ok((items, counts))
    }
}

/// One item being mapped, with the bytes it takes so far. Every setter measures before
/// it copies and refuses what would take the item past [`MAX_ITEM_BYTES`].
#[derive(Debug)]
pub(crate) struct ItemDraft {
    index: usize,
    item: Item,
    bytes: usize,
    /// Metadata values this item may still take.
    values_room: usize,
    values: usize,
    has_id: bool,
}

impl ItemDraft {
    /// The item's index in its answer.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    fn grow(&mut self, bytes: usize) -> Result<(), BoundsViolation> {
        if self.bytes + bytes > MAX_ITEM_BYTES {
            return Err(BoundsViolation::ItemOverLimit {
                index: self.index,
                limit: MAX_ITEM_BYTES,
            });
        }
        self.bytes += bytes;
        Ok(())
    }

    /// The id: non-empty, at most 256 bytes.
    pub(crate) fn id<'t>(&mut self, id: impl Into<Cow<'t, str>>) -> Result<(), BoundsViolation> {
        let id = id.into();
        let problem = if id.is_empty() {
            "has an empty id"
        } else if id.len() > MAX_ID_BYTES {
            "has an id longer than 256 bytes"
        } else {
            ""
        };
        if !problem.is_empty() {
            return Err(BoundsViolation::InvalidItem {
                index: self.index,
                problem,
            });
        }
        let before = json_string_len(&self.item.id);
        self.bytes -= before;
        self.grow(json_string_len(&id))
            .inspect_err(|_| self.bytes += before)?;
        self.item.id = id.into_owned();
        self.has_id = true;
        Ok(())
    }

    pub(crate) fn title<'t>(
        &mut self,
        title: impl Into<Cow<'t, str>>,
    ) -> Result<(), BoundsViolation> {
        let title = title.into();
        debug_assert!(self.item.title.is_none(), "a title is set once");
        self.grow(TITLE_KEY_BYTES + json_string_len(&title))?;
        self.item.title = Some(title.into_owned());
        Ok(())
    }

    pub(crate) fn content<'t>(
        &mut self,
        content: impl Into<Cow<'t, str>>,
    ) -> Result<(), BoundsViolation> {
        let content = content.into();
        debug_assert!(self.item.content.is_empty(), "content is set once");
        self.grow(json_string_len(&content) - 2)?;
        self.item.content = content.into_owned();
        Ok(())
    }

    pub(crate) fn updated_at<'t>(
        &mut self,
        updated_at: impl Into<Cow<'t, str>>,
    ) -> Result<(), BoundsViolation> {
        let updated_at = updated_at.into();
        debug_assert!(self.item.updated_at.is_none(), "updatedAt is set once");
        self.grow(UPDATED_AT_KEY_BYTES + json_string_len(&updated_at))?;
        self.item.updated_at = Some(updated_at.into_owned());
        Ok(())
    }

    /// A metadata entry whose value is the answer's `value`: measured (no further than
    /// the room left) before it is copied. A key already set is refused as malformed.
    pub(crate) fn metadata_copy(&mut self, key: &str, value: &Json) -> Result<(), BoundsViolation> {
        let size = self.metadata_room(key, value)?;
        self.bytes += size;
        self.item.metadata.insert(key.to_owned(), value.clone());
        Ok(())
    }

    /// A metadata entry whose value is the list of `nodes` (what a path selected), each
    /// measured before any is copied.
    pub(crate) fn metadata_copy_list(
        &mut self,
        key: &str,
        nodes: &[&Json],
    ) -> Result<(), BoundsViolation> {
        let framing = self.metadata_framing(key)?;
        let mut meter = Meter {
            bytes: 0,
            values: 1,
            room: MAX_ITEM_BYTES - (self.bytes + framing),
            values_room: self.values_room - self.values,
        };
        let measured = meter
            .add(2 + nodes.len().saturating_sub(1))
            .and_then(|()| nodes.iter().try_for_each(|node| meter.walk(node)));
        self.crossed(measured)?;
        self.values += meter.values;
        self.bytes += framing + meter.bytes;
        let list = nodes.iter().map(|node| (*node).clone()).collect();
        self.item.metadata.insert(key.to_owned(), Json::Array(list));
        Ok(())
    }

    /// A metadata entry the mapper already owns (a parsed value): measured before it is
    /// kept. A key given again replaces its value in place, as a JSON object read by
    /// serde keeps the last.
    pub(crate) fn metadata_owned(
        &mut self,
        key: String,
        value: Json,
    ) -> Result<(), BoundsViolation> {
        if let Some(old) = self.item.metadata.get(&key) {
            let (old_bytes, old_values) =
                measure(old, usize::MAX, usize::MAX).expect("an unbounded measure never stops");
            let room = MAX_ITEM_BYTES - (self.bytes - old_bytes);
            let (bytes, values) = self.crossed(measure(
                &value,
                room,
                self.values_room - (self.values - old_values),
            ))?;
            self.bytes = self.bytes - old_bytes + bytes;
            self.values = self.values - old_values + values;
            self.item.metadata.insert(key, value);
            return Ok(());
        }
        let size = self.metadata_room(&key, &value)?;
        self.bytes += size;
        self.item.metadata.insert(key, value);
        Ok(())
    }

    /// A metadata entry whose value is a text, measured before it is copied.
    pub(crate) fn metadata_text(
        &mut self,
        key: &str,
        text: Cow<'_, str>,
    ) -> Result<(), BoundsViolation> {
        let framing = self.metadata_framing(key)?;
        let size = framing + json_string_len(&text);
        if self.bytes + size > MAX_ITEM_BYTES {
            return Err(BoundsViolation::ItemOverLimit {
                index: self.index,
                limit: MAX_ITEM_BYTES,
            });
        }
        if self.values >= self.values_room {
            return Err(BoundsViolation::TooManyValues { limit: MAX_VALUES });
        }
        self.bytes += size;
        self.values += 1;
        self.item
            .metadata
            .insert(key.to_owned(), Json::String(text.into_owned()));
        Ok(())
    }

    /// Every entry of `map` as metadata, each measured before it is copied.
    pub(crate) fn metadata_copy_all(
        &mut self,
        map: &Map<String, Json>,
    ) -> Result<(), BoundsViolation> {
        // The whole map first, so an answer too large for its item copies nothing.
        let opening = if self.item.metadata.is_empty() {
            METADATA_KEY_BYTES
        } else {
            0
        };
        let room = (MAX_ITEM_BYTES - self.bytes).saturating_sub(opening);
        self.crossed(measure_map(map, room, self.values_room - self.values))?;
        for (key, value) in map {
            self.metadata_copy(key, value)?;
        }
        Ok(())
    }

    /// The bytes one more entry `key: value` takes, or the bound it crosses. Counts its
    /// values.
    fn metadata_room(&mut self, key: &str, value: &Json) -> Result<usize, BoundsViolation> {
        let framing = self.metadata_framing(key)?;
        let room = MAX_ITEM_BYTES - (self.bytes + framing);
        let (bytes, values) = self.crossed(measure(value, room, self.values_room - self.values))?;
        self.values += values;
        Ok(framing + bytes)
    }

    /// What one more metadata key takes besides its value (the comma or the opening of
    /// the map, the key, the colon), if it fits; a key already set is refused.
    fn metadata_framing(&self, key: &str) -> Result<usize, BoundsViolation> {
        if self.item.metadata.contains_key(key) {
            return Err(BoundsViolation::InvalidItem {
                index: self.index,
                problem: "has a metadata key twice",
            });
        }
        let opening = if self.item.metadata.is_empty() {
            METADATA_KEY_BYTES
        } else {
            1
        };
        let framing = opening + json_string_len(key) + 1;
        if self.bytes + framing > MAX_ITEM_BYTES {
            return Err(BoundsViolation::ItemOverLimit {
                index: self.index,
                limit: MAX_ITEM_BYTES,
            });
        }
        Ok(framing)
    }

    /// A measure's result as the bound it crossed.
    fn crossed<T>(&self, measured: Result<T, Over>) -> Result<T, BoundsViolation> {
        measured.map_err(|over| match over {
            Over::Bytes => BoundsViolation::ItemOverLimit {
                index: self.index,
                limit: MAX_ITEM_BYTES,
            },
            Over::Values => BoundsViolation::TooManyValues { limit: MAX_VALUES },
        })
    }

    /// The item as mapped so far (for tests).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

fn measure_map(map: &Map<String, Json>, room: usize, values: usize) -> Result<(), Over> {
    let mut meter = Meter {
        bytes: 0,
        values: 0,
        room,
        values_room: values,
    };
    for (key, value) in map {
        meter.add(json_string_len(key) + 2)?;
        meter.walk(value)?;
    }
    Ok(())
}

/// JSON text parsed into a value holding at most `max_values` values, stopping as soon
/// as it would hold more: the bounded parse of answers that are mapped by path (REST).
/// serde_json's own recursion limit bounds the depth.
pub(crate) fn parse_bounded(bytes: &[u8], max_values: usize) -> Result<Json, ParseProblem> {
    let counter = ValueCounter::new(max_values);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde::de::DeserializeSeed::deserialize(counter.seed(), &mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    match value {
        Ok(value) => Ok(value),
        Err(_) if counter.exceeded() => Err(ParseProblem::TooManyValues),
        Err(_) => Err(ParseProblem::NotJson),
    }
}

/// Why [`parse_bounded`] gave no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseProblem {
    NotJson,
    TooManyValues,
}

/// The values a parse may still make, and whether it tried to make more.
#[derive(Debug)]
pub(crate) struct ValueCounter {
    left: std::cell::Cell<usize>,
    exceeded: std::cell::Cell<bool>,
}

impl ValueCounter {
    pub(crate) fn new(room: usize) -> ValueCounter {
        ValueCounter {
            left: std::cell::Cell::new(room),
            exceeded: std::cell::Cell::new(false),
        }
    }

    /// A seed that deserializes one JSON value, counting its values down.
    pub(crate) fn seed(&self) -> CountedValue<'_> {
        CountedValue { counter: self }
    }

    /// Whether a parse stopped because it would have made more values than allowed.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }
}

/// A JSON value deserialized while its values are counted down; past zero the parse
/// stops.
#[derive(Clone, Copy)]
pub(crate) struct CountedValue<'c> {
    counter: &'c ValueCounter,
}

impl CountedValue<'_> {
    fn take<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.counter.left.get() {
            0 => {
                self.counter.exceeded.set(true);
                Err(E::custom("too many values"))
            }
            left => {
                self.counter.left.set(left - 1);
                Ok(())
            }
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for CountedValue<'_> {
    type Value = Json;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CountedValue<'_> {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Json, E> {
        self.take()?;
        Ok(Json::Bool(value))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Json, E> {
        self.take()?;
        Ok(Json::from(value))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Json, E> {
        self.take()?;
        Ok(Json::from(value))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Json, E> {
        self.take()?;
        Ok(serde_json::Number::from_f64(value).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Json, E> {
        self.take()?;
        Ok(Json::String(value.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<Json, E> {
        self.take()?;
        Ok(Json::String(value))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Json, E> {
        self.take()?;
        Ok(Json::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Json, E> {
        self.visit_unit()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Json, D::Error> {
        serde::de::DeserializeSeed::deserialize(self, deserializer)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        self.take()?;
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element_seed(self)? {
            elements.push(element);
        }
        Ok(Json::Array(elements))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        self.take()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Json::Object(object))
    }
}

#[cfg(test)]
mod tests;
