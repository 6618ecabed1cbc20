//! The operation request (`POST /v1/handles/{id}/ops`) and its limits: parsed from JSON
//! by hand, so each problem gets its seed-004 kind and the exact field
//! (`op.maxBytes`, `op.function`…) rather than a generic parse error. Pure: no I/O.
//!
//! ```json
//! {"version": 1, "op": {"kind": "search", "pattern": "ERROR",
//!                       "maxResults": 10, "maxBytes": 4096, "timeLimitMs": 50}}
//! ```
//!
//! Unknown fields are refused (`invalid_argument`), limits outside `1..=cap` are
//! `invalid_limit` (never clamped), a map or reduce function outside the allow-list is
//! `capability_denied`, an unknown partition is `unsupported_partition`, and a search
//! pattern that cannot match a line is `invalid_pattern`.

use super::{HandleError, LimitSettings};
use crate::trace::record::RecordLimits;
use serde_json::{Map, Value};
use std::time::Duration;

/// Every operation, in the order the docs list them.
pub(crate) const OPERATIONS: &[&str] = &[
    "metadata",
    "peek",
    "slice",
    "search",
    "partition",
    "map",
    "reduce",
];
/// The allow-listed map functions.
pub(crate) const MAP_FUNCTIONS: &[&str] = &["identity", "lowercase", "uppercase", "length"];
/// The allow-listed reduce functions.
pub(crate) const REDUCE_FUNCTIONS: &[&str] = &["count", "byte_count"];
/// The partition kinds.
pub(crate) const PARTITIONS: &[&str] = &["size", "lines"];
/// Longest search pattern, in bytes.
pub(crate) const MAX_PATTERN_BYTES: usize = 1024;
/// Longest caller-supplied name echoed back in an error.
const ECHO_CHARS: usize = 64;

/// A parsed, validated operation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpRequest {
    pub(crate) version: u64,
    pub(crate) op: Operation,
    pub(crate) limits: Limits,
}

/// The limits an operation runs under, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Limits {
    /// Most entries in the result.
    pub(crate) max_results: usize,
    /// Most payload bytes across the whole result.
    pub(crate) max_bytes: usize,
    /// Wall time, checked inside every loop.
    #[serde(rename = "timeLimitMs", serialize_with = "millis")]
    #[schema(value_type = u64)]
    pub(crate) time_limit: Duration,
}

fn millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(duration.as_millis() as u64)
}

impl Limits {
    /// The defaults of `settings`.
    #[cfg(test)]
    pub(crate) fn defaults(settings: &LimitSettings) -> Limits {
        Limits {
            max_results: settings.default_max_results,
            max_bytes: settings.default_max_bytes,
            time_limit: settings.default_time_limit,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Kind, sizes and counts; never material.
    Metadata,
    Peek(Peek),
    /// Characters `[start, start + length)` of text; items `[start, start + length)` of
    /// an item list.
    Slice {
        start: u64,
        length: u64,
    },
    /// A literal, case-sensitive pattern, matched per line.
    Search {
        pattern: String,
    },
    Partition {
        by: PartitionBy,
        size: u64,
    },
    Map(MapFunction),
    Reduce(ReduceFunction),
}

impl Operation {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Operation::Metadata => "metadata",
            Operation::Peek(_) => "peek",
            Operation::Slice { .. } => "slice",
            Operation::Search { .. } => "search",
            Operation::Partition { .. } => "partition",
            Operation::Map(_) => "map",
            Operation::Reduce(_) => "reduce",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peek {
    /// The first N characters (text) or items.
    Head(u64),
    /// The last N characters (text) or items.
    Tail(u64),
    /// Item i (item lists only).
    Item(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartitionBy {
    /// `size` characters (text) or items (item list) per chunk.
    Size,
    /// `size` lines per chunk (text only).
    Lines,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapFunction {
    Identity,
    Lowercase,
    Uppercase,
    Length,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduceFunction {
    Count,
    ByteCount,
}

/// A request that could not be parsed, with what is known of it for the trace and the
/// metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseFailure {
    /// The operation name when `op.kind` named one, else `unknown`.
    pub(crate) op: &'static str,
    /// The version, when it parsed: the handle is then still checked (and the failure
    /// traced under it).
    pub(crate) version: Option<u64>,
    pub(crate) error: HandleError,
}

/// Parses and validates a request body against the configured limits.
pub(crate) fn parse(body: &[u8], settings: &LimitSettings) -> Result<OpRequest, ParseFailure> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ParseFailure {
        op: "unknown",
        version: None,
        error: HandleError::InvalidArgument {
            field: None,
            message: format!(
                "the body is not a JSON operation request (line {}, column {})",
                e.line(),
                e.column()
            ),
        },
    })?;
    let Value::Object(mut body) = value else {
        return Err(ParseFailure {
            op: "unknown",
            version: None,
            error: HandleError::InvalidArgument {
                field: None,
                message: "the body must be a JSON object: {\"version\": N, \"op\": {…}}".to_owned(),
            },
        });
    };
    let version = body.remove("version");
    let op = body.remove("op");
    let version = match version {
        Some(Value::Number(n)) => whole_number(&n),
        _ => None,
    };
    let fail = |op: &'static str, error: HandleError| ParseFailure { op, version, error };
    if let Some(key) = body.keys().next() {
        return Err(fail(
            "unknown",
            HandleError::invalid_argument(&echo(key), "unknown field: use version and op"),
        ));
    }
    let Some(version) = version else {
        return Err(fail(
            "unknown",
            HandleError::invalid_argument(
                "version",
                "is required: the handle's version, a non-negative integer",
            ),
        ));
    };
    let mut op = match op {
        Some(Value::Object(op)) => Fields::new(op, "op"),
        Some(_) => {
            return Err(fail(
                "unknown",
                HandleError::invalid_argument("op", "must be an object with a kind"),
            ));
        }
        None => {
            return Err(fail(
                "unknown",
                HandleError::invalid_argument("op", "is required"),
            ));
        }
    };
    let kind = match op.take("kind") {
        Some(Value::String(kind)) => kind,
        _ => {
            return Err(fail(
                "unknown",
                HandleError::invalid_argument(
                    "op.kind",
                    format!("is required: one of {}", OPERATIONS.join(", ")),
                ),
            ));
        }
    };
    let Some(name) = OPERATIONS.iter().copied().find(|name| *name == kind) else {
        return Err(fail(
            "unknown",
            HandleError::invalid_argument(
                "op.kind",
                format!(
                    "{:?} is not an operation: use one of {}",
                    echo(&kind),
                    OPERATIONS.join(", ")
                ),
            ),
        ));
    };
    let result = parse_op(name, version, &mut op, settings);
    result.map_err(|error| fail(name, error))
}

fn parse_op(
    name: &'static str,
    version: u64,
    op: &mut Fields,
    settings: &LimitSettings,
) -> Result<OpRequest, HandleError> {
    let limits = Limits {
        max_results: op.limit(
            "maxResults",
            settings.default_max_results,
            settings.max_results_cap,
        )?,
        max_bytes: op.limit(
            "maxBytes",
            settings.default_max_bytes,
            settings.max_bytes_cap,
        )?,
        time_limit: Duration::from_millis(op.limit(
            "timeLimitMs",
            settings.default_time_limit.as_millis() as usize,
            settings.time_limit_cap.as_millis() as usize,
        )? as u64),
    };
    let operation = match name {
        "metadata" => Operation::Metadata,
        "peek" => {
            let head = op.optional_u64("head")?;
            let tail = op.optional_u64("tail")?;
            let item = op.optional_u64("item")?;
            match (head, tail, item) {
                (Some(n), None, None) => Operation::Peek(Peek::Head(n)),
                (None, Some(n), None) => Operation::Peek(Peek::Tail(n)),
                (None, None, Some(i)) => Operation::Peek(Peek::Item(i)),
                _ => {
                    return Err(HandleError::invalid_argument(
                        "op",
                        "peek takes exactly one of head, tail or item",
                    ));
                }
            }
        }
        "slice" => Operation::Slice {
            start: op.required_u64("start")?,
            length: op.required_u64("length")?,
        },
        "search" => {
            let pattern = op.required_string("pattern")?;
            let problem = if pattern.is_empty() {
                Some("must not be empty".to_owned())
            } else if pattern.len() > MAX_PATTERN_BYTES {
                Some(format!("is longer than {MAX_PATTERN_BYTES} bytes"))
            } else if pattern.contains(['\n', '\r']) {
                Some("cannot contain a line break: search matches within one line".to_owned())
            } else {
                None
            };
            if let Some(message) = problem {
                return Err(HandleError::InvalidPattern {
                    field: "op.pattern".to_owned(),
                    message,
                });
            }
            Operation::Search { pattern }
        }
        "partition" => {
            let by = op.required_string("by")?;
            let by = match by.as_str() {
                "size" => PartitionBy::Size,
                "lines" => PartitionBy::Lines,
                other => {
                    return Err(HandleError::UnsupportedPartition {
                        by: echo(other),
                        material: None,
                        supported: PARTITIONS.to_vec(),
                    });
                }
            };
            let size = op.required_u64("size")?;
            if size == 0 {
                return Err(HandleError::invalid_argument(
                    "op.size",
                    "must be at least 1",
                ));
            }
            Operation::Partition { by, size }
        }
        "map" => {
            let function = op.required_string("function")?;
            Operation::Map(match function.as_str() {
                "identity" => MapFunction::Identity,
                "lowercase" => MapFunction::Lowercase,
                "uppercase" => MapFunction::Uppercase,
                "length" => MapFunction::Length,
                other => {
                    return Err(HandleError::CapabilityDenied {
                        operation: "map",
                        function: echo(other),
                        allowed: MAP_FUNCTIONS,
                    });
                }
            })
        }
        "reduce" => {
            let function = op.required_string("function")?;
            Operation::Reduce(match function.as_str() {
                "count" => ReduceFunction::Count,
                "byte_count" => ReduceFunction::ByteCount,
                other => {
                    return Err(HandleError::CapabilityDenied {
                        operation: "reduce",
                        function: echo(other),
                        allowed: REDUCE_FUNCTIONS,
                    });
                }
            })
        }
        _ => unreachable!("OPERATIONS lists every operation"),
    };
    op.finish(name)?;
    Ok(OpRequest {
        version,
        op: operation,
        limits,
    })
}

/// The fields of `op`, taken one by one; whatever is left at the end is unknown.
struct Fields {
    map: Map<String, Value>,
    prefix: &'static str,
}

impl Fields {
    fn new(map: Map<String, Value>, prefix: &'static str) -> Fields {
        Fields { map, prefix }
    }

    fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.prefix)
    }

    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    fn limit(&mut self, key: &str, default: usize, cap: usize) -> Result<usize, HandleError> {
        let path = self.path(key);
        let invalid = |message: String| HandleError::InvalidLimit {
            field: path.clone(),
            message,
            max: Some(cap as u64),
        };
        match self.take(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Number(n)) => match whole_number(&n) {
                Some(value) if value >= 1 && value <= cap as u64 => Ok(value as usize),
                Some(value) => Err(invalid(format!("{value} is out of range: use 1..={cap}"))),
                None => Err(invalid(format!("{n} is not a whole number in 1..={cap}"))),
            },
            Some(_) => Err(invalid(format!("must be a whole number in 1..={cap}"))),
        }
    }

    fn optional_u64(&mut self, key: &str) -> Result<Option<u64>, HandleError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if whole_number(&n).is_some() => Ok(whole_number(&n)),
            Some(_) => Err(HandleError::invalid_argument(
                &self.path(key),
                "must be a non-negative whole number",
            )),
        }
    }

    fn required_u64(&mut self, key: &str) -> Result<u64, HandleError> {
        self.optional_u64(key)?
            .ok_or_else(|| HandleError::invalid_argument(&self.path(key), "is required"))
    }

    fn required_string(&mut self, key: &str) -> Result<String, HandleError> {
        match self.take(key) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(HandleError::invalid_argument(
                &self.path(key),
                "must be a string",
            )),
            None => Err(HandleError::invalid_argument(
                &self.path(key),
                "is required",
            )),
        }
    }

    fn finish(&self, name: &str) -> Result<(), HandleError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(HandleError::invalid_argument(
                &self.path(&echo(key)),
                format!("unknown field for {name}"),
            )),
        }
    }
}

/// A JSON number that is a whole number in `u64`'s range, written `3` or `3.0` (JSON has
/// one number type); `None` for a fraction, a negative number or one past `u64::MAX`.
fn whole_number(n: &serde_json::Number) -> Option<u64> {
    n.as_u64()
        .or_else(|| n.as_f64().and_then(crate::contract::turn::whole))
}

/// A caller-supplied name, shortened for an error message.
fn echo(text: &str) -> String {
    text.chars().take(ECHO_CHARS).collect()
}

/// The limits an operation ran under, as its trace record keeps them.
impl From<&Limits> for RecordLimits {
    fn from(limits: &Limits) -> Self {
        RecordLimits {
            max_results: limits.max_results as u64,
            max_bytes: limits.max_bytes as u64,
            time_limit_ms: limits.time_limit.as_millis() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> LimitSettings {
        LimitSettings::default()
    }

    fn parse_json(body: Value) -> Result<OpRequest, ParseFailure> {
        parse(body.to_string().as_bytes(), &settings())
    }

    fn op(op: Value) -> Result<OpRequest, ParseFailure> {
        parse_json(json!({"version": 1, "op": op}))
    }

    fn error(op_json: Value) -> HandleError {
        op(op_json.clone())
            .map(|r| panic!("{op_json} parsed as {r:?}"))
            .unwrap_err()
            .error
    }

    #[test]
    fn every_operation_parses_with_defaults_applied() {
        let cases = [
            (json!({"kind": "metadata"}), Operation::Metadata),
            (
                json!({"kind": "peek", "head": 10}),
                Operation::Peek(Peek::Head(10)),
            ),
            (
                json!({"kind": "peek", "tail": 3}),
                Operation::Peek(Peek::Tail(3)),
            ),
            (
                json!({"kind": "peek", "item": 0}),
                Operation::Peek(Peek::Item(0)),
            ),
            (
                json!({"kind": "slice", "start": 5, "length": 0}),
                Operation::Slice {
                    start: 5,
                    length: 0,
                },
            ),
            (
                json!({"kind": "search", "pattern": "ERROR"}),
                Operation::Search {
                    pattern: "ERROR".into(),
                },
            ),
            (
                json!({"kind": "partition", "by": "lines", "size": 2}),
                Operation::Partition {
                    by: PartitionBy::Lines,
                    size: 2,
                },
            ),
            (
                json!({"kind": "map", "function": "uppercase"}),
                Operation::Map(MapFunction::Uppercase),
            ),
            (
                json!({"kind": "reduce", "function": "byte_count"}),
                Operation::Reduce(ReduceFunction::ByteCount),
            ),
        ];
        for (body, expected) in cases {
            let request = op(body.clone()).unwrap_or_else(|e| panic!("{body}: {e:?}"));
            assert_eq!(request.op, expected);
            assert_eq!(request.version, 1);
            assert_eq!(request.limits, Limits::defaults(&settings()));
        }
    }

    #[test]
    fn limits_are_taken_up_to_their_caps_and_never_clamped() {
        let request = op(
            json!({"kind": "search", "pattern": "x", "maxResults": 10000,
                               "maxBytes": 1048576, "timeLimitMs": 1000}),
        )
        .unwrap();
        assert_eq!(
            request.limits,
            Limits {
                max_results: 10_000,
                max_bytes: 1_048_576,
                time_limit: Duration::from_secs(1),
            }
        );
        for (field, value, max) in [
            ("maxResults", json!(10_001), 10_000),
            ("maxResults", json!(0), 10_000),
            ("maxBytes", json!(1_048_577), 1_048_576),
            ("maxBytes", json!(-1), 1_048_576),
            ("maxBytes", json!(1.5), 1_048_576),
            ("timeLimitMs", json!(1001), 1000),
            ("timeLimitMs", json!("50"), 1000),
        ] {
            let mut body = json!({"kind": "metadata"});
            body[field] = value.clone();
            match error(body) {
                HandleError::InvalidLimit {
                    field: named,
                    max: m,
                    ..
                } => {
                    assert_eq!(named, format!("op.{field}"));
                    assert_eq!(m, Some(max));
                }
                other => panic!("{field}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn whole_numbers_may_be_written_with_a_zero_fraction() {
        let request = parse_json(json!({"version": 1.0, "op": {"kind": "slice", "start": 2.0,
            "length": 3, "maxResults": 10.0}}))
        .unwrap();
        assert_eq!(request.version, 1);
        assert_eq!(
            request.op,
            Operation::Slice {
                start: 2,
                length: 3
            }
        );
        assert_eq!(request.limits.max_results, 10);
    }

    #[test]
    fn functions_outside_the_allow_list_are_denied() {
        for (kind, function) in [
            ("map", "eval"),
            ("map", "regex_replace"),
            ("map", "file:/etc/passwd"),
            ("map", "Lowercase"),
            ("reduce", "sum"),
            ("reduce", "fetch https://example.com"),
        ] {
            let error = error(json!({"kind": kind, "function": function}));
            assert_eq!(error.kind(), "capability_denied", "{kind} {function}");
            let fields = error.fields();
            assert_eq!(fields["operation"], kind);
            assert_eq!(fields["field"], "op.function");
        }
        let failure = op(json!({"kind": "map", "function": "shell"})).unwrap_err();
        assert_eq!(failure.op, "map");
        assert_eq!(failure.version, Some(1), "traced under the handle");
    }

    #[test]
    fn patterns_and_partitions_are_checked() {
        for pattern in ["", "a\nb", "a\rb", &"x".repeat(MAX_PATTERN_BYTES + 1)] {
            assert_eq!(
                error(json!({"kind": "search", "pattern": pattern})).kind(),
                "invalid_pattern"
            );
        }
        assert!(op(json!({"kind": "search", "pattern": "x".repeat(MAX_PATTERN_BYTES)})).is_ok());
        let unsupported = error(json!({"kind": "partition", "by": "sentences", "size": 2}));
        assert_eq!(unsupported.kind(), "unsupported_partition");
        assert_eq!(unsupported.fields()["supported"], json!(["size", "lines"]));
        let zero = error(json!({"kind": "partition", "by": "size", "size": 0}));
        assert_eq!(zero.kind(), "invalid_argument");
        assert_eq!(zero.fields()["field"], "op.size");
    }

    #[test]
    fn malformed_requests_name_the_field() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"version": 1, "op": {"kind": "peek"}}), "op"),
            (
                json!({"version": 1, "op": {"kind": "peek", "head": 1, "tail": 1}}),
                "op",
            ),
            (
                json!({"version": 1, "op": {"kind": "peek", "head": -1}}),
                "op.head",
            ),
            (
                json!({"version": 1, "op": {"kind": "slice", "start": 0}}),
                "op.length",
            ),
            (
                json!({"version": 1, "op": {"kind": "search", "pattern": 7}}),
                "op.pattern",
            ),
            (
                json!({"version": 1, "op": {"kind": "metadata", "colour": "red"}}),
                "op.colour",
            ),
            (json!({"version": 1, "op": {"kind": "exec"}}), "op.kind"),
            (json!({"version": 1, "op": {}}), "op.kind"),
            (json!({"version": 1, "op": "metadata"}), "op"),
            (json!({"version": 1}), "op"),
            (json!({"op": {"kind": "metadata"}}), "version"),
            (
                json!({"version": "1", "op": {"kind": "metadata"}}),
                "version",
            ),
            (
                json!({"version": -1, "op": {"kind": "metadata"}}),
                "version",
            ),
            (
                json!({"version": 1, "op": {"kind": "metadata"}, "path": "/etc"}),
                "path",
            ),
        ];
        for (body, field) in cases {
            let failure = parse_json(body.clone()).unwrap_err();
            assert_eq!(failure.error.kind(), "invalid_argument", "{body}");
            assert_eq!(failure.error.fields()["field"], field, "{body}");
        }
        for body in ["", "not json", "[1]", "{\"version\": 1, \"op\": "] {
            let failure = parse(body.as_bytes(), &settings()).unwrap_err();
            assert_eq!(failure.error.kind(), "invalid_argument", "{body}");
            assert_eq!((failure.op, failure.version), ("unknown", None));
        }
    }
}
