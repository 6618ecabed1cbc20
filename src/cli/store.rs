//! Where the trace store is, for the commands that read it (`traces`, `replay`): the
//! `--store` and `--config` arguments, the store they name (a SQLite file that must
//! exist, or the config's PostgreSQL store) and its digest key, which a reader never
//! creates.

use crate::config::{DigestKeySource, EnvVars, ServerConfig, TraceStore as StoreLocation};
use crate::digest::DigestKey;
use anyhow::{anyhow, bail};
use clap::Args;
use std::path::{Path, PathBuf};

/// The config read when neither `--config` nor `--store` is given, as for `serve`.
const DEFAULT_CONFIG: &str = "config/ctxd.toml";
/// The digest key's env var when only `--store` is given.
pub(super) const DEFAULT_DIGEST_KEY_ENV: &str = "CTXD_DIGEST_KEY";

/// Where the trace store is.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// Server config whose `[trace] store` names the store [default: config/ctxd.toml]
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The trace store file (`sqlite:` prefix optional); overrides --config
    #[arg(long, value_name = "PATH")]
    pub(crate) store: Option<PathBuf>,
}

/// The PostgreSQL store the config's `[trace] store_env` names, with where its digest
/// key comes from; `None` for `--store` and for a SQLite store.
pub(super) fn postgres_location(
    location: &StoreArgs,
    env: &EnvVars,
) -> anyhow::Result<Option<(crate::trace::store::PgTarget, DigestKeySource)>> {
    postgres_of_config(location.store.is_some(), location.config.as_deref(), env)
}

/// [`postgres_location`] for any command with `--store` and `--config`.
pub(super) fn postgres_of_config(
    has_store: bool,
    config: Option<&Path>,
    env: &EnvVars,
) -> anyhow::Result<Option<(crate::trace::store::PgTarget, DigestKeySource)>> {
    if has_store {
        return Ok(None);
    }
    let config = config.unwrap_or(Path::new(DEFAULT_CONFIG));
    let server = ServerConfig::load(config).map_err(|e| anyhow!("{e}"))?;
    if !matches!(server.trace.store, StoreLocation::Postgres { .. }) {
        return Ok(None);
    }
    match server.trace.store_target(env).map_err(|e| anyhow!("{e}"))? {
        crate::trace::store::StoreTarget::Postgres(target) => {
            Ok(Some((target, server.trace.digest_key_source())))
        }
        crate::trace::store::StoreTarget::Sqlite(_) => Ok(None),
    }
}

/// What `traces` and `prune` say of a config whose store is PostgreSQL.
pub(super) const PRUNE_IS_SQLITE_ONLY: &str = "`ctxd traces prune` works on a SQLite file; the replicas' writers prune a PostgreSQL store by [trace] keep";

/// The SQLite store `--store` or the config's `[trace] store` names, which must exist (a
/// reader never creates one), and where its digest key comes from. A config whose store
/// is PostgreSQL is refused with `on_postgres`.
pub(super) fn locate(
    location: &StoreArgs,
    on_postgres: &str,
) -> anyhow::Result<(PathBuf, DigestKeySource)> {
    let (path, key_source) = match &location.store {
        Some(store) => {
            let path = super::store_file(store);
            let key_source = DigestKeySource::beside(&path, DEFAULT_DIGEST_KEY_ENV, true);
            (path, key_source)
        }
        None => {
            let config = location
                .config
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
            let server = ServerConfig::load(&config).map_err(|e| anyhow!("{e}"))?;
            let path = match &server.trace.store {
                StoreLocation::Sqlite(path) => path.clone(),
                StoreLocation::Postgres { env } => bail!(
                    "the trace store of {} is PostgreSQL (store_env = {env:?}): {on_postgres}",
                    config.display()
                ),
            };
            (path, server.trace.digest_key_source())
        }
    };
    // A reader never creates a store; say which file is missing, and how it was chosen.
    if !path.is_file() {
        let source = match &location.store {
            Some(_) => "--store".to_owned(),
            None => format!(
                "[trace] store of {}",
                location
                    .config
                    .as_deref()
                    .unwrap_or(Path::new(DEFAULT_CONFIG))
                    .display()
            ),
        };
        bail!(
            "the trace store {} ({source}) does not exist",
            super::shown_path(&path)
        );
    }
    Ok((path, key_source))
}

/// The key as `serve` resolves it, except that a reader never creates one: a new key
/// could verify nothing (a replay) and open no cursor (`traces search`), and the store
/// is only read.
pub(super) fn digest_key(source: &DigestKeySource, env: &EnvVars) -> anyhow::Result<DigestKey> {
    let key_file = source.key_file();
    if env.get(&source.env_name).is_none() && source.generate && !key_file.is_file() {
        bail!(
            "no digest key: {} is not set and there is no generated key at {}; the store's key is needed",
            source.env_name,
            super::shown_path(&key_file)
        );
    }
    Ok(source.resolve(env)?)
}
