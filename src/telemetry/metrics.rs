//! Prometheus metrics: the metric names (constants), one typed event per thing that
//! happens (`emit()` records it), and the recorder's installation. Labels are of low
//! cardinality — provider, status, detail, outcome, and tenant only when the config
//! enables it — never an id or a value.
//!
//! Series a dashboard or an alert watches exist from start-up, at zero, instead of
//! appearing at their first event: the turn outcomes of [`TURN_OUTCOMES_AT_START`]
//! (without the tenant label), the trace writer's counters, the response caches' bytes,
//! per bound provider its calls by status, calls in flight and circuits by state
//! ([`ProviderBound`]), and per cached provider its hits, misses, coalesced waits and
//! evictions ([`CacheMetrics::bound`]).
//!
//! A series is written by one source or summed from several, never overwritten by
//! several: each provider gate publishes its calls in flight and its circuit state as
//! changes (deltas), so `ctxd_provider_in_flight` and `ctxd_provider_circuits` add up
//! every gate of a provider id whatever the labels.

use crate::contract::ProviderStatus;
use crate::resilience::breaker::BreakerState;
use crate::resilience::cache::{CacheObserver, Lookup, Removal};
use metrics::Label;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(crate) const TURNS: &str = "ctxd_turns_total";
pub(crate) const TURN_DURATION: &str = "ctxd_turn_duration_seconds";
pub(crate) const COORDINATOR_OVERHEAD: &str = "ctxd_coordinator_overhead_seconds";
pub(crate) const PROVIDER_CALLS: &str = "ctxd_provider_calls_total";
pub(crate) const PROVIDER_CALL_DURATION: &str = "ctxd_provider_call_duration_seconds";
pub(crate) const PROVIDER_IN_FLIGHT: &str = "ctxd_provider_in_flight";
pub(crate) const PROVIDER_CIRCUIT_STATE: &str = "ctxd_provider_circuit_state";
pub(crate) const PROVIDER_CIRCUITS: &str = "ctxd_provider_circuits";
pub(crate) const TRACE_QUEUE_DEPTH: &str = "ctxd_trace_queue_depth";
pub(crate) const TRACE_BATCHES: &str = "ctxd_trace_batches_total";
pub(crate) const TRACE_RECORDS: &str = "ctxd_trace_records_total";
pub(crate) const TRACE_WRITE_DURATION: &str = "ctxd_trace_write_duration_seconds";
pub(crate) const TRACE_BACKPRESSURE: &str = "ctxd_trace_backpressure_total";
pub(crate) const TRACE_PRUNED: &str = "ctxd_trace_records_pruned_total";
pub(crate) const TRACE_STORE_BYTES: &str = "ctxd_trace_store_bytes";
pub(crate) const TRACE_DISK_AVAILABLE: &str = "ctxd_trace_disk_available_bytes";
pub(crate) const TRACE_OLDEST_AGE: &str = "ctxd_trace_oldest_record_age_seconds";
pub(crate) const TRACE_STORE_OUT_OF_ROOM: &str = "ctxd_trace_store_out_of_room";
pub(crate) const HANDLE_OPERATIONS: &str = "ctxd_handle_operations_total";
pub(crate) const REPLAYS_RATE_LIMITED: &str = "ctxd_replays_rate_limited_total";
pub(crate) const CACHE_HITS: &str = "ctxd_cache_hits_total";
pub(crate) const CACHE_MISSES: &str = "ctxd_cache_misses_total";
pub(crate) const CACHE_COALESCED: &str = "ctxd_cache_coalesced_total";
pub(crate) const CACHE_EVICTIONS: &str = "ctxd_cache_evictions_total";
pub(crate) const CACHE_BYTES: &str = "ctxd_cache_bytes";

/// Buckets of the coordinator overhead, in seconds: its target is well under 1 ms, so
/// the buckets are finest between 0.1 and 0.5 ms, where its 99th percentile lives
/// (the load bench's target: ≤ 0.3 ms at half saturation).
pub(crate) const OVERHEAD_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_15, 0.000_2, 0.000_25, 0.000_3, 0.000_4, 0.000_5, 0.001,
    0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// Turn outcomes exported at zero from start-up when metrics carry no tenant label (with
/// it, a tenant's series appear at its first turn): the answers and the refusals an
/// alert watches. Other outcomes appear when they first happen.
pub(crate) const TURN_OUTCOMES_AT_START: &[&str] = &[
    "answered",
    "blocked",
    "bad_request",
    "unauthorized",
    "not_found",
    "payload_too_large",
    "too_many_turns",
    "runtime_unavailable",
];

/// Every circuit state, for the per-provider count of circuits in each.
const CIRCUIT_STATES: [BreakerState; 3] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
];

/// Whether metrics carry a `tenant` label (config `metrics.tenant_label`).
static TENANT_LABEL: AtomicBool = AtomicBool::new(false);

/// Installs the process-wide recorder: with a `tenant` label on the tenant's series when
/// `tenant_label` (config `metrics.tenant_label`), and `duration_buckets_ms` as the
/// bucket bounds of every duration histogram. The exporter's own HTTP listener is not
/// used: `GET /metrics` renders from the handle.
pub(crate) fn install(
    tenant_label: bool,
    duration_buckets_ms: &[f64],
) -> anyhow::Result<PrometheusHandle> {
    TENANT_LABEL.store(tenant_label, Ordering::Relaxed);
    let seconds: Vec<f64> = duration_buckets_ms.iter().map(|ms| ms / 1000.0).collect();
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(COORDINATOR_OVERHEAD.to_owned()),
            OVERHEAD_BUCKETS,
        )?
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &seconds)?
        .install_recorder()?;
    describe();
    zero_at_start(tenant_label);
    Ok(handle)
}

/// Registers at zero the series that exist whatever happens (see the module docs).
fn zero_at_start(tenant_label: bool) {
    if !tenant_label {
        for outcome in TURN_OUTCOMES_AT_START {
            metrics::counter!(TURNS, "outcome" => *outcome).increment(0);
        }
        metrics::counter!(REPLAYS_RATE_LIMITED).increment(0);
    }
    for counter in [
        TRACE_BATCHES,
        TRACE_RECORDS,
        TRACE_BACKPRESSURE,
        TRACE_PRUNED,
    ] {
        metrics::counter!(counter).increment(0);
    }
    metrics::gauge!(TRACE_QUEUE_DEPTH).set(0.0);
    metrics::gauge!(TRACE_STORE_OUT_OF_ROOM).increment(0.0);
    if !tenant_label {
        // Summed from every tenant's store as changes; with the tenant label, a
        // tenant's gauge appears when its first cached provider is bound.
        metrics::gauge!(CACHE_BYTES).increment(0.0);
    }
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        TURNS,
        "Turns by outcome (answered, blocked, or the API error code)"
    );
    describe_histogram!(TURN_DURATION, Unit::Seconds, "Time to answer a turn");
    describe_histogram!(
        COORDINATOR_OVERHEAD,
        Unit::Seconds,
        "Turn time minus the slowest provider call"
    );
    describe_counter!(
        PROVIDER_CALLS,
        "Provider calls by provider, status and detail"
    );
    describe_histogram!(
        PROVIDER_CALL_DURATION,
        Unit::Seconds,
        "Duration of provider calls"
    );
    describe_gauge!(PROVIDER_IN_FLIGHT, "Provider calls in flight");
    describe_gauge!(
        PROVIDER_CIRCUIT_STATE,
        "Circuit breaker state per tenant and provider (with the tenant label only): 0 closed, 1 open, 2 half-open"
    );
    describe_gauge!(
        PROVIDER_CIRCUITS,
        "Circuit breakers of a provider id (one per tenant binding) in each state"
    );
    describe_gauge!(
        TRACE_QUEUE_DEPTH,
        "Turn traces waiting for the trace writer"
    );
    describe_counter!(TRACE_BATCHES, "Trace batches committed");
    describe_counter!(
        TRACE_RECORDS,
        "Trace records committed (turn and provider records)"
    );
    describe_histogram!(
        TRACE_WRITE_DURATION,
        Unit::Seconds,
        "Time to commit one trace batch"
    );
    describe_counter!(
        TRACE_BACKPRESSURE,
        "Turns refused because their trace could not be queued: the queue stayed full, or the store or its disk had no room"
    );
    describe_counter!(
        TRACE_PRUNED,
        "Trace records (turn and provider records) deleted past their keep"
    );
    describe_gauge!(
        TRACE_STORE_BYTES,
        Unit::Bytes,
        "Bytes the trace store holds: pages in use and the WAL"
    );
    describe_gauge!(
        TRACE_DISK_AVAILABLE,
        Unit::Bytes,
        "Bytes available on the trace store's filesystem"
    );
    describe_gauge!(
        TRACE_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest turn record in the trace store"
    );
    describe_gauge!(
        TRACE_STORE_OUT_OF_ROOM,
        "1 while the trace store or its disk has no room for another turn's trace (turns are refused with 503)"
    );
    describe_counter!(
        HANDLE_OPERATIONS,
        "Handle operations by operation and result"
    );
    describe_counter!(
        REPLAYS_RATE_LIMITED,
        "Replays refused with 429 by the per-tenant replay rate limit"
    );
    describe_counter!(
        CACHE_HITS,
        "Lookups of cached providers answered from the response cache"
    );
    describe_counter!(
        CACHE_MISSES,
        "Lookups of cached providers that called the provider (one upstream call each)"
    );
    describe_counter!(
        CACHE_COALESCED,
        "Lookups of cached providers that waited for an identical call in flight"
    );
    describe_counter!(
        CACHE_EVICTIONS,
        "Answers that left the response cache: cause size (the tenant's share was full) or expired"
    );
    describe_gauge!(
        CACHE_BYTES,
        "Bytes of answers the response caches hold (as the byte bound counts them)"
    );
}

fn with_tenant(tenant: &str, labels: Vec<Label>) -> Vec<Label> {
    labelled(TENANT_LABEL.load(Ordering::Relaxed), tenant, labels)
}

/// `labels`, plus the tenant's when metrics carry it.
fn labelled(tenant_label: bool, tenant: &str, mut labels: Vec<Label>) -> Vec<Label> {
    if tenant_label {
        labels.push(Label::new("tenant", tenant.to_owned()));
    }
    labels
}

/// A turn request ended: answered (possibly blocked) or refused with an API error.
pub(crate) struct TurnEnded<'a> {
    pub(crate) tenant: Option<&'a str>,
    /// `answered`, `blocked`, or the API error code in lowercase.
    pub(crate) outcome: &'static str,
}

impl TurnEnded<'_> {
    pub(crate) fn emit(&self) {
        let labels = vec![Label::new("outcome", self.outcome)];
        let labels = match self.tenant {
            Some(tenant) => with_tenant(tenant, labels),
            None => labels,
        };
        metrics::counter!(TURNS, labels).increment(1);
    }
}

/// A replay was refused by its tenant's replay rate limit.
pub(crate) struct ReplayRateLimited<'a> {
    pub(crate) tenant: &'a str,
}

impl ReplayRateLimited<'_> {
    pub(crate) fn emit(&self) {
        metrics::counter!(REPLAYS_RATE_LIMITED, with_tenant(self.tenant, Vec::new())).increment(1);
    }
}

/// A turn was assembled: its duration and the coordinator's own share of it.
pub(crate) struct TurnTimed<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) duration: Duration,
    /// Turn time minus the slowest provider call.
    pub(crate) overhead: Duration,
}

impl TurnTimed<'_> {
    pub(crate) fn emit(&self) {
        metrics::histogram!(TURN_DURATION, with_tenant(self.tenant, Vec::new()))
            .record(self.duration.as_secs_f64());
        metrics::histogram!(COORDINATOR_OVERHEAD, with_tenant(self.tenant, Vec::new()))
            .record(self.overhead.as_secs_f64());
    }
}

/// One provider gate's series whose labels never change — its calls in flight, its
/// call durations and its calls answered `OK` — found once, when the gate is created,
/// so that a call records into them instead of building labels and looking the series
/// up in the registry.
pub(crate) struct ProviderSeries {
    in_flight: metrics::Gauge,
    call_duration: metrics::Histogram,
    calls_ok: metrics::Counter,
}

impl ProviderSeries {
    pub(crate) fn new(tenant: &str, provider: &str) -> ProviderSeries {
        ProviderSeries::labelled(TENANT_LABEL.load(Ordering::Relaxed), tenant, provider)
    }

    fn labelled(tenant_label: bool, tenant: &str, provider: &str) -> ProviderSeries {
        let provider = Label::new("provider", provider.to_owned());
        let calls = vec![
            provider.clone(),
            Label::new("status", ProviderStatus::Ok.as_str()),
            Label::new("detail", ""),
        ];
        ProviderSeries {
            in_flight: metrics::gauge!(
                PROVIDER_IN_FLIGHT,
                labelled(tenant_label, tenant, vec![provider.clone()])
            ),
            call_duration: metrics::histogram!(
                PROVIDER_CALL_DURATION,
                labelled(tenant_label, tenant, vec![provider])
            ),
            calls_ok: metrics::counter!(PROVIDER_CALLS, labelled(tenant_label, tenant, calls)),
        }
    }
}

impl std::fmt::Debug for ProviderSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderSeries")
    }
}

/// One provider call finished (or failed fast).
pub(crate) struct ProviderCallFinished<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) status: &'static str,
    pub(crate) detail: Option<&'a str>,
    pub(crate) duration: Duration,
    /// The bound provider's series (none in fixture mode).
    pub(crate) series: Option<&'a ProviderSeries>,
}

impl ProviderCallFinished<'_> {
    pub(crate) fn emit(&self) {
        let seconds = self.duration.as_secs_f64();
        let provider = || Label::new("provider", self.provider.to_owned());
        match self.series {
            Some(series) => series.call_duration.record(seconds),
            None => metrics::histogram!(
                PROVIDER_CALL_DURATION,
                with_tenant(self.tenant, vec![provider()])
            )
            .record(seconds),
        }
        if let Some(series) = self.series
            && self.status == ProviderStatus::Ok.as_str()
            && self.detail.is_none()
        {
            series.calls_ok.increment(1);
            return;
        }
        let calls = with_tenant(
            self.tenant,
            vec![
                provider(),
                Label::new("status", self.status),
                Label::new("detail", self.detail.unwrap_or("").to_owned()),
            ],
        );
        metrics::counter!(PROVIDER_CALLS, calls).increment(1);
    }
}

/// A provider binding's gate was created: its series exist from now on, at zero — its
/// calls by status (detail empty), and its provider id's count of circuits in each
/// state.
pub(crate) struct ProviderBound<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) provider: &'a str,
}

impl ProviderBound<'_> {
    pub(crate) fn emit(&self) {
        self.emit_labelled(TENANT_LABEL.load(Ordering::Relaxed));
    }

    fn emit_labelled(&self, tenant_label: bool) {
        let provider = Label::new("provider", self.provider.to_owned());
        for status in ProviderStatus::ALL {
            let labels = vec![
                provider.clone(),
                Label::new("status", status.as_str()),
                Label::new("detail", ""),
            ];
            metrics::counter!(PROVIDER_CALLS, labelled(tenant_label, self.tenant, labels))
                .increment(0);
        }
        for state in CIRCUIT_STATES {
            circuits(self.provider, state).increment(0.0);
        }
    }
}

/// The gauge counting a provider id's circuits in `state`. Never tenant-labelled: it is
/// the aggregate that holds whatever the tenants' circuits do.
fn circuits(provider: &str, state: BreakerState) -> metrics::Gauge {
    metrics::gauge!(
        PROVIDER_CIRCUITS,
        "provider" => provider.to_owned(),
        "state" => state.as_str()
    )
}

/// A provider gate's calls in flight and circuit state, beside what it last published.
/// The gate publishes under its breaker's lock, so its own changes arrive in order.
pub(crate) struct ProviderStateObserved<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) provider: &'a str,
    /// Calls in flight: last published, and now.
    pub(crate) in_flight: (usize, usize),
    /// Circuit state: last published (`None` before the first publication), and now.
    pub(crate) circuit: (Option<BreakerState>, BreakerState),
}

impl ProviderStateObserved<'_> {
    /// As [`Self::emit_to`], with `tenant_label` given rather than read from the config.
    #[cfg(test)]
    fn emit_labelled(&self, tenant_label: bool) {
        let series = ProviderSeries::labelled(tenant_label, self.tenant, self.provider);
        self.emit_with(&series, tenant_label);
    }

    /// Publishes the change: calls in flight as a delta in the gate's own series, so the
    /// gauge sums every gate it covers (all tenants' without the tenant label); the
    /// circuit as a move between state counts, and — with the tenant label — as the
    /// tenant's own state.
    pub(crate) fn emit_to(&self, series: &ProviderSeries) {
        self.emit_with(series, TENANT_LABEL.load(Ordering::Relaxed));
    }

    fn emit_with(&self, series: &ProviderSeries, tenant_label: bool) {
        let (before, now) = self.in_flight;
        // The first publication registers the series, even at zero.
        if before != now || self.circuit.0.is_none() {
            if now >= before {
                series.in_flight.increment((now - before) as f64);
            } else {
                series.in_flight.decrement((before - now) as f64);
            }
        }
        self.emit_circuit(tenant_label);
    }

    fn emit_circuit(&self, tenant_label: bool) {
        let (before, now) = self.circuit;
        if before == Some(now) {
            return;
        }
        if let Some(before) = before {
            circuits(self.provider, before).decrement(1.0);
        }
        circuits(self.provider, now).increment(1.0);
        if tenant_label {
            let labels = labelled(
                true,
                self.tenant,
                vec![Label::new("provider", self.provider.to_owned())],
            );
            metrics::gauge!(PROVIDER_CIRCUIT_STATE, labels).set(now.as_gauge());
        }
    }
}

/// A tenant's response cache, counted: hits, misses and coalesced waits per provider,
/// evictions per provider and cause, and the bytes held (as changes, so the gauge sums
/// every tenant's store).
pub(crate) struct CacheMetrics {
    tenant: String,
}

/// Eviction causes exported from start-up.
const EVICTION_CAUSES: [&str; 2] = ["size", "expired"];

impl CacheMetrics {
    pub(crate) fn new(tenant: &str) -> CacheMetrics {
        CacheMetrics {
            tenant: tenant.to_owned(),
        }
    }

    /// A cached provider was bound: its series exist from now on, at zero.
    pub(crate) fn bound(&self, provider: &str) {
        for counter in [CACHE_HITS, CACHE_MISSES, CACHE_COALESCED] {
            metrics::counter!(counter, self.labels(provider, None)).increment(0);
        }
        for cause in EVICTION_CAUSES {
            metrics::counter!(CACHE_EVICTIONS, self.labels(provider, Some(cause))).increment(0);
        }
        metrics::gauge!(CACHE_BYTES, with_tenant(&self.tenant, Vec::new())).increment(0.0);
    }

    fn labels(&self, provider: &str, cause: Option<&'static str>) -> Vec<Label> {
        let mut labels = vec![Label::new("provider", provider.to_owned())];
        labels.extend(cause.map(|cause| Label::new("cause", cause)));
        with_tenant(&self.tenant, labels)
    }
}

impl CacheObserver for CacheMetrics {
    fn looked_up(&self, provider: &str, lookup: Lookup) {
        let counter = match lookup {
            Lookup::Hit => CACHE_HITS,
            Lookup::Miss => CACHE_MISSES,
            Lookup::Coalesced => CACHE_COALESCED,
        };
        metrics::counter!(counter, self.labels(provider, None)).increment(1);
    }

    fn stored(&self, _provider: &str, bytes: u32) {
        metrics::gauge!(CACHE_BYTES, with_tenant(&self.tenant, Vec::new()))
            .increment(f64::from(bytes));
    }

    fn removed(&self, provider: &str, removal: Removal, bytes: u32) {
        metrics::gauge!(CACHE_BYTES, with_tenant(&self.tenant, Vec::new()))
            .decrement(f64::from(bytes));
        let cause = match removal {
            Removal::Evicted => "size",
            Removal::Expired => "expired",
            Removal::Dropped => return,
        };
        metrics::counter!(CACHE_EVICTIONS, self.labels(provider, Some(cause))).increment(1);
    }
}

/// The trace writer committed a batch.
pub(crate) struct TraceBatchWritten {
    pub(crate) records: u64,
    pub(crate) duration: Duration,
}

impl TraceBatchWritten {
    pub(crate) fn emit(&self) {
        metrics::counter!(TRACE_BATCHES).increment(1);
        metrics::counter!(TRACE_RECORDS).increment(self.records);
        metrics::histogram!(TRACE_WRITE_DURATION).record(self.duration.as_secs_f64());
    }
}

/// The trace queue's depth, sampled.
pub(crate) fn trace_queue_depth(depth: usize) {
    metrics::gauge!(TRACE_QUEUE_DEPTH).set(depth as f64);
}

/// The trace writer measured its store: `used_bytes` in it, `disk_available` bytes
/// free on its disk when known.
pub(crate) fn trace_store_measured(used_bytes: u64, disk_available: Option<u64>) {
    metrics::gauge!(TRACE_STORE_BYTES).set(used_bytes as f64);
    if let Some(available) = disk_available {
        metrics::gauge!(TRACE_DISK_AVAILABLE).set(available as f64);
    }
}

/// Whether the trace store has room for another turn's trace.
pub(crate) fn trace_store_out_of_room(out_of_room: bool) {
    metrics::gauge!(TRACE_STORE_OUT_OF_ROOM).set(if out_of_room { 1.0 } else { 0.0 });
}

/// Trace records deleted past their keep.
pub(crate) fn trace_records_pruned(records: u64) {
    metrics::counter!(TRACE_PRUNED).increment(records);
}

/// The oldest turn record's age.
pub(crate) fn trace_oldest_record_age(age_ms: i64) {
    metrics::gauge!(TRACE_OLDEST_AGE).set(age_ms.max(0) as f64 / 1000.0);
}

/// A turn was refused because its trace could not be queued.
pub(crate) fn trace_backpressure() {
    metrics::counter!(TRACE_BACKPRESSURE).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// What the events of `run` export, rendered by a recorder of their own.
    fn exported(run: impl FnOnce()) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, run);
        handle.render()
    }

    #[test]
    fn a_gates_series_and_looked_up_series_are_the_same_series() {
        let text = exported(|| {
            let series = ProviderSeries::new("acme", "crm");
            let finished = |status: ProviderStatus, detail, series| ProviderCallFinished {
                tenant: "acme",
                provider: "crm",
                status: status.as_str(),
                detail,
                duration: Duration::from_millis(3),
                series,
            };
            finished(ProviderStatus::Ok, None, Some(&series)).emit();
            finished(ProviderStatus::Ok, None, None).emit();
            finished(ProviderStatus::Timeout, Some("DEADLINE"), Some(&series)).emit();
            finished(ProviderStatus::Timeout, Some("DEADLINE"), None).emit();
            observed("acme", (0, 2), (None, BreakerState::Closed)).emit_to(&series);
            observed(
                "acme",
                (2, 1),
                (Some(BreakerState::Closed), BreakerState::Closed),
            )
            .emit_labelled(false);
        });
        for expected in [
            "ctxd_provider_calls_total{provider=\"crm\",status=\"OK\",detail=\"\"} 2\n",
            "ctxd_provider_calls_total{provider=\"crm\",status=\"TIMEOUT\",detail=\"DEADLINE\"} 2\n",
            "ctxd_provider_call_duration_seconds_count{provider=\"crm\"} 4\n",
            "ctxd_provider_in_flight{provider=\"crm\"} 1\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    fn observed(
        tenant: &'static str,
        in_flight: (usize, usize),
        circuit: (Option<BreakerState>, BreakerState),
    ) -> ProviderStateObserved<'static> {
        ProviderStateObserved {
            tenant,
            provider: "crm",
            in_flight,
            circuit,
        }
    }

    /// acme's circuit for crm opens while globex's stays closed and keeps calling.
    fn two_tenants(tenant_label: bool) {
        use BreakerState::{Closed, Open};
        for tenant in ["acme", "globex"] {
            ProviderBound {
                tenant,
                provider: "crm",
            }
            .emit_labelled(tenant_label);
            observed(tenant, (0, 0), (None, Closed)).emit_labelled(tenant_label);
        }
        observed("acme", (0, 2), (Some(Closed), Closed)).emit_labelled(tenant_label);
        observed("acme", (2, 0), (Some(Closed), Open)).emit_labelled(tenant_label);
        // globex's successful calls come after: they must not close acme's circuit.
        observed("globex", (0, 1), (Some(Closed), Closed)).emit_labelled(tenant_label);
        observed("globex", (1, 1), (Some(Closed), Closed)).emit_labelled(tenant_label);
    }

    #[test]
    fn without_the_tenant_label_circuits_are_counted_per_state() {
        let text = exported(|| two_tenants(false));
        for expected in [
            "ctxd_provider_circuits{provider=\"crm\",state=\"open\"} 1\n",
            "ctxd_provider_circuits{provider=\"crm\",state=\"closed\"} 1\n",
            "ctxd_provider_circuits{provider=\"crm\",state=\"half_open\"} 0\n",
            "ctxd_provider_in_flight{provider=\"crm\"} 1\n",
            "ctxd_provider_calls_total{provider=\"crm\",status=\"TIMEOUT\",detail=\"\"} 0\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        // A per-provider state gauge would say whichever tenant wrote last.
        assert!(!text.contains(PROVIDER_CIRCUIT_STATE), "{text}");
        assert!(!text.contains("tenant="), "{text}");
    }

    #[test]
    fn with_the_tenant_label_each_tenant_has_its_state_beside_the_counts() {
        let text = exported(|| two_tenants(true));
        for expected in [
            "ctxd_provider_circuit_state{provider=\"crm\",tenant=\"acme\"} 1\n",
            "ctxd_provider_circuit_state{provider=\"crm\",tenant=\"globex\"} 0\n",
            "ctxd_provider_circuits{provider=\"crm\",state=\"open\"} 1\n",
            "ctxd_provider_circuits{provider=\"crm\",state=\"closed\"} 1\n",
            "ctxd_provider_in_flight{provider=\"crm\",tenant=\"acme\"} 0\n",
            "ctxd_provider_in_flight{provider=\"crm\",tenant=\"globex\"} 1\n",
            "ctxd_provider_calls_total{provider=\"crm\",status=\"OK\",detail=\"\",tenant=\"acme\"} 0\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn a_cached_provider_has_its_cache_series_from_start_up() {
        let text = exported(|| {
            let cache = CacheMetrics::new("acme");
            cache.bound("crm");
            cache.looked_up("crm", Lookup::Miss);
            cache.stored("crm", 1000);
            for _ in 0..3 {
                cache.looked_up("crm", Lookup::Hit);
            }
            cache.looked_up("crm", Lookup::Coalesced);
            cache.removed("crm", Removal::Evicted, 400);
            cache.removed("crm", Removal::Dropped, 100);
        });
        for expected in [
            "ctxd_cache_hits_total{provider=\"crm\"} 3\n",
            "ctxd_cache_misses_total{provider=\"crm\"} 1\n",
            "ctxd_cache_coalesced_total{provider=\"crm\"} 1\n",
            "ctxd_cache_evictions_total{provider=\"crm\",cause=\"size\"} 1\n",
            "ctxd_cache_evictions_total{provider=\"crm\",cause=\"expired\"} 0\n",
            "ctxd_cache_bytes 500\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn watched_series_exist_at_zero_from_start_up() {
        let text = exported(|| zero_at_start(false));
        for expected in [
            "ctxd_turns_total{outcome=\"answered\"} 0\n",
            "ctxd_turns_total{outcome=\"runtime_unavailable\"} 0\n",
            "ctxd_trace_backpressure_total 0\n",
            "ctxd_trace_batches_total 0\n",
            "ctxd_trace_queue_depth 0\n",
            "ctxd_trace_records_pruned_total 0\n",
            "ctxd_trace_store_out_of_room 0\n",
            "ctxd_replays_rate_limited_total 0\n",
            "ctxd_cache_bytes 0\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        let labelled = exported(|| zero_at_start(true));
        assert!(!labelled.contains("ctxd_turns_total"), "{labelled}");
    }
}
