//! Server config (`config/ctxd.toml`), tenants and Deployment Bindings: parsed from TOML
//! into raw types, validated without I/O collecting every problem with its path, then
//! resolved into the types the runtime uses. The environment is passed in ([`EnvVars`]).
//!
//! Both files go through the same steps:
//! 1. TOML syntax → a `toml::Table`;
//! 2. inline secrets refused on the raw tree (by key name and by value pattern), before
//!    typed parsing, so the author sees "use an env reference" rather than "unknown key";
//! 3. typed parsing with `deny_unknown_fields`, one section (one provider, one tenant) at a
//!    time so a mistake in one does not hide the others;
//! 4. range and rule checks collecting every problem as a [`Problem`] with a dotted
//!    path such as `providers.orders.timeout_ms`.
//!
//! A value recognized as a secret is never echoed: every message passes through
//! [`Problems`], which redacts the values the secret scan flagged.

mod binding;

mod server;
mod trace_store;

pub(crate) use crate::env::EnvVars;
pub(crate) use binding::mcp_template_problem;
pub use binding::{
    Binding, CacheSettings, CircuitSettings, DEFAULT_RETENTION_TTL, DEFAULT_TIMEOUT_MS,
    ProviderBinding, ProviderKind, RestSpec, Retention,
};
pub(crate) use binding::{Mapping, RestAuth, RestMethod, Segment, Template};
pub use binding::{McpBinding, McpLookup, McpTransport};
pub(crate) use server::{
    ApiKey, EnvironmentNeed, Limits, McpAccess, ServerConfig, ServerSettings, TenantConfig,
    TraceSettings, TraceStore,
};
pub(crate) use trace_store::DigestKeySource;

use crate::secrets;
use crate::validation::{Notation, Problem, Problems, in_words};
use regex::Regex;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

/// Environment variable names that configs may reference.
static ENV_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[A-Za-z_][A-Za-z0-9_]*$").expect("valid regex"));
/// TOML keys that need no quoting in a dotted path.
static BARE_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[A-Za-z0-9_-]+$").expect("valid regex"));

/// Key names that can only hold an inline credential, compared lowercase with `-` read as `_`.
const SECRET_KEY_NAMES: &[&str] = &[
    "secret",
    "token",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "bearer",
    "authorization",
    "credentials",
    "credential",
    "access_token",
    "auth_token",
    "client_secret",
    "private_key",
    "secret_key",
];

/// Every problem found in one config file; never empty. Displays one problem per line,
/// each prefixed with the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    /// The file as given (or `<binding>` / `<config>` when parsed from text).
    pub(crate) file: String,
    /// Each at a dotted TOML path (`providers.orders.timeout_ms`,
    /// `tenants[0].api_key_sha256`); empty for a problem with the whole file.
    pub(crate) errors: Vec<Problem>,
}

impl ConfigErrors {
    pub(crate) fn new(file: impl Into<String>, errors: Vec<Problem>) -> ConfigErrors {
        ConfigErrors {
            file: file.into(),
            errors,
        }
    }

    /// Each problem as `file: path: message`.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.errors
            .iter()
            .map(|error| format!("{}: {error}", self.file))
            .collect()
    }

    /// Whether any problem is at `path` exactly.
    #[cfg(test)]
    pub(crate) fn has_path(&self, path: &str) -> bool {
        self.errors.iter().any(|e| e.path == path)
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

/// The checks of TOML files, on the shared collector. A config file may hold an inline
/// secret, so its problems are always screened ([`Problems::into_screened`]).
impl Problems {
    /// `Ok(value)` when nothing was found, else every problem.
    pub(crate) fn finish<T>(self, file: &str, value: T) -> Result<T, ConfigErrors> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors::new(file, self.into_screened()))
        }
    }

    /// `value` if it lies in `range`, else a problem at `path`.
    pub(crate) fn int_in(
        &mut self,
        path: &str,
        value: i64,
        range: RangeInclusive<i64>,
    ) -> Option<i64> {
        if range.contains(&value) {
            Some(value)
        } else {
            self.add(
                path,
                format!(
                    "{value} is out of range: use {}..={}",
                    range.start(),
                    range.end()
                ),
            );
            None
        }
    }

    /// A humantime duration such as `30s` or `7d`, at most `max` (written as `max_text`).
    /// Zero is accepted only when `allow_zero`.
    pub(crate) fn duration(
        &mut self,
        path: &str,
        text: &str,
        allow_zero: bool,
        max: Duration,
        max_text: &str,
    ) -> Option<Duration> {
        match humantime::parse_duration(text.trim()) {
            Err(error) => {
                self.add(
                    path,
                    format!(
                        "{text:?} is not a duration ({error}): write e.g. \"30s\", \"5m\" or \"7d\""
                    ),
                );
                None
            }
            Ok(duration) if duration.is_zero() && !allow_zero => {
                self.add(path, format!("{text:?} must be longer than zero"));
                None
            }
            Ok(duration) if duration > max => {
                self.add(
                    path,
                    format!("{text:?} is out of range: use at most {max_text:?}"),
                );
                None
            }
            Ok(duration) => Some(duration),
        }
    }

    /// Checks the name (never a value) of an environment variable reference.
    pub(crate) fn env_name(&mut self, path: &str, name: &str) -> bool {
        let valid = ENV_NAME.is_match(name);
        if !valid {
            self.add(
                path,
                format!(
                    "{name:?} is not an environment variable name: use letters, digits and '_', not starting with a digit"
                ),
            );
        }
        valid
    }

    /// Records a serde error of the section at `base`, with the full path of the field.
    pub(crate) fn serde(&mut self, base: &str, error: serde_path_to_error::Error<toml::de::Error>) {
        let mut path = base.to_owned();
        for segment in error.path().iter() {
            path = match segment {
                serde_path_to_error::Segment::Seq { index } => index_path(&path, *index),
                serde_path_to_error::Segment::Map { key } => key_path(&path, key),
                serde_path_to_error::Segment::Enum { variant } => key_path(&path, variant),
                serde_path_to_error::Segment::Unknown => path,
            };
        }
        self.add(
            &path,
            in_words(error.into_inner().message(), Notation::Toml),
        );
    }
}

/// Reads a TOML file: its text, the folder relative paths in it resolve against, and
/// its name for messages.
pub(crate) fn read_config_file(path: &Path) -> Result<(String, &Path, String), ConfigErrors> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| {
        ConfigErrors::new(
            &file,
            vec![Problem::new("", format!("cannot read the file: {error}"))],
        )
    })?;
    let base_dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Ok((text, base_dir, file))
}

/// What a TOML value is, in words: `a string`, `a whole number`, `a table`…
pub(crate) fn kind_in_words(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "a whole number",
        toml::Value::Float(_) => "a number with a fraction",
        toml::Value::Boolean(_) => "true or false",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "a list",
        toml::Value::Table(_) => "a table",
    }
}

/// `parent.key`, with the key quoted when it is not a bare TOML key.
pub(crate) fn key_path(parent: &str, key: &str) -> String {
    let key = if BARE_KEY.is_match(key) {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent` joined with a dotted field such as `circuit.min_calls`, segment by segment.
pub(crate) fn field_path(parent: &str, dotted: &str) -> String {
    dotted
        .split('.')
        .fold(parent.to_owned(), |path, key| key_path(&path, key))
}

/// `parent[index]`.
pub(crate) fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Parses TOML text into a table; a syntax error becomes one problem with its line and
/// column (the offending line itself is not quoted: it may hold a secret).
pub(crate) fn parse_toml(text: &str) -> Result<toml::Table, Problem> {
    text.parse::<toml::Table>().map_err(|error| {
        let position = error
            .span()
            .map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!(" at line {line}, column {column}")
            })
            .unwrap_or_default();
        Problem::new(
            "",
            format!("invalid TOML{position}: {}", error.message().trim_end()),
        )
    })
}

/// Deserializes one section of a file, recording a failure at `path`.
pub(crate) fn section<T: serde::de::DeserializeOwned>(
    problems: &mut Problems,
    path: &str,
    value: toml::Value,
) -> Option<T> {
    serde_path_to_error::deserialize(value)
        .map_err(|error| problems.serde(path, error))
        .ok()
}

/// Reports keys of a table that are not in `known`, in serde's words.
pub(crate) fn unknown_keys(
    problems: &mut Problems,
    path: &str,
    table: &toml::Table,
    known: &[&str],
) {
    let expected = known
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    for key in table.keys().filter(|k| !known.contains(&k.as_str())) {
        problems.add(
            &key_path(path, key),
            format!("unknown field `{key}`, expected one of {expected}"),
        );
    }
}

/// Refuses inline secrets anywhere in a raw config tree, before typed parsing.
///
/// A key whose name can only mean a credential (`token`, `password`, …) is reported and
/// removed, so typed parsing does not report it again as unknown; a key or a string
/// value that the secret scan flags is reported by detector name and withheld from every
/// later message. `id_keyed(path)` tells which tables have ids, not settings, as keys
/// (such keys are not judged by name). `hint` says where the secret belongs instead.
pub(crate) fn refuse_inline_secrets(
    table: &mut toml::Table,
    path: &str,
    problems: &mut Problems,
    hint: &str,
    id_keyed: &dyn Fn(&str) -> bool,
) {
    let keys: Vec<String> = table.keys().cloned().collect();
    for key in keys {
        let child = key_path(path, &key);
        if !id_keyed(path) && is_secret_key_name(&key) {
            table.remove(&key);
            problems.add(
                &child,
                format!("`{key}` would hold an inline secret, which is refused: {hint}"),
            );
            continue;
        }
        if let Some(detector) = secrets::scan(&key) {
            table.remove(&key);
            problems.withhold(&key);
            problems.add(
                path,
                format!(
                    "a key looks like a secret ({}), which is refused: {hint}",
                    detector.name()
                ),
            );
            continue;
        }
        if let Some(value) = table.get_mut(&key) {
            refuse_in_value(value, &key, &child, problems, hint, id_keyed);
        }
    }
}

fn refuse_in_value(
    value: &mut toml::Value,
    key: &str,
    path: &str,
    problems: &mut Problems,
    hint: &str,
    id_keyed: &dyn Fn(&str) -> bool,
) {
    match value {
        toml::Value::String(text) => {
            let detector = secrets::scan(text).or_else(|| secrets::scan(&format!("{key}: {text}")));
            if let Some(detector) = detector {
                problems.withhold(text);
                problems.add(
                    path,
                    format!(
                        "value looks like a secret ({}), which is refused: {hint}",
                        detector.name()
                    ),
                );
            }
        }
        toml::Value::Table(table) => refuse_inline_secrets(table, path, problems, hint, id_keyed),
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                refuse_in_value(item, key, &index_path(path, i), problems, hint, id_keyed);
            }
        }
        toml::Value::Integer(_)
        | toml::Value::Float(_)
        | toml::Value::Boolean(_)
        | toml::Value::Datetime(_) => {}
    }
}

fn is_secret_key_name(key: &str) -> bool {
    let normalized = key.to_ascii_lowercase().replace('-', "_");
    SECRET_KEY_NAMES.contains(&normalized.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_quote_keys_that_are_not_bare() {
        assert_eq!(key_path("", "providers"), "providers");
        assert_eq!(key_path("providers", "orders"), "providers.orders");
        assert_eq!(key_path("providers", "a.b"), "providers.\"a.b\"");
        assert_eq!(index_path("tenants", 2), "tenants[2]");
    }

    #[test]
    fn errors_display_one_line_per_problem_with_the_file() {
        let errors = ConfigErrors::new(
            "b.toml",
            vec![
                Problem::new("revision", "must not be empty"),
                Problem::new("", "whole file"),
            ],
        );
        assert_eq!(
            errors.to_string(),
            "b.toml: revision: must not be empty\nb.toml: whole file"
        );
    }

    #[test]
    fn syntax_errors_give_line_and_column_without_quoting_the_line() {
        let error = parse_toml("a = 1\nb = \"unterminated\n").unwrap_err();
        assert!(
            error.message.starts_with("invalid TOML at line 2"),
            "{}",
            error.message
        );
        assert!(!error.message.contains("unterminated"));
    }
}
