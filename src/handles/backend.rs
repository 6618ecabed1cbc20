//! Where handles live — this process's memory (the default) or a Redis shared by every
//! replica (`[handles] store`) — behind one [`HandleStore`], so the kernel's sink, the
//! attempts and the API's routes do not care which.
//!
//! Both stores keep the same rules (TTL, shares with LRU eviction, tombstones, tenant
//! scoping, per-handle sequences); only Redis can be unreachable, which every call
//! reports as a [`StoreUnavailable`](super::StoreUnavailable) (the API's `503 RUNTIME_UNAVAILABLE`).

use super::error::StoreUnavailable;
use super::redis_store::{RedisSettings, RedisStore};
use super::store::{Attempt, MemoryStore};
use super::{Capabilities, HandleError, HandleMaterial, HandleSettings};
use crate::config::EnvVars;
use crate::contract::HandleRef;
use std::sync::Arc;
use std::time::Instant;

/// `[handles] store`: which store, and for Redis how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum HandleBackend {
    /// In this process: handles are not shared between replicas.
    #[default]
    Memory,
    /// In a Redis every replica shares.
    Redis(RedisSettings),
}

/// What `/readyz` shows of the store: only a Redis can be unreachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreHealth {
    pub(crate) backend: &'static str,
    /// `None` when reachable, else why not.
    pub(crate) problem: Option<String>,
}

/// The handle store of this process.
#[derive(Debug)]
pub(crate) enum HandleStore {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl HandleStore {
    pub(crate) fn memory(settings: HandleSettings) -> HandleStore {
        HandleStore::Memory(MemoryStore::new(settings))
    }

    /// The store `backend` names; for Redis, connected (its password read from `env`)
    /// on the calling runtime, which keeps the connection's I/O and reconnections.
    pub(crate) async fn open(
        backend: &HandleBackend,
        settings: HandleSettings,
        env: &EnvVars,
    ) -> Result<HandleStore, StoreUnavailable> {
        match backend {
            HandleBackend::Memory => Ok(HandleStore::memory(settings)),
            HandleBackend::Redis(redis) => {
                let password = match &redis.password_env {
                    Some(name) => {
                        Some(env.get(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                            StoreUnavailable::new(format!(
                                "handles.password_env: the environment variable {name} is not set"
                            ))
                        })?)
                    }
                    None => None,
                };
                super::HandleOperationFinished::zero_for_every_operation();
                RedisStore::connect(settings, redis.clone(), password)
                    .await
                    .map(HandleStore::Redis)
            }
        }
    }

    pub(crate) fn settings(&self) -> &HandleSettings {
        match self {
            HandleStore::Memory(store) => store.settings(),
            HandleStore::Redis(store) => store.settings(),
        }
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        match self {
            HandleStore::Memory(store) => store.capabilities(),
            HandleStore::Redis(store) => store.capabilities(),
        }
    }

    /// The most material one tenant holds (`max_tenant_bytes`).
    pub(crate) fn tenant_cap(&self) -> usize {
        self.settings().max_tenant_bytes
    }

    /// Registers material under `id` for `tenant`; the outer error is the store being
    /// unreachable, the inner one a refusal (too large, id taken).
    pub(crate) async fn register_as(
        &self,
        tenant: &str,
        id: &str,
        material: HandleMaterial,
    ) -> Result<Result<HandleRef, HandleError>, StoreUnavailable> {
        match self {
            HandleStore::Memory(store) => {
                Ok(store.register_as(tenant, id, material, Instant::now()))
            }
            HandleStore::Redis(store) => store.register_as(tenant, id, &material).await,
        }
    }

    /// Starts an operation on `id`: its material and sequence number, or why not.
    pub(crate) async fn begin(
        &self,
        tenant: &str,
        id: &str,
        version: Option<u64>,
        now: Instant,
    ) -> Result<Attempt<Arc<HandleMaterial>>, StoreUnavailable> {
        match self {
            HandleStore::Memory(store) => Ok(store.begin(tenant, id, version, now)),
            HandleStore::Redis(store) => store.begin(tenant, id, version).await,
        }
    }

    /// Deletes `id`, leaving a tombstone.
    pub(crate) async fn delete(
        &self,
        tenant: &str,
        id: &str,
        now: Instant,
    ) -> Result<Attempt<()>, StoreUnavailable> {
        match self {
            HandleStore::Memory(store) => Ok(store.delete(tenant, id, now)),
            HandleStore::Redis(store) => store.delete(tenant, id).await,
        }
    }

    /// Whether the tenant holds `id`, live or as a tombstone.
    pub(crate) async fn is_known(&self, tenant: &str, id: &str) -> Result<bool, StoreUnavailable> {
        match self {
            HandleStore::Memory(store) => Ok(store.is_known(tenant, id)),
            HandleStore::Redis(store) => store.is_known(tenant, id).await,
        }
    }

    /// Whether the store answers (a `PING` for Redis).
    pub(crate) async fn health(&self) -> StoreHealth {
        match self {
            HandleStore::Memory(_) => StoreHealth {
                backend: "memory",
                problem: None,
            },
            HandleStore::Redis(store) => StoreHealth {
                backend: "redis",
                problem: store.ping().await.err().map(|e| e.to_string()),
            },
        }
    }
}
