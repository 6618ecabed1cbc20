//! `[handles] store` and how to reach a Redis store: `store = "memory"` (the default)
//! or `"redis"` with `url`, `password_env`, `key_prefix`, `tombstone_ttl` and
//! `timeout_ms`. A password is only ever named by its environment variable: one inside
//! the URL is refused, and the URL is never echoed in a message.

use crate::config::Problems;
use crate::handles::HandleBackend;
use crate::handles::redis_store::{RedisSettings, key_layout};
use std::time::Duration;

const DEFAULT_PORT: u16 = 6379;
const DEFAULT_KEY_PREFIX: &str = "ctxd:handles";
const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(86_400);
const MAX_TOMBSTONE_TTL: Duration = Duration::from_secs(30 * 86_400);
const DEFAULT_TIMEOUT_MS: i64 = 1000;
const TIMEOUT_MS_RANGE: (i64, i64) = (50, 10_000);
const DB_RANGE: (i64, i64) = (0, 65_535);
const MAX_KEY_PREFIX_LEN: usize = 128;

/// The store keys of `[handles]`, as written.
#[derive(Default)]
pub(super) struct RawHandleStore<'a> {
    pub(super) store: Option<&'a str>,
    pub(super) url: Option<&'a str>,
    pub(super) password_env: Option<&'a str>,
    pub(super) key_prefix: Option<&'a str>,
    pub(super) tombstone_ttl: Option<&'a str>,
    pub(super) timeout_ms: Option<i64>,
}

/// Which store, every problem named by its key.
pub(super) fn check_handle_store(
    problems: &mut Problems,
    raw: &RawHandleStore<'_>,
) -> Option<HandleBackend> {
    match raw.store.unwrap_or("memory") {
        "memory" => {
            let redis_only = [
                ("url", raw.url.is_some()),
                ("password_env", raw.password_env.is_some()),
                ("key_prefix", raw.key_prefix.is_some()),
                ("tombstone_ttl", raw.tombstone_ttl.is_some()),
                ("timeout_ms", raw.timeout_ms.is_some()),
            ];
            let before = problems.len();
            for (key, _) in redis_only.iter().filter(|(_, set)| *set) {
                problems.add(
                    &format!("handles.{key}"),
                    "applies only to store = \"redis\"",
                );
            }
            (problems.len() == before).then_some(HandleBackend::Memory)
        }
        "redis" => check_redis(problems, raw).map(HandleBackend::Redis),
        other => {
            problems.add(
                "handles.store",
                format!("unknown store {other:?}: use \"memory\" or \"redis\""),
            );
            None
        }
    }
}

fn check_redis(problems: &mut Problems, raw: &RawHandleStore<'_>) -> Option<RedisSettings> {
    let before = problems.len();
    let address = match raw.url {
        Some(text) => parse_url(problems, text),
        None => {
            problems.add(
                "handles.url",
                "is required for store = \"redis\": e.g. \"redis://127.0.0.1:6379/0\"",
            );
            None
        }
    };
    if let Some(name) = raw.password_env {
        problems.env_name("handles.password_env", name);
    }
    let key_prefix = raw.key_prefix.unwrap_or(DEFAULT_KEY_PREFIX);
    let prefix_ok = !key_prefix.is_empty()
        && key_prefix.len() <= MAX_KEY_PREFIX_LEN
        && key_prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:_-".contains(&b));
    if !prefix_ok {
        problems.add(
            "handles.key_prefix",
            format!(
                "{key_prefix:?} is not a key prefix: use 1-{MAX_KEY_PREFIX_LEN} letters, digits, '.', ':', '_' or '-'"
            ),
        );
    } else if let Some((outer, kind)) = nesting(key_prefix) {
        problems.add(
            "handles.key_prefix",
            format!(
                "{key_prefix:?} nests in the keys of prefix {outer:?} (its \"{outer}:{kind}:…\" keys): a deployment with key_prefix {outer:?} on the same Redis would share keys with this one — no ':'-separated part after the first may be one of {}",
                key_layout::KINDS.join(", ")
            ),
        );
    }
    let tombstone_ttl = match raw.tombstone_ttl {
        Some(text) => problems.duration(
            "handles.tombstone_ttl",
            text,
            false,
            MAX_TOMBSTONE_TTL,
            "30d",
        ),
        None => Some(DEFAULT_TOMBSTONE_TTL),
    };
    let timeout_ms = problems.int_in(
        "handles.timeout_ms",
        raw.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        TIMEOUT_MS_RANGE.0..=TIMEOUT_MS_RANGE.1,
    );
    if problems.len() != before {
        return None;
    }
    let (host, port, db) = address?;
    Some(RedisSettings {
        host,
        port,
        db,
        password_env: raw.password_env.map(str::to_owned),
        key_prefix: key_prefix.to_owned(),
        tombstone_ttl: tombstone_ttl?,
        timeout: Duration::from_millis(timeout_ms? as u64),
    })
}

/// The shorter prefix whose keys `prefix` would nest in, and the kind of key it takes
/// the place of: `P:bytes` is `P`'s `P:bytes:{tenant}`. Any two prefixes that pass this
/// cannot share a key, however one extends the other: after the shorter one, the longer
/// goes on with a part that is no kind of key.
fn nesting(prefix: &str) -> Option<(&str, &str)> {
    let mut start = 0;
    for (i, part) in prefix.split(':').enumerate() {
        if i > 0 && key_layout::KINDS.contains(&part) {
            return Some((&prefix[..start - 1], part));
        }
        start += part.len() + 1;
    }
    None
}

/// `redis://host[:port][/db]`: host, port and database. Never echoes the URL (it may
/// hold a password, which is refused).
fn parse_url(problems: &mut Problems, text: &str) -> Option<(String, u16, i64)> {
    let path = "handles.url";
    let Ok(url) = url::Url::parse(text.trim()) else {
        problems.withhold(text);
        problems.add(
            path,
            "is not a URL: write e.g. \"redis://127.0.0.1:6379/0\"",
        );
        return None;
    };
    if url.password().is_some() || !url.username().is_empty() {
        problems.withhold(text);
        if let Some(password) = url.password() {
            problems.withhold(password);
        }
        problems.add(
            path,
            "a user or password inside the URL is refused: put the password in an environment variable and name it in handles.password_env",
        );
        return None;
    }
    match url.scheme() {
        "redis" => {}
        "rediss" => {
            problems.add(
                path,
                "rediss:// (TLS) is not supported: use redis:// on a trusted network or a local TLS tunnel",
            );
            return None;
        }
        other => {
            problems.add(
                path,
                format!("scheme {other:?} is not supported: use redis://host:port/db"),
            );
            return None;
        }
    }
    let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
        problems.add(path, "names no host: use redis://host:port/db");
        return None;
    };
    if url.query().is_some() || url.fragment().is_some() {
        problems.add(
            path,
            "query parameters and fragments are not supported: use redis://host:port/db",
        );
        return None;
    }
    let db_text = url.path().trim_start_matches('/');
    let db = if db_text.is_empty() {
        0
    } else {
        match db_text.parse::<i64>() {
            Ok(db) if (DB_RANGE.0..=DB_RANGE.1).contains(&db) => db,
            _ => {
                problems.add(
                    path,
                    format!(
                        "the path must be a database number {}..={}",
                        DB_RANGE.0, DB_RANGE.1
                    ),
                );
                return None;
            }
        }
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Some((host, url.port().unwrap_or(DEFAULT_PORT), db))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawHandleStore<'_>) -> Result<HandleBackend, Vec<String>> {
        let mut problems = Problems::default();
        match check_handle_store(&mut problems, &raw) {
            Some(backend) if problems.is_empty() => Ok(backend),
            _ => Err(problems
                .into_screened()
                .into_iter()
                .map(|p| p.to_string())
                .collect()),
        }
    }

    fn redis(url: &str) -> RawHandleStore<'_> {
        RawHandleStore {
            store: Some("redis"),
            url: Some(url),
            ..RawHandleStore::default()
        }
    }

    #[test]
    fn memory_is_the_default() {
        assert_eq!(
            check(RawHandleStore::default()).unwrap(),
            HandleBackend::Memory
        );
    }

    #[test]
    fn a_redis_store_has_its_address_prefix_and_bounds() {
        let backend = check(RawHandleStore {
            password_env: Some("CTXD_REDIS_PASSWORD"),
            key_prefix: Some("prod:ctxd"),
            tombstone_ttl: Some("2h"),
            timeout_ms: Some(250),
            ..redis("redis://10.0.0.5:6380/3")
        })
        .unwrap();
        assert_eq!(
            backend,
            HandleBackend::Redis(RedisSettings {
                host: "10.0.0.5".into(),
                port: 6380,
                db: 3,
                password_env: Some("CTXD_REDIS_PASSWORD".into()),
                key_prefix: "prod:ctxd".into(),
                tombstone_ttl: Duration::from_secs(7200),
                timeout: Duration::from_millis(250),
            })
        );
        let HandleBackend::Redis(defaults) = check(redis("redis://127.0.0.1")).unwrap() else {
            panic!("a redis store");
        };
        assert_eq!(
            (defaults.port, defaults.db, defaults.key_prefix.as_str()),
            (6379, 0, "ctxd:handles")
        );
        assert_eq!(defaults.tombstone_ttl, DEFAULT_TOMBSTONE_TTL);
        assert_eq!(defaults.password_env, None);
    }

    #[test]
    fn a_prefix_that_nests_in_anothers_keys_is_refused_naming_both() {
        for (prefix, outer, kind) in [
            ("P:bytes", "P", "bytes"),
            ("ctxd:handles:h", "ctxd:handles", "h"),
            ("ctxd:tombstones:x", "ctxd", "tombstones"),
            ("a:b:lru", "a:b", "lru"),
            ("P::m", "P:", "m"),
        ] {
            let problems = check(RawHandleStore {
                key_prefix: Some(prefix),
                ..redis("redis://127.0.0.1")
            })
            .unwrap_err();
            let text = problems.join("\n");
            assert!(text.contains("handles.key_prefix"), "{text}");
            assert!(
                text.contains(&format!("{prefix:?} nests in the keys of prefix {outer:?}")),
                "{text}"
            );
            assert!(text.contains(&format!("\"{outer}:{kind}:…\"")), "{text}");
        }
        for prefix in [
            "ctxd:handles",
            "bytes",
            "prod:ctxd",
            "P:bytesx",
            "P:x:y",
            "h",
        ] {
            check(RawHandleStore {
                key_prefix: Some(prefix),
                ..redis("redis://127.0.0.1")
            })
            .unwrap_or_else(|problems| panic!("{prefix}: {problems:?}"));
        }
    }

    #[test]
    fn every_bad_value_is_named_and_a_password_is_never_echoed() {
        let cases: Vec<(RawHandleStore<'_>, &str, &str)> = vec![
            (
                redis("redis://:hunter2-secret@127.0.0.1:6379/0"),
                "handles.url",
                "handles.password_env",
            ),
            (
                redis("redis://ctxd:hunter2-secret@127.0.0.1:6379/0"),
                "handles.url",
                "refused",
            ),
            (redis("rediss://127.0.0.1:6379"), "handles.url", "TLS"),
            (redis("http://127.0.0.1:6379"), "handles.url", "scheme"),
            (redis("redis://127.0.0.1:6379/x"), "handles.url", "database"),
            (
                redis("redis://127.0.0.1:6379/0?protocol=resp3"),
                "handles.url",
                "query",
            ),
            (redis("not a url"), "handles.url", "not a URL"),
            (
                RawHandleStore {
                    store: Some("redis"),
                    ..RawHandleStore::default()
                },
                "handles.url",
                "is required",
            ),
            (
                RawHandleStore {
                    password_env: Some("1BAD"),
                    ..redis("redis://127.0.0.1")
                },
                "handles.password_env",
                "environment variable name",
            ),
            (
                RawHandleStore {
                    key_prefix: Some("has space"),
                    ..redis("redis://127.0.0.1")
                },
                "handles.key_prefix",
                "key prefix",
            ),
            (
                RawHandleStore {
                    tombstone_ttl: Some("0s"),
                    ..redis("redis://127.0.0.1")
                },
                "handles.tombstone_ttl",
                "longer than zero",
            ),
            (
                RawHandleStore {
                    timeout_ms: Some(10),
                    ..redis("redis://127.0.0.1")
                },
                "handles.timeout_ms",
                "out of range",
            ),
            (
                RawHandleStore {
                    store: Some("postgres"),
                    ..RawHandleStore::default()
                },
                "handles.store",
                "use \"memory\" or \"redis\"",
            ),
            (
                RawHandleStore {
                    url: Some("redis://127.0.0.1"),
                    ..RawHandleStore::default()
                },
                "handles.url",
                "only to store = \"redis\"",
            ),
        ];
        for (raw, path, needle) in cases {
            let problems = check(raw).unwrap_err();
            let text = problems.join("\n");
            assert!(
                problems
                    .iter()
                    .any(|p| p.contains(path) && p.contains(needle)),
                "{path} / {needle}: {text}"
            );
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}
