//! Route handlers: turns (parsing, the per-tenant in-flight limit, the hand-off to the
//! worker's `Coordinator`), health, readiness and metrics.

use super::answers::{Health, Readiness};
use super::body::{parse_body, read_json_body};
use super::tenant::optional_tenant;
use super::{ApiError, ApiState, Tenant};
use crate::actors::{Coordinator, RunTurn, TenantRuntime, Topology};
use crate::contract::{ErrorBody, TurnRequest, TurnResponse};
use crate::json;
use crate::telemetry::metrics::TurnEnded;
use actix::Addr;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Time beyond the longest turn deadline after which a turn is given up as
/// `RUNTIME_UNAVAILABLE`: the coordinator is not keeping up.
const COORDINATOR_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/turns", web::post().to(turn))
        .route("/v1/turns", web::to(method_not_allowed))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(metrics));
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}

/// Prometheus text exposition; 404 when metrics are disabled in the config.
#[utoipa::path(
    get,
    path = "/metrics",
    summary = "Prometheus metrics (docs/METRICS.md)",
    tag = "operations",
    responses(
        (status = 200, description = "The Prometheus text exposition (docs/METRICS.md)", content_type = "text/plain", body = String),
        (status = 404, description = "Metrics are disabled in the config (`NOT_FOUND`)", body = ErrorBody),
    )
)]
async fn metrics(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let handle = state.metrics.as_ref().ok_or_else(|| ApiError::NotFound {
        message: "metrics are disabled in the config".to_owned(),
    })?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(handle.render()))
}

#[utoipa::path(
    get,
    path = "/healthz",
    summary = "Liveness: 200 while the process serves HTTP",
    tag = "operations",
    responses((status = 200, description = "The process serves HTTP", body = Health))
)]
async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The replica's state for a load balancer: 503 while starting (until every provider
/// finished its first probe), while shutting down, and while the trace store or its disk
/// has no room for another turn's trace (`trace_store_full` / `trace_disk_full`, with the
/// figures in `reason`: every turn would be refused); otherwise 200 with `ready` or
/// `degraded` (some provider's last probe failed — its turns still answer, with that
/// provider's failures as statuses — or a Redis handle store does not answer `PING`:
/// `handleStore.reachable: false`, handle operations answer 503). Without a key that is all; with a tenant's key the
/// answer adds that tenant's providers (and no one else's) and the replica's turns.
#[utoipa::path(
    get,
    path = "/readyz",
    summary = "Readiness for a load balancer; with a tenant's key, that tenant's providers",
    tag = "operations",
    security((), ("tenantKey" = [])),
    responses(
        (status = 200, description = "`ready`, or `degraded` when some provider's last probe failed (its turns still answer)", body = Readiness),
        (status = 401, description = "A key no tenant has (`UNAUTHORIZED`); no key at all is fine", body = ErrorBody),
        (status = 503, description = "`starting` until every provider was probed once, `trace_store_full` / `trace_disk_full` (with `reason`), or `shutting_down` (with the error envelope's `error`)", body = Readiness),
    )
)]
async fn readyz(request: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    if state.registry.is_shutting_down() {
        return shutting_down_readiness();
    }
    let tenant = match optional_tenant(&request, &state) {
        Ok(tenant) => tenant,
        Err(error) => return actix_web::ResponseError::error_response(&error),
    };
    let providers = state.registry.served().providers.clone();
    let snapshots = Topology::observe(&providers).await;
    let starting = snapshots.iter().any(|s| s.ready.is_none()) || snapshots.len() < providers.len();
    let handle_store = state.registry.handles.health().await;
    // A shared handle store that cannot be reached is every replica's problem: turns
    // still answer, so the replica stays in rotation as `degraded`.
    let degraded =
        snapshots.iter().any(|s| s.ready == Some(false)) || handle_store.problem.is_some();
    let no_room = state.registry.traces.no_room();
    let status = if starting {
        "starting"
    } else if let Some(no_room) = &no_room {
        no_room.code()
    } else if degraded {
        "degraded"
    } else {
        "ready"
    };
    let mut body = json!({"status": status});
    if let Some(no_room) = &no_room {
        body["reason"] = json!(no_room.to_string());
    }
    if let Some(tenant) = tenant {
        let providers: Vec<_> = snapshots
            .iter()
            .filter(|s| s.tenant == tenant.id)
            .map(|s| {
                json!({
                    "tenant": s.tenant,
                    "provider": s.provider,
                    "type": s.type_name,
                    "ready": s.ready,
                    "problem": s.problem,
                    "circuit": s.breaker.state.as_str(),
                    "inFlight": s.in_flight,
                })
            })
            .collect();
        let turns = state.coordinators.turns().await;
        body["providers"] = json!(providers);
        if handle_store.backend != "memory" {
            body["handleStore"] = json!({
                "backend": handle_store.backend,
                "reachable": handle_store.problem.is_none(),
                "problem": handle_store.problem,
            });
        }
        body["turns"] = json!({"inFlight": turns.in_flight, "finished": turns.finished});
    }
    if starting || no_room.is_some() {
        HttpResponse::ServiceUnavailable().json(body)
    } else {
        HttpResponse::Ok().json(body)
    }
}

/// `/readyz` while draining: the error envelope of every refused request (503,
/// `Connection: close`), with the status a probe reads.
fn shutting_down_readiness() -> HttpResponse {
    let error = ApiError::shutting_down();
    let mut body = error.envelope();
    body["status"] = json!("shutting_down");
    actix_web::ResponseError::error_response(&error)
        .set_body(actix_web::body::BoxBody::new(body.to_string()))
}

/// Decrements the tenant's in-flight count when the turn ends, however it ends.
struct InFlight(Arc<TenantRuntime>);

impl InFlight {
    fn enter(tenant: Arc<TenantRuntime>) -> Result<InFlight, ApiError> {
        let previous = tenant.in_flight.fetch_add(1, Ordering::AcqRel);
        if previous >= tenant.max_in_flight {
            tenant.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::TooManyTurns {
                limit: tenant.max_in_flight,
            });
        }
        Ok(InFlight(tenant))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every turn is counted, refused ones too: the tenant extractor's refusals (shutting
/// down, unauthorized) under no tenant.
#[utoipa::path(
    post,
    path = "/v1/turns",
    summary = "Answer a turn: every layer and provider status and the rendered context (docs/API.md)",
    tag = "turns",
    request_body = TurnRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Every layer's and provider's status and the rendered context; provider failures are statuses, never HTTP errors", body = TurnResponse),
        (status = 400, description = "Not JSON, an unknown or duplicate field or input key, too many inputs, a wrong type or a value out of range; `field` names it (`BAD_REQUEST`)", body = ErrorBody),
        (status = 404, description = "An unknown project of this tenant, or an unknown profile (`NOT_FOUND`)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within `server.body_timeout_ms` (`REQUEST_TIMEOUT`)", body = ErrorBody),
        (status = 413, description = "The body exceeds `server.max_body_bytes` (`PAYLOAD_TOO_LARGE`)", body = ErrorBody),
        (status = 415, description = "No `Content-Type: application/json` (`UNSUPPORTED_MEDIA_TYPE`)", body = ErrorBody),
        (status = 429, description = "The tenant has `max_in_flight` turns running (`TOO_MANY_TURNS`, `Retry-After: 1`)", body = ErrorBody),
    )
)]
async fn turn(
    tenant: Result<Tenant, ApiError>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<ApiState>,
    coordinator: web::Data<Addr<Coordinator>>,
) -> Result<HttpResponse, ApiError> {
    let (tenant, result) = match tenant {
        Ok(tenant) => {
            let result = match read_json_body(&request, payload, &state).await {
                Ok(body) => answer_turn(&tenant, &body, &state, &coordinator).await,
                Err(error) => Err(error),
            };
            (Some(tenant), result)
        }
        Err(refused) => (None, Err(refused)),
    };
    count_turn(tenant.as_ref(), &result);
    result.map(|response| turn_answer(&response))
}

/// The most of a turn answer's length a worker keeps as the next answer's first buffer.
const MAX_ANSWER_HINT_BYTES: usize = 256 * 1024;

thread_local! {
    /// The length of the last answer this worker wrote. The next answer's buffer starts
    /// at it (a deployment's answers are alike in size) instead of growing from a few
    /// hundred bytes by doubling, a copy each time.
    static LAST_ANSWER_BYTES: Cell<usize> = const { Cell::new(4096) };
}

/// The `200` of `POST /v1/turns`: the answer as compact JSON ([`json`]).
fn turn_answer(response: &TurnResponse) -> HttpResponse {
    let hint = LAST_ANSWER_BYTES.get().min(MAX_ANSWER_HINT_BYTES);
    let mut body = Vec::with_capacity(hint + hint / 8);
    json::write(&mut body, response).expect("a turn answer always serializes");
    LAST_ANSWER_BYTES.set(body.len());
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}

/// Counts a turn by how it ended (`/v1/turns` and the MCP `get_context` tool alike).
pub(crate) fn count_turn(tenant: Option<&Tenant>, result: &Result<TurnResponse, ApiError>) {
    let outcome = match result {
        Ok(response) if response.result.blocked => "blocked",
        Ok(_) => "answered",
        Err(error) => error.metric_outcome(),
    };
    TurnEnded {
        tenant: tenant.map(|t| t.id.as_str()),
        outcome,
    }
    .emit();
}

/// Answers one turn of an authenticated tenant from its JSON body (`/v1/turns` and the
/// MCP `get_context` tool alike).
pub(crate) async fn answer_turn(
    tenant: &Tenant,
    body: &[u8],
    state: &ApiState,
    coordinator: &Addr<Coordinator>,
) -> Result<TurnResponse, ApiError> {
    let registry = &state.registry;
    let tenant = Arc::clone(tenant.runtime());
    let turn = parse_turn(body, state.requests.max_input_keys)?;
    let in_flight = InFlight::enter(tenant)?;
    let tenant = Arc::clone(&in_flight.0);
    // Bounded like every request-path message: the turn's own deadline bounds the
    // answer; past it (plus a margin) the coordinator is not keeping up.
    let response = coordinator
        .send(RunTurn {
            tenant,
            request: turn,
        })
        .timeout(registry.max_turn + COORDINATOR_MARGIN)
        .await
        .map_err(|error| match error {
            actix::MailboxError::Timeout => ApiError::RuntimeUnavailable {
                message: "the turn could not be scheduled in time".to_owned(),
            },
            actix::MailboxError::Closed => ApiError::shutting_down(),
        })??;
    drop(in_flight);
    Ok(response)
}

/// Parses a turn request; an error names the field, never a value. `inputs` may carry at
/// most `max_input_keys` keys.
pub(crate) fn parse_turn(body: &[u8], max_input_keys: usize) -> Result<TurnRequest, ApiError> {
    let turn: TurnRequest = parse_body(body, "turn request")?;
    check_input_count(turn.inputs.len(), max_input_keys)?;
    Ok(turn)
}

/// `limits.max_input_keys`: every key of `inputs` is planned, digested and recorded, so
/// their number is bounded like the body's size.
pub(super) fn check_input_count(keys: usize, max_input_keys: usize) -> Result<(), ApiError> {
    if keys > max_input_keys {
        return Err(ApiError::BadRequest {
            field: Some("inputs".to_owned()),
            message: format!(
                "inputs: {keys} keys, more than the {max_input_keys} a request may carry (limits.max_input_keys)"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_field(body: &str) -> (Option<String>, String) {
        match parse_turn(body.as_bytes(), 64) {
            Err(ApiError::BadRequest { field, message }) => (field, message),
            other => panic!("expected a bad request, got {other:?}"),
        }
    }

    #[test]
    fn parse_errors_name_the_field() {
        let (field, message) = bad_field(r#"{"project": "p", "inputs": {"customerId": 42}}"#);
        assert_eq!(field.as_deref(), Some("inputs.customerId"));
        assert!(
            message.contains("must be a string, not a number"),
            "{message}"
        );
        let (field, message) = bad_field(r#"{"project": "p", "colour": "red"}"#);
        assert_eq!(field.as_deref(), Some("colour"));
        assert!(message.contains("unknown field `colour`"), "{message}");
        let (field, _) = bad_field(r#"{"project": "p", "budget": {"maxBytes": "big"}}"#);
        assert_eq!(field.as_deref(), Some("budget.maxBytes"));
        let (field, message) = bad_field(r#"{"inputs": {}}"#);
        assert_eq!(field, None);
        assert!(message.contains("missing field `project`"), "{message}");
        let (_, message) = bad_field("not json");
        assert!(message.contains("not a valid turn request"));
        let (_, message) = bad_field(r#"{"project": "p"} {}"#);
        assert!(message.contains("trailing data"));
    }

    #[test]
    fn no_value_is_repeated_whatever_its_type_or_field() {
        let secret = "987654321012";
        for body in [
            format!(r#"{{"project": "p", "inputs": {{"customerId": {secret}}}}}"#),
            format!(r#"{{"project": "p", "inputs": {{"customerId": {secret}.5}}}}"#),
            format!(r#"{{"project": "p", "inputs": {{"customerId": ["{secret}"]}}}}"#),
            format!(r#"{{"project": "p", "inputs": {{"customerId": {{"a": "{secret}"}}}}}}"#),
            format!(r#"{{"project": "p", "inputs": {{"customerId": true, "x": "{secret}"}}}}"#),
            format!(r#"{{"project": {secret}}}"#),
            format!(r#"{{"project": "p", "objective": {secret}}}"#),
            format!(r#"{{"project": "p", "budget": {{"maxBytes": "{secret}"}}}}"#),
            format!(r#"{{"project": "p", "budget": {{"maxBytes": -{secret}}}}}"#),
            format!(r#"{{"project": "p", "deadlineMs": "{secret}"}}"#),
            format!(r#"{{"project": "p", "inputs": "{secret}"}}"#),
        ] {
            let (field, message) = bad_field(&body);
            assert!(!message.contains(secret), "{body}: {message}");
            assert!(!message.contains("true"), "{body}: {message}");
            assert!(field.is_some(), "{body}: {message}");
        }
    }

    #[test]
    fn a_duplicate_key_is_refused_in_inputs_as_at_the_top() {
        let (field, message) =
            bad_field(r#"{"project": "p", "inputs": {"customerId": "A", "customerId": "B"}}"#);
        assert_eq!(field.as_deref(), Some("inputs"), "{message}");
        assert!(
            message.contains(r#"duplicate key "customerId""#),
            "{message}"
        );
        assert!(!message.contains("\"A\"") && !message.contains("\"B\""));
        let (_, message) = bad_field(r#"{"project": "p", "project": "q"}"#);
        assert!(message.contains("duplicate field `project`"), "{message}");
    }

    #[test]
    fn the_number_of_input_keys_is_bounded() {
        let inputs: Vec<String> = (0..5).map(|i| format!(r#""k{i}": "v""#)).collect();
        let body = format!(r#"{{"project": "p", "inputs": {{{}}}}}"#, inputs.join(","));
        assert_eq!(parse_turn(body.as_bytes(), 5).unwrap().inputs.len(), 5);
        match parse_turn(body.as_bytes(), 4) {
            Err(ApiError::BadRequest { field, message }) => {
                assert_eq!(field.as_deref(), Some("inputs"));
                assert!(
                    message.contains("more than the 4 a request may carry (limits.max_input_keys)"),
                    "{message}"
                );
            }
            other => panic!("expected a bad request, got {other:?}"),
        }
    }

    #[test]
    fn nesting_bombs_are_refused_without_recursing() {
        let depth = 100_000;
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            for wrap in [
                |bomb: &str| format!(r#"{{"project": "p", "inputs": {{"k": {bomb}}}}}"#),
                |bomb: &str| format!(r#"{{"project": "p", "objective": {bomb}}}"#),
                |bomb: &str| format!(r#"{{"project": "p", "unknown": {bomb}}}"#),
                |bomb: &str| format!(r#"{{"project": "p", "budget": {bomb}}}"#),
                |bomb: &str| bomb.to_owned(),
            ] {
                let bomb = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                let body = wrap(&bomb);
                assert!(
                    matches!(
                        parse_turn(body.as_bytes(), 64),
                        Err(ApiError::BadRequest { .. })
                    ),
                    "{}",
                    &body[..60]
                );
            }
        }
    }

    #[test]
    fn a_valid_turn_parses() {
        let turn = parse_turn(
            br#"{"project": "support", "profile": "default", "objective": "billing",
                 "consumer": "support-agent", "inputs": {"customerId": "CUST-1042"},
                 "budget": {"maxBytes": 8000}, "deadlineMs": 900}"#,
            64,
        )
        .unwrap();
        assert_eq!(turn.inputs["customerId"], "CUST-1042");
        assert_eq!(turn.budget.unwrap().max_bytes, 8000);
        assert_eq!(turn.deadline_ms, Some(900));
    }
}
