//! Where the trace store and its digest key live, resolved in one place for `serve`,
//! `doctor` and `replay`: the store's file and folder (or the PostgreSQL store named by
//! `store_env`), and the HMAC digest key — from its env var, or the generated key kept
//! in a SQLite store's folder.

use super::{EnvVars, TraceSettings, TraceStore};
use crate::digest::DigestKey;
use crate::digest::keyed::{DigestKeyError, GENERATED_KEY_FILE, MIN_KEY_BYTES};
use crate::trace::store::{PgTarget, StoreTarget};
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
    /// The trace store's file; `None` for a PostgreSQL store.
    pub(crate) fn store_path(&self) -> Option<&Path> {
        match &self.store {
            TraceStore::Sqlite(path) => Some(path),
            TraceStore::Postgres { .. } => None,
        }
    }

    /// The trace store's folder (the store, its WAL and journal, a generated key);
    /// `None` for a PostgreSQL store.
    pub(crate) fn store_folder(&self) -> Option<PathBuf> {
        self.store_path().map(folder_of)
    }

    /// Where the digest key comes from under these settings. A PostgreSQL store never
    /// has a generated key (the config refuses it): every replica reads the env var.
    pub(crate) fn digest_key_source(&self) -> DigestKeySource {
        match self.store_path() {
            Some(path) => {
                DigestKeySource::beside(path, &self.digest_key_env, self.generate_digest_key)
            }
            None => DigestKeySource {
                env_name: self.digest_key_env.clone(),
                generate: false,
                folder: PathBuf::from("."),
            },
        }
    }

    /// Where the store is, with a PostgreSQL connection string read from `env`. The
    /// error names the env var and the problem, never the string.
    pub(crate) fn store_target(&self, env: &EnvVars) -> Result<StoreTarget, String> {
        match &self.store {
            TraceStore::Sqlite(path) => Ok(StoreTarget::Sqlite(path.clone())),
            TraceStore::Postgres { env: name } => match env.get(name) {
                None | Some("") => Err(format!(
                    "trace.store_env: environment variable {name:?} is not set: it holds the PostgreSQL trace store's connection string"
                )),
                Some(dsn) => PgTarget::parse(name, dsn)
                    .map(StoreTarget::Postgres)
                    .map_err(|reason| {
                        format!("trace.store_env: the connection string in {name:?} {reason}")
                    }),
            },
        }
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
    use crate::config::TraceStore;
    use std::time::Duration;

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
            Some(Path::new("/srv/ctxd/data/traces.db"))
        );
        assert_eq!(
            config.trace.store_folder().as_deref(),
            Some(Path::new("/srv/ctxd/data"))
        );
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
    fn a_postgres_store_comes_from_its_env_var_under_the_tls_rule() {
        let config = parse_with("store_env = \"TRACE_DSN\"\ndigest_key_env = \"K\"", "").unwrap();
        assert_eq!(
            config.trace.store,
            TraceStore::Postgres {
                env: "TRACE_DSN".to_owned()
            }
        );
        assert_eq!(config.trace.store_path(), None);
        assert_eq!(config.trace.min_free_bytes, 0, "no local disk to keep free");
        assert!(!config.trace.digest_key_source().generate);

        let target = |dsn: Option<&str>| {
            let env: EnvVars = dsn.map(|dsn| ("TRACE_DSN", dsn)).into_iter().collect();
            config.trace.store_target(&env)
        };
        let unset = target(None).unwrap_err();
        assert!(unset.starts_with("trace.store_env:"), "{unset}");
        assert!(unset.contains("\"TRACE_DSN\" is not set"), "{unset}");
        match target(Some("host=127.0.0.1 dbname=test user=postgres")).unwrap() {
            StoreTarget::Postgres(found) => {
                assert!(!found.tls(), "loopback goes without TLS");
                assert_eq!(found.label(), Path::new("postgres:$TRACE_DSN"));
            }
            StoreTarget::Sqlite(_) => panic!("a PostgreSQL target"),
        }
        match target(Some("host=db.internal dbname=traces password=pw-s3cr3t")).unwrap() {
            StoreTarget::Postgres(found) => {
                assert!(found.tls(), "TLS off loopback");
                assert!(!format!("{found:?}").contains("pw-s3cr3t"));
            }
            StoreTarget::Sqlite(_) => panic!("a PostgreSQL target"),
        }
        let refused = target(Some(
            "host=db.internal dbname=x password=pw-s3cr3t sslmode=disable",
        ))
        .unwrap_err();
        assert!(refused.contains("sslmode=disable"), "{refused}");
        assert!(!refused.contains("pw-s3cr3t"), "{refused}");
    }

    #[test]
    fn a_postgres_store_refuses_what_only_a_local_file_has() {
        for (trace, needle) in [
            (
                "store = \"postgres://u:pw-s3cr3t@db/traces\"",
                "trace.store: an inline PostgreSQL connection string is refused",
            ),
            (
                "store = \"sqlite:t.db\"\nstore_env = \"TRACE_DSN\"",
                "trace.store_env: is set beside trace.store",
            ),
            (
                "store_env = \"TRACE_DSN\"\ngenerate_digest_key = true",
                "trace.generate_digest_key:",
            ),
            (
                "store_env = \"TRACE_DSN\"\nmin_free_bytes = 0",
                "trace.min_free_bytes:",
            ),
            ("store_env = \"1DSN\"", "trace.store_env:"),
        ] {
            let errors = parse_with(trace, "").unwrap_err();
            assert!(errors.contains(needle), "{needle} in\n{errors}");
            assert!(!errors.contains("pw-s3cr3t"), "{errors}");
        }
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

    fn parse_with(trace: &str, tenant_extra: &str) -> Result<ServerConfig, String> {
        ServerConfig::parse(
            &format!(
                "[trace]\n{trace}\n[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n{tenant_extra}\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n[[tenants]]\nid = \"globex\"\napi_key_env = \"GLOBEX_KEY\"\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n"
            ),
            Path::new("/srv/ctxd"),
        )
        .map_err(|errors| errors.to_string())
    }

    #[test]
    fn records_are_kept_thirty_days_unless_the_config_or_a_tenant_says_otherwise() {
        let defaults = parse_with("", "").unwrap();
        assert_eq!(defaults.trace.keep, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(defaults.trace.max_store_bytes, None);
        assert_eq!(defaults.trace.min_free_bytes, 128 * 1024 * 1024);
        assert_eq!(defaults.record_keeping().tenants.len(), 0);

        let config = parse_with(
            "keep = \"12h\"\nmax_store_bytes = 1073741824\nmin_free_bytes = 0",
            "trace_keep = \"forever\"",
        )
        .unwrap();
        let keeping = config.record_keeping();
        assert_eq!(
            keeping.keep_for("globex"),
            Some(Duration::from_secs(12 * 3600))
        );
        assert_eq!(keeping.keep_for("acme"), None);
        assert_eq!(config.trace.max_store_bytes, Some(1 << 30));
        assert_eq!(config.trace.min_free_bytes, 0);
        let forever = parse_with("keep = \"forever\"", "trace_keep = \"7d\"").unwrap();
        assert_eq!(forever.record_keeping().keep_for("globex"), None);
        assert_eq!(
            forever.record_keeping().keep_for("acme"),
            Some(Duration::from_secs(7 * 86_400))
        );
    }

    #[test]
    fn a_keep_or_a_bound_that_cannot_be_read_is_named() {
        for (trace, tenant_extra, needle) in [
            (
                "keep = \"soon\"",
                "",
                "trace.keep: \"soon\" is not a duration",
            ),
            (
                "keep = \"0s\"",
                "",
                "trace.keep: \"0s\" must be longer than zero",
            ),
            ("keep = \"3651d\"", "", "use at most \"3650d\""),
            ("", "trace_keep = \"1 fortnight\"", "tenants[0].trace_keep:"),
            (
                "max_store_bytes = 1000",
                "",
                "trace.max_store_bytes: 1000 is out of range",
            ),
            (
                "min_free_bytes = -1",
                "",
                "trace.min_free_bytes: -1 is out of range",
            ),
        ] {
            let errors = parse_with(trace, tenant_extra).unwrap_err();
            assert!(errors.contains(needle), "{needle} in\n{errors}");
        }
    }
}
