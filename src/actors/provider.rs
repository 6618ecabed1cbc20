//! `ProviderActor`: owns one binding's implementation (HTTP client or SQLite pool), its
//! concurrency permits, circuit breaker, timeout and readiness.
//!
//! It never runs lookups itself. A caller sends `Acquire`; the actor consults the
//! breaker and the permits and answers with a `Grant` (implementation handle, permit,
//! breaker ticket) or a `Refusal`. The caller runs the I/O on its own thread — so no
//! single actor thread caps a provider's throughput — and sends `Report` with the
//! result. Mailbox capacity is set explicitly (`MAILBOX_CAPACITY`); callers use `send`
//! with a deadline, and a full mailbox is an `OVERLOADED` outcome. On `Shutdown` the
//! actor closes its pool and stops.

use crate::contract::VersionSource;
use crate::providers::Implementation;
use crate::resilience::breaker::{
    Admission, Breaker, BreakerSnapshot, BreakerState, CallResult, Ticket, Transition,
};
use actix::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Messages a provider actor's mailbox holds at most; more is back-pressure.
pub const MAILBOX_CAPACITY: usize = 1024;
/// How often readiness is probed (`describe` for HTTP).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(15);

pub struct ProviderActor {
    tenant: String,
    provider: String,
    implementation: Implementation,
    timeout: Duration,
    /// Bounds lookups in flight against this provider; a caller that finds none free
    /// fails fast with `OVERLOADED` instead of queueing.
    permits: Arc<Semaphore>,
    max_concurrency: usize,
    breaker: Breaker,
    binding_version: Option<String>,
    readiness: Readiness,
    /// A probe is running; probes never overlap.
    probing: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Readiness {
    /// `None` until the first probe finished.
    ready: Option<bool>,
    problem: Option<String>,
    described_version: Option<String>,
}

impl ProviderActor {
    pub fn new(
        tenant: &str,
        provider: &str,
        implementation: Implementation,
        binding: &crate::config::ProviderBinding,
    ) -> Self {
        ProviderActor {
            tenant: tenant.to_owned(),
            provider: provider.to_owned(),
            implementation,
            timeout: binding.timeout,
            permits: Arc::new(Semaphore::new(binding.max_concurrency)),
            max_concurrency: binding.max_concurrency,
            breaker: Breaker::new(binding.circuit, Instant::now()),
            binding_version: binding.version.clone(),
            readiness: Readiness::default(),
            probing: false,
        }
    }

    /// The version to report when the response carries none: `describe`, then binding.
    fn fallback_version(&self) -> Option<(String, VersionSource)> {
        self.readiness
            .described_version
            .clone()
            .map(|v| (v, VersionSource::Describe))
            .or_else(|| {
                self.binding_version
                    .clone()
                    .map(|v| (v, VersionSource::Binding))
            })
    }

    /// Publishes calls in flight and the circuit state as gauges.
    fn observed(&self, now: Instant) {
        crate::telemetry::metrics::ProviderStateObserved {
            tenant: &self.tenant,
            provider: &self.provider,
            in_flight: self.max_concurrency - self.permits.available_permits(),
            circuit: self.breaker.state(now).as_gauge(),
        }
        .emit();
    }

    fn log_transition(&self, transition: Transition) {
        if transition.to == BreakerState::Open {
            tracing::warn!(tenant = %self.tenant, provider = %self.provider, from = transition.from.as_str(), "circuit opened");
        } else {
            tracing::info!(tenant = %self.tenant, provider = %self.provider, from = transition.from.as_str(), to = transition.to.as_str(), "circuit changed");
        }
    }

    fn probe(&mut self, ctx: &mut Context<Self>) {
        if self.probing {
            return;
        }
        self.probing = true;
        let implementation = self.implementation.clone();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let probe = async move { implementation.probe(deadline).await };
        ctx.spawn(probe.into_actor(self).map(|result, actor, _| {
            actor.probing = false;
            let was_ready = actor.readiness.ready;
            match result {
                Ok(report) => {
                    actor.readiness.ready = Some(true);
                    actor.readiness.problem = None;
                    actor.readiness.described_version = report.version;
                }
                Err(problem) => {
                    actor.readiness.ready = Some(false);
                    actor.readiness.problem = Some(problem);
                }
            }
            if was_ready != actor.readiness.ready {
                tracing::info!(
                    tenant = %actor.tenant,
                    provider = %actor.provider,
                    ready = actor.readiness.ready == Some(true),
                    problem = actor.readiness.problem.as_deref().unwrap_or(""),
                    "provider readiness changed"
                );
            }
        }));
    }
}

impl Actor for ProviderActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.probe(ctx);
        ctx.run_interval(PROBE_INTERVAL, |actor, ctx| actor.probe(ctx));
    }
}

/// Ask to make one lookup now.
#[derive(Debug)]
pub struct Acquire;

impl Message for Acquire {
    type Result = Result<Grant, Refusal>;
}

/// Permission to make one lookup: the implementation handle, a concurrency permit (held
/// until the call ends) and the breaker ticket to report with.
pub struct Grant {
    pub implementation: Implementation,
    pub permit: OwnedSemaphorePermit,
    pub ticket: Ticket,
    pub timeout: Duration,
    /// Version to report when the response has none, and where it comes from.
    pub fallback_version: Option<(String, VersionSource)>,
}

/// Why a lookup was not granted. The provider is not contacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The circuit is open (or its half-open probes are all in flight).
    CircuitOpen,
    /// Every concurrency permit is in use.
    Overloaded,
}

impl Handler<Acquire> for ProviderActor {
    type Result = MessageResult<Acquire>;

    fn handle(&mut self, _: Acquire, _: &mut Self::Context) -> Self::Result {
        let now = Instant::now();
        if let Some(transition) = self.breaker.advance(now) {
            self.log_transition(transition);
        }
        let ticket = match self.breaker.admit(now) {
            Admission::Allowed(ticket) => ticket,
            Admission::Rejected { .. } => return MessageResult(Err(Refusal::CircuitOpen)),
        };
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            // The admitted call never happens: release its breaker slot.
            self.breaker.record(ticket, CallResult::Neutral, now);
            return MessageResult(Err(Refusal::Overloaded));
        };
        self.observed(now);
        MessageResult(Ok(Grant {
            implementation: self.implementation.clone(),
            permit,
            ticket,
            timeout: self.timeout,
            fallback_version: self.fallback_version(),
        }))
    }
}

/// The result of a granted lookup, for the breaker.
#[derive(Debug)]
pub struct Report {
    pub ticket: Ticket,
    pub result: CallResult,
}

impl Message for Report {
    type Result = ();
}

impl Handler<Report> for ProviderActor {
    type Result = ();

    fn handle(&mut self, report: Report, _: &mut Self::Context) {
        let now = Instant::now();
        if let Some(transition) = self.breaker.record(report.ticket, report.result, now) {
            self.log_transition(transition);
        }
        self.observed(now);
    }
}

/// Asks for the actor's observable state.
#[derive(Debug)]
pub struct Observe;

impl Message for Observe {
    type Result = ProviderSnapshot;
}

/// What a provider actor shows to health checks and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSnapshot {
    pub tenant: String,
    pub provider: String,
    pub type_name: &'static str,
    pub breaker: BreakerSnapshot,
    pub in_flight: usize,
    pub max_concurrency: usize,
    /// `None` until the first probe finished.
    pub ready: Option<bool>,
    pub problem: Option<String>,
    pub version: Option<(String, VersionSource)>,
}

impl Handler<Observe> for ProviderActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(ProviderSnapshot {
            tenant: self.tenant.clone(),
            provider: self.provider.clone(),
            type_name: self.implementation.type_name(),
            breaker: self.breaker.snapshot(Instant::now()),
            in_flight: self.max_concurrency - self.permits.available_permits(),
            max_concurrency: self.max_concurrency,
            ready: self.readiness.ready,
            problem: self.readiness.problem.clone(),
            version: self.fallback_version(),
        })
    }
}

/// Closes the implementation's pool and stops the actor (ordered shutdown).
#[derive(Debug)]
pub struct Shutdown;

impl Message for Shutdown {
    type Result = ();
}

impl Handler<Shutdown> for ProviderActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.permits.close();
        self.implementation.close();
        ctx.stop();
    }
}
