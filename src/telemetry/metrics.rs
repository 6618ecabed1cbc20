//! Prometheus metrics: the metric names (constants), one typed event per thing that
//! happens (`emit()` records it), and the recorder's installation. Labels are of low
//! cardinality — provider, status, detail, outcome, and tenant only when the config
//! enables it — never an id or a value.

use crate::config::MetricsSettings;
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
pub(crate) const TRACE_QUEUE_DEPTH: &str = "ctxd_trace_queue_depth";
pub(crate) const TRACE_BATCHES: &str = "ctxd_trace_batches_total";
pub(crate) const TRACE_RECORDS: &str = "ctxd_trace_records_total";
pub(crate) const TRACE_WRITE_DURATION: &str = "ctxd_trace_write_duration_seconds";
pub(crate) const TRACE_BACKPRESSURE: &str = "ctxd_trace_backpressure_total";
pub(crate) const HANDLE_OPERATIONS: &str = "ctxd_handle_operations_total";
pub(crate) const REPLAYS_RATE_LIMITED: &str = "ctxd_replays_rate_limited_total";

/// Buckets of the coordinator overhead, in seconds: its target is well under 1 ms.
pub(crate) const OVERHEAD_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// Whether metrics carry a `tenant` label (config `metrics.tenant_label`).
static TENANT_LABEL: AtomicBool = AtomicBool::new(false);

/// Installs the process-wide recorder with the configured duration buckets. The
/// exporter's own HTTP listener is not used: `GET /metrics` renders from the handle.
pub(crate) fn install(settings: &MetricsSettings) -> anyhow::Result<PrometheusHandle> {
    TENANT_LABEL.store(settings.tenant_label, Ordering::Relaxed);
    let seconds: Vec<f64> = settings
        .duration_buckets_ms
        .iter()
        .map(|ms| ms / 1000.0)
        .collect();
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(COORDINATOR_OVERHEAD.to_owned()),
            OVERHEAD_BUCKETS,
        )?
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &seconds)?
        .install_recorder()?;
    describe();
    Ok(handle)
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
        "Circuit breaker state per provider: 0 closed, 1 open, 2 half-open"
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
        "Turns refused because the trace queue stayed full"
    );
    describe_counter!(
        HANDLE_OPERATIONS,
        "Handle operations by operation and result"
    );
    describe_counter!(
        REPLAYS_RATE_LIMITED,
        "Replays refused with 429 by the per-tenant replay rate limit"
    );
}

fn with_tenant(tenant: &str, mut labels: Vec<Label>) -> Vec<Label> {
    if TENANT_LABEL.load(Ordering::Relaxed) {
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

/// One provider call finished (or failed fast).
pub(crate) struct ProviderCallFinished<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) status: &'static str,
    pub(crate) detail: Option<&'a str>,
    pub(crate) duration: Duration,
}

impl ProviderCallFinished<'_> {
    pub(crate) fn emit(&self) {
        let provider = Label::new("provider", self.provider.to_owned());
        let calls = with_tenant(
            self.tenant,
            vec![
                provider.clone(),
                Label::new("status", self.status),
                Label::new("detail", self.detail.unwrap_or("").to_owned()),
            ],
        );
        metrics::counter!(PROVIDER_CALLS, calls).increment(1);
        metrics::histogram!(
            PROVIDER_CALL_DURATION,
            with_tenant(self.tenant, vec![provider])
        )
        .record(self.duration.as_secs_f64());
    }
}

/// A provider's calls in flight and circuit state, as its actor sees them.
pub(crate) struct ProviderStateObserved<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) in_flight: usize,
    pub(crate) circuit: f64,
}

impl ProviderStateObserved<'_> {
    pub(crate) fn emit(&self) {
        let labels = with_tenant(
            self.tenant,
            vec![Label::new("provider", self.provider.to_owned())],
        );
        metrics::gauge!(PROVIDER_IN_FLIGHT, labels.clone()).set(self.in_flight as f64);
        metrics::gauge!(PROVIDER_CIRCUIT_STATE, labels).set(self.circuit);
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

/// A turn was refused because its trace could not be queued.
pub(crate) fn trace_backpressure() {
    metrics::counter!(TRACE_BACKPRESSURE).increment(1);
}
