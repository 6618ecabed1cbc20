//! The server config (`config/ctxd.toml`): listen address, trace store, digest key
//! reference, metrics, limits, the handle store and the response caches' memory, and
//! tenants with their API keys, limits, projects and bindings. Loading does the pure checks; environment checks are a separate step.

use super::{
    ConfigErrors, EnvVars, Problem, Problems, index_path, key_path, parse_toml,
    refuse_inline_secrets, section, unknown_keys,
};
use crate::handles::{HandleSettings, LimitSettings};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod cache;
mod handle_store;
mod mcp_access;
mod serving;

pub(crate) use cache::CacheMemory;
use cache::{RawCache, check_cache};
pub(crate) use mcp_access::McpAccess;
pub(crate) use serving::{Limits, ServerSettings};
use serving::{RawLimits, RawServer, check_limits, check_server};

const DEFAULT_TRACE_STORE: &str = "sqlite:data/traces.db";
const DEFAULT_DIGEST_KEY_ENV: &str = "CTXD_DIGEST_KEY";
const DEFAULT_DURATION_BUCKETS_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];
const MAX_BUCKETS: usize = 64;
const DEFAULT_MAX_IN_FLIGHT: i64 = 256;
const MAX_IN_FLIGHT_RANGE: (i64, i64) = (1, 100_000);

const TOP_KEYS: &[&str] = &[
    "server", "trace", "metrics", "limits", "handles", "cache", "tenants",
];
const MAX_HANDLE_TTL: Duration = Duration::from_secs(7 * 86_400);
const HANDLE_TOTAL_BYTES_RANGE: (i64, i64) = (1024, 64 * 1024 * 1024 * 1024);
const HANDLE_TOMBSTONES_RANGE: (i64, i64) = (0, 10_000_000);
const HANDLE_RESULTS_CAP_RANGE: (i64, i64) = (1, 1_000_000);
const HANDLE_BYTES_CAP_RANGE: (i64, i64) = (1, 64 * 1024 * 1024);
const HANDLE_TIME_CAP_MS_RANGE: (i64, i64) = (1, 60_000);
const SECRET_HINT: &str = "put the key in an environment variable and reference it by name (api_key_env, digest_key_env), or store api_key_sha256";

/// A validated server config. Relative paths are joined to the config file's folder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerConfig {
    /// The file as given (`<config>` when parsed from text), for messages.
    pub(crate) file: String,
    /// The folder of the config file, against which relative paths were resolved.
    pub(crate) base_dir: PathBuf,
    pub(crate) server: ServerSettings,
    pub(crate) trace: TraceSettings,
    pub(crate) metrics: MetricsSettings,
    pub(crate) limits: Limits,
    /// `[handles]`: the handle store's TTL, byte cap and operation limits.
    pub(crate) handles: HandleSettings,
    /// `[handles] store`: memory, or a Redis shared by replicas.
    pub(crate) handle_store: crate::handles::HandleBackend,
    /// `[cache]`: the memory the response caches hold, in total and per tenant.
    pub(crate) cache: CacheMemory,
    pub(crate) tenants: Vec<TenantConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceSettings {
    pub(crate) store: TraceStore,
    /// Name of the env var holding the HMAC key for keyed digests and locators.
    pub(crate) digest_key_env: String,
    /// When the env var is unset, `serve` generates a key kept beside the trace store
    /// instead of refusing to start.
    pub(crate) generate_digest_key: bool,
    /// Turns the trace writer's queue holds; beyond it turns wait (backpressure).
    pub(crate) queue_capacity: usize,
    /// A batch commits at this many turns, or after `batch_delay`, whichever first.
    pub(crate) batch_size: usize,
    /// Longest a trace waits in a batch: what a crash can lose at most.
    pub(crate) batch_delay: Duration,
    /// How long a turn waits for room in a full queue before `503`.
    pub(crate) backpressure_wait: Duration,
    /// How long turn records and handle operations are kept (`keep`); `None`: until
    /// pruned by hand (`"forever"`).
    pub(crate) keep: Option<Duration>,
    /// Bytes the store (pages in use and the WAL) may hold before turns are refused.
    pub(crate) max_store_bytes: Option<u64>,
    /// Bytes the store's filesystem keeps free: below them turns are refused.
    pub(crate) min_free_bytes: u64,
}

/// Where traces are written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum TraceStore {
    /// A SQLite file (WAL), resolved against the config file's folder.
    Sqlite(PathBuf),
    /// A PostgreSQL store shared by replicas: `env` names the env var holding its
    /// connection string (`store_env`; never inline).
    Postgres { env: String },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MetricsSettings {
    pub(crate) enabled: bool,
    /// Whether metrics carry a `tenant` label (one series per tenant: off by default).
    pub(crate) tenant_label: bool,
    /// Histogram bucket bounds for durations, in milliseconds, strictly increasing.
    pub(crate) duration_buckets_ms: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TenantConfig {
    pub(crate) id: String,
    pub(crate) api_key: ApiKey,
    /// Most turns of this tenant in flight at once.
    pub(crate) max_in_flight: usize,
    /// This tenant's own `trace_keep`, when it differs from `[trace] keep`.
    pub(crate) trace_keep: Option<Option<Duration>>,
    pub(crate) projects: Vec<ProjectRef>,
}

/// How a tenant's API key is known: by its SHA-256, or by the env var holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiKey {
    Sha256([u8; 32]),
    Env(String),
}

impl ApiKey {
    /// The key's SHA-256, reading the env var for an `Env` key; `None` when it is unset
    /// or empty.
    pub(crate) fn sha256(&self, env: &EnvVars) -> Option<[u8; 32]> {
        match self {
            ApiKey::Sha256(hash) => Some(*hash),
            ApiKey::Env(name) => env
                .get(name)
                .filter(|key| !key.is_empty())
                .map(|key| Sha256::digest(key.as_bytes()).into()),
        }
    }
}

/// Something the environment lacks for the server config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvironmentProblem {
    pub(crate) need: EnvironmentNeed,
    /// Where the config references it, and what is wrong.
    pub(crate) problem: Problem,
}

/// What an [`EnvironmentProblem`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvironmentNeed {
    /// The API key of the tenant at this index in `tenants`.
    ApiKey { tenant: usize },
    /// The digest key.
    DigestKey,
    /// The admin key (`server.admin_key_env`).
    Admin,
    /// The connection string of a PostgreSQL trace store (`store_env`).
    TraceStore,
}

/// One project a tenant serves, and the binding that serves its providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProjectRef {
    /// A Project or a Build (JSON).
    pub(crate) path: PathBuf,
    pub(crate) binding: PathBuf,
}

impl ServerConfig {
    /// Reads and checks a config file. Only pure checks: the environment is checked by
    /// [`ServerConfig::environment_problems`], so `ctxd validate` can report both and
    /// tests can load a config whatever the process environment holds.
    pub(crate) fn load(path: &Path) -> Result<ServerConfig, ConfigErrors> {
        let (text, base_dir, file) = super::read_config_file(path)?;
        parse_named(&text, base_dir, &file)
    }

    /// Checks config text; relative paths are joined to `base_dir`.
    #[cfg(test)]
    pub(crate) fn parse(text: &str, base_dir: &Path) -> Result<ServerConfig, ConfigErrors> {
        parse_named(text, base_dir, "<config>")
    }

    /// What the environment lacks for this config: tenant API keys by env reference set
    /// and non-empty, the digest key set unless a generated key is allowed, and no API
    /// key shared by two tenants, or by a tenant and the admin, once env keys are known.
    /// Values are never shown.
    pub(crate) fn environment_problems(&self, env: &EnvVars) -> Vec<EnvironmentProblem> {
        let mut found = Vec::new();
        for (i, tenant) in self.tenants.iter().enumerate() {
            if let ApiKey::Env(name) = &tenant.api_key {
                let path = key_path(&index_path("tenants", i), "api_key_env");
                let message = match env.get(name) {
                    None => format!(
                        "environment variable {name:?} is not set: it holds tenant {:?}'s API key",
                        tenant.id
                    ),
                    Some("") => format!("environment variable {name:?} is empty"),
                    Some(_) => continue,
                };
                found.push(EnvironmentProblem {
                    need: EnvironmentNeed::ApiKey { tenant: i },
                    problem: Problem::new(path, message),
                });
            }
        }
        if let Some(ApiKey::Env(name)) = &self.server.admin_key {
            let message = match env.get(name) {
                None => Some(format!(
                    "environment variable {name:?} is not set: it holds the admin key"
                )),
                Some("") => Some(format!("environment variable {name:?} is empty")),
                Some(_) => None,
            };
            if let Some(message) = message {
                found.push(EnvironmentProblem {
                    need: EnvironmentNeed::Admin,
                    problem: Problem::new("server.admin_key_env", message),
                });
            }
        }
        let name = &self.trace.digest_key_env;
        if !self.trace.generate_digest_key && !env.is_set(name) {
            found.push(EnvironmentProblem {
                need: EnvironmentNeed::DigestKey,
                problem: Problem::new(
                    "trace.digest_key_env",
                    format!(
                        "environment variable {name:?} is not set: serve refuses to start without a digest key (or set generate_digest_key = true to keep a generated key beside the trace store)"
                    ),
                ),
            });
        }
        if let TraceStore::Postgres { env: name } = &self.trace.store {
            let message = match env.get(name) {
                None | Some("") => Some(format!(
                    "environment variable {name:?} is not set: it holds the PostgreSQL trace store's connection string"
                )),
                Some(dsn) => crate::trace::store::PgTarget::parse(name, dsn)
                    .err()
                    .map(|reason| format!("the connection string in {name:?} {reason}")),
            };
            if let Some(message) = message {
                found.push(EnvironmentProblem {
                    need: EnvironmentNeed::TraceStore,
                    problem: Problem::new("trace.store_env", message),
                });
            }
        }
        if let Some(admin) = self
            .server
            .admin_key
            .as_ref()
            .and_then(|key| key.sha256(env))
        {
            // Two hashes were compared at load; a key read from the env is compared here.
            let shared = self.tenants.iter().find(|tenant| {
                let from_env = matches!(tenant.api_key, ApiKey::Env(_))
                    || matches!(self.server.admin_key, Some(ApiKey::Env(_)));
                from_env && tenant.api_key.sha256(env) == Some(admin)
            });
            if let Some(tenant) = shared {
                let path = match self.server.admin_key {
                    Some(ApiKey::Env(_)) => "server.admin_key_env",
                    _ => "server.admin_key_sha256",
                };
                found.push(EnvironmentProblem {
                    need: EnvironmentNeed::Admin,
                    problem: Problem::new(path, admin_key_shared(&tenant.id)),
                });
            }
        }
        // Hash pairs were checked at load; a key read from the env is checked here.
        let mut owners: HashMap<[u8; 32], usize> = HashMap::new();
        for (i, tenant) in self.tenants.iter().enumerate() {
            let Some(hash) = tenant.api_key.sha256(env) else {
                continue;
            };
            let Some(&first) = owners.get(&hash) else {
                owners.insert(hash, i);
                continue;
            };
            let earlier = &self.tenants[first];
            let at = if matches!(tenant.api_key, ApiKey::Env(_)) {
                i
            } else if matches!(earlier.api_key, ApiKey::Env(_)) {
                first
            } else {
                continue;
            };
            found.push(EnvironmentProblem {
                need: EnvironmentNeed::ApiKey { tenant: at },
                problem: Problem::new(
                    key_path(&index_path("tenants", at), "api_key_env"),
                    format!(
                        "tenants {:?} and {:?} have the same API key: two tenants cannot share a key",
                        earlier.id, tenant.id
                    ),
                ),
            });
        }
        found
    }

    /// The tenant with this id.
    #[cfg(test)]
    pub(crate) fn tenant(&self, id: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| t.id == id)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTrace {
    store: Option<String>,
    store_env: Option<String>,
    digest_key_env: Option<String>,
    generate_digest_key: Option<bool>,
    queue_capacity: Option<i64>,
    batch_size: Option<i64>,
    batch_ms: Option<i64>,
    backpressure_ms: Option<i64>,
    keep: Option<String>,
    max_store_bytes: Option<i64>,
    min_free_bytes: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    enabled: Option<bool>,
    tenant_label: Option<bool>,
    duration_buckets_ms: Option<Vec<f64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHandles {
    ttl: Option<String>,
    max_total_bytes: Option<i64>,
    max_tenant_bytes: Option<i64>,
    max_tombstones: Option<i64>,
    max_tenant_tombstones: Option<i64>,
    default_max_results: Option<i64>,
    max_results_cap: Option<i64>,
    default_max_bytes: Option<i64>,
    max_bytes_cap: Option<i64>,
    default_time_limit_ms: Option<i64>,
    time_limit_cap_ms: Option<i64>,
    store: Option<String>,
    url: Option<String>,
    password_env: Option<String>,
    key_prefix: Option<String>,
    tombstone_ttl: Option<String>,
    timeout_ms: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    id: Option<String>,
    api_key_sha256: Option<String>,
    api_key_env: Option<String>,
    max_in_flight: Option<i64>,
    trace_keep: Option<String>,
    projects: Option<Vec<RawProject>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProject {
    path: Option<String>,
    binding: Option<String>,
}

/// A section of the file: absent → defaults; invalid → `None` (problem recorded).
fn optional_section<T: serde::de::DeserializeOwned + Default>(
    problems: &mut Problems,
    table: &mut toml::Table,
    key: &str,
) -> Option<T> {
    match table.remove(key) {
        None => Some(T::default()),
        Some(value @ toml::Value::Table(_)) => section(problems, key, value),
        Some(other) => {
            problems.add(key, format!("must be a table (found {})", other.type_str()));
            None
        }
    }
}

fn parse_named(text: &str, base_dir: &Path, file: &str) -> Result<ServerConfig, ConfigErrors> {
    let mut table = parse_toml(text).map_err(|error| ConfigErrors::new(file, vec![error]))?;
    let mut problems = Problems::default();
    refuse_inline_secrets(&mut table, "", &mut problems, SECRET_HINT, &|_| false);
    unknown_keys(&mut problems, "", &table, TOP_KEYS);

    let server = optional_section::<RawServer>(&mut problems, &mut table, "server")
        .and_then(|raw| check_server(&mut problems, raw));
    let trace = optional_section::<RawTrace>(&mut problems, &mut table, "trace")
        .and_then(|raw| check_trace(&mut problems, raw, base_dir));
    let metrics = optional_section::<RawMetrics>(&mut problems, &mut table, "metrics")
        .and_then(|raw| check_metrics(&mut problems, raw));
    let limits = optional_section::<RawLimits>(&mut problems, &mut table, "limits")
        .and_then(|raw| check_limits(&mut problems, raw));
    // Each tenant's default share of the handle store is an equal part of it.
    let tenant_count = match table.get("tenants") {
        Some(toml::Value::Array(entries)) => entries.len(),
        _ => 0,
    };
    let raw_handles = optional_section::<RawHandles>(&mut problems, &mut table, "handles");
    let handle_store = raw_handles.as_ref().and_then(|raw| {
        let store = handle_store::RawHandleStore {
            store: raw.store.as_deref(),
            url: raw.url.as_deref(),
            password_env: raw.password_env.as_deref(),
            key_prefix: raw.key_prefix.as_deref(),
            tombstone_ttl: raw.tombstone_ttl.as_deref(),
            timeout_ms: raw.timeout_ms,
        };
        handle_store::check_handle_store(&mut problems, &store)
    });
    let handles = raw_handles.and_then(|raw| check_handles(&mut problems, raw, tenant_count));
    let cache = optional_section::<RawCache>(&mut problems, &mut table, "cache")
        .and_then(|raw| check_cache(&mut problems, raw, tenant_count));
    let tenants = check_tenants(&mut problems, table.remove("tenants"), base_dir);
    if let Some(server) = &server {
        check_admin_key_is_no_tenant_key(&mut problems, server, &tenants);
    }

    match (server, trace, metrics, limits, handles, cache, handle_store) {
        (
            Some(server),
            Some(trace),
            Some(metrics),
            Some(limits),
            Some(handles),
            Some(cache),
            Some(handle_store),
        ) if problems.is_empty() => Ok(ServerConfig {
            file: file.to_owned(),
            base_dir: base_dir.to_path_buf(),
            server,
            trace,
            metrics,
            limits,
            handles,
            handle_store,
            cache,
            tenants,
        }),
        _ => Err(ConfigErrors::new(file, problems.into_screened())),
    }
}

/// The admin key reloads the whole deployment: a tenant's key must not do that too. Two
/// hashes are compared here; a key read from the environment by
/// [`ServerConfig::environment_problems`].
fn check_admin_key_is_no_tenant_key(
    problems: &mut Problems,
    server: &ServerSettings,
    tenants: &[TenantConfig],
) {
    let Some(ApiKey::Sha256(admin)) = &server.admin_key else {
        return;
    };
    if let Some(tenant) = tenants
        .iter()
        .find(|tenant| tenant.api_key == ApiKey::Sha256(*admin))
    {
        problems.add("server.admin_key_sha256", admin_key_shared(&tenant.id));
    }
}

fn admin_key_shared(tenant: &str) -> String {
    format!(
        "is the API key of tenant {tenant:?}: the admin key reloads the deployment, so it must differ from every tenant's key"
    )
}

fn check_trace(problems: &mut Problems, raw: RawTrace, base_dir: &Path) -> Option<TraceSettings> {
    let store_text = raw.store.as_deref().unwrap_or(DEFAULT_TRACE_STORE);
    // The store is never echoed: a PostgreSQL DSN may carry a password.
    let store = if let Some(name) = &raw.store_env {
        check_postgres_store(problems, &raw, name)
    } else if let Some(path) = store_text.strip_prefix("sqlite:") {
        if path.trim().is_empty() || path == ":memory:" || path.starts_with("//") {
            problems.add(
                "trace.store",
                "needs the path of a SQLite file: write sqlite:PATH, e.g. \"sqlite:data/traces.db\"",
            );
            None
        } else {
            Some(TraceStore::Sqlite(base_dir.join(path)))
        }
    } else if is_postgres_dsn(store_text) {
        problems.add(
            "trace.store",
            "an inline PostgreSQL connection string is refused (it would keep a password in the config): put it in an environment variable and name that variable in trace.store_env",
        );
        None
    } else {
        problems.add(
            "trace.store",
            "is not a trace store: write sqlite:PATH (relative to this file's folder)",
        );
        None
    };
    let digest_key_env = raw
        .digest_key_env
        .unwrap_or_else(|| DEFAULT_DIGEST_KEY_ENV.to_owned());
    let name_ok = problems.env_name("trace.digest_key_env", &digest_key_env);
    let queue_capacity = problems.int_in(
        "trace.queue_capacity",
        raw.queue_capacity.unwrap_or(8192),
        1..=1_000_000,
    );
    let batch_size = problems.int_in(
        "trace.batch_size",
        raw.batch_size.unwrap_or(256),
        1..=10_000,
    );
    let batch_ms = problems.int_in("trace.batch_ms", raw.batch_ms.unwrap_or(50), 1..=10_000);
    let backpressure_ms = problems.int_in(
        "trace.backpressure_ms",
        raw.backpressure_ms.unwrap_or(200),
        0..=10_000,
    );
    let keep = check_keep(
        problems,
        "trace.keep",
        raw.keep.as_deref().unwrap_or(DEFAULT_KEEP),
    );
    let max_store_bytes = raw.max_store_bytes.map(|bytes| {
        problems.int_in(
            "trace.max_store_bytes",
            bytes,
            STORE_BYTES_RANGE.0..=STORE_BYTES_RANGE.1,
        )
    });
    let min_free_bytes = problems.int_in(
        "trace.min_free_bytes",
        raw.min_free_bytes.unwrap_or(DEFAULT_MIN_FREE_BYTES),
        0..=STORE_BYTES_RANGE.1,
    );
    Some(TraceSettings {
        keep: keep?,
        max_store_bytes: match max_store_bytes {
            Some(bytes) => Some(bytes? as u64),
            None => None,
        },
        min_free_bytes: match store {
            Some(TraceStore::Postgres { .. }) => 0,
            _ => min_free_bytes? as u64,
        },
        store: store?,
        digest_key_env: name_ok.then_some(digest_key_env)?,
        generate_digest_key: raw.generate_digest_key.unwrap_or(false),
        queue_capacity: queue_capacity? as usize,
        batch_size: batch_size? as usize,
        batch_delay: Duration::from_millis(batch_ms? as u64),
        backpressure_wait: Duration::from_millis(backpressure_ms? as u64),
    })
}

/// `[handles]`: every default within its cap, every cap within its range, every
/// tenant's share within the store. Defaults are those of [`HandleSettings::default`],
/// except the shares `max_tenant_bytes` and `max_tenant_tombstones`: an equal part of
/// `max_total_bytes` and `max_tombstones` for each of the `tenant_count` tenants.
fn check_handles(
    problems: &mut Problems,
    raw: RawHandles,
    tenant_count: usize,
) -> Option<HandleSettings> {
    let defaults = HandleSettings::default();
    let before = problems.len();
    let ttl = match &raw.ttl {
        Some(text) => problems.duration("handles.ttl", text, false, MAX_HANDLE_TTL, "7d"),
        None => Some(defaults.ttl),
    };
    let int = |problems: &mut Problems,
               key: &str,
               value: Option<i64>,
               default: u64,
               range: (i64, i64)| {
        problems.int_in(
            &format!("handles.{key}"),
            value.unwrap_or(default as i64),
            range.0..=range.1,
        )
    };
    let limits = defaults.limits;
    let max_total_bytes = int(
        problems,
        "max_total_bytes",
        raw.max_total_bytes,
        defaults.max_total_bytes as u64,
        HANDLE_TOTAL_BYTES_RANGE,
    );
    let max_tenant_bytes = max_total_bytes.and_then(|total| {
        tenant_share(
            problems,
            "handles",
            ("max_total_bytes", total),
            raw.max_tenant_bytes,
            tenant_count,
            "evicts another's handles",
        )
    });
    let max_tombstones = int(
        problems,
        "max_tombstones",
        raw.max_tombstones,
        defaults.max_tombstones as u64,
        HANDLE_TOMBSTONES_RANGE,
    );
    let max_tenant_tombstones = max_tombstones.and_then(|total| {
        tenant_tombstones(problems, total, raw.max_tenant_tombstones, tenant_count)
    });
    let results_cap = int(
        problems,
        "max_results_cap",
        raw.max_results_cap,
        limits.max_results_cap as u64,
        HANDLE_RESULTS_CAP_RANGE,
    );
    let bytes_cap = int(
        problems,
        "max_bytes_cap",
        raw.max_bytes_cap,
        limits.max_bytes_cap as u64,
        HANDLE_BYTES_CAP_RANGE,
    );
    let time_cap = int(
        problems,
        "time_limit_cap_ms",
        raw.time_limit_cap_ms,
        limits.time_limit_cap.as_millis() as u64,
        HANDLE_TIME_CAP_MS_RANGE,
    );
    // A default above its cap would make every request without that limit refused.
    let default_within = |problems: &mut Problems,
                          key: &str,
                          value: Option<i64>,
                          default: u64,
                          cap: Option<i64>,
                          cap_key: &str| {
        let value = value.unwrap_or(default as i64);
        let cap = cap?;
        if value < 1 || value > cap {
            problems.add(
                &format!("handles.{key}"),
                format!("{value} is out of range: use 1..={cap} (at most handles.{cap_key})"),
            );
            return None;
        }
        Some(value)
    };
    let default_results = default_within(
        problems,
        "default_max_results",
        raw.default_max_results,
        limits.default_max_results as u64,
        results_cap,
        "max_results_cap",
    );
    let default_bytes = default_within(
        problems,
        "default_max_bytes",
        raw.default_max_bytes,
        limits.default_max_bytes as u64,
        bytes_cap,
        "max_bytes_cap",
    );
    let default_time = default_within(
        problems,
        "default_time_limit_ms",
        raw.default_time_limit_ms,
        limits.default_time_limit.as_millis() as u64,
        time_cap,
        "time_limit_cap_ms",
    );
    if problems.len() != before {
        return None;
    }
    Some(HandleSettings {
        ttl: ttl?,
        max_total_bytes: max_total_bytes? as usize,
        max_tenant_bytes: max_tenant_bytes? as usize,
        max_tombstones: max_tombstones? as usize,
        max_tenant_tombstones: max_tenant_tombstones? as usize,
        limits: LimitSettings {
            default_max_results: default_results? as usize,
            max_results_cap: results_cap? as usize,
            default_max_bytes: default_bytes? as usize,
            max_bytes_cap: bytes_cap? as usize,
            default_time_limit: Duration::from_millis(default_time? as u64),
            time_limit_cap: Duration::from_millis(time_cap? as u64),
        },
    })
}

/// A tenant's share of a store bounded by `total` (`section.total_key`): as written, or
/// an equal part for each of `tenants`; every tenant's share must fit in the total, so
/// that no tenant `evicts` (the consequence, in words).
fn tenant_share(
    problems: &mut Problems,
    section: &str,
    (total_key, total): (&str, i64),
    written: Option<i64>,
    tenants: usize,
    evicts: &str,
) -> Option<i64> {
    let tenants = tenants.max(1) as i64;
    let path = format!("{section}.max_tenant_bytes");
    let share = written.unwrap_or(total / tenants);
    let share = problems.int_in(&path, share, 1..=total)?;
    if share.saturating_mul(tenants) > total {
        problems.add(
            &path,
            format!("{tenants} tenants × {share} bytes is more than {section}.{total_key} ({total}): each tenant's share must fit in the store, so that no tenant {evicts} — use at most {}", total / tenants),
        );
        return None;
    }
    Some(share)
}

/// `handles.max_tenant_tombstones`: as written, or an equal part of `max_tombstones`
/// (`total`) for each of `tenants`; every tenant's share must fit in the total. 0 keeps
/// none (a deleted id is at once `unknown_handle`).
fn tenant_tombstones(
    problems: &mut Problems,
    total: i64,
    written: Option<i64>,
    tenants: usize,
) -> Option<i64> {
    let tenants = tenants.max(1) as i64;
    let path = "handles.max_tenant_tombstones";
    let share = problems.int_in(path, written.unwrap_or(total / tenants), 0..=total)?;
    if share.saturating_mul(tenants) > total {
        problems.add(
            path,
            format!(
                "{tenants} tenants × {share} tombstones is more than handles.max_tombstones ({total}): each tenant's share must fit, so that no tenant's deletes forget another's tombstones — use at most {}",
                total / tenants
            ),
        );
        return None;
    }
    Some(share)
}

fn check_metrics(problems: &mut Problems, raw: RawMetrics) -> Option<MetricsSettings> {
    let buckets = raw
        .duration_buckets_ms
        .unwrap_or_else(|| DEFAULT_DURATION_BUCKETS_MS.to_vec());
    let path = "metrics.duration_buckets_ms";
    let before = problems.len();
    if buckets.is_empty() {
        problems.add(path, "must list at least one bucket");
    } else if buckets.len() > MAX_BUCKETS {
        problems.add(
            path,
            format!("has {} buckets: use at most {MAX_BUCKETS}", buckets.len()),
        );
    }
    for (i, bound) in buckets.iter().enumerate() {
        if !bound.is_finite() || *bound <= 0.0 {
            problems.add(
                &index_path(path, i),
                format!("{bound} must be a positive number of milliseconds"),
            );
        } else if i > 0 && *bound <= buckets[i - 1] {
            problems.add(
                &index_path(path, i),
                format!(
                    "{bound} must be greater than the bucket before it ({}): buckets are strictly increasing",
                    buckets[i - 1]
                ),
            );
        }
    }
    (problems.len() == before).then(|| MetricsSettings {
        enabled: raw.enabled.unwrap_or(true),
        tenant_label: raw.tenant_label.unwrap_or(false),
        duration_buckets_ms: buckets,
    })
}

/// Whether a `[trace] store` value is a PostgreSQL connection string (URL or key=value).
fn is_postgres_dsn(text: &str) -> bool {
    text.starts_with("postgres://")
        || text.starts_with("postgresql://")
        || text.starts_with("postgres:")
        || text.contains("host=")
        || text.contains("dbname=")
}

/// `[trace] store_env`: a PostgreSQL store shared by replicas. Refused beside `store`,
/// with a generated digest key (replicas must share one key, from `digest_key_env`) and
/// with `min_free_bytes` (the disk it measures is the server's, not this machine's).
fn check_postgres_store(problems: &mut Problems, raw: &RawTrace, name: &str) -> Option<TraceStore> {
    let mut ok = problems.env_name("trace.store_env", name);
    if raw.store.is_some() {
        problems.add(
            "trace.store_env",
            "is set beside trace.store: choose one, store = \"sqlite:PATH\" for a file of this server's own or store_env for a PostgreSQL store shared by replicas",
        );
        ok = false;
    }
    if raw.generate_digest_key == Some(true) {
        problems.add(
            "trace.generate_digest_key",
            "a generated key is kept beside a SQLite store; replicas sharing a PostgreSQL store (store_env) need the same key from trace.digest_key_env: remove generate_digest_key",
        );
        ok = false;
    }
    if raw.min_free_bytes.is_some() {
        problems.add(
            "trace.min_free_bytes",
            "measures the disk under a SQLite store; a PostgreSQL store (store_env) lives on its server's disk, which ctxd does not measure: remove min_free_bytes (max_store_bytes bounds the store's tables)",
        );
        ok = false;
    }
    ok.then(|| TraceStore::Postgres {
        env: name.to_owned(),
    })
}

/// How long records are kept unless `[trace] keep` says otherwise.
const DEFAULT_KEEP: &str = "30d";
/// The longest `keep` (written as in the config).
const LONGEST_KEEP: (Duration, &str) = (Duration::from_secs(3650 * 86_400), "3650d");
/// Bytes the trace store's filesystem keeps free unless the config says otherwise.
const DEFAULT_MIN_FREE_BYTES: i64 = 128 * 1024 * 1024;
/// `max_store_bytes` counts the WAL at its checkpoint size plus one commit (about 6 MiB), so a bound
/// below 16 MiB would leave little room for records.
const STORE_BYTES_RANGE: (i64, i64) = (16 * 1024 * 1024, 1 << 50);

/// A keep: a duration such as `"30d"` or `"12h"`, or `"forever"` (until pruned by
/// hand). `Some(None)` is forever; `None` a problem at `path`.
fn check_keep(problems: &mut Problems, path: &str, text: &str) -> Option<Option<Duration>> {
    if text.trim() == "forever" {
        return Some(None);
    }
    let (max, max_text) = LONGEST_KEEP;
    problems
        .duration(path, text, false, max, max_text)
        .map(Some)
}

fn check_tenants(
    problems: &mut Problems,
    value: Option<toml::Value>,
    base_dir: &Path,
) -> Vec<TenantConfig> {
    let entries = match value {
        None => Vec::new(),
        Some(toml::Value::Array(entries)) => entries,
        Some(other) => {
            problems.add(
                "tenants",
                format!(
                    "must be an array of tables ([[tenants]]) (found {})",
                    other.type_str()
                ),
            );
            return Vec::new();
        }
    };
    if entries.is_empty() {
        problems.add(
            "tenants",
            "at least one tenant is required: add a [[tenants]] table",
        );
    }
    let mut tenants = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut hashes: HashMap<[u8; 32], String> = HashMap::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let path = index_path("tenants", i);
        let Some(raw) = section::<RawTenant>(problems, &path, entry) else {
            continue;
        };
        let id = match &raw.id {
            None => {
                problems.add(&key_path(&path, "id"), "is required");
                None
            }
            Some(id) if problems.id(&key_path(&path, "id"), "tenant", id) => {
                if let Some(first) = ids.get(id) {
                    problems.add(
                        &key_path(&path, "id"),
                        format!("tenant id {id:?} is already used by tenants[{first}]"),
                    );
                } else {
                    ids.insert(id.clone(), i);
                }
                Some(id.clone())
            }
            Some(_) => None,
        };
        let label = id.as_deref().unwrap_or("?");
        let api_key = check_api_key(problems, &path, &raw, label, &mut hashes);
        let (lo, hi) = MAX_IN_FLIGHT_RANGE;
        let max_in_flight = problems.int_in(
            &key_path(&path, "max_in_flight"),
            raw.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT),
            lo..=hi,
        );
        let trace_keep = raw
            .trace_keep
            .as_deref()
            .map(|text| check_keep(problems, &key_path(&path, "trace_keep"), text));
        let projects = check_projects(problems, &path, raw.projects, base_dir);
        if let (Some(id), Some(api_key), Some(max_in_flight), Some(projects)) =
            (id, api_key, max_in_flight, projects)
        {
            let trace_keep = match trace_keep {
                None => None,
                Some(Some(keep)) => Some(keep),
                Some(None) => continue,
            };
            tenants.push(TenantConfig {
                id,
                api_key,
                max_in_flight: max_in_flight as usize,
                trace_keep,
                projects,
            });
        }
    }
    tenants
}

fn check_api_key(
    problems: &mut Problems,
    path: &str,
    raw: &RawTenant,
    tenant: &str,
    hashes: &mut HashMap<[u8; 32], String>,
) -> Option<ApiKey> {
    match (&raw.api_key_sha256, &raw.api_key_env) {
        (Some(_), Some(_)) => {
            problems.add(
                path,
                "set exactly one of api_key_sha256 and api_key_env, not both",
            );
            None
        }
        (None, None) => {
            problems.add(
                path,
                "needs an API key: set api_key_sha256 (hex SHA-256 of the key) or api_key_env (the env var holding the key)",
            );
            None
        }
        (None, Some(name)) => problems
            .env_name(&key_path(path, "api_key_env"), name)
            .then(|| ApiKey::Env(name.clone())),
        (Some(text), None) => {
            let key_path = key_path(path, "api_key_sha256");
            let mut hash = [0u8; 32];
            if text.len() != 64 {
                problems.add(
                    &key_path,
                    format!(
                        "must be 64 hexadecimal characters (the SHA-256 of the API key), not {}",
                        text.chars().count()
                    ),
                );
                return None;
            }
            if hex::decode_to_slice(text, &mut hash).is_err() {
                problems.add(
                    &key_path,
                    "must be 64 hexadecimal characters (the SHA-256 of the API key): it has other characters",
                );
                return None;
            }
            if let Some(first) = hashes.get(&hash) {
                problems.add(
                    &key_path,
                    format!(
                        "tenant {tenant:?} has the same API key hash as tenant {first:?}: two tenants cannot share a key"
                    ),
                );
                return None;
            }
            hashes.insert(hash, tenant.to_owned());
            Some(ApiKey::Sha256(hash))
        }
    }
}

fn check_projects(
    problems: &mut Problems,
    tenant_path: &str,
    raw: Option<Vec<RawProject>>,
    base_dir: &Path,
) -> Option<Vec<ProjectRef>> {
    let raw = raw.unwrap_or_default();
    if raw.is_empty() {
        problems.add(
            &key_path(tenant_path, "projects"),
            "a tenant needs at least one project: add [[tenants.projects]] with path and binding",
        );
        return None;
    }
    let before = problems.len();
    let mut projects = Vec::new();
    for (i, project) in raw.into_iter().enumerate() {
        let path = index_path(&key_path(tenant_path, "projects"), i);
        let mut file = |key: &str, value: Option<String>, what: &str| match value {
            Some(value) if !value.trim().is_empty() => Some(base_dir.join(value)),
            Some(_) => {
                problems.add(&key_path(&path, key), "must not be empty");
                None
            }
            None => {
                problems.add(
                    &key_path(&path, key),
                    format!("is required: the {what}, relative to this file's folder"),
                );
                None
            }
        };
        let project_path = file("path", project.path, "Project or Build file");
        let binding = file("binding", project.binding, "Deployment Binding file");
        if let (Some(project_path), Some(binding)) = (project_path, binding) {
            if let Some(first) = projects
                .iter()
                .position(|p: &ProjectRef| p.path == project_path)
            {
                problems.add(
                    &key_path(&path, "path"),
                    format!("the same project is already listed at projects[{first}]"),
                );
            }
            projects.push(ProjectRef {
                path: project_path,
                binding,
            });
        }
    }
    (problems.len() == before).then_some(projects)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "/etc/ctxd";
    fn hash_of(key: &str) -> String {
        hex::encode(Sha256::digest(key.as_bytes()))
    }

    fn tenant(id: &str, key_line: &str) -> String {
        format!(
            "[[tenants]]\nid = {id:?}\n{key_line}\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n"
        )
    }

    fn minimal() -> String {
        tenant("demo", &format!("api_key_sha256 = {:?}", hash_of("key-a")))
    }

    fn parse(text: &str) -> Result<ServerConfig, ConfigErrors> {
        ServerConfig::parse(text, Path::new(BASE))
    }

    fn assert_problem(text: &str, path: &str, needle: &str) {
        let errors = parse(text).expect_err(text);
        assert!(
            errors
                .errors
                .iter()
                .any(|e| e.path == path && e.message.contains(needle)),
            "{path}: {needle} in\n{errors}"
        );
    }

    #[test]
    fn a_minimal_config_gets_every_default() {
        let config = parse(&minimal()).unwrap();
        assert_eq!(config.server.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.server.max_body_bytes, 65_536);
        assert_eq!(config.server.shutdown_grace, Duration::from_secs(10));
        assert_eq!(
            config.trace.store,
            TraceStore::Sqlite(PathBuf::from("/etc/ctxd/data/traces.db"))
        );
        assert_eq!(config.trace.digest_key_env, "CTXD_DIGEST_KEY");
        assert!(!config.trace.generate_digest_key);
        assert!(config.metrics.enabled);
        assert!(!config.metrics.tenant_label);
        assert_eq!(config.metrics.duration_buckets_ms.len(), 13);
        assert_eq!(config.limits.max_turn, Duration::from_secs(10));
        assert_eq!(config.server.header_timeout, Duration::from_secs(5));
        assert_eq!(config.server.body_timeout, Duration::from_secs(10));
        assert_eq!(config.server.keep_alive, Duration::from_secs(5));
        assert_eq!(config.server.drain_quiet, Duration::from_millis(250));
        assert_eq!(config.limits.max_input_keys, 64);
        assert_eq!(config.limits.replays_per_minute, 60);
        assert_eq!(config.limits.replay_burst, 10);
        let demo = config.tenant("demo").unwrap();
        assert_eq!(demo.max_in_flight, 256);
        assert_eq!(
            demo.api_key.sha256(&EnvVars::default()).map(hex::encode),
            Some(hash_of("key-a"))
        );
        assert_eq!(
            demo.projects,
            [ProjectRef {
                path: PathBuf::from("/etc/ctxd/p.json"),
                binding: PathBuf::from("/etc/ctxd/b.toml"),
            }]
        );
    }

    #[test]
    fn the_shipped_config_loads_with_the_demo_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/ctxd.toml");
        let config = ServerConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let demo = config.tenant("demo").unwrap();
        assert_eq!(
            demo.api_key,
            ApiKey::Sha256(Sha256::digest(b"ctxd-demo-key").into())
        );
        assert!(config.trace.generate_digest_key);
        assert!(
            demo.projects[0]
                .path
                .ends_with("fixtures/demo/project.json")
        );
        assert!(demo.projects[0].binding.ends_with("bindings/demo.toml"));
        assert!(config.environment_problems(&EnvVars::default()).is_empty());
    }

    #[test]
    fn api_key_hashes_are_64_hex_characters() {
        let good = hash_of("key-a");
        for (value, ok) in [
            (good.clone(), true),
            (good.to_uppercase(), true),
            (good[..63].to_owned(), false),
            (format!("{good}0"), false),
            (format!("{}g", &good[..63]), false),
            (String::new(), false),
        ] {
            let text = tenant("demo", &format!("api_key_sha256 = {value:?}"));
            if ok {
                parse(&text).unwrap_or_else(|e| panic!("{value}: {e}"));
            } else {
                assert_problem(
                    &text,
                    "tenants[0].api_key_sha256",
                    "must be 64 hexadecimal characters",
                );
            }
        }
    }

    #[test]
    fn exactly_one_api_key_field() {
        let both = tenant(
            "demo",
            &format!(
                "api_key_sha256 = {:?}\napi_key_env = \"DEMO_API_KEY\"",
                hash_of("k")
            ),
        );
        assert_problem(
            &both,
            "tenants[0]",
            "exactly one of api_key_sha256 and api_key_env",
        );
        assert_problem(&tenant("demo", ""), "tenants[0]", "needs an API key");
        let by_env = parse(&tenant("demo", "api_key_env = \"DEMO_API_KEY\"")).unwrap();
        assert_eq!(
            by_env.tenants[0].api_key,
            ApiKey::Env("DEMO_API_KEY".to_owned())
        );
        assert_problem(
            &tenant("demo", "api_key_env = \"DEMO-KEY\""),
            "tenants[0].api_key_env",
            "not an environment variable name",
        );
    }

    #[test]
    fn tenants_are_unique_by_id_and_by_key() {
        let duplicate_ids = format!(
            "{}{}",
            tenant("demo", &format!("api_key_sha256 = {:?}", hash_of("a"))),
            tenant("demo", &format!("api_key_sha256 = {:?}", hash_of("b")))
        );
        assert_problem(
            &duplicate_ids,
            "tenants[1].id",
            "already used by tenants[0]",
        );
        let shared_key = format!(
            "{}{}",
            tenant("one", &format!("api_key_sha256 = {:?}", hash_of("a"))),
            tenant(
                "two",
                &format!("api_key_sha256 = {:?}", hash_of("a").to_uppercase())
            )
        );
        assert_problem(
            &shared_key,
            "tenants[1].api_key_sha256",
            "two tenants cannot share a key",
        );
        assert_problem(
            &tenant("-bad", "api_key_env = \"K\""),
            "tenants[0].id",
            "tenant id \"-bad\" is invalid",
        );
    }

    #[test]
    fn tenants_and_projects_are_required() {
        assert_problem("[server]\n", "tenants", "at least one tenant");
        let no_projects = "[[tenants]]\nid = \"demo\"\napi_key_env = \"K\"\n";
        assert_problem(no_projects, "tenants[0].projects", "at least one project");
        let no_binding = "[[tenants]]\nid = \"demo\"\napi_key_env = \"K\"\n[[tenants.projects]]\npath = \"p.json\"\n";
        assert_problem(no_binding, "tenants[0].projects[0].binding", "is required");
        let twice = format!(
            "{}[[tenants.projects]]\npath = \"p.json\"\nbinding = \"c.toml\"\n",
            minimal()
        );
        assert_problem(
            &twice,
            "tenants[0].projects[1].path",
            "already listed at projects[0]",
        );
    }

    #[test]
    fn ranges_and_formats() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "[server]\nlisten = \"localhost:8080\"",
                "server.listen",
                Some("not a socket address"),
            ),
            ("[server]\nlisten = \"[::1]:0\"", "", None),
            (
                "[server]\nmax_body_bytes = 1023",
                "server.max_body_bytes",
                Some("use 1024..=16777216"),
            ),
            (
                "[server]\nshutdown_grace_ms = 0",
                "server.shutdown_grace_ms",
                Some("out of range"),
            ),
            (
                "[server]\nbody_timeout_ms = 99",
                "server.body_timeout_ms",
                Some("use 100..=300000"),
            ),
            (
                "[server]\nheader_timeout_ms = 300001",
                "server.header_timeout_ms",
                Some("use 100..=300000"),
            ),
            (
                "[server]\nkeep_alive_ms = 0",
                "server.keep_alive_ms",
                Some("out of range"),
            ),
            (
                "[server]\nshutdown_grace_ms = 1000\ndrain_quiet_ms = 1000",
                "server.drain_quiet_ms",
                Some("must be less than server.shutdown_grace_ms (1000)"),
            ),
            ("[server]\nshutdown_grace_ms = 100", "", None),
            ("[server]\ndrain_quiet_ms = 0", "", None),
            (
                "[limits]\nmax_input_keys = 0",
                "limits.max_input_keys",
                Some("use 1..=4096"),
            ),
            (
                "[limits]\nreplays_per_minute = 0",
                "limits.replays_per_minute",
                Some("out of range"),
            ),
            (
                "[limits]\nreplay_burst = 100001",
                "limits.replay_burst",
                Some("use 1..=100000"),
            ),
            (
                "[limits]\nmax_turn_ms = 49",
                "limits.max_turn_ms",
                Some("use 50..=60000"),
            ),
            ("[limits]\nmax_turn_ms = 50", "", None),
            ("[limits]\nmax_turn_ms = 60000", "", None),
            (
                "[limits]\nmax_turn_ms = 60001",
                "limits.max_turn_ms",
                Some("use 50..=60000"),
            ),
            (
                "[metrics]\nduration_buckets_ms = []",
                "metrics.duration_buckets_ms",
                Some("at least one"),
            ),
            ("[metrics]\nduration_buckets_ms = [0.5, 1, 2.5]", "", None),
            (
                "[metrics]\nduration_buckets_ms = [1, 5, 5]",
                "metrics.duration_buckets_ms[2]",
                Some("strictly increasing"),
            ),
            (
                "[metrics]\nduration_buckets_ms = [5, 1]",
                "metrics.duration_buckets_ms[1]",
                Some("strictly increasing"),
            ),
            (
                "[metrics]\nduration_buckets_ms = [0, 1]",
                "metrics.duration_buckets_ms[0]",
                Some("positive"),
            ),
            (
                "[metrics]\nduration_buckets_ms = [-1]",
                "metrics.duration_buckets_ms[0]",
                Some("positive"),
            ),
            (
                "[trace]\nstore = \"sqlite:\"",
                "trace.store",
                Some("needs the path"),
            ),
            (
                "[trace]\nstore = \"sqlite::memory:\"",
                "trace.store",
                Some("needs the path"),
            ),
            (
                "[trace]\nstore = \"mysql://h/db\"",
                "trace.store",
                Some("is not a trace store"),
            ),
            (
                "[trace]\nstore = \"postgres://ctxd@db.internal/traces\"",
                "trace.store",
                Some("name that variable in trace.store_env"),
            ),
            (
                "[trace]\ndigest_key_env = \"1KEY\"",
                "trace.digest_key_env",
                Some("not an environment variable name"),
            ),
            (
                "[server]\nport = 8080",
                "server.port",
                Some("unknown field `port`"),
            ),
            (
                "[tracing]\nstore = \"x\"",
                "tracing",
                Some("unknown field `tracing`"),
            ),
            (
                "[server]\nlisten = 8080",
                "server.listen",
                Some("must be a string (found a whole number)"),
            ),
        ];
        for (section, path, expected) in cases {
            let text = format!("{section}\n{}", minimal());
            match expected {
                None => {
                    parse(&text).unwrap_or_else(|e| panic!("{section}: {e}"));
                }
                Some(needle) => assert_problem(&text, path, needle),
            }
        }
        let per_tenant = minimal().replace(
            "[[tenants.projects]]",
            "max_in_flight = 0\n[[tenants.projects]]",
        );
        assert_problem(&per_tenant, "tenants[0].max_in_flight", "use 1..=100000");
    }

    #[test]
    fn the_handles_section_has_defaults_and_checks_every_limit_against_its_cap() {
        assert_eq!(
            parse(&minimal()).unwrap().handles,
            HandleSettings::default()
        );
        let text = format!(
            "[handles]\nttl = \"15m\"\nmax_total_bytes = 268435456\nmax_tombstones = 5\n\
             default_max_results = 10\nmax_results_cap = 20\ndefault_max_bytes = 100\n\
             max_bytes_cap = 200\ndefault_time_limit_ms = 5\ntime_limit_cap_ms = 50\n{}",
            minimal()
        );
        let handles = parse(&text).unwrap().handles;
        assert_eq!(
            handles,
            HandleSettings {
                ttl: Duration::from_secs(900),
                max_total_bytes: 268_435_456,
                max_tenant_bytes: 268_435_456,
                max_tombstones: 5,
                max_tenant_tombstones: 5,
                limits: LimitSettings {
                    default_max_results: 10,
                    max_results_cap: 20,
                    default_max_bytes: 100,
                    max_bytes_cap: 200,
                    default_time_limit: Duration::from_millis(5),
                    time_limit_cap: Duration::from_millis(50),
                },
            }
        );
        let cases: &[(&str, &str, &str)] = &[
            ("ttl = \"soon\"", "handles.ttl", "not a duration"),
            ("ttl = \"0s\"", "handles.ttl", "longer than zero"),
            ("ttl = \"8d\"", "handles.ttl", "at most \"7d\""),
            (
                "max_total_bytes = 10",
                "handles.max_total_bytes",
                "out of range",
            ),
            (
                "max_results_cap = 0",
                "handles.max_results_cap",
                "out of range",
            ),
            (
                "default_max_results = 101\nmax_results_cap = 100",
                "handles.default_max_results",
                "at most handles.max_results_cap",
            ),
            (
                "default_max_bytes = 2000000",
                "handles.default_max_bytes",
                "use 1..=1048576",
            ),
            (
                "default_time_limit_ms = 0",
                "handles.default_time_limit_ms",
                "out of range",
            ),
            (
                "time_limit_cap_ms = 60001",
                "handles.time_limit_cap_ms",
                "out of range",
            ),
            ("max_bytes = 5", "handles.max_bytes", "unknown field"),
            (
                "max_tenant_bytes = 0",
                "handles.max_tenant_bytes",
                "out of range",
            ),
            (
                "max_total_bytes = 4096\nmax_tenant_bytes = 4097",
                "handles.max_tenant_bytes",
                "use 1..=4096",
            ),
        ];
        for (line, path, needle) in cases {
            assert_problem(&format!("[handles]\n{line}\n{}", minimal()), path, needle);
        }
    }

    #[test]
    fn the_response_caches_share_one_memory_bound_equally_by_default() {
        let config = parse(&minimal()).unwrap();
        assert_eq!(config.cache, CacheMemory::default());
        assert_eq!(config.cache.max_total_bytes, 64 * 1024 * 1024);
        let two = format!(
            "{}{}",
            minimal(),
            tenant(
                "globex",
                &format!("api_key_sha256 = {:?}", hash_of("key-b"))
            )
        );
        let cache = parse(&format!(
            "[cache]
max_total_bytes = 2000000
{two}"
        ))
        .unwrap()
        .cache;
        assert_eq!(cache.max_tenant_bytes, 1_000_000);
        let cache = parse(&format!(
            "[cache]
max_total_bytes = 2000000
max_tenant_bytes = 400000
{two}"
        ))
        .unwrap()
        .cache;
        assert_eq!(cache.max_tenant_bytes, 400_000);
        let cases: &[(&str, &str, &str)] = &[
            (
                "max_total_bytes = 10",
                "cache.max_total_bytes",
                "out of range",
            ),
            (
                "max_total_bytes = 2000000\nmax_tenant_bytes = 1500000",
                "cache.max_tenant_bytes",
                "2 tenants × 1500000 bytes is more than cache.max_total_bytes (2000000): each tenant's share must fit in the store, so that no tenant evicts another's answers — use at most 1000000",
            ),
            ("ttl = \"60s\"", "cache.ttl", "unknown field"),
        ];
        for (lines, path, needle) in cases {
            assert_problem(&format!("[cache]\n{lines}\n{two}"), path, needle);
        }
    }

    #[test]
    fn each_tenant_has_its_own_share_of_the_handle_store() {
        let three = format!(
            "{}{}{}",
            minimal(),
            tenant(
                "globex",
                &format!("api_key_sha256 = {:?}", hash_of("key-b"))
            ),
            tenant(
                "initech",
                &format!("api_key_sha256 = {:?}", hash_of("key-c"))
            )
        );
        // By default an equal share each.
        let handles = parse(&format!("[handles]\nmax_total_bytes = 3000000\n{three}"))
            .unwrap()
            .handles;
        assert_eq!(handles.max_tenant_bytes, 1_000_000);
        // A share of one's own choosing, as long as every tenant's fits in the store.
        let handles = parse(&format!(
            "[handles]\nmax_total_bytes = 3000000\nmax_tenant_bytes = 500000\n{three}"
        ))
        .unwrap()
        .handles;
        assert_eq!(handles.max_tenant_bytes, 500_000);
        assert_problem(
            &format!("[handles]\nmax_total_bytes = 3000000\nmax_tenant_bytes = 1000001\n{three}"),
            "handles.max_tenant_bytes",
            "3 tenants × 1000001 bytes is more than handles.max_total_bytes (3000000)",
        );
    }

    #[test]
    fn each_tenant_has_its_own_share_of_tombstones() {
        let three = format!(
            "{}{}{}",
            minimal(),
            tenant(
                "globex",
                &format!("api_key_sha256 = {:?}", hash_of("key-b"))
            ),
            tenant(
                "initech",
                &format!("api_key_sha256 = {:?}", hash_of("key-c"))
            )
        );
        assert_eq!(
            parse(&minimal()).unwrap().handles.max_tenant_tombstones,
            100_000,
            "one tenant: all of them"
        );
        let handles = parse(&format!("[handles]\nmax_tombstones = 3000\n{three}"))
            .unwrap()
            .handles;
        assert_eq!(
            (handles.max_tombstones, handles.max_tenant_tombstones),
            (3000, 1000)
        );
        let handles = parse(&format!(
            "[handles]\nmax_tombstones = 3000\nmax_tenant_tombstones = 10\n{three}"
        ))
        .unwrap()
        .handles;
        assert_eq!(handles.max_tenant_tombstones, 10);
        let handles = parse(&format!("[handles]\nmax_tenant_tombstones = 0\n{three}"))
            .unwrap()
            .handles;
        assert_eq!(handles.max_tenant_tombstones, 0);
        assert_problem(
            &format!("[handles]\nmax_tombstones = 3000\nmax_tenant_tombstones = 1001\n{three}"),
            "handles.max_tenant_tombstones",
            "3 tenants × 1001 tombstones is more than handles.max_tombstones (3000)",
        );
        assert_problem(
            &format!("[handles]\nmax_tombstones = 3000\nmax_tenant_tombstones = 3001\n{three}"),
            "handles.max_tenant_tombstones",
            "use 0..=3000",
        );
    }

    #[test]
    fn a_postgres_dsn_is_never_echoed() {
        let text = format!(
            "[trace]\nstore = \"postgres://ctxd:s3cr3tpw@db/traces\"\n{}",
            minimal()
        );
        let errors = parse(&text).unwrap_err();
        let shown = format!("{errors}\n{errors:?}");
        assert!(!shown.contains("s3cr3tpw"), "{shown}");
        assert!(errors.has_path("trace.store"), "{shown}");
    }

    #[test]
    fn inline_api_keys_are_refused() {
        let text = minimal().replace(
            "[[tenants.projects]]",
            "api_key = \"plain-demo-key\"\n[[tenants.projects]]",
        );
        let errors = parse(&text).unwrap_err();
        assert_eq!(errors.errors.len(), 1, "{errors}");
        assert_eq!(errors.errors[0].path, "tenants[0].api_key");
        assert!(errors.errors[0].message.contains("api_key_env"), "{errors}");
        assert!(!errors.to_string().contains("plain-demo-key"));
    }

    #[test]
    fn environment_problems_name_variables_never_values() {
        let text = format!(
            "{}{}",
            tenant("one", "api_key_env = \"ONE_KEY\""),
            tenant(
                "two",
                &format!("api_key_sha256 = {:?}", hash_of("shared-key-value"))
            )
        );
        let config = parse(&text).unwrap();
        let env = |pairs: &[(&str, &str)]| pairs.iter().copied().collect::<EnvVars>();

        let problems = config.environment_problems(&env(&[]));
        let paths: Vec<&str> = problems.iter().map(|p| p.problem.path.as_str()).collect();
        assert_eq!(paths, ["tenants[0].api_key_env", "trace.digest_key_env"]);
        assert!(
            problems[0]
                .problem
                .message
                .contains("\"ONE_KEY\" is not set")
        );

        let problems =
            config.environment_problems(&env(&[("ONE_KEY", ""), ("CTXD_DIGEST_KEY", "k")]));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].problem.message.contains("is empty"));

        let all_set = env(&[("ONE_KEY", "one-key-value"), ("CTXD_DIGEST_KEY", "k")]);
        assert!(config.environment_problems(&all_set).is_empty());

        let shared = env(&[("ONE_KEY", "shared-key-value"), ("CTXD_DIGEST_KEY", "k")]);
        let problems = config.environment_problems(&shared);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].problem.message.contains("cannot share a key"));
        assert!(!format!("{problems:?}").contains("shared-key-value"));
    }

    #[test]
    fn a_generated_digest_key_needs_no_env_var() {
        let text = format!("[trace]\ngenerate_digest_key = true\n{}", minimal());
        let config = parse(&text).unwrap();
        assert!(config.environment_problems(&EnvVars::default()).is_empty());
        let config = parse(&minimal()).unwrap();
        let problems = config.environment_problems(&EnvVars::default());
        assert_eq!(problems.len(), 1);
        assert!(problems[0].problem.message.contains("generate_digest_key"));
    }

    #[test]
    fn load_reports_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        std::fs::write(&path, "[limits]\nmax_turn_ms = 1\n").unwrap();
        let errors = ServerConfig::load(&path).unwrap_err();
        let text = errors.to_string();
        assert!(
            text.contains(&format!(
                "{}: limits.max_turn_ms: 1 is out of range",
                path.display()
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("{}: tenants: at least one tenant", path.display())),
            "{text}"
        );
    }
}
