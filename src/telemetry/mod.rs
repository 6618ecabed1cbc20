//! Logging and metrics. Log lines are structured (`provider = …, status = …`) and never
//! carry a lookup value, a secret or provider content; metric labels never carry ids or
//! values.

pub(crate) mod metrics;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber: human-readable lines on standard error, or JSON when
/// `CTXD_LOG_FORMAT=json`; the level from `CTXD_LOG` (default `info`). Safe to call
/// more than once (later calls do nothing).
pub(crate) fn init_logging() {
    let filter = EnvFilter::try_from_env("CTXD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("CTXD_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
