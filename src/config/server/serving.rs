//! The `[server]` and `[limits]` sections of the server config: the listener, the bounds
//! on a request (size, the time to send its head and body, keep-alive), the shutdown
//! drain, the turn deadline cap, the input keys a request may carry and the replay rate.

use super::ApiKey;
use super::mcp_access::{McpAccess, check_mcp_access};
use crate::config::Problems;
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const DEFAULT_MAX_BODY_BYTES: i64 = 64 * 1024;
const MAX_BODY_BYTES_RANGE: (i64, i64) = (1024, 16 * 1024 * 1024);
const DEFAULT_SHUTDOWN_GRACE_MS: i64 = 10_000;
const SHUTDOWN_GRACE_RANGE: (i64, i64) = (100, 300_000);
const DEFAULT_MAX_TURN_MS: i64 = 10_000;
const MAX_TURN_RANGE: (i64, i64) = (50, 60_000);
const DEFAULT_HEADER_TIMEOUT_MS: i64 = 5_000;
const DEFAULT_BODY_TIMEOUT_MS: i64 = 10_000;
const DEFAULT_KEEP_ALIVE_MS: i64 = 5_000;
const REQUEST_TIMEOUT_RANGE: (i64, i64) = (100, 300_000);
const DEFAULT_DRAIN_QUIET_MS: i64 = 250;
const DRAIN_QUIET_RANGE: (i64, i64) = (0, 60_000);
const DEFAULT_MAX_INPUT_KEYS: i64 = 64;
const MAX_INPUT_KEYS_RANGE: (i64, i64) = (1, 4096);
const DEFAULT_REPLAYS_PER_MINUTE: i64 = 60;
const REPLAYS_PER_MINUTE_RANGE: (i64, i64) = (1, 1_000_000);
const DEFAULT_REPLAY_BURST: i64 = 10;
const REPLAY_BURST_RANGE: (i64, i64) = (1, 100_000);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerSettings {
    /// `ctxd serve --listen` overrides it.
    pub(crate) listen: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub(crate) max_body_bytes: usize,
    /// The longest drain after a shutdown signal: requests in flight finish within it.
    pub(crate) shutdown_grace: Duration,
    /// Longest a client may take to send a request's head, for every request on a
    /// connection; past it the answer is `408`.
    pub(crate) header_timeout: Duration,
    /// Longest a client may take to send a request's body once its head is in; past it
    /// the answer is `408` and the connection closes.
    pub(crate) body_timeout: Duration,
    /// How long an idle kept-alive connection stays open.
    pub(crate) keep_alive: Duration,
    /// During shutdown, the drain ends once no request has been in flight or arrived for
    /// this long (at most `shutdown_grace`): a client that saw its last answer reconnects
    /// to a `503`, not to a closed port.
    pub(crate) drain_quiet: Duration,
    /// The key `POST /admin/reload` requires (`admin_key_sha256` or `admin_key_env`);
    /// `None`: no admin route answers.
    pub(crate) admin_key: Option<ApiKey>,
    /// The `Host` and `Origin` values `/mcp` answers (`mcp_allowed_hosts`,
    /// `mcp_allowed_origins`).
    pub(crate) mcp_access: McpAccess,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The longest deadline a turn may have, whatever it asks for.
    pub(crate) max_turn: Duration,
    /// Most keys a turn's (or a replay's) `inputs` may carry.
    pub(crate) max_input_keys: usize,
    /// Per tenant: replays a minute (the token bucket's refill rate) …
    pub(crate) replays_per_minute: u32,
    /// … and how many may come at once (the bucket's size).
    pub(crate) replay_burst: u32,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    listen: Option<String>,
    max_body_bytes: Option<i64>,
    shutdown_grace_ms: Option<i64>,
    header_timeout_ms: Option<i64>,
    body_timeout_ms: Option<i64>,
    keep_alive_ms: Option<i64>,
    drain_quiet_ms: Option<i64>,
    admin_key_sha256: Option<String>,
    admin_key_env: Option<String>,
    mcp_allowed_hosts: Option<Vec<String>>,
    mcp_allowed_origins: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_turn_ms: Option<i64>,
    max_input_keys: Option<i64>,
    replays_per_minute: Option<i64>,
    replay_burst: Option<i64>,
}

pub(super) fn check_server(problems: &mut Problems, raw: RawServer) -> Option<ServerSettings> {
    let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen = listen_text.parse::<SocketAddr>().map_err(|_| {
        problems.add(
            "server.listen",
            format!(
                "{listen_text:?} is not a socket address: write IP:PORT, e.g. \"127.0.0.1:8080\""
            ),
        )
    });
    let (lo, hi) = MAX_BODY_BYTES_RANGE;
    let max_body_bytes = problems.int_in(
        "server.max_body_bytes",
        raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
        lo..=hi,
    );
    let (lo, hi) = SHUTDOWN_GRACE_RANGE;
    let grace = problems.int_in(
        "server.shutdown_grace_ms",
        raw.shutdown_grace_ms.unwrap_or(DEFAULT_SHUTDOWN_GRACE_MS),
        lo..=hi,
    );
    let mcp_access = check_mcp_access(
        problems,
        raw.mcp_allowed_hosts.as_deref(),
        raw.mcp_allowed_origins.as_deref(),
    );
    let mut millis = |key: &str, value: Option<i64>, default: i64, (lo, hi): (i64, i64)| {
        problems
            .int_in(&format!("server.{key}"), value.unwrap_or(default), lo..=hi)
            .map(|ms| Duration::from_millis(ms as u64))
    };
    let header_timeout = millis(
        "header_timeout_ms",
        raw.header_timeout_ms,
        DEFAULT_HEADER_TIMEOUT_MS,
        REQUEST_TIMEOUT_RANGE,
    );
    let body_timeout = millis(
        "body_timeout_ms",
        raw.body_timeout_ms,
        DEFAULT_BODY_TIMEOUT_MS,
        REQUEST_TIMEOUT_RANGE,
    );
    let keep_alive = millis(
        "keep_alive_ms",
        raw.keep_alive_ms,
        DEFAULT_KEEP_ALIVE_MS,
        REQUEST_TIMEOUT_RANGE,
    );
    let shutdown_grace = Duration::from_millis(grace? as u64);
    // Unset, the quiet period never takes more than half of a short grace period.
    let default_quiet = DEFAULT_DRAIN_QUIET_MS.min(shutdown_grace.as_millis() as i64 / 2);
    let drain_quiet = millis(
        "drain_quiet_ms",
        raw.drain_quiet_ms,
        default_quiet,
        DRAIN_QUIET_RANGE,
    )?;
    if drain_quiet >= shutdown_grace {
        problems.add(
            "server.drain_quiet_ms",
            format!(
                "{} must be less than server.shutdown_grace_ms ({}): the grace period bounds the drain",
                drain_quiet.as_millis(),
                shutdown_grace.as_millis()
            ),
        );
        return None;
    }
    let admin_key = check_admin_key(problems, &raw)?;
    Some(ServerSettings {
        listen: listen.ok()?,
        max_body_bytes: max_body_bytes? as usize,
        shutdown_grace,
        header_timeout: header_timeout?,
        body_timeout: body_timeout?,
        keep_alive: keep_alive?,
        drain_quiet,
        admin_key,
        mcp_access: mcp_access?,
    })
}

/// `admin_key_sha256` (hex SHA-256 of the key) or `admin_key_env` (the env var holding
/// it), at most one; neither is no admin key. `None` once a problem is recorded.
fn check_admin_key(problems: &mut Problems, raw: &RawServer) -> Option<Option<ApiKey>> {
    match (&raw.admin_key_sha256, &raw.admin_key_env) {
        (None, None) => Some(None),
        (Some(_), Some(_)) => {
            problems.add(
                "server",
                "set at most one of admin_key_sha256 and admin_key_env, not both",
            );
            None
        }
        (None, Some(name)) => problems
            .env_name("server.admin_key_env", name)
            .then(|| Some(ApiKey::Env(name.clone()))),
        (Some(text), None) => {
            let mut hash = [0u8; 32];
            if text.len() != 64 || hex::decode_to_slice(text, &mut hash).is_err() {
                problems.add(
                    "server.admin_key_sha256",
                    "must be 64 hexadecimal characters (the SHA-256 of the admin key)",
                );
                return None;
            }
            Some(Some(ApiKey::Sha256(hash)))
        }
    }
}

/// `[limits]`: the turn deadline cap, the input keys a request may carry, and the
/// per-tenant replay rate.
pub(super) fn check_limits(problems: &mut Problems, raw: RawLimits) -> Option<Limits> {
    let mut int = |key: &str, value: Option<i64>, default: i64, (lo, hi): (i64, i64)| {
        problems.int_in(&format!("limits.{key}"), value.unwrap_or(default), lo..=hi)
    };
    let max_turn_ms = int(
        "max_turn_ms",
        raw.max_turn_ms,
        DEFAULT_MAX_TURN_MS,
        MAX_TURN_RANGE,
    );
    let max_input_keys = int(
        "max_input_keys",
        raw.max_input_keys,
        DEFAULT_MAX_INPUT_KEYS,
        MAX_INPUT_KEYS_RANGE,
    );
    let replays_per_minute = int(
        "replays_per_minute",
        raw.replays_per_minute,
        DEFAULT_REPLAYS_PER_MINUTE,
        REPLAYS_PER_MINUTE_RANGE,
    );
    let replay_burst = int(
        "replay_burst",
        raw.replay_burst,
        DEFAULT_REPLAY_BURST,
        REPLAY_BURST_RANGE,
    );
    Some(Limits {
        max_turn: Duration::from_millis(max_turn_ms? as u64),
        max_input_keys: max_input_keys? as usize,
        replays_per_minute: replays_per_minute? as u32,
        replay_burst: replay_burst? as u32,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{ApiKey, EnvVars, ServerConfig};
    use sha2::{Digest, Sha256};
    use std::path::Path;

    const TENANT: &str = "[[tenants]]\nid = \"demo\"\napi_key_env = \"DEMO_KEY\"\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n";

    fn parse(server: &str) -> Result<ServerConfig, crate::config::ConfigErrors> {
        ServerConfig::parse(
            &format!("[server]\n{server}\n{TENANT}"),
            Path::new("/etc/ctxd"),
        )
    }

    #[test]
    fn the_admin_key_is_a_hash_or_an_env_var_name_and_optional() {
        assert_eq!(parse("").unwrap().server.admin_key, None);
        let hash: [u8; 32] = Sha256::digest(b"admin-key").into();
        let by_hash = parse(&format!("admin_key_sha256 = {:?}", hex::encode(hash))).unwrap();
        assert_eq!(by_hash.server.admin_key, Some(ApiKey::Sha256(hash)));
        let by_env = parse("admin_key_env = \"CTXD_ADMIN_KEY\"").unwrap();
        assert_eq!(
            by_env.server.admin_key,
            Some(ApiKey::Env("CTXD_ADMIN_KEY".to_owned()))
        );
        let cases = [
            (
                "admin_key_sha256 = \"abc\"",
                "server.admin_key_sha256",
                "64 hexadecimal",
            ),
            ("admin_key_env = \"ADMIN-KEY\"", "server.admin_key_env", ""),
            (
                "admin_key_env = \"A\"\nadmin_key_sha256 = \"00\"",
                "server",
                "at most one",
            ),
            ("admin_key = \"inline\"", "server.admin_key", ""),
        ];
        for (line, path, needle) in cases {
            let errors = parse(line).expect_err(line);
            assert!(
                errors
                    .errors
                    .iter()
                    .any(|e| e.path == path && e.message.contains(needle)),
                "{line}: {path} {needle:?} in\n{errors}"
            );
        }
    }

    #[test]
    fn an_admin_key_equal_to_a_tenant_key_is_refused_naming_the_field() {
        let hash = |key: &str| hex::encode(Sha256::digest(key.as_bytes()));
        let tenant = |key_line: &str| {
            format!(
                "[[tenants]]\nid = \"demo\"\n{key_line}\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n"
            )
        };
        let parse_with = |server: &str, tenant: &str| {
            ServerConfig::parse(
                &format!("[server]\n{server}\n{tenant}"),
                Path::new("/etc/ctxd"),
            )
        };
        // Two hashes: at load.
        let errors = parse_with(
            &format!("admin_key_sha256 = {:?}", hash("shared-key")),
            &tenant(&format!(
                "api_key_sha256 = {:?}",
                hash("shared-key").to_uppercase()
            )),
        )
        .unwrap_err();
        assert!(
            errors
                .errors
                .iter()
                .any(|e| e.path == "server.admin_key_sha256"
                    && e.message.contains("is the API key of tenant \"demo\"")),
            "{errors}"
        );
        parse_with(
            &format!("admin_key_sha256 = {:?}", hash("admin-key")),
            &tenant(&format!("api_key_sha256 = {:?}", hash("shared-key"))),
        )
        .unwrap();
        // A key from the environment: when the environment is read.
        let env = |pairs: &[(&str, &str)]| {
            let mut all = vec![("CTXD_DIGEST_KEY", "k")];
            all.extend_from_slice(pairs);
            all.into_iter().collect::<EnvVars>()
        };
        let cases = [
            (
                "admin_key_env = \"CTXD_ADMIN_KEY\"".to_owned(),
                "api_key_env = \"DEMO_KEY\"".to_owned(),
                "server.admin_key_env",
            ),
            (
                "admin_key_env = \"CTXD_ADMIN_KEY\"".to_owned(),
                format!("api_key_sha256 = {:?}", hash("shared-key")),
                "server.admin_key_env",
            ),
            (
                format!("admin_key_sha256 = {:?}", hash("shared-key")),
                "api_key_env = \"DEMO_KEY\"".to_owned(),
                "server.admin_key_sha256",
            ),
        ];
        for (server, key_line, path) in cases {
            let config = parse_with(&server, &tenant(&key_line)).unwrap();
            let shared = env(&[("CTXD_ADMIN_KEY", "shared-key"), ("DEMO_KEY", "shared-key")]);
            let problems = config.environment_problems(&shared);
            assert_eq!(problems.len(), 1, "{server}: {problems:?}");
            assert_eq!(problems[0].problem.path, path);
            assert!(
                problems[0]
                    .problem
                    .message
                    .contains("must differ from every tenant's key"),
                "{problems:?}"
            );
            assert!(!format!("{problems:?}").contains("shared-key"));
            let apart = env(&[("CTXD_ADMIN_KEY", "admin-key"), ("DEMO_KEY", "demo-key")]);
            assert!(config.environment_problems(&apart).is_empty(), "{server}");
        }
    }

    #[test]
    fn an_admin_key_env_var_must_be_set_and_is_never_shown() {
        let config = parse("admin_key_env = \"CTXD_ADMIN_KEY\"").unwrap();
        let env = |pairs: &[(&str, &str)]| pairs.iter().copied().collect::<EnvVars>();
        let base = [("DEMO_KEY", "demo-key-value"), ("CTXD_DIGEST_KEY", "k")];
        let problems = config.environment_problems(&env(&base));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].problem.path, "server.admin_key_env");
        assert!(problems[0].problem.message.contains("holds the admin key"));
        let mut set = base.to_vec();
        set.push(("CTXD_ADMIN_KEY", "admin-key-value"));
        assert!(config.environment_problems(&env(&set)).is_empty());
        let mut empty = base.to_vec();
        empty.push(("CTXD_ADMIN_KEY", ""));
        let problems = config.environment_problems(&env(&empty));
        assert!(problems[0].problem.message.contains("is empty"));
        assert!(!format!("{problems:?}").contains("admin-key-value"));
    }
}
