//! The pure core of the MCP provider: the request a lookup makes (tool arguments or the
//! resource URI) and what an MCP result becomes — items bounded and scanned like every
//! provider answer, or a typed failure. No I/O: results arrive as JSON values.
//!
//! A tool result: each `text` content block is an item (other block types carry no text
//! a context can use and are skipped); `structuredContent` is every item's metadata, and
//! with no text block it becomes one item whose content is its JSON. `isError: true` is
//! `UNAVAILABLE` (`TOOL_ERROR`). A resource result: each text resource content is an
//! item with the content's URI as its id. No item at all is `NOT_FOUND`.

use crate::contract::{Currentness, Item, Source};
use crate::outcome::{Failure, Outcome};
use crate::providers::bounds::{self, MAX_RESPONSE_BYTES};
use crate::providers::redact::SecretHandling;
use crate::providers::untrusted::{MIN_MASKED_BYTES, Masks, UntrustedText};
use serde_json::{Map, Value as Json};

/// The arguments of a `tools/call`: the fixed ones with the lookup value beside them.
pub(crate) fn tool_arguments(
    fixed: &Map<String, Json>,
    argument: &str,
    value: &str,
) -> Map<String, Json> {
    let mut arguments = fixed.clone();
    arguments.insert(argument.to_owned(), Json::String(value.to_owned()));
    arguments
}

/// The URI template with its one `{slot}` replaced by the value, percent-encoded so the
/// value can never add a path segment, query or fragment.
pub(crate) fn resource_uri(template: &str, value: &str) -> Option<String> {
    let start = template.find('{')?;
    let end = start + template[start..].find('}')?;
    let encoded: String =
        url::form_urlencoded::byte_serialize(value.as_bytes()).collect::<String>();
    // form encoding writes a space as `+`; a URI slot wants `%20`.
    let encoded = encoded.replace('+', "%20");
    Some(format!(
        "{}{}{}",
        &template[..start],
        encoded,
        &template[end + 1..]
    ))
}

/// An error text from the server, fit for a log line: untrusted text
/// ([`UntrustedText`]: bounded, escaped, secret patterns masked) with the binding's own
/// secrets (`masks`) and the lookup value (which a server may quote) masked. A value too
/// short for the masks' rule is masked here all the same: a lookup value never reaches a
/// log line.
pub(crate) fn loggable_error(text: &str, masks: &Masks, value: &str) -> String {
    let mut masks = masks.clone();
    masks.value(value);
    let shown = UntrustedText::new(text, &masks).into_string();
    if !value.is_empty() && value.len() < MIN_MASKED_BYTES {
        shown.replace(value, "[VALUE]")
    } else {
        shown
    }
}

/// What a result turned into before the bounds: items, or a failure; `tool_error` holds
/// the text of an `isError` result (for the log, after [`loggable_error`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Mapped {
    Items(Vec<Item>),
    ToolError(String),
    Failed(Failure),
}

/// The serialized size of a result, refused over the response bound.
pub(crate) fn check_size(result: &Json) -> Result<(), Failure> {
    let size = serde_json::to_vec(result)
        .map(|b| b.len())
        .unwrap_or(usize::MAX);
    if size > MAX_RESPONSE_BYTES {
        Err(Failure::ResponseTooLarge)
    } else {
        Ok(())
    }
}

/// A `tools/call` result as items.
pub(crate) fn map_tool_result(tool: &str, result: &Json) -> Mapped {
    if let Err(failure) = check_size(result) {
        return Mapped::Failed(failure);
    }
    let Some(object) = result.as_object() else {
        return Mapped::Failed(Failure::Malformed);
    };
    let texts: Vec<&str> = match object.get("content") {
        None => Vec::new(),
        Some(Json::Array(blocks)) => blocks
            .iter()
            .filter(|block| block.get("type").and_then(Json::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Json::as_str))
            .collect(),
        Some(_) => return Mapped::Failed(Failure::Malformed),
    };
    if object.get("isError").and_then(Json::as_bool) == Some(true) {
        return Mapped::ToolError(texts.join("\n"));
    }
    let structured = match object.get("structuredContent") {
        None | Some(Json::Null) => None,
        Some(Json::Object(map)) => Some(map.clone()),
        Some(other) => Some(Map::from_iter([("value".to_owned(), other.clone())])),
    };
    let mut items: Vec<Item> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| Item {
            id: format!("{tool}#{index}"),
            title: None,
            content: (*text).to_owned(),
            metadata: structured.clone().unwrap_or_default(),
            updated_at: None,
        })
        .collect();
    if items.is_empty()
        && let Some(structured) = structured
    {
        items.push(Item {
            id: format!("{tool}#0"),
            title: None,
            content: Json::Object(structured.clone()).to_string(),
            metadata: structured,
            updated_at: None,
        });
    }
    Mapped::Items(items)
}

/// A `resources/read` result as items.
pub(crate) fn map_resource_result(result: &Json) -> Mapped {
    if let Err(failure) = check_size(result) {
        return Mapped::Failed(failure);
    }
    let Some(Json::Array(contents)) = result.get("contents") else {
        return Mapped::Failed(Failure::Malformed);
    };
    let items = contents
        .iter()
        .filter_map(|content| {
            let text = content.get("text").and_then(Json::as_str)?;
            let uri = content
                .get("uri")
                .and_then(Json::as_str)
                .unwrap_or("resource");
            let mut metadata = Map::new();
            if let Some(mime) = content.get("mimeType").and_then(Json::as_str) {
                metadata.insert("mimeType".to_owned(), Json::String(mime.to_owned()));
            }
            Some(Item {
                id: uri.to_owned(),
                title: None,
                content: text.to_owned(),
                metadata,
                updated_at: None,
            })
        })
        .collect();
    Mapped::Items(items)
}

/// Items through the bounds every provider answer passes (count, size, secrets), then
/// the reflection check of the bound credential: an outcome.
pub(crate) fn finish(
    mut items: Vec<Item>,
    limit: u32,
    secrets: SecretHandling,
    credential: Option<&str>,
) -> Outcome {
    if let Some(credential) = credential.filter(|c| !c.is_empty())
        && items.iter().any(|item| item_mentions(item, credential))
    {
        return Outcome::failed(Failure::CredentialReflected, Source::Live);
    }
    let redactions = match bounds::check_items(&mut items, limit, secrets) {
        Ok(redactions) => redactions,
        Err(violation) => return Outcome::failed(violation.failure(), Source::Live),
    };
    if items.is_empty() {
        return Outcome::not_found(Source::Live);
    }
    Outcome::answered(items, Currentness::Unknown, Source::Live).with_redactions(redactions)
}

fn item_mentions(item: &Item, credential: &str) -> bool {
    item.id.contains(credential)
        || item.content.contains(credential)
        || item
            .title
            .as_deref()
            .is_some_and(|t| t.contains(credential))
        || Json::Object(item.metadata.clone())
            .to_string()
            .contains(credential)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ProviderStatus;
    use serde_json::json;

    #[test]
    fn the_value_fills_one_argument_beside_the_fixed_ones() {
        let fixed = json!({"region": "eu"}).as_object().unwrap().clone();
        let arguments = tool_arguments(&fixed, "customer", "c-1");
        assert_eq!(
            Json::Object(arguments),
            json!({"region": "eu", "customer": "c-1"})
        );
    }

    #[test]
    fn the_value_is_percent_encoded_in_its_slot() {
        assert_eq!(
            resource_uri("customers://{id}/profile", "a b/../c?x#y").unwrap(),
            "customers://a%20b%2F..%2Fc%3Fx%23y/profile"
        );
        assert_eq!(resource_uri("plain://{id}", "c-1").unwrap(), "plain://c-1");
    }

    #[test]
    fn text_blocks_become_items_and_structured_content_their_metadata() {
        let result = json!({
            "content": [
                {"type": "text", "text": "first"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "text", "text": "second"}
            ],
            "structuredContent": {"tier": "gold"}
        });
        let Mapped::Items(items) = map_tool_result("lookup", &result) else {
            panic!("items")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].id, "lookup#0");
        assert_eq!(items[1].content, "second");
        assert_eq!(items[1].metadata["tier"], "gold");
    }

    #[test]
    fn structured_content_alone_is_one_item() {
        let result = json!({"content": [], "structuredContent": {"seats": 12}});
        let Mapped::Items(items) = map_tool_result("profile", &result) else {
            panic!("items")
        };
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].content, r#"{"seats":12}"#);
    }

    #[test]
    fn an_error_result_is_a_tool_error() {
        let result = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert_eq!(
            map_tool_result("t", &result),
            Mapped::ToolError("boom".into())
        );
        assert_eq!(Failure::ToolError.status(), ProviderStatus::Unavailable);
    }

    #[test]
    fn malformed_and_oversized_results_are_refused() {
        assert_eq!(
            map_tool_result("t", &json!({"content": "nope"})),
            Mapped::Failed(Failure::Malformed)
        );
        assert_eq!(
            map_resource_result(&json!({"nothing": 1})),
            Mapped::Failed(Failure::Malformed)
        );
        let big = "x".repeat(MAX_RESPONSE_BYTES + 1);
        assert_eq!(
            map_tool_result("t", &json!({"content": [{"type": "text", "text": big}]})),
            Mapped::Failed(Failure::ResponseTooLarge)
        );
    }

    #[test]
    fn resource_contents_become_items_named_by_uri() {
        let result = json!({"contents": [
            {"uri": "customers://c/profile", "mimeType": "text/plain", "text": "gold"},
            {"uri": "customers://c/avatar", "blob": "AAAA"}
        ]});
        let Mapped::Items(items) = map_resource_result(&result) else {
            panic!("items")
        };
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].id, "customers://c/profile");
        assert_eq!(items[0].metadata["mimeType"], "text/plain");
    }

    #[test]
    fn finishing_applies_every_bound() {
        let item = |content: &str| Item {
            id: "t#0".into(),
            title: None,
            content: content.into(),
            metadata: Map::new(),
            updated_at: None,
        };
        let ok = finish(vec![item("fine")], 5, SecretHandling::Refuse, None);
        assert_eq!(ok.status(), ProviderStatus::Ok);
        let none = finish(vec![], 5, SecretHandling::Refuse, None);
        assert_eq!(none.status(), ProviderStatus::NotFound);
        let too_many = finish(vec![item("a"), item("b")], 1, SecretHandling::Refuse, None);
        assert_eq!(too_many.status(), ProviderStatus::LimitExceeded);
        let big = finish(
            vec![item(&"x".repeat(bounds::MAX_ITEM_BYTES + 1))],
            5,
            SecretHandling::Refuse,
            None,
        );
        assert_eq!(big.status(), ProviderStatus::LimitExceeded);
        let aws = finish(
            vec![item("key AKIAQ3RT7KWY2ZZW4N5P")],
            5,
            SecretHandling::Refuse,
            None,
        );
        assert_eq!(aws.status(), ProviderStatus::SecretDetected);
        let redacted = finish(
            vec![item("key AKIAQ3RT7KWY2ZZW4N5P")],
            5,
            SecretHandling::Redact,
            None,
        );
        assert_eq!(redacted.status(), ProviderStatus::Ok);
        assert!(!redacted.items_found()[0].content.contains("AKIA"));
        let reflected = finish(
            vec![item("you sent Bearer tok-123")],
            5,
            SecretHandling::Refuse,
            Some("tok-123"),
        );
        assert_eq!(reflected.detail(), Some("CREDENTIAL_REFLECTED"));
    }

    #[test]
    fn logged_errors_hide_secrets_and_the_value() {
        let text = loggable_error(
            "no customer c-991 for AKIAQ3RT7KWY2ZZW4N5P",
            &Masks::none(),
            "c-991",
        );
        assert!(!text.contains("c-991"), "{text}");
        assert!(!text.contains("AKIAQ3RT7KWY2ZZW4N5P"), "{text}");
    }

    #[test]
    fn logged_errors_are_one_escaped_line_without_the_bindings_secrets() {
        let mut masks = Masks::none();
        masks.secret("tok-3d9f81c2b7");
        let text = loggable_error(
            "refused tok-3d9f81c2b7 for c-1\n2026-01-01T00:00:00Z  INFO forged\r\x1b]0;t\x07",
            &masks,
            "c-1",
        );
        assert_eq!(
            text,
            "refused [REDACTED:binding_secret] for [VALUE]\\n2026-01-01T00:00:00Z  INFO forged\\r\\u{1b}]0;t\\u{7}"
        );
    }
}
