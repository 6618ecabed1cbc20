//! API errors and their HTTP status codes: the only place errors become status codes.

use crate::actors::TurnError;
use crate::contract::{ErrorBody, ErrorDetail};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
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
    /// 413: the body exceeds `max_body_bytes`.
    PayloadTooLarge { limit: usize },
    /// 422: the request is well-formed but cannot be carried out (a replay whose build
    /// is not in the store).
    Unprocessable { message: String },
    /// 429: the tenant's in-flight turns are at `max_in_flight`.
    TooManyTurns { limit: usize },
    /// 503: ctxd itself cannot serve (shutting down). Never a provider's failure.
    RuntimeUnavailable { message: String },
}

impl ApiError {
    fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "UNAUTHORIZED",
            ApiError::BadRequest { .. } => "BAD_REQUEST",
            ApiError::NotFound { .. } => "NOT_FOUND",
            ApiError::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ApiError::PayloadTooLarge { .. } => "PAYLOAD_TOO_LARGE",
            ApiError::TooManyTurns { .. } => "TOO_MANY_TURNS",
            ApiError::Unprocessable { .. } => "UNPROCESSABLE",
            ApiError::RuntimeUnavailable { .. } => "RUNTIME_UNAVAILABLE",
        }
    }

    /// The `outcome` label of the turns counter for this error.
    pub fn metric_outcome(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::TooManyTurns { .. } => "too_many_turns",
            ApiError::Unprocessable { .. } => "unprocessable",
            ApiError::RuntimeUnavailable { .. } => "runtime_unavailable",
        }
    }

    fn message(&self) -> String {
        match self {
            ApiError::Unauthorized => {
                "a valid tenant API key is required: Authorization: Bearer <key>".to_owned()
            }
            ApiError::BadRequest { message, .. }
            | ApiError::NotFound { message }
            | ApiError::Unprocessable { message }
            | ApiError::RuntimeUnavailable { message } => message.clone(),
            ApiError::MethodNotAllowed => "method not allowed".to_owned(),
            ApiError::PayloadTooLarge { limit } => {
                format!("the request body exceeds {limit} bytes")
            }
            ApiError::TooManyTurns { limit } => {
                format!("the tenant already has {limit} turns in flight; retry shortly")
            }
        }
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
            TurnError::TraceBackpressure => ApiError::RuntimeUnavailable {
                message: error.to_string(),
            },
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
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::TooManyTurns { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RuntimeUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
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
            ApiError::RuntimeUnavailable { .. } => {
                response.insert_header((header::RETRY_AFTER, HeaderValue::from_static("1")));
                response.insert_header((header::CONNECTION, HeaderValue::from_static("close")));
            }
            _ => {}
        }
        let field = match self {
            ApiError::BadRequest { field, .. } => field.clone(),
            _ => None,
        };
        response.json(ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message: self.message(),
                field,
            },
        })
    }
}
