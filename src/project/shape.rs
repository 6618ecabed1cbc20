//! The shape of a Project document — which keys each object has, which of them are
//! required, and the type of every value — checked on the raw JSON before typed parsing,
//! so that every unknown key, missing key and value of the wrong type is reported at once
//! and in words (`must be a whole number (found a string)`), not one at a time in Rust's
//! (`expected u32`).
//!
//! A key that does not belong is removed and a value of the wrong type (or a missing
//! required one) is replaced by a stand-in of the right type, so that typed parsing
//! succeeds and the meaning checks still run on everything else; the caller drops what
//! those checks say at or below a replaced path (the stand-in's own complaints).
//!
//! The shapes mirror `model.rs`; typed parsing (`deny_unknown_fields`) stays the
//! authority, and the tests check the two agree.

use crate::validation::Problem;
use serde_json::{Map, Value};

/// What a value must be.
#[derive(Debug)]
pub(super) enum Shape {
    Text,
    Flag,
    /// A whole number from 0 to the bound.
    Count(u64),
    List(&'static Shape),
    Object(&'static [Field]),
    /// An object whose keys the author chooses (ids, input names), every value of one shape.
    Map(&'static Shape),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// Any JSON value (an item's metadata values).
    Any,
}

/// One key of an object.
#[derive(Debug)]
pub(super) struct Field {
    name: &'static str,
    need: Need,
    shape: Shape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    /// May be left out or `null`.
    Optional,
    /// May be left out, not `null` (a list or object that defaults to empty).
    Defaulted,
}

const fn required(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        need: Need::Required,
        shape,
    }
}

const fn optional(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        need: Need::Optional,
        shape,
    }
}

const fn defaulted(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        need: Need::Defaulted,
        shape,
    }
}

pub(super) const PROVIDER_STATUSES: &[&str] = &[
    "OK",
    "NOT_FOUND",
    "TIMEOUT",
    "UNAVAILABLE",
    "LIMIT_EXCEEDED",
    "INVALID_RESPONSE",
    "SECRET_DETECTED",
    "INCOMPATIBLE",
    "NOT_BOUND",
    "INVALID_REQUEST",
    "NOT_EVALUATED",
];
pub(super) const LAYER_STATUSES: &[&str] = &[
    "INCLUDED",
    "EMPTY",
    "UNKNOWN",
    "UNAVAILABLE",
    "NOT_REQUESTED",
    "EXCLUDED",
];
const CURRENTNESS: &[&str] = &["CURRENT", "STALE", "UNKNOWN"];
const CURRENTNESS_RULES: &[&str] = &["required", "preferred"];

const TEXT: Shape = Shape::Text;
const TEXTS: Shape = Shape::List(&TEXT);
const BUDGET: Shape = Shape::Object(&[required("maxBytes", Shape::Count(u64::MAX))]);
const LOOKUP: Shape = Shape::Object(&[required("input", TEXT), optional("pattern", TEXT)]);
const PROVIDER: Shape = Shape::Object(&[
    required("id", TEXT),
    required("name", TEXT),
    required("lookup", LOOKUP),
    optional("maxItems", Shape::Count(u32::MAX as u64)),
]);
const LAYER_BINDING: Shape = Shape::Object(&[required("provider", TEXT)]);
const SCOPE: Shape = Shape::Object(&[optional("objectives", TEXTS), optional("consumers", TEXTS)]);
const LAYER: Shape = Shape::Object(&[
    required("id", TEXT),
    required("name", TEXT),
    optional("content", TEXT),
    optional("bindings", Shape::List(&LAYER_BINDING)),
    optional("required", Shape::Flag),
    optional("requiresInput", TEXTS),
    optional("scope", SCOPE),
    optional("currentness", Shape::OneOf(CURRENTNESS_RULES)),
    optional("handles", Shape::Flag),
]);
const PROFILE: Shape = Shape::Object(&[
    required("id", TEXT),
    optional("include", TEXTS),
    optional("exclude", TEXTS),
]);
const ITEM: Shape = Shape::Object(&[
    required("id", TEXT),
    optional("title", TEXT),
    defaulted("content", TEXT),
    defaulted("metadata", Shape::Map(&Shape::Any)),
    optional("updatedAt", TEXT),
]);
const FIXTURE: Shape = Shape::Object(&[
    optional("items", Shape::List(&ITEM)),
    optional("status", Shape::OneOf(PROVIDER_STATUSES)),
    optional("detail", TEXT),
    optional("currentness", Shape::OneOf(CURRENTNESS)),
    optional("version", TEXT),
    optional("revision", TEXT),
]);
const TEST_REQUEST: Shape = Shape::Object(&[
    optional("profile", TEXT),
    optional("objective", TEXT),
    optional("consumer", TEXT),
    defaulted("inputs", Shape::Map(&TEXT)),
    optional("budget", BUDGET),
]);
const EXPECTATIONS: Shape = Shape::Object(&[
    optional("blocked", Shape::Flag),
    defaulted("layers", Shape::Map(&Shape::OneOf(LAYER_STATUSES))),
    defaulted("providers", Shape::Map(&Shape::OneOf(PROVIDER_STATUSES))),
    defaulted("contains", TEXTS),
    defaulted("notContains", TEXTS),
    optional("equals", TEXT),
]);
const CONTEXT_TEST: Shape = Shape::Object(&[
    required("id", TEXT),
    optional("description", TEXT),
    required("request", TEST_REQUEST),
    defaulted("providers", Shape::Map(&FIXTURE)),
    defaulted("expect", EXPECTATIONS),
]);

/// A Project document.
pub(super) const PROJECT: Shape = Shape::Object(&[
    required("id", TEXT),
    required("version", TEXT),
    optional("name", TEXT),
    optional("description", TEXT),
    optional("budget", BUDGET),
    defaulted("providers", Shape::List(&PROVIDER)),
    required("layers", Shape::List(&LAYER)),
    defaulted("profiles", Shape::List(&PROFILE)),
    defaulted("tests", Shape::List(&CONTEXT_TEST)),
]);

/// What the shape check found and what it changed.
#[derive(Debug, Default)]
pub(super) struct Checked {
    pub(super) problems: Vec<Problem>,
    /// Paths of values replaced by a stand-in; whatever a later check says at or below
    /// them is about the stand-in.
    pub(super) replaced: Vec<String>,
}

/// Checks `value` against `shape` in place: unknown keys removed, values of the wrong
/// type and missing required ones replaced by stand-ins.
pub(super) fn check(value: &mut Value, shape: &Shape, path: &str) -> Checked {
    let mut checked = Checked::default();
    walk(value, shape, path, &mut checked);
    checked
}

impl Checked {
    fn wrong(&mut self, value: &mut Value, shape: &Shape, path: &str, message: String) {
        self.problems.push(Problem::new(path, message));
        self.replaced.push(path.to_owned());
        *value = stand_in(shape);
    }
}

fn walk(value: &mut Value, shape: &Shape, path: &str, checked: &mut Checked) {
    match (shape, &mut *value) {
        (Shape::Any, _) | (Shape::Text, Value::String(_)) | (Shape::Flag, Value::Bool(_)) => {}
        (Shape::Count(max), Value::Number(number)) if number.as_u64().is_some() => {
            let n = number.as_u64().unwrap_or_default();
            if n > *max {
                let message = format!("must be a whole number from 0 to {max} (found {n})");
                checked.wrong(value, shape, path, message);
            }
        }
        (Shape::OneOf(allowed), Value::String(text)) => {
            if !allowed.contains(&text.as_str()) {
                let message = format!("must be one of {} (found {text:?})", quoted(allowed));
                checked.wrong(value, shape, path, message);
            }
        }
        (Shape::List(item), Value::Array(items)) => {
            for (i, child) in items.iter_mut().enumerate() {
                walk(child, item, &format!("{path}[{i}]"), checked);
            }
        }
        (Shape::Map(item), Value::Object(map)) => {
            for (key, child) in map.iter_mut() {
                walk(child, item, &format!("{path}.{key}"), checked);
            }
        }
        (Shape::Object(fields), Value::Object(map)) => object(map, fields, path, checked),
        (shape, found) => {
            let message = format!("must be {} (found {})", expected(shape), found_word(found));
            checked.wrong(value, shape, path, message);
        }
    }
}

fn object(map: &mut Map<String, Value>, fields: &[Field], path: &str, checked: &mut Checked) {
    let unknown: Vec<String> = map
        .keys()
        .filter(|key| !fields.iter().any(|field| field.name == key.as_str()))
        .cloned()
        .collect();
    for key in unknown {
        let mut message = format!(
            "unknown field `{key}`, expected one of {}",
            fields
                .iter()
                .map(|field| format!("`{}`", field.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(near) = fields.iter().find(|field| is_near(&key, field.name)) {
            message.push_str(&format!(" (did you mean `{}`?)", near.name));
        }
        checked
            .problems
            .push(Problem::new(format!("{path}.{key}"), message));
        map.shift_remove(&key);
    }
    for field in fields {
        let field_path = format!("{path}.{}", field.name);
        match map.get_mut(field.name) {
            None if field.need == Need::Required => {
                checked.problems.push(Problem::new(
                    &field_path,
                    format!("is required: {}", expected(&field.shape)),
                ));
                checked.replaced.push(field_path);
                map.insert(field.name.to_owned(), stand_in(&field.shape));
            }
            None => {}
            Some(Value::Null) if field.need == Need::Optional => {}
            Some(child) => walk(child, &field.shape, &field_path, checked),
        }
    }
}

/// A value of the right shape that no check will take for the author's: empty text, zero,
/// `false`, empty lists and objects, the first allowed string.
fn stand_in(shape: &Shape) -> Value {
    match shape {
        Shape::Text => Value::String(String::new()),
        Shape::Flag => Value::Bool(false),
        Shape::Count(_) => Value::from(0),
        Shape::List(_) => Value::Array(Vec::new()),
        Shape::Map(_) => Value::Object(Map::new()),
        Shape::OneOf(allowed) => Value::String(allowed.first().copied().unwrap_or("").to_owned()),
        Shape::Any => Value::Null,
        Shape::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|field| field.need == Need::Required)
                .map(|field| (field.name.to_owned(), stand_in(&field.shape)))
                .collect(),
        ),
    }
}

/// What a shape is, in words.
fn expected(shape: &Shape) -> String {
    match shape {
        Shape::Text => "a string".to_owned(),
        Shape::Flag => "true or false".to_owned(),
        Shape::Count(_) => "a whole number".to_owned(),
        Shape::List(item) => format!("a list of {}", plural(item)),
        Shape::Object(_) => "an object".to_owned(),
        Shape::Map(_) => "an object".to_owned(),
        Shape::OneOf(allowed) => format!("one of {}", quoted(allowed)),
        Shape::Any => "any value".to_owned(),
    }
}

fn plural(shape: &Shape) -> &'static str {
    match shape {
        Shape::Text => "strings",
        Shape::Flag => "true or false values",
        Shape::Count(_) => "whole numbers",
        Shape::List(_) => "lists",
        Shape::Object(_) | Shape::Map(_) => "objects",
        Shape::OneOf(_) | Shape::Any => "values",
    }
}

/// What a JSON value is, in words (never the value itself: a Project may quote anything).
pub(crate) fn found_word(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "true or false",
        Value::Number(number) if number.is_u64() => "a whole number",
        Value::Number(number) if number.is_i64() => "a negative number",
        Value::Number(_) => "a number with a fraction",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn quoted(allowed: &[&str]) -> String {
    allowed
        .iter()
        .map(|value| format!("{value:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `key` looks like a misspelling of `name`: an edit distance of at most 2
/// (letters swapped count as one), compared without case.
fn is_near(key: &str, name: &str) -> bool {
    let a: Vec<char> = key.to_lowercase().chars().collect();
    let b: Vec<char> = name.to_lowercase().chars().collect();
    if a == b {
        return true;
    }
    if a.len().abs_diff(b.len()) > 2 || a.len().min(b.len()) < 3 {
        return false;
    }
    // Optimal string alignment distance.
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()] <= 2
}
