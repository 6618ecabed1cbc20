//! `ProviderActor` and its `ProviderGate`: one per provider binding, owning the
//! binding's implementation (HTTP client or SQLite pool), its timeout, its concurrency
//! permits, its circuit breaker and its readiness.
//!
//! The actor never runs lookups and takes no message per call. It creates the gate —
//! permits and breaker behind a lock held for microseconds, never across an await — and
//! shares it with the coordinators, which admit a call, run the I/O and report its
//! result on their own worker thread. So no actor thread caps a provider's throughput,
//! and a call costs no cross-thread wake-up (the load bench measured the earlier
//! message-per-call grant at a fifth of ctxd's CPU). The actor itself runs the periodic
//! readiness probe, answers `Observe` and, on `Shutdown`, closes the permits and the pool
//! and stops. Its mailbox (capacity `MAILBOX_CAPACITY`) only carries those.

use crate::contract::VersionSource;
use crate::providers::Implementation;
use crate::providers::untrusted::{Masks, UntrustedText};
use crate::resilience::breaker::{
    Admission, Breaker, BreakerSnapshot, BreakerState, CallResult, Ticket, Transition,
};
use crate::telemetry::metrics::{ProviderBound, ProviderSeries, ProviderStateObserved};
use actix::prelude::*;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Messages a provider actor's mailbox holds at most.
pub(crate) const MAILBOX_CAPACITY: usize = 64;
/// How often readiness is probed (`describe` for HTTP).
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(15);

/// Admission to one provider binding, shared by its actor and every coordinator.
pub(crate) struct ProviderGate {
    tenant: String,
    provider: String,
    /// Shared, not cloned, per call: an implementation holds compiled patterns whose
    /// clones would each build a fresh match cache.
    implementation: Arc<Implementation>,
    timeout: Duration,
    /// Bounds lookups in flight against this provider; a caller that finds none free
    /// fails fast with `OVERLOADED` instead of queueing.
    permits: Arc<Semaphore>,
    max_concurrency: usize,
    /// The pure state machine; the lock is only ever held for one admit or record.
    breaker: Mutex<Breaker>,
    binding_version: Option<String>,
    /// The version the last successful `describe` reported.
    described_version: Mutex<Option<String>>,
    /// The binding's own secrets: every text from its upstream (a probe's problem) is
    /// shown through them.
    masks: Masks,
    /// Calls in flight as last published. The gauges are shared with the provider id's
    /// other gates (other tenants'), so a gate publishes changes, never values; only
    /// written under the breaker's lock, so its changes arrive in order.
    published_in_flight: AtomicUsize,
    /// The circuit state as last published ([`NOT_PUBLISHED`] before the first time);
    /// under the breaker's lock too.
    published_circuit: AtomicU8,
    /// Its metric series of fixed labels, found once.
    pub(crate) series: ProviderSeries,
}

/// `published_circuit` before the gate's first publication.
const NOT_PUBLISHED: u8 = u8::MAX;

fn circuit_code(state: BreakerState) -> u8 {
    match state {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    }
}

fn circuit_of(code: u8) -> Option<BreakerState> {
    match code {
        0 => Some(BreakerState::Closed),
        1 => Some(BreakerState::Open),
        2 => Some(BreakerState::HalfOpen),
        _ => None,
    }
}

/// Permission to make one lookup: the implementation handle, a concurrency permit (held
/// until the call ends) and the breaker ticket to report with.
pub(crate) struct Grant {
    pub(crate) implementation: Arc<Implementation>,
    pub(crate) permit: OwnedSemaphorePermit,
    pub(crate) ticket: Ticket,
    pub(crate) timeout: Duration,
    /// Version to report when the response has none, and where it comes from.
    pub(crate) fallback_version: Option<(String, VersionSource)>,
}

/// Why a lookup was not granted. The provider is not contacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The circuit is open (or its half-open probes are all in flight).
    CircuitOpen,
    /// Every concurrency permit is in use.
    Overloaded,
}

impl ProviderGate {
    pub(crate) fn new(
        tenant: &str,
        provider: &str,
        implementation: Implementation,
        binding: &crate::config::ProviderBinding,
        masks: Masks,
    ) -> Self {
        let now = Instant::now();
        let gate = ProviderGate {
            tenant: tenant.to_owned(),
            provider: provider.to_owned(),
            implementation: Arc::new(implementation),
            timeout: binding.timeout,
            permits: Arc::new(Semaphore::new(binding.max_concurrency)),
            max_concurrency: binding.max_concurrency,
            breaker: Mutex::new(Breaker::new(binding.circuit, now)),
            binding_version: binding.version.clone(),
            described_version: Mutex::new(None),
            masks,
            published_in_flight: AtomicUsize::new(0),
            published_circuit: AtomicU8::new(NOT_PUBLISHED),
            series: ProviderSeries::new(tenant, provider),
        };
        // Its series exist from start-up: calls at zero, a closed circuit, none in flight.
        ProviderBound { tenant, provider }.emit();
        gate.observed(now);
        gate
    }

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        // The breaker is plain data: a panic elsewhere cannot leave it half-updated.
        self.breaker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits one lookup now, or refuses it without contacting the provider.
    pub(crate) fn acquire(&self) -> Result<Grant, Refusal> {
        let now = Instant::now();
        let ticket = {
            let mut breaker = self.breaker();
            if let Some(transition) = breaker.advance(now) {
                self.log_transition(transition);
            }
            match breaker.admit(now) {
                Admission::Allowed(ticket) => ticket,
                Admission::Rejected { .. } => return Err(Refusal::CircuitOpen),
            }
        };
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            // The admitted call never happens: release its breaker slot.
            self.breaker().record(ticket, CallResult::Neutral, now);
            return Err(Refusal::Overloaded);
        };
        self.observed(now);
        Ok(Grant {
            implementation: Arc::clone(&self.implementation),
            permit,
            ticket,
            timeout: self.timeout,
            fallback_version: self.fallback_version(),
        })
    }

    /// Records a granted lookup's result in the breaker.
    pub(crate) fn report(&self, ticket: Ticket, result: CallResult) {
        let now = Instant::now();
        let transition = self.breaker().record(ticket, result, now);
        if let Some(transition) = transition {
            self.log_transition(transition);
        }
        self.observed(now);
    }

    /// The version to report when the response carries none: `describe`, then binding.
    fn fallback_version(&self) -> Option<(String, VersionSource)> {
        let described = self
            .described_version
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        described.map(|v| (v, VersionSource::Describe)).or_else(|| {
            self.binding_version
                .clone()
                .map(|v| (v, VersionSource::Binding))
        })
    }

    fn in_flight(&self) -> usize {
        self.max_concurrency - self.permits.available_permits()
    }

    /// Publishes what changed of calls in flight and the circuit state since the last
    /// publication, under the breaker's lock.
    fn observed(&self, now: Instant) {
        let breaker = self.breaker();
        let circuit = breaker.state(now);
        let in_flight = self.in_flight();
        let before_in_flight = self.published_in_flight.swap(in_flight, Ordering::Relaxed);
        let before_circuit = self
            .published_circuit
            .swap(circuit_code(circuit), Ordering::Relaxed);
        ProviderStateObserved {
            tenant: &self.tenant,
            provider: &self.provider,
            in_flight: (before_in_flight, in_flight),
            circuit: (circuit_of(before_circuit), circuit),
        }
        .emit_to(&self.series);
        drop(breaker);
    }

    fn log_transition(&self, transition: Transition) {
        if transition.to == BreakerState::Open {
            tracing::warn!(tenant = %self.tenant, provider = %self.provider, from = transition.from.as_str(), "circuit opened");
        } else {
            tracing::info!(tenant = %self.tenant, provider = %self.provider, from = transition.from.as_str(), to = transition.to.as_str(), "circuit changed");
        }
    }
}

pub(crate) struct ProviderActor {
    gate: Arc<ProviderGate>,
    readiness: Readiness,
    /// A probe is running; probes never overlap.
    probing: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Readiness {
    /// `None` until the first probe finished.
    ready: Option<bool>,
    problem: Option<String>,
}

impl ProviderActor {
    pub(crate) fn new(gate: Arc<ProviderGate>) -> Self {
        ProviderActor {
            gate,
            readiness: Readiness::default(),
            probing: false,
        }
    }

    fn probe(&mut self, ctx: &mut Context<Self>) {
        if self.probing {
            return;
        }
        self.probing = true;
        let implementation = Arc::clone(&self.gate.implementation);
        let deadline = tokio::time::Instant::now() + self.gate.timeout;
        let probe = async move { implementation.probe(deadline).await };
        ctx.spawn(probe.into_actor(self).map(|result, actor, _| {
            actor.probing = false;
            let was_ready = actor.readiness.ready;
            match result {
                Ok(report) => {
                    actor.readiness.ready = Some(true);
                    actor.readiness.problem = None;
                    *actor
                        .gate
                        .described_version
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = report.version;
                }
                Err(problem) => {
                    actor.readiness.ready = Some(false);
                    // It may quote the provider or its database: kept (for the log and
                    // `/readyz`) as untrusted text, the binding's own secrets masked.
                    actor.readiness.problem =
                        Some(UntrustedText::new(&problem, &actor.gate.masks).into_string());
                }
            }
            if was_ready != actor.readiness.ready {
                // Becoming unready is what an operator must see: turns through this
                // provider now fail.
                match actor.readiness.problem.as_deref() {
                    None => tracing::info!(
                        tenant = %actor.gate.tenant,
                        provider = %actor.gate.provider,
                        ready = true,
                        "provider readiness changed"
                    ),
                    Some(problem) => tracing::warn!(
                        tenant = %actor.gate.tenant,
                        provider = %actor.gate.provider,
                        ready = false,
                        problem,
                        "provider readiness changed"
                    ),
                }
            }
        }));
    }
}

impl Actor for ProviderActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.gate.implementation.start();
        self.probe(ctx);
        ctx.run_interval(PROBE_INTERVAL, |actor, ctx| actor.probe(ctx));
    }
}

/// Asks for the actor's observable state.
#[derive(Debug)]
pub(crate) struct Observe;

impl Message for Observe {
    type Result = ProviderSnapshot;
}

/// What a provider actor shows to health checks and tests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProviderSnapshot {
    pub(crate) tenant: String,
    pub(crate) provider: String,
    pub(crate) type_name: &'static str,
    pub(crate) breaker: BreakerSnapshot,
    pub(crate) in_flight: usize,
    pub(crate) max_concurrency: usize,
    /// `None` until the first probe finished.
    pub(crate) ready: Option<bool>,
    pub(crate) problem: Option<String>,
    pub(crate) version: Option<(String, VersionSource)>,
}

impl Handler<Observe> for ProviderActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let gate = &self.gate;
        MessageResult(ProviderSnapshot {
            tenant: gate.tenant.clone(),
            provider: gate.provider.clone(),
            type_name: gate.implementation.type_name(),
            breaker: gate.breaker().snapshot(Instant::now()),
            in_flight: gate.in_flight(),
            max_concurrency: gate.max_concurrency,
            ready: self.readiness.ready,
            problem: self.readiness.problem.clone(),
            version: gate.fallback_version(),
        })
    }
}

/// Closes the permits and the implementation's pool and stops the actor (ordered
/// shutdown): a caller that still holds the gate is refused `OVERLOADED`.
#[derive(Debug)]
pub(crate) struct Shutdown;

impl Message for Shutdown {
    type Result = ();
}

impl Handler<Shutdown> for ProviderActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.gate.permits.close();
        self.gate.implementation.close();
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CircuitSettings, ProviderBinding, ProviderKind};
    use crate::providers::PoolSettings;
    use crate::providers::http::HttpProvider;

    fn gate(max_concurrency: usize, circuit: CircuitSettings) -> ProviderGate {
        gate_of("acme", max_concurrency, circuit)
    }

    fn gate_of(tenant: &str, max_concurrency: usize, circuit: CircuitSettings) -> ProviderGate {
        let endpoint = url::Url::parse("http://127.0.0.1:9/context").unwrap();
        let implementation = Implementation::Http(
            HttpProvider::new(
                endpoint.clone(),
                None,
                &PoolSettings::default(),
                Duration::from_millis(100),
            )
            .unwrap(),
        );
        let binding = ProviderBinding {
            id: "crm".into(),
            kind: ProviderKind::Http {
                endpoint,
                secret_env: None,
            },
            timeout: Duration::from_millis(100),
            max_concurrency,
            pool: PoolSettings::default(),
            circuit,
            cache: Default::default(),
            secrets: Default::default(),
            retention: Default::default(),
            retention_ttl: Duration::from_secs(60),
            version: Some("v7".into()),
        };
        ProviderGate::new(tenant, "crm", implementation, &binding, Masks::none())
    }

    #[test]
    fn one_tenants_open_circuit_is_not_closed_by_anothers_calls() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let circuit = CircuitSettings {
            consecutive_failures: 1,
            ..CircuitSettings::default()
        };
        metrics::with_local_recorder(&recorder, || {
            let acme = gate_of("acme", 8, circuit);
            let globex = gate_of("globex", 8, circuit);
            let grant = acme.acquire().unwrap();
            drop(grant.permit);
            acme.report(grant.ticket, CallResult::Failure);
            assert_eq!(acme.acquire().err(), Some(Refusal::CircuitOpen));
            // globex's calls succeed afterwards, while acme's circuit stays open.
            for _ in 0..3 {
                let grant = globex.acquire().unwrap();
                drop(grant.permit);
                globex.report(grant.ticket, CallResult::Success);
            }
            let _held = globex.acquire().unwrap();
            let text = handle.render();
            for expected in [
                "ctxd_provider_circuits{provider=\"crm\",state=\"open\"} 1\n",
                "ctxd_provider_circuits{provider=\"crm\",state=\"closed\"} 1\n",
                "ctxd_provider_in_flight{provider=\"crm\"} 1\n",
            ] {
                assert!(text.contains(expected), "missing {expected:?} in\n{text}");
            }
            assert!(!text.contains("ctxd_provider_circuit_state"), "{text}");
        });
    }

    #[test]
    fn permits_bound_calls_in_flight_and_free_on_drop() {
        let gate = gate(2, CircuitSettings::default());
        let first = gate.acquire().unwrap();
        let second = gate.acquire().unwrap();
        assert_eq!(gate.in_flight(), 2);
        assert_eq!(gate.acquire().err(), Some(Refusal::Overloaded));
        drop(first.permit);
        gate.report(first.ticket, CallResult::Success);
        assert!(gate.acquire().is_ok());
        drop(second);
        assert_eq!(
            gate.acquire().unwrap().fallback_version,
            Some(("v7".into(), VersionSource::Binding))
        );
    }

    #[test]
    fn reported_failures_open_the_circuit_without_contacting_the_provider() {
        let circuit = CircuitSettings {
            consecutive_failures: 2,
            ..CircuitSettings::default()
        };
        let gate = gate(8, circuit);
        for _ in 0..2 {
            let grant = gate.acquire().unwrap();
            gate.report(grant.ticket, CallResult::Failure);
        }
        assert_eq!(gate.acquire().err(), Some(Refusal::CircuitOpen));
        assert_eq!(gate.in_flight(), 0, "a refused call takes no permit");
    }

    #[test]
    fn an_overloaded_admission_releases_its_half_open_probe() {
        let circuit = CircuitSettings {
            consecutive_failures: 1,
            open: Duration::ZERO,
            half_open_probes: 1,
            ..CircuitSettings::default()
        };
        let gate = gate(1, circuit);
        let grant = gate.acquire().unwrap();
        drop(grant.permit);
        gate.report(grant.ticket, CallResult::Failure);
        // Half-open now: the one probe is admitted, but no permit is free.
        let holder = Arc::clone(&gate.permits).try_acquire_owned().unwrap();
        assert_eq!(gate.acquire().err(), Some(Refusal::Overloaded));
        drop(holder);
        let probe = gate.acquire().expect("the probe slot was released");
        assert!(probe.ticket.is_probe());
    }
}
