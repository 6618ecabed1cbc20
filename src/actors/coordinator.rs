//! `Coordinator`: the request coordinator, one actor per HTTP worker, started on that
//! worker's thread so turn throughput scales with workers. For each turn it runs the
//! turn pipeline (`turn`): plans with the gating core, fans out every invocation
//! concurrently under the turn deadline — a cached provider's kept answer, or admission
//! through the provider's gate and the I/O on this thread (for a cached provider in a
//! task of its own, shared by every turn asking the same) — assembles with the kernel,
//! captures the trace and queues it for the trace writer.
//!
//! Why an actor and not a function: it is the one owner of its worker's turns. Its
//! bounded mailbox (`MAILBOX_CAPACITY`) is the worker's turn queue — the API awaits each
//! turn with the turn's deadline plus a margin, so a coordinator that falls behind is
//! seen as `RUNTIME_UNAVAILABLE` instead of growing a queue — and it counts the turns it
//! is running and has finished, which `Observe` shows to `/readyz` and to shutdown, which
//! waits for them. A turn keeps running to its end (and its trace is queued) even when
//! the caller stopped waiting. The handler spawns each turn as a task of its own on the
//! worker's thread, outside the actor's context (which polls everything it holds on any
//! wake-up), and the task tells the actor when it ends (`TurnEnded`): the mailbox drains
//! as fast as turns arrive and a turn is polled only when its own I/O is ready; the
//! per-tenant in-flight limit in the API bounds how many run.

use super::provider::Refusal;
use super::topology::{Mode, ProjectRuntime, ProviderHandle, Registry, TenantRuntime};
use crate::bounds::{MAX_TIMEOUT_MS, MIN_TIMEOUT_MS};
use crate::config::{DEFAULT_RETENTION_TTL, Retention};
use crate::contract::HandleRef;
use crate::contract::{Item, Source, TurnRequest, TurnResponse, VersionSource};
use crate::fixtures::{fixture_answer, fixture_by_value};
use crate::gate::Invocation;
use crate::handles::store::new_id;
use crate::handles::{self, HandleMaterial, HandleStore, item_bytes};
use crate::kernel::{self, HandleSink, Rendering};
use crate::outcome::{CallFacts, Failure, Outcome};
use crate::project::{CurrentnessRule, LayerKind, MAX_BUDGET_BYTES, MIN_BUDGET_BYTES};
use crate::providers::LookupCall;
use crate::providers::untrusted::{Masks, UntrustedText};
use crate::resilience::breaker::{CallResult, classify};
use crate::resilience::cache::{KeptAnswer, ProviderCache};
use crate::telemetry::metrics;
use crate::trace::writer::Backpressure;
use crate::turn::{self, Ask, OutcomeSource, ProviderTraceSettings, TurnFacts, UnknownProfile};
use actix::prelude::*;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::SystemTime;
use tokio::time::Instant;

pub(crate) const MAILBOX_CAPACITY: usize = 4096;
/// Grace after the turn deadline for a provider implementation to return its own
/// `TIMEOUT`, after which the coordinator stops waiting for it.
const DEADLINE_GRACE: Duration = Duration::from_millis(25);

pub(crate) struct Coordinator {
    registry: Arc<Registry>,
    /// Turns this worker is running now. Only this actor's context touches it: a turn is
    /// counted when its message is handled and uncounted when its future ends.
    in_flight: usize,
    /// Turns this worker has finished since it started (answered or refused).
    finished: u64,
}

impl Coordinator {
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        Coordinator {
            registry,
            in_flight: 0,
            finished: 0,
        }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

/// Answer one turn for a tenant.
pub(crate) struct RunTurn {
    pub(crate) tenant: Arc<TenantRuntime>,
    pub(crate) request: TurnRequest,
}

impl Message for RunTurn {
    type Result = Result<TurnResponse, TurnError>;
}

/// Why a turn could not be answered. Provider failures are never errors: they are
/// statuses in a `200` answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TurnError {
    #[error("unknown project {0:?}")]
    UnknownProject(String),
    #[error("unknown profile {0:?}")]
    UnknownProfile(String),
    #[error("{field}: {message}")]
    InvalidField { field: String, message: String },
    /// The trace could not be queued — the queue stayed full for the whole backpressure
    /// wait, or the store or its disk has no room: the turn is not answered, because an
    /// answered turn without its trace would break provenance.
    #[error("{0}; the turn was not answered")]
    TraceBackpressure(Backpressure),
}

impl Handler<RunTurn> for Coordinator {
    type Result = ResponseFuture<Result<TurnResponse, TurnError>>;

    /// The turn runs as a task of its own on this thread (actix spawns a
    /// `ResponseFuture`), not inside the actor's context: the context polls every future
    /// it holds whenever any one of them is woken, so turns held there would each be
    /// polled, with all their calls, for every upstream answer of every other turn in
    /// flight — a cost that grows with the turns in flight, so that past saturation the
    /// turns holding provider permits hardly moved and almost no turn got every
    /// provider. The turn's task tells the actor when it ends.
    fn handle(&mut self, turn: RunTurn, ctx: &mut Self::Context) -> Self::Result {
        self.in_flight += 1;
        let registry = Arc::clone(&self.registry);
        let ends = EndsTurn(ctx.address());
        Box::pin(async move {
            let _ends = ends;
            run_turn(&registry, &turn.tenant, turn.request).await
        })
    }
}

/// One of the coordinator's turns has ended, however it ended.
struct TurnEnded;

impl Message for TurnEnded {
    type Result = ();
}

impl Handler<TurnEnded> for Coordinator {
    type Result = ();

    fn handle(&mut self, _: TurnEnded, _: &mut Self::Context) {
        self.in_flight -= 1;
        self.finished += 1;
    }
}

/// Tells the coordinator that its turn ended when dropped: at the end of the turn's
/// task, or when the task is dropped before its end (a panic, the worker stopping).
/// `do_send` queues even into a full mailbox, so the count is never lost.
struct EndsTurn(Addr<Coordinator>);

impl Drop for EndsTurn {
    fn drop(&mut self) {
        self.0.do_send(TurnEnded);
    }
}

/// Asks a coordinator for its observable state.
#[derive(Debug)]
pub(crate) struct Observe;

impl Message for Observe {
    type Result = CoordinatorSnapshot;
}

/// What a coordinator shows to health checks, shutdown and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CoordinatorSnapshot {
    /// Turns running on this worker now.
    pub(crate) in_flight: usize,
    /// Turns finished on this worker since it started.
    pub(crate) finished: u64,
}

impl Handler<Observe> for Coordinator {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(CoordinatorSnapshot {
            in_flight: self.in_flight,
            finished: self.finished,
        })
    }
}

async fn run_turn(
    registry: &Registry,
    tenant: &TenantRuntime,
    request: TurnRequest,
) -> Result<TurnResponse, TurnError> {
    let started = Instant::now();
    let started_at = SystemTime::now();
    let timeout = turn_timeout(registry, &request)?;
    if let Some(budget) = request.budget {
        check_range(
            "budget.maxBytes",
            budget.max_bytes as u64,
            MIN_BUDGET_BYTES as u64,
            MAX_BUDGET_BYTES as u64,
        )?;
    }
    let runtime = tenant
        .projects
        .get(&request.project)
        .ok_or_else(|| TurnError::UnknownProject(request.project.clone()))?;
    let project = &runtime.project;
    // A store without room refuses the turn before any provider is called.
    if let Some(no_room) = registry.traces.no_room() {
        metrics::trace_backpressure();
        return Err(TurnError::TraceBackpressure(Backpressure::NoRoom(no_room)));
    }
    let ask = Ask {
        profile: request.profile.as_deref(),
        objective: request.objective.as_deref(),
        consumer: request.consumer.as_deref(),
        inputs: &request.inputs,
    };
    let source = ServedProviders {
        mode: registry.mode,
        tenant: &tenant.id,
        runtime,
        turn_deadline: started + timeout,
    };
    let planned = turn::plan(project, &ask, &source)
        .map_err(|UnknownProfile(profile)| TurnError::UnknownProfile(profile))?;
    let max_bytes = planned.budget(request.budget.map(|b| b.max_bytes));
    let Ok(called) = planned.call(&source).await;
    let slowest_call = called
        .calls
        .iter()
        .filter_map(|call| call.facts.duration)
        .max()
        .unwrap_or_default();
    let mut handle_sink = StoreSink::new(&registry.handles, &tenant.id);
    let answered = called.assemble(Rendering {
        max_bytes,
        nonce: &kernel::random_nonce(),
        handles: &mut handle_sink,
        locators: Some(&registry.digest_key),
    });
    handle_sink.register_kept().await;
    let turn_id = uuid::Uuid::now_v7().to_string();
    let facts = TurnFacts {
        turn_id: &turn_id,
        tenant: &tenant.id,
        binding: runtime
            .binding
            .as_ref()
            .map(|(r, d)| (r.as_str(), d.as_str())),
        ask,
        deadline: timeout,
        mode: match registry.mode {
            Mode::Live => Source::Live,
            Mode::Fixtures => Source::TestFixture,
        },
        started_at,
        duration: started.elapsed(),
    };
    let mut trace = answered.capture(&facts, &registry.digest_key, &|provider| {
        trace_settings(registry.mode, runtime, provider)
    });
    let record_build = !runtime.build_recorded.swap(true, Ordering::AcqRel);
    if record_build {
        trace.build = Some((project.digest.clone(), runtime.build_json.clone()));
    }
    if let Err(refused) = registry.traces.enqueue(trace, registry.trace_wait).await {
        if record_build {
            runtime.build_recorded.store(false, Ordering::Release);
        }
        // The turn is not answered: the handles it registered would only take room in
        // the tenant's share until they expire.
        let now = std::time::Instant::now();
        for handle in answered
            .result
            .selections
            .iter()
            .filter_map(|s| s.handle.as_ref())
        {
            let _ = registry.handles.delete(&tenant.id, &handle.id, now).await;
        }
        match refused {
            // The writer logs when the store runs out of room, not every turn it refuses.
            Backpressure::NoRoom(_) => {
                tracing::debug!(tenant = %tenant.id, project = %project.id(), "trace store has no room: turn refused");
            }
            Backpressure::Full { .. } | Backpressure::Stopped => {
                tracing::error!(tenant = %tenant.id, project = %project.id(), "trace queue full: turn refused");
            }
        }
        metrics::trace_backpressure();
        return Err(TurnError::TraceBackpressure(refused));
    }
    // Everything the coordinator did, trace capture and queueing included.
    let handled = started.elapsed();
    metrics::TurnTimed {
        tenant: &tenant.id,
        duration: handled,
        overhead: handled.saturating_sub(slowest_call),
    }
    .emit();
    let response = answered.respond(&facts);
    // Debug, not info: a busy replica answers thousands of turns a second; the turns
    // counter and the trace store already account for every one.
    tracing::debug!(
        tenant = %tenant.id,
        project = %project.id(),
        turn_id = %response.turn_id,
        blocked = response.result.blocked,
        providers = response.result.providers.len(),
        duration_ms = response.duration_ms,
        "turn answered"
    );
    Ok(response)
}

/// The turn's timeout: what it asks for (`deadlineMs`), never more than `max_turn_ms`.
fn turn_timeout(registry: &Registry, request: &TurnRequest) -> Result<Duration, TurnError> {
    let max = registry.max_turn;
    match request.deadline_ms {
        None => Ok(max),
        Some(ms) => {
            check_range(
                "deadlineMs",
                ms,
                MIN_TIMEOUT_MS,
                MAX_TIMEOUT_MS.max(max.as_millis() as u64),
            )?;
            Ok(Duration::from_millis(ms).min(max))
        }
    }
}

fn check_range(field: &str, value: u64, min: u64, max: u64) -> Result<(), TurnError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(TurnError::InvalidField {
            field: field.to_owned(),
            message: format!("{value} is out of range: use {min}..={max}"),
        })
    }
}

/// The outcome source of a served turn: the tenant's bound providers (live), or the
/// Projects' Context Test fixtures matched by lookup value (`serve --fixtures`).
struct ServedProviders<'a> {
    mode: Mode,
    tenant: &'a str,
    runtime: &'a ProjectRuntime,
    turn_deadline: Instant,
}

impl OutcomeSource for ServedProviders<'_> {
    type Error = Infallible;

    fn is_bound(&self, provider: &str) -> bool {
        match self.mode {
            Mode::Live => self.runtime.providers.contains_key(provider),
            Mode::Fixtures => true,
        }
    }

    async fn answer(&self, invocation: &Invocation) -> Result<(Outcome, CallFacts), Infallible> {
        let started = Instant::now();
        // The bound provider, looked up once (none in fixture mode).
        let bound = match self.mode {
            Mode::Live => self.runtime.providers.get(&invocation.provider_id),
            Mode::Fixtures => None,
        };
        let served = match self.mode {
            Mode::Fixtures => {
                let fixture = fixture_by_value(&self.runtime.project, invocation);
                let outcome = fixture_answer(fixture, invocation.limit);
                let source = outcome.version.is_some().then_some(VersionSource::Response);
                Served::now(outcome, source)
            }
            Mode::Live => match bound {
                // Gating only plans bound providers.
                None => Served::now(Outcome::failed(Failure::NotBound, Source::Live), None),
                Some(handle) => match &handle.cache {
                    Some(cache) => self.answer_cached(handle, cache, invocation, started).await,
                    None => {
                        let call = invoke_live(handle, invocation, Some(self.turn_deadline));
                        let grace = self.turn_deadline + DEADLINE_GRACE;
                        match tokio::time::timeout_at(grace, call).await {
                            Ok((outcome, source)) => Served::now(outcome, source),
                            Err(_) => Served::timed_out(),
                        }
                    }
                },
            },
        };
        let facts = CallFacts {
            version_source: served.version_source,
            duration: Some(started.elapsed()),
            observed_at: served.observed_at.unwrap_or_else(SystemTime::now),
            age: served.age,
        };
        let outcome = served.outcome;
        metrics::ProviderCallFinished {
            tenant: self.tenant,
            provider: &invocation.provider_id,
            status: outcome.status().as_str(),
            detail: outcome.detail(),
            duration: started.elapsed(),
            series: bound.map(|handle| &handle.gate.series),
        }
        .emit();
        Ok((outcome, facts))
    }
}

impl ServedProviders<'_> {
    /// An invocation of a cached provider: a kept answer young enough for every layer
    /// the provider serves (source `CACHE`, with its age), else one upstream call shared
    /// by every turn asking the same while it runs. The call runs in a task of its own,
    /// bounded by the provider's timeout only, so that this turn's deadline ends this
    /// turn's wait (`TIMEOUT`) and not the call the other turns wait for.
    async fn answer_cached(
        &self,
        handle: &ProviderHandle,
        cache: &ProviderCache,
        invocation: &Invocation,
        asked: Instant,
    ) -> Served {
        let key = cache.key(&invocation.key, &invocation.value, invocation.limit);
        let max_age = self
            .serves_required_layer(invocation.provider)
            .then(|| cache.required_max_age());
        if let Some(kept) = cache.kept(&key, max_age).await {
            return Served::from_cache(&kept, asked);
        }
        if max_age.is_some() {
            // Too old for a required layer: the fresh answer replaces it for everyone.
            cache.forget(&key).await;
        }
        let (cache, handle, invocation) = (cache.clone(), handle.clone(), invocation.clone());
        let fetch = actix_rt::spawn(async move {
            let call = invoke_live(&handle, &invocation, None);
            cache.fetch(key, call).await
        });
        match tokio::time::timeout_at(self.turn_deadline, fetch).await {
            Ok(Ok(fetched)) => Served::from_cache(&fetched, asked),
            Ok(Err(failed)) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
            // The turn's deadline passed first (the call goes on for the others), or the
            // task was cancelled because the worker is stopping.
            Ok(Err(_)) | Err(_) => Served::timed_out(),
        }
    }

    /// Whether a layer with `currentness: "required"` is bound to the provider: such a
    /// layer takes no kept answer older than the binding's `cache.required_max_age`.
    fn serves_required_layer(&self, provider: usize) -> bool {
        self.runtime.project.layers.iter().any(|layer| {
            layer.currentness == CurrentnessRule::Required
                && matches!(&layer.kind, LayerKind::Bound { providers } if providers.contains(&provider))
        })
    }
}

/// How a source answered one invocation, before it is timed.
struct Served {
    outcome: Outcome,
    version_source: Option<VersionSource>,
    /// When the provider gave the answer; `None`: now.
    observed_at: Option<SystemTime>,
    /// For an answer from the cache: its age.
    age: Option<Duration>,
}

impl Served {
    fn now(outcome: Outcome, version_source: Option<VersionSource>) -> Served {
        Served {
            outcome,
            version_source,
            observed_at: None,
            age: None,
        }
    }

    /// No answer by the turn's deadline.
    fn timed_out() -> Served {
        Served::now(Outcome::failed(Failure::Deadline, Source::Live), None)
    }

    /// A cache answer as the turn that `asked` at that instant reports it: `LIVE` when
    /// the provider gave it while the turn waited (its own call, or a call in flight it
    /// joined), else `CACHE` with its age.
    fn from_cache(kept: &KeptAnswer, asked: Instant) -> Served {
        let mut outcome = kept.outcome.clone();
        let age = (!kept.answered_since(asked)).then(|| kept.age(Instant::now()));
        if age.is_some() {
            outcome.source = Source::Cache;
        }
        Served {
            outcome,
            version_source: kept.version_source,
            observed_at: Some(kept.observed_at),
            age,
        }
    }
}

/// One call to the provider through its gate: admission (never a wait), the lookup
/// bounded by the provider's timeout — and by `turn_deadline` when the call is the
/// turn's own — then the breaker's bookkeeping and the version to report.
async fn invoke_live(
    handle: &ProviderHandle,
    invocation: &Invocation,
    turn_deadline: Option<Instant>,
) -> (Outcome, Option<VersionSource>) {
    let refused = |failure: Failure| (Outcome::failed(failure, Source::Live), None);
    // Admission never waits: no free permit is an immediate OVERLOADED.
    let grant = match handle.gate.acquire() {
        Ok(grant) => grant,
        Err(Refusal::CircuitOpen) => return refused(Failure::CircuitOpen),
        Err(Refusal::Overloaded) => return refused(Failure::Overloaded),
    };
    let provider_deadline = Instant::now() + grant.timeout;
    let call = LookupCall {
        provider: &invocation.provider_id,
        key: &invocation.key,
        value: &invocation.value,
        limit: invocation.limit,
        deadline: turn_deadline.map_or(provider_deadline, |turn| provider_deadline.min(turn)),
        secrets: handle.secrets,
    };
    let mut outcome = grant.implementation.lookup(&call).await;
    drop(grant.permit);
    // A call cut short by the turn's own (shorter) deadline says nothing about the
    // provider: a client asking for tight deadlines must not open the circuit for all.
    let cut_by_turn = turn_deadline.is_some_and(|turn| turn < provider_deadline)
        && outcome.status() == crate::contract::ProviderStatus::Timeout;
    let result = if cut_by_turn {
        CallResult::Neutral
    } else {
        classify(&outcome)
    };
    handle.gate.report(grant.ticket, result);
    if let Some(failure) = outcome.failure() {
        tracing::warn!(
            provider = %invocation.provider_id,
            status = failure.status().as_str(),
            detail = %UntrustedText::new(failure.detail().unwrap_or(""), &Masks::none()),
            "provider call failed"
        );
    }
    let version_source = if outcome.version.is_some() {
        Some(VersionSource::Response)
    } else if let Some((version, source)) = grant.fallback_version {
        outcome.version = Some(version);
        Some(source)
    } else {
        None
    };
    (outcome, version_source)
}

/// Keeps the items a turn returns behind handles in the tenant's share of the handle
/// store. Offers only decide an id; the kernel has the sink keep exactly the handles the
/// final text references, so an item dropped for budget after all never takes room in
/// the store (nor evicts anything to make it). The kernel is pure, so keeping only
/// collects; [`StoreSink::register_kept`] stores them (a Redis store is a network call)
/// once the text is final, before the trace is queued.
struct StoreSink<'a> {
    store: &'a HandleStore,
    tenant: &'a str,
    /// Handles offered and not withdrawn, with their bytes: together they must fit the
    /// tenant's share, or keeping the last would evict the first of the same turn.
    offered: Vec<(String, usize)>,
    /// Handles the final text references, with their material, to register.
    kept: Vec<(HandleRef, HandleMaterial)>,
}

impl<'a> StoreSink<'a> {
    fn new(store: &'a HandleStore, tenant: &'a str) -> Self {
        StoreSink {
            store,
            tenant,
            offered: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Registers every kept handle. A refusal or an unreachable store is logged: the
    /// turn is still answered, and its reference then answers `unknown_handle`.
    async fn register_kept(self) {
        for (handle, material) in self.kept {
            match self
                .store
                .register_as(self.tenant, &handle.id, material)
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(tenant = %self.tenant, error = %error, "handle not registered");
                }
                Err(unavailable) => {
                    tracing::warn!(tenant = %self.tenant, error = %unavailable, "handle not registered");
                }
            }
        }
    }
}

impl HandleSink for StoreSink<'_> {
    fn offer(&mut self, _layer: &str, _provider: &str, item: &Item) -> Option<HandleRef> {
        let bytes = item_bytes(item);
        let offered: usize = self.offered.iter().map(|(_, bytes)| bytes).sum();
        if offered + bytes > self.store.tenant_cap() {
            // Declined: the item is truncated or dropped like any other.
            return None;
        }
        let id = new_id();
        self.offered.push((id.clone(), bytes));
        Some(HandleRef {
            id,
            version: handles::store::VERSION,
        })
    }

    fn withdraw(&mut self, handle: &HandleRef) {
        self.offered.retain(|(id, _)| *id != handle.id);
    }

    fn keep(&mut self, handle: &HandleRef, item: &Item) {
        self.kept
            .push((handle.clone(), HandleMaterial::Items(vec![item.clone()])));
    }
}

/// How provenance sees a provider of this project: its type and retention.
fn trace_settings<'r>(
    mode: Mode,
    runtime: &'r ProjectRuntime,
    provider: &str,
) -> ProviderTraceSettings<'r> {
    match (mode, runtime.providers.get(provider)) {
        (Mode::Fixtures, _) => ProviderTraceSettings {
            provider_type: Some("fixture"),
            retention: Retention::default(),
            retention_ttl: DEFAULT_RETENTION_TTL,
        },
        (Mode::Live, Some(handle)) => ProviderTraceSettings {
            provider_type: Some(handle.type_name),
            retention: handle.retention,
            retention_ttl: handle.retention_ttl,
        },
        (Mode::Live, None) => ProviderTraceSettings {
            provider_type: None,
            retention: Retention::default(),
            retention_ttl: DEFAULT_RETENTION_TTL,
        },
    }
}
