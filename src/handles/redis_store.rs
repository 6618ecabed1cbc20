//! The Redis-backed handle store: the same semantics as the in-memory store (TTL, each
//! tenant's share with LRU eviction inside it, tombstones, tenant scoping, per-handle
//! monotonic sequences), kept in one Redis shared by every replica.
//!
//! - **Tombstones per tenant.** A burial forgets the oldest tombstones of its own
//!   tenant beyond the tenant's share (`max_tenant_tombstones`), never another's.
//! - **Atomic by construction.** Every state change is one Lua script
//!   (`redis_store/*.lua`, sharing `prelude.lua`): a registration checks room, evicts
//!   and inserts with the byte counters; an operation sweeps, resolves the handle, takes
//!   its next sequence number (`HINCRBY` in the script) and marks the use; a delete
//!   buries. Rust never reads a value to write it back, so two replicas cannot race.
//! - **One clock.** Expiry and tombstone ages read Redis' `TIME`, never a replica's.
//! - **Keys** are derived from the key prefix, the tenant and the handle id only (see
//!   [`key_layout`]); material is a value, never part of a key.
//! - **Failures.** A Redis that cannot be reached, answers late or refuses is a
//!   [`StoreUnavailable`]: the API answers `503 RUNTIME_UNAVAILABLE`, never a panic,
//!   and the message names the server, never the password.
//! - **Owner.** One [`RedisStore`] per process, in the `Registry`. Its
//!   `ConnectionManager` is created on the runtime that starts the topology, which also
//!   runs its reconnections; clones multiplex one connection.

use super::error::{StaleReason, StoreUnavailable};
use super::store::{Attempt, VERSION};
use super::{Capabilities, HandleError, HandleMaterial, HandleSettings};
use crate::contract::{HandleRef, Item};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Script, Value};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

const PRELUDE: &str = include_str!("redis_store/prelude.lua");
const REGISTER: &str = include_str!("redis_store/register.lua");
const BEGIN: &str = include_str!("redis_store/begin.lua");
const DELETE: &str = include_str!("redis_store/delete.lua");

/// Where and how to reach Redis (`[handles]` with `store = "redis"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedisSettings {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) db: i64,
    /// The env var holding the password (`password_env`); the password itself is never
    /// in the config.
    pub(crate) password_env: Option<String>,
    /// Every key starts with it (`key_prefix`), so replicas of one deployment share
    /// handles and other deployments on the same Redis do not.
    pub(crate) key_prefix: String,
    /// How long a tombstone is kept after its handle was deleted, expired or evicted.
    pub(crate) tombstone_ttl: Duration,
    /// Bound on connecting and on each command's answer.
    pub(crate) timeout: Duration,
}

impl RedisSettings {
    /// `host:port/db`, for messages: never a password.
    pub(crate) fn server(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.db)
    }
}

/// The key layout, `{prefix}:…`, for the docs and for tests that scan the key space.
/// Tenant ids and handle ids contain no `:`, so every key parses back unambiguously.
pub(crate) mod key_layout {
    /// The part after the prefix that says what a key holds. A prefix with one of these
    /// after a `:` (`P:bytes`) would nest in the keys of another deployment's prefix
    /// (`P`'s `P:bytes:{tenant}`), so the config refuses it.
    pub(crate) const KINDS: &[&str] = &[
        "h",
        "m",
        "lru",
        "bytes",
        "tombs",
        "total",
        "expiry",
        "tombstones",
        "clock",
    ];

    /// A handle's record (hash: version, bytes, expires, seq, state), live or tombstone.
    pub(crate) fn record(prefix: &str, tenant: &str, id: &str) -> String {
        format!("{prefix}:h:{tenant}:{id}")
    }
    /// A live handle's material (string, expires with the handle).
    #[cfg(test)]
    pub(crate) fn material(prefix: &str, tenant: &str, id: &str) -> String {
        format!("{prefix}:m:{tenant}:{id}")
    }
    /// A tenant's live handles by last use (sorted set): the eviction order.
    #[cfg(test)]
    pub(crate) fn lru(prefix: &str, tenant: &str) -> String {
        format!("{prefix}:lru:{tenant}")
    }
    /// Bytes of a tenant's live handles.
    #[cfg(test)]
    pub(crate) fn tenant_bytes(prefix: &str, tenant: &str) -> String {
        format!("{prefix}:bytes:{tenant}")
    }
    /// A tenant's tombstones by burial time (sorted set of ids): forgetting by count,
    /// within the tenant's share.
    #[cfg(test)]
    pub(crate) fn tenant_tombstones(prefix: &str, tenant: &str) -> String {
        format!("{prefix}:tombs:{tenant}")
    }
    /// Bytes of every live handle, `{prefix}:total`; live handles by expiry,
    /// `{prefix}:expiry`; tombstones by burial time, `{prefix}:tombstones`; the LRU
    /// clock, `{prefix}:clock`.
    #[cfg(test)]
    pub(crate) const SHARED: &[&str] = &["total", "expiry", "tombstones", "clock"];
}

/// The material as stored: the same JSON whichever replica wrote it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum StoredMaterial {
    Text(String),
    Items(Vec<Item>),
}

fn encode_material(material: &HandleMaterial) -> Vec<u8> {
    let stored = match material {
        HandleMaterial::Text(text) => StoredMaterial::Text(text.clone()),
        HandleMaterial::Items(items) => StoredMaterial::Items(items.clone()),
    };
    serde_json::to_vec(&stored).unwrap_or_default()
}

fn decode_material(bytes: &[u8]) -> Option<HandleMaterial> {
    Some(match serde_json::from_slice(bytes).ok()? {
        StoredMaterial::Text(text) => HandleMaterial::Text(text),
        StoredMaterial::Items(items) => HandleMaterial::Items(items),
    })
}

/// What a script answered, parsed (pure, so tested without Redis).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Ok,
    Taken,
    TooLarge {
        room: u64,
    },
    Unknown,
    Gone {
        sequence: u64,
        version: u64,
        reason: StaleReason,
    },
    WrongVersion {
        sequence: u64,
        version: u64,
    },
    Live {
        sequence: u64,
        version: u64,
        material: Vec<u8>,
    },
    Deleted {
        sequence: u64,
        version: u64,
    },
}

fn text_of(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.as_bytes()),
        _ => None,
    }
}

fn number_of(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => std::str::from_utf8(text_of(other)?).ok()?.parse().ok(),
    }
}

fn reason_of(value: &Value) -> Option<StaleReason> {
    match text_of(value)? {
        b"deleted" => Some(StaleReason::Deleted),
        b"expired" => Some(StaleReason::Expired),
        b"evicted" => Some(StaleReason::Evicted),
        _ => None,
    }
}

fn parse_reply(value: &Value) -> Option<Reply> {
    let Value::Array(parts) = value else {
        return None;
    };
    let tag = text_of(parts.first()?)?;
    let number = |i: usize| parts.get(i).and_then(number_of);
    Some(match tag {
        b"ok" => Reply::Ok,
        b"taken" => Reply::Taken,
        b"too_large" => Reply::TooLarge { room: number(1)? },
        b"unknown" => Reply::Unknown,
        b"gone" => Reply::Gone {
            sequence: number(1)?,
            version: number(2)?,
            reason: reason_of(parts.get(3)?)?,
        },
        b"wrong_version" => Reply::WrongVersion {
            sequence: number(1)?,
            version: number(2)?,
        },
        b"live" => Reply::Live {
            sequence: number(1)?,
            version: number(2)?,
            material: text_of(parts.get(3)?)?.to_vec(),
        },
        b"deleted" => Reply::Deleted {
            sequence: number(1)?,
            version: number(2)?,
        },
        _ => return None,
    })
}

fn stale(id: &str, reason: StaleReason, requested: Option<u64>, version: u64) -> HandleError {
    HandleError::StaleHandle {
        id: id.to_owned(),
        reason,
        requested,
        version,
    }
}

/// The store. `Send + Sync`; shared by every worker through the `Registry`.
pub(crate) struct RedisStore {
    settings: HandleSettings,
    redis: RedisSettings,
    connection: ConnectionManager,
    register: Script,
    begin: Script,
    delete: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.redis.server())
            .field("key_prefix", &self.redis.key_prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects (bounded by the settings' timeout) and checks the server answers. Run on
    /// the runtime that should own the connection's I/O and reconnections.
    pub(crate) async fn connect(
        settings: HandleSettings,
        redis: RedisSettings,
        password: Option<&str>,
    ) -> Result<RedisStore, StoreUnavailable> {
        let mut info = RedisConnectionInfo::default().set_db(redis.db);
        if let Some(password) = password {
            info = info.set_password(password);
        }
        let server = redis.server();
        let connection_info = ConnectionAddr::Tcp(redis.host.clone(), redis.port)
            .into_connection_info()
            .map(|connection| connection.set_redis_settings(info))
            .map_err(|error| unavailable(&server, &error))?;
        let client =
            redis::Client::open(connection_info).map_err(|error| unavailable(&server, &error))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(redis.timeout))
            .set_response_timeout(Some(redis.timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let connection = tokio::time::timeout(
            redis.timeout * 4,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| StoreUnavailable::new(format!("the handle store at {server} did not answer")))?
        .map_err(|error| unavailable(&server, &error))?;
        let store = RedisStore {
            settings,
            redis,
            connection,
            register: Script::new(&format!("{PRELUDE}\n{REGISTER}")),
            begin: Script::new(&format!("{PRELUDE}\n{BEGIN}")),
            delete: Script::new(&format!("{PRELUDE}\n{DELETE}")),
        };
        store.ping().await?;
        Ok(store)
    }

    pub(crate) fn settings(&self) -> &HandleSettings {
        &self.settings
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        Capabilities {
            backend: "redis",
            ..Capabilities::DECLARED
        }
    }

    /// `host:port/db` of the server, for messages.
    pub(crate) fn server(&self) -> String {
        self.redis.server()
    }

    /// Runs `script` with the prelude's arguments and `extra`.
    async fn run(
        &self,
        script: &Script,
        tenant: &str,
        id: &str,
        extra: &[&[u8]],
    ) -> Result<Reply, StoreUnavailable> {
        let mut invocation = script.prepare_invoke();
        invocation
            .arg(&self.redis.key_prefix)
            .arg(self.redis.tombstone_ttl.as_millis() as u64)
            .arg(self.settings.max_tenant_tombstones as u64)
            .arg(tenant)
            .arg(id);
        for value in extra {
            invocation.arg(*value);
        }
        let mut connection = self.connection.clone();
        let value: Value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(|error| unavailable(&self.server(), &error))?;
        parse_reply(&value).ok_or_else(|| {
            tracing::error!(server = %self.server(), "the handle store answered a script with something unexpected");
            StoreUnavailable::new(format!(
                "the handle store at {} answered unexpectedly",
                self.server()
            ))
        })
    }

    /// Registers material under `id` (see `MemoryStore::register_as`); the outer error
    /// is the store being unreachable.
    pub(crate) async fn register_as(
        &self,
        tenant: &str,
        id: &str,
        material: &HandleMaterial,
    ) -> Result<Result<HandleRef, HandleError>, StoreUnavailable> {
        let bytes = material.bytes();
        let cap = self.settings.max_tenant_bytes;
        if bytes > cap {
            return Ok(Err(HandleError::MaterialTooLarge { bytes, cap }));
        }
        let encoded = encode_material(material);
        let ttl_ms = (self.settings.ttl.as_millis() as u64).max(1).to_string();
        let (bytes_arg, cap_arg, total_arg) = (
            bytes.to_string(),
            cap.to_string(),
            self.settings.max_total_bytes.to_string(),
        );
        let extra: [&[u8]; 5] = [
            &encoded,
            bytes_arg.as_bytes(),
            ttl_ms.as_bytes(),
            cap_arg.as_bytes(),
            total_arg.as_bytes(),
        ];
        Ok(match self.run(&self.register, tenant, id, &extra).await? {
            Reply::Ok => Ok(HandleRef {
                id: id.to_owned(),
                version: VERSION,
            }),
            Reply::TooLarge { room } => Err(HandleError::MaterialTooLarge {
                bytes,
                cap: room as usize,
            }),
            _ => Err(HandleError::InvalidArgument {
                field: None,
                message: "the handle id is already taken".to_owned(),
            }),
        })
    }

    /// Starts an operation (see `MemoryStore::begin`).
    pub(crate) async fn begin(
        &self,
        tenant: &str,
        id: &str,
        version: Option<u64>,
    ) -> Result<Attempt<Arc<HandleMaterial>>, StoreUnavailable> {
        let requested = version.map(|v| v.to_string()).unwrap_or_default();
        let reply = self
            .run(&self.begin, tenant, id, &[requested.as_bytes()])
            .await?;
        Ok(match reply {
            Reply::Live {
                sequence,
                version: current,
                material,
            } => {
                let outcome = decode_material(&material).map(Arc::new).ok_or_else(|| {
                    tracing::error!(server = %self.server(), "a handle's material in the store does not parse");
                    stale(id, StaleReason::Expired, version, current)
                });
                Attempt::Held {
                    sequence,
                    version: current,
                    outcome,
                }
            }
            reply => self.answer(reply, id, version),
        })
    }

    /// Deletes a handle, leaving a tombstone (see `MemoryStore::delete`).
    pub(crate) async fn delete(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Attempt<()>, StoreUnavailable> {
        Ok(match self.run(&self.delete, tenant, id, &[]).await? {
            Reply::Deleted { sequence, version } => Attempt::Held {
                sequence,
                version,
                outcome: Ok(()),
            },
            reply => self.answer(reply, id, None),
        })
    }

    /// The attempt for a reply that carries no material.
    fn answer<T>(&self, reply: Reply, id: &str, requested: Option<u64>) -> Attempt<T> {
        match reply {
            Reply::Gone {
                sequence,
                version,
                reason,
            } => Attempt::Held {
                sequence,
                version,
                outcome: Err(stale(id, reason, requested, version)),
            },
            Reply::WrongVersion { sequence, version } => Attempt::Held {
                sequence,
                version,
                outcome: Err(stale(id, StaleReason::WrongVersion, requested, version)),
            },
            _ => Attempt::Unknown,
        }
    }

    /// Whether the tenant holds this id, live or as a tombstone.
    pub(crate) async fn is_known(&self, tenant: &str, id: &str) -> Result<bool, StoreUnavailable> {
        let key = key_layout::record(&self.redis.key_prefix, tenant, id);
        let mut connection = self.connection.clone();
        redis::cmd("EXISTS")
            .arg(key)
            .query_async::<i64>(&mut connection)
            .await
            .map(|n| n > 0)
            .map_err(|error| unavailable(&self.server(), &error))
    }

    /// Whether the server answers `PING`.
    pub(crate) async fn ping(&self) -> Result<(), StoreUnavailable> {
        let mut connection = self.connection.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(|error| unavailable(&self.server(), &error))
    }
}

/// A Redis failure as the API shows it: the server and the failure's category, never
/// the password (the URL is not part of the message either).
fn unavailable(server: &str, error: &redis::RedisError) -> StoreUnavailable {
    let what = if error.is_timeout() {
        "did not answer in time"
    } else if error.is_connection_refusal() || error.is_io_error() {
        "cannot be reached"
    } else if error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        "refused the credentials"
    } else {
        "failed"
    };
    tracing::warn!(
        server,
        category = error.category(),
        code = error.code().unwrap_or(""),
        "handle store {what}"
    );
    StoreUnavailable::new(format!("the handle store at {server} {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn material_round_trips_through_its_stored_json() {
        let item = Item {
            id: "LOG-1".into(),
            title: Some("Log".into()),
            content: "line one\nline two".into(),
            metadata: [("b".to_owned(), json!(2)), ("a".to_owned(), json!("x"))]
                .into_iter()
                .collect::<Map<_, _>>(),
            updated_at: Some("2026-11-30T10:00:00Z".into()),
        };
        for material in [
            HandleMaterial::Text("héllo\r\nworld".into()),
            HandleMaterial::Items(vec![item.clone(), item]),
            HandleMaterial::Items(Vec::new()),
        ] {
            let encoded = encode_material(&material);
            assert_eq!(decode_material(&encoded), Some(material.clone()));
            assert_eq!(
                decode_material(&encoded).unwrap().bytes(),
                material.bytes(),
                "the counted size survives the trip"
            );
        }
        assert_eq!(decode_material(b"{\"file\": \"/etc/passwd\"}"), None);
        assert_eq!(decode_material(b"not json"), None);
    }

    #[test]
    fn script_replies_parse_into_their_cases() {
        let cases = [
            (Value::Array(vec![bulk("ok")]), Some(Reply::Ok)),
            (Value::Array(vec![bulk("taken")]), Some(Reply::Taken)),
            (
                Value::Array(vec![bulk("too_large"), Value::Int(60)]),
                Some(Reply::TooLarge { room: 60 }),
            ),
            (Value::Array(vec![bulk("unknown")]), Some(Reply::Unknown)),
            (
                Value::Array(vec![
                    bulk("gone"),
                    Value::Int(4),
                    Value::Int(1),
                    bulk("evicted"),
                ]),
                Some(Reply::Gone {
                    sequence: 4,
                    version: 1,
                    reason: StaleReason::Evicted,
                }),
            ),
            (
                Value::Array(vec![bulk("wrong_version"), Value::Int(2), Value::Int(1)]),
                Some(Reply::WrongVersion {
                    sequence: 2,
                    version: 1,
                }),
            ),
            (
                Value::Array(vec![bulk("live"), Value::Int(7), Value::Int(1), bulk("{}")]),
                Some(Reply::Live {
                    sequence: 7,
                    version: 1,
                    material: b"{}".to_vec(),
                }),
            ),
            (
                Value::Array(vec![bulk("deleted"), Value::Int(3), Value::Int(1)]),
                Some(Reply::Deleted {
                    sequence: 3,
                    version: 1,
                }),
            ),
            // Malformed answers are never guessed at.
            (
                Value::Array(vec![
                    bulk("gone"),
                    Value::Int(4),
                    Value::Int(1),
                    bulk("live"),
                ]),
                None,
            ),
            (
                Value::Array(vec![
                    bulk("live"),
                    Value::Int(-1),
                    Value::Int(1),
                    bulk("{}"),
                ]),
                None,
            ),
            (Value::Array(vec![bulk("what")]), None),
            (Value::Array(vec![]), None),
            (Value::Nil, None),
        ];
        for (value, expected) in cases {
            assert_eq!(parse_reply(&value), expected, "{value:?}");
        }
    }

    #[test]
    fn keys_hold_only_the_prefix_the_tenant_and_the_id() {
        let id = "h_0123456789abcdef0123456789abcdef";
        assert_eq!(
            key_layout::record("ctxd:handles", "acme", id),
            format!("ctxd:handles:h:acme:{id}")
        );
        assert_eq!(
            key_layout::material("p", "acme", id),
            format!("p:m:acme:{id}")
        );
        assert_eq!(key_layout::lru("p", "acme"), "p:lru:acme");
        assert_eq!(key_layout::tenant_bytes("p", "acme"), "p:bytes:acme");
        assert_eq!(key_layout::tenant_tombstones("p", "acme"), "p:tombs:acme");
        // The scripts build the same keys.
        for fragment in [
            "':h:' .. tenant .. ':' .. id",
            "':m:' .. tenant .. ':' .. id",
            "':lru:' .. tenant",
            "':bytes:' .. tenant",
            "':tombs:' .. tenant",
        ] {
            assert!(PRELUDE.contains(fragment), "{fragment}");
        }
        for shared in key_layout::SHARED {
            assert!(PRELUDE.contains(&format!("':{shared}'")), "{shared}");
        }
        // Every kind of key the scripts build is one the config keeps prefixes from.
        let built = regex::Regex::new(r"P \.\. ':([a-z]+):?'").unwrap();
        let kinds: Vec<&str> = built
            .captures_iter(PRELUDE)
            .map(|found| found.get(1).unwrap().as_str())
            .collect();
        assert_eq!(kinds.len(), key_layout::KINDS.len(), "{kinds:?}");
        for kind in kinds {
            assert!(key_layout::KINDS.contains(&kind), "{kind}");
        }
    }

    #[test]
    fn messages_name_the_server_never_a_password() {
        let settings = RedisSettings {
            host: "10.0.0.5".into(),
            port: 6380,
            db: 2,
            password_env: Some("CTXD_REDIS_PASSWORD".into()),
            key_prefix: "ctxd".into(),
            tombstone_ttl: Duration::from_secs(60),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(settings.server(), "10.0.0.5:6380/2");
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let error = unavailable(&settings.server(), &refused);
        assert_eq!(
            error.to_string(),
            "the handle store at 10.0.0.5:6380/2 cannot be reached"
        );
    }
}
