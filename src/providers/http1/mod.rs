//! HTTP/1.1 exchanges with one provider endpoint over hyper's `client::conn::http1`, on
//! kept-alive connections that belong to the thread that opened them: the client of the
//! `http` and `rest` providers and of `ctxd provider-check`.
//!
//! hyper does the protocol: the request's encoding, the answer's framing (length,
//! chunked, until the close), interim `1xx` answers (skipped, never kept), the head's
//! bounds, and whether a connection may be kept alive after an answer. What is ours is
//! the connection handling that keeps a provider call cheap:
//! - The request head is prepared once ([`Http1Client::new`]): the target, `Host` and
//!   the caller's fixed headers (the bearer header among them). A call clones it and
//!   hands it to hyper with its body.
//! - The call's own future drives its connection: hyper's `Connection` future is polled
//!   by the call while it waits for the answer and reads the body. No task, channel or
//!   lock between the caller and its socket, and no other thread woken.
//! - Each thread keeps its own idle connections, newest first, at most
//!   `pool.max_idle_per_host` of them and none idle longer than `pool.idle_timeout`
//!   (checked whenever the thread takes or returns one). ctxd runs one single-threaded
//!   runtime per worker, so a connection is only ever driven by the runtime that
//!   registered it, and a call never waits for another thread.
//! - A connection goes back to its thread's idle list only after an answer read whole
//!   that hyper keeps alive, with nothing after it, and never after an answer that
//!   declares both a `Content-Length` and a `Transfer-Encoding`. A call that fails or is
//!   dropped (its deadline) closes its connection.
//! - A reused connection the server closed while it sat idle is noticed before use when
//!   the close has arrived, and otherwise when it ends before the answer's first byte:
//!   the request then goes once more, on a new connection. A lookup reads and changes
//!   nothing, so sending it twice is harmless; a new connection is never retried.
//! - Connections: plain TCP (`TCP_NODELAY`) or TLS (rustls with the platform's
//!   verifier, ALPN `http/1.1`), opened within the connect timeout. No proxy, no
//!   redirects (a `3xx` is an answer), no retries but the one above.
//!
//! Nothing here knows secrets or lookup values: the caller passes its fixed headers and
//! checks answers; errors carry no text.

use crate::outcome::Failure;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::client::conn::http1 as conn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use thread_local::ThreadLocal;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use url::{Host, Position, Url};

/// The most an answer's head (status line and header fields, interim heads one at a
/// time) may take.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most hyper buffers from a connection at once.
const MAX_BUFFERED: usize = 2 * MAX_HEAD_BYTES;

/// Why a client cannot be set up for an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum Http1SetupError {
    #[error("the endpoint has no host")]
    NoHost,
    #[error("scheme {0:?} is not HTTP")]
    NotHttp(String),
    #[error("a header cannot be sent: {0:?} is not a valid header name")]
    HeaderName(String),
    #[error("the value of header {0:?} cannot be sent (control characters or non-ASCII)")]
    HeaderValue(String),
    #[error("the endpoint's path cannot be sent as a request target")]
    Target,
    #[error("TLS cannot be set up: {0}")]
    Tls(#[source] rustls::Error),
}

/// The connection limits a client keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Idle connections each thread keeps.
    pub max_idle: usize,
    /// How long a connection may sit idle and still be used.
    pub idle_timeout: Duration,
    /// Bound on opening a connection (TCP and TLS together).
    pub connect_timeout: Duration,
}

/// A client of one endpoint. Cloning is cheap and shares the connections.
#[derive(Clone)]
pub struct Http1Client {
    shared: Arc<Shared>,
}

struct Shared {
    origin: Origin,
    /// The endpoint's own request target (origin-form).
    target: Uri,
    /// `Host` and the caller's fixed headers, in that order. May hold a credential:
    /// never printed.
    headers: HeaderMap,
    /// Whether the fixed headers name a content type; a JSON body sent by
    /// [`Http1Client::request`] without one gets `application/json`.
    has_content_type: bool,
    limits: ConnectionLimits,
    settings: conn::Builder,
    /// Each calling thread's idle connections, oldest at the front.
    idle: ThreadLocal<RefCell<VecDeque<Idle>>>,
}

/// Where connections go.
struct Origin {
    host: String,
    port: u16,
    /// The address when the host is an IP literal (no resolution).
    address: Option<IpAddr>,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

struct Idle {
    connection: Connection,
    since: Instant,
}

impl fmt::Debug for Http1Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = &self.shared.origin;
        f.debug_struct("Http1Client")
            .field("host", &origin.host)
            .field("port", &origin.port)
            .field("tls", &origin.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Http1Client {
    /// A client of `url` that sends `headers` (name, value) on every request, after
    /// `Host`. TLS roots: the platform's, plus `extra_roots`.
    pub fn new(
        url: &Url,
        headers: &[(&str, &str)],
        limits: ConnectionLimits,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> Result<Http1Client, Http1SetupError> {
        let tls = match url.scheme() {
            "https" => true,
            "http" => false,
            other => return Err(Http1SetupError::NotHttp(other.to_owned())),
        };
        let host = url.host().ok_or(Http1SetupError::NoHost)?;
        let port = url.port_or_known_default().ok_or(Http1SetupError::NoHost)?;
        let (name, address) = match &host {
            Host::Domain(domain) => ((*domain).to_owned(), None),
            Host::Ipv4(ip) => (ip.to_string(), Some(IpAddr::V4(*ip))),
            Host::Ipv6(ip) => (ip.to_string(), Some(IpAddr::V6(*ip))),
        };
        let tls = if tls {
            let server_name = ServerName::try_from(name.clone())
                .map_err(|_| Http1SetupError::NoHost)?
                .to_owned();
            Some((TlsConnector::from(tls_config(extra_roots)?), server_name))
        } else {
            None
        };

        let authority = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_owned(),
        };
        let mut fixed = HeaderMap::with_capacity(headers.len() + 1);
        fixed.insert(
            HOST,
            HeaderValue::from_str(&authority).map_err(|_| Http1SetupError::NoHost)?,
        );
        for (name, value) in headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Http1SetupError::HeaderName((*name).to_owned()))?;
            let printable = value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
            let mut value = HeaderValue::from_str(value)
                .ok()
                .filter(|_| printable)
                .ok_or_else(|| Http1SetupError::HeaderValue((*name).to_owned()))?;
            value.set_sensitive(true);
            fixed.append(header, value);
        }
        let mut settings = conn::Builder::new();
        // A request is small: its head and body go out as one buffer in one `send`,
        // which costs less than a vectored write of the two.
        settings
            .max_header_size(MAX_HEAD_BYTES)
            .max_buf_size(MAX_BUFFERED)
            .writev(false);
        Ok(Http1Client {
            shared: Arc::new(Shared {
                origin: Origin {
                    host: name,
                    port,
                    address,
                    tls,
                },
                target: origin_form(url).ok_or(Http1SetupError::Target)?,
                has_content_type: fixed.contains_key(CONTENT_TYPE),
                headers: fixed,
                limits,
                settings,
                idle: ThreadLocal::new(),
            }),
        })
    }

    /// `POST`s `body` to the endpoint with the fixed headers and reads the answer's
    /// head. The caller reads the body through the [`Answer`] (or drops it, which closes
    /// the connection).
    pub async fn post(&self, body: impl Into<Bytes>) -> Result<Answer<'_>, Failure> {
        let target = self.shared.target.clone();
        self.send(Method::POST, target, Some(body.into()), false)
            .await
    }

    /// Sends `method` to `url` (a URL of the endpoint's origin: its path and query are
    /// sent) with a JSON `body`, if any, and reads the answer's head.
    pub async fn request(
        &self,
        method: Method,
        url: &Url,
        json: Option<Bytes>,
    ) -> Result<Answer<'_>, Failure> {
        let target = origin_form(url).ok_or(Failure::RequestNotBuilt)?;
        let typed = json.is_some();
        self.send(method, target, json, typed).await
    }

    async fn send(
        &self,
        method: Method,
        target: Uri,
        body: Option<Bytes>,
        json: bool,
    ) -> Result<Answer<'_>, Failure> {
        let shared = &*self.shared;
        if let Some(mut connection) = shared.checkout() {
            let request = shared.request(method.clone(), target.clone(), body.clone(), json);
            match connection.exchange(request).await {
                Ok(response) => return Ok(self.answer(connection, response)),
                // The server closed it while it sat idle: once more, on a new one.
                Err(ExchangeError::Unanswered) => {}
                Err(ExchangeError::Failed(failure)) => return Err(failure),
            }
        }
        let mut connection = shared.connect().await?;
        match connection
            .exchange(shared.request(method, target, body, json))
            .await
        {
            Ok(response) => Ok(self.answer(connection, response)),
            Err(ExchangeError::Unanswered) => Err(Failure::ConnectionReset),
            Err(ExchangeError::Failed(failure)) => Err(failure),
        }
    }

    fn answer(&self, connection: Connection, response: http::Response<Incoming>) -> Answer<'_> {
        let (head, body) = response.into_parts();
        Answer {
            client: self,
            connection,
            head,
            body,
        }
    }

    /// Idle connections the calling thread keeps (for tests and observation).
    #[cfg(test)]
    pub(crate) fn idle_here(&self) -> usize {
        self.shared.idle.get().map_or(0, |idle| idle.borrow().len())
    }
}

/// The origin-form request target of `url`: its path and query.
fn origin_form(url: &Url) -> Option<Uri> {
    Uri::try_from(&url[Position::BeforePath..Position::AfterQuery]).ok()
}

impl Shared {
    /// The request: the prepared head with this call's method, target and body (typed
    /// `application/json` when `json` and no fixed header types it).
    fn request(
        &self,
        method: Method,
        target: Uri,
        body: Option<Bytes>,
        json: bool,
    ) -> Request<Full<Bytes>> {
        let mut headers = self.headers.clone();
        if json && !self.has_content_type {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let mut request = Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = target;
        *request.headers_mut() = headers;
        request
    }

    /// The calling thread's newest idle connection that is still usable, if any.
    fn checkout(&self) -> Option<Connection> {
        let mut idle = self.idle.get_or_default().borrow_mut();
        self.drop_expired(&mut idle, Instant::now());
        while let Some(entry) = idle.pop_back() {
            let mut connection = entry.connection;
            if connection.is_open() {
                return Some(connection);
            }
        }
        None
    }

    /// Puts a connection back on the calling thread's idle list.
    fn checkin(&self, connection: Connection) {
        if self.limits.max_idle == 0 {
            return;
        }
        let mut idle = self.idle.get_or_default().borrow_mut();
        let now = Instant::now();
        self.drop_expired(&mut idle, now);
        if idle.len() >= self.limits.max_idle {
            idle.pop_front();
        }
        idle.push_back(Idle {
            connection,
            since: now,
        });
    }

    fn drop_expired(&self, idle: &mut VecDeque<Idle>, now: Instant) {
        while idle.front().is_some_and(|entry| {
            now.saturating_duration_since(entry.since) > self.limits.idle_timeout
        }) {
            idle.pop_front();
        }
    }

    /// Opens a connection within the connect timeout: TCP to the first address that
    /// accepts, then TLS when the endpoint is `https://`, then hyper's handshake.
    async fn connect(&self) -> Result<Connection, Failure> {
        let stream = tokio::time::timeout(self.limits.connect_timeout, self.open())
            .await
            .map_err(|_elapsed| Failure::ConnectFailed)?
            .map_err(|_error| Failure::ConnectFailed)?;
        let received = Arc::new(AtomicU64::new(0));
        let io = TokioIo::new(Metered {
            stream,
            received: received.clone(),
            burst: 0,
        });
        let (sender, driver) = self
            .settings
            .handshake(io)
            .await
            .map_err(|_error| Failure::ConnectFailed)?;
        Ok(Connection {
            sender,
            drive: Drive::new(Box::pin(driver)),
            received,
        })
    }

    async fn open(&self) -> io::Result<Stream> {
        let origin = &self.origin;
        let tcp = match origin.address {
            Some(ip) => TcpStream::connect(SocketAddr::new(ip, origin.port)).await?,
            None => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                let mut found = None;
                for address in tokio::net::lookup_host((origin.host.as_str(), origin.port)).await? {
                    match TcpStream::connect(address).await {
                        Ok(stream) => {
                            found = Some(stream);
                            break;
                        }
                        Err(error) => last = error,
                    }
                }
                found.ok_or(last)?
            }
        };
        tcp.set_nodelay(true)?;
        Ok(match &origin.tls {
            None => Stream::Plain(tcp),
            Some((connector, name)) => {
                Stream::Tls(Box::new(connector.connect(name.clone(), tcp).await?))
            }
        })
    }
}

/// The TLS settings of every HTTPS provider connection: TLS 1.2 and 1.3 (rustls'
/// defaults, aws-lc-rs), the platform's verifier (its roots, plus `extra_roots`), ALPN
/// `http/1.1`.
fn tls_config(
    extra_roots: Vec<CertificateDer<'static>>,
) -> Result<Arc<rustls::ClientConfig>, Http1SetupError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = if extra_roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
    }
    .map_err(Http1SetupError::Tls)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Http1SetupError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Why an exchange on one connection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ExchangeError {
    /// The connection failed or closed before the answer's first byte.
    Unanswered,
    Failed(Failure),
}

/// What a hyper error means for a call: a head over its bounds is too large, a head that
/// is not HTTP is malformed, anything else lost the connection. (`is_parse_too_large`
/// is why hyper's `server` feature is on: the client's own head errors use it too.)
fn failure_of(error: &hyper::Error) -> Failure {
    if error.is_parse_too_large() {
        Failure::ResponseTooLarge
    } else if error.is_parse() || error.is_parse_status() {
        Failure::Malformed
    } else {
        Failure::ConnectionReset
    }
}

/// What a body error means: a broken chunked coding is malformed; an answer cut short
/// (the connection closed or failed) lost the connection.
fn body_failure(error: &hyper::Error) -> Failure {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => Failure::Malformed,
                _ => Failure::ConnectionReset,
            };
        }
        source = cause.source();
    }
    failure_of(error)
}

/// A plain or TLS stream.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The most a connection reads before it lets its task yield once. hyper reads and
/// parses for as long as bytes keep arriving; a server that sends interim heads for
/// ever would keep the call's task busy past its deadline without this.
const READ_BURST: usize = 64 * 1024;

/// A stream that counts the bytes it reads, so a call can tell an answer cut short
/// from no answer at all, and that yields after [`READ_BURST`] bytes read without a
/// pause.
struct Metered {
    stream: Stream,
    received: Arc<AtomicU64>,
    /// Bytes read since the stream last had nothing to read, or last yielded.
    burst: usize,
}

impl AsyncRead for Metered {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.burst >= READ_BURST {
            // Let the runtime run timers (the call's deadline) before reading on.
            this.burst = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let polled = match &mut this.stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        };
        let read = buf.filled().len() - before;
        if read > 0 {
            this.received.fetch_add(read as u64, Ordering::Relaxed);
            this.burst += read;
        } else if polled.is_pending() {
            this.burst = 0;
        }
        polled
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

type Driver = Pin<Box<conn::Connection<TokioIo<Metered>, Full<Bytes>>>>;

/// One connection: hyper's request handle and the connection future that does its I/O,
/// polled by the call that uses it.
struct Connection {
    sender: conn::SendRequest<Full<Bytes>>,
    drive: Drive,
    /// Bytes read from the connection so far.
    received: Arc<AtomicU64>,
}

/// hyper's connection future and what decides when it is polled.
struct Drive {
    driver: Driver,
    /// The connection future has finished: the connection is closed.
    ended: bool,
    /// Whether the connection future has been woken since it was last polled.
    wake: Arc<DriverWake>,
    /// The waker the connection future is polled with: [`DriverWake`]'s.
    waker: Waker,
}

/// The connection future's own waker: it notes that the future has something to do
/// and wakes the task of the call using the connection. A call's task is woken for
/// many reasons (each of a turn's calls, hyper's channels); the connection future is
/// polled only when it was itself woken, so a wake-up of a turn does not poll the
/// HTTP state of every connection in it.
struct DriverWake {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl std::task::Wake for DriverWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The connection closed while a call still waited on it.
struct Closed;

impl Drive {
    fn new(driver: Driver) -> Drive {
        let wake = Arc::new(DriverWake {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Drive {
            driver,
            ended: false,
            waker: Waker::from(wake.clone()),
            wake,
        }
    }

    /// Polls `work` to completion while driving the connection. `work` is polled
    /// first; when it waits and the connection future was woken, the connection future
    /// is polled (what it reads reaches `work` through hyper's channels) and `work`
    /// once more, so an answer that has arrived completes in the same turn. When the
    /// connection has finished and `work` is still waiting, nothing more can come: that
    /// is [`Closed`].
    async fn run<F: Future>(&mut self, work: F) -> Result<F::Output, Closed> {
        let mut work = pin!(work);
        poll_fn(|cx| {
            if let Poll::Ready(output) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            if !self.ended {
                self.wake.task.register(cx.waker());
                if self.wake.woken.swap(false, Ordering::AcqRel) {
                    let mut own = Context::from_waker(&self.waker);
                    if self.driver.as_mut().poll(&mut own).is_ready() {
                        self.ended = true;
                    }
                    if let Poll::Ready(output) = work.as_mut().poll(cx) {
                        return Poll::Ready(Ok(output));
                    }
                }
            }
            if self.ended {
                Poll::Ready(Err(Closed))
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Lets the connection go idle: it no longer wakes the task that last used it, and
    /// it is polled once (never waiting) with its own waker, so that what it then waits
    /// for — the server's next bytes or its close — only marks it woken.
    fn settle(&mut self) {
        drop(self.wake.task.take());
        self.poll_idle();
    }

    /// Polls an idle connection future if anything happened to it since it was last
    /// polled: a close, an error, or bytes nobody asked for end it.
    fn refresh(&mut self) {
        if self.wake.woken.load(Ordering::Acquire) {
            self.poll_idle();
        }
    }

    fn poll_idle(&mut self) {
        if !self.ended {
            self.wake.woken.store(false, Ordering::Release);
            let mut cx = Context::from_waker(&self.waker);
            if self.driver.as_mut().poll(&mut cx).is_ready() {
                self.ended = true;
            }
        }
    }
}

impl Connection {
    /// Whether an idle connection can still take a request: nothing has ended it since
    /// it was put back (see [`Drive::refresh`]).
    fn is_open(&mut self) -> bool {
        self.drive.refresh();
        !self.drive.ended && !self.sender.is_closed()
    }

    /// Whether a connection whose answer was read whole can be kept: one more turn of
    /// the connection after the answer lets hyper see a close, or bytes after the body
    /// that nobody asked for, and end it.
    fn is_reusable(&mut self) -> bool {
        self.drive.settle();
        !self.drive.ended && !self.sender.is_closed()
    }

    /// Sends the request and waits for the final answer's head.
    async fn exchange(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, ExchangeError> {
        let before = self.received.load(Ordering::Relaxed);
        let Connection {
            sender,
            drive,
            received,
        } = self;
        let unanswered = || {
            if received.load(Ordering::Relaxed) == before {
                ExchangeError::Unanswered
            } else {
                ExchangeError::Failed(Failure::ConnectionReset)
            }
        };
        // A kept-alive connection is ready at once; a new one once hyper has set it up.
        if !sender.is_ready() {
            match drive.run(poll_fn(|cx| sender.poll_ready(cx))).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(Closed) => return Err(unanswered()),
            }
        }
        match drive.run(sender.send_request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => match failure_of(&error) {
                Failure::ConnectionReset => Err(unanswered()),
                failure => Err(ExchangeError::Failed(failure)),
            },
            Err(Closed) => Err(unanswered()),
        }
    }
}

/// An answer whose head has been read; its body is read with [`Answer::body`].
/// Dropping it unread closes the connection.
pub struct Answer<'a> {
    client: &'a Http1Client,
    connection: Connection,
    head: http::response::Parts,
    body: Incoming,
}

/// Why an answer's body could not be read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The body is longer than the limit: its first `limit` bytes.
    TooLarge(Vec<u8>),
    /// The connection closed or failed, or the chunked coding is broken.
    Failed(Failure),
}

impl Answer<'_> {
    /// The status code.
    pub fn code(&self) -> u16 {
        self.head.status.as_u16()
    }

    /// The length of the body, when the answer declares one that frames it.
    pub fn content_length(&self) -> Option<u64> {
        self.body.size_hint().exact()
    }

    /// The answer's header fields.
    pub fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }

    /// The reason phrase of the status line, when it is not the code's usual one.
    pub fn reason(&self) -> Option<&[u8]> {
        self.head
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .map(|reason| reason.as_bytes())
    }

    /// Reads the whole body, at most `limit` bytes. The connection goes back to the
    /// thread's idle list when the answer allows it.
    pub async fn body(self, limit: usize) -> Result<Vec<u8>, BodyError> {
        let Answer {
            client,
            mut connection,
            head,
            mut body,
        } = self;
        let capacity = body.size_hint().exact().map_or(0, |length| {
            usize::try_from(length).unwrap_or(limit).min(limit)
        });
        let mut bytes = Vec::with_capacity(capacity);
        loop {
            let frame = connection
                .drive
                .run(poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)))
                .await
                .map_err(|Closed| BodyError::Failed(Failure::ConnectionReset))?;
            match frame {
                None => break,
                Some(Err(error)) => return Err(BodyError::Failed(body_failure(&error))),
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers
                    };
                    if bytes.len() + data.len() > limit {
                        let room = limit - bytes.len();
                        bytes.extend_from_slice(&data[..room]);
                        return Err(BodyError::TooLarge(bytes));
                    }
                    bytes.extend_from_slice(&data);
                }
            }
        }
        let both_lengths = head.headers.contains_key(CONTENT_LENGTH)
            && head.headers.contains_key(http::header::TRANSFER_ENCODING);
        if !both_lengths && connection.is_reusable() {
            client.shared.checkin(connection);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests;
