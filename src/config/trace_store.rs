//! Where the trace store and its digest key live, resolved in one place for `serve`,
//! `doctor` and `replay`: the store's file and folder, and the HMAC digest key — from its
//! env var, or the generated key kept in the store's folder.

use super::{EnvVars, TraceSettings, TraceStore};
use crate::trace::DigestKey;
use crate::trace::digest::{DigestKeyError, GENERATED_KEY_FILE, MIN_KEY_BYTES};
use crate::trace::upkeep::RecordKeeping;
use crate::validation::Problem;
use std::path::{Path, PathBuf};

impl super::ServerConfig {
    /// How long each tenant's trace records are kept: `[trace] keep`, and the tenants
    /// with a `trace_keep` of their own.
    pub(crate) fn record_keeping(&self) -> RecordKeeping {
        RecordKeeping {
            default_keep: self.trace.keep,
            tenants: self
                .tenants
                .iter()
                .filter_map(|tenant| tenant.trace_keep.map(|keep| (tenant.id.clone(), keep)))
                .collect(),
        }
    }
}

impl TraceSettings {
    /// The trace store's file.
    pub(crate) fn store_path(&self) -> &Path {
        match &self.store {
            TraceStore::Sqlite(path) => path,
        }
    }

    /// The trace store's folder (the store, its WAL and journal, a generated key).
    pub(crate) fn store_folder(&self) -> PathBuf {
        folder_of(self.store_path())
    }

    /// Where the digest key comes from under these settings.
    pub(crate) fn digest_key_source(&self) -> DigestKeySource {
        DigestKeySource::beside(
            self.store_path(),
            &self.digest_key_env,
            self.generate_digest_key,
        )
    }
}

/// Where the digest key comes from: the env var `env_name`, else — when `generate`
/// allows it — the key file kept in the trace store's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DigestKeySource {
    pub(crate) env_name: String,
    pub(crate) generate: bool,
    /// The trace store's folder, where a generated key is kept.
    pub(crate) folder: PathBuf,
}

impl DigestKeySource {
    /// The key of the store at `store`: from `env_name`, or (when `generate`) kept
    /// beside the store.
    pub(crate) fn beside(store: &Path, env_name: &str, generate: bool) -> DigestKeySource {
        DigestKeySource {
            env_name: env_name.to_owned(),
            generate,
            folder: folder_of(store),
        }
    }

    /// The generated key's file.
    pub(crate) fn key_file(&self) -> PathBuf {
        self.folder.join(GENERATED_KEY_FILE)
    }

    /// Why `serve` would refuse the key it finds, before anything is created: the env
    /// var holds fewer than [`MIN_KEY_BYTES`] bytes (set but empty while a generated key
    /// is allowed included), or the kept key file is that short. An unset env var without
    /// `generate_digest_key` is the server config's own environment problem, not this.
    /// The key is never read into the message.
    pub(crate) fn refusal(&self, env: &EnvVars) -> Option<Problem> {
        let name = &self.env_name;
        match env.get(name) {
            Some("") if !self.generate => None,
            Some("") => Some(Problem::new(
                "trace.digest_key_env",
                format!(
                    "environment variable {name:?} is set but empty: serve refuses an empty digest key (unset it to use the generated key, or set at least {MIN_KEY_BYTES} bytes)"
                ),
            )),
            Some(value) if value.len() < MIN_KEY_BYTES => Some(Problem::new(
                "trace.digest_key_env",
                format!(
                    "environment variable {name:?} is shorter than {MIN_KEY_BYTES} bytes: serve refuses such a digest key"
                ),
            )),
            Some(_) => None,
            None if !self.generate => None,
            None => match std::fs::metadata(self.key_file()) {
                Ok(file) if file.len() < MIN_KEY_BYTES as u64 => Some(Problem::new(
                    "trace.generate_digest_key",
                    format!(
                        "the generated key {} is shorter than {MIN_KEY_BYTES} bytes: serve refuses it",
                        self.key_file().display()
                    ),
                )),
                _ => None,
            },
        }
    }

    /// The key as `serve` resolves it: the env var's value, else the kept key file,
    /// created when it is allowed and missing.
    pub(crate) fn resolve(&self, env: &EnvVars) -> Result<DigestKey, DigestKeyError> {
        DigestKey::resolve(
            env.get(&self.env_name),
            &self.env_name,
            self.generate,
            &self.folder,
        )
    }
}

/// The folder of a file; `.` for a bare file name.
fn folder_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    #[test]
    fn the_key_is_kept_in_the_store_folder() {
        let config = ServerConfig::parse(
            concat!(
                "[trace]\nstore = \"sqlite:data/traces.db\"\ndigest_key_env = \"K\"\ngenerate_digest_key = true\n",
                "[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n",
                "[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n",
            ),
            Path::new("/srv/ctxd"),
        )
        .unwrap();
        assert_eq!(
            config.trace.store_path(),
            Path::new("/srv/ctxd/data/traces.db")
        );
        assert_eq!(config.trace.store_folder(), Path::new("/srv/ctxd/data"));
        let source = config.trace.digest_key_source();
        assert_eq!(
            source,
            DigestKeySource {
                env_name: "K".to_owned(),
                generate: true,
                folder: PathBuf::from("/srv/ctxd/data"),
            }
        );
        assert_eq!(
            source.key_file(),
            Path::new("/srv/ctxd/data").join(GENERATED_KEY_FILE)
        );
        let bare = DigestKeySource::beside(Path::new("traces.db"), "K", false);
        assert_eq!(bare.folder, Path::new("."));
    }

    #[test]
    fn keys_serve_would_refuse_are_problems_before_anything_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("traces.db");
        let refusal = |generate: bool, env: &[(&str, &str)]| {
            DigestKeySource::beside(&store, "K", generate)
                .refusal(&env.iter().copied().collect())
                .map(|p| (p.path, p.message))
        };
        let short = refusal(false, &[("K", "12345")]).unwrap();
        assert_eq!(short.0, "trace.digest_key_env");
        assert!(short.1.contains("shorter than 32 bytes"), "{short:?}");
        assert!(!short.1.contains("12345"));
        assert_eq!(refusal(false, &[("K", &"k".repeat(32))]), None);
        // Unset (or empty) without a generated key: the config's own problem.
        assert_eq!(refusal(false, &[]), None);
        assert_eq!(refusal(false, &[("K", "")]), None);
        assert!(refusal(true, &[("K", "")]).unwrap().1.contains("empty"));
        // A generated key: fine when absent (serve creates it), refused when short.
        assert_eq!(refusal(true, &[]), None);
        std::fs::write(dir.path().join(GENERATED_KEY_FILE), "short").unwrap();
        let kept = refusal(true, &[]).unwrap();
        assert_eq!(kept.0, "trace.generate_digest_key");
        let source = DigestKeySource::beside(&store, "K", true);
        assert!(
            source.resolve(&EnvVars::default()).is_err(),
            "serve refuses it too"
        );
    }

    #[test]
    fn the_env_var_wins_and_a_key_is_generated_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("traces.db");
        let env: EnvVars = [("K", "k".repeat(32))].into_iter().collect();
        let refused = DigestKeySource::beside(&store, "K", false);
        assert!(refused.resolve(&env).is_ok());
        assert!(!refused.key_file().exists());
        assert!(matches!(
            refused.resolve(&EnvVars::default()),
            Err(DigestKeyError::Missing(_))
        ));
        let generated = DigestKeySource::beside(&store, "K", true);
        generated.resolve(&EnvVars::default()).unwrap();
        assert!(generated.key_file().is_file());
    }
}
