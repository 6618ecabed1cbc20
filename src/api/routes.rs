//! Route handlers: body limits, parsing, the per-tenant in-flight limit, and the
//! hand-off to the worker's `Coordinator`.

use super::{ApiError, ApiState, Tenant};
use crate::actors::{Coordinator, RunTurn, TenantRuntime, Topology};
use crate::contract::{TurnRequest, TurnResponse};
use crate::telemetry::metrics::TurnEnded;
use actix::Addr;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;
use serde_json::json;
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

pub(crate) async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound {
        message: "no such route".to_owned(),
    })
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}

/// Prometheus text exposition; 404 when metrics are disabled in the config.
async fn metrics(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let handle = state.metrics.as_ref().ok_or_else(|| ApiError::NotFound {
        message: "metrics are disabled in the config".to_owned(),
    })?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(handle.render()))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// 503 while shutting down or before every provider finished its first probe; otherwise
/// 200 with `ready` or `degraded` (some provider's last probe failed — its turns still
/// answer, with that provider's failures as statuses).
async fn readyz(state: web::Data<ApiState>) -> HttpResponse {
    if state.registry.is_shutting_down() {
        return HttpResponse::ServiceUnavailable().json(json!({"status": "shutting_down"}));
    }
    let snapshots = Topology::observe(&state.providers).await;
    let providers: Vec<_> = snapshots
        .iter()
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
    let starting =
        snapshots.iter().any(|s| s.ready.is_none()) || snapshots.len() < state.providers.len();
    let degraded = snapshots.iter().any(|s| s.ready == Some(false));
    let status = if starting {
        "starting"
    } else if degraded {
        "degraded"
    } else {
        "ready"
    };
    let turns = state.coordinators.turns().await;
    let body = json!({
        "status": status,
        "providers": providers,
        "turns": {"inFlight": turns.in_flight, "finished": turns.finished},
    });
    if starting {
        HttpResponse::ServiceUnavailable().json(body)
    } else {
        HttpResponse::Ok().json(body)
    }
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
async fn turn(
    tenant: Result<Tenant, ApiError>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<ApiState>,
    coordinator: web::Data<Addr<Coordinator>>,
) -> Result<HttpResponse, ApiError> {
    let (tenant, result) = match tenant {
        Ok(tenant) => {
            let result = answer_turn(&tenant, &request, payload, &state, &coordinator).await;
            (Some(tenant), result)
        }
        Err(refused) => (None, Err(refused)),
    };
    let outcome = match &result {
        Ok(response) if response.result.blocked => "blocked",
        Ok(_) => "answered",
        Err(error) => error.metric_outcome(),
    };
    TurnEnded {
        tenant: tenant.as_ref().map(|t| t.id.as_str()),
        outcome,
    }
    .emit();
    result.map(|response| HttpResponse::Ok().json(response))
}

/// Answers one turn of an authenticated tenant.
async fn answer_turn(
    tenant: &Tenant,
    request: &HttpRequest,
    payload: web::Payload,
    state: &ApiState,
    coordinator: &Addr<Coordinator>,
) -> Result<TurnResponse, ApiError> {
    let registry = &state.registry;
    let tenant = Arc::clone(tenant.runtime());
    let body = read_body(request, payload, registry.max_body_bytes).await?;
    let turn = parse_turn(&body)?;
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

/// Reads the body, refusing it as soon as it exceeds `limit` (Content-Length first).
pub(super) async fn read_body(
    request: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::BytesMut, ApiError> {
    let declared = request
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest {
            field: None,
            message: format!("cannot read the request body: {e}"),
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses a JSON request body that refuses unknown fields; an error names the field
/// (`inputs.customerId`, `budget.maxBytes` …). `what` names the body in messages.
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let field = (path != ".").then_some(path);
        let inner = e.into_inner();
        ApiError::BadRequest {
            message: match &field {
                Some(field) => format!("{field}: {inner}"),
                None => format!("the body is not a valid {what}: {inner}"),
            },
            field,
        }
    })?;
    deserializer.end().map_err(|e| ApiError::BadRequest {
        field: None,
        message: format!("trailing data after the {what}: {e}"),
    })?;
    Ok(value)
}

/// Parses a turn request; an error names the field.
pub(crate) fn parse_turn(body: &[u8]) -> Result<TurnRequest, ApiError> {
    parse_body(body, "turn request")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_field(body: &str) -> (Option<String>, String) {
        match parse_turn(body.as_bytes()) {
            Err(ApiError::BadRequest { field, message }) => (field, message),
            other => panic!("expected a bad request, got {other:?}"),
        }
    }

    #[test]
    fn parse_errors_name_the_field() {
        let (field, message) = bad_field(r#"{"project": "p", "inputs": {"customerId": 42}}"#);
        assert_eq!(field.as_deref(), Some("inputs.customerId"));
        assert!(message.contains("invalid type"), "{message}");
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
    fn a_valid_turn_parses() {
        let turn = parse_turn(
            br#"{"project": "support", "profile": "default", "objective": "billing",
                 "consumer": "support-agent", "inputs": {"customerId": "CUST-1042"},
                 "budget": {"maxBytes": 8000}, "deadlineMs": 900}"#,
        )
        .unwrap();
        assert_eq!(turn.inputs["customerId"], "CUST-1042");
        assert_eq!(turn.budget.unwrap().max_bytes, 8000);
        assert_eq!(turn.deadline_ms, Some(900));
    }
}
