//! Starting and stopping the runtime: from the resolved deployment (every tenant's
//! Projects and Bindings, refused on a fatal problem), starts one `ProviderActor` per
//! tenant × binding file × provider id (spread over a few arbiters) and, for a tenant
//! with a cached provider, its response cache store (its share of `[cache]`), and
//! shuts down in order — providers stop and pools close only after the HTTP server has
//! finished its in-flight turns. The tenants and their providers are one [`ServedSet`]
//! behind one pointer that a reload (`actors::reloading`) swaps.

use super::provider::{Observe, ProviderActor, ProviderGate, ProviderSnapshot, Shutdown};
use crate::config::Retention;
use crate::config::{EnvVars, ProviderBinding, ServerConfig};
use crate::deployment::{Deployment, DeploymentProblem, ProblemKind, Severity};
use crate::digest::DigestKey;
use crate::project::Project;
use crate::providers::untrusted::UntrustedText;
use crate::reload::{DeploymentShape, ProviderKey};
use crate::resilience::cache::{CacheScope, CacheStore, ProviderCache};
use crate::secrets::redact::SecretHandling;
use crate::telemetry::metrics::CacheMetrics;
use crate::trace::store::{ReaderPool, ReaderPoolSettings};
use crate::trace::upkeep::StoreBounds;
use crate::trace::writer::{self, TraceSender, TraceWriterHandle, WriterSettings};
use actix::prelude::*;
use anyhow::{anyhow, bail};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Where provider answers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The bound providers.
    Live,
    /// The Projects' Context Test fixtures, matched by lookup value (`serve --fixtures`).
    Fixtures,
}

impl Mode {
    /// `live` or `fixtures`, as logs spell it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Fixtures => "fixtures",
        }
    }
}

/// Everything a turn needs to find, shared by every worker.
pub(crate) struct Registry {
    /// The tenants and provider actors serving now. A turn reads it once, when its key
    /// is looked up, and finishes on that set whatever a reload swaps in meanwhile.
    served: RwLock<Arc<ServedSet>>,
    pub(crate) digest_key: DigestKey,
    /// Longest turn deadline.
    pub(crate) max_turn: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) mode: Mode,
    /// Set when shutdown starts: new turns get `503 RUNTIME_UNAVAILABLE`.
    pub(crate) shutting_down: AtomicBool,
    /// The trace writer's queue.
    pub(crate) traces: TraceSender,
    /// Longest wait for room in the trace queue before a turn is refused with 503.
    pub(crate) trace_wait: Duration,
    /// Read-only connections to the trace store, checked out per trace request; bounded,
    /// so a burst of searches cannot open a connection each.
    pub(crate) trace_readers: ReaderPool,
    /// Material kept behind handles, shared by every worker (`[handles]` in the config).
    pub(crate) handles: Arc<crate::handles::HandleStore>,
}

/// The tenants served, with their projects and provider handles, and every provider
/// actor of them: what a reload replaces as a whole.
pub(crate) struct ServedSet {
    pub(crate) tenants: Vec<Arc<TenantRuntime>>,
    /// Every provider actor of this set, for `/readyz`.
    pub(crate) providers: Vec<Addr<ProviderActor>>,
}

pub(crate) struct TenantRuntime {
    pub(crate) id: String,
    /// SHA-256 of the tenant's API key.
    pub(crate) key_sha256: [u8; 32],
    pub(crate) max_in_flight: usize,
    /// Turns of this tenant in flight; bounded by `max_in_flight` (429 beyond). Shared
    /// with the tenant's runtime in the set a reload swaps in, so the bound holds across
    /// the swap.
    pub(crate) in_flight: Arc<AtomicUsize>,
    pub(crate) projects: BTreeMap<String, Arc<ProjectRuntime>>,
}

pub(crate) struct ProjectRuntime {
    pub(crate) project: Project,
    /// The Build's JSON, recorded once in the trace store so replays run the same build.
    pub(crate) build_json: String,
    /// Whether this process has already handed the Build to the trace writer.
    pub(crate) build_recorded: AtomicBool,
    /// `(revision, digest)` of the Deployment Binding (live mode).
    pub(crate) binding: Option<(String, String)>,
    /// Bound providers by id.
    pub(crate) providers: HashMap<String, ProviderHandle>,
}

#[derive(Clone)]
pub(crate) struct ProviderHandle {
    pub(crate) addr: Addr<ProviderActor>,
    /// Admission (permits, breaker) on the caller's thread.
    pub(crate) gate: Arc<ProviderGate>,
    pub(crate) type_name: &'static str,
    /// What traces keep of this provider's items, and for how long.
    pub(crate) retention: Retention,
    pub(crate) retention_ttl: Duration,
    /// What a secret in an answer's items gives (the binding's `secrets`).
    pub(crate) secrets: SecretHandling,
    /// The binding's response cache (`cache.ttl`), in its tenant's store.
    pub(crate) cache: Option<ProviderCache>,
}

/// What start-up and every reload leave for the next reload to compare and reuse.
pub(crate) struct Running {
    pub(super) mode: Mode,
    /// The running deployment as a reload compares it.
    pub(super) shape: DeploymentShape,
    /// Every running provider by place.
    pub(super) handles: BTreeMap<ProviderKey, ProviderHandle>,
    /// Each tenant's response cache store, created with its first cached provider; kept
    /// while the tenant is, so a kept provider keeps its answers and a new one shares
    /// the tenant's bound.
    pub(super) caches: HashMap<String, Option<(CacheStore, Arc<CacheMetrics>)>>,
    /// Each tenant's in-flight counter, carried into the next set.
    pub(super) in_flight: HashMap<String, Arc<AtomicUsize>>,
    /// Providers a reload replaced or removed, stopped once their turns are done; the
    /// ordered shutdown stops any still waiting.
    pub(super) retiring: Vec<Addr<super::ProviderActor>>,
    /// Round robin over the provider arbiters.
    pub(super) next_arbiter: usize,
}

impl Running {
    pub(super) fn new(mode: Mode) -> Running {
        Running {
            mode,
            shape: DeploymentShape::default(),
            handles: BTreeMap::new(),
            caches: HashMap::new(),
            in_flight: HashMap::new(),
            retiring: Vec::new(),
            next_arbiter: 0,
        }
    }
}

/// The running runtime: the registry and what must be stopped.
pub(crate) struct Topology {
    pub(super) registry: Arc<Registry>,
    /// What a reload compares against and reuses: the running providers by place.
    pub(super) running: Running,
    pub(super) arbiters: Vec<Arbiter>,
    writer: TraceWriterHandle,
}

/// Provider actors are spread over this many arbiters. They only grant permits, so
/// a few threads are plenty; the I/O runs on the callers' threads.
const PROVIDER_ARBITERS: usize = 2;

impl Topology {
    /// Loads and starts everything. Must run inside an actix `System`.
    pub(crate) async fn start(
        config: &ServerConfig,
        env: &EnvVars,
        mode: Mode,
    ) -> anyhow::Result<Topology> {
        let deployment = Deployment::resolve(config, env);
        let environment: Vec<String> = deployment
            .problems
            .iter()
            .filter(|p| p.kind.is_environment())
            .map(ToString::to_string)
            .collect();
        if !environment.is_empty() {
            bail!(
                "the environment is not ready:\n  {}",
                environment.join("\n  ")
            );
        }
        // Before anything is started: a Redis that cannot be reached refuses the start.
        let handles = crate::handles::HandleStore::open(&config.handle_store, config.handles, env)
            .await
            .map_err(|e| anyhow!("the handle store cannot be used: {e}"))?;
        let store = config
            .trace
            .store_target(env)
            .map_err(|problem| anyhow!("{problem}"))?;
        let digest_key = config.trace.digest_key_source().resolve(env)?;
        let settings = WriterSettings {
            queue_capacity: config.trace.queue_capacity,
            batch_size: config.trace.batch_size,
            batch_delay: config.trace.batch_delay,
            keeping: config.record_keeping(),
            bounds: StoreBounds {
                max_store_bytes: config.trace.max_store_bytes,
                min_free_bytes: config.trace.min_free_bytes,
            },
            ..WriterSettings::default()
        };
        let (traces, writer) =
            writer::spawn_on(&store, &digest_key, settings).map_err(|e| anyhow!("{e}"))?;
        refuse_or_warn(config, &deployment, mode)?;

        let arbiters: Vec<Arbiter> = (0..PROVIDER_ARBITERS).map(|_| Arbiter::new()).collect();
        let mut running = Running::new(mode);
        let shape = running.shape_of(config, &deployment);
        let built = running
            .build(
                config,
                deployment,
                env,
                &arbiters,
                &digest_key,
                &BTreeMap::new(),
            )
            .await
            .map_err(|problems| anyhow!("{}", problems.join("\n")))?;
        running.shape = shape;
        running.handles = built.handles;
        Ok(Topology {
            registry: Arc::new(Registry {
                served: RwLock::new(Arc::new(built.set)),
                // Before `digest_key` moves into the registry.
                trace_readers: ReaderPool::on(
                    &store,
                    Some(&digest_key),
                    ReaderPoolSettings::default(),
                ),
                digest_key,
                max_turn: config.limits.max_turn,
                max_body_bytes: config.server.max_body_bytes,
                mode,
                shutting_down: AtomicBool::new(false),
                traces,
                trace_wait: config.trace.backpressure_wait,
                handles: Arc::new(handles),
            }),
            running,
            arbiters,
            writer,
        })
    }

    pub(crate) fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Snapshots of every provider actor, for `/readyz` and tests.
    pub(crate) async fn observe(providers: &[Addr<ProviderActor>]) -> Vec<ProviderSnapshot> {
        let mut snapshots = Vec::with_capacity(providers.len());
        for addr in providers {
            if let Ok(snapshot) = addr.send(Observe).await {
                snapshots.push(snapshot);
            }
        }
        snapshots
    }

    /// Stops providers (closing their pools), then their arbiters, then flushes and stops
    /// the trace writer — last, so every answered turn's trace is committed. Call after
    /// the HTTP server has stopped, so no turn is still running.
    pub(crate) async fn shutdown(self) -> anyhow::Result<()> {
        let serving = self.registry.served().providers.clone();
        // An actor a reload retired may still be waiting for its last turns.
        for addr in serving.iter().chain(&self.running.retiring) {
            let _ = addr.send(Shutdown).await;
        }
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
        for arbiter in self.arbiters {
            let _ = actix_rt::task::spawn_blocking(move || arbiter.join()).await;
        }
        let writer = self.writer;
        let stats = actix_rt::task::spawn_blocking(move || writer.shutdown())
            .await
            .map_err(|e| anyhow!("the trace writer did not stop: {e}"))?
            .map_err(|e| anyhow!("{e}"))?;
        tracing::info!(
            records = stats.records,
            batches = stats.batches,
            "traces flushed"
        );
        Ok(())
    }
}

/// Refuses to start on the deployment's fatal problems (in fixtures mode, those of the
/// files it reads: bindings are not used), and logs what degrades turns.
fn refuse_or_warn(
    config: &ServerConfig,
    deployment: &Deployment,
    mode: Mode,
) -> anyhow::Result<()> {
    let refused = fatal_problems(config, deployment, mode);
    if !refused.is_empty() {
        bail!(
            "the deployment cannot be served:\n  {}",
            refused.join("\n  ")
        );
    }
    warn_unbound(config, deployment, mode);
    Ok(())
}

/// The deployment's problems that concern `mode` (in fixtures mode, only those of the
/// files it reads), each with the id of its tenant when it has one.
fn problems_in_mode<'a>(
    config: &'a ServerConfig,
    deployment: &'a Deployment,
    mode: Mode,
) -> impl Iterator<Item = (&'a DeploymentProblem, Option<&'a str>)> {
    deployment
        .problems
        .iter()
        .filter(move |problem| mode == Mode::Live || !problem.kind.concerns_bindings())
        .map(|problem| {
            let tenant = problem
                .tenant
                .and_then(|index| config.tenants.get(index))
                .map(|tenant| tenant.id.as_str());
            (problem, tenant)
        })
}

/// The deployment's fatal problems, each as `validate` prints it (with its tenant); in
/// fixtures mode, only those of the files it reads.
pub(super) fn fatal_problems(
    config: &ServerConfig,
    deployment: &Deployment,
    mode: Mode,
) -> Vec<String> {
    problems_in_mode(config, deployment, mode)
        .filter(|(problem, _)| problem.severity() == Severity::Fatal)
        .map(|(problem, tenant)| match tenant {
            Some(tenant) => format!("tenant {tenant}: {problem}"),
            None => problem.to_string(),
        })
        .collect()
}

/// Logs every provider a project needs that its binding does not serve.
pub(super) fn warn_unbound(config: &ServerConfig, deployment: &Deployment, mode: Mode) {
    for (problem, tenant) in problems_in_mode(config, deployment, mode) {
        if let ProblemKind::Unbound { provider, .. } = &problem.kind {
            tracing::warn!(tenant = %tenant.unwrap_or_default(), provider = %provider, "provider has no binding; its layers will be NOT_BOUND");
        }
    }
}

/// Builds a binding's implementation and starts its actor on `arbiter`. A failure names
/// the tenant, the binding file and the key, as `ctxd validate` does:
/// `tenant acme: bindings/acme.toml: providers.orders.database: /srv/orders.db: the file
/// does not exist`.
pub(super) async fn start_provider(
    tenant: &str,
    binding: &Path,
    provider: &ProviderBinding,
    env: &EnvVars,
    arbiter: &Arbiter,
    cache: Option<ProviderCache>,
) -> anyhow::Result<ProviderHandle> {
    let masks = crate::deployment::binding_masks(provider, env);
    let implementation = crate::deployment::build_implementation(provider, env)
        .await
        .map_err(|error| {
            // A database's message is outside text: shown as untrusted text.
            anyhow!(
                "tenant {tenant}: {}: {}",
                binding.display(),
                UntrustedText::new(&error.problem(&provider.id).to_string(), &masks)
            )
        })?;
    let gate = Arc::new(ProviderGate::new(
        tenant,
        &provider.id,
        implementation,
        provider,
        masks,
    ));
    let actor = ProviderActor::new(Arc::clone(&gate));
    let addr = ProviderActor::start_in_arbiter(&arbiter.handle(), move |_| actor);
    Ok(ProviderHandle {
        addr,
        gate,
        type_name: provider.kind.type_name(),
        retention: provider.retention,
        retention_ttl: provider.retention_ttl,
        secrets: provider.secrets,
        cache,
    })
}

/// The binding's response cache, in its tenant's store (created on first use, bounded
/// by the tenant's share of `[cache]`); `None` when the binding does not cache.
pub(super) fn provider_cache(
    store: &mut Option<(CacheStore, Arc<CacheMetrics>)>,
    tenant_bytes: u64,
    digest_key: &DigestKey,
    scope: &CacheScope<'_>,
    provider: &ProviderBinding,
) -> Option<ProviderCache> {
    provider.cache.ttl?;
    let (store, metrics) = store.get_or_insert_with(|| {
        let metrics = Arc::new(CacheMetrics::new(scope.tenant));
        (CacheStore::new(tenant_bytes, metrics.clone()), metrics)
    });
    metrics.bound(scope.provider);
    ProviderCache::new(store, digest_key, scope, &provider.cache)
}

impl Registry {
    /// The tenant whose API key hashes to `key_sha256`. Compares against every tenant in
    /// constant time per comparison, so timing reveals neither which tenant matched nor
    /// how much of a key did.
    pub(crate) fn tenant_for_key(&self, key_sha256: &[u8; 32]) -> Option<Arc<TenantRuntime>> {
        let served = self.served();
        let mut found = None;
        for tenant in &served.tenants {
            if constant_time_eq(&tenant.key_sha256, key_sha256) {
                found = Some(Arc::clone(tenant));
            }
        }
        found
    }

    /// The set serving now.
    pub(crate) fn served(&self) -> Arc<ServedSet> {
        Arc::clone(&self.served.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `set` in place of the serving one, which is returned: turns that already
    /// hold a tenant of it finish on it.
    pub(super) fn swap(&self, set: ServedSet) -> Arc<ServedSet> {
        let mut served = self.served.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *served, Arc::new(set))
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

/// Equality of two key hashes in time independent of where they differ (`subtle`).
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_comparison() {
        let a = [7u8; 32];
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        b[31] ^= 1;
        assert!(!constant_time_eq(&a, &b));
        b = a;
        b[0] ^= 0x80;
        assert!(!constant_time_eq(&a, &b));
    }
}
