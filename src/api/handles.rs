//! Handle routes, scoped to the caller's tenant like traces: bounded operations on a
//! handle, its deletion, its operation trace, and the store's declared capabilities.
//!
//! - `POST /v1/handles/{id}/ops` — one operation (`docs/HANDLES.md` has the JSON).
//!   The id's shape is checked first (`invalid_handle`), then the handle (unknown or
//!   stale), then the request; the operation itself runs on the blocking pool, bounded
//!   by its time limit, never on the worker's thread.
//! - `DELETE /v1/handles/{id}` — leaves a tombstone; deleting twice is `stale_handle`.
//! - `GET /v1/handles/{id}/trace?after=&limit=` — the handle's operation records in
//!   sequence order, from the trace store (visible once the writer commits its batch).
//! - `GET /v1/handles/capabilities` — `filesystem: false, network: false`, the
//!   operations, functions and limits.
//!
//! What an attempt comes to — sequence, result, trace record — is decided by
//! [`crate::handles::attempt`]; these routes turn HTTP into its types and back, hop to
//! the blocking pool, queue the record and count the result. A handle store that cannot
//! be asked (Redis unreachable) answers `503 RUNTIME_UNAVAILABLE`, counted like any
//! refusal. Every attempt on a handle the tenant holds (live or tombstoned) — successful
//! or not — is traced, its record queued like a turn's: if the queue stays full the
//! answer is 503, never an untraced result. An id that resolves to nothing of the
//! tenant's is only counted in the metric: there is no per-handle sequence to give it,
//! and recording caller-chosen ids would let anyone fill the store.

use super::answers::{HandleCapabilities, HandleDeleted, HandleOpAnswer, HandleTracePage};
use super::body::read_json_body;
use super::{ApiError, ApiState, Tenant};
use crate::actors::Registry;
use crate::contract::{ErrorBody, HandleRef};
use crate::handles::attempt::{self, DELETE, Finished, NotHeld, Prepared};
use crate::handles::bounds::Clock;
use crate::handles::request;
use crate::handles::{
    HandleError, HandleOperationFinished, OpOutput, StoreUnavailable, SystemClock, is_valid_id,
};
use crate::trace::query::{DEFAULT_HANDLE_OPERATIONS, MAX_HANDLE_OPERATIONS};
use crate::trace::record::HandleOpRecord;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use serde_json::json;
use std::time::SystemTime;

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/handles/capabilities", web::get().to(capabilities))
        // Not a handle id: any other method is 405 here, never an operation on a handle.
        .route(
            "/v1/handles/capabilities",
            web::to(|| async { Err::<HttpResponse, _>(ApiError::MethodNotAllowed) }),
        )
        .route("/v1/handles/{id}/ops", web::post().to(operate))
        .route("/v1/handles/{id}/trace", web::get().to(trace))
        .route("/v1/handles/{id}", web::delete().to(delete));
}

/// A successful operation's answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OpResponse<'a> {
    handle: &'a HandleRef,
    operation: &'static str,
    sequence: u64,
    limits: &'a request::Limits,
    #[serde(flatten)]
    output: &'a OpOutput,
    bytes_inspected: u64,
    items_inspected: u64,
    elapsed_ms: u64,
}

fn counted(op: &'static str, error: ApiError) -> ApiError {
    HandleOperationFinished {
        op,
        result: error.metric_outcome(),
    }
    .emit();
    error
}

/// Nothing of the tenant's: only counted (see the module docs).
fn not_held(not_held: NotHeld) -> ApiError {
    let op = not_held.op;
    counted(op, ApiError::Handle(not_held.into_error()))
}

#[utoipa::path(
    get,
    path = "/v1/handles/capabilities",
    summary = "What handle operations may do and their limits (docs/HANDLES.md)",
    tag = "handles",
    security(("tenantKey" = [])),
    responses((status = 200, description = "No filesystem, no network; the operations, functions and limits", body = HandleCapabilities))
)]
async fn capabilities(_: Tenant, state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let store = &state.registry.handles;
    let settings = store.settings();
    let mut body = serde_json::to_value(store.capabilities()).unwrap_or_default();
    body["ttlSeconds"] = json!(settings.ttl.as_secs());
    body["limits"] = json!({
        "defaultMaxResults": settings.limits.default_max_results,
        "maxResultsCap": settings.limits.max_results_cap,
        "defaultMaxBytes": settings.limits.default_max_bytes,
        "maxBytesCap": settings.limits.max_bytes_cap,
        "defaultTimeLimitMs": settings.limits.default_time_limit.as_millis() as u64,
        "timeLimitCapMs": settings.limits.time_limit_cap.as_millis() as u64,
    });
    Ok(HttpResponse::Ok().json(body))
}

#[utoipa::path(
    post,
    path = "/v1/handles/{id}/ops",
    summary = "One bounded operation on material a turn kept behind a handle",
    tag = "handles",
    security(("tenantKey" = [])),
    params(("id" = String, Path, pattern = "^h_[0-9a-f]{32}$", description = "The handle id, `h_` and 32 hex digits")),
    request_body(content = ref("#/components/schemas/HandleOpRequest"), content_type = "application/json"),
    responses(
        (status = 200, description = "The operation's bounded result", body = HandleOpAnswer),
        (status = 400, description = "`invalid_handle`, `invalid_argument`, `invalid_limit`, `invalid_pattern`, `out_of_range`, `unsupported_partition` (with `field`); `BAD_REQUEST` for a body that is not JSON", body = ErrorBody),
        (status = 403, description = "`capability_denied`: a function outside the allow-list", body = ErrorBody),
        (status = 404, description = "`unknown_handle`: nothing of this tenant's has this id", body = ErrorBody),
        (status = 408, description = "The body did not arrive within `server.body_timeout_ms` (`REQUEST_TIMEOUT`)", body = ErrorBody),
        (status = 409, description = "`stale_handle` with reason `wrong_version`", body = ErrorBody),
        (status = 410, description = "`stale_handle`: deleted, expired or evicted", body = ErrorBody),
        (status = 413, description = "The body exceeds `server.max_body_bytes` (`PAYLOAD_TOO_LARGE`)", body = ErrorBody),
        (status = 415, description = "No `Content-Type: application/json` (`UNSUPPORTED_MEDIA_TYPE`)", body = ErrorBody),
        (status = 422, description = "`time_limit_exceeded` or `material_too_large`", body = ErrorBody),
    )
)]
async fn operate(
    tenant: Tenant,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    if !is_valid_id(&id) {
        return Err(counted(
            "unknown",
            ApiError::Handle(HandleError::InvalidHandle),
        ));
    }
    let body = read_json_body(&request, payload, &state)
        .await
        .map_err(|error| counted("unknown", error))?;
    operate_on(&tenant, &id, &body, &state).await
}

/// One operation on handle `id` from its JSON body (`POST /v1/handles/{id}/ops` and the
/// MCP `handle_*` tools alike).
pub(crate) async fn operate_on(
    tenant: &Tenant,
    id: &str,
    body: &[u8],
    state: &ApiState,
) -> Result<HttpResponse, ApiError> {
    let registry = &state.registry;
    if !is_valid_id(id) {
        return Err(counted(
            "unknown",
            ApiError::Handle(HandleError::InvalidHandle),
        ));
    }
    let store = &registry.handles;
    let parsed = request::parse(body, &store.settings().limits);
    let (op, version) = attempt::requested(&parsed);
    let held = store
        .begin(&tenant.id, id, version, SystemClock.now())
        .await
        .map_err(|error| counted(op, store_unavailable(error)))?;
    let prepared =
        attempt::prepare_held(held, &tenant.id, id, parsed, SystemTime::now()).map_err(not_held)?;
    let finished = match prepared {
        Prepared::Refused(finished) => finished,
        // Never on the worker's thread: the operation is bounded by its time limit, not
        // by a few microseconds.
        Prepared::Ready(ready) => {
            let op = ready.op();
            web::block(move || ready.run(&SystemClock))
                .await
                .map_err(|_| {
                    counted(
                        op,
                        ApiError::RuntimeUnavailable {
                            message: "the operation could not be scheduled".to_owned(),
                        },
                    )
                })?
        }
    };
    let operation = finished.op;
    concluded(registry, finished, |handle, sequence, answer| {
        HttpResponse::Ok().json(OpResponse {
            handle,
            operation,
            sequence,
            limits: &answer.limits,
            output: &answer.output,
            bytes_inspected: answer.inspected.bytes,
            items_inspected: answer.inspected.items,
            elapsed_ms: answer.elapsed.as_millis() as u64,
        })
    })
    .await
}

/// Queues the attempt's record, then answers: `respond` shapes a success, a failure is
/// counted and mapped to its status.
async fn concluded<T>(
    registry: &Registry,
    finished: Finished<T>,
    respond: impl FnOnce(&HandleRef, u64, T) -> HttpResponse,
) -> Result<HttpResponse, ApiError> {
    traced(registry, &finished.record, finished.op).await?;
    match finished.result {
        Ok(success) => {
            HandleOperationFinished {
                op: finished.op,
                result: "ok",
            }
            .emit();
            Ok(respond(&finished.handle, finished.sequence, success))
        }
        Err(error) => Err(counted(finished.op, ApiError::Handle(error))),
    }
}

/// Queues the record like a turn's trace: if the queue stays full the caller gets 503
/// instead of an untraced answer.
async fn traced(
    registry: &Registry,
    record: &HandleOpRecord,
    op: &'static str,
) -> Result<(), ApiError> {
    match registry
        .traces
        .enqueue_handle_operation(record, registry.trace_wait)
        .await
    {
        Ok(()) => Ok(()),
        Err(backpressure) => {
            crate::telemetry::metrics::trace_backpressure();
            tracing::warn!(op, error = %backpressure, "handle operation refused: its trace cannot be queued");
            Err(counted(
                op,
                ApiError::RuntimeUnavailable {
                    message: format!("the operation's trace cannot be recorded: {backpressure}"),
                },
            ))
        }
    }
}

#[utoipa::path(
    delete,
    path = "/v1/handles/{id}",
    summary = "Delete a handle (a tombstone stays)",
    tag = "handles",
    security(("tenantKey" = [])),
    params(("id" = String, Path, pattern = "^h_[0-9a-f]{32}$", description = "The handle id, `h_` and 32 hex digits")),
    responses(
        (status = 200, description = "The handle is deleted; a tombstone stays", body = HandleDeleted),
        (status = 400, description = "`invalid_handle`: not the shape of a handle id", body = ErrorBody),
        (status = 404, description = "`unknown_handle`: nothing of this tenant's has this id", body = ErrorBody),
        (status = 410, description = "`stale_handle`: already deleted, expired or evicted", body = ErrorBody),
    )
)]
async fn delete(
    tenant: Tenant,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    let registry = &state.registry;
    let id = path.into_inner();
    if !is_valid_id(&id) {
        return Err(counted(
            DELETE,
            ApiError::Handle(HandleError::InvalidHandle),
        ));
    }
    let held = registry
        .handles
        .delete(&tenant.id, &id, SystemClock.now())
        .await
        .map_err(|error| counted(DELETE, store_unavailable(error)))?;
    let finished =
        attempt::delete_held(held, &tenant.id, &id, SystemTime::now()).map_err(not_held)?;
    // If the record cannot be queued the tombstone stays: the deletion happened, and
    // the caller is told it is not traced (503) rather than answered as if it were.
    concluded(registry, finished, |handle, sequence, ()| {
        HttpResponse::Ok().json(json!({
            "handle": handle,
            "deleted": true,
            "sequence": sequence,
        }))
    })
    .await
}

/// `after` (a sequence, default 0) and `limit` (1..=1000, default 100).
fn parse_trace_query(query: &str) -> Result<(u64, usize), HandleError> {
    let mut after = 0;
    let mut limit = DEFAULT_HANDLE_OPERATIONS;
    let mut seen = std::collections::HashSet::new();
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if !seen.insert(name.to_string()) {
            return Err(HandleError::invalid_argument(&name, "given more than once"));
        }
        match name.as_ref() {
            "after" => {
                after = value.parse().map_err(|_| {
                    HandleError::invalid_argument("after", "must be a sequence number")
                })?;
            }
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_HANDLE_OPERATIONS).contains(n))
                    .ok_or_else(|| HandleError::InvalidLimit {
                        field: "limit".to_owned(),
                        message: format!("use 1..={MAX_HANDLE_OPERATIONS}"),
                        max: Some(MAX_HANDLE_OPERATIONS as u64),
                    })?;
            }
            other => {
                return Err(HandleError::invalid_argument(
                    &other.chars().take(64).collect::<String>(),
                    "unknown parameter; use after, limit",
                ));
            }
        }
    }
    Ok((after, limit))
}

#[utoipa::path(
    get,
    path = "/v1/handles/{id}/trace",
    summary = "The handle's operation records, in sequence order",
    tag = "handles",
    security(("tenantKey" = [])),
    params(
        ("id" = String, Path, pattern = "^h_[0-9a-f]{32}$", description = "The handle id, `h_` and 32 hex digits"),
        ("after" = Option<u64>, Query, minimum = 0, maximum = 18446744073709551615_u64, description = "Records after this sequence (default 0)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Records per page (default 100)"),
    ),
    responses(
        (status = 200, description = "The handle's operation records in sequence order", body = HandleTracePage),
        (status = 400, description = "`invalid_handle`, or a parameter unknown, given twice or out of range (`invalid_argument`, `invalid_limit`)", body = ErrorBody),
        (status = 404, description = "`unknown_handle`: nothing of this tenant's has this id, and no record", body = ErrorBody),
    )
)]
async fn trace(
    tenant: Tenant,
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    let registry = state.registry.clone();
    let id = path.into_inner();
    if !is_valid_id(&id) {
        return Err(ApiError::Handle(HandleError::InvalidHandle));
    }
    let (after, limit) = parse_trace_query(request.query_string()).map_err(ApiError::Handle)?;
    let tenant_id = tenant.id.clone();
    let handle = id.clone();
    let mut checkout = registry
        .trace_readers
        .checkout()
        .await
        .map_err(store_failure)?;
    let page = web::block(move || {
        checkout
            .reader()?
            .handle_operations(&tenant_id, &handle, after, limit)
    })
    .await
    .map_err(store_failure)?
    .map_err(store_failure)?;
    // Records outlive the handle (and a restart); with none, only a handle the tenant
    // holds has a (still empty) trace.
    if page.operations.is_empty()
        && after == 0
        && !registry
            .handles
            .is_known(&tenant.id, &id)
            .await
            .map_err(store_unavailable)?
    {
        return Err(ApiError::Handle(HandleError::UnknownHandle { id }));
    }
    Ok(HttpResponse::Ok().json(json!({
        "handle": id,
        "operations": page.operations,
        "nextAfter": page.next_after,
    })))
}

/// The handle store (Redis) could not be asked: 503, the attempt neither sequenced nor
/// answered. The message names the server, never a password.
fn store_unavailable(error: StoreUnavailable) -> ApiError {
    ApiError::RuntimeUnavailable {
        message: error.to_string(),
    }
}

fn store_failure(error: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %error, "trace store read failed");
    ApiError::RuntimeUnavailable {
        message: "the trace store cannot be read right now".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_parameters_parse_and_are_named() {
        assert_eq!(
            parse_trace_query("").unwrap(),
            (0, DEFAULT_HANDLE_OPERATIONS)
        );
        assert_eq!(parse_trace_query("after=7&limit=1000").unwrap(), (7, 1000));
        assert_eq!(
            parse_trace_query("limit=0").unwrap_err().kind(),
            "invalid_limit"
        );
        assert_eq!(
            parse_trace_query("limit=1001").unwrap_err().kind(),
            "invalid_limit"
        );
        for query in ["after=-1", "after=x", "after=1&after=2", "tenant=globex"] {
            assert_eq!(
                parse_trace_query(query).unwrap_err().kind(),
                "invalid_argument",
                "{query}"
            );
        }
    }

    #[test]
    fn handle_errors_have_their_status_and_fields() {
        use crate::handles::StaleReason;
        use actix_web::ResponseError;
        let cases = [
            (HandleError::InvalidHandle, 400),
            (HandleError::UnknownHandle { id: "h_x".into() }, 404),
            (
                HandleError::StaleHandle {
                    id: "h_x".into(),
                    reason: StaleReason::WrongVersion,
                    requested: Some(2),
                    version: 1,
                },
                409,
            ),
            (
                HandleError::StaleHandle {
                    id: "h_x".into(),
                    reason: StaleReason::Expired,
                    requested: Some(1),
                    version: 1,
                },
                410,
            ),
            (
                HandleError::CapabilityDenied {
                    operation: "map",
                    function: "eval".into(),
                    allowed: request::MAP_FUNCTIONS,
                },
                403,
            ),
            (HandleError::TimeLimitExceeded { limit_ms: 5 }, 422),
            (
                HandleError::OutOfRange {
                    field: "op.item".into(),
                    value: 9,
                    available: 2,
                },
                400,
            ),
        ];
        for (error, status) in cases {
            let api = ApiError::Handle(error.clone());
            assert_eq!(api.status_code().as_u16(), status, "{error:?}");
            let response = api.error_response();
            let body = actix_web::body::to_bytes(response.into_body());
            let body = futures_util::FutureExt::now_or_never(body)
                .expect("a JSON body is ready")
                .ok()
                .unwrap();
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["error"]["code"], error.kind());
            assert_eq!(json["error"]["message"], error.to_string());
            for (key, value) in error.fields() {
                assert_eq!(json["error"][&key], value, "{key}");
            }
        }
    }
}
