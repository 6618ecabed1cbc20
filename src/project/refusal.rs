//! Refuses deployment details in a Project: endpoints, URLs, secrets, tokens, passwords,
//! DSNs and database paths belong in a Deployment Binding. Runs on the raw JSON before
//! typed parsing so the refusal, not an "unknown field", is what the author sees.

use crate::secrets;
use crate::validation::Problem;
use serde_json::Value;

/// The phrase every refusal carries; tooling and tests look for it.
pub(crate) const BELONGS_IN_BINDING: &str = "belongs in a Deployment Binding";

/// Key names (split into lowercase words) that name a deployment detail.
const REFUSED_KEY_WORDS: &[&str] = &[
    "endpoint",
    "url",
    "uri",
    "href",
    "secret",
    "token",
    "password",
    "passwd",
    "dsn",
    "database",
    "credential",
    "dbpath",
];

/// Compounds caught when the words of a key run together (`apiKey`, `connection_string`).
const REFUSED_KEY_COMPOUNDS: &[&str] = &[
    "apikey",
    "accesskey",
    "privatekey",
    "connectionstring",
    "dbpath",
    "databasepath",
];

/// Scans a raw Project document and returns every refusal with its JSON path.
#[cfg(test)]
pub(crate) fn scan(document: &Value, root: &str) -> Vec<Problem> {
    refuse(&mut document.clone(), root)
}

/// Refuses deployment details in place and returns every refusal with its JSON path: a
/// refused key is removed, a refused value replaced by an empty string — so the later
/// checks see neither (no second message about the same key, no value echoed).
pub(crate) fn refuse(document: &mut Value, root: &str) -> Vec<Problem> {
    let mut found = Vec::new();
    walk(document, root, Position::Other, &mut found);
    found
}

/// Where in the document a value sits, which decides the checks that apply to it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Inside `providers[*]` or `layers[*].bindings[*]`: value shapes are checked too.
    ProviderEntry,
    /// A map whose keys are ids or input names chosen by the author, not settings.
    IdKeyedMap,
    Other,
}

fn walk(value: &mut Value, path: &str, position: Position, found: &mut Vec<Problem>) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_path = format!("{path}.{key}");
                if position != Position::IdKeyedMap && key_is_refused(&key) {
                    found.push(Problem::new(
                        &child_path,
                        format!("`{key}` {BELONGS_IN_BINDING}, not in a Project"),
                    ));
                    map.shift_remove(&key);
                    continue;
                }
                if let Some(detector) = secrets::scan(&key) {
                    // The key is the secret: its path names where it is, not the key.
                    let withheld = format!("{path}.<key withheld>");
                    found.push(secret_refusal(&withheld, detector.name()));
                    map.shift_remove(&key);
                    continue;
                }
                if let Some(child) = map.get_mut(&key) {
                    let position = child_position(path, &key, position);
                    walk(child, &child_path, position, found);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                let child_path = format!("{path}[{i}]");
                let child_position = if is_provider_list(path) {
                    Position::ProviderEntry
                } else if position == Position::IdKeyedMap {
                    Position::Other
                } else {
                    position
                };
                walk(child, &child_path, child_position, found);
            }
        }
        Value::String(text) => {
            let refusal = if let Some(detector) = secrets::scan(text) {
                Some(secret_refusal(path, detector.name()))
            } else if position == Position::ProviderEntry
                && let Some(shape) = deployment_shape(text)
            {
                Some(Problem::new(
                    path,
                    format!("a {shape} {BELONGS_IN_BINDING}, not in a Project"),
                ))
            } else {
                None
            };
            if let Some(refusal) = refusal {
                found.push(refusal);
                text.clear();
            }
        }
        _ => {}
    }
}

fn secret_refusal(path: &str, detector: &str) -> Problem {
    Problem::new(
        path,
        format!(
            "secret detected ({detector}); a secret {BELONGS_IN_BINDING} as an env reference, never in a Project"
        ),
    )
}

/// `providers` at the top level and `bindings` of a layer hold provider entries.
fn is_provider_list(path: &str) -> bool {
    if path.ends_with(".providers") {
        // `$.providers` or `$.project.providers` (a Build); not a test's fixture map.
        !path.contains(".tests[")
    } else {
        path.ends_with(".bindings") && path.contains(".layers[")
    }
}

fn child_position(parent_path: &str, key: &str, position: Position) -> Position {
    let in_test = parent_path.contains(".tests[");
    let id_keyed = in_test
        && match key {
            "providers" | "inputs" => true,
            "layers" => parent_path.ends_with(".expect"),
            _ => false,
        };
    if id_keyed {
        Position::IdKeyedMap
    } else if position == Position::IdKeyedMap {
        Position::Other
    } else {
        position
    }
}

/// Whether a key names a deployment detail. Keys are split into words at case changes,
/// `_`, `-` and `.`, so `apiKey`, `api_key`, `databasePath` and `CRM_URL` are all caught
/// while `security` or `tokenizer`-free words like `customerId` are not.
fn key_is_refused(key: &str) -> bool {
    let words = split_words(key);
    let joined: String = words.concat();
    words.iter().any(|w| {
        let singular = w.strip_suffix('s').unwrap_or(w);
        REFUSED_KEY_WORDS.contains(&w.as_str()) || REFUSED_KEY_WORDS.contains(&singular)
    }) || REFUSED_KEY_COMPOUNDS
        .iter()
        .any(|refused| joined.contains(refused))
}

fn split_words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in key.chars() {
        if c == '_' || c == '-' || c == '.' || c == ' ' {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// The deployment detail a string value looks like, if any.
fn deployment_shape(text: &str) -> Option<&'static str> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    if let Some((scheme, _)) = trimmed.split_once("://") {
        let valid_scheme = !scheme.is_empty()
            && scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'));
        if valid_scheme {
            return Some("URL");
        }
    }
    if lower.starts_with("file:") {
        return Some("database path");
    }
    const DATABASE_SUFFIXES: &[&str] = &[".db", ".sqlite", ".sqlite3", ".db3"];
    if DATABASE_SUFFIXES.iter().any(|s| lower.ends_with(s)) {
        return Some("database path");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(document: &Value) -> Vec<String> {
        scan(document, "$").into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_key_that_is_a_secret_is_refused_without_being_repeated() {
        let token = format!("{}{}", "ghp_", "a".repeat(36));
        let document = json!({"id": "p", "layers": [{"id": "l", "scope": {token.clone(): 1}}]});
        let problems = scan(&document, "$");
        assert_eq!(problems.len(), 1, "{problems:?}");
        let shown = format!("{}: {}", problems[0].path, problems[0].message);
        assert!(!shown.contains(&token), "{shown}");
        assert!(
            shown.starts_with("$.layers[0].scope.<key withheld>"),
            "{shown}"
        );
        assert!(shown.contains("github_token"), "{shown}");
    }

    #[test]
    fn refused_key_names_anywhere() {
        for key in [
            "endpoint",
            "url",
            "baseUrl",
            "CRM_URL",
            "secret",
            "clientSecret",
            "token",
            "accessToken",
            "password",
            "dsn",
            "database",
            "databasePath",
            "db_path",
            "apiKey",
            "api_key",
            "connectionString",
            "credentials",
        ] {
            assert!(key_is_refused(key), "{key} should be refused");
        }
    }

    #[test]
    fn ordinary_key_names_pass() {
        for key in [
            "id",
            "name",
            "customerId",
            "lookup",
            "input",
            "pattern",
            "maxItems",
            "security",
            "content",
            "required",
            "requiresInput",
            "scope",
            "objectives",
            "consumers",
            "currentness",
            "plan",
            "status",
            "description",
            "urgency",
        ] {
            assert!(!key_is_refused(key), "{key} should pass");
        }
    }

    #[test]
    fn refusals_name_the_path_and_the_binding() {
        let document = json!({
            "providers": [{"id": "crm", "endpoint": "https://crm.internal/context"}],
            "layers": [{"id": "l", "bindings": [{"provider": "crm", "dsn": "x"}]}]
        });
        let errors = scan(&document, "$");
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].path, "$.providers[0].endpoint");
        assert!(errors[0].message.contains(BELONGS_IN_BINDING));
        assert_eq!(errors[1].path, "$.layers[0].bindings[0].dsn");
    }

    #[test]
    fn value_shapes_in_provider_and_binding_entries() {
        let document = json!({
            "providers": [
                {"id": "crm", "name": "https://crm.internal/context"},
                {"id": "orders", "name": "data/orders.db"},
                {"id": "pg", "lookup": {"input": "postgresql://db.internal/app"}}
            ],
            "layers": [{"id": "l", "bindings": [{"provider": "file:orders.sqlite"}]}]
        });
        assert_eq!(
            paths(&document),
            [
                "$.providers[0].name",
                "$.providers[1].name",
                "$.providers[2].lookup.input",
                "$.layers[0].bindings[0].provider"
            ]
        );
    }

    #[test]
    fn a_link_in_static_prose_is_text() {
        let document = json!({
            "layers": [{"id": "policy", "content": "See https://example.com/refunds for the policy."}]
        });
        assert!(paths(&document).is_empty());
    }

    #[test]
    fn secret_patterns_anywhere_including_static_text() {
        let jwt = format!(
            "{}.{}.{}",
            "eyJhbGciOiJIUzI1NiJ9", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "abcdefghijklmnop"
        );
        let document = json!({
            "layers": [{"id": "policy", "content": format!("Use {jwt} to log in.")}],
            "tests": [{"id": "t", "providers": {"crm": {"items": [{"id": "1", "content": "postgres://app:hunter2@db/prod"}]}}}]
        });
        let errors = scan(&document, "$");
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].path, "$.layers[0].content");
        assert!(errors[0].message.contains("jwt"));
        assert!(errors[0].message.contains(BELONGS_IN_BINDING));
        assert!(!errors[0].message.contains(&jwt));
        assert_eq!(errors[1].path, "$.tests[0].providers.crm.items[0].content");
        assert!(!errors[1].message.contains("hunter2"));
    }

    #[test]
    fn id_keyed_maps_in_tests_are_not_key_checked() {
        let document = json!({
            "tests": [{
                "id": "t",
                "request": {"inputs": {"tokenId": "T-1"}},
                "providers": {"token-service": {"items": []}},
                "expect": {"layers": {"token-layer": "INCLUDED"}}
            }]
        });
        assert!(paths(&document).is_empty());
    }

    #[test]
    fn fixture_metadata_keys_are_checked() {
        let document = json!({
            "tests": [{"id": "t", "providers": {"crm": {"items": [{"id": "1", "metadata": {"url": "x"}}]}}}]
        });
        assert_eq!(
            paths(&document),
            ["$.tests[0].providers.crm.items[0].metadata.url"]
        );
    }
}
