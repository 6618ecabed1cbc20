//! The MCP session of one provider binding, kept by a supervisor task: it connects
//! (streamable HTTP, or a stdio child process it starts), runs `initialize` under a
//! deadline asking for the latest released protocol version ([`PROTOCOL_VERSION`]) with
//! the `initialized` notification after it (rmcp's client does both), checks the server's
//! version label, publishes the session, and starts a new one after a backoff whenever
//! the session is gone: the child died, the server dropped the connection, `initialize`
//! was not answered in time, or the session stalled — lookups kept failing without an
//! answer and the server did not answer a `ping` either. (A session the HTTP server no
//! longer knows is renewed by the transport itself, see [`super::http`].)
//!
//! A stdio child sees only the allow-listed variables, runs in an empty private working
//! directory that is removed when it ends, has its standard error logged line by line as
//! untrusted text ([`super::stderr`]), and is killed when the supervisor stops.

use super::McpConnection;
use super::child::ChildTransport;
use super::http::SessionAwareClient;
use super::stderr;
use crate::outcome::Failure;
use crate::providers::untrusted::{self, LabelProblem, Masks, UntrustedText};
use rmcp::ServiceExt;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation as PeerImplementation,
    PingRequest, ProtocolVersion,
};
use rmcp::service::{ClientCacheConfig, ClientInitializeError, ServiceError};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpError,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, timeout};

/// The protocol version `initialize` asks for: the latest released one, which has
/// `initialize` (rmcp's `ProtocolVersion::LATEST` is a draft that has none).
pub(crate) const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::LATEST_WITH_INITIALIZE;

/// Largest JSON message accepted over HTTP before the provider's own 1 MiB bound is
/// applied (that one gives `LIMIT_EXCEEDED`); it only caps memory.
const MAX_HTTP_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// How long an HTTP server has to answer `initialize` (and a new session's `initialize`
/// when the transport renews one).
pub(crate) const HTTP_INITIALIZE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a stdio child has to answer `initialize`, counted from its start: it may
/// first have to load an interpreter and its libraries.
pub(crate) const STDIO_INITIALIZE_DEADLINE: Duration = Duration::from_secs(30);
/// Lookups in a row that failed the way a stalled or lost session fails (no answer by
/// their deadline, a failed transport) before the session is checked with a `ping`.
pub(crate) const FAILURES_BEFORE_CHECK: u32 = 3;
/// How long that `ping` may take before the session is given up for a new one.
pub(crate) const CHECK_DEADLINE: Duration = Duration::from_secs(5);
/// First wait before reconnecting; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A session that lived this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);

/// Where the session stands, as lookups see it.
#[derive(Clone)]
pub(crate) enum SessionState {
    /// A first connection attempt, or the first after a session ended, is under way: a
    /// lookup waits for it (until its deadline).
    Connecting,
    /// Initialized; requests go to this session.
    Up(Arc<Session>),
    /// The last attempt failed (`CONNECT_FAILED`; `UNAUTHORIZED` when the server refused
    /// the token; the label rule's failure for a refused `serverInfo.version`), or the
    /// session just ended. Lookups answer this failure at once while the supervisor waits
    /// out its backoff and tries again.
    Down(Failure),
}

/// One initialized session: its peer, and how its lookups have been faring.
pub(crate) struct Session {
    peer: Peer<RoleClient>,
    /// Lookups in a row that failed as a stalled or lost session fails.
    failures: AtomicU32,
    /// Told when `failures` reaches [`FAILURES_BEFORE_CHECK`]: the supervisor checks
    /// the session.
    suspect: Notify,
}

impl Session {
    fn new(peer: Peer<RoleClient>) -> Session {
        Session {
            peer,
            failures: AtomicU32::new(0),
            suspect: Notify::new(),
        }
    }

    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// A lookup got an answer from the server (an error answer too): the session works.
    pub(crate) fn answered(&self) {
        self.failures.store(0, Ordering::Relaxed);
    }

    /// A lookup got no answer by its deadline, or the transport failed under it.
    pub(crate) fn failed(&self) {
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 == FAILURES_BEFORE_CHECK {
            self.suspect.notify_one();
        }
    }
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
    .with_protocol_version(PROTOCOL_VERSION)
}

/// How a session that was up came to an end.
enum End {
    /// The service stopped: the child exited, the transport failed for good.
    Ended,
    /// Lookups kept failing and the server did not answer a `ping` in time.
    Stalled,
    /// The supervisor was told to stop.
    Stopped,
}

/// Keeps the session until `stop` turns true. Every text from the server it logs passes
/// [`UntrustedText`] with `masks`, the binding's own secrets.
pub(crate) async fn supervise(
    provider: String,
    connection: McpConnection,
    masks: Masks,
    state: watch::Sender<SessionState>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new();
    // After a failed attempt, lookups keep its failure while the next attempt runs: a
    // server that holds `initialize` open makes lookups wait only on the first attempt.
    let mut last_attempt_failed = false;
    loop {
        if *stop.borrow() {
            break;
        }
        if !last_attempt_failed {
            state.send_replace(SessionState::Connecting);
        }
        let attempt = tokio::select! {
            attempt = connect(&provider, &connection, &masks) => attempt,
            () = stopped(&mut stop) => break,
        };
        let attempt = match attempt {
            Ok(running) => admit(running, &masks).await,
            Err(refused) => Err(refused),
        };
        match attempt {
            Ok(running) => {
                last_attempt_failed = false;
                // ctxd's own response cache decides what may be reused (`cache`), and a
                // failed call must fail: no client-side cache, no stale answer on error.
                running
                    .peer()
                    .set_response_cache_config(ClientCacheConfig::disabled())
                    .await;
                let since = Instant::now();
                let session = Arc::new(Session::new(running.peer().clone()));
                tracing::info!(provider = %provider, "mcp session initialized");
                state.send_replace(SessionState::Up(Arc::clone(&session)));
                let cancel = running.cancellation_token();
                let mut ended = Box::pin(running.waiting());
                let end = loop {
                    tokio::select! {
                        _ = &mut ended => break End::Ended,
                        () = stopped(&mut stop) => break End::Stopped,
                        () = session.suspect.notified() => {
                            if responds(session.peer()).await {
                                session.answered();
                            } else {
                                break End::Stalled;
                            }
                        }
                    }
                };
                state.send_replace(SessionState::Down(Failure::ConnectionReset));
                match end {
                    End::Stopped => {
                        // Closing the transport kills a stdio child.
                        cancel.cancel();
                        let _ = ended.await;
                        break;
                    }
                    End::Stalled => {
                        tracing::warn!(
                            provider = %provider,
                            "mcp session stalled: lookups failed and ping was not answered; starting a new session"
                        );
                        cancel.cancel();
                        let _ = ended.await;
                    }
                    End::Ended => {
                        tracing::warn!(provider = %provider, "mcp session ended; reconnecting");
                    }
                }
                if since.elapsed() >= STABLE_AFTER {
                    backoff.reset();
                }
            }
            Err((failure, problem)) => {
                last_attempt_failed = true;
                state.send_replace(SessionState::Down(failure));
                tracing::warn!(
                    provider = %provider,
                    problem = %UntrustedText::new(&problem, &masks),
                    "mcp server not connected"
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.step()) => {}
            () = stopped(&mut stop) => break,
        }
    }
    state.send_replace(SessionState::Down(Failure::PoolClosed));
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Whether the server answers a `ping` within [`CHECK_DEADLINE`]; an error answer is an
/// answer.
async fn responds(peer: &Peer<RoleClient>) -> bool {
    let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
    matches!(
        timeout(CHECK_DEADLINE, ping).await,
        Ok(Ok(_) | Err(ServiceError::McpError(_)))
    )
}

/// The session if the version the server gave in `initialize` passes the label rule
/// ([`untrusted::check_label`]: it is kept, reported by the readiness probe, in answers
/// and traces); otherwise the session is closed and refused with the rule's failure.
async fn admit(mut running: Running, masks: &Masks) -> Result<Running, Refused> {
    match server_version_problem(&running, masks) {
        None => Ok(running),
        Some(problem) => {
            let _ = running.close().await;
            Err((problem.failure(), format!("serverInfo.version {problem}")))
        }
    }
}

fn server_version_problem(running: &Running, masks: &Masks) -> Option<LabelProblem> {
    let info = running.peer().peer_info()?;
    let version = &info.server_info.as_ref()?.version;
    untrusted::check_label(version, masks).err()
}

/// Whether an error, or any error under it, is the server refusing the credential: a
/// 401/403, with or without a `WWW-Authenticate` challenge. (The transport's error wraps
/// a bare status transparently: it is not among the sources, so it is looked for there.)
pub(crate) fn refuses_credentials(error: &(dyn std::error::Error + 'static)) -> bool {
    let refused = |status: &HttpStatusError| matches!(status.status, 401 | 403);
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<AuthRequiredError>()
            || error.is::<InsufficientScopeError>()
            || error.downcast_ref::<HttpStatusError>().is_some_and(refused)
            || matches!(
                error.downcast_ref::<StreamableHttpError<reqwest::Error>>(),
                Some(StreamableHttpError::HttpStatus(status)) if refused(status)
            )
        {
            return true;
        }
        current = error.source();
    }
    false
}

/// A failed attempt: the failure lookups report, and a message for the log (untrusted:
/// it may quote the server).
type Refused = (Failure, String);

/// A failed `initialize` as the failure lookups report and a message for the log.
fn initialize_failed(error: ClientInitializeError) -> Refused {
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

fn not_answered(deadline: Duration) -> Refused {
    (
        Failure::ConnectFailed,
        format!(
            "initialize was not answered within {} s",
            deadline.as_secs()
        ),
    )
}

/// The program a stdio binding starts. A relative path with a directory in it
/// (`bin/server`) is taken from ctxd's working directory, as the binding's author meant
/// it, not from the child's own; a bare name is looked up as usual.
fn program(command: &str) -> PathBuf {
    let path = Path::new(command);
    if path.is_relative() && path.components().count() > 1 {
        std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
    } else {
        path.to_path_buf()
    }
}

/// One connection attempt: the transport, then `initialize` under its deadline.
async fn connect(
    provider: &str,
    connection: &McpConnection,
    masks: &Masks,
) -> Result<Running, Refused> {
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
                .session_recovery_timeout(HTTP_INITIALIZE_DEADLINE)
                .max_concurrent_requests(*max_requests)
                .max_json_response_size(MAX_HTTP_MESSAGE_BYTES)
                .max_sse_event_size(MAX_HTTP_MESSAGE_BYTES);
            if let Some(secret) = secret {
                config = config.auth_header(secret.expose());
            }
            let transport =
                StreamableHttpClientTransport::with_client(SessionAwareClient(client), config);
            match timeout(HTTP_INITIALIZE_DEADLINE, client_config().serve(transport)).await {
                Err(_) => Err(not_answered(HTTP_INITIALIZE_DEADLINE)),
                Ok(initialized) => initialized.map_err(initialize_failed),
            }
        }
        McpConnection::Stdio { command, args, env } => {
            // Not ctxd's working directory, where its trace store and digest key may be.
            let workdir = tempfile::Builder::new()
                .prefix("ctxd-mcp-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .map_err(|error| {
                    refused(format!(
                        "cannot make the server's working directory: {error}"
                    ))
                })?;
            let mut process = tokio::process::Command::new(program(command));
            process
                .args(args)
                .env_clear()
                .current_dir(workdir.path())
                .kill_on_drop(true);
            for (name, value) in env {
                process.env(name, value.expose());
            }
            let (transport, stderr) = ChildTransport::spawn(process)
                .map_err(|error| refused(format!("cannot start {command:?}: {error}")))?;
            // The directory goes when the child's standard error ends, with the child.
            tokio::spawn(stderr::log_lines(
                provider.to_owned(),
                stderr,
                masks.clone(),
                workdir,
            ));
            // Dropped at the deadline, the transport kills the child.
            match timeout(STDIO_INITIALIZE_DEADLINE, client_config().serve(transport)).await {
                Err(_) => Err(not_answered(STDIO_INITIALIZE_DEADLINE)),
                Ok(initialized) => initialized.map_err(initialize_failed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_401_or_403_refuses_the_credentials() {
        for (status, refused) in [(401, true), (403, true), (500, false)] {
            let error: StreamableHttpError<reqwest::Error> =
                StreamableHttpError::HttpStatus(HttpStatusError::new(status, None));
            let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(error);
            assert_eq!(refuses_credentials(boxed.as_ref()), refused, "{status}");
        }
    }

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

    #[test]
    fn initialize_asks_for_the_latest_released_version() {
        assert_eq!(client_config().protocol_version.as_str(), "2025-11-25");
    }

    #[test]
    fn a_relative_command_with_a_directory_is_ctxds_and_a_bare_name_is_looked_up() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(program("bin/server"), here.join("bin/server"));
        assert_eq!(program("python3"), PathBuf::from("python3"));
        assert_eq!(program("/usr/bin/env"), PathBuf::from("/usr/bin/env"));
    }
}
