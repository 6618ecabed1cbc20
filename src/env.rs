//! The process environment as a plain map, read once at the edge and passed in, so
//! configuration code never calls `std::env` and tests control every variable.

use std::collections::HashMap;
use std::fmt;

/// Environment variables by name.
///
/// Values may be secrets: `Debug` lists only the names, and nothing in `config` ever puts
/// a value into an error message or a digest.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct EnvVars(HashMap<String, String>);

impl EnvVars {
    /// Every variable of the current process whose name and value are valid UTF-8; a
    /// variable that is not is treated as unset.
    pub(crate) fn from_process() -> EnvVars {
        std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect()
    }

    /// The value of `name`, if set (possibly empty).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Whether `name` is set to a non-empty value: an empty secret is as good as none.
    pub(crate) fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some_and(|value| !value.is_empty())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for EnvVars {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        EnvVars(
            iter.into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
        )
    }
}

impl fmt::Debug for EnvVars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("EnvVars").field("names", &names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_and_is_set() {
        let env: EnvVars = [("SET", "value"), ("EMPTY", "")].into_iter().collect();
        assert_eq!(env.get("SET"), Some("value"));
        assert_eq!(env.get("EMPTY"), Some(""));
        assert_eq!(env.get("MISSING"), None);
        assert!(env.is_set("SET"));
        assert!(!env.is_set("EMPTY"));
        assert!(!env.is_set("MISSING"));
    }

    #[test]
    fn debug_shows_names_never_values() {
        let env: EnvVars = [("B_TOKEN", "s3cr3t-value"), ("A_KEY", "other")]
            .into_iter()
            .collect();
        let shown = format!("{env:?}");
        assert_eq!(shown, r#"EnvVars { names: ["A_KEY", "B_TOKEN"] }"#);
        assert!(!shown.contains("s3cr3t"));
    }

    #[test]
    fn from_process_reads_the_environment() {
        // PATH is set in every environment the tests run in.
        assert!(EnvVars::from_process().get("PATH").is_some());
    }
}
