//! The HTTP API (actix-web): `POST /v1/turns`, trace search, show and replay, handle
//! operations (`/v1/handles/…`), `GET /healthz`, `GET /readyz`. Turns HTTP
//! into messages and errors into status codes — the only place that does — and holds no
//! business rules. Every tenant route takes the one [`Tenant`] extractor (shutting-down
//! check, then authentication).
//!
//! - `connection` — below the parser: every request head's deadline, the envelope on the
//!   parser's own errors.
//! - `envelope` — the App's middleware: the envelope on actix-web's empty errors,
//!   `Connection: close` while draining.
//! - `body` — JSON bodies: media type, size, time, strict parsing that never repeats a value.
//! - `drain` — between the shutdown signal and the server's stop.
//! - `rate` — the per-tenant replay token bucket.
//! - `routes`, `traces`, `handles` — the routes; `tenant` — the extractor; `errors` — the
//!   status codes.
//! - `ui` — the trace explorer page (`GET /ui/`), embedded in the binary.
//! - `admin` — `POST /admin/reload`, for the admin key.
//! - `openapi` — the OpenAPI document (`GET /openapi.json`), each path's methods and the
//!   answer to a request no route takes (`404`, or `405` on a path of the API);
//!   `answers` — the answer bodies it describes as types.

mod admin;
mod answers;
mod body;
mod connection;
mod drain;
mod envelope;
mod errors;
mod handles;
mod mcp;
mod openapi;
mod rate;
mod routes;
mod tenant;
mod traces;
mod ui;

pub(crate) use admin::AdminAccess;
pub(crate) use drain::{Drained, drain};
pub(crate) use errors::ApiError;
pub(crate) use mcp::serve_stdio as serve_mcp_stdio;
pub(crate) use openapi::document as openapi_document;
#[cfg(test)]
pub(crate) use routes::parse_turn;
pub(crate) use tenant::Tenant;

use crate::actors::{Coordinator, CoordinatorSnapshot, Registry, coordinator};
use crate::config::{Limits, McpAccess, ServerSettings};
use actix::prelude::*;
use actix_service::ServiceFactoryExt;
use actix_web::{App, dev::Server, web};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Shared by every worker.
pub(crate) struct ApiState {
    pub(crate) registry: Arc<Registry>,
    /// Renders `GET /metrics`; `None` when metrics are disabled.
    pub(crate) metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Every worker's coordinator, registered as its worker starts: `/readyz` and
    /// shutdown ask them which turns are still running.
    pub(crate) coordinators: Coordinators,
    /// What a request may carry and how long it may take to arrive.
    pub(crate) requests: RequestLimits,
    /// Shutdown's drain: started or not, and the tenant requests still in flight.
    pub(crate) drain: drain::Drain,
    /// Each tenant's replay bucket.
    pub(crate) replays: rate::ReplayLimiter,
    /// The admin key and the way to the serve loop's reloads; `None`: no admin key, and
    /// `/admin/reload` answers 404 like any unknown route.
    pub(crate) admin: Option<AdminAccess>,
    /// The `Host` and `Origin` values `/mcp` answers.
    pub(crate) mcp_access: McpAccess,
}

/// Bounds on a request beyond its size (`max_body_bytes` is the registry's).
pub(crate) struct RequestLimits {
    /// Longest a body may take to arrive once the head is in (`server.body_timeout_ms`).
    pub(crate) body_timeout: Duration,
    /// Most keys in a turn's or a replay's `inputs` (`limits.max_input_keys`).
    pub(crate) max_input_keys: usize,
}

impl ApiState {
    pub(crate) fn new(
        registry: Arc<Registry>,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
        server: &ServerSettings,
        limits: &Limits,
    ) -> ApiState {
        ApiState {
            registry,
            metrics,
            coordinators: Coordinators::default(),
            requests: RequestLimits {
                body_timeout: server.body_timeout,
                max_input_keys: limits.max_input_keys,
            },
            drain: drain::Drain::default(),
            replays: rate::ReplayLimiter::new(limits.replays_per_minute, limits.replay_burst),
            admin: None,
            mcp_access: server.mcp_access.clone(),
        }
    }

    /// With `POST /admin/reload` answering for this admin key.
    pub(crate) fn with_admin(mut self, admin: Option<AdminAccess>) -> ApiState {
        self.admin = admin;
        self
    }
}

/// The coordinators of the running workers.
#[derive(Clone, Default)]
pub(crate) struct Coordinators(Arc<Mutex<Vec<Addr<Coordinator>>>>);

impl Coordinators {
    fn register(&self, coordinator: Addr<Coordinator>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(coordinator);
    }

    /// Every coordinator's turns, summed: in flight now, and finished. A coordinator
    /// whose worker has stopped counts nothing.
    pub(crate) async fn turns(&self) -> CoordinatorSnapshot {
        let addrs = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut total = CoordinatorSnapshot {
            in_flight: 0,
            finished: 0,
        };
        for addr in addrs {
            if let Ok(snapshot) = addr.send(coordinator::Observe).await {
                total.in_flight += snapshot.in_flight;
                total.finished += snapshot.finished;
            }
        }
        total
    }
}

/// How long a connection that the server closes may take to read the last answer before
/// it is dropped (actix's `client_disconnect_timeout`).
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Builds the server on an already bound listener (tests bind `127.0.0.1:0`). Signals
/// are not handled here: the caller owns shutdown and its order ([`drain`], then
/// `stop`). The server's own stop waits at most a second for connections: the drain
/// has already waited for every request that matters.
///
/// Assembled from actix's parts rather than `HttpServer` so that every connection runs
/// through [`connection::GuardedIo`] (a deadline on every request head, the envelope on
/// the parser's own errors).
pub(crate) fn server(
    listener: TcpListener,
    state: web::Data<ApiState>,
    workers: usize,
    settings: &ServerSettings,
) -> std::io::Result<Server> {
    let builder = actix_server::Server::build()
        .workers(workers.max(1))
        .disable_signals()
        .shutdown_timeout(1);
    // Lets open connections finish their request and close when the server stops.
    let stopping = builder.graceful_shutdown_signal();
    let local_addr = listener.local_addr()?;
    let header_timeout = settings.header_timeout;
    let keep_alive = settings.keep_alive;
    let server = builder
        .listen("ctxd-api", listener, move || {
            let state = state.clone();
            // One coordinator per worker, on the worker's own thread.
            let coordinator = Coordinator::new(Arc::clone(&state.registry)).start();
            state.coordinators.register(coordinator.clone());
            let app = App::new()
                .app_data(state)
                .app_data(web::Data::new(coordinator))
                .wrap_fn(envelope::every_error_enveloped)
                .configure(routes::configure)
                .configure(traces::configure)
                .configure(handles::configure)
                .configure(mcp::configure)
                .configure(ui::configure)
                .configure(admin::configure)
                .configure(openapi::configure)
                .default_service(web::to(openapi::not_found));
            let stopping = stopping.clone();
            let http = actix_http::HttpService::build()
                .graceful_shutdown_signal(move || {
                    let stopping = stopping.clone();
                    async move { stopping.notified().await }
                })
                .keep_alive(keep_alive)
                .client_request_timeout(header_timeout)
                .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                .local_addr(local_addr)
                .h1(actix_service::map_config(app, |_| {
                    actix_web::dev::AppConfig::default()
                }));
            actix_service::fn_service(move |io: actix_rt::net::TcpStream| {
                let peer = io.peer_addr().ok();
                std::future::ready(Ok::<_, actix_http::error::DispatchError>((
                    connection::GuardedIo::new(io, header_timeout),
                    peer,
                )))
            })
            .and_then(http)
        })?
        .run();
    Ok(server)
}
