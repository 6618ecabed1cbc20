//! `ctxd serve [--config F] [--listen ADDR] [--fixtures]`: run the multi-tenant API
//! until SIGTERM or SIGINT, then shut down in order: drain (keep accepting, answer 503
//! on tenant routes and `/readyz`, finish in-flight turns within the grace period), stop
//! the server, stop providers and close their pools, flush the traces last. On SIGHUP
//! (or `POST /admin/reload` with the admin key) the config, Projects and Bindings are
//! read again and swapped in, or refused with every problem (`actors::reloading`).

use crate::actors::{Mode, ReloadInbox, Topology};
use crate::api::{self, AdminAccess, ApiState, Drained};
use crate::config::{EnvVars, ServerConfig};
use crate::telemetry::LogFormat;
use anyhow::{Context, anyhow};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// How often histograms are compacted and the trace queue depth is sampled.
const METRICS_UPKEEP: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The server config: listen address, trace store, tenants with their Projects and
    /// Bindings
    #[arg(long, default_value = "config/ctxd.toml")]
    pub(crate) config: PathBuf,
    /// Listen address; overrides `[server] listen` (use 127.0.0.1:0 for any free port)
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// Answer turns from the Projects' Context Test fixtures instead of the bound
    /// providers (source TEST_FIXTURE), for offline development
    #[arg(long)]
    pub(crate) fixtures: bool,
    /// HTTP worker threads (default: one per CPU)
    #[arg(long)]
    pub(crate) workers: Option<usize>,
    /// Log lines on standard error: `text` for people (coloured only on a terminal,
    /// never with NO_COLOR set), `json` for one JSON object per line
    #[arg(long, value_enum, env = "CTXD_LOG_FORMAT", ignore_case = true, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

pub(crate) fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    crate::telemetry::init_logging(args.log_format);
    let env = EnvVars::from_process();
    let config = ServerConfig::load(&args.config).map_err(|e| anyhow!("{e}"))?;
    let listen = args.listen.unwrap_or(config.server.listen);
    let mode = if args.fixtures {
        Mode::Fixtures
    } else {
        Mode::Live
    };
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let grace = config.server.shutdown_grace;

    let metrics = if config.metrics.enabled {
        Some(crate::telemetry::metrics::install(
            config.metrics.tenant_label,
            &config.metrics.duration_buckets_ms,
        )?)
    } else {
        None
    };
    actix_rt::System::new().block_on(async move {
        let mut topology = Topology::start(&config, &env, mode).await?;
        // Before the address is announced: a SIGHUP must reload, not end the process.
        let (reloads, reload_requests) = ReloadInbox::install(&args.config, env.clone());
        let admin = config
            .server
            .admin_key
            .as_ref()
            .and_then(|key| key.sha256(&env))
            .map(|key_sha256| AdminAccess::new(key_sha256, reload_requests));
        let listener = std::net::TcpListener::bind(listen)
            .with_context(|| format!("cannot listen on {listen}"))?;
        let address = listener.local_addr()?;
        let state = actix_web::web::Data::new(
            ApiState::new(
                topology.registry(),
                metrics.clone(),
                &config.server,
                &config.limits,
            )
            .with_admin(admin),
        );
        if let Some(handle) = metrics {
            let registry = topology.registry();
            actix_rt::spawn(async move {
                let mut tick = actix_rt::time::interval(METRICS_UPKEEP);
                loop {
                    tick.tick().await;
                    handle.run_upkeep();
                    crate::telemetry::metrics::trace_queue_depth(registry.traces.queue_depth());
                }
            });
        }
        let server = api::server(listener, state.clone(), workers, &config.server)?;
        let handle = server.handle();
        let serving = actix_rt::spawn(server);
        // Before the address is announced: a signal sent as soon as a supervisor sees it
        // must start the ordered shutdown, not end the process.
        let signal = ShutdownSignal::install();
        tracing::info!(%address, mode = mode.as_str(), workers, "ctxd serving");
        // The line tests and scripts wait for.
        // Its own statement: the stdout lock must not be held while serving.
        super::print(&format!("ctxd listening on http://{address}\n"))?;

        reloads.serve_until(&mut topology, signal.received()).await;
        tracing::info!("shutting down: draining, new requests get 503");
        match api::drain(&state, config.server.drain_quiet, grace).await {
            Drained::Quiet => tracing::info!("drained: no request in flight"),
            Drained::GraceElapsed { in_flight } => tracing::warn!(
                in_flight,
                "the grace period ended with requests in flight; stopping anyway"
            ),
        }
        // Stops accepting; actix closes idle connections at once and gives the others a
        // second (the drain already waited for every request that matters).
        handle.stop(true).await;
        let _ = serving.await;
        topology.shutdown().await?;
        tracing::info!("shut down");
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM and SIGINT, listened for from [`ShutdownSignal::install`] on.
struct ShutdownSignal {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    fn install() -> ShutdownSignal {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            ShutdownSignal {
                terminate: signal(SignalKind::terminate()).expect("SIGTERM handler installs"),
                interrupt: signal(SignalKind::interrupt()).expect("SIGINT handler installs"),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignal {}
    }

    async fn received(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
