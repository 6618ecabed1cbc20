//! The answer bodies of the API's routes that are written as JSON values where they are
//! answered, described here as types for the OpenAPI document (`utoipa::ToSchema`):
//! handle operations, health and readiness. The document (`openapi`) lists them; the
//! routes name them in their `#[utoipa::path]`.

use crate::contract::HandleRef;
use crate::handles::Capabilities;
use crate::handles::output::OpOutput;
use crate::handles::request::Limits;
use crate::trace::record::HandleOpRecord;
use utoipa::ToSchema;

/// A successful handle operation (`POST /v1/handles/{id}/ops`).
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct HandleOpAnswer {
    handle: HandleRef,
    /// The operation run.
    #[schema(value_type = String)]
    operation: &'static str,
    /// Per-handle, monotonic from 1; shared by operations and the delete.
    sequence: u64,
    /// The limits it ran under, defaults applied.
    limits: Limits,
    #[serde(flatten)]
    output: OpOutput,
    bytes_inspected: u64,
    items_inspected: u64,
    elapsed_ms: u64,
}

/// `DELETE /v1/handles/{id}`: the tombstone is in place.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct HandleDeleted {
    handle: HandleRef,
    deleted: bool,
    sequence: u64,
}

/// `GET /v1/handles/{id}/trace`: the handle's operation records in sequence order.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct HandleTracePage {
    handle: String,
    operations: Vec<HandleOpRecord>,
    /// Pass as `after` for the next page; `null` when no more follow.
    next_after: Option<u64>,
}

/// `GET /v1/handles/capabilities`: what the store reaches (nothing) and allows.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct HandleCapabilities {
    #[serde(flatten)]
    capabilities: Capabilities,
    /// How long an untouched handle lives.
    ttl_seconds: u64,
    limits: HandleLimits,
}

/// The operation limits: defaults and caps.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct HandleLimits {
    default_max_results: u64,
    max_results_cap: u64,
    default_max_bytes: u64,
    max_bytes_cap: u64,
    default_time_limit_ms: u64,
    time_limit_cap_ms: u64,
}

/// `GET /healthz`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct Health {
    #[schema(pattern = "^ok$")]
    status: String,
}

/// `GET /readyz`: the replica's state; with a tenant's key, that tenant's providers and
/// the replica's turns.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct Readiness {
    status: ReadinessStatus,
    /// Why the store has no room (`trace_store_full`, `trace_disk_full`).
    reason: Option<String>,
    /// With a tenant's key: that tenant's providers, and no one else's.
    providers: Option<Vec<ProviderReadiness>>,
    /// With a tenant's key: the turns the replica's coordinators run and have finished.
    turns: Option<TurnCounts>,
    /// While shutting down: the error envelope's detail (`RUNTIME_UNAVAILABLE`).
    error: Option<crate::contract::ErrorDetail>,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum ReadinessStatus {
    Starting,
    Ready,
    Degraded,
    TraceStoreFull,
    TraceDiskFull,
    ShuttingDown,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct ProviderReadiness {
    tenant: String,
    provider: String,
    /// The provider type (`http`, `sqlite`, `rest`, `postgres`, `mcp`, `fixture`).
    #[serde(rename = "type")]
    type_name: String,
    /// `null` until the first probe finished.
    ready: Option<bool>,
    /// What the last probe found wrong.
    problem: Option<String>,
    circuit: CircuitState,
    in_flight: u64,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum CircuitState {
    Closed,
    Open,
    HalfOpen,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct TurnCounts {
    in_flight: u64,
    finished: u64,
}
