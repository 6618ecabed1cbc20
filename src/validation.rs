//! The shared vocabulary of checking a document: one [`Problem`] at a path, the
//! [`Problems`] collector that gathers every problem of a document before anything is
//! used, and the id grammar that server configs, bindings and Projects share.
//!
//! Paths are whatever the document speaks: dotted TOML paths in configs and bindings
//! (`providers.orders.timeout_ms`), JSON paths in Projects (`$.providers[0].id`).

use crate::secrets;
use regex::Regex;
use std::fmt;
use std::sync::LazyLock;

/// Provider, tenant, project, layer, profile, test and scope ids.
static ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$").expect("valid regex"));

/// How to write an id, as every message about an invalid one says it.
pub(crate) const ID_RULE: &str =
    "use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit";

/// Whether `id` follows the id grammar.
pub(crate) fn is_valid_id(id: &str) -> bool {
    ID.is_match(id)
}

/// How a document writes a map, for messages: a JSON object or a TOML table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notation {
    Json,
    Toml,
}

impl Notation {
    fn map_word(self) -> &'static str {
        match self {
            Notation::Json => "an object",
            Notation::Toml => "a table",
        }
    }
}

/// A parser's message in the words of the documents it read: types as a person says
/// them, never as Rust spells them (`invalid type: string "5", expected u32` becomes
/// `must be a whole number (found a string)`), and without the value, which may be
/// anything. Messages of another form pass through unchanged.
pub(crate) fn in_words(message: &str, notation: Notation) -> String {
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return format!(
            "must be {} (found {})",
            expected_word(expected, notation),
            found_word(found, notation)
        );
    }
    if let Some(rest) = message.strip_prefix("invalid value: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        let expected = expected_word(expected, notation);
        return if found.starts_with("integer `-") {
            format!("must be {expected}, not negative")
        } else if found.starts_with("integer") {
            format!("must be {expected}, and this one is too large")
        } else {
            format!("must be {expected} (found {})", found_word(found, notation))
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        let expected = expected.strip_prefix("one of ").unwrap_or(expected);
        return format!("must be one of {expected} (found {found})");
    }
    if let Some(field) = message.strip_prefix("missing field ") {
        return format!("{field} is required");
    }
    message.to_owned()
}

/// A deserializer's name for what it expected, in words.
fn expected_word(expected: &str, notation: Notation) -> String {
    let expected = expected.trim();
    match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128"
        | "isize" => "a whole number".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a string" | "a borrowed string" | "string" => "a string".to_owned(),
        "a boolean" | "bool" => "true or false".to_owned(),
        "a sequence" | "sequence" => "a list".to_owned(),
        "a character" | "char" => "a single character".to_owned(),
        "a map" | "map" => notation.map_word().to_owned(),
        _ if expected.starts_with("struct ") => notation.map_word().to_owned(),
        other => other.to_owned(),
    }
}

/// A deserializer's description of what it found (`integer `5``, `string "x"`), in
/// words and without the value.
fn found_word(found: &str, notation: Notation) -> &'static str {
    let kind = found.split([' ', '`', '"']).next().unwrap_or(found);
    match kind {
        "integer" if found.starts_with("integer `-") => "a negative number",
        "integer" => "a whole number",
        "floating" => "a number with a fraction",
        "string" | "char" => "a string",
        "boolean" => "true or false",
        "sequence" => "a list",
        "map" => notation.map_word(),
        "null" | "unit" => "nothing",
        _ => "another kind of value",
    }
}

/// One problem in a document, at a path; the path is empty for a problem with the whole
/// document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Collects every problem while a document is checked, so that one mistake does not hide
/// the others.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    /// Joined before every path added (`$` for a Project); empty: paths as given.
    root: String,
    list: Vec<Problem>,
    /// Values flagged as secrets: redacted from every message by [`Problems::into_screened`].
    withheld: Vec<String>,
    /// Whether a reference to an undeclared id is a problem; not when the declarations
    /// themselves could not be read (a stand-in replaced them), as the reference may well
    /// be right.
    ignore_references: bool,
}

impl Problems {
    /// A collector whose paths are relative to `root` (`$` gives `$.providers[0].id`).
    pub(crate) fn under(root: &str) -> Problems {
        Problems {
            root: root.to_owned(),
            ..Problems::default()
        }
    }

    /// A problem at `path` (below the root; empty: the root itself).
    pub(crate) fn add(&mut self, path: &str, message: impl Into<String>) {
        let path = match (self.root.is_empty(), path.is_empty()) {
            (true, _) => path.to_owned(),
            (false, true) => self.root.clone(),
            (false, false) => format!("{}.{path}", self.root),
        };
        self.list.push(Problem::new(path, message));
    }

    /// A collector that drops [`Problems::reference`] problems.
    pub(crate) fn ignoring_references(mut self) -> Problems {
        self.ignore_references = true;
        self
    }

    /// A problem with a reference to an id the document does not declare (a binding to an
    /// undeclared provider, a profile naming an unknown layer…).
    pub(crate) fn reference(&mut self, path: &str, message: impl Into<String>) {
        if !self.ignore_references {
            self.add(path, message);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Checks an id against the shared id grammar; `what` names the id in the message.
    pub(crate) fn id(&mut self, path: &str, what: &str, id: &str) -> bool {
        let valid = is_valid_id(id);
        if !valid {
            self.add(path, format!("{what} id {id:?} is invalid: {ID_RULE}"));
        }
        valid
    }

    /// Never show `value` in a message, whichever check mentions it.
    pub(crate) fn withhold(&mut self, value: &str) {
        if !value.is_empty() {
            self.withheld.push(value.to_owned());
        }
    }

    /// The problems as collected.
    pub(crate) fn into_problems(self) -> Vec<Problem> {
        self.list
    }

    /// The problems of a file that may hold inline secrets (configs, bindings): withheld
    /// values redacted, and a message that would still show something secret-looking
    /// replaced as a whole.
    pub(crate) fn into_screened(self) -> Vec<Problem> {
        let Problems { list, withheld, .. } = self;
        list.into_iter()
            .map(|mut problem| {
                problem.path = redact(&problem.path, &withheld);
                problem.message = redact(&problem.message, &withheld);
                if let Some(detector) =
                    secrets::scan(&problem.path).or_else(|| secrets::scan(&problem.message))
                {
                    problem.message = format!(
                        "a value here looks like a secret ({}); the message is withheld",
                        detector.name()
                    );
                    if secrets::scan(&problem.path).is_some() {
                        problem.path = String::new();
                    }
                }
                problem
            })
            .collect()
    }
}

/// `text` with every withheld value, raw or as written inside a quoted string, replaced.
fn redact(text: &str, withheld: &[String]) -> String {
    let mut text = text.to_owned();
    for value in withheld {
        let escaped = format!("{value:?}");
        let escaped = &escaped[1..escaped.len() - 1];
        text = text.replace(value, "<redacted>");
        if escaped != value {
            text = text.replace(escaped, "<redacted>");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_messages_say_types_in_words_without_values() {
        for (message, notation, words) in [
            (
                "invalid type: string \"two\", expected u32",
                Notation::Json,
                "must be a whole number (found a string)",
            ),
            (
                "invalid type: integer `5`, expected a string",
                Notation::Toml,
                "must be a string (found a whole number)",
            ),
            (
                "invalid type: floating point `1.5`, expected i64",
                Notation::Toml,
                "must be a whole number (found a number with a fraction)",
            ),
            (
                "invalid type: string \"x\", expected f64",
                Notation::Toml,
                "must be a number (found a string)",
            ),
            (
                "invalid type: sequence, expected a boolean",
                Notation::Toml,
                "must be true or false (found a list)",
            ),
            (
                "invalid type: boolean `true`, expected struct Budget",
                Notation::Json,
                "must be an object (found true or false)",
            ),
            (
                "invalid type: map, expected a sequence",
                Notation::Toml,
                "must be a list (found a table)",
            ),
            (
                "invalid type: null, expected a string",
                Notation::Json,
                "must be a string (found nothing)",
            ),
            (
                "invalid value: integer `-1`, expected u32",
                Notation::Json,
                "must be a whole number, not negative",
            ),
            (
                "unknown variant `sometimes`, expected one of `required`, `preferred`",
                Notation::Json,
                "must be one of `required`, `preferred` (found `sometimes`)",
            ),
            ("missing field `name`", Notation::Json, "`name` is required"),
            (
                "unknown field `colour`, expected one of `id`, `name`",
                Notation::Json,
                "unknown field `colour`, expected one of `id`, `name`",
            ),
        ] {
            assert_eq!(in_words(message, notation), words, "{message}");
        }
    }

    #[test]
    fn problems_display_with_their_path_unless_it_is_empty() {
        assert_eq!(
            Problem::new("revision", "must not be empty").to_string(),
            "revision: must not be empty"
        );
        assert_eq!(Problem::new("", "whole file").to_string(), "whole file");
    }

    #[test]
    fn paths_join_the_root() {
        let mut problems = Problems::under("$");
        problems.add("providers[0].id", "a");
        problems.add("", "b");
        let mut plain = Problems::default();
        plain.add("providers.crm", "c");
        plain.add("", "d");
        let paths = |problems: Problems| -> Vec<String> {
            problems
                .into_problems()
                .into_iter()
                .map(|p| p.path)
                .collect()
        };
        assert_eq!(paths(problems), ["$.providers[0].id", "$"]);
        assert_eq!(paths(plain), ["providers.crm", ""]);
    }

    #[test]
    fn ids_follow_one_grammar() {
        for id in ["a", "A9", "crm.v2", "order_items-1", &"x".repeat(128)] {
            assert!(is_valid_id(id), "{id}");
        }
        for id in ["", "-a", ".a", "_a", "a b", "a/b", "ä", &"x".repeat(129)] {
            assert!(!is_valid_id(id), "{id}");
        }
        let mut problems = Problems::default();
        assert!(problems.id("id", "tenant", "acme"));
        assert!(!problems.id("id", "tenant", "-acme"));
        assert_eq!(
            problems.into_problems(),
            [Problem::new(
                "id",
                "tenant id \"-acme\" is invalid: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )]
        );
    }

    #[test]
    fn withheld_values_are_redacted_from_screened_messages() {
        let mut problems = Problems::default();
        problems.withhold("hunter2\"x");
        problems.add("a", "value \"hunter2\\\"x\" is wrong");
        problems.add("b", "raw hunter2\"x here");
        let errors = problems.into_screened();
        assert_eq!(errors[0].message, "value \"<redacted>\" is wrong");
        assert_eq!(errors[1].message, "raw <redacted> here");
    }

    #[test]
    fn a_screened_message_that_still_looks_secret_is_withheld() {
        let token = format!("{}{}", "ghp_", "b".repeat(36));
        let mut problems = Problems::default();
        problems.add("type", format!("unknown type {token:?}"));
        let errors = problems.into_screened();
        assert!(!errors[0].message.contains(&token));
        assert!(errors[0].message.contains("github_token"));
    }

    #[test]
    fn unscreened_problems_are_as_collected() {
        let token = format!("{}{}", "ghp_", "b".repeat(36));
        let mut problems = Problems::under("$");
        problems.add("id", format!("unknown {token}"));
        assert_eq!(
            problems.into_problems()[0].message,
            format!("unknown {token}")
        );
    }
}
