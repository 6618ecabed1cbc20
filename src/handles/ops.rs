//! The bounded operations, as pure functions of the material, the request and an
//! injected [`Clock`]: no I/O, no locks, deterministic under a test clock.
//!
//! Bounds, enforced across the whole result:
//! - `maxResults` bounds the number of entries;
//! - `maxBytes` bounds the *payload bytes* of all entries together: text and string
//!   values by their UTF-8 bytes, numeric values by their decimal digits, records by
//!   their canonical JSON size. The entry that crosses it is cut — text on a UTF-8
//!   boundary, a record by shortening its `content` — and marked `truncated`, and
//!   nothing follows it. `metadata` and `reduce` return no entries (their sizes and
//!   counts are not material), so they return 0 payload bytes;
//! - the wall-time limit is checked in every loop (per line, item or 64 KiB block); past
//!   it the operation fails with `time_limit_exceeded` — a result is never silently
//!   partial because of time, so `truncated` always means `maxResults` or `maxBytes`.
//!
//! Text material is seen as lines the way `str::lines` splits them (on `\n`, a `\r`
//! before it dropped, no empty last line) and as characters (Unicode scalar values) for
//! `peek head/tail`, `slice` and `partition size`. An item list is seen as items for
//! `peek`, `slice`, `partition size` and `reduce count`, and through each item's
//! `content` for `search` (per line) and `map` (per item).

use super::request::{Limits, MapFunction, Operation, PartitionBy, Peek, ReduceFunction};
use super::{HandleError, HandleMaterial, item_bytes};
use crate::contract::Item;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Bytes scanned between two clock checks when walking characters.
const BLOCK: usize = 64 * 1024;

/// Where an operation reads the time. Injected so tests control it.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// What an operation read of the material.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspected {
    pub bytes: u64,
    pub items: u64,
}

/// An operation's result, what it inspected (also when it failed) and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    pub result: Result<OpOutput, HandleError>,
    pub inspected: Inspected,
    pub elapsed: Duration,
}

/// A successful operation's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpOutput {
    pub entries: Vec<Entry>,
    /// `metadata` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// `reduce` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// Whether `maxResults` or `maxBytes` left something out.
    pub truncated: bool,
    /// Payload bytes of `entries`: never more than `maxBytes`.
    pub bytes_returned: usize,
}

/// One entry of a result: where it comes from, and one payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Partition chunk index (0-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk: Option<usize>,
    /// Item index (0-based): the item the entry is, or comes from, or a chunk's first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
    /// Line number (1-based): the line, or a line chunk's first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// Lines in a line chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<usize>,
    /// Character offset (0-based) of the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    #[serde(flatten)]
    pub payload: Payload,
    /// Whether this entry's payload was cut to stay within `maxBytes`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Entry {
    fn at() -> Entry {
        Entry {
            chunk: None,
            item: None,
            line: None,
            lines: None,
            start: None,
            payload: Payload::Text(String::new()),
            truncated: false,
        }
    }

    fn chunk(mut self, chunk: usize) -> Entry {
        self.chunk = Some(chunk);
        self
    }

    fn item(mut self, item: usize) -> Entry {
        self.item = Some(item);
        self
    }

    fn line(mut self, line: usize) -> Entry {
        self.line = Some(line);
        self
    }

    fn start(mut self, start: usize) -> Entry {
        self.start = Some(start);
        self
    }

    /// The bytes this entry counts against `maxBytes`.
    pub fn payload_bytes(&self) -> usize {
        self.payload.bytes()
    }
}

/// Exactly one payload per entry, serialized as its key (`"text": …`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Payload {
    Text(String),
    /// A `map` output: a string, or a number for `length`.
    Value(MapValue),
    /// One item of an item list.
    Record(Item),
    /// The items of a chunk of an item list.
    Records(Vec<Item>),
}

impl Payload {
    pub fn bytes(&self) -> usize {
        match self {
            Payload::Text(text) => text.len(),
            Payload::Value(MapValue::Text(text)) => text.len(),
            Payload::Value(MapValue::Number(n)) => digits(*n),
            Payload::Record(item) => item_bytes(item),
            Payload::Records(items) => items.iter().map(item_bytes).sum(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum MapValue {
    Text(String),
    Number(u64),
}

/// `metadata`: kind, sizes and counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// `text` or `items`.
    pub kind: &'static str,
    /// As [`HandleMaterial::bytes`].
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chars: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
    /// Sum of the items' `content` bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_bytes: Option<u64>,
}

/// Runs one operation on `material` within `limits`.
pub fn run(
    material: &HandleMaterial,
    op: &Operation,
    limits: &Limits,
    clock: &dyn Clock,
) -> Execution {
    let started = clock.now();
    let mut meter = Meter {
        clock,
        deadline: started.checked_add(limits.time_limit).unwrap_or(started),
        limit: limits.time_limit,
        inspected: Inspected::default(),
    };
    let mut out = Budget::new(limits);
    let result = execute(material, op, &mut meter, &mut out).map(|summary| out.finish(summary));
    Execution {
        result,
        inspected: meter.inspected,
        elapsed: clock.now().saturating_duration_since(started),
    }
}

/// The scalar part of a result.
#[derive(Default)]
struct Summary {
    metadata: Option<Metadata>,
    value: Option<u64>,
}

fn execute(
    material: &HandleMaterial,
    op: &Operation,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<Summary, HandleError> {
    match (material, op) {
        (material, Operation::Metadata) => metadata(material, meter),
        (HandleMaterial::Text(text), Operation::Peek(peek)) => {
            text_peek(text, *peek, meter, out).map(|()| Summary::default())
        }
        (HandleMaterial::Items(items), Operation::Peek(peek)) => {
            items_peek(items, *peek, meter, out).map(|()| Summary::default())
        }
        (HandleMaterial::Text(text), Operation::Slice { start, length }) => {
            text_slice(text, *start, *length, meter, out).map(|()| Summary::default())
        }
        (HandleMaterial::Items(items), Operation::Slice { start, length }) => {
            items_range(items, *start, *length, "op.start", meter, out).map(|()| Summary::default())
        }
        (material, Operation::Search { pattern }) => {
            search(material, pattern, meter, out).map(|()| Summary::default())
        }
        (material, Operation::Partition { by, size }) => {
            partition(material, *by, *size, meter, out).map(|()| Summary::default())
        }
        (material, Operation::Map(function)) => {
            map(material, *function, meter, out).map(|()| Summary::default())
        }
        (material, Operation::Reduce(function)) => {
            reduce(material, *function, meter).map(|value| Summary {
                value: Some(value),
                ..Summary::default()
            })
        }
    }
}

// ---------------------------------------------------------------------------------------
// Bookkeeping: the clock and the result budget.

/// Counts what is inspected and checks the deadline at every step.
struct Meter<'a> {
    clock: &'a dyn Clock,
    deadline: Instant,
    limit: Duration,
    inspected: Inspected,
}

impl Meter<'_> {
    fn step(&mut self, bytes: usize, items: usize) -> Result<(), HandleError> {
        self.inspected.bytes += bytes as u64;
        self.inspected.items += items as u64;
        if self.clock.now() >= self.deadline {
            return Err(HandleError::TimeLimitExceeded {
                limit_ms: self.limit.as_millis() as u64,
            });
        }
        Ok(())
    }
}

/// Which end of a text survives a cut.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Head,
    Tail,
}

/// The entries so far, and what remains of `maxResults` and `maxBytes`.
struct Budget {
    max_results: usize,
    max_bytes: usize,
    used: usize,
    entries: Vec<Entry>,
    truncated: bool,
}

impl Budget {
    fn new(limits: &Limits) -> Budget {
        Budget {
            max_results: limits.max_results,
            max_bytes: limits.max_bytes,
            used: 0,
            entries: Vec::new(),
            truncated: false,
        }
    }

    fn remaining(&self) -> usize {
        self.max_bytes - self.used
    }

    /// Room for one more entry; otherwise the result is truncated (the caller only asks
    /// when it has an entry to add).
    fn room(&mut self) -> bool {
        if self.entries.len() >= self.max_results {
            self.truncated = true;
            return false;
        }
        true
    }

    fn push(&mut self, mut entry: Entry, cut: bool) {
        self.used += entry.payload_bytes();
        debug_assert!(self.used <= self.max_bytes);
        entry.truncated |= cut;
        self.truncated |= cut;
        self.entries.push(entry);
    }

    /// Adds a text entry, cut to the remaining bytes. `cut_already` marks text that was
    /// shortened before (a mapped prefix). Returns whether more entries may follow.
    fn text(&mut self, entry: Entry, text: &str, keep: Keep, cut_already: bool) -> bool {
        if !self.room() {
            return false;
        }
        let remaining = self.remaining();
        if text.len() <= remaining {
            self.push(
                Entry {
                    payload: Payload::Text(text.to_owned()),
                    ..entry
                },
                cut_already,
            );
            return !cut_already;
        }
        let (kept, dropped_chars) = match keep {
            Keep::Head => (&text[..text.floor_char_boundary(remaining)], 0),
            Keep::Tail => {
                let from = text.ceil_char_boundary(text.len() - remaining);
                (&text[from..], text[..from].chars().count())
            }
        };
        self.truncated = true;
        if !kept.is_empty() {
            let entry = Entry {
                start: entry.start.map(|start| start + dropped_chars),
                payload: Payload::Text(kept.to_owned()),
                ..entry
            };
            self.push(entry, true);
        }
        false
    }

    /// Adds a `map` value.
    fn value(&mut self, entry: Entry, value: MapValue, cut_already: bool) -> bool {
        match value {
            MapValue::Text(text) => {
                if !self.room() {
                    return false;
                }
                let remaining = self.remaining();
                if text.len() <= remaining {
                    self.push(
                        Entry {
                            payload: Payload::Value(MapValue::Text(text)),
                            ..entry
                        },
                        cut_already,
                    );
                    return !cut_already;
                }
                let mut text = text;
                text.truncate(text.floor_char_boundary(remaining));
                self.truncated = true;
                if !text.is_empty() {
                    self.push(
                        Entry {
                            payload: Payload::Value(MapValue::Text(text)),
                            ..entry
                        },
                        true,
                    );
                }
                false
            }
            MapValue::Number(n) => {
                if !self.room() {
                    return false;
                }
                if digits(n) > self.remaining() {
                    // A number cannot be cut.
                    self.truncated = true;
                    return false;
                }
                self.push(
                    Entry {
                        payload: Payload::Value(MapValue::Number(n)),
                        ..entry
                    },
                    false,
                );
                true
            }
        }
    }

    /// Adds one item, its content cut if it does not fit.
    fn record(&mut self, entry: Entry, item: &Item) -> bool {
        if !self.room() {
            return false;
        }
        match fit_item(item, self.remaining()) {
            Some((item, cut)) => {
                self.push(
                    Entry {
                        payload: Payload::Record(item),
                        ..entry
                    },
                    cut,
                );
                !cut
            }
            None => {
                self.truncated = true;
                false
            }
        }
    }

    /// Adds a chunk of items: as many as fit, the last one possibly cut.
    fn records(&mut self, entry: Entry, items: &[Item]) -> bool {
        if !self.room() {
            return false;
        }
        let mut remaining = self.remaining();
        let mut kept = Vec::with_capacity(items.len());
        let mut cut = false;
        for item in items {
            match fit_item(item, remaining) {
                Some((item, was_cut)) => {
                    remaining -= item_bytes(&item);
                    kept.push(item);
                    if was_cut {
                        cut = true;
                        break;
                    }
                }
                None => {
                    cut = true;
                    break;
                }
            }
        }
        if kept.is_empty() {
            self.truncated = true;
            return false;
        }
        self.push(
            Entry {
                payload: Payload::Records(kept),
                ..entry
            },
            cut,
        );
        !cut
    }

    fn finish(self, summary: Summary) -> OpOutput {
        OpOutput {
            entries: self.entries,
            metadata: summary.metadata,
            value: summary.value,
            truncated: self.truncated,
            bytes_returned: self.used,
        }
    }
}

/// The item, or a copy with its content shortened (on a UTF-8 boundary) so its canonical
/// JSON fits `room`; `None` when even an empty content does not fit.
fn fit_item(item: &Item, room: usize) -> Option<(Item, bool)> {
    if item_bytes(item) <= room {
        return Some((item.clone(), false));
    }
    let mut shell = Item {
        content: String::new(),
        ..item.clone()
    };
    let base = item_bytes(&shell);
    if base > room {
        return None;
    }
    let budget = room - base;
    let mut cost = 0;
    let mut end = 0;
    for (i, c) in item.content.char_indices() {
        let escaped = escaped_len(c);
        if cost + escaped > budget {
            break;
        }
        cost += escaped;
        end = i + c.len_utf8();
    }
    shell.content = item.content[..end].to_owned();
    // The escape estimate matches serde_json; this only guards against a change there.
    while item_bytes(&shell) > room && shell.content.pop().is_some() {}
    Some((shell, true))
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

// ---------------------------------------------------------------------------------------
// Walking text.

/// Lines as `str::lines` gives them, with the byte offset each starts at.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut offset = 0;
    text.split_inclusive('\n').map(move |segment| {
        let start = offset;
        offset += segment.len();
        let line = match segment.strip_suffix('\n') {
            Some(line) => line.strip_suffix('\r').unwrap_or(line),
            None => segment,
        };
        (start, line)
    })
}

/// Characters in `text`, counted in blocks with a clock check per block.
fn count_chars(text: &str, meter: &mut Meter) -> Result<usize, HandleError> {
    let mut chars = 0;
    for block in text.as_bytes().chunks(BLOCK) {
        meter.step(block.len(), 0)?;
        chars += block.iter().filter(|b| (**b & 0xC0) != 0x80).count();
    }
    Ok(chars)
}

/// The byte offset of character `n` of `text`; `None` when `text` has fewer than `n`
/// characters (`n` equal to the count is the end).
fn char_offset(text: &str, n: u64, meter: &mut Meter) -> Result<Option<usize>, HandleError> {
    let mut left = n;
    let mut pos = 0;
    loop {
        if left == 0 {
            return Ok(Some(pos));
        }
        if pos >= text.len() {
            return Ok(None);
        }
        let end = text.floor_char_boundary((pos + BLOCK).min(text.len()));
        let block = &text[pos..end];
        meter.step(block.len(), 0)?;
        let count = block.bytes().filter(|b| (b & 0xC0) != 0x80).count() as u64;
        if count < left {
            left -= count;
            pos = end;
            continue;
        }
        let within = block
            .char_indices()
            .nth(left as usize)
            .map_or(block.len(), |(i, _)| i);
        return Ok(Some(pos + within));
    }
}

fn out_of_range(field: &str, value: u64, available: usize) -> HandleError {
    HandleError::OutOfRange {
        field: field.to_owned(),
        value,
        available: available as u64,
    }
}

// ---------------------------------------------------------------------------------------
// The operations.

fn metadata(material: &HandleMaterial, meter: &mut Meter) -> Result<Summary, HandleError> {
    let metadata = match material {
        HandleMaterial::Text(text) => {
            let mut chars = 0u64;
            let mut breaks = 0u64;
            for block in text.as_bytes().chunks(BLOCK) {
                meter.step(block.len(), 0)?;
                chars += block.iter().filter(|b| (**b & 0xC0) != 0x80).count() as u64;
                breaks += block.iter().filter(|b| **b == b'\n').count() as u64;
            }
            let lines = breaks + u64::from(!text.is_empty() && !text.ends_with('\n'));
            Metadata {
                kind: "text",
                bytes: text.len() as u64,
                chars: Some(chars),
                lines: Some(lines),
                items: None,
                content_bytes: None,
            }
        }
        HandleMaterial::Items(items) => {
            let mut bytes = 0u64;
            let mut content = 0u64;
            for item in items {
                let size = item_bytes(item);
                meter.step(size, 1)?;
                bytes += size as u64;
                content += item.content.len() as u64;
            }
            Metadata {
                kind: "items",
                bytes,
                chars: None,
                lines: None,
                items: Some(items.len() as u64),
                content_bytes: Some(content),
            }
        }
    };
    Ok(Summary {
        metadata: Some(metadata),
        value: None,
    })
}

fn text_peek(
    text: &str,
    peek: Peek,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    match peek {
        Peek::Head(n) => {
            let end = char_offset(text, n, meter)?.unwrap_or(text.len());
            out.text(Entry::at().start(0), &text[..end], Keep::Head, false);
        }
        Peek::Tail(n) => {
            let total = count_chars(text, meter)?;
            let start = total.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
            let from = char_offset(text, start as u64, meter)?.unwrap_or(text.len());
            out.text(Entry::at().start(start), &text[from..], Keep::Tail, false);
        }
        Peek::Item(_) => {
            return Err(HandleError::invalid_argument(
                "op.item",
                "text material has no items: peek head or tail, or slice",
            ));
        }
    }
    Ok(())
}

fn text_slice(
    text: &str,
    start: u64,
    length: u64,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    let Some(from) = char_offset(text, start, meter)? else {
        let total = count_chars(text, meter)?;
        return Err(out_of_range("op.start", start, total));
    };
    let rest = &text[from..];
    let end = char_offset(rest, length, meter)?.unwrap_or(rest.len());
    out.text(
        Entry::at().start(start as usize),
        &rest[..end],
        Keep::Head,
        false,
    );
    Ok(())
}

fn items_peek(
    items: &[Item],
    peek: Peek,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    match peek {
        Peek::Head(n) => items_range(items, 0, n, "op.head", meter, out),
        Peek::Tail(n) => {
            let start = items
                .len()
                .saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
            items_range(items, start as u64, n, "op.tail", meter, out)
        }
        Peek::Item(i) => {
            let item = usize::try_from(i)
                .ok()
                .and_then(|i| items.get(i))
                .ok_or_else(|| out_of_range("op.item", i, items.len()))?;
            meter.step(item.content.len(), 1)?;
            out.record(Entry::at().item(i as usize), item);
            Ok(())
        }
    }
}

/// Items `[start, start + length)`, one entry each.
fn items_range(
    items: &[Item],
    start: u64,
    length: u64,
    field: &str,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    let Some(start) = usize::try_from(start).ok().filter(|s| *s <= items.len()) else {
        return Err(out_of_range(field, start, items.len()));
    };
    let end = start
        .saturating_add(usize::try_from(length).unwrap_or(usize::MAX))
        .min(items.len());
    for (i, item) in items[start..end].iter().enumerate() {
        meter.step(item.content.len(), 1)?;
        if !out.record(Entry::at().item(start + i), item) {
            break;
        }
    }
    Ok(())
}

fn search(
    material: &HandleMaterial,
    pattern: &str,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    let search_text = |text: &str, item: Option<usize>, meter: &mut Meter, out: &mut Budget| {
        for (n, (_, line)) in lines(text).enumerate() {
            meter.step(line.len() + 1, 0)?;
            if line.contains(pattern) {
                let mut entry = Entry::at().line(n + 1);
                entry.item = item;
                if !out.text(entry, line, Keep::Head, false) {
                    return Ok(false);
                }
            }
        }
        Ok::<bool, HandleError>(true)
    };
    match material {
        HandleMaterial::Text(text) => {
            search_text(text, None, meter, out)?;
        }
        HandleMaterial::Items(items) => {
            for (i, item) in items.iter().enumerate() {
                meter.step(0, 1)?;
                if !search_text(&item.content, Some(i), meter, out)? {
                    break;
                }
            }
        }
    }
    Ok(())
}

fn partition(
    material: &HandleMaterial,
    by: PartitionBy,
    size: u64,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    let size_usize = usize::try_from(size).unwrap_or(usize::MAX);
    match (material, by) {
        (HandleMaterial::Text(text), PartitionBy::Size) => {
            let mut pos = 0;
            let mut chunk = 0;
            while pos < text.len() {
                let rest = &text[pos..];
                let end = char_offset(rest, size, meter)?.unwrap_or(rest.len());
                let entry = Entry::at()
                    .chunk(chunk)
                    .start(chunk.saturating_mul(size_usize));
                if !out.text(entry, &rest[..end], Keep::Head, false) {
                    break;
                }
                pos += end;
                chunk += 1;
            }
        }
        (HandleMaterial::Text(text), PartitionBy::Lines) => {
            // A chunk is the material's text from its first line to the end of its last
            // (line breaks inside included, the last one not).
            let mut chunk = 0;
            let mut first: Option<(usize, usize)> = None; // (line number, byte start)
            let mut count = 0;
            let mut last_end = 0;
            let flush = |chunk: usize,
                         first: (usize, usize),
                         count: usize,
                         end: usize,
                         out: &mut Budget| {
                let mut entry = Entry::at().chunk(chunk).line(first.0);
                entry.lines = Some(count);
                out.text(entry, &text[first.1..end], Keep::Head, false)
            };
            for (n, (start, line)) in lines(text).enumerate() {
                meter.step(line.len() + 1, 0)?;
                if first.is_none() {
                    first = Some((n + 1, start));
                }
                count += 1;
                last_end = start + line.len();
                if count == size_usize {
                    let more = flush(
                        chunk,
                        first.take().expect("set above"),
                        count,
                        last_end,
                        out,
                    );
                    if !more {
                        return Ok(());
                    }
                    chunk += 1;
                    count = 0;
                }
            }
            if let Some(first) = first {
                flush(chunk, first, count, last_end, out);
            }
        }
        (HandleMaterial::Items(items), PartitionBy::Size) => {
            for (chunk, group) in items.chunks(size_usize.max(1)).enumerate() {
                for item in group {
                    meter.step(item.content.len(), 1)?;
                }
                let entry = Entry::at()
                    .chunk(chunk)
                    .item(chunk.saturating_mul(size_usize));
                if !out.records(entry, group) {
                    break;
                }
            }
        }
        (HandleMaterial::Items(_), PartitionBy::Lines) => {
            return Err(HandleError::UnsupportedPartition {
                by: "lines".to_owned(),
                material: Some("items"),
                supported: vec!["size"],
            });
        }
    }
    Ok(())
}

/// Applies `function` to at most `room` bytes of `text`, so a huge line is never mapped
/// whole only to be cut; the caller cuts the output to `room` again, since a case
/// mapping may lengthen it. The `bool` says the input was cut (the entry is then
/// `truncated` even if a shrinking mapping left room).
fn apply(function: MapFunction, text: &str, room: usize) -> (MapValue, bool) {
    let cut = text.len() > room;
    let input = if cut {
        &text[..text.floor_char_boundary(room)]
    } else {
        text
    };
    let value = match function {
        MapFunction::Identity => MapValue::Text(input.to_owned()),
        MapFunction::Lowercase => MapValue::Text(input.to_lowercase()),
        MapFunction::Uppercase => MapValue::Text(input.to_uppercase()),
        MapFunction::Length => return (MapValue::Number(text.chars().count() as u64), false),
    };
    (value, cut)
}

fn map(
    material: &HandleMaterial,
    function: MapFunction,
    meter: &mut Meter,
    out: &mut Budget,
) -> Result<(), HandleError> {
    match material {
        HandleMaterial::Text(text) => {
            for (n, (_, line)) in lines(text).enumerate() {
                meter.step(line.len() + 1, 0)?;
                let (value, cut) = apply(function, line, out.remaining());
                if !out.value(Entry::at().line(n + 1), value, cut) {
                    break;
                }
            }
        }
        HandleMaterial::Items(items) => {
            for (i, item) in items.iter().enumerate() {
                meter.step(item.content.len(), 1)?;
                let (value, cut) = apply(function, &item.content, out.remaining());
                if !out.value(Entry::at().item(i), value, cut) {
                    break;
                }
            }
        }
    }
    Ok(())
}

fn reduce(
    material: &HandleMaterial,
    function: ReduceFunction,
    meter: &mut Meter,
) -> Result<u64, HandleError> {
    match (material, function) {
        (HandleMaterial::Text(text), ReduceFunction::Count) => {
            let mut count = 0u64;
            for (_, line) in lines(text) {
                meter.step(line.len() + 1, 0)?;
                count += 1;
            }
            Ok(count)
        }
        (HandleMaterial::Text(text), ReduceFunction::ByteCount) => Ok(text.len() as u64),
        (HandleMaterial::Items(items), ReduceFunction::Count) => {
            meter.step(0, items.len())?;
            Ok(items.len() as u64)
        }
        (HandleMaterial::Items(items), ReduceFunction::ByteCount) => {
            let mut bytes = 0u64;
            for item in items {
                let size = item_bytes(item);
                meter.step(size, 1)?;
                bytes += size as u64;
            }
            Ok(bytes)
        }
    }
}
