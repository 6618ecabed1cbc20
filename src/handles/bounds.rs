//! The bounds every operation runs under: a [`Meter`] that counts what is inspected and
//! checks the wall-time deadline at every step (through an injected [`Clock`]), and a
//! [`Budget`] that holds the entries within `maxResults` and `maxBytes`, cutting the
//! entry that crosses the byte bound and marking the result `truncated`.

use super::output::{Entry, Inspected, MapValue, OpOutput, Payload, Summary, digits};
use super::request::Limits;
use super::{HandleError, item_bytes};
use crate::contract::Item;
use std::time::{Duration, Instant};

/// Where an operation reads the time. Injected so tests control it.
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Counts what is inspected and checks the deadline at every step.
pub(super) struct Meter<'a> {
    clock: &'a dyn Clock,
    deadline: Instant,
    limit: Duration,
    pub(super) inspected: Inspected,
}

impl Meter<'_> {
    /// Starts metering at `started`, with `limit` of wall time from there.
    pub(super) fn new(clock: &dyn Clock, started: Instant, limit: Duration) -> Meter<'_> {
        Meter {
            clock,
            deadline: started.checked_add(limit).unwrap_or(started),
            limit,
            inspected: Inspected::default(),
        }
    }

    pub(super) fn step(&mut self, bytes: usize, items: usize) -> Result<(), HandleError> {
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
pub(super) enum Keep {
    Head,
    Tail,
}

/// The entries so far, and what remains of `maxResults` and `maxBytes`.
pub(super) struct Budget {
    max_results: usize,
    max_bytes: usize,
    used: usize,
    entries: Vec<Entry>,
    truncated: bool,
}

impl Budget {
    pub(super) fn new(limits: &Limits) -> Budget {
        Budget {
            max_results: limits.max_results,
            max_bytes: limits.max_bytes,
            used: 0,
            entries: Vec::new(),
            truncated: false,
        }
    }

    pub(super) fn remaining(&self) -> usize {
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
    pub(super) fn text(&mut self, entry: Entry, text: &str, keep: Keep, cut_already: bool) -> bool {
        self.text_as(Payload::Text, entry, text, keep, cut_already)
    }

    /// Adds a `map` value.
    pub(super) fn value(&mut self, entry: Entry, value: MapValue, cut_already: bool) -> bool {
        match value {
            MapValue::Text(text) => {
                let payload = |text| Payload::Value(MapValue::Text(text));
                self.text_as(payload, entry, &text, Keep::Head, cut_already)
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

    /// [`Budget::text`], with `payload` making the entry's payload of the kept text.
    fn text_as(
        &mut self,
        payload: fn(String) -> Payload,
        entry: Entry,
        text: &str,
        keep: Keep,
        cut_already: bool,
    ) -> bool {
        if !self.room() {
            return false;
        }
        let remaining = self.remaining();
        if text.len() <= remaining {
            self.push(
                Entry {
                    payload: payload(text.to_owned()),
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
                payload: payload(kept.to_owned()),
                ..entry
            };
            self.push(entry, true);
        }
        false
    }

    /// Adds one item, its content cut if it does not fit.
    pub(super) fn record(&mut self, entry: Entry, item: &Item) -> bool {
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
    pub(super) fn records(&mut self, entry: Entry, items: &[Item]) -> bool {
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

    pub(super) fn finish(self, summary: Summary) -> OpOutput {
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
