//! Deployment Bindings: which implementation serves each provider id of one deployment
//! (type, endpoint or database, secret reference, timeout, concurrency, pool, circuit,
//! cache, retention), their validation, and the binding's portable digest.
//!
//! A provider's table overrides `[defaults]` field by field (nested tables per field),
//! and built-in defaults fill the rest. Every value is checked where it is written, so a
//! bad default is reported once, at `defaults.…`. The digest covers the revision and every
//! provider's merged settings, with secret env var *names* and database paths as written:
//! it is the same on every machine and never depends on a secret's value.

use super::{
    ConfigErrors, Problems, field_path, index_path, key_path, kind_in_words, parse_toml,
    refuse_inline_secrets, section, unknown_keys,
};
use crate::providers::PoolSettings;
use crate::providers::endpoint::{self, Violation};
use crate::secrets::redact::SecretHandling;
use query::query_problems;
use serde::Deserialize;
use serde_json::{Value as Json, json};
use settings::{Partial, RawSettings, check_settings, merge};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use url::Url;

mod mcp;
mod postgres;
mod query;
mod rest;
mod rest_presets;
mod settings;

pub use crate::resilience::breaker::CircuitSettings;
pub use crate::resilience::cache::CacheSettings;
pub(crate) use mcp::template_problem as mcp_template_problem;
pub use mcp::{McpBinding, McpLookup, McpTransport};
pub use rest::RestSpec;
pub(crate) use rest::{Mapping, RestAuth, RestMethod, Segment, Template};

/// Provider timeout when neither the provider nor `[defaults]` sets one.
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;
const MAX_REVISION_CHARS: usize = 128;
const MAX_VERSION_CHARS: usize = 128;
pub const DEFAULT_RETENTION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Provider types this version serves.
const SUPPORTED_TYPES: &str = "http, sqlite, rest, postgres, mcp";
/// Provider types the product defines but this version does not serve yet.
const LATER_TYPES: &[&str] = &[];
/// Keys that say *which* implementation serves a provider: never in `[defaults]`.
const IDENTITY_KEYS: &[&str] = &[
    "type",
    "endpoint",
    "database",
    "query",
    "secret_env",
    "version",
    "dsn_env",
];
/// Keys allowed both in a provider's table and in `[defaults]`.
const SETTING_KEYS: &[&str] = &[
    "timeout_ms",
    "max_concurrency",
    "pool",
    "circuit",
    "cache",
    "secrets",
    "retention",
    "retention_ttl",
];
const TOP_KEYS: &[&str] = &["revision", "allowed_roots", "defaults", "providers"];
const SECRET_HINT: &str =
    "put the secret in an environment variable and reference it with secret_env = \"VAR_NAME\"";

/// A validated Deployment Binding.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The operator's name for this version of the binding, e.g. `2026-11-30.1`.
    pub(crate) revision: String,
    /// `sha256:<hex>` over the canonical JSON of the revision and every provider's merged
    /// settings (env var names, never values; database paths as written).
    pub(crate) digest: String,
    /// Folders every SQLite `database` must lie in (after symbolic links are resolved),
    /// absolute; empty: no such confinement. Not in the digest: it decides whether the
    /// binding is served, never what it answers.
    pub(crate) allowed_roots: Vec<PathBuf>,
    pub providers: BTreeMap<String, ProviderBinding>,
}

/// How one provider id is served, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderBinding {
    pub(crate) id: String,
    pub kind: ProviderKind,
    pub(crate) timeout: Duration,
    /// Most lookups in flight at once against this provider.
    pub(crate) max_concurrency: usize,
    pub pool: PoolSettings,
    pub(crate) circuit: CircuitSettings,
    pub(crate) cache: CacheSettings,
    /// What a secret in an answer's items gives: refused (the default) or redacted.
    pub(crate) secrets: SecretHandling,
    pub(crate) retention: Retention,
    /// How long traces keep what `retention` says to keep.
    pub(crate) retention_ttl: Duration,
    /// The version reported for this provider's data when the implementation has no
    /// version of its own (source `binding`); required for sqlite.
    pub(crate) version: Option<String>,
}

/// The implementation behind a provider id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderKind {
    /// A `context-provider.v1` HTTP endpoint.
    Http {
        endpoint: Url,
        /// Name of the env var holding the bearer secret, if the provider needs one.
        secret_env: Option<String>,
    },
    /// A SQLite file opened read-only, one query with the lookup value as `?1`.
    Sqlite {
        /// Absolute: resolved against the binding file's folder.
        database: PathBuf,
        query: String,
    },
    /// A JSON API: one request per lookup, the answer mapped to items by JSONPath.
    Rest(Box<RestSpec>),
    /// A PostgreSQL server, one query with the lookup value as `$1`, run in a read-only
    /// transaction.
    Postgres {
        /// Name of the env var holding the connection string.
        dsn_env: String,
        query: String,
    },
    /// An MCP server reached over streamable HTTP or stdio.
    Mcp(McpBinding),
}

impl ProviderKind {
    /// The `type` as written in a binding.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            ProviderKind::Http { .. } => "http",
            ProviderKind::Sqlite { .. } => "sqlite",
            ProviderKind::Rest(_) => "rest",
            ProviderKind::Postgres { .. } => "postgres",
            ProviderKind::Mcp(_) => "mcp",
        }
    }

    /// The key naming that env var, for messages: `secret_env`; for rest, `auth` (or a
    /// preset's `token_env`); for postgres, `dsn_env`; for mcp, `auth_env`.
    pub(crate) fn secret_env_key(&self) -> &'static str {
        match self {
            ProviderKind::Rest(spec) if spec.preset.is_some() => "token_env",
            ProviderKind::Rest(_) => "auth",
            ProviderKind::Postgres { .. } => "dsn_env",
            ProviderKind::Mcp(_) => "auth_env",
            _ => "secret_env",
        }
    }

    /// The env var holding this provider's secret, if any.
    pub(crate) fn secret_env(&self) -> Option<&str> {
        match self {
            ProviderKind::Http { secret_env, .. } => secret_env.as_deref(),
            ProviderKind::Sqlite { .. } => None,
            ProviderKind::Rest(spec) => spec.auth.secret_env(),
            ProviderKind::Postgres { dsn_env, .. } => Some(dsn_env),
            ProviderKind::Mcp(mcp) => mcp.auth_env(),
        }
    }
}

/// What traces keep of a provider's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Nothing of the content.
    None,
    /// Digests of the content only.
    #[default]
    Digest,
    /// The content itself, for `retention_ttl`.
    Content,
}

impl Retention {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Retention::None => "none",
            Retention::Digest => "digest",
            Retention::Content => "content",
        }
    }

    fn parse(text: &str) -> Option<Retention> {
        match text {
            "none" => Some(Retention::None),
            "digest" => Some(Retention::Digest),
            "content" => Some(Retention::Content),
            _ => None,
        }
    }
}

impl Binding {
    /// Parses and validates binding text; relative database paths resolve against
    /// `base_dir` (made absolute from the current directory if it is relative).
    #[cfg(test)]
    pub(crate) fn parse(text: &str, base_dir: &Path) -> Result<Binding, ConfigErrors> {
        parse_named(text, base_dir, "<binding>")
    }

    /// Reads and validates a binding file; relative paths resolve against its folder.
    pub fn load(path: &Path) -> Result<Binding, ConfigErrors> {
        let (text, base_dir, file) = super::read_config_file(path)?;
        parse_named(&text, base_dir, &file)
    }

    /// Every env var name the binding references, with the provider id, in id order.
    pub(crate) fn secret_envs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.providers
            .values()
            .filter_map(|p| p.kind.secret_env().map(|name| (p.id.as_str(), name)))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    #[serde(rename = "type")]
    kind: Option<String>,
    endpoint: Option<String>,
    secret_env: Option<String>,
    database: Option<String>,
    query: Option<String>,
    version: Option<String>,
    dsn_env: Option<String>,
}

fn parse_named(text: &str, base_dir: &Path, file: &str) -> Result<Binding, ConfigErrors> {
    let mut table = parse_toml(text).map_err(|error| ConfigErrors::new(file, vec![error]))?;
    let mut problems = Problems::default();
    refuse_inline_secrets(&mut table, "", &mut problems, SECRET_HINT, &|path| {
        path == "providers"
    });
    unknown_keys(&mut problems, "", &table, TOP_KEYS);

    let revision = check_revision(&mut problems, table.remove("revision"));
    let allowed_roots = match table.remove("allowed_roots") {
        None => Vec::new(),
        Some(value) => check_allowed_roots(&mut problems, value, base_dir),
    };
    let defaults = match table.remove("defaults") {
        None => Partial::default(),
        Some(toml::Value::Table(defaults)) => check_defaults(&mut problems, defaults),
        Some(other) => {
            problems.add("defaults", not_a_table(&other));
            Partial::default()
        }
    };
    let mut providers = BTreeMap::new();
    let mut digest_providers = serde_json::Map::new();
    match table.remove("providers") {
        None => {}
        Some(toml::Value::Table(entries)) => {
            for (id, entry) in entries {
                let path = key_path("providers", &id);
                let toml::Value::Table(entry) = entry else {
                    problems.add(&path, not_a_table(&entry));
                    continue;
                };
                if let Some((provider, digest_entry)) =
                    check_provider(&mut problems, &path, &id, entry, &defaults, base_dir)
                {
                    digest_providers.insert(id.clone(), digest_entry);
                    providers.insert(id, provider);
                }
            }
        }
        Some(other) => problems.add("providers", not_a_table(&other)),
    }

    let revision = revision.unwrap_or_default();
    let digest = crate::digest::canonical_digest(&json!({
        "revision": revision,
        "providers": digest_providers,
    }));
    problems.finish(
        file,
        Binding {
            revision,
            digest,
            allowed_roots,
            providers,
        },
    )
}

/// `allowed_roots`: a non-empty list of folder paths, relative to the binding's folder.
fn check_allowed_roots(
    problems: &mut Problems,
    value: toml::Value,
    base_dir: &Path,
) -> Vec<PathBuf> {
    const PATH: &str = "allowed_roots";
    let toml::Value::Array(roots) = value else {
        problems.add(
            PATH,
            format!(
                "must be a list of folders (found {})",
                kind_in_words(&value)
            ),
        );
        return Vec::new();
    };
    if roots.is_empty() {
        problems.add(
            PATH,
            "must list at least one folder (omit it to allow a database anywhere but the trace store)",
        );
    }
    let mut resolved = Vec::with_capacity(roots.len());
    for (i, root) in roots.into_iter().enumerate() {
        let path = index_path(PATH, i);
        match root {
            toml::Value::String(root) if root.trim().is_empty() => {
                problems.add(&path, "must not be empty");
            }
            toml::Value::String(root) if root.starts_with("file:") || root.contains("://") => {
                problems.add(&path, "must be the path of a folder, not a URI");
            }
            toml::Value::String(root) => resolved.push(resolve(base_dir, &root)),
            other => problems.add(
                &path,
                format!(
                    "must be a folder path, a string (found {})",
                    kind_in_words(&other)
                ),
            ),
        }
    }
    resolved
}

fn not_a_table(value: &toml::Value) -> String {
    format!("must be a table (found {})", kind_in_words(value))
}

fn check_revision(problems: &mut Problems, value: Option<toml::Value>) -> Option<String> {
    match value {
        None => problems.add(
            "revision",
            "is required: name this version of the binding, e.g. revision = \"2026-11-30.1\"",
        ),
        Some(toml::Value::String(revision)) if revision.trim().is_empty() => {
            problems.add("revision", "must not be empty")
        }
        Some(toml::Value::String(revision)) if revision.chars().count() > MAX_REVISION_CHARS => {
            problems.add(
                "revision",
                format!("is longer than {MAX_REVISION_CHARS} characters"),
            )
        }
        Some(toml::Value::String(revision)) => return Some(revision),
        Some(other) => problems.add(
            "revision",
            format!("must be a string (found {})", kind_in_words(&other)),
        ),
    }
    None
}

fn check_defaults(problems: &mut Problems, mut table: toml::Table) -> Partial {
    for key in IDENTITY_KEYS {
        if table.remove(*key).is_some() {
            problems.add(
                &key_path("defaults", key),
                format!("`{key}` cannot be a default: set it in each provider's table"),
            );
        }
    }
    unknown_keys(problems, "defaults", &table, SETTING_KEYS);
    table.retain(|key, _| SETTING_KEYS.contains(&key));
    section::<RawSettings>(problems, "defaults", toml::Value::Table(table))
        .map(|raw| check_settings(problems, "defaults", raw))
        .unwrap_or_default()
}

fn check_provider(
    problems: &mut Problems,
    path: &str,
    id: &str,
    mut table: toml::Table,
    defaults: &Partial,
    base_dir: &Path,
) -> Option<(ProviderBinding, Json)> {
    let before = problems.len();
    problems.id(path, "provider", id);

    let is_mcp = table.get("type").and_then(toml::Value::as_str) == Some("mcp");
    postgres::refuse_inline_dsn(problems, path, &mut table, is_mcp);
    let known: Vec<&str> = IDENTITY_KEYS
        .iter()
        .chain(SETTING_KEYS)
        .chain(rest::REST_KEYS)
        .chain(mcp::MCP_KEYS)
        .copied()
        .collect();
    unknown_keys(problems, path, &table, &known);
    // The MCP keys go to their own check; on a provider of another type, one that is not
    // that type's own key is reported.
    let mut mcp_table = toml::Table::new();
    for key in mcp::MCP_KEYS {
        if !is_mcp && IDENTITY_KEYS.contains(key) {
            continue;
        }
        if let Some(value) = table.remove(*key) {
            mcp_table.insert((*key).to_owned(), value);
        }
    }
    let mut rest_keys = toml::Table::new();
    for key in rest::REST_KEYS {
        if let Some(value) = table.remove(*key) {
            rest_keys.insert((*key).to_owned(), value);
        }
    }
    let mut identity = toml::Table::new();
    for key in IDENTITY_KEYS {
        if let Some(value) = table.remove(*key) {
            identity.insert((*key).to_owned(), value);
        }
    }
    table.retain(|key, _| SETTING_KEYS.contains(&key));
    let identity: Option<RawIdentity> = section(problems, path, toml::Value::Table(identity));
    let settings: Option<RawSettings> = section(problems, path, toml::Value::Table(table));
    let own = settings.map(|settings| check_settings(problems, path, settings));
    let (identity, own) = (identity?, own?);

    let kind = if identity.kind.as_deref() == Some("mcp") {
        for key in ["endpoint", "secret_env", "database", "query", "dsn_env"] {
            let present = match key {
                "endpoint" => identity.endpoint.is_some(),
                "secret_env" => identity.secret_env.is_some(),
                "database" => identity.database.is_some(),
                "dsn_env" => identity.dsn_env.is_some(),
                _ => identity.query.is_some(),
            };
            if present {
                problems.add(
                    &key_path(path, key),
                    format!("`{key}` is not a setting of mcp providers"),
                );
            }
        }
        for key in rest_keys.keys() {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is a setting of rest providers only"),
            );
        }
        mcp::check_mcp(problems, path, &mcp_table)
            .map(|(mcp, written)| (ProviderKind::Mcp(mcp), written))
    } else {
        if let Some(kind) = identity.kind.as_deref() {
            for key in mcp_table.keys() {
                problems.add(
                    &key_path(path, key),
                    format!("`{key}` is a setting of mcp providers, not of {kind} providers"),
                );
            }
        }
        check_kind(problems, path, &identity, base_dir, rest_keys)
    };
    if let Some(name) = &identity.secret_env {
        problems.env_name(&key_path(path, "secret_env"), name);
    }
    let version = check_version(problems, path, &identity);
    let merged = merge(&own, defaults);
    if merged.circuit.min_calls > merged.circuit.window {
        problems.add(
            &field_path(path, "circuit.min_calls"),
            format!(
                "{} exceeds circuit.window {}: the failure rate would never be evaluated",
                merged.circuit.min_calls, merged.circuit.window
            ),
        );
    }
    if problems.len() > before {
        return None;
    }
    let (kind, written_location) = kind?;
    let provider = ProviderBinding {
        id: id.to_owned(),
        kind,
        timeout: merged.timeout,
        max_concurrency: merged.max_concurrency,
        pool: merged.pool,
        circuit: merged.circuit,
        cache: merged.cache,
        secrets: merged.secrets,
        retention: merged.retention,
        retention_ttl: merged.retention_ttl,
        version,
    };
    let digest_entry = digest_entry(&provider, written_location);
    Some((provider, digest_entry))
}

/// The resolved kind, and for the digest the location as written (a database path is
/// not resolved there, so the digest is the same wherever the binding is deployed).
fn check_kind(
    problems: &mut Problems,
    path: &str,
    raw: &RawIdentity,
    base_dir: &Path,
    rest_keys: toml::Table,
) -> Option<(ProviderKind, Json)> {
    if raw.kind.as_deref() != Some("rest") {
        for key in rest_keys.keys() {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is a setting of rest providers only"),
            );
        }
    }
    let type_path = key_path(path, "type");
    let not_for = |problems: &mut Problems, key: &str, present: bool, kind: &str| {
        if present {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is not a setting of {kind} providers"),
            );
        }
    };
    match raw.kind.as_deref() {
        None => {
            problems.add(
                &type_path,
                format!("is required (supported: {SUPPORTED_TYPES})"),
            );
            None
        }
        Some("http") => {
            not_for(problems, "database", raw.database.is_some(), "http");
            not_for(problems, "dsn_env", raw.dsn_env.is_some(), "http");
            not_for(problems, "query", raw.query.is_some(), "http");
            let endpoint_path = key_path(path, "endpoint");
            let Some(endpoint) = &raw.endpoint else {
                problems.add(
                    &endpoint_path,
                    "is required for an http provider: an https:// URL",
                );
                return None;
            };
            let endpoint = check_endpoint(problems, &endpoint_path, endpoint)?;
            let written = json!({ "type": "http", "endpoint": endpoint.as_str() });
            Some((
                ProviderKind::Http {
                    endpoint,
                    secret_env: raw.secret_env.clone(),
                },
                written,
            ))
        }
        Some("sqlite") => {
            not_for(problems, "endpoint", raw.endpoint.is_some(), "sqlite");
            not_for(problems, "secret_env", raw.secret_env.is_some(), "sqlite");
            not_for(problems, "dsn_env", raw.dsn_env.is_some(), "sqlite");
            let database = match &raw.database {
                None => {
                    problems.add(
                        &key_path(path, "database"),
                        "is required for a sqlite provider: the path of the database file",
                    );
                    None
                }
                Some(database) => check_database(problems, &key_path(path, "database"), database),
            };
            let query = match &raw.query {
                None => {
                    problems.add(
                        &key_path(path, "query"),
                        "is required for a sqlite provider: a SELECT using ?1 for the lookup value",
                    );
                    None
                }
                Some(query) => {
                    let query_path = key_path(path, "query");
                    let found = query_problems(query);
                    let clean = found.is_empty();
                    for message in found {
                        problems.add(&query_path, message);
                    }
                    clean.then(|| query.clone())
                }
            };
            let (database, query) = (database?, query?);
            let written = json!({
                "type": "sqlite",
                "database": raw.database,
                "query": query,
            });
            Some((
                ProviderKind::Sqlite {
                    database: resolve(base_dir, &database),
                    query,
                },
                written,
            ))
        }
        Some("rest") => {
            not_for(problems, "database", raw.database.is_some(), "rest");
            not_for(problems, "query", raw.query.is_some(), "rest");
            if raw.secret_env.is_some() {
                problems.add(
                    &key_path(path, "secret_env"),
                    "rest providers name their secret in `auth` (token_env, password_env, key_env or value_env)",
                );
            }
            let endpoint = raw
                .endpoint
                .as_deref()
                .and_then(|text| check_endpoint(problems, &key_path(path, "endpoint"), text));
            let written = raw.endpoint.is_some();
            let rest = rest::read_rest(problems, path, rest_keys)?;
            let spec = match rest.preset.clone() {
                Some(preset) => {
                    rest_presets::expand(problems, path, &preset, rest, endpoint, written)
                }
                None => rest::check_rest(problems, path, endpoint, written, rest),
            }?;
            let written = spec.to_json();
            Some((ProviderKind::Rest(Box::new(spec)), written))
        }
        Some("postgres") => postgres::check(problems, path, raw),
        Some(later) if LATER_TYPES.contains(&later) => {
            problems.add(
                &type_path,
                format!(
                    "{later:?} is not available in this version (supported: {SUPPORTED_TYPES})"
                ),
            );
            None
        }
        Some(other) => {
            problems.add(
                &type_path,
                format!("unknown provider type {other:?} (supported: {SUPPORTED_TYPES})"),
            );
            None
        }
    }
}

fn check_version(problems: &mut Problems, path: &str, raw: &RawIdentity) -> Option<String> {
    let version_path = key_path(path, "version");
    match &raw.version {
        None => {
            if let Some(kind @ ("sqlite" | "rest" | "postgres")) = raw.kind.as_deref() {
                problems.add(
                    &version_path,
                    format!("is required for a {kind} provider: it is the data version reported with every answer"),
                );
            }
            None
        }
        Some(version) if version.trim().is_empty() => {
            problems.add(&version_path, "must not be empty");
            None
        }
        Some(version) if version.chars().count() > MAX_VERSION_CHARS => {
            problems.add(
                &version_path,
                format!("is longer than {MAX_VERSION_CHARS} characters"),
            );
            None
        }
        Some(version) => Some(version.clone()),
    }
}

/// An absolute URL that follows the endpoint rule ([`endpoint`]); every way it does not
/// is a problem of its own.
fn check_endpoint(problems: &mut Problems, path: &str, text: &str) -> Option<Url> {
    let url = match Url::parse(text.trim()) {
        Ok(url) => url,
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            problems.add(
                path,
                "is not an absolute URL: write it as https://host/path",
            );
            return None;
        }
        Err(error) => {
            problems.add(path, format!("is not a valid URL: {error}"));
            return None;
        }
    };
    let violations = endpoint::violations(&url);
    for violation in &violations {
        let message = match violation {
            Violation::Credentials => format!(
                "carries a user name or password, an inline credential, which is refused: {SECRET_HINT}"
            ),
            Violation::Query => "has a query string: request data and settings never go in the URL (the lookup value travels only in the request body)".to_owned(),
            Violation::Fragment => "has a fragment: write the URL without `#…`".to_owned(),
            Violation::Insecure { host } => format!(
                "http:// is only allowed to a loopback host (localhost, 127.0.0.0/8, [::1]), not {host:?}: use https://"
            ),
            Violation::UnsupportedScheme(other) => format!(
                "scheme {other:?} is not supported: use https:// (http:// only to a loopback host)"
            ),
            Violation::NoHost => "has no host".to_owned(),
        };
        problems.add(path, message);
    }
    violations.is_empty().then_some(url)
}

fn check_database(problems: &mut Problems, path: &str, database: &str) -> Option<String> {
    if database.trim().is_empty() {
        problems.add(path, "must not be empty");
        None
    } else if database == ":memory:" || database.starts_with("file:") || database.contains("://") {
        problems.add(
            path,
            "must be the path of a database file, not a URI or :memory:",
        );
        None
    } else {
        Some(database.to_owned())
    }
}

fn resolve(base_dir: &Path, database: &str) -> PathBuf {
    let joined = base_dir.join(database);
    if joined.is_absolute() {
        joined
    } else {
        std::path::absolute(&joined).unwrap_or(joined)
    }
}

/// One provider's part of the binding digest: the location as written plus every merged
/// setting, durations in milliseconds so `"1h"` and `"60m"` digest alike.
fn digest_entry(provider: &ProviderBinding, written_location: Json) -> Json {
    let ms = |d: Duration| d.as_millis() as u64;
    let mut entry = json!({
        "timeout_ms": ms(provider.timeout),
        "max_concurrency": provider.max_concurrency,
        "pool": {
            "max_idle_per_host": provider.pool.max_idle_per_host,
            "idle_timeout_ms": ms(provider.pool.idle_timeout),
            "max_size": provider.pool.max_size,
        },
        "circuit": {
            "failure_rate": provider.circuit.failure_rate,
            "min_calls": provider.circuit.min_calls,
            "window": provider.circuit.window,
            "consecutive_failures": provider.circuit.consecutive_failures,
            "open_ms": ms(provider.circuit.open),
            "half_open_probes": provider.circuit.half_open_probes,
            "half_open_max_ms": ms(provider.circuit.half_open_max),
        },
        "cache": {
            "ttl_ms": provider.cache.ttl.map(ms),
            "not_found_ttl_ms": provider.cache.not_found_ttl.map(ms),
            "required_max_age_ms": ms(provider.cache.required_max_age),
        },
        "secrets": provider.secrets.as_str(),
        "retention": provider.retention.as_str(),
        "retention_ttl_ms": ms(provider.retention_ttl),
        "version": provider.version,
        "secret_env": provider.kind.secret_env(),
    });
    if let (ProviderKind::Postgres { .. }, Some(Json::Object(pool))) =
        (&provider.kind, entry.get_mut("pool"))
    {
        pool.insert(
            "connect_timeout_ms".to_owned(),
            json!(ms(provider.pool.connect_timeout)),
        );
        pool.insert("recycle".to_owned(), json!(provider.pool.recycle.as_str()));
    }
    if let (Json::Object(entry), Json::Object(location)) = (&mut entry, written_location) {
        entry.extend(location);
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "/srv/ctxd/bindings";

    fn parse(text: &str) -> Result<Binding, ConfigErrors> {
        Binding::parse(text, Path::new(BASE))
    }

    /// A binding with one http provider `crm`, plus `extra` lines in its table.
    fn http(extra: &str) -> String {
        format!(
            "revision = \"r1\"\n[providers.crm]\ntype = \"http\"\nendpoint = \"https://crm.internal/context\"\n{extra}\n"
        )
    }

    /// A binding with one sqlite provider `orders`, with `query`.
    fn sqlite(query: &str) -> String {
        format!(
            "revision = \"r1\"\n[providers.orders]\ntype = \"sqlite\"\ndatabase = \"data/orders.db\"\nversion = \"orders-db-7\"\nquery = {query:?}\n"
        )
    }

    /// `body` with a `[defaults]` table of `lines` placed after its revision.
    fn with_defaults(lines: &str, body: &str) -> String {
        body.replacen(
            "revision = \"r1\"\n",
            &format!("revision = \"r1\"\n[defaults]\n{lines}\n"),
            1,
        )
    }

    fn github_token() -> String {
        format!("{}{}", "ghp_", "a1B2".repeat(9))
    }

    /// The problems of `text` as `path: message` lines; panics if it is valid.
    fn problems(text: &str) -> Vec<String> {
        match parse(text) {
            Ok(_) => panic!("expected problems in:\n{text}"),
            Err(errors) => errors.errors.iter().map(ToString::to_string).collect(),
        }
    }

    /// Asserts exactly one problem, at `path`, whose message contains `needle`.
    fn assert_one_problem(text: &str, path: &str, needle: &str) {
        let errors = parse(text).expect_err(text);
        assert_eq!(errors.errors.len(), 1, "{errors}");
        assert_eq!(errors.errors[0].path, path, "{errors}");
        assert!(errors.errors[0].message.contains(needle), "{errors}");
    }

    /// Asserts a problem at `path` whose message contains `needle`, among others.
    fn assert_problem(text: &str, path: &str, needle: &str) {
        let errors = parse(text).expect_err(text);
        assert!(
            errors
                .errors
                .iter()
                .any(|e| e.path == path && e.message.contains(needle)),
            "{path}: {needle} in {errors}"
        );
    }

    fn provider<'a>(binding: &'a Binding, id: &str) -> &'a ProviderBinding {
        &binding.providers[id]
    }

    #[test]
    fn allowed_roots_are_folders_relative_to_the_binding() {
        let text = sqlite("SELECT id FROM t WHERE k = ?1").replacen(
            "revision = \"r1\"\n",
            "revision = \"r1\"\nallowed_roots = [\"data\", \"/srv/shared/db\", \"../x/./y\"]\n",
            1,
        );
        let binding = parse(&text).unwrap();
        assert_eq!(
            binding.allowed_roots,
            [
                PathBuf::from("/srv/ctxd/bindings/data"),
                PathBuf::from("/srv/shared/db"),
                PathBuf::from("/srv/ctxd/bindings/../x/./y"),
            ]
        );
        // Not in the digest: it decides whether the binding is served, not what it says.
        assert_eq!(
            binding.digest,
            parse(&sqlite("SELECT id FROM t WHERE k = ?1"))
                .unwrap()
                .digest
        );
        assert!(
            parse(&sqlite("SELECT id FROM t WHERE k = ?1"))
                .unwrap()
                .allowed_roots
                .is_empty()
        );
        for (roots, path, needle) in [
            ("[]", "allowed_roots", "at least one folder"),
            ("\"data\"", "allowed_roots", "must be a list of folders"),
            ("[\"\"]", "allowed_roots[0]", "must not be empty"),
            ("[\"data\", 5]", "allowed_roots[1]", "must be a folder path"),
            ("[\"file:data\"]", "allowed_roots[0]", "not a URI"),
        ] {
            let text = sqlite("SELECT id FROM t WHERE k = ?1").replacen(
                "revision = \"r1\"\n",
                &format!("revision = \"r1\"\nallowed_roots = {roots}\n"),
                1,
            );
            assert_one_problem(&text, path, needle);
        }
    }

    #[test]
    fn a_full_http_provider_resolves() {
        let binding = parse(&http(
            "secret_env = \"CRM_PROVIDER_TOKEN\"\ntimeout_ms = 800",
        ))
        .unwrap();
        assert_eq!(binding.revision, "r1");
        assert!(binding.digest.starts_with("sha256:"));
        let crm = provider(&binding, "crm");
        assert_eq!(crm.id, "crm");
        assert_eq!(
            crm.kind,
            ProviderKind::Http {
                endpoint: Url::parse("https://crm.internal/context").unwrap(),
                secret_env: Some("CRM_PROVIDER_TOKEN".to_owned()),
            }
        );
        assert_eq!(crm.timeout, Duration::from_millis(800));
        assert_eq!(crm.max_concurrency, 64);
        assert_eq!(crm.pool, PoolSettings::default());
        assert_eq!(crm.circuit, CircuitSettings::default());
        assert_eq!(crm.cache.ttl, None);
        assert_eq!(crm.retention, Retention::Digest);
        assert_eq!(crm.retention_ttl, Duration::from_secs(7 * 86_400));
        assert_eq!(crm.version, None);
        assert_eq!(
            binding.secret_envs().collect::<Vec<_>>(),
            [("crm", "CRM_PROVIDER_TOKEN")]
        );
    }

    #[test]
    fn timeout_defaults_to_1000_ms() {
        let binding = parse(&http("")).unwrap();
        assert_eq!(
            provider(&binding, "crm").timeout,
            Duration::from_millis(1000)
        );
    }

    #[test]
    fn timeout_bounds() {
        for (value, ok) in [
            (49, false),
            (50, true),
            (800, true),
            (10_000, true),
            (10_001, false),
            (-1, false),
        ] {
            let text = http(&format!("timeout_ms = {value}"));
            if ok {
                let binding = parse(&text).unwrap();
                assert_eq!(provider(&binding, "crm").timeout.as_millis(), value as u128);
            } else {
                assert_one_problem(
                    &text,
                    "providers.crm.timeout_ms",
                    &format!("{value} is out of range: use 50..=10000"),
                );
            }
            let in_defaults = with_defaults(&format!("timeout_ms = {value}"), &http(""));
            assert_eq!(parse(&in_defaults).is_ok(), ok, "{in_defaults}");
            if !ok {
                assert_one_problem(&in_defaults, "defaults.timeout_ms", "out of range");
            }
        }
    }

    #[test]
    fn endpoints() {
        let cases: &[(&str, Option<&str>)] = &[
            ("https://crm.internal/context", None),
            ("https://crm.internal:8443/v1/context", None),
            ("http://127.0.0.1:9000/context", None),
            ("http://127.8.9.10/context", None),
            ("http://localhost:8080/context", None),
            ("http://LocalHost/context", None),
            ("http://[::1]:9000/context", None),
            (
                "http://crm.internal/context",
                Some("only allowed to a loopback host"),
            ),
            (
                "http://10.0.0.8/context",
                Some("only allowed to a loopback host"),
            ),
            (
                "http://api.localhost/context",
                Some("only allowed to a loopback host"),
            ),
            (
                "http://[::ffff:127.0.0.1]/context",
                Some("only allowed to a loopback host"),
            ),
            (
                "https://svc@crm.internal/context",
                Some("inline credential"),
            ),
            (
                "https://crm.internal/context?customer=CUST-1",
                Some("query string"),
            ),
            ("https://crm.internal/context?", Some("query string")),
            ("https://crm.internal/context#part", Some("fragment")),
            ("crm.internal/context", Some("not an absolute URL")),
            (
                "ftp://crm.internal/context",
                Some("scheme \"ftp\" is not supported"),
            ),
            ("https://[bad/context", Some("not a valid URL")),
        ];
        for (endpoint, expected) in cases {
            let text = format!(
                "revision = \"r1\"\n[providers.crm]\ntype = \"http\"\nendpoint = {endpoint:?}\n"
            );
            match expected {
                None => {
                    let binding = parse(&text).unwrap_or_else(|e| panic!("{endpoint}: {e}"));
                    let ProviderKind::Http { endpoint: url, .. } = &provider(&binding, "crm").kind
                    else {
                        panic!("not http")
                    };
                    assert!(url.as_str().eq_ignore_ascii_case(endpoint), "{url}");
                }
                Some(needle) => assert_one_problem(&text, "providers.crm.endpoint", needle),
            }
        }
    }

    #[test]
    fn a_password_in_the_endpoint_is_refused_without_echoing_it() {
        let text = http("").replace(
            "https://crm.internal",
            "https://svc:hunter2pass@crm.internal",
        );
        let errors = parse(&text).unwrap_err();
        let shown = format!("{errors}\n{errors:?}");
        assert!(shown.contains("providers.crm.endpoint"), "{shown}");
        assert!(shown.contains("inline credential"), "{shown}");
        assert!(!shown.contains("hunter2pass"), "{shown}");
    }

    #[test]
    fn inline_secret_keys_are_refused_naming_the_key_never_the_value() {
        let value = "plain-looking-credential-value";
        for key in [
            "token",
            "secret",
            "password",
            "api_key",
            "bearer",
            "authorization",
            "credentials",
            "API-Key",
        ] {
            for (text, path) in [
                (
                    http(&format!("{key} = {value:?}")),
                    format!("providers.crm.{key}"),
                ),
                (format!("{key} = {value:?}\n{}", http("")), key.to_owned()),
                (
                    with_defaults(&format!("{key} = {value:?}"), &http("")),
                    format!("defaults.{key}"),
                ),
                (
                    http(&format!("[providers.crm.pool]\n{key} = {value:?}")),
                    format!("providers.crm.pool.{key}"),
                ),
            ] {
                let errors = parse(&text).unwrap_err();
                assert_eq!(errors.errors.len(), 1, "{errors}");
                let error = &errors.errors[0];
                assert_eq!(error.path, path);
                assert!(error.message.contains(&format!("`{key}`")), "{error}");
                assert!(error.message.contains("secret_env"), "{error}");
                let shown = format!("{errors}\n{errors:?}");
                assert!(!shown.contains(value), "{shown}");
            }
        }
        // A table of credentials is refused as a whole.
        assert_one_problem(
            &http("[providers.crm.credentials]\nuser = \"svc\"\npass = \"x\""),
            "providers.crm.credentials",
            "inline secret",
        );
    }

    #[test]
    fn secret_shaped_values_are_refused_by_detector_name() {
        let token = github_token();
        for (text, path) in [
            (
                http(&format!("version = {token:?}")),
                "providers.crm.version",
            ),
            (
                sqlite(&format!("SELECT id FROM t WHERE k = ?1 AND s = '{token}'")),
                "providers.orders.query",
            ),
            (format!("revision = {token:?}\n[providers]\n"), "revision"),
        ] {
            let errors = parse(&text).unwrap_err();
            let shown = format!("{errors}\n{errors:?}");
            assert!(!shown.contains(&token), "{shown}");
            assert!(errors.has_path(path), "{shown}");
            assert!(shown.contains("github_token"), "{shown}");
            assert!(shown.contains("secret_env"), "{shown}");
        }
    }

    #[test]
    fn a_secret_value_is_withheld_from_every_other_message() {
        let token = github_token();
        let text = format!(
            "revision = \"r1\"\n[providers.crm]\ntype = {token:?}\ntimeout_ms = {token:?}\n"
        );
        let errors = parse(&text).unwrap_err();
        let shown = format!("{errors}\n{errors:?}");
        assert!(!shown.contains(&token), "{shown}");
        assert!(errors.errors.len() >= 2, "{shown}");
    }

    #[test]
    fn unknown_keys_are_named() {
        for (text, path) in [
            (http("timout_ms = 500"), "providers.crm.timout_ms"),
            (
                http("[providers.crm.pool]\nmax_sise = 4"),
                "providers.crm.pool.max_sise",
            ),
            (
                http("[providers.crm.circuit]\nopen = 4"),
                "providers.crm.circuit.open",
            ),
            (format!("{}\n[extra]\na = 1", http("")), "extra"),
            (
                with_defaults("retension = \"none\"", &http("")),
                "defaults.retension",
            ),
        ] {
            let errors = parse(&text).unwrap_err();
            assert_eq!(errors.errors.len(), 1, "{errors}");
            assert_eq!(errors.errors[0].path, path, "{errors}");
            let key = path.rsplit('.').next().unwrap();
            assert!(
                errors.errors[0]
                    .message
                    .contains(&format!("unknown field `{key}`")),
                "{errors}"
            );
        }
    }

    #[test]
    fn provider_types() {
        for (kind, needle) in [
            (
                "grpc",
                "unknown provider type \"grpc\" (supported: http, sqlite, rest, postgres, mcp)",
            ),
            ("HTTP", "unknown provider type \"HTTP\""),
        ] {
            let text = format!("revision = \"r1\"\n[providers.x]\ntype = {kind:?}\n");
            assert_one_problem(&text, "providers.x.type", needle);
        }
        assert_one_problem(
            "revision = \"r1\"\n[providers.x]\ntimeout_ms = 100\n",
            "providers.x.type",
            "is required (supported: http, sqlite, rest, postgres, mcp)",
        );
    }

    #[test]
    fn keys_of_the_other_type_are_refused() {
        assert_one_problem(
            &http("database = \"x.db\""),
            "providers.crm.database",
            "not a setting of http providers",
        );
        assert_one_problem(
            &http("query = \"SELECT 1 WHERE ?1\""),
            "providers.crm.query",
            "not a setting of http providers",
        );
        let with = |line: &str| {
            sqlite("SELECT id FROM t WHERE k = ?1")
                .replace("version =", &format!("{line}\nversion ="))
        };
        assert_one_problem(
            &with("endpoint = \"https://x.internal/\""),
            "providers.orders.endpoint",
            "not a setting of sqlite providers",
        );
        assert_one_problem(
            &with("secret_env = \"DB_TOKEN\""),
            "providers.orders.secret_env",
            "not a setting of sqlite providers",
        );
    }

    #[test]
    fn required_keys_per_type() {
        assert_one_problem(
            "revision = \"r1\"\n[providers.crm]\ntype = \"http\"\n",
            "providers.crm.endpoint",
            "is required",
        );
        let errors =
            parse("revision = \"r1\"\n[providers.orders]\ntype = \"sqlite\"\n").unwrap_err();
        for key in ["database", "query", "version"] {
            assert!(
                errors.has_path(&format!("providers.orders.{key}")),
                "{errors}"
            );
        }
        assert_eq!(errors.errors.len(), 3, "{errors}");
    }

    #[test]
    fn revision_is_required_and_non_empty() {
        assert_one_problem("[providers]\n", "revision", "is required");
        assert_one_problem("revision = \" \"\n", "revision", "must not be empty");
        assert_one_problem("revision = 7\n", "revision", "must be a string");
        let binding = parse("revision = \"2026-11-30.1\"\n").unwrap();
        assert!(binding.providers.is_empty());
    }

    #[test]
    fn names_follow_their_grammars() {
        assert_one_problem(
            &http("secret_env = \"CRM-TOKEN\""),
            "providers.crm.secret_env",
            "not an environment variable name",
        );
        assert_one_problem(
            &http("secret_env = \"1TOKEN\""),
            "providers.crm.secret_env",
            "not an environment variable name",
        );
        let bad_id = http("").replace("[providers.crm]", "[providers.\"-crm\"]");
        assert_one_problem(&bad_id, "providers.-crm", "provider id \"-crm\" is invalid");
        let dotted = http("").replace("[providers.crm]", "[providers.\"crm.v2\"]");
        assert!(parse(&dotted).unwrap().providers.contains_key("crm.v2"));
    }

    #[test]
    fn defaults_merge_under_provider_settings_field_by_field() {
        let text = r#"
            revision = "r1"
            [defaults]
            timeout_ms = 800
            retention = "content"
            retention_ttl = "30d"
            max_concurrency = 16
            [defaults.pool]
            max_size = 8
            [defaults.circuit]
            open_ms = 1000
            min_calls = 30
            [defaults.cache]
            ttl = "30s"

            [providers.crm]
            type = "http"
            endpoint = "https://crm.internal/context"
            timeout_ms = 300
            [providers.crm.circuit]
            min_calls = 10
            [providers.crm.cache]
            ttl = "0s"

            [providers.other]
            type = "http"
            endpoint = "https://other.internal/context"
        "#;
        let binding = parse(text).unwrap();
        let crm = provider(&binding, "crm");
        assert_eq!(crm.timeout, Duration::from_millis(300), "provider wins");
        assert_eq!(crm.retention, Retention::Content, "from defaults");
        assert_eq!(crm.retention_ttl, Duration::from_secs(30 * 86_400));
        assert_eq!(crm.max_concurrency, 16);
        assert_eq!(crm.pool.max_size, 8);
        assert_eq!(crm.pool.max_idle_per_host, 32, "built-in");
        assert_eq!(crm.circuit.min_calls, 10, "nested field: provider wins");
        assert_eq!(
            crm.circuit.open,
            Duration::from_millis(1000),
            "nested field: from defaults"
        );
        assert_eq!(crm.circuit.window, 50, "nested field: built-in");
        assert_eq!(crm.cache.ttl, None, "\"0s\" turns a default cache off");
        let other = provider(&binding, "other");
        assert_eq!(other.timeout, Duration::from_millis(800));
        assert_eq!(other.circuit.min_calls, 30);
        assert_eq!(other.cache.ttl, Some(Duration::from_secs(30)));
    }

    #[test]
    fn identity_keys_cannot_be_defaults() {
        for key in [
            "type",
            "endpoint",
            "database",
            "query",
            "secret_env",
            "version",
        ] {
            let text = with_defaults(&format!("{key} = \"x\""), &http(""));
            assert_one_problem(&text, &format!("defaults.{key}"), "cannot be a default");
        }
    }

    #[test]
    fn database_paths_resolve_against_the_binding_folder() {
        let binding = parse(&sqlite("SELECT id FROM orders WHERE customer_id = ?1")).unwrap();
        let orders = provider(&binding, "orders");
        assert_eq!(
            orders.kind,
            ProviderKind::Sqlite {
                database: PathBuf::from("/srv/ctxd/bindings/data/orders.db"),
                query: "SELECT id FROM orders WHERE customer_id = ?1".to_owned(),
            }
        );
        assert_eq!(orders.version.as_deref(), Some("orders-db-7"));
        let absolute = sqlite("SELECT 1 WHERE ?1").replace("data/orders.db", "/var/lib/x.db");
        let absolute = parse(&absolute).unwrap();
        let ProviderKind::Sqlite { database, .. } = &provider(&absolute, "orders").kind else {
            panic!("not sqlite")
        };
        assert_eq!(database, Path::new("/var/lib/x.db"));
        // A relative base folder still gives an absolute path.
        let relative = Binding::parse(&sqlite("SELECT 1 WHERE ?1"), Path::new("config")).unwrap();
        let ProviderKind::Sqlite { database, .. } = &provider(&relative, "orders").kind else {
            panic!("not sqlite")
        };
        assert!(database.is_absolute() && database.ends_with("config/data/orders.db"));
        for bad in [":memory:", "file:orders.db?mode=rw", "sqlite://x", " "] {
            let text = sqlite("SELECT 1 WHERE ?1").replace("data/orders.db", bad);
            assert_one_problem(&text, "providers.orders.database", "");
        }
    }

    #[test]
    fn sqlite_queries_take_only_the_lookup_value() {
        let ok = [
            "SELECT id FROM t WHERE k = ?1",
            "SELECT id FROM t WHERE k = ?1 OR alt = ?1",
            "SELECT id, 'what?' AS q, \"col?2\" FROM t WHERE k = ?1 -- ?2 in a comment",
            "SELECT id FROM t /* :name @x $y ?3 */ WHERE k = ?1;",
            "SELECT id, 'Order ' || id AS title, a$b FROM t WHERE k = ?1 AND s = 'it''s ?2'",
            "SELECT id, time(updated_at, '+1 hour') FROM t WHERE k = ?1 ; -- trailing comment",
        ];
        for query in ok {
            parse(&sqlite(query)).unwrap_or_else(|e| panic!("{query}: {e}"));
        }
        let bad = [
            (
                "SELECT id FROM t WHERE k = ?1 AND j = ?2",
                "uses the parameter ?2",
            ),
            ("SELECT id FROM t WHERE k = ?2", "uses the parameter ?2"),
            ("SELECT id FROM t WHERE k = ?", "uses the parameter ?"),
            (
                "SELECT id FROM t WHERE k = ?1 AND j = :name",
                "uses the parameter :name",
            ),
            (
                "SELECT id FROM t WHERE k = ?1 AND j = @name",
                "uses the parameter @name",
            ),
            (
                "SELECT id FROM t WHERE k = ?1 AND j = $name",
                "uses the parameter $name",
            ),
            ("SELECT id FROM t WHERE k = 'x'", "must use ?1"),
            ("SELECT id FROM t WHERE k = '?1'", "must use ?1"),
            (
                "SELECT id FROM t WHERE k = ?1; DELETE FROM t",
                "single statement",
            ),
            ("   ", "must not be empty"),
        ];
        for (query, needle) in bad {
            assert_problem(&sqlite(query), "providers.orders.query", needle);
        }
        let errors = parse(&sqlite("SELECT id FROM t WHERE k = ?2")).unwrap_err();
        assert_eq!(errors.errors.len(), 2, "?2 used, ?1 missing: {errors}");
    }

    #[test]
    fn setting_ranges() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "max_concurrency = 0",
                "max_concurrency",
                Some("0 is out of range: use 1..=10000"),
            ),
            ("max_concurrency = 10000", "", None),
            ("[providers.crm.pool]\nmax_size = 64", "", None),
            (
                "[providers.crm.pool]\nmax_size = 65",
                "pool.max_size",
                Some("use 1..=64"),
            ),
            (
                "[providers.crm.pool]\nmax_size = 0",
                "pool.max_size",
                Some("use 1..=64"),
            ),
            (
                "[providers.crm.pool]\nidle_timeout_ms = 0",
                "pool.idle_timeout_ms",
                Some("out of range"),
            ),
            (
                "[providers.crm.circuit]\nfailure_rate = 0",
                "circuit.failure_rate",
                Some("above 0 and at most 1"),
            ),
            ("[providers.crm.circuit]\nfailure_rate = 1", "", None),
            (
                "[providers.crm.circuit]\nfailure_rate = 1.01",
                "circuit.failure_rate",
                Some("out of range"),
            ),
            (
                "[providers.crm.circuit]\nfailure_rate = nan",
                "circuit.failure_rate",
                Some("out of range"),
            ),
            (
                "[providers.crm.circuit]\nhalf_open_max_ms = 0",
                "circuit.half_open_max_ms",
                Some("out of range"),
            ),
            ("[providers.crm.circuit]\nhalf_open_max_ms = 1", "", None),
            (
                "[providers.crm.circuit]\nconsecutive_failures = 0",
                "circuit.consecutive_failures",
                Some("out of range"),
            ),
            (
                "[providers.crm.circuit]\nmin_calls = 60",
                "circuit.min_calls",
                Some("exceeds circuit.window 50"),
            ),
            (
                "[providers.crm.circuit]\nmin_calls = 60\nwindow = 60",
                "",
                None,
            ),
            ("[providers.crm.cache]\nttl = \"1h\"", "", None),
            (
                "[providers.crm.cache]\nttl = \"61m\"",
                "cache.ttl",
                Some("use at most \"1h\""),
            ),
            (
                "[providers.crm.cache]\nttl = \"soon\"",
                "cache.ttl",
                Some("is not a duration"),
            ),
            ("retention = \"none\"", "", None),
            (
                "retention = \"full\"",
                "retention",
                Some("use \"none\", \"digest\" or \"content\""),
            ),
            ("retention_ttl = \"365d\"", "", None),
            (
                "retention_ttl = \"366d\"",
                "retention_ttl",
                Some("use at most \"365d\""),
            ),
            (
                "retention_ttl = \"0s\"",
                "retention_ttl",
                Some("longer than zero"),
            ),
            ("version = \"\"", "version", Some("must not be empty")),
            (
                "timeout_ms = \"800\"",
                "timeout_ms",
                Some("must be a whole number (found a string)"),
            ),
        ];
        for (line, key, expected) in cases {
            let text = http(line);
            match expected {
                None => {
                    parse(&text).unwrap_or_else(|e| panic!("{line}: {e}"));
                }
                Some(needle) => {
                    assert_one_problem(&text, &format!("providers.crm.{key}"), needle);
                }
            }
        }
    }

    #[test]
    fn every_problem_is_collected() {
        let text = r#"
            [defaults]
            timeout_ms = 5
            [providers.a]
            type = "http"
            endpoint = "http://crm.internal/x"
            max_concurrency = 0
            [providers.b]
            type = "sqlite"
            database = "x.db"
            query = "SELECT 1 WHERE k = ?2"
            [providers.c]
            type = "postgres"
        "#;
        let found = problems(text);
        for path in [
            "revision: ",
            "defaults.timeout_ms: ",
            "providers.a.endpoint: ",
            "providers.a.max_concurrency: ",
            "providers.b.query: ",
            "providers.b.version: ",
            "providers.c.dsn_env: ",
        ] {
            assert!(
                found.iter().any(|p| p.starts_with(path)),
                "{path} in {found:#?}"
            );
        }
    }

    #[test]
    fn the_digest_depends_on_settings_not_on_formatting() {
        let a = r#"
            revision = "r1"
            [providers.crm]
            type = "http"
            endpoint = "https://crm.internal/context"
            secret_env = "CRM_TOKEN"
            timeout_ms = 800
            [providers.orders]
            type = "sqlite"
            database = "data/orders.db"
            query = "SELECT id FROM orders WHERE customer_id = ?1"
            version = "v7"
        "#;
        let b = r#"# the same binding, written differently
revision="r1"
[providers.orders]
version="v7"
query="SELECT id FROM orders WHERE customer_id = ?1"
database="data/orders.db"
type="sqlite"   # read-only
[providers.crm]
timeout_ms=800
secret_env="CRM_TOKEN"
endpoint="https://crm.internal/context"
type="http"
"#;
        let digest = |text: &str| parse(text).unwrap().digest;
        assert_eq!(digest(a), digest(b));
        // Defaults spelled out, or the same duration in other units: the same settings.
        let explicit = a.replace(
            "timeout_ms = 800",
            "timeout_ms = 800\nretention = \"digest\"\nretention_ttl = \"168h\"",
        );
        assert_eq!(digest(a), digest(&explicit));
        // The database is digested as written: the same wherever the binding is deployed.
        let elsewhere = Binding::parse(a, Path::new("/opt/other")).unwrap();
        assert_eq!(digest(a), elsewhere.digest);
        // Any setting, the revision or a secret env var name changes it.
        for changed in [
            a.replace("timeout_ms = 800", "timeout_ms = 801"),
            a.replace("revision = \"r1\"", "revision = \"r2\""),
            a.replace("CRM_TOKEN", "CRM_TOKEN_2"),
            a.replace("version = \"v7\"", "version = \"v8\""),
            a.replace("data/orders.db", "data/orders2.db"),
        ] {
            assert_ne!(digest(a), digest(&changed), "{changed}");
        }
    }

    #[test]
    fn the_digest_never_depends_on_a_secret_value() {
        // The file holds only the env var's name, so no value can reach the digest; the
        // digest input is the binding text alone.
        let text = http("secret_env = \"CRM_TOKEN\"");
        let first = parse(&text).unwrap();
        let second = parse(&text).unwrap();
        assert_eq!(first.digest, second.digest);
        assert!(!format!("{first:?}").contains("ghp_"));
    }

    #[test]
    fn syntax_errors_are_one_problem() {
        let errors = parse("revision = \"r1\"\n[providers.crm\n").unwrap_err();
        assert_eq!(errors.errors.len(), 1);
        assert!(errors.errors[0].message.contains("line 2"), "{errors}");
        assert_eq!(errors.file, "<binding>");
    }

    #[test]
    fn load_prefixes_problems_with_the_file_and_resolves_against_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.toml");
        std::fs::write(&path, sqlite("SELECT 1 WHERE ?1")).unwrap();
        let binding = Binding::load(&path).unwrap();
        let ProviderKind::Sqlite { database, .. } = &provider(&binding, "orders").kind else {
            panic!("not sqlite")
        };
        assert_eq!(database, &dir.path().join("data/orders.db"));

        std::fs::write(&path, http("timeout_ms = 1")).unwrap();
        let errors = Binding::load(&path).unwrap_err();
        assert_eq!(
            errors.to_string(),
            format!(
                "{}: providers.crm.timeout_ms: 1 is out of range: use 50..=10000",
                path.display()
            )
        );
        let missing = Binding::load(&dir.path().join("missing.toml")).unwrap_err();
        assert!(
            missing.to_string().contains("cannot read the file"),
            "{missing}"
        );
    }

    #[test]
    fn shipped_bindings_validate() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/bindings");
        let demo = Binding::load(&root.join("demo.toml")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            demo.providers.keys().collect::<Vec<_>>(),
            ["customer-data", "orders", "tickets"]
        );
        for provider in demo.providers.values() {
            assert_eq!(provider.timeout, Duration::from_millis(500));
            assert_eq!(provider.version.as_deref(), Some("demo-support-db-1"));
            let ProviderKind::Sqlite { database, .. } = &provider.kind else {
                panic!("demo providers are sqlite")
            };
            assert!(
                database.ends_with("fixtures/demo/data/support.db"),
                "{database:?}"
            );
        }
        let example =
            Binding::load(&root.join("example-http.toml")).unwrap_or_else(|e| panic!("{e}"));
        assert!(example.secret_envs().next().is_some());
        assert!(
            example
                .providers
                .values()
                .all(|p| p.kind.type_name() == "http")
        );
    }
}
