//! The operations, one by one and under every bound, with injected clocks; and the
//! property that no operation ever returns more than `maxResults` entries or `maxBytes`
//! payload bytes.

use super::bounds::Clock;
use super::ops::run;
use super::output::{Entry, Execution, MapValue, OpOutput, Payload};
use super::request::{Limits, MapFunction, Operation, PartitionBy, Peek, ReduceFunction};
use super::{HandleError, HandleMaterial, item_bytes};
use crate::contract::Item;
use proptest::prelude::*;
use serde_json::{Map, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A clock that never moves: no time limit ever trips.
struct Frozen(Instant);

impl Clock for Frozen {
    fn now(&self) -> Instant {
        self.0
    }
}

/// A clock that moves `step` further at every reading.
struct Stepping {
    start: Instant,
    step: Duration,
    reads: AtomicU64,
}

impl Stepping {
    fn new(step: Duration) -> Stepping {
        Stepping {
            start: Instant::now(),
            step,
            reads: AtomicU64::new(0),
        }
    }
}

impl Clock for Stepping {
    fn now(&self) -> Instant {
        let reads = self.reads.fetch_add(1, Ordering::SeqCst);
        self.start + self.step * reads as u32
    }
}

fn limits(max_results: usize, max_bytes: usize) -> Limits {
    Limits {
        max_results,
        max_bytes,
        time_limit: Duration::from_millis(100),
    }
}

fn wide() -> Limits {
    limits(10_000, 1 << 20)
}

fn exec(material: &HandleMaterial, op: Operation, limits: Limits) -> Execution {
    run(material, &op, &limits, &Frozen(Instant::now()))
}

fn ok(material: &HandleMaterial, op: Operation, limits: Limits) -> OpOutput {
    let execution = exec(material, op.clone(), limits);
    execution
        .result
        .unwrap_or_else(|e| panic!("{op:?} failed: {e:?}"))
}

fn err(material: &HandleMaterial, op: Operation, limits: Limits) -> HandleError {
    match exec(material, op.clone(), limits).result {
        Ok(output) => panic!("{op:?} succeeded: {output:?}"),
        Err(error) => error,
    }
}

fn text(material: &str) -> HandleMaterial {
    HandleMaterial::Text(material.to_owned())
}

fn texts(output: &OpOutput) -> Vec<&str> {
    output
        .entries
        .iter()
        .map(|e| match &e.payload {
            Payload::Text(t) | Payload::Value(MapValue::Text(t)) => t.as_str(),
            other => panic!("not text: {other:?}"),
        })
        .collect()
}

fn item(id: &str, content: &str) -> Item {
    let mut metadata = Map::new();
    metadata.insert("source".into(), json!("crm"));
    Item {
        id: id.to_owned(),
        title: Some(format!("Title {id}")),
        content: content.to_owned(),
        metadata,
        updated_at: None,
    }
}

fn items(n: usize) -> HandleMaterial {
    HandleMaterial::Items(
        (0..n)
            .map(|i| {
                item(
                    &format!("r{i}"),
                    &format!("Line one of {i}\nERROR in {i}\nLast"),
                )
            })
            .collect(),
    )
}

fn records(output: &OpOutput) -> Vec<&Item> {
    output
        .entries
        .iter()
        .flat_map(|e| match &e.payload {
            Payload::Record(item) => vec![item],
            Payload::Records(items) => items.iter().collect(),
            other => panic!("not a record: {other:?}"),
        })
        .collect()
}

/// Checks the bounds every result must keep, and that the reported bytes are exact.
fn assert_bounded(output: &OpOutput, limits: &Limits) {
    let bytes: usize = output.entries.iter().map(Entry::payload_bytes).sum();
    assert_eq!(output.bytes_returned, bytes, "bytesReturned is exact");
    assert!(bytes <= limits.max_bytes, "{bytes} > {}", limits.max_bytes);
    assert!(output.entries.len() <= limits.max_results);
    if output.entries.iter().any(|e| e.truncated) {
        assert!(output.truncated, "a cut entry truncates the result");
    }
}

// ---- text -------------------------------------------------------------------------

#[test]
fn large_text_stays_opaque_and_is_reached_only_through_bounds() {
    // 4 MiB of log whose lines look like paths and URLs: they are only text.
    let mut log = String::new();
    for i in 0..40_000 {
        match i % 1000 {
            0 => log.push_str("GET file:///etc/passwd https://example.com/secret\n"),
            500 => log.push_str(&format!("ERROR request {i} failed\n")),
            _ => log.push_str(&format!(
                "INFO request {i} served in {} ms ....................................\n",
                i % 97
            )),
        }
    }
    let material = text(&log);
    let meta = ok(&material, Operation::Metadata, limits(1, 1))
        .metadata
        .unwrap();
    assert_eq!(meta.kind, "text");
    assert_eq!(meta.bytes, log.len() as u64);
    assert_eq!(meta.lines, Some(40_000));
    assert_eq!(meta.chars, Some(log.len() as u64));

    let head = ok(
        &material,
        Operation::Peek(Peek::Head(u64::MAX)),
        limits(10, 4096),
    );
    assert_eq!(head.bytes_returned, 4096);
    assert!(head.truncated && head.entries[0].truncated);
    assert!(log.starts_with(texts(&head)[0]));

    let search = ok(
        &material,
        Operation::Search {
            pattern: "/etc/passwd".into(),
        },
        wide(),
    );
    assert_eq!(search.entries.len(), 40);
    assert_eq!(
        texts(&search)[0],
        "GET file:///etc/passwd https://example.com/secret",
        "the literal line, never the file or the URL"
    );
    assert_eq!(search.entries[1].line, Some(1001));
    assert!(!search.truncated);
}

#[test]
fn search_is_literal_per_line_and_case_sensitive() {
    let material = text("error one\nERROR two\r\nan ERROR and ERROR\n\nERROR.*\nlast ERROR");
    let output = ok(
        &material,
        Operation::Search {
            pattern: "ERROR".into(),
        },
        wide(),
    );
    let lines: Vec<_> = output.entries.iter().map(|e| e.line.unwrap()).collect();
    assert_eq!(lines, [2, 3, 5, 6], "one entry per matching line");
    assert_eq!(texts(&output)[0], "ERROR two", "\\r\\n is a line break");
    let regex = ok(
        &material,
        Operation::Search {
            pattern: "ERROR.*".into(),
        },
        wide(),
    );
    assert_eq!(texts(&regex), ["ERROR.*"], "no regular expressions");
}

#[test]
fn search_is_bounded_by_results_and_global_bytes() {
    let lines: Vec<String> = (0..100)
        .map(|i| format!("ERROR {i:03} {}", "x".repeat(40)))
        .collect();
    let material = text(&lines.join("\n"));
    let search = Operation::Search {
        pattern: "ERROR".into(),
    };
    let by_count = ok(&material, search.clone(), limits(10, 1 << 20));
    assert_eq!(by_count.entries.len(), 10);
    assert!(by_count.truncated);
    assert!(by_count.entries.iter().all(|e| !e.truncated));

    // 50-byte lines, 120 bytes across all hits: two whole lines and a cut third.
    let by_bytes = ok(&material, search.clone(), limits(100, 120));
    assert_bounded(&by_bytes, &limits(100, 120));
    assert_eq!(by_bytes.entries.len(), 3);
    assert_eq!(by_bytes.bytes_returned, 120);
    assert_eq!(texts(&by_bytes)[2], &lines[2][..20]);
    assert!(by_bytes.entries[2].truncated && by_bytes.truncated);

    // Exactly enough for every hit: not truncated.
    let exact = ok(&material, search, limits(100, 100 * 50));
    assert_eq!(exact.entries.len(), 100);
    assert!(!exact.truncated);
}

#[test]
fn partition_bytes_are_limited_across_all_chunks() {
    let material = text(&"abcdefghij".repeat(100)); // 1000 chars
    let op = Operation::Partition {
        by: PartitionBy::Size,
        size: 100,
    };
    let all = ok(&material, op.clone(), wide());
    assert_eq!(all.entries.len(), 10);
    assert_eq!(all.entries[3].start, Some(300));
    assert_eq!(all.entries[3].chunk, Some(3));
    assert!(!all.truncated);

    let bounded = ok(&material, op.clone(), limits(100, 250));
    assert_bounded(&bounded, &limits(100, 250));
    assert_eq!(
        texts(&bounded).iter().map(|t| t.len()).collect::<Vec<_>>(),
        [100, 100, 50]
    );
    assert!(bounded.truncated && bounded.entries[2].truncated);

    let few = ok(&material, op, limits(4, 1 << 20));
    assert_eq!(few.entries.len(), 4);
    assert!(few.truncated);
}

#[test]
fn partition_by_lines_keeps_line_numbers() {
    let material = text("a\nb\nc\r\nd\ne\n");
    let output = ok(
        &material,
        Operation::Partition {
            by: PartitionBy::Lines,
            size: 2,
        },
        wide(),
    );
    assert_eq!(texts(&output), ["a\nb", "c\r\nd", "e"]);
    let firsts: Vec<_> = output.entries.iter().map(|e| (e.line, e.lines)).collect();
    assert_eq!(
        firsts,
        [(Some(1), Some(2)), (Some(3), Some(2)), (Some(5), Some(1))]
    );
    let empty = ok(
        &text(""),
        Operation::Partition {
            by: PartitionBy::Lines,
            size: 2,
        },
        wide(),
    );
    assert!(empty.entries.is_empty() && !empty.truncated);
}

#[test]
fn peek_and_slice_count_characters_and_cut_on_utf8_boundaries() {
    let material = text("héllo wörld ✓ done");
    let head = ok(&material, Operation::Peek(Peek::Head(5)), wide());
    assert_eq!(texts(&head), ["héllo"]);
    let tail = ok(&material, Operation::Peek(Peek::Tail(6)), wide());
    assert_eq!(texts(&tail), ["✓ done"]);
    assert_eq!(tail.entries[0].start, Some(12));
    let slice = ok(
        &material,
        Operation::Slice {
            start: 6,
            length: 5,
        },
        wide(),
    );
    assert_eq!(texts(&slice), ["wörld"]);
    assert_eq!(slice.entries[0].start, Some(6));
    // "hé" is 3 bytes: 2 bytes of budget keep only "h".
    let cut = ok(&material, Operation::Peek(Peek::Head(5)), limits(10, 2));
    assert_eq!(texts(&cut), ["h"]);
    assert!(cut.truncated);
    // A tail keeps its end when cut: "✓ done" is 8 bytes; 6 keep " done" (the ✓ would
    // be split), and its start moves with it.
    let tail_cut = ok(&material, Operation::Peek(Peek::Tail(6)), limits(10, 6));
    assert_eq!(texts(&tail_cut), [" done"]);
    assert_eq!(tail_cut.entries[0].start, Some(13));
    // Past the end: peeks return what there is; a slice start beyond it is out of range.
    assert_eq!(
        texts(&ok(&material, Operation::Peek(Peek::Head(1000)), wide())),
        ["héllo wörld ✓ done"]
    );
    let at_end = ok(
        &material,
        Operation::Slice {
            start: 18,
            length: 5,
        },
        wide(),
    );
    assert_eq!(texts(&at_end), [""]);
    match err(
        &material,
        Operation::Slice {
            start: 19,
            length: 1,
        },
        wide(),
    ) {
        HandleError::OutOfRange {
            field,
            value,
            available,
        } => assert_eq!((field.as_str(), value, available), ("op.start", 19, 18)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err(&material, Operation::Peek(Peek::Item(0)), wide()).kind(),
        "invalid_argument",
        "text has no items"
    );
}

#[test]
fn map_applies_per_line_to_text() {
    let material = text("Hello World\nÉTÉ\n\nabc");
    let map = |function| ok(&material, Operation::Map(function), wide());
    assert_eq!(
        texts(&map(MapFunction::Identity)),
        ["Hello World", "ÉTÉ", "", "abc"]
    );
    assert_eq!(
        texts(&map(MapFunction::Lowercase)),
        ["hello world", "été", "", "abc"]
    );
    assert_eq!(
        texts(&map(MapFunction::Uppercase)),
        ["HELLO WORLD", "ÉTÉ", "", "ABC"]
    );
    let lengths = map(MapFunction::Length);
    let values: Vec<_> = lengths
        .entries
        .iter()
        .map(|e| (e.line.unwrap(), e.payload.clone()))
        .collect();
    assert_eq!(
        values,
        [
            (1, Payload::Value(MapValue::Number(11))),
            (2, Payload::Value(MapValue::Number(3))),
            (3, Payload::Value(MapValue::Number(0))),
            (4, Payload::Value(MapValue::Number(3))),
        ]
    );
    assert_eq!(
        lengths.bytes_returned,
        2 + 1 + 1 + 1,
        "numbers cost their digits"
    );
    // The global byte limit holds across mapped lines too.
    let bounded = ok(
        &material,
        Operation::Map(MapFunction::Uppercase),
        limits(100, 13),
    );
    assert_eq!(texts(&bounded), ["HELLO WORLD", "É"]);
    assert!(bounded.truncated);
}

#[test]
fn reduce_counts_lines_and_bytes() {
    let material = text("a\nbb\nccc\n");
    let reduce = |function| ok(&material, Operation::Reduce(function), limits(1, 1));
    assert_eq!(reduce(ReduceFunction::Count).value, Some(3));
    assert_eq!(reduce(ReduceFunction::ByteCount).value, Some(9));
    let output = reduce(ReduceFunction::Count);
    assert!(output.entries.is_empty() && output.bytes_returned == 0);
}

// ---- items ------------------------------------------------------------------------

#[test]
fn item_peek_slice_map_and_reduce() {
    let material = items(5);
    let HandleMaterial::Items(all) = &material else {
        unreachable!()
    };
    let one = ok(&material, Operation::Peek(Peek::Item(3)), wide());
    assert_eq!(records(&one), [&all[3]]);
    assert_eq!(one.entries[0].item, Some(3));
    assert_eq!(one.bytes_returned, item_bytes(&all[3]));
    match err(&material, Operation::Peek(Peek::Item(5)), wide()) {
        HandleError::OutOfRange {
            value, available, ..
        } => assert_eq!((value, available), (5, 5)),
        other => panic!("{other:?}"),
    }
    let head = ok(&material, Operation::Peek(Peek::Head(2)), wide());
    assert_eq!(records(&head), [&all[0], &all[1]]);
    let tail = ok(&material, Operation::Peek(Peek::Tail(2)), wide());
    assert_eq!(records(&tail), [&all[3], &all[4]]);
    assert_eq!(tail.entries[0].item, Some(3));
    let slice = ok(
        &material,
        Operation::Slice {
            start: 1,
            length: 2,
        },
        wide(),
    );
    assert_eq!(records(&slice), [&all[1], &all[2]]);
    let past = ok(
        &material,
        Operation::Slice {
            start: 4,
            length: 10,
        },
        wide(),
    );
    assert_eq!(records(&past), [&all[4]]);
    assert_eq!(
        err(
            &material,
            Operation::Slice {
                start: 6,
                length: 1
            },
            wide()
        )
        .kind(),
        "out_of_range"
    );
    let capped = ok(
        &material,
        Operation::Peek(Peek::Head(5)),
        limits(2, 1 << 20),
    );
    assert_eq!(capped.entries.len(), 2);
    assert!(capped.truncated);

    let lowered = ok(&material, Operation::Map(MapFunction::Uppercase), wide());
    assert_eq!(
        texts(&lowered)[1],
        "LINE ONE OF 1\nERROR IN 1\nLAST",
        "per item content"
    );
    assert_eq!(lowered.entries[1].item, Some(1));
    let lengths = ok(&material, Operation::Map(MapFunction::Length), wide());
    assert_eq!(
        lengths.entries[0].payload,
        Payload::Value(MapValue::Number(29))
    );

    assert_eq!(
        ok(&material, Operation::Reduce(ReduceFunction::Count), wide()).value,
        Some(5)
    );
    assert_eq!(
        ok(
            &material,
            Operation::Reduce(ReduceFunction::ByteCount),
            wide()
        )
        .value,
        Some(material.bytes() as u64)
    );
    let meta = ok(&material, Operation::Metadata, wide()).metadata.unwrap();
    assert_eq!(meta.items, Some(5));
    assert_eq!(meta.bytes, material.bytes() as u64);
    assert_eq!(
        meta.content_bytes,
        Some(all.iter().map(|i| i.content.len() as u64).sum())
    );
}

#[test]
fn items_are_searched_per_content_line_and_partitioned_by_count() {
    let material = items(4);
    let search = ok(
        &material,
        Operation::Search {
            pattern: "ERROR".into(),
        },
        wide(),
    );
    let at: Vec<_> = search
        .entries
        .iter()
        .map(|e| (e.item.unwrap(), e.line.unwrap()))
        .collect();
    assert_eq!(at, [(0, 2), (1, 2), (2, 2), (3, 2)]);
    assert_eq!(texts(&search)[2], "ERROR in 2");

    let chunks = ok(
        &material,
        Operation::Partition {
            by: PartitionBy::Size,
            size: 3,
        },
        wide(),
    );
    assert_eq!(chunks.entries.len(), 2);
    assert_eq!(chunks.entries[1].item, Some(3));
    assert_eq!(records(&chunks).len(), 4);
    match err(
        &material,
        Operation::Partition {
            by: PartitionBy::Lines,
            size: 3,
        },
        wide(),
    ) {
        HandleError::UnsupportedPartition {
            material,
            supported,
            ..
        } => assert_eq!((material, supported), (Some("items"), vec!["size"])),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_item_too_large_for_the_budget_has_its_content_cut() {
    let big = item("r1", &"\"quoted\" line\n".repeat(200));
    let material = HandleMaterial::Items(vec![big.clone(), item("r2", "small")]);
    let full = item_bytes(&big);
    for max_bytes in [full - 1, 200, 120, 100] {
        let limits = limits(10, max_bytes);
        let output = ok(&material, Operation::Peek(Peek::Head(2)), limits);
        assert_bounded(&output, &limits);
        assert_eq!(output.entries.len(), 1, "nothing follows a cut entry");
        let cut = records(&output)[0];
        assert!(big.content.starts_with(&cut.content));
        assert!(cut.content.len() < big.content.len());
        assert_eq!(
            (cut.id.as_str(), &cut.title, &cut.metadata),
            ("r1", &big.title, &big.metadata)
        );
        assert!(output.truncated && output.entries[0].truncated);
    }
    // Too small for even the item without content: no entry, truncated.
    let output = ok(&material, Operation::Peek(Peek::Item(0)), limits(10, 20));
    assert!(output.entries.is_empty() && output.truncated);
    // A chunk keeps whole items while they fit.
    let small = item_bytes(&item("r2", "small"));
    let chunk = ok(
        &HandleMaterial::Items(vec![item("r2", "small"), big.clone()]),
        Operation::Partition {
            by: PartitionBy::Size,
            size: 2,
        },
        limits(10, small + 100),
    );
    let kept = records(&chunk);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].content, "small");
    assert!(chunk.truncated);
    assert_eq!(chunk.bytes_returned, small + item_bytes(kept[1]));
}

// ---- time ---------------------------------------------------------------------------

#[test]
fn the_time_limit_is_checked_inside_loops() {
    let material = text(&"line\n".repeat(1000));
    let clock = Stepping::new(Duration::from_millis(1));
    let execution = run(
        &material,
        &Operation::Search {
            pattern: "nothing".into(),
        },
        &Limits {
            max_results: 10,
            max_bytes: 100,
            time_limit: Duration::from_millis(50),
        },
        &clock,
    );
    assert_eq!(
        execution.result,
        Err(HandleError::TimeLimitExceeded { limit_ms: 50 })
    );
    // The first reading starts the clock; each line reads it once: the 50th line trips.
    assert_eq!(execution.inspected.bytes, 50 * 5);
    assert!(execution.elapsed >= Duration::from_millis(50));

    // Items, metadata and reduce are checked the same way.
    for op in [
        Operation::Metadata,
        Operation::Reduce(ReduceFunction::ByteCount),
        Operation::Map(MapFunction::Length),
    ] {
        let execution = run(
            &items(200),
            &op,
            &limits(1000, 1 << 20),
            &Stepping::new(Duration::from_millis(1)),
        );
        assert_eq!(
            execution.result.unwrap_err().kind(),
            "time_limit_exceeded",
            "{op:?}"
        );
        assert_eq!(execution.inspected.items, 100, "{op:?}");
    }
    // A frozen clock never trips, however much is scanned.
    let execution = exec(
        &material,
        Operation::Reduce(ReduceFunction::Count),
        limits(1, 1),
    );
    assert_eq!(execution.result.unwrap().value, Some(1000));
    assert_eq!(execution.inspected.bytes, 5000);
}

// ---- the property ------------------------------------------------------------------------

fn any_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("ERROR".to_owned()),
            Just("\n".to_owned()),
            Just("\r\n".to_owned()),
            Just("é✓😀".to_owned()),
            Just("\"\\\u{1}".to_owned()),
            "[a-z ]{0,12}",
        ],
        0..60,
    )
    .prop_map(|parts| parts.concat())
}

fn any_material() -> impl Strategy<Value = HandleMaterial> {
    prop_oneof![
        any_text().prop_map(HandleMaterial::Text),
        prop::collection::vec((any_text(), "[a-z0-9]{1,6}"), 0..8).prop_map(|items| {
            HandleMaterial::Items(
                items
                    .into_iter()
                    .map(|(content, id)| item(&id, &content))
                    .collect(),
            )
        }),
    ]
}

fn any_op() -> impl Strategy<Value = Operation> {
    let n = 0u64..80;
    prop_oneof![
        Just(Operation::Metadata),
        n.clone().prop_map(|n| Operation::Peek(Peek::Head(n))),
        n.clone().prop_map(|n| Operation::Peek(Peek::Tail(n))),
        (0u64..10).prop_map(|i| Operation::Peek(Peek::Item(i))),
        (n.clone(), n.clone()).prop_map(|(start, length)| Operation::Slice { start, length }),
        prop_oneof![Just("ERROR"), Just("e"), Just("✓"), Just("\""), Just("zz")]
            .prop_map(|p| Operation::Search { pattern: p.into() }),
        (1u64..20, any::<bool>()).prop_map(|(size, lines)| Operation::Partition {
            by: if lines {
                PartitionBy::Lines
            } else {
                PartitionBy::Size
            },
            size,
        }),
        prop_oneof![
            Just(MapFunction::Identity),
            Just(MapFunction::Lowercase),
            Just(MapFunction::Uppercase),
            Just(MapFunction::Length),
        ]
        .prop_map(Operation::Map),
        prop_oneof![Just(ReduceFunction::Count), Just(ReduceFunction::ByteCount)]
            .prop_map(Operation::Reduce),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn no_operation_returns_more_than_max_bytes_or_max_results(
        material in any_material(),
        op in any_op(),
        max_results in 1usize..12,
        max_bytes in 1usize..400,
    ) {
        let limits = limits(max_results, max_bytes);
        let execution = run(&material, &op, &limits, &Frozen(Instant::now()));
        if let Ok(output) = &execution.result {
            let bytes: usize = output.entries.iter().map(Entry::payload_bytes).sum();
            prop_assert_eq!(output.bytes_returned, bytes);
            prop_assert!(bytes <= max_bytes, "{} > {}", bytes, max_bytes);
            prop_assert!(output.entries.len() <= max_results);
            // Serialized, every text is still valid UTF-8 JSON.
            let json = serde_json::to_string(output).unwrap();
            prop_assert!(serde_json::from_str::<serde_json::Value>(&json).is_ok());
            // Unbounded, the same operation returns at least as much: nothing is
            // invented by the cut, and an untruncated result is the whole answer.
            let whole = run(&material, &op, &wide(), &Frozen(Instant::now())).result.unwrap();
            if !output.truncated {
                prop_assert_eq!(&output.entries, &whole.entries);
            } else {
                prop_assert!(output.entries.len() <= whole.entries.len());
            }
        }
    }
}
