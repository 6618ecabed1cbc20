//! The pure core of the MCP provider: the request a lookup makes (tool arguments or the
//! resource URI) and what an MCP result becomes — items bounded and scanned like every
//! provider answer, or a typed failure. No I/O: results arrive as JSON values.
//!
//! A tool result: each `text` content block is an item (other block types carry no text
//! a context can use and are skipped); `structuredContent` is every item's metadata, and
//! with no text block it becomes one item whose content is its JSON. `isError: true` is
//! `UNAVAILABLE` (`TOOL_ERROR`). A resource result: each text resource content is an
//! item with the content's URI as its id. No item at all is `NOT_FOUND`.

use crate::bounds::{self, BoundsViolation, MAX_RESPONSE_BYTES};
use crate::contract::{Currentness, Source};
use crate::outcome::{Failure, Outcome};
use crate::providers::items::{self, ItemsBuilder};
use crate::providers::untrusted::{MIN_MASKED_BYTES, Masks, UntrustedText};
use crate::secrets::redact::SecretHandling;
use serde_json::{Map, Value as Json};
use std::borrow::Cow;

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

/// What a result turned into: items mapped within the bounds (the secret step still to
/// come), or a failure; `tool_error` holds the text of an `isError` result (for the log,
/// after [`loggable_error`]).
#[derive(Debug)]
pub(crate) enum Mapped {
    Items(ItemsBuilder),
    ToolError(String),
    Failed(Failure),
}

/// The serialized size of a result, refused over the response bound: measured without
/// writing it out, and no further than the bound.
pub(crate) fn check_size(result: &Json) -> Result<(), Failure> {
    match items::json_len_within(result, MAX_RESPONSE_BYTES) {
        Some(_) => Ok(()),
        None => Err(Failure::ResponseTooLarge),
    }
}

/// The checks of a whole result before any item is mapped: its size, then the bound
/// credential echoed anywhere in it.
fn check_result(result: &Json, credential: Option<&str>) -> Result<(), Failure> {
    check_size(result)?;
    if let Some(credential) = credential.filter(|c| !c.is_empty())
        && mentions(result, credential)
    {
        return Err(Failure::CredentialReflected);
    }
    Ok(())
}

/// A `tools/call` result as items, at most `limit` of them. The text blocks are counted
/// before any is mapped, and the structured content is measured before each copy.
pub(crate) fn map_tool_result(
    tool: &str,
    result: &Json,
    limit: u32,
    credential: Option<&str>,
) -> Mapped {
    if let Err(failure) = check_result(result, credential) {
        return Mapped::Failed(failure);
    }
    let Some(object) = result.as_object() else {
        return Mapped::Failed(Failure::Malformed);
    };
    let blocks: &[Json] = match object.get("content") {
        None => &[],
        Some(Json::Array(blocks)) => blocks,
        Some(_) => return Mapped::Failed(Failure::Malformed),
    };
    let texts = || {
        blocks
            .iter()
            .filter(|block| block.get("type").and_then(Json::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Json::as_str))
    };
    if object.get("isError").and_then(Json::as_bool) == Some(true) {
        // Only what the log shows of it is kept.
        let mut shown = String::new();
        for text in texts() {
            if shown.len() >= MAX_TOOL_ERROR_BYTES {
                break;
            }
            if !shown.is_empty() {
                shown.push('\n');
            }
            let room = MAX_TOOL_ERROR_BYTES - shown.len();
            shown.push_str(&text[..text.floor_char_boundary(room)]);
        }
        return Mapped::ToolError(shown);
    }
    let structured = match object.get("structuredContent") {
        None | Some(Json::Null) => None,
        Some(Json::Object(map)) => Some(Cow::Borrowed(map)),
        Some(other) => Some(Cow::Owned(Map::from_iter([(
            "value".to_owned(),
            other.clone(),
        )]))),
    };
    let mut builder = ItemsBuilder::new(limit);
    let built = (|| {
        builder.expect(texts().count())?;
        for text in texts() {
            let mut item = builder.item()?;
            item.id(format!("{tool}#{}", item.index()))?;
            item.content(text)?;
            if let Some(structured) = &structured {
                item.metadata_copy_all(structured)?;
            }
            builder.push(item)?;
        }
        if builder.len() == 0
            && let Some(structured) = &structured
        {
            let mut item = builder.item()?;
            item.id(format!("{tool}#0"))?;
            // Its JSON is written out only once it is known to fit.
            items::map_len_within(structured, bounds::MAX_ITEM_BYTES).ok_or(
                BoundsViolation::ItemOverLimit {
                    index: 0,
                    limit: bounds::MAX_ITEM_BYTES,
                },
            )?;
            item.content(serde_json::to_string(structured.as_ref()).unwrap_or_default())?;
            item.metadata_copy_all(structured)?;
            builder.push(item)?;
        }
        Ok::<(), BoundsViolation>(())
    })();
    match built {
        Ok(()) => Mapped::Items(builder),
        Err(violation) => Mapped::Failed(Failure::from(&violation)),
    }
}

/// The most bytes of a tool error's text kept for the log.
const MAX_TOOL_ERROR_BYTES: usize = 4096;

/// A `resources/read` result as items, at most `limit` of them.
pub(crate) fn map_resource_result(result: &Json, limit: u32, credential: Option<&str>) -> Mapped {
    if let Err(failure) = check_result(result, credential) {
        return Mapped::Failed(failure);
    }
    let Some(Json::Array(contents)) = result.get("contents") else {
        return Mapped::Failed(Failure::Malformed);
    };
    let texts = || {
        contents.iter().filter_map(|content| {
            let text = content.get("text").and_then(Json::as_str)?;
            Some((content, text))
        })
    };
    let mut builder = ItemsBuilder::new(limit);
    let built = (|| {
        builder.expect(texts().count())?;
        for (content, text) in texts() {
            let mut item = builder.item()?;
            item.id(content
                .get("uri")
                .and_then(Json::as_str)
                .unwrap_or("resource"))?;
            item.content(text)?;
            if let Some(mime) = content.get("mimeType").filter(|mime| mime.is_string()) {
                item.metadata_copy("mimeType", mime)?;
            }
            builder.push(item)?;
        }
        Ok::<(), BoundsViolation>(())
    })();
    match built {
        Ok(()) => Mapped::Items(builder),
        Err(violation) => Mapped::Failed(Failure::from(&violation)),
    }
}

/// Mapped items through the secret step every provider answer passes: an outcome.
pub(crate) fn finish(items: ItemsBuilder, secrets: SecretHandling) -> Outcome {
    let (items, redactions) = match items.finish(secrets) {
        Ok(finished) => finished,
        Err(violation) => return Outcome::failed(Failure::from(&violation), Source::Live),
    };
    if items.is_empty() {
        return Outcome::not_found(Source::Live);
    }
    Outcome::answered(items, Currentness::Unknown, Source::Live).with_redactions(redactions)
}

/// Whether any string of `value`, or any key, holds `credential`.
fn mentions(value: &Json, credential: &str) -> bool {
    match value {
        Json::String(text) => text.contains(credential),
        Json::Array(elements) => elements.iter().any(|v| mentions(v, credential)),
        Json::Object(map) => map
            .iter()
            .any(|(key, v)| key.contains(credential) || mentions(v, credential)),
        Json::Null | Json::Bool(_) | Json::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Item, ProviderStatus};
    use serde_json::json;

    fn mapped_items(mapped: Mapped) -> Vec<Item> {
        match mapped {
            Mapped::Items(items) => items.finish(SecretHandling::Refuse).expect("clean").0,
            other => panic!("items, not {other:?}"),
        }
    }

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
        let items = mapped_items(map_tool_result("lookup", &result, 5, None));
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].id, "lookup#0");
        assert_eq!(items[1].content, "second");
        assert_eq!(items[1].metadata["tier"], "gold");
    }

    #[test]
    fn structured_content_alone_is_one_item() {
        let result = json!({"content": [], "structuredContent": {"seats": 12}});
        let items = mapped_items(map_tool_result("profile", &result, 5, None));
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].content, r#"{"seats":12}"#);
    }

    #[test]
    fn an_error_result_is_a_tool_error() {
        let result = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert!(matches!(
            map_tool_result("t", &result, 5, None),
            Mapped::ToolError(text) if text == "boom"
        ));
        assert_eq!(Failure::ToolError.status(), ProviderStatus::Unavailable);
    }

    #[test]
    fn malformed_and_oversized_results_are_refused() {
        assert!(matches!(
            map_tool_result("t", &json!({"content": "nope"}), 5, None),
            Mapped::Failed(Failure::Malformed)
        ));
        assert!(matches!(
            map_resource_result(&json!({"nothing": 1}), 5, None),
            Mapped::Failed(Failure::Malformed)
        ));
        let big = "x".repeat(MAX_RESPONSE_BYTES + 1);
        assert!(matches!(
            map_tool_result(
                "t",
                &json!({"content": [{"type": "text", "text": big}]}),
                5,
                None
            ),
            Mapped::Failed(Failure::ResponseTooLarge)
        ));
    }

    #[test]
    fn resource_contents_become_items_named_by_uri() {
        let result = json!({"contents": [
            {"uri": "customers://c/profile", "mimeType": "text/plain", "text": "gold"},
            {"uri": "customers://c/avatar", "blob": "AAAA"}
        ]});
        let items = mapped_items(map_resource_result(&result, 5, None));
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].id, "customers://c/profile");
        assert_eq!(items[0].metadata["mimeType"], "text/plain");
    }

    #[test]
    fn finishing_applies_every_bound() {
        let text_result = |texts: &[&str]| json!({"content": texts.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()});
        let outcome = |texts: &[&str], limit: u32, secrets: SecretHandling, credential| {
            match map_tool_result("t", &text_result(texts), limit, credential) {
                Mapped::Items(items) => finish(items, secrets),
                Mapped::Failed(failure) => Outcome::failed(failure, Source::Live),
                Mapped::ToolError(_) => panic!("not an error result"),
            }
        };
        let ok = outcome(&["fine"], 5, SecretHandling::Refuse, None);
        assert_eq!(ok.status(), ProviderStatus::Ok);
        let none = outcome(&[], 5, SecretHandling::Refuse, None);
        assert_eq!(none.status(), ProviderStatus::NotFound);
        let too_many = outcome(&["a", "b"], 1, SecretHandling::Refuse, None);
        assert_eq!(too_many.status(), ProviderStatus::LimitExceeded);
        let big = outcome(
            &[&"x".repeat(bounds::MAX_ITEM_BYTES + 1)],
            5,
            SecretHandling::Refuse,
            None,
        );
        assert_eq!(big.status(), ProviderStatus::LimitExceeded);
        let aws = outcome(
            &["key AKIAQ3RT7KWY2ZZW4N5P"],
            5,
            SecretHandling::Refuse,
            None,
        );
        assert_eq!(aws.status(), ProviderStatus::SecretDetected);
        let redacted = outcome(
            &["key AKIAQ3RT7KWY2ZZW4N5P"],
            5,
            SecretHandling::Redact,
            None,
        );
        assert_eq!(redacted.status(), ProviderStatus::Ok);
        assert!(!redacted.items_found()[0].content.contains("AKIA"));
        let reflected = outcome(
            &["you sent Bearer tok-123"],
            5,
            SecretHandling::Refuse,
            Some("tok-123"),
        );
        assert_eq!(reflected.detail(), Some("CREDENTIAL_REFLECTED"));
    }

    #[test]
    fn structured_content_is_measured_before_it_is_copied_for_each_item() {
        // 100 empty text blocks (the limit) and a structured content of 50 KiB: every
        // item would carry a copy; the answer stops at its byte bound instead.
        let structured = json!({"blob": "x".repeat(50 * 1024)});
        let blocks: Vec<Json> = (0..100)
            .map(|_| json!({"type": "text", "text": ""}))
            .collect();
        let result = json!({"content": blocks, "structuredContent": structured});
        assert!(matches!(
            map_tool_result("t", &result, 100, None),
            Mapped::Failed(Failure::ResponseTooLarge)
        ));
        // More blocks than the limit: refused before a single item is mapped.
        let blocks: Vec<Json> = (0..5000)
            .map(|_| json!({"type": "text", "text": ""}))
            .collect();
        let result = json!({"content": blocks, "structuredContent": {"a": 1}});
        assert!(matches!(
            map_tool_result("t", &result, 100, None),
            Mapped::Failed(Failure::TooManyItems)
        ));
        // Structured content alone, larger than an item.
        let result = json!({"structuredContent": {"blob": "x".repeat(70 * 1024)}});
        assert!(matches!(
            map_tool_result("t", &result, 5, None),
            Mapped::Failed(Failure::ItemTooLarge)
        ));
    }

    #[test]
    fn mapping_a_hostile_result_costs_about_the_bounds_in_memory() {
        // The shape that once cost +526 MiB: a 229 KB answer of empty text blocks and a
        // structured content, copied into every item before the count was checked.
        let structured = json!({"blob": "x".repeat(20 * 1024)});
        for blocks in [8_000, 100] {
            let content: Vec<Json> = (0..blocks)
                .map(|_| json!({"type": "text", "text": ""}))
                .collect();
            let result = json!({"content": content, "structuredContent": structured});
            let (mapped, peak) =
                crate::alloc_meter::peak_extra(|| map_tool_result("t", &result, 100, None));
            assert!(matches!(mapped, Mapped::Failed(_)), "{blocks} blocks");
            assert!(
                peak < 3 * MAX_RESPONSE_BYTES,
                "{blocks} blocks: mapping held {peak} bytes at its peak"
            );
        }
    }

    #[test]
    fn a_tool_errors_text_is_kept_only_as_far_as_the_log_shows_it() {
        let result = json!({"isError": true, "content": [
            {"type": "text", "text": "é".repeat(10_000)},
            {"type": "text", "text": "second"}
        ]});
        let Mapped::ToolError(text) = map_tool_result("t", &result, 5, None) else {
            panic!("a tool error")
        };
        assert!(text.len() <= MAX_TOOL_ERROR_BYTES, "{}", text.len());
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
