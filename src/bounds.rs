//! The contract's hard limits on provider answers, shared by every provider type and by
//! fixtures, with the binding's rule for secrets: every provider answer passes
//! [`check_secrets`] once its items were built within the limits
//! ([`crate::providers::items::ItemsBuilder`]), the one place where a secret is refused or
//! redacted; fixtures, which ctxd reads whole, pass [`check_items_refusing`].

use crate::contract::{Item, RedactionCounts};
use crate::secrets;
use crate::secrets::redact::{self, SecretHandling};

/// Largest response body accepted from a provider, in bytes.
pub(crate) const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// Most items one answer may carry, whatever limit was requested.
pub(crate) const MAX_ITEMS: usize = 100;
/// Largest item, measured as the length of its canonical JSON (`serde_json::to_vec`).
pub(crate) const MAX_ITEM_BYTES: usize = 64 * 1024;
/// Shortest provider timeout a configuration may set, in milliseconds.
pub(crate) const MIN_TIMEOUT_MS: u64 = 50;
/// Longest provider timeout a configuration may set, in milliseconds.
pub(crate) const MAX_TIMEOUT_MS: u64 = 10_000;

/// Longest item id accepted, in bytes.
pub(crate) const MAX_ID_BYTES: usize = 256;

const _: () = assert!(MIN_TIMEOUT_MS < MAX_TIMEOUT_MS);
const _: () = assert!(MAX_ITEM_BYTES < MAX_RESPONSE_BYTES);

/// Why a set of items was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsViolation {
    #[error("{count} items exceed the limit of {limit}")]
    TooManyItems { count: usize, limit: usize },
    #[error("item {index} is {bytes} bytes, over the {limit}-byte item limit")]
    ItemTooLarge {
        index: usize,
        bytes: usize,
        limit: usize,
    },
    #[error("item {index} {problem}")]
    InvalidItem { index: usize, problem: &'static str },
    #[error("item {index} is over the {limit}-byte item limit")]
    ItemOverLimit { index: usize, limit: usize },
    #[error("the items are over the {limit}-byte answer limit")]
    AnswerTooLarge { limit: usize },
    #[error("the answer holds more than {limit} JSON values")]
    TooManyValues { limit: usize },
    #[error("item {index} field {field}: secret detected ({detector})")]
    SecretDetected {
        index: usize,
        field: &'static str,
        detector: &'static str,
    },
}

impl BoundsViolation {
    /// The provider status this violation gives the invocation.
    #[cfg(test)]
    pub(crate) fn status(&self) -> crate::contract::ProviderStatus {
        crate::outcome::Failure::from(self).status()
    }
}

/// The secret step every provider answer passes, whatever the provider type, once its
/// items were built within the bounds ([`crate::providers::items::ItemsBuilder`]): secret patterns
/// in id, title, content, metadata (keys and values) and `updatedAt`, refused or
/// redacted as `secrets` says. A secret is reported by field and detector name only.
/// Under [`SecretHandling::Redact`] every secret is replaced by `[REDACTED:<kind>]` and
/// counted, and a redacted item is checked for validity and size again (a marker can be
/// longer than what it replaced), as is the answer's total. Returns the counts (empty
/// under `Refuse`).
pub(crate) fn check_secrets(
    items: &mut [Item],
    secrets: SecretHandling,
) -> Result<RedactionCounts, BoundsViolation> {
    if secrets == SecretHandling::Refuse {
        for (index, item) in items.iter().enumerate() {
            check_secrets_of(index, item)?;
        }
        return Ok(RedactionCounts::new());
    }
    let mut counts = RedactionCounts::new();
    let mut grown = false;
    for (index, item) in items.iter_mut().enumerate() {
        let before = counts.values().sum::<u32>();
        redact::redact_item(item, &mut counts).map_err(|(field, detector)| {
            BoundsViolation::SecretDetected {
                index,
                field,
                detector,
            }
        })?;
        if counts.values().sum::<u32>() != before {
            check_validity(index, item)?;
            check_size(index, item)?;
            grown = true;
        }
    }
    if grown {
        let total: usize = items.iter().map(serialized_len).sum();
        if total > MAX_RESPONSE_BYTES {
            return Err(BoundsViolation::AnswerTooLarge {
                limit: MAX_RESPONSE_BYTES,
            });
        }
    }
    Ok(counts)
}

/// Items read whole checked against the limits, in order — the count first, then each
/// item's validity (a non-empty `id` of at most 256 bytes), size and secrets, refused:
/// for content that is never redacted and that ctxd reads whole, Context Test fixtures,
/// Project validation, `provider-check`'s conformance verdict.
pub fn check_items_refusing(items: &[Item], requested_limit: u32) -> Result<(), BoundsViolation> {
    check_count(items.len(), requested_limit)?;
    for (index, item) in items.iter().enumerate() {
        check_validity(index, item)?;
        check_size(index, item)?;
        check_secrets_of(index, item)?;
    }
    Ok(())
}

fn check_count(count: usize, requested_limit: u32) -> Result<(), BoundsViolation> {
    let limit = usize::try_from(requested_limit).map_or(MAX_ITEMS, |l| l.min(MAX_ITEMS));
    if count > limit {
        return Err(BoundsViolation::TooManyItems { count, limit });
    }
    Ok(())
}

fn check_validity(index: usize, item: &Item) -> Result<(), BoundsViolation> {
    let problem = if item.id.is_empty() {
        "has an empty id"
    } else if item.id.len() > MAX_ID_BYTES {
        "has an id longer than 256 bytes"
    } else {
        return Ok(());
    };
    Err(BoundsViolation::InvalidItem { index, problem })
}

fn check_size(index: usize, item: &Item) -> Result<(), BoundsViolation> {
    let bytes = serialized_len(item);
    if bytes > MAX_ITEM_BYTES {
        return Err(BoundsViolation::ItemTooLarge {
            index,
            bytes,
            limit: MAX_ITEM_BYTES,
        });
    }
    Ok(())
}

/// The length of an item's canonical JSON. Serializing an item cannot fail: its map
/// keys are strings and its numbers finite.
pub(crate) fn serialized_len(item: &Item) -> usize {
    let mut counted = ByteCount(0);
    let _ = serde_json::to_writer(&mut counted, item);
    counted.0
}

/// Counts what is written to it: a serialized size without building its text.
pub(crate) struct ByteCount(pub(crate) usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn check_secrets_of(index: usize, item: &Item) -> Result<(), BoundsViolation> {
    let found = |field: &'static str, detector: secrets::Detector| {
        Err(BoundsViolation::SecretDetected {
            index,
            field,
            detector: detector.name(),
        })
    };
    if let Some(detector) = secrets::scan(&item.id) {
        return found("id", detector);
    }
    if let Some(detector) = item.title.as_deref().and_then(secrets::scan) {
        return found("title", detector);
    }
    if let Some(detector) = secrets::scan(&item.content) {
        return found("content", detector);
    }
    if !item.metadata.is_empty()
        && let Some(detector) = secrets::scan_map(&item.metadata)
    {
        return found("metadata", detector);
    }
    if let Some(detector) = item.updated_at.as_deref().and_then(secrets::scan) {
        return found("updatedAt", detector);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ProviderStatus;
    use serde_json::{Map, json};

    fn item(id: &str) -> Item {
        Item {
            id: id.to_owned(),
            title: None,
            content: String::new(),
            metadata: Map::new(),
            updated_at: None,
        }
    }

    fn items(count: usize) -> Vec<Item> {
        (0..count).map(|i| item(&format!("rec-{i}"))).collect()
    }

    /// An item whose canonical JSON is exactly `bytes` long.
    fn item_of_size(bytes: usize) -> Item {
        let mut sized = item("big");
        let overhead = serde_json::to_vec(&sized).unwrap().len();
        sized.content = "x".repeat(bytes - overhead);
        assert_eq!(serde_json::to_vec(&sized).unwrap().len(), bytes);
        sized
    }

    fn github_token() -> String {
        format!("{}{}", "ghp_", "a".repeat(36))
    }

    #[test]
    fn count_is_capped_by_max_items() {
        assert_eq!(check_items_refusing(&items(100), 100), Ok(()));
        assert_eq!(check_items_refusing(&items(100), u32::MAX), Ok(()));
        let err = check_items_refusing(&items(101), 100).unwrap_err();
        assert_eq!(
            err,
            BoundsViolation::TooManyItems {
                count: 101,
                limit: 100
            }
        );
        assert_eq!(err.status(), ProviderStatus::LimitExceeded);
        assert_eq!(err.to_string(), "101 items exceed the limit of 100");
        assert_eq!(
            check_items_refusing(&items(101), 1000),
            Err(BoundsViolation::TooManyItems {
                count: 101,
                limit: MAX_ITEMS
            })
        );
    }

    #[test]
    fn count_is_capped_by_requested_limit() {
        assert_eq!(check_items_refusing(&items(2), 2), Ok(()));
        assert_eq!(
            check_items_refusing(&items(3), 2),
            Err(BoundsViolation::TooManyItems { count: 3, limit: 2 })
        );
        assert_eq!(check_items_refusing(&[], 0), Ok(()));
        assert_eq!(
            check_items_refusing(&items(1), 0),
            Err(BoundsViolation::TooManyItems { count: 1, limit: 0 })
        );
    }

    #[test]
    fn item_size_is_checked_at_the_byte() {
        assert_eq!(
            check_items_refusing(&[item_of_size(MAX_ITEM_BYTES)], 1),
            Ok(())
        );
        let err =
            check_items_refusing(&[item("ok"), item_of_size(MAX_ITEM_BYTES + 1)], 2).unwrap_err();
        assert_eq!(
            err,
            BoundsViolation::ItemTooLarge {
                index: 1,
                bytes: MAX_ITEM_BYTES + 1,
                limit: MAX_ITEM_BYTES
            }
        );
        assert_eq!(err.status(), ProviderStatus::LimitExceeded);
        assert_eq!(
            err.to_string(),
            "item 1 is 65537 bytes, over the 65536-byte item limit"
        );
    }

    #[test]
    fn ids_must_be_present_and_short() {
        assert_eq!(check_items_refusing(&[item(&"i".repeat(256))], 1), Ok(()));
        let err = check_items_refusing(&[item("")], 1).unwrap_err();
        assert_eq!(
            err,
            BoundsViolation::InvalidItem {
                index: 0,
                problem: "has an empty id"
            }
        );
        assert_eq!(err.status(), ProviderStatus::InvalidResponse);
        assert_eq!(err.to_string(), "item 0 has an empty id");
        let err = check_items_refusing(&[item("a"), item(&"i".repeat(257))], 2).unwrap_err();
        assert_eq!(
            err,
            BoundsViolation::InvalidItem {
                index: 1,
                problem: "has an id longer than 256 bytes"
            }
        );
        // 86 three-byte characters: 258 bytes though only 86 characters.
        assert!(matches!(
            check_items_refusing(&[item(&"€".repeat(86))], 1),
            Err(BoundsViolation::InvalidItem { index: 0, .. })
        ));
    }

    #[test]
    fn checks_run_in_order() {
        // Count before anything else.
        let mut many = items(3);
        many[0].id.clear();
        assert!(matches!(
            check_items_refusing(&many, 2),
            Err(BoundsViolation::TooManyItems { .. })
        ));
        // Validity before size, size before secrets.
        let mut big = item_of_size(MAX_ITEM_BYTES + 1);
        big.id.clear();
        assert!(matches!(
            check_items_refusing(&[big], 1),
            Err(BoundsViolation::InvalidItem { .. })
        ));
        let mut big = item_of_size(MAX_ITEM_BYTES + 100);
        big.title = Some(github_token());
        assert!(matches!(
            check_items_refusing(&[big], 1),
            Err(BoundsViolation::ItemTooLarge { .. })
        ));
        // Items in order: a secret in item 0 wins over an invalid item 1.
        let mut pair = items(2);
        pair[0].content = github_token();
        pair[1].id.clear();
        assert!(matches!(
            check_items_refusing(&pair, 2),
            Err(BoundsViolation::SecretDetected { index: 0, .. })
        ));
    }

    #[test]
    fn secrets_are_found_in_every_field() {
        let token = github_token();
        let mut in_id = item(&token);
        in_id.content = "clean".to_owned();
        let mut in_title = item("a");
        in_title.title = Some(format!("see {token}"));
        let mut in_content = item("a");
        in_content.content = format!("line one\n{token}\n");
        let mut in_meta_key = item("a");
        in_meta_key.metadata.insert(token.clone(), json!("x"));
        let mut in_meta_value = item("a");
        in_meta_value
            .metadata
            .insert("notes".to_owned(), json!({ "nested": [token.clone()] }));
        let mut in_updated_at = item("a");
        in_updated_at.updated_at = Some(token.clone());

        for (sample, field) in [
            (in_id, "id"),
            (in_title, "title"),
            (in_content, "content"),
            (in_meta_key, "metadata"),
            (in_meta_value, "metadata"),
            (in_updated_at, "updatedAt"),
        ] {
            let err = check_items_refusing(&[item("clean"), sample], 2).unwrap_err();
            assert_eq!(
                err,
                BoundsViolation::SecretDetected {
                    index: 1,
                    field,
                    detector: "github_token"
                }
            );
            assert_eq!(err.status(), ProviderStatus::SecretDetected);
            let message = err.to_string();
            assert_eq!(
                message,
                format!("item 1 field {field}: secret detected (github_token)")
            );
            assert!(!message.contains(&token));
        }
    }

    #[test]
    fn clean_items_pass() {
        let mut clean = item("ORD-77812");
        clean.title = Some("Order ORD-77812 for CUST-1042".to_owned());
        clean.content = "Refund issued on 2024-03-05; see https://example.com/refunds.".to_owned();
        clean
            .metadata
            .insert("email".to_owned(), json!("alice@example.com"));
        clean.metadata.insert("total".to_owned(), json!(12.5));
        clean.updated_at = Some("2024-03-05T10:15:30Z".to_owned());
        assert_eq!(check_items_refusing(&[clean], 1), Ok(()));
    }

    #[test]
    fn refuse_is_the_shared_step_with_secrets_refused() {
        let mut pair = items(2);
        pair[1].content = github_token();
        assert_eq!(
            check_secrets(&mut pair, SecretHandling::Refuse),
            Err(BoundsViolation::SecretDetected {
                index: 1,
                field: "content",
                detector: "github_token"
            })
        );
        assert_eq!(pair[1].content, github_token(), "refusing changes nothing");
        assert_eq!(
            check_secrets(&mut items(2), SecretHandling::Refuse),
            Ok(RedactionCounts::new())
        );
    }

    #[test]
    fn redact_keeps_the_items_and_counts_what_it_replaced() {
        let token = github_token();
        let mut answer = items(2);
        answer[0].content = format!("deploy key {token}, then {token}");
        answer[1]
            .metadata
            .insert("note".to_owned(), json!(format!("old {token}")));
        let counts = check_secrets(&mut answer, SecretHandling::Redact).unwrap();
        assert_eq!(
            counts,
            RedactionCounts::from([("github_token".to_owned(), 3)])
        );
        assert_eq!(
            answer[0].content,
            "deploy key [REDACTED:github_token], then [REDACTED:github_token]"
        );
        assert_eq!(answer[1].metadata["note"], "old [REDACTED:github_token]");
        assert_eq!(check_items_refusing(&answer, 2), Ok(()));
        // Clean items come back untouched, with no counts.
        let mut clean = items(3);
        assert_eq!(
            check_secrets(&mut clean, SecretHandling::Redact),
            Ok(RedactionCounts::new())
        );
        assert_eq!(clean, items(3));
    }

    #[test]
    fn redact_still_enforces_the_item_bound() {
        // Markers longer than the secrets they replace can push an item over the limit.
        let secret = format!("{}://a:{}@h", "postgres", "b");
        let mut grown = item_of_size(MAX_ITEM_BYTES - 5);
        grown
            .content
            .truncate(grown.content.len() - secret.len() - 1);
        grown.content.push(' ');
        grown.content.push_str(&secret);
        let mut grown = vec![grown];
        assert!(matches!(
            check_secrets(&mut grown, SecretHandling::Redact),
            Err(BoundsViolation::ItemTooLarge { .. })
        ));
    }
}
