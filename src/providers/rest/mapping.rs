//! Mapping a REST answer's JSON to items (pure): the item list by `mapping.items`, then
//! each item's fields by their JSONPath, relative to the item. Only the first `limit`
//! items are mapped; the rest are counted as dropped (an API does not know ctxd's
//! limit, so more items than asked for is not a failure).
//!
//! Every item is built through the budgeted builder ([`ItemsBuilder`]): what a path
//! selects is measured before it is copied, so a path that selects whole subtrees
//! (`$..*`) copies no more than an item may hold.
//!
//! A [`MappingError`] names the binding's path and the item index, never a value from
//! the answer: it is logged.

use crate::bounds::BoundsViolation;
use crate::config::Mapping;
use crate::providers::items::{ItemDraft, ItemsBuilder};
use serde_json::Value as Json;
use serde_json_path::JsonPath;
use std::borrow::Cow;
use std::fmt;

/// The mapped items (their secret step still to come) and how many past the limit were
/// left out.
#[derive(Debug)]
pub(crate) struct Mapped {
    pub(crate) items: ItemsBuilder,
    pub(crate) dropped: usize,
}

/// Why an answer does not map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MappingError {
    /// `mapping.items` matched nothing, or something that is not a list or an object.
    NoItemList { path: String, found: &'static str },
    /// A field of item `index` does not map.
    Field {
        index: usize,
        field: &'static str,
        path: String,
        problem: String,
    },
    /// The items cross a bound of the contract while they are mapped.
    Bounds(BoundsViolation),
}

impl From<BoundsViolation> for MappingError {
    fn from(violation: BoundsViolation) -> Self {
        MappingError::Bounds(violation)
    }
}

impl fmt::Display for MappingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MappingError::NoItemList { path, found } => {
                write!(
                    f,
                    "mapping.items {path:?} found {found}, not a list or an object"
                )
            }
            MappingError::Field {
                index,
                field,
                path,
                problem,
            } => write!(f, "item {index}: mapping.{field} {path:?} {problem}"),
            MappingError::Bounds(violation) => violation.fmt(f),
        }
    }
}

fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

/// The items of `answer`, at most `limit` of them.
pub(crate) fn map_items(
    mapping: &Mapping,
    answer: &Json,
    limit: usize,
) -> Result<Mapped, MappingError> {
    let list: Vec<&Json> = match &mapping.items {
        None => whole(answer).ok_or(MappingError::NoItemList {
            path: "$".to_owned(),
            found: kind(answer),
        })?,
        Some(path) => {
            let nodes = path.query(answer).all();
            let no_list = |found| MappingError::NoItemList {
                path: path.to_string(),
                found,
            };
            match nodes.as_slice() {
                [] => return Err(no_list("nothing")),
                [one] => whole(one).ok_or_else(|| no_list(kind(one)))?,
                _ => nodes,
            }
        }
    };
    let dropped = list.len().saturating_sub(limit);
    let mut items = ItemsBuilder::new(u32::try_from(limit).unwrap_or(u32::MAX));
    for item in list.into_iter().take(limit) {
        let mut draft = items.item()?;
        map_item(mapping, item, &mut draft)?;
        items.push(draft)?;
    }
    Ok(Mapped { items, dropped })
}

/// A list's elements, or an object as the one item.
fn whole(node: &Json) -> Option<Vec<&Json>> {
    match node {
        Json::Array(items) => Some(items.iter().collect()),
        Json::Object(_) => Some(vec![node]),
        _ => None,
    }
}

fn map_item(mapping: &Mapping, item: &Json, draft: &mut ItemDraft) -> Result<(), MappingError> {
    let index = draft.index();
    let error = |field: &'static str, path: &JsonPath, problem: String| MappingError::Field {
        index,
        field,
        path: path.to_string(),
        problem,
    };
    match scalar(&mapping.id, item).map_err(|p| error("id", &mapping.id, p))? {
        Some(id) if !id.is_empty() => draft.id(id)?,
        _ => {
            return Err(error(
                "id",
                &mapping.id,
                "found no id (nothing, null or an empty string)".to_owned(),
            ));
        }
    }
    let optional = |field: &'static str, path: &Option<JsonPath>| match path {
        None => Ok(None),
        Some(path) => scalar(path, item).map_err(|p| error(field, path, p)),
    };
    if let Some(title) = optional("title", &mapping.title)? {
        draft.title(title)?;
    }
    if let Some(content) = optional("content", &mapping.content)? {
        draft.content(content)?;
    }
    if let Some(updated_at) = optional("updated_at", &mapping.updated_at)? {
        draft.updated_at(updated_at)?;
    }
    for (key, path) in &mapping.metadata {
        let nodes = path.query(item).all();
        if can_select_several(path) {
            draft.metadata_copy_list(key, &nodes)?;
        } else {
            match nodes.as_slice() {
                [] | [Json::Null] => continue,
                [one] => draft.metadata_copy(key, one)?,
                several => draft.metadata_copy_list(key, several)?,
            }
        }
    }
    Ok(())
}

/// A field's text: one string, number or boolean; `None` for no match or null. A string
/// is borrowed from the answer: the builder copies it once it knows it fits.
fn scalar<'a>(path: &JsonPath, item: &'a Json) -> Result<Option<Cow<'a, str>>, String> {
    let nodes = path.query(item).all();
    match nodes.as_slice() {
        [] | [Json::Null] => Ok(None),
        [Json::String(text)] => Ok(Some(Cow::Borrowed(text.as_str()))),
        [Json::Number(number)] => Ok(Some(Cow::Owned(number.to_string()))),
        [Json::Bool(flag)] => Ok(Some(Cow::Owned(flag.to_string()))),
        [other] => Err(format!("found {}, not text", kind(other))),
        several => Err(format!("found {} values, not one", several.len())),
    }
}

/// Whether a path can select more than one node (wildcard, descendants, filter,
/// slice or union): its metadata value is then always a list, however many matched.
fn can_select_several(path: &JsonPath) -> bool {
    let mut outside_quotes = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in path.to_string().chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None => outside_quotes.push(c),
        }
    }
    outside_quotes.contains('*')
        || outside_quotes.contains("..")
        || outside_quotes.contains('?')
        || outside_quotes.contains(':')
        || outside_quotes.contains(',')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Item;
    use crate::secrets::redact::SecretHandling;
    use serde_json::json;

    /// The items of a mapped answer, after the secret step.
    fn finished(mapped: Mapped) -> Vec<Item> {
        mapped
            .items
            .finish(SecretHandling::Refuse)
            .expect("clean items")
            .0
    }

    fn path(text: &str) -> JsonPath {
        JsonPath::parse(text).unwrap()
    }

    fn github_mapping(items: Option<&str>) -> Mapping {
        Mapping {
            items: items.map(path),
            id: path("$.number"),
            title: Some(path("$.title")),
            content: Some(path("$.body")),
            updated_at: Some(path("$.updated_at")),
            metadata: vec![
                ("labels".into(), path("$.labels[*].name")),
                ("author".into(), path("$.user.login")),
                ("milestone".into(), path("$.milestone.title")),
            ],
        }
    }

    fn issue(number: u64, labels: &[&str]) -> Json {
        json!({
            "number": number, "title": format!("Issue {number}"), "body": null,
            "updated_at": "2026-11-01T10:00:00Z", "user": {"login": "octocat"},
            "labels": labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
            "milestone": null
        })
    }

    #[test]
    fn an_object_is_one_item_and_nested_fields_map() {
        let mapped = map_items(&github_mapping(None), &issue(7, &["bug"]), 5).unwrap();
        assert_eq!(mapped.dropped, 0);
        assert_eq!(
            finished(mapped),
            [Item {
                id: "7".into(),
                title: Some("Issue 7".into()),
                content: String::new(),
                metadata: serde_json::from_value(json!({"labels": ["bug"], "author": "octocat"}))
                    .unwrap(),
                updated_at: Some("2026-11-01T10:00:00Z".into()),
            }]
        );
    }

    #[test]
    fn lists_are_cut_at_the_limit_and_the_rest_counted() {
        let list = Json::Array((1..=5000).map(|n| issue(n, &[])).collect());
        let mapped = map_items(&github_mapping(Some("$")), &list, 3).unwrap();
        assert_eq!(mapped.dropped, 4997);
        let items = finished(mapped);
        assert_eq!(items.len(), 3);
        assert_eq!(items[2].id, "3");
        let nested = json!({"issues": [issue(1, &[]), issue(2, &[])]});
        let several = map_items(&github_mapping(Some("$.issues[*]")), &nested, 10).unwrap();
        assert_eq!((several.items.len(), several.dropped), (2, 0));
        let empty = map_items(
            &github_mapping(Some("$.issues")),
            &json!({"issues": []}),
            10,
        );
        assert_eq!(finished(empty.unwrap()), []);
    }

    #[test]
    fn errors_name_the_path_and_the_item_index() {
        let mapping = github_mapping(Some("$.issues"));
        let cases = [
            (
                json!({"other": []}),
                "mapping.items \"$.issues\" found nothing, not a list or an object",
            ),
            (
                json!({"issues": "x"}),
                "mapping.items \"$.issues\" found a string, not a list or an object",
            ),
            (
                json!({"issues": [issue(1, &[]), {"title": "no number"}]}),
                "item 1: mapping.id \"$.number\" found no id (nothing, null or an empty string)",
            ),
            (
                json!({"issues": [{"number": 1, "title": {"text": "x"}}]}),
                "item 0: mapping.title \"$.title\" found an object, not text",
            ),
        ];
        for (answer, expected) in cases {
            let error = map_items(&mapping, &answer, 10).unwrap_err();
            assert_eq!(error.to_string(), expected);
        }
        let whole = map_items(&github_mapping(None), &json!("text"), 10).unwrap_err();
        assert_eq!(
            whole,
            MappingError::NoItemList {
                path: "$".into(),
                found: "a string"
            }
        );
    }

    #[test]
    fn a_descendant_path_copies_no_more_than_an_item_holds() {
        // A 120-deep answer of about 1 MiB: `$..*` selects every subtree, and a copy of
        // each (the nested ones again and again) once cost +127 MiB per lookup.
        let mut nested = json!("x".repeat(8 * 1024));
        for depth in 0..120 {
            nested = json!({"level": depth, "pad": "y".repeat(8 * 1024), "child": nested});
        }
        let answer = json!({"id": 1, "deep": nested});
        let mut mapping = github_mapping(None);
        mapping.id = path("$.id");
        mapping.metadata = vec![("all".into(), path("$..*"))];
        let (mapped, peak) = crate::alloc_meter::peak_extra(|| map_items(&mapping, &answer, 5));
        assert!(
            matches!(
                mapped,
                Err(MappingError::Bounds(BoundsViolation::ItemOverLimit {
                    index: 0,
                    ..
                }))
            ),
            "{mapped:?}"
        );
        assert!(peak < 4 << 20, "mapping held {peak} bytes at its peak");
    }

    #[test]
    fn several_node_paths_are_recognised() {
        for (text, several) in [
            ("$.a.b", false),
            ("$['a*b']", false),
            ("$.a[0]", false),
            ("$.a[*]", true),
            ("$..name", true),
            ("$.a[?@.x == 1]", true),
            ("$.a[0:2]", true),
            ("$.a[0,1]", true),
        ] {
            assert_eq!(can_select_several(&path(text)), several, "{text}");
        }
    }
}
