//! Reload without restart, the shell around [`crate::reload`]'s plan: reads the config,
//! Projects and Bindings again, refuses the reload with every problem (the running set
//! keeps serving), or starts the new and changed providers, swaps the registry's
//! [`ServedSet`] in one step and stops the providers no longer bound once the turns
//! still running on the old set are done. Kept providers (same binding) go on as they
//! are: same actor, pool, breaker and cache.
//!
//! Reloads run one at a time on the serve loop (the system arbiter, where start-up built
//! every provider): SIGHUP and `POST /admin/reload` both queue on [`ReloadInbox`].

use super::provider::Shutdown;
use super::topology::{
    Mode, ProjectRuntime, ProviderHandle, Running, ServedSet, TenantRuntime, Topology,
    fatal_problems, provider_cache, start_provider, warn_unbound,
};
use crate::config::{EnvVars, ServerConfig};
use crate::deployment::{Deployment, ResolvedProject};
use crate::digest::DigestKey;
use crate::reload::{
    DeploymentShape, ProviderKey, ReloadSummary, binding_name, debug_digest, plan_reload,
    restart_settings,
};
use crate::resilience::cache::CacheScope;
use actix::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// How often a reload looks at actors: a retired one's holders, a new one's first probe.
const POLL: Duration = Duration::from_millis(50);
/// Beyond the longest turn deadline, the wait before a retired provider is stopped
/// whoever still holds it (the API gives up on a turn one second past its deadline).
const RETIRE_MARGIN: Duration = Duration::from_secs(1);
/// Reload requests waiting for the one in progress.
const RELOAD_QUEUE: usize = 8;

/// A reload's result: what changed, or every problem (the running set keeps serving).
pub(crate) type ReloadOutcome = Result<ReloadSummary, Vec<String>>;

/// A set built from a deployment, not yet serving.
pub(super) struct Built {
    pub(super) set: ServedSet,
    pub(super) handles: BTreeMap<ProviderKey, ProviderHandle>,
    /// The actors started for it (the others were kept).
    started: Vec<Addr<super::ProviderActor>>,
}

impl Running {
    /// The deployment as [`plan_reload`] compares it. Providers count in live mode only:
    /// fixtures mode starts none.
    pub(super) fn shape_of(
        &self,
        config: &ServerConfig,
        deployment: &Deployment,
    ) -> DeploymentShape {
        let mut shape = DeploymentShape {
            restart_settings: restart_settings(config),
            ..DeploymentShape::default()
        };
        for tenant in &config.tenants {
            shape
                .tenants
                .insert(tenant.id.clone(), debug_digest(tenant));
        }
        for tenant in &deployment.tenants {
            for project in &tenant.projects {
                let binding = project
                    .binding
                    .as_ref()
                    .map(|b| (&b.binding.revision, &b.binding.digest));
                shape.projects.insert(
                    format!("{}/{}", tenant.id, project.project.id()),
                    debug_digest(&(&project.project.digest, binding)),
                );
                let (Mode::Live, Some(binding)) = (self.mode, &project.binding) else {
                    continue;
                };
                for provider in &project.providers {
                    shape.providers.insert(
                        provider_key(config, &tenant.id, &binding.path, &provider.id),
                        debug_digest(provider),
                    );
                }
            }
        }
        shape
    }

    /// The tenants of `deployment` with their projects and providers: a provider in
    /// `kept` is reused as it runs, every other one is started. On any problem, the
    /// providers started here are stopped again and every problem is returned.
    pub(super) async fn build(
        &mut self,
        config: &ServerConfig,
        deployment: Deployment,
        env: &EnvVars,
        arbiters: &[Arbiter],
        digest_key: &DigestKey,
        kept: &BTreeMap<ProviderKey, ProviderHandle>,
    ) -> Result<Built, Vec<String>> {
        let mut problems = Vec::new();
        let mut handles: BTreeMap<ProviderKey, ProviderHandle> = BTreeMap::new();
        let mut started = Vec::new();
        let mut tenants = Vec::new();
        for (tenant, resolved) in config.tenants.iter().zip(deployment.tenants) {
            let Some(key_sha256) = tenant.api_key.sha256(env) else {
                problems.push(format!(
                    "tenant {}: its API key is not available",
                    tenant.id
                ));
                continue;
            };
            // Without fatal problems, each project id is here once.
            let mut projects = BTreeMap::new();
            for resolved_project in resolved.projects {
                let ResolvedProject {
                    project,
                    build_json,
                    binding,
                    providers: bound,
                    ..
                } = resolved_project;
                let mut runtime = ProjectRuntime {
                    build_json,
                    build_recorded: AtomicBool::new(false),
                    project,
                    binding: None,
                    providers: HashMap::new(),
                };
                if let (Mode::Live, Some(binding)) = (self.mode, binding) {
                    runtime.binding = Some((
                        binding.binding.revision.clone(),
                        binding.binding.digest.clone(),
                    ));
                    for provider in &bound {
                        let key = provider_key(config, &tenant.id, &binding.path, &provider.id);
                        let handle = if let Some(handle) = handles.get(&key) {
                            handle.clone()
                        } else if let Some(handle) = kept.get(&key) {
                            handle.clone()
                        } else {
                            let scope = CacheScope {
                                tenant: &tenant.id,
                                binding_file: &binding.path,
                                binding_digest: &binding.binding.digest,
                                provider: &provider.id,
                            };
                            let cache = provider_cache(
                                self.caches.entry(tenant.id.clone()).or_default(),
                                config.cache.max_tenant_bytes,
                                digest_key,
                                &scope,
                                provider,
                            );
                            let arbiter = &arbiters[self.next_arbiter % arbiters.len()];
                            self.next_arbiter += 1;
                            match start_provider(
                                &tenant.id,
                                &binding.path,
                                provider,
                                env,
                                arbiter,
                                cache,
                            )
                            .await
                            {
                                Ok(handle) => {
                                    started.push(handle.addr.clone());
                                    handle
                                }
                                Err(problem) => {
                                    problems.push(format!("{problem:#}"));
                                    continue;
                                }
                            }
                        };
                        handles.insert(key, handle.clone());
                        runtime.providers.insert(provider.id.clone(), handle);
                    }
                }
                projects.insert(runtime.project.id().to_owned(), Arc::new(runtime));
            }
            let in_flight = self.in_flight.get(&tenant.id).cloned().unwrap_or_default();
            tenants.push(Arc::new(TenantRuntime {
                id: tenant.id.clone(),
                key_sha256,
                max_in_flight: tenant.max_in_flight,
                in_flight,
                projects,
            }));
        }
        if !problems.is_empty() {
            for addr in started {
                let _ = addr.send(Shutdown).await;
            }
            return Err(problems);
        }
        self.in_flight = tenants
            .iter()
            .map(|t| (t.id.clone(), Arc::clone(&t.in_flight)))
            .collect();
        self.caches
            .retain(|tenant, _| config.tenants.iter().any(|t| &t.id == tenant));
        let providers = handles.values().map(|h| h.addr.clone()).collect();
        Ok(Built {
            set: ServedSet { tenants, providers },
            handles,
            started,
        })
    }

    /// Stops a provider no longer bound once no turn holds it any more (its actor and
    /// this task are then the only holders of its gate), or one second past the longest
    /// turn deadline, whichever comes first.
    fn retire(&mut self, key: &ProviderKey, handle: ProviderHandle, max_turn: Duration) {
        self.retiring.retain(Addr::connected);
        self.retiring.push(handle.addr.clone());
        let (tenant, provider) = (key.tenant.clone(), key.provider.clone());
        actix_rt::spawn(async move {
            let until = Instant::now() + max_turn + RETIRE_MARGIN;
            while Arc::strong_count(&handle.gate) > 2 && Instant::now() < until {
                actix_rt::time::sleep(POLL).await;
            }
            let _ = handle.addr.send(Shutdown).await;
            tracing::info!(%tenant, %provider, "provider stopped: its binding changed or was removed by a reload");
        });
    }
}

/// Waits until every actor in `started` has finished its first readiness probe (ready
/// or not), at most `limit`.
async fn first_probes(started: &[Addr<super::ProviderActor>], limit: Duration) {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        let snapshots = Topology::observe(started).await;
        if snapshots.len() == started.len() && snapshots.iter().all(|s| s.ready.is_some()) {
            return;
        }
        actix_rt::time::sleep(POLL).await;
    }
}

fn provider_key(
    config: &ServerConfig,
    tenant: &str,
    binding: &Path,
    provider: &str,
) -> ProviderKey {
    ProviderKey {
        tenant: tenant.to_owned(),
        binding: binding_name(config, binding),
        provider: provider.to_owned(),
    }
}

impl Topology {
    /// Reads the config at `path` and everything it references again, and serves it —
    /// or refuses with every problem, the running set untouched. `env` is the one the
    /// process started with.
    pub(crate) async fn reload(&mut self, path: &Path, env: &EnvVars) -> ReloadOutcome {
        let config = ServerConfig::load(path).map_err(|errors| errors.lines())?;
        let deployment = Deployment::resolve(&config, env);
        let mode = self.running.mode;
        let mut problems = fatal_problems(&config, &deployment, mode);
        let shape = self.running.shape_of(&config, &deployment);
        let plan = plan_reload(&self.running.shape, &shape);
        problems.extend(
            plan.refused
                .iter()
                .map(|refused| format!("{}: {refused}", config.file)),
        );
        if !problems.is_empty() {
            return Err(problems);
        }
        warn_unbound(&config, &deployment, mode);
        let kept: BTreeMap<ProviderKey, ProviderHandle> = plan
            .keep
            .iter()
            .filter_map(|key| Some((key.clone(), self.running.handles.get(key)?.clone())))
            .collect();
        let built = self
            .running
            .build(
                &config,
                deployment,
                env,
                &self.arbiters,
                &self.registry.digest_key,
                &kept,
            )
            .await?;
        drop(kept);
        // So that `/readyz` does not go back to `starting` when the new set serves.
        first_probes(&built.started, self.registry.max_turn).await;
        // From here on new turns find the new set; the old one lives on in the turns
        // that hold its tenants.
        drop(self.registry.swap(built.set));
        let max_turn = self.registry.max_turn;
        for key in &plan.stop {
            if let Some(handle) = self.running.handles.remove(key) {
                self.running.retire(key, handle, max_turn);
            }
        }
        self.running.handles = built.handles;
        self.running.shape = shape;
        Ok(plan.summary)
    }

    /// [`Topology::reload`], with its outcome logged: a summary, or every problem.
    async fn reload_logged(&mut self, path: &Path, env: &EnvVars, trigger: &str) -> ReloadOutcome {
        tracing::info!(trigger, config = %path.display(), "reloading");
        let outcome = self.reload(path, env).await;
        match &outcome {
            Ok(summary) => tracing::info!(trigger, %summary, "reloaded: new turns use the new set"),
            Err(problems) => {
                for problem in problems {
                    tracing::warn!(trigger, %problem, "reload problem");
                }
                tracing::warn!(
                    trigger,
                    problems = problems.len(),
                    "reload refused: the running set keeps serving"
                );
            }
        }
        outcome
    }
}

/// Asks the serve loop for a reload (`POST /admin/reload`).
#[derive(Clone)]
pub(crate) struct ReloadRequests(mpsc::Sender<oneshot::Sender<ReloadOutcome>>);

impl ReloadRequests {
    /// The reload's outcome; `None` when the serve loop has stopped (shutting down).
    pub(crate) async fn reload(&self) -> Option<ReloadOutcome> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.0.send(reply_tx).await.ok()?;
        reply_rx.await.ok()
    }
}

/// Where reloads are asked for: SIGHUP and [`ReloadRequests`].
pub(crate) struct ReloadInbox {
    requests_rx: mpsc::Receiver<oneshot::Sender<ReloadOutcome>>,
    /// Keeps the channel open whoever else lets go of it.
    _requests_tx: mpsc::Sender<oneshot::Sender<ReloadOutcome>>,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
    config: PathBuf,
    env: EnvVars,
}

impl ReloadInbox {
    /// Listens for SIGHUP from now on (before the address is announced, so a SIGHUP never
    /// ends the process) and opens the request channel.
    pub(crate) fn install(config: &Path, env: EnvVars) -> (ReloadInbox, ReloadRequests) {
        let (requests_tx, requests_rx) = mpsc::channel(RELOAD_QUEUE);
        let inbox = ReloadInbox {
            requests_rx,
            _requests_tx: requests_tx.clone(),
            #[cfg(unix)]
            hangup: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .expect("SIGHUP handler installs"),
            config: config.to_owned(),
            env,
        };
        (inbox, ReloadRequests(requests_tx))
    }

    /// Runs every reload asked for, one at a time, until `shutdown` completes.
    pub(crate) async fn serve_until(mut self, topology: &mut Topology, shutdown: impl Future) {
        tokio::pin!(shutdown);
        loop {
            #[cfg(unix)]
            let hangup = self.hangup.recv();
            #[cfg(not(unix))]
            let hangup = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = &mut shutdown => return,
                Some(_) = hangup => {
                    let _ = topology.reload_logged(&self.config, &self.env, "SIGHUP").await;
                }
                Some(reply_tx) = self.requests_rx.recv() => {
                    let outcome = topology.reload_logged(&self.config, &self.env, "admin").await;
                    let _ = reply_tx.send(outcome);
                }
            }
        }
    }
}
