//! The MCP session of one provider binding, kept by a supervisor task: it connects
//! (streamable HTTP, or a stdio child process it starts), runs `initialize` with version
//! negotiation and the `initialized` notification (rmcp's client does both), publishes
//! the session, and when the session ends — the child died, the server dropped it —
//! connects again after a backoff. A stdio child sees only the allow-listed variables;
//! its stderr is logged line by line, redacted; it is killed when the supervisor stops.

use super::McpConnection;
use crate::outcome::Failure;
use crate::providers::redact::redacted;
use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation as PeerImplementation};
use rmcp::service::{ClientCacheConfig, ClientInitializeError};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio::time::Instant;

/// Largest JSON message accepted over HTTP before the provider's own 1 MiB bound is
/// applied (that one gives `LIMIT_EXCEEDED`); it only caps memory.
const MAX_HTTP_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// First wait before reconnecting; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A session that lived this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);

/// Where the session stands, as lookups see it.
#[derive(Clone)]
pub(crate) enum SessionState {
    /// A connection attempt is under way: a lookup waits for it (until its deadline).
    Connecting,
    /// Initialized; requests go to this peer.
    Up(Peer<RoleClient>),
    /// The last attempt failed (`CONNECT_FAILED`, or `UNAUTHORIZED` when the server
    /// refused the token); the supervisor waits out its backoff.
    Down(Failure),
}

/// The backoff between connection attempts. Pure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            next: FIRST_BACKOFF,
        }
    }

    /// The wait before the next attempt; doubles the one after it.
    pub(crate) fn step(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        wait
    }

    pub(crate) fn reset(&mut self) {
        self.next = FIRST_BACKOFF;
    }
}

type Running = RunningService<RoleClient, ClientConfig>;

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        PeerImplementation::new("ctxd", env!("CARGO_PKG_VERSION")),
    )
}

/// Keeps the session until `stop` turns true.
pub(crate) async fn supervise(
    provider: String,
    connection: McpConnection,
    state: watch::Sender<SessionState>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new();
    loop {
        if *stop.borrow() {
            break;
        }
        state.send_replace(SessionState::Connecting);
        let attempt = tokio::select! {
            attempt = connect(&provider, &connection) => attempt,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        match attempt {
            Ok(running) => {
                // ctxd's own response cache decides what may be reused (`cache`), and a
                // failed call must fail: no client-side cache, no stale answer on error.
                running
                    .peer()
                    .set_response_cache_config(ClientCacheConfig::disabled())
                    .await;
                let since = Instant::now();
                tracing::info!(provider = %provider, "mcp session initialized");
                state.send_replace(SessionState::Up(running.peer().clone()));
                let cancel = running.cancellation_token();
                let mut ended = Box::pin(running.waiting());
                let stopped = tokio::select! {
                    _ = &mut ended => false,
                    _ = stop.wait_for(|stopped| *stopped) => true,
                };
                state.send_replace(SessionState::Down(Failure::ConnectionReset));
                if stopped {
                    // Closing the transport kills a stdio child.
                    cancel.cancel();
                    let _ = ended.await;
                    break;
                }
                tracing::warn!(provider = %provider, "mcp session ended; reconnecting");
                if since.elapsed() >= STABLE_AFTER {
                    backoff.reset();
                }
            }
            Err((failure, problem)) => {
                state.send_replace(SessionState::Down(failure));
                tracing::warn!(
                    provider = %provider,
                    problem = %redacted(&problem),
                    "mcp server not connected"
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.step()) => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    state.send_replace(SessionState::Down(Failure::PoolClosed));
}

/// Whether an error, or any error under it, is the server refusing the credential: a
/// 401/403, with or without a `WWW-Authenticate` challenge.
pub(crate) fn refuses_credentials(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<AuthRequiredError>()
            || error.is::<InsufficientScopeError>()
            || error
                .downcast_ref::<HttpStatusError>()
                .is_some_and(|e| matches!(e.status, 401 | 403))
        {
            return true;
        }
        current = error.source();
    }
    false
}

/// A failed `initialize` as the failure lookups report and a message for the log.
fn initialize_failed(error: ClientInitializeError) -> (Failure, String) {
    let refused = match &error {
        ClientInitializeError::TransportError { error, .. } => {
            refuses_credentials(error.error.as_ref())
        }
        _ => false,
    } || error.is_authorization_required();
    let failure = if refused {
        Failure::Unauthorized
    } else {
        Failure::ConnectFailed
    };
    (failure, format!("initialize failed: {error}"))
}

/// One connection attempt: the transport, then `initialize`.
async fn connect(provider: &str, connection: &McpConnection) -> Result<Running, (Failure, String)> {
    let refused = |problem: String| (Failure::ConnectFailed, problem);
    match connection {
        McpConnection::Http {
            url,
            secret,
            max_requests,
        } => {
            let client = reqwest::Client::builder()
                .tls_backend_rustls()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .user_agent(concat!("ctxd/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|error| refused(format!("cannot build the HTTP client: {error}")))?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .reinit_on_expired_session(true)
                .max_concurrent_requests(*max_requests)
                .max_json_response_size(MAX_HTTP_MESSAGE_BYTES)
                .max_sse_event_size(MAX_HTTP_MESSAGE_BYTES);
            if let Some(secret) = secret {
                config = config.auth_header(secret.expose());
            }
            let transport = StreamableHttpClientTransport::with_client(client, config);
            client_config()
                .serve(transport)
                .await
                .map_err(initialize_failed)
        }
        McpConnection::Stdio { command, args, env } => {
            let mut process = tokio::process::Command::new(command);
            process.args(args).env_clear().kill_on_drop(true);
            for (name, value) in env {
                process.env(name, value.expose());
            }
            let (transport, stderr) = TokioChildProcess::builder(process)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|error| refused(format!("cannot start {command:?}: {error}")))?;
            if let Some(stderr) = stderr {
                let provider = provider.to_owned();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::info!(
                            provider = %provider,
                            line = %redacted(&line),
                            "mcp server stderr"
                        );
                    }
                });
            }
            client_config()
                .serve(transport)
                .await
                .map_err(initialize_failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling_and_resets() {
        let mut backoff = Backoff::new();
        assert_eq!(backoff.step(), FIRST_BACKOFF);
        assert_eq!(backoff.step(), FIRST_BACKOFF * 2);
        for _ in 0..20 {
            backoff.step();
        }
        assert_eq!(backoff.step(), MAX_BACKOFF);
        backoff.reset();
        assert_eq!(backoff.step(), FIRST_BACKOFF);
    }
}
