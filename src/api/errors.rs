//! API errors and their HTTP status codes: the only place errors become status codes.

use crate::actors::TurnError;
use crate::contract::{ErrorBody, ErrorDetail};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// 401: no or unknown bearer key.
    Unauthorized,
    /// 400: the body is not valid JSON or a field is wrong.
    BadRequest {
        field: Option<String>,
        message: String,
    },
    /// 404
    NotFound { message: String },
    /// 405
    MethodNotAllowed,
    /// 408: the request did not arrive in time (`server.body_timeout_ms`, or the HTTP
    /// layer's `server.header_timeout_ms`).
    RequestTimeout { message: String },
    /// 413: the body exceeds `max_body_bytes`.
    PayloadTooLarge { limit: usize },
    /// 415: a JSON-body route got another `Content-Type`.
    UnsupportedMediaType,
    /// 422: the request is well-formed but cannot be carried out (a replay whose build
    /// is not in the store).
    Unprocessable { message: String },
    /// 429: the tenant's in-flight turns are at `max_in_flight`.
    TooManyTurns { limit: usize },
    /// 429: the tenant's replay bucket is empty (`limits.replays_per_minute`).
    TooManyReplays { retry_after_secs: u64 },
    /// 503: ctxd itself cannot serve (shutting down). Never a provider's failure.
    RuntimeUnavailable { message: String },
    /// A handle operation refused (seed 004 kinds, lowercase codes, with their fields):
    /// 400 for `invalid_*`, `out_of_range` and `unsupported_partition`, 403
    /// `capability_denied`, 404 `unknown_handle`, 409 `stale_handle` for a wrong version
    /// and 410 for a deleted, expired or evicted handle, 422 `time_limit_exceeded`.
    Handle(crate::handles::HandleError),
}

impl ApiError {
    /// 503 for every request that arrives once shutdown has started.
    pub(crate) fn shutting_down() -> ApiError {
        ApiError::RuntimeUnavailable {
            message: "ctxd is shutting down".to_owned(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "UNAUTHORIZED",
            ApiError::BadRequest { .. } => "BAD_REQUEST",
            ApiError::NotFound { .. } => "NOT_FOUND",
            ApiError::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ApiError::RequestTimeout { .. } => "REQUEST_TIMEOUT",
            ApiError::PayloadTooLarge { .. } => "PAYLOAD_TOO_LARGE",
            ApiError::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            ApiError::TooManyTurns { .. } => "TOO_MANY_TURNS",
            ApiError::TooManyReplays { .. } => "TOO_MANY_REPLAYS",
            ApiError::Unprocessable { .. } => "UNPROCESSABLE",
            ApiError::RuntimeUnavailable { .. } => "RUNTIME_UNAVAILABLE",
            ApiError::Handle(error) => error.kind(),
        }
    }

    /// The `outcome` label of the turns counter for this error.
    pub(crate) fn metric_outcome(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::RequestTimeout { .. } => "request_timeout",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::TooManyTurns { .. } => "too_many_turns",
            ApiError::TooManyReplays { .. } => "too_many_replays",
            ApiError::Unprocessable { .. } => "unprocessable",
            ApiError::RuntimeUnavailable { .. } => "runtime_unavailable",
            ApiError::Handle(error) => error.kind(),
        }
    }

    fn message(&self) -> String {
        match self {
            ApiError::Unauthorized => {
                "a valid tenant API key is required: Authorization: Bearer <key>".to_owned()
            }
            ApiError::BadRequest { message, .. }
            | ApiError::NotFound { message }
            | ApiError::RequestTimeout { message }
            | ApiError::Unprocessable { message }
            | ApiError::RuntimeUnavailable { message } => message.clone(),
            ApiError::MethodNotAllowed => "method not allowed".to_owned(),
            ApiError::PayloadTooLarge { limit } => {
                format!("the request body exceeds {limit} bytes")
            }
            ApiError::UnsupportedMediaType => {
                "the body must be JSON: send Content-Type: application/json".to_owned()
            }
            ApiError::TooManyTurns { limit } => {
                format!("the tenant already has {limit} turns in flight; retry shortly")
            }
            ApiError::TooManyReplays { retry_after_secs } => format!(
                "the tenant's replay rate limit is reached (limits.replays_per_minute); retry in {retry_after_secs} s"
            ),
            ApiError::Handle(error) => error.to_string(),
        }
    }
}

impl ApiError {
    /// The body of the answer: `{"error": {"code", "message", "field"?}}` — for a handle
    /// error, with its own fields.
    pub(crate) fn envelope(&self) -> serde_json::Value {
        if let ApiError::Handle(error) = self {
            let mut detail = serde_json::Map::new();
            detail.insert("code".to_owned(), error.kind().into());
            detail.insert("message".to_owned(), error.to_string().into());
            detail.extend(error.fields());
            return serde_json::json!({ "error": detail });
        }
        let field = match self {
            ApiError::BadRequest { field, .. } => field.clone(),
            _ => None,
        };
        serde_json::json!(ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message: self.message(),
                field,
            },
        })
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl From<TurnError> for ApiError {
    fn from(error: TurnError) -> Self {
        match error {
            TurnError::UnknownProject(_) | TurnError::UnknownProfile(_) => ApiError::NotFound {
                message: error.to_string(),
            },
            TurnError::InvalidField { field, message } => ApiError::BadRequest {
                message: format!("{field}: {message}"),
                field: Some(field),
            },
            TurnError::TraceBackpressure(_) => ApiError::RuntimeUnavailable {
                message: error.to_string(),
            },
        }
    }
}

fn handle_status(error: &crate::handles::HandleError) -> StatusCode {
    use crate::handles::{HandleError, StaleReason};
    match error {
        HandleError::InvalidHandle
        | HandleError::InvalidLimit { .. }
        | HandleError::InvalidPattern { .. }
        | HandleError::InvalidArgument { .. }
        | HandleError::OutOfRange { .. }
        | HandleError::UnsupportedPartition { .. } => StatusCode::BAD_REQUEST,
        HandleError::CapabilityDenied { .. } => StatusCode::FORBIDDEN,
        HandleError::UnknownHandle { .. } => StatusCode::NOT_FOUND,
        HandleError::StaleHandle {
            reason: StaleReason::WrongVersion,
            ..
        } => StatusCode::CONFLICT,
        HandleError::StaleHandle { .. } => StatusCode::GONE,
        HandleError::TimeLimitExceeded { .. } | HandleError::MaterialTooLarge { .. } => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyTurns { .. } | ApiError::TooManyReplays { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RuntimeUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Handle(error) => handle_status(error),
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            ApiError::Unauthorized => {
                response
                    .insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
            }
            ApiError::TooManyTurns { .. } => {
                response.insert_header((header::RETRY_AFTER, HeaderValue::from_static("1")));
            }
            ApiError::TooManyReplays { retry_after_secs } => {
                response.insert_header((header::RETRY_AFTER, *retry_after_secs));
            }
            // actix writes `Connection` from the response head, never from a header
            // inserted by hand: closing is `force_close`.
            ApiError::RuntimeUnavailable { .. } => {
                response.insert_header((header::RETRY_AFTER, HeaderValue::from_static("1")));
                response.force_close();
            }
            // The rest of the body was never read: the connection cannot carry another
            // request.
            ApiError::RequestTimeout { .. } => {
                response.force_close();
            }
            _ => {}
        }
        response.json(self.envelope())
    }
}
