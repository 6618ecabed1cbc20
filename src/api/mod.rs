//! The HTTP API (actix-web): `POST /v1/turns`, trace search, show and replay, handle
//! operations (`/v1/handles/…`), `GET /healthz`, `GET /readyz`. Turns HTTP
//! into messages and errors into status codes — the only place that does — and holds no
//! business rules. Every tenant route takes the one [`Tenant`] extractor (shutting-down
//! check, then authentication).

mod errors;
mod handles;
mod routes;
mod tenant;
mod traces;

pub(crate) use errors::ApiError;
pub(crate) use tenant::Tenant;

use crate::actors::{Coordinator, CoordinatorSnapshot, ProviderActor, Registry, coordinator};
use actix::prelude::*;
use actix_web::{App, HttpServer, dev::Server, web};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Shared by every worker.
pub(crate) struct ApiState {
    pub(crate) registry: Arc<Registry>,
    /// Every provider actor, for `/readyz`.
    pub(crate) providers: Vec<Addr<ProviderActor>>,
    /// Renders `GET /metrics`; `None` when metrics are disabled.
    pub(crate) metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Every worker's coordinator, registered as its worker starts: `/readyz` and
    /// shutdown ask them which turns are still running.
    pub(crate) coordinators: Coordinators,
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

/// Builds the server on an already bound listener (tests bind `127.0.0.1:0`). Signals
/// are not handled here: the caller owns shutdown and its order.
pub(crate) fn server(
    listener: TcpListener,
    state: ApiState,
    workers: usize,
    shutdown_grace: Duration,
) -> std::io::Result<Server> {
    let state = web::Data::new(state);
    let server = HttpServer::new(move || {
        // One coordinator per worker, on the worker's own thread.
        let coordinator = Coordinator::new(Arc::clone(&state.registry)).start();
        state.coordinators.register(coordinator.clone());
        App::new()
            .app_data(state.clone())
            .app_data(web::Data::new(coordinator))
            .configure(routes::configure)
            .configure(traces::configure)
            .configure(handles::configure)
            .default_service(web::to(routes::not_found))
    })
    .workers(workers.max(1))
    .disable_signals()
    .shutdown_timeout(shutdown_grace.as_secs().max(1))
    .listen(listener)?
    .run();
    Ok(server)
}
