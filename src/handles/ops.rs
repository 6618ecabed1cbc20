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

use super::bounds::{Budget, Clock, Keep, Meter};
use super::output::{Entry, Execution, MapValue, Metadata, Summary};
use super::request::{Limits, MapFunction, Operation, PartitionBy, Peek, ReduceFunction};
use super::{HandleError, HandleMaterial, item_bytes};
use crate::contract::Item;

/// Bytes scanned between two clock checks when walking characters.
const BLOCK: usize = 64 * 1024;

/// Runs one operation on `material` within `limits`.
pub(crate) fn run(
    material: &HandleMaterial,
    op: &Operation,
    limits: &Limits,
    clock: &dyn Clock,
) -> Execution {
    let started = clock.now();
    let mut meter = Meter::new(clock, started, limits.time_limit);
    let mut out = Budget::new(limits);
    let result = execute(material, op, &mut meter, &mut out).map(|summary| out.finish(summary));
    Execution {
        result,
        inspected: meter.inspected,
        elapsed: clock.now().saturating_duration_since(started),
    }
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
