//! `Coordinator`: one per HTTP worker, started on that worker's thread, so turn
//! throughput scales with workers. For each turn it plans with the gating core, fans
//! out every invocation concurrently under the turn deadline, and hands the outcomes to
//! the kernel. Its handler returns a future at once, so the mailbox (capacity
//! `MAILBOX_CAPACITY`) drains as fast as turns arrive; the per-tenant in-flight limit in
//! the API bounds how many run.

use super::provider::Refusal;
use super::topology::{Mode, ProjectRuntime, Registry, TenantRuntime};
use crate::config::{DEFAULT_RETENTION_TTL, Retention};
use crate::contract::Item;
use crate::contract::{
    BudgetReport, CutReport, LayerReport, ProviderReport, ProviderStatus, SelectionReport, Source,
    TurnRequest, TurnResponse, VersionSource,
};
use crate::fixtures::{self, fixture_by_value};
use crate::gate::{self, GateRequest, Invocation};
use crate::handles::{HandleMaterial, HandleRef, HandleStore};
use crate::kernel::{self, HandleSink, Outcome, TurnResult};
use crate::project::{MAX_BUDGET_BYTES, MIN_BUDGET_BYTES};
use crate::providers::bounds::{MAX_TIMEOUT_MS, MIN_TIMEOUT_MS};
use crate::providers::{LookupCall, detail};
use crate::resilience::breaker::{CallResult, classify};
use crate::telemetry::metrics;
use crate::trace::capture::{InvocationFacts, Locators, ProviderTraceSettings, TurnFacts, capture};
use actix::prelude::*;
use futures_util::future::join_all;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::SystemTime;
use tokio::time::Instant;

pub const MAILBOX_CAPACITY: usize = 4096;
/// Grace after the turn deadline for a provider implementation to return its own
/// `TIMEOUT`, after which the coordinator stops waiting for it.
const DEADLINE_GRACE: Duration = Duration::from_millis(25);

pub struct Coordinator {
    registry: Arc<Registry>,
}

impl Coordinator {
    pub fn new(registry: Arc<Registry>) -> Self {
        Coordinator { registry }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

/// Answer one turn for a tenant.
pub struct RunTurn {
    pub tenant: Arc<TenantRuntime>,
    pub request: TurnRequest,
}

impl Message for RunTurn {
    type Result = Result<TurnResponse, TurnError>;
}

/// Why a turn could not be answered. Provider failures are never errors: they are
/// statuses in a `200` answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    #[error("unknown project {0:?}")]
    UnknownProject(String),
    #[error("unknown profile {0:?}")]
    UnknownProfile(String),
    #[error("{field}: {message}")]
    InvalidField { field: String, message: String },
    /// The trace queue stayed full for the whole backpressure wait: the turn is not
    /// answered, because an answered turn without its trace would break provenance.
    #[error("the trace writer is not keeping up; the turn was not answered")]
    TraceBackpressure,
}

impl Handler<RunTurn> for Coordinator {
    type Result = ResponseFuture<Result<TurnResponse, TurnError>>;

    fn handle(&mut self, turn: RunTurn, _: &mut Self::Context) -> Self::Result {
        let registry = Arc::clone(&self.registry);
        Box::pin(async move { run_turn(&registry, &turn.tenant, turn.request).await })
    }
}

/// What the response and the trace report beside an invocation's outcome.
type CallFacts = InvocationFacts;

async fn run_turn(
    registry: &Registry,
    tenant: &TenantRuntime,
    request: TurnRequest,
) -> Result<TurnResponse, TurnError> {
    let started = Instant::now();
    let started_at = SystemTime::now();
    let timeout = turn_timeout(registry, &request)?;
    let turn_deadline = started + timeout;
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
    let profile_id = request.profile.as_deref().unwrap_or("default");
    let profile = project
        .profile(profile_id)
        .ok_or_else(|| TurnError::UnknownProfile(profile_id.to_owned()))?;
    let gate_request = GateRequest {
        profile,
        objective: request.objective.as_deref(),
        consumer: request.consumer.as_deref(),
        inputs: &request.inputs,
    };
    let plan = match registry.mode {
        Mode::Live => gate::plan(project, &gate_request, &|id| {
            runtime.providers.contains_key(id)
        }),
        Mode::Fixtures => gate::plan(project, &gate_request, &|_| true),
    };

    let (outcomes, facts): (Vec<Outcome>, Vec<CallFacts>) =
        join_all(plan.invocations.iter().map(|invocation| {
            invoke(
                registry.mode,
                &tenant.id,
                runtime,
                invocation,
                turn_deadline,
            )
        }))
        .await
        .into_iter()
        .unzip();
    let max_bytes = fixtures::budget(project, request.budget.map(|b| b.max_bytes));
    let mut handles = StoreSink {
        store: &registry.handles,
        tenant: &tenant.id,
    };
    let result = kernel::assemble_with_handles(
        project,
        &plan,
        &outcomes,
        max_bytes,
        &kernel::random_nonce(),
        &mut handles,
    );
    let turn_id = uuid::Uuid::now_v7().to_string();
    let locators = Locators::of(&result, &registry.digest_key);
    let duration = started.elapsed();

    let mut trace = capture(
        &TurnFacts {
            turn_id: &turn_id,
            tenant: &tenant.id,
            project,
            binding: runtime
                .binding
                .as_ref()
                .map(|(r, d)| (r.as_str(), d.as_str())),
            profile: profile_id,
            objective: request.objective.as_deref(),
            consumer: request.consumer.as_deref(),
            inputs: &request.inputs,
            deadline: timeout,
            mode: match registry.mode {
                Mode::Live => Source::Live,
                Mode::Fixtures => Source::TestFixture,
            },
            started_at,
            duration,
        },
        &plan,
        &outcomes,
        &facts,
        &result,
        &locators,
        &registry.digest_key,
        &|provider| trace_settings(registry.mode, runtime, provider),
    );
    let record_build = !runtime.build_recorded.swap(true, Ordering::AcqRel);
    if record_build {
        trace.build = Some((project.digest.clone(), runtime.build_json.clone()));
    }
    if registry
        .traces
        .enqueue(trace, registry.trace_wait)
        .await
        .is_err()
    {
        if record_build {
            runtime.build_recorded.store(false, Ordering::Release);
        }
        tracing::error!(tenant = %tenant.id, project = %project.id(), "trace queue full: turn refused");
        metrics::trace_backpressure();
        return Err(TurnError::TraceBackpressure);
    }
    // Everything the coordinator did, trace capture and queueing included.
    let handled = started.elapsed();
    let slowest_call = facts.iter().map(|f| f.duration).max().unwrap_or_default();
    metrics::TurnTimed {
        tenant: &tenant.id,
        duration: handled,
        overhead: handled.saturating_sub(slowest_call),
    }
    .emit();
    let response = respond(
        runtime,
        &plan.invocations,
        &facts,
        result,
        locators,
        &request,
        profile_id,
        turn_id,
        duration,
    );
    // Debug, not info: a busy replica answers thousands of turns a second; the turns
    // counter and the trace store already account for every one.
    tracing::debug!(
        tenant = %tenant.id,
        project = %project.id(),
        turn_id = %response.turn_id,
        blocked = response.blocked,
        providers = response.providers.len(),
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

async fn invoke(
    mode: Mode,
    tenant: &str,
    runtime: &ProjectRuntime,
    invocation: &Invocation,
    turn_deadline: Instant,
) -> (Outcome, CallFacts) {
    let started = Instant::now();
    let (mut outcome, version_source) = match mode {
        Mode::Fixtures => {
            let outcome = match fixture_by_value(&runtime.project, invocation) {
                Some(fixture) => fixtures::fixture_outcome(fixture, invocation.limit),
                None => fixtures::missing_fixture(),
            };
            let source = outcome.version.is_some().then_some(VersionSource::Response);
            (outcome, source)
        }
        Mode::Live => {
            let call = invoke_live(runtime, invocation, turn_deadline);
            match tokio::time::timeout_at(turn_deadline + DEADLINE_GRACE, call).await {
                Ok(invoked) => invoked,
                Err(_) => (
                    Outcome::status(
                        ProviderStatus::Timeout,
                        Some(detail::DEADLINE.to_owned()),
                        Source::Live,
                    ),
                    None,
                ),
            }
        }
    };
    if outcome.status != ProviderStatus::Ok {
        outcome.items.clear();
    }
    let facts = CallFacts {
        version_source,
        duration: started.elapsed(),
        observed_at: SystemTime::now(),
    };
    metrics::ProviderCallFinished {
        tenant,
        provider: &invocation.provider_id,
        status: outcome.status.as_str(),
        detail: outcome.detail.as_deref(),
        duration: facts.duration,
    }
    .emit();
    (outcome, facts)
}

async fn invoke_live(
    runtime: &ProjectRuntime,
    invocation: &Invocation,
    turn_deadline: Instant,
) -> (Outcome, Option<VersionSource>) {
    let fail = |detail: &str| {
        (
            Outcome::status(
                ProviderStatus::Unavailable,
                Some(detail.to_owned()),
                Source::Live,
            ),
            None,
        )
    };
    let Some(handle) = runtime.providers.get(&invocation.provider_id) else {
        // Gating only plans bound providers.
        return (
            Outcome::status(ProviderStatus::NotBound, None, Source::Live),
            None,
        );
    };
    // Admission never waits: no free permit is an immediate OVERLOADED.
    let grant = match handle.gate.acquire() {
        Ok(grant) => grant,
        Err(Refusal::CircuitOpen) => return fail(detail::CIRCUIT_OPEN),
        Err(Refusal::Overloaded) => return fail(detail::OVERLOADED),
    };
    let provider_deadline = Instant::now() + grant.timeout;
    let call = LookupCall {
        provider: &invocation.provider_id,
        key: &invocation.key,
        value: &invocation.value,
        limit: invocation.limit,
        deadline: provider_deadline.min(turn_deadline),
    };
    let mut outcome = grant.implementation.lookup(&call).await;
    drop(grant.permit);
    // A call cut short by the turn's own (shorter) deadline says nothing about the
    // provider: a client asking for tight deadlines must not open the circuit for all.
    let cut_by_turn =
        turn_deadline < provider_deadline && outcome.status == ProviderStatus::Timeout;
    let result = if cut_by_turn {
        CallResult::Neutral
    } else {
        classify(outcome.status, outcome.detail.as_deref())
    };
    handle.gate.report(grant.ticket, result);
    if outcome.status != ProviderStatus::Ok && outcome.status != ProviderStatus::NotFound {
        tracing::warn!(
            provider = %invocation.provider_id,
            status = outcome.status.as_str(),
            detail = outcome.detail.as_deref().unwrap_or(""),
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

/// Registers items that do not fit in the tenant's handle store.
struct StoreSink<'a> {
    store: &'a HandleStore,
    tenant: &'a str,
}

impl HandleSink for StoreSink<'_> {
    fn offer(&mut self, _layer: &str, _provider: &str, item: &Item) -> Option<HandleRef> {
        self.store
            .register(self.tenant, HandleMaterial::Items(vec![item.clone()]), std::time::Instant::now())
            .inspect_err(|error| tracing::warn!(tenant = %self.tenant, error = %error, "handle not registered"))
            .ok()
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

#[allow(clippy::too_many_arguments)]
fn respond(
    runtime: &ProjectRuntime,
    invocations: &[Invocation],
    facts: &[CallFacts],
    result: TurnResult,
    locators: Locators,
    request: &TurnRequest,
    profile: &str,
    turn_id: String,
    duration: Duration,
) -> TurnResponse {
    let facts_of = |provider: &str| {
        invocations
            .iter()
            .position(|i| i.provider_id == provider)
            .map(|i| &facts[i])
    };
    let providers = result
        .providers
        .into_iter()
        .map(|p| {
            let facts = facts_of(&p.id);
            ProviderReport {
                version_source: facts.and_then(|f| f.version_source),
                duration_ms: facts.map(|f| f.duration.as_millis() as u64),
                version: p.version,
                id: p.id,
                status: p.status,
                detail: p.detail,
                source: p.source,
                currentness: p.currentness,
                revision: p.revision,
                items: p.items,
            }
        })
        .collect();
    TurnResponse {
        turn_id,
        project: runtime.project.id().to_owned(),
        project_version: runtime.project.doc.version.clone(),
        build_digest: runtime.project.digest.clone(),
        binding_revision: runtime
            .binding
            .as_ref()
            .map(|(revision, _)| revision.clone()),
        binding_digest: runtime.binding.as_ref().map(|(_, digest)| digest.clone()),
        profile: profile.to_owned(),
        objective: request.objective.clone(),
        consumer: request.consumer.clone(),
        blocked: result.blocked,
        blocking_layers: result.blocking_layers,
        layers: result
            .layers
            .into_iter()
            .map(|l| LayerReport {
                id: l.id,
                status: l.status,
                reason: l.reason,
                required: l.required,
                providers: l.providers,
                missing_inputs: l.missing_inputs,
                currentness: l.currentness,
            })
            .collect(),
        providers,
        selections: result
            .selections
            .into_iter()
            .zip(locators.selections)
            .map(|(s, locator)| SelectionReport {
                layer: s.layer,
                locator,
                provider: s.provider,
                fingerprint: Some(s.fingerprint),
                bytes: s.bytes,
                truncated: s.truncated,
                handle: s.handle,
            })
            .collect(),
        cuts: result
            .cuts
            .into_iter()
            .zip(locators.cuts)
            .map(|(c, locator)| CutReport {
                layer: c.layer,
                locator,
                provider: c.provider,
                action: c.action,
                bytes_before: c.bytes_before,
                bytes_after: c.bytes_after,
            })
            .collect(),
        budget: BudgetReport {
            max_bytes: result.budget.max_bytes,
            used_bytes: result.budget.used_bytes,
        },
        rendered: result.rendered,
        rendered_digest: result.rendered_digest,
        duration_ms: duration.as_millis() as u64,
    }
}
