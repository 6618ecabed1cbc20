//! Trace routes: search, one turn's provenance, and replay — all scoped to the caller's
//! tenant (another tenant's turn answers 404). Reads check out a read-only connection
//! from the registry's bounded [`ReaderPool`](crate::trace::store::ReaderPool) and run
//! on the blocking pool, never on the writer's connection; when every reader stays busy
//! the answer is 503, as for any store failure.

use super::body::{parse_body, read_json_body};
use super::routes::check_input_count;
use super::{ApiError, Tenant};
use crate::actors::Registry;
use crate::api::ApiState;
use crate::contract::{ErrorBody, LayerStatus, ProviderStatus};
use crate::telemetry::metrics::ReplayRateLimited;
use crate::trace::cursor::is_cursor_shaped;
use crate::trace::query::{SearchPage, SearchQuery};
use crate::trace::record::StoredTurn;
use crate::trace::store::{ReaderCheckout, StoreError};
use crate::turn::replay::ReplayResult;
use crate::turn::replay::{ReplayError, replay_from_store};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

/// Results per page when `limit` is absent, and the most a page may hold.
use crate::trace::query::{DEFAULT_LIMIT, MAX_LIMIT};

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config
        .route("/v1/traces", web::get().to(search))
        .route("/v1/traces/{turn_id}", web::get().to(show))
        .route("/v1/turns/{turn_id}/replay", web::post().to(replay));
}

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        field: Some(field.to_owned()),
        message: format!("{field}: {}", message.into()),
    }
}

/// Parses the search parameters; every problem names its parameter.
pub(crate) fn parse_search(query: &str, tenant: &str) -> Result<SearchQuery, ApiError> {
    let mut search = SearchQuery {
        tenant: Some(tenant.to_owned()),
        limit: DEFAULT_LIMIT,
        ..SearchQuery::default()
    };
    let mut seen = std::collections::HashSet::new();
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if !seen.insert(name.to_string()) {
            return Err(bad(&name, "given more than once"));
        }
        let value = value.into_owned();
        match name.as_ref() {
            "provider" => search.provider = Some(value),
            "providerStatus" => {
                search.provider_status =
                    Some(parse_enum::<ProviderStatus>("providerStatus", &value)?)
            }
            "layer" => search.layer = Some(value),
            "status" => search.layer_status = Some(parse_enum::<LayerStatus>("status", &value)?),
            "since" => search.since_ms = Some(parse_time("since", &value)?),
            "until" => search.until_ms = Some(parse_time("until", &value)?),
            "limit" => {
                search.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        bad(
                            "limit",
                            format!("{value:?} is not a number in 1..={MAX_LIMIT}"),
                        )
                    })?;
            }
            "cursor" => {
                // Its shape here; the store opens it, for this tenant and these filters.
                if !is_cursor_shaped(&value) {
                    return Err(invalid_cursor());
                }
                search.cursor = Some(value);
            }
            other => {
                return Err(bad(
                    other,
                    "unknown parameter; use provider, providerStatus, layer, status, since, until, limit, cursor",
                ));
            }
        }
    }
    Ok(search)
}

/// A cursor this server did not issue for this tenant and these filters.
fn invalid_cursor() -> ApiError {
    bad(
        "cursor",
        "is not a cursor this server issued for this search: pass nextCursor unchanged, with the same filters",
    )
}

fn parse_enum<T: for<'de> Deserialize<'de>>(field: &str, value: &str) -> Result<T, ApiError> {
    serde_json::from_value(serde_json::Value::String(value.to_owned()))
        .map_err(|_| bad(field, format!("{value:?} is not a known status")))
}

/// RFC 3339 (`2026-11-30T10:00:00Z`) or milliseconds since the Unix epoch, by the
/// trace query layer's one rule.
pub(crate) fn parse_time(field: &str, value: &str) -> Result<i64, ApiError> {
    crate::trace::query::parse_time(value).map_err(|_| {
        bad(
            field,
            format!("{value:?} is neither RFC 3339 nor epoch milliseconds"),
        )
    })
}

fn store_failure(error: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %error, "trace store read failed");
    ApiError::RuntimeUnavailable {
        message: "the trace store cannot be read right now".to_owned(),
    }
}

/// A reader from the registry's bounded pool; none free within the pool's wait is a 503.
async fn check_out_reader(registry: &Registry) -> Result<ReaderCheckout, ApiError> {
    registry
        .trace_readers
        .checkout()
        .await
        .map_err(store_failure)
}

#[utoipa::path(
    get,
    path = "/v1/traces",
    summary = "Search the tenant's turns, newest first (docs/PROVENANCE.md)",
    tag = "traces",
    security(("tenantKey" = [])),
    params(
        ("provider" = Option<String>, Query, description = "Turns that reached this provider"),
        ("providerStatus" = Option<ProviderStatus>, Query, description = "Turns with a provider record of this status (with `provider`: that provider's)"),
        ("layer" = Option<String>, Query, description = "Turns with a decision for this layer"),
        ("status" = Option<LayerStatus>, Query, description = "Turns with a layer decision of this status (with `layer`: that layer's)"),
        ("since" = Option<String>, Query, pattern = "^(\\+?[0-9]{1,18}|(19[7-9][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?Z?)$", description = "Turns started at or after: epoch milliseconds, or RFC 3339 in UTC (`2026-11-30T10:00:00Z`)"),
        ("until" = Option<String>, Query, pattern = "^(\\+?[0-9]{1,18}|(19[7-9][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?Z?)$", description = "Turns started before: as `since`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Results per page (default 20)"),
        ("cursor" = Option<String>, Query, pattern = "^[0-9a-f]{96}$", description = "`nextCursor` of the previous page, unchanged, with the same filters; any other is refused (400)"),
    ),
    responses(
        (status = 200, description = "A page of the tenant's turns, newest first", body = SearchPage),
        (status = 400, description = "A parameter given twice, unknown, or out of range, or a cursor this server did not issue for this search; `field` names it (`BAD_REQUEST`)", body = ErrorBody),
    )
)]
async fn search(
    tenant: Tenant,
    request: HttpRequest,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    search_traces(&tenant, request.query_string(), &state).await
}

/// A page of the tenant's traces for a query string (`GET /v1/traces` and the MCP
/// `search_traces` tool alike).
pub(crate) async fn search_traces(
    tenant: &Tenant,
    query: &str,
    state: &ApiState,
) -> Result<HttpResponse, ApiError> {
    let query = parse_search(query, &tenant.id)?;
    let mut checkout = check_out_reader(&state.registry).await?;
    let page = web::block(move || checkout.reader()?.search(&query))
        .await
        .map_err(store_failure)?
        .map_err(|error| match error {
            StoreError::InvalidCursor => invalid_cursor(),
            other => store_failure(other),
        })?;
    Ok(HttpResponse::Ok().json(json!({"traces": page.traces, "nextCursor": page.next_cursor})))
}

#[utoipa::path(
    get,
    path = "/v1/traces/{turnId}",
    summary = "One of the tenant's turns with its provenance",
    tag = "traces",
    security(("tenantKey" = [])),
    params(("turnId" = String, Path, description = "The turn's id (`turnId` of its answer)")),
    responses(
        (status = 200, description = "The turn record and its provider records", body = StoredTurn),
        (status = 404, description = "No turn of this tenant has this id (`NOT_FOUND`)", body = ErrorBody),
    )
)]
async fn show(
    tenant: Tenant,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    show_trace(&tenant, path.into_inner(), &state).await
}

/// One of the tenant's turns with its provenance (`GET /v1/traces/{turn_id}` and the
/// MCP `get_trace` tool alike).
pub(crate) async fn show_trace(
    tenant: &Tenant,
    turn_id: String,
    state: &ApiState,
) -> Result<HttpResponse, ApiError> {
    let tenant_id = tenant.id.clone();
    let id = turn_id.clone();
    let mut checkout = check_out_reader(&state.registry).await?;
    let stored = web::block(move || checkout.reader()?.turn(Some(&tenant_id), &id))
        .await
        .map_err(store_failure)?
        .map_err(store_failure)?;
    match stored {
        Some(stored) => Ok(HttpResponse::Ok().json(stored)),
        None => Err(ApiError::NotFound {
            message: format!("unknown turn {turn_id:?}"),
        }),
    }
}

/// `POST /v1/turns/{turnId}/replay`: the recorded turn's inputs.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplayRequest {
    /// Read like a turn's: string values only, every key once, never echoed. Every input
    /// of the recorded turn, and no other.
    #[serde(default, deserialize_with = "crate::contract::input_map")]
    #[schema(schema_with = crate::contract::turn::input_map_schema)]
    inputs: BTreeMap<String, String>,
}

#[utoipa::path(
    post,
    path = "/v1/turns/{turnId}/replay",
    summary = "Replay a recorded turn from the trace store with its inputs (docs/PROVENANCE.md)",
    tag = "turns",
    security(("tenantKey" = [])),
    params(("turnId" = String, Path, description = "The recorded turn's id")),
    request_body = ReplayRequest,
    responses(
        (status = 200, description = "What the replay reproduced, beside what the turn recorded", body = ReplayResult),
        (status = 400, description = "Not JSON, an unknown field, too many inputs, or an input missing, unexpected or not matching the recorded turn; `field` names it (`BAD_REQUEST`)", body = ErrorBody),
        (status = 404, description = "No turn of this tenant has this id (`NOT_FOUND`)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within `server.body_timeout_ms` (`REQUEST_TIMEOUT`)", body = ErrorBody),
        (status = 413, description = "The body exceeds `server.max_body_bytes` (`PAYLOAD_TOO_LARGE`)", body = ErrorBody),
        (status = 415, description = "No `Content-Type: application/json` (`UNSUPPORTED_MEDIA_TYPE`)", body = ErrorBody),
        (status = 422, description = "The turn's build is not in the store or does not load (`UNPROCESSABLE`)", body = ErrorBody),
        (status = 429, description = "The tenant's replay bucket is empty (`TOO_MANY_REPLAYS`, `Retry-After` in seconds)", body = ErrorBody),
    )
)]
async fn replay(
    tenant: Tenant,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> Result<HttpResponse, ApiError> {
    // Every attempt costs a token, a malformed one too: the limit is on guesses.
    if let Err(wait) = state.replays.take(&tenant.id, std::time::Instant::now()) {
        ReplayRateLimited { tenant: &tenant.id }.emit();
        return Err(ApiError::TooManyReplays {
            retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
        });
    }
    let registry = state.registry.clone();
    let body = read_json_body(&request, payload, &state).await?;
    let replay_request: ReplayRequest = parse_body(&body, "replay request")?;
    check_input_count(replay_request.inputs.len(), state.requests.max_input_keys)?;
    let turn_id = path.into_inner();
    let tenant_id = tenant.id.clone();
    let mut checkout = check_out_reader(&registry).await?;
    let result = web::block(move || {
        let reader = checkout
            .reader()
            .map_err(|e| ReplayError::Store(e.to_string()))?;
        replay_from_store(
            reader,
            Some(&tenant_id),
            &turn_id,
            &replay_request.inputs,
            &registry.digest_key,
        )
    })
    .await
    .map_err(store_failure)?;
    match result {
        Ok(result) => Ok(HttpResponse::Ok().json(result)),
        Err(error) => Err(replay_error(error)),
    }
}

fn replay_error(error: ReplayError) -> ApiError {
    let message = error.to_string();
    match &error {
        ReplayError::UnknownTurn(_) => ApiError::NotFound { message },
        ReplayError::MissingInput(key)
        | ReplayError::UnexpectedInput(key)
        | ReplayError::InputMismatch(key) => ApiError::BadRequest {
            field: Some(format!("inputs.{key}")),
            message,
        },
        ReplayError::Store(_) => store_failure(message),
        _ => ApiError::Unprocessable { message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_field(query: &str) -> Option<String> {
        match parse_search(query, "acme") {
            Err(ApiError::BadRequest { field, .. }) => field,
            other => panic!("expected an error for {query:?}, got {other:?}"),
        }
    }

    #[test]
    fn search_parameters_parse() {
        let cursor = "0a".repeat(48);
        let query = parse_search(
            &format!("provider=crm&providerStatus=TIMEOUT&layer=profile&status=UNAVAILABLE&since=2026-11-30T10:00:00Z&until=1764500000000&limit=10&cursor={cursor}"),
            "acme",
        )
        .unwrap();
        assert_eq!(query.tenant.as_deref(), Some("acme"));
        assert_eq!(query.provider.as_deref(), Some("crm"));
        assert_eq!(query.provider_status, Some(ProviderStatus::Timeout));
        assert_eq!(query.layer_status, Some(LayerStatus::Unavailable));
        assert_eq!(query.since_ms, Some(1_796_032_800_000));
        assert_eq!(query.until_ms, Some(1_764_500_000_000));
        assert_eq!(query.limit, 10);
        assert_eq!(query.cursor.as_deref(), Some(cursor.as_str()));
        assert_eq!(
            parse_search("status=EMPTY", "acme").unwrap().layer_status,
            Some(LayerStatus::Empty)
        );
        assert_eq!(parse_search("", "acme").unwrap().limit, DEFAULT_LIMIT);
    }

    #[test]
    fn bad_parameters_are_named() {
        assert_eq!(
            error_field("providerStatus=SLOW").as_deref(),
            Some("providerStatus")
        );
        assert_eq!(error_field("limit=0").as_deref(), Some("limit"));
        assert_eq!(error_field("limit=501").as_deref(), Some("limit"));
        assert_eq!(error_field("since=yesterday").as_deref(), Some("since"));
        assert_eq!(error_field("tenant=globex").as_deref(), Some("tenant"));
        assert_eq!(
            error_field("provider=a&provider=b").as_deref(),
            Some("provider")
        );
        assert_eq!(error_field("status=SOMETIMES").as_deref(), Some("status"));
        assert_eq!(error_field("cursor=zz").as_deref(), Some("cursor"));
        // A bare row number is no cursor.
        assert_eq!(
            error_field("cursor=00000000000000ff").as_deref(),
            Some("cursor")
        );
    }
}
