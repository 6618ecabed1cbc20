//! Every answer that is an error carries the `{"error": {"code", "message"}}` envelope,
//! whoever produced it: ctxd's own errors already do ([`super::ApiError`]); this wraps the
//! empty-bodied ones that actix-web produces itself, and closes every connection once the
//! drain has started, so that no kept-alive connection outlives the server (noting each
//! request but the probes as an arrival for the drain's quiet period). A `405` gets the
//! `Allow` header of its path, from the OpenAPI document. Every answer says
//! `X-Content-Type-Options: nosniff`: a browser takes each body as the type it is given
//! (JSON stays JSON), never as a script or page it guessed from the bytes.

use super::ApiState;
use crate::contract::{ErrorBody, ErrorDetail};
use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::{
    ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS,
};
use actix_web::http::{ConnectionType, StatusCode};
use actix_web::{HttpResponse, web};
use std::future::Future;

/// The middleware (`App::wrap_fn`).
pub(super) fn every_error_enveloped<S>(
    request: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse<BoxBody>, actix_web::Error>> + use<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = actix_web::Error>,
{
    let is_probe = matches!(request.path(), "/readyz" | "/healthz" | "/metrics");
    let draining = request
        .app_data::<web::Data<ApiState>>()
        .is_some_and(|state| {
            let draining = state.drain.has_started();
            // A load balancer's probes go on for as long as the process lives: they must
            // not keep the drain from ending.
            if draining && !is_probe {
                state.drain.arrived();
            }
            draining
        });
    let answer = service.call(request);
    async move {
        let mut response = answer.await?;
        let status = response.status();
        let empty = matches!(
            response.response().body().size(),
            BodySize::None | BodySize::Sized(0)
        );
        if (status.is_client_error() || status.is_server_error()) && empty {
            let mut enveloped = HttpResponse::build(status);
            for (name, value) in response.headers() {
                if name != CONTENT_TYPE && name != CONTENT_LENGTH {
                    enveloped.append_header((name.clone(), value.clone()));
                }
            }
            let mut enveloped = enveloped.json(error_body(status));
            if !response.response().head().keep_alive() {
                enveloped
                    .head_mut()
                    .set_connection_type(ConnectionType::Close);
            }
            response = response.into_response(enveloped);
        }
        if status == StatusCode::METHOD_NOT_ALLOWED
            && !response.headers().contains_key(ALLOW)
            && let Some(allow) = super::openapi::allowed_methods(response.request().path())
                .and_then(|allow| HeaderValue::from_str(&allow).ok())
        {
            response.headers_mut().insert(ALLOW, allow);
        }
        if draining {
            response
                .response_mut()
                .head_mut()
                .set_connection_type(ConnectionType::Close);
        }
        response
            .headers_mut()
            .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        Ok(response)
    }
}

/// The envelope for an error status that carries no body of ctxd's own.
pub(crate) fn error_body(status: StatusCode) -> ErrorBody {
    let (code, message) = match status.as_u16() {
        400 => ("BAD_REQUEST", "the request is not valid HTTP/1.1"),
        404 => ("NOT_FOUND", "no such route"),
        405 => ("METHOD_NOT_ALLOWED", "method not allowed"),
        408 => (
            "REQUEST_TIMEOUT",
            "the request did not arrive in time (server.header_timeout_ms, server.body_timeout_ms)",
        ),
        413 => ("PAYLOAD_TOO_LARGE", "the request is too large"),
        415 => (
            "UNSUPPORTED_MEDIA_TYPE",
            "the body must be JSON: send Content-Type: application/json",
        ),
        431 => (
            "REQUEST_HEADER_FIELDS_TOO_LARGE",
            "the request head is too large",
        ),
        503 => ("RUNTIME_UNAVAILABLE", "ctxd cannot serve right now"),
        _ if status.is_server_error() => ("INTERNAL", "ctxd failed to answer the request"),
        _ => ("BAD_REQUEST", "the request cannot be served"),
    };
    ErrorBody {
        error: ErrorDetail {
            code: code.to_owned(),
            message: message.to_owned(),
            field: None,
        },
    }
}
