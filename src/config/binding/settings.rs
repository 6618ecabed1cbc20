//! The settings a provider's table and `[defaults]` share (timeout, concurrency, pool,
//! circuit, cache, secrets, retention): checked where they are written, then merged —
//! the provider's own value, else the `[defaults]` value, else the built-in default.

use super::{CacheSettings, CircuitSettings, DEFAULT_RETENTION_TTL, DEFAULT_TIMEOUT_MS, Retention};
use crate::bounds::{MAX_TIMEOUT_MS, MIN_TIMEOUT_MS};
use crate::config::field_path;
use crate::providers::{PoolSettings, RecycleCheck};
use crate::secrets::redact::SecretHandling;
use crate::validation::Problems;
use serde::Deserialize;
use std::time::Duration;

const DEFAULT_MAX_CONCURRENCY: usize = 64;
const MAX_CONCURRENCY: i64 = 10_000;
const MAX_CACHE_TTL: Duration = Duration::from_secs(3600);
const MAX_RETENTION_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    timeout_ms: Option<i64>,
    max_concurrency: Option<i64>,
    #[serde(default)]
    pool: RawPool,
    #[serde(default)]
    circuit: RawCircuit,
    #[serde(default)]
    cache: RawCache,
    secrets: Option<String>,
    retention: Option<String>,
    retention_ttl: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPool {
    max_idle_per_host: Option<i64>,
    idle_timeout_ms: Option<i64>,
    max_size: Option<i64>,
    connect_timeout_ms: Option<i64>,
    recycle: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCircuit {
    failure_rate: Option<f64>,
    min_calls: Option<i64>,
    window: Option<i64>,
    consecutive_failures: Option<i64>,
    open_ms: Option<i64>,
    half_open_probes: Option<i64>,
    half_open_max_ms: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCache {
    ttl: Option<String>,
    not_found_ttl: Option<String>,
    required_max_age: Option<String>,
}

/// Settings checked where they are written; `None` = not set there (or invalid).
#[derive(Default)]
pub(super) struct Partial {
    timeout_ms: Option<u64>,
    max_concurrency: Option<usize>,
    max_idle_per_host: Option<usize>,
    idle_timeout_ms: Option<u64>,
    max_size: Option<usize>,
    connect_timeout_ms: Option<u64>,
    recycle: Option<RecycleCheck>,
    failure_rate: Option<f64>,
    min_calls: Option<u32>,
    window: Option<u32>,
    consecutive_failures: Option<u32>,
    open_ms: Option<u64>,
    half_open_probes: Option<u32>,
    half_open_max_ms: Option<u64>,
    /// `Some(zero)` disables a cache that `[defaults]` enables.
    cache_ttl: Option<Duration>,
    /// `Some(zero)`: `NOT_FOUND` answers are not kept, whatever `[defaults]` says.
    cache_not_found_ttl: Option<Duration>,
    cache_required_max_age: Option<Duration>,
    secrets: Option<SecretHandling>,
    retention: Option<Retention>,
    retention_ttl: Option<Duration>,
}

pub(super) fn check_settings(problems: &mut Problems, path: &str, raw: RawSettings) -> Partial {
    let at = |key: &str| field_path(path, key);
    let int = |problems: &mut Problems, key: &str, value: Option<i64>, lo: i64, hi: i64| {
        value.and_then(|v| problems.int_in(&at(key), v, lo..=hi))
    };
    let min_timeout = MIN_TIMEOUT_MS as i64;
    let max_timeout = MAX_TIMEOUT_MS as i64;
    let failure_rate = raw.circuit.failure_rate.and_then(|rate| {
        if rate > 0.0 && rate <= 1.0 {
            Some(rate)
        } else {
            problems.add(
                &at("circuit.failure_rate"),
                format!("{rate} is out of range: use a fraction above 0 and at most 1"),
            );
            None
        }
    });
    Partial {
        timeout_ms: int(
            problems,
            "timeout_ms",
            raw.timeout_ms,
            min_timeout,
            max_timeout,
        )
        .map(|v| v as u64),
        max_concurrency: int(
            problems,
            "max_concurrency",
            raw.max_concurrency,
            1,
            MAX_CONCURRENCY,
        )
        .map(|v| v as usize),
        max_idle_per_host: int(
            problems,
            "pool.max_idle_per_host",
            raw.pool.max_idle_per_host,
            0,
            1024,
        )
        .map(|v| v as usize),
        idle_timeout_ms: int(
            problems,
            "pool.idle_timeout_ms",
            raw.pool.idle_timeout_ms,
            1,
            3_600_000,
        )
        .map(|v| v as u64),
        max_size: int(problems, "pool.max_size", raw.pool.max_size, 1, 64).map(|v| v as usize),
        connect_timeout_ms: int(
            problems,
            "pool.connect_timeout_ms",
            raw.pool.connect_timeout_ms,
            min_timeout,
            60_000,
        )
        .map(|v| v as u64),
        recycle: raw.pool.recycle.as_deref().and_then(|text| {
            let check = RecycleCheck::parse(text);
            if check.is_none() {
                problems.add(
                    &at("pool.recycle"),
                    format!("{text:?} is not a recycle check: use \"fast\" or \"verified\""),
                );
            }
            check
        }),
        failure_rate,
        min_calls: int(
            problems,
            "circuit.min_calls",
            raw.circuit.min_calls,
            1,
            10_000,
        )
        .map(|v| v as u32),
        window: int(problems, "circuit.window", raw.circuit.window, 1, 10_000).map(|v| v as u32),
        consecutive_failures: int(
            problems,
            "circuit.consecutive_failures",
            raw.circuit.consecutive_failures,
            1,
            1000,
        )
        .map(|v| v as u32),
        open_ms: int(problems, "circuit.open_ms", raw.circuit.open_ms, 1, 600_000)
            .map(|v| v as u64),
        half_open_probes: int(
            problems,
            "circuit.half_open_probes",
            raw.circuit.half_open_probes,
            1,
            100,
        )
        .map(|v| v as u32),
        half_open_max_ms: int(
            problems,
            "circuit.half_open_max_ms",
            raw.circuit.half_open_max_ms,
            1,
            600_000,
        )
        .map(|v| v as u64),
        cache_ttl: raw
            .cache
            .ttl
            .as_deref()
            .and_then(|ttl| problems.duration(&at("cache.ttl"), ttl, true, MAX_CACHE_TTL, "1h")),
        cache_not_found_ttl: raw.cache.not_found_ttl.as_deref().and_then(|ttl| {
            problems.duration(&at("cache.not_found_ttl"), ttl, true, MAX_CACHE_TTL, "1h")
        }),
        cache_required_max_age: raw.cache.required_max_age.as_deref().and_then(|age| {
            problems.duration(
                &at("cache.required_max_age"),
                age,
                true,
                MAX_CACHE_TTL,
                "1h",
            )
        }),
        secrets: raw.secrets.as_deref().and_then(|text| {
            let handling = SecretHandling::parse(text);
            if handling.is_none() {
                problems.add(
                    &at("secrets"),
                    format!(
                        "{text:?} is not a way to handle secrets: use \"refuse\" or \"redact\""
                    ),
                );
            }
            handling
        }),
        retention: raw.retention.as_deref().and_then(|text| {
            let retention = Retention::parse(text);
            if retention.is_none() {
                problems.add(
                    &at("retention"),
                    format!("{text:?} is not a retention: use \"none\", \"digest\" or \"content\""),
                );
            }
            retention
        }),
        retention_ttl: raw.retention_ttl.as_deref().and_then(|ttl| {
            problems.duration(&at("retention_ttl"), ttl, false, MAX_RETENTION_TTL, "365d")
        }),
    }
}

/// Settings with every default applied.
pub(super) struct Merged {
    pub(super) timeout: Duration,
    pub(super) max_concurrency: usize,
    pub(super) pool: PoolSettings,
    pub(super) circuit: CircuitSettings,
    pub(super) cache: CacheSettings,
    pub(super) secrets: SecretHandling,
    pub(super) retention: Retention,
    pub(super) retention_ttl: Duration,
}

/// The provider's own value, else the `[defaults]` value, else the built-in default.
pub(super) fn merge(own: &Partial, defaults: &Partial) -> Merged {
    let pool = PoolSettings::default();
    let circuit = CircuitSettings::default();
    macro_rules! pick {
        ($field:ident, $builtin:expr) => {
            own.$field.or(defaults.$field).unwrap_or($builtin)
        };
    }
    let millis = Duration::from_millis;
    Merged {
        timeout: millis(pick!(timeout_ms, DEFAULT_TIMEOUT_MS)),
        max_concurrency: pick!(max_concurrency, DEFAULT_MAX_CONCURRENCY),
        pool: PoolSettings {
            max_idle_per_host: pick!(max_idle_per_host, pool.max_idle_per_host),
            idle_timeout: own
                .idle_timeout_ms
                .or(defaults.idle_timeout_ms)
                .map_or(pool.idle_timeout, millis),
            max_size: pick!(max_size, pool.max_size),
            connect_timeout: own
                .connect_timeout_ms
                .or(defaults.connect_timeout_ms)
                .map_or(pool.connect_timeout, millis),
            recycle: pick!(recycle, pool.recycle),
        },
        circuit: CircuitSettings {
            failure_rate: pick!(failure_rate, circuit.failure_rate),
            min_calls: pick!(min_calls, circuit.min_calls),
            window: pick!(window, circuit.window),
            consecutive_failures: pick!(consecutive_failures, circuit.consecutive_failures),
            open: own
                .open_ms
                .or(defaults.open_ms)
                .map_or(circuit.open, millis),
            half_open_probes: pick!(half_open_probes, circuit.half_open_probes),
            half_open_max: own
                .half_open_max_ms
                .or(defaults.half_open_max_ms)
                .map_or(circuit.half_open_max, millis),
        },
        cache: CacheSettings {
            ttl: own
                .cache_ttl
                .or(defaults.cache_ttl)
                .filter(|ttl| !ttl.is_zero()),
            not_found_ttl: own
                .cache_not_found_ttl
                .or(defaults.cache_not_found_ttl)
                .filter(|ttl| !ttl.is_zero()),
            required_max_age: pick!(cache_required_max_age, Duration::ZERO),
        },
        secrets: pick!(secrets, SecretHandling::default()),
        retention: pick!(retention, Retention::default()),
        retention_ttl: pick!(retention_ttl, DEFAULT_RETENTION_TTL),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Binding, ProviderBinding};
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<Binding, crate::config::ConfigErrors> {
        Binding::parse(text, Path::new("/srv/ctxd/bindings"))
    }

    /// A binding with `[defaults]` lines and two http providers, `crm` with its own lines.
    fn binding(defaults: &str, crm: &str) -> String {
        format!(
            "revision = \"r1\"\n[defaults]\n{defaults}\n\
             [providers.crm]\ntype = \"http\"\nendpoint = \"https://crm.internal/context\"\n{crm}\n\
             [providers.other]\ntype = \"http\"\nendpoint = \"https://other.internal/context\"\n"
        )
    }

    fn provider<'b>(binding: &'b Binding, id: &str) -> &'b ProviderBinding {
        &binding.providers[id]
    }

    /// The one problem of `text`: `(path, message)`.
    fn problem(text: &str) -> (String, String) {
        let errors = parse(text).expect_err(text);
        assert_eq!(errors.errors.len(), 1, "{errors}");
        let problem = &errors.errors[0];
        (problem.path.clone(), problem.message.clone())
    }

    #[test]
    fn cache_settings_merge_and_default_to_no_not_found_caching() {
        let text = binding(
            "cache = { ttl = \"60s\", not_found_ttl = \"10s\", required_max_age = \"5s\" }",
            "cache = { not_found_ttl = \"0s\" }",
        );
        let parsed = parse(&text).unwrap();
        let crm = provider(&parsed, "crm");
        assert_eq!(crm.cache.ttl, Some(Duration::from_secs(60)));
        assert_eq!(crm.cache.not_found_ttl, None, "\"0s\" keeps no NOT_FOUND");
        assert_eq!(crm.cache.required_max_age, Duration::from_secs(5));
        let other = provider(&parsed, "other");
        assert_eq!(other.cache.not_found_ttl, Some(Duration::from_secs(10)));

        let plain = parse(&binding("", "cache = { ttl = \"30s\" }")).unwrap();
        let crm = provider(&plain, "crm");
        assert_eq!(crm.cache.ttl, Some(Duration::from_secs(30)));
        assert_eq!(crm.cache.not_found_ttl, None);
        assert_eq!(crm.cache.required_max_age, Duration::ZERO);
        assert_eq!(provider(&plain, "other").cache, CacheSettings::default());
    }

    #[test]
    fn secrets_is_refuse_unless_a_binding_says_redact() {
        let parsed = parse(&binding("secrets = \"redact\"", "secrets = \"refuse\"")).unwrap();
        assert_eq!(provider(&parsed, "crm").secrets, SecretHandling::Refuse);
        assert_eq!(provider(&parsed, "other").secrets, SecretHandling::Redact);
        let plain = parse(&binding("", "")).unwrap();
        assert_eq!(provider(&plain, "crm").secrets, SecretHandling::Refuse);
    }

    #[test]
    fn bad_cache_and_secrets_values_are_named() {
        let cases = [
            (
                binding("", "cache = { not_found_ttl = \"2h\" }"),
                "providers.crm.cache.not_found_ttl",
                "use at most \"1h\"",
            ),
            (
                binding("cache = { required_max_age = \"soon\" }", ""),
                "defaults.cache.required_max_age",
                "is not a duration",
            ),
            (
                binding("", "cache = { ttl = \"1m\", stale = \"5s\" }"),
                "providers.crm.cache.stale",
                "",
            ),
            (
                binding("", "secrets = \"mask\""),
                "providers.crm.secrets",
                "use \"refuse\" or \"redact\"",
            ),
        ];
        for (text, path, needle) in cases {
            let (found, message) = problem(&text);
            assert_eq!(found, path, "{message}");
            assert!(message.contains(needle), "{message}");
        }
    }

    #[test]
    fn the_digest_covers_the_cache_and_secrets_settings() {
        let digest = |defaults: &str| parse(&binding(defaults, "")).unwrap().digest;
        let base = digest("cache = { ttl = \"60s\" }");
        assert_eq!(
            base,
            digest("cache = { ttl = \"1m\", required_max_age = \"0s\" }")
        );
        for changed in [
            "cache = { ttl = \"60s\", not_found_ttl = \"10s\" }",
            "cache = { ttl = \"60s\", required_max_age = \"1s\" }",
            "cache = { ttl = \"60s\" }\nsecrets = \"redact\"",
        ] {
            assert_ne!(base, digest(changed), "{changed}");
        }
    }
}
