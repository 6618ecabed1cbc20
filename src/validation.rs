//! The shared vocabulary of checking a document: one [`Problem`] at a path, the
//! [`Problems`] collector that gathers every problem of a document before anything is
//! used, and the id grammar that server configs, bindings and Projects share.
//!
//! Paths are whatever the document speaks: dotted TOML paths in configs and bindings
//! (`providers.orders.timeout_ms`), JSON paths in Projects (`$.providers[0].id`).

use crate::providers::secrets;
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
