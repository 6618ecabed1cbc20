//! HTTP/1.1 exchanges with one provider endpoint, over kept-alive connections that
//! belong to the thread that opened them. The `http` provider's client.
//!
//! Why ctxd speaks HTTP/1.1 itself here rather than through reqwest: a lookup is one
//! `POST` of a small JSON body to an endpoint fixed at set-up, with headers fixed at
//! set-up, and one bounded answer. reqwest (over hyper and hyper-util) spent about half
//! of a provider call's CPU outside the socket calls — building and copying the request,
//! its redirect and retry layers, the pool's checkout, and a connection task per
//! connection woken for every request and every answer (docs/PERFORMANCE.md). Here the
//! request head is encoded once ([`Http1Client::new`]), a call writes head and body with
//! one write, and the call's own future reads the answer: no task, channel or lock
//! between the caller and its socket.
//!
//! What it does, and deliberately no more:
//! - `POST` only, `Content-Length` framed; no `Expect`, no `Accept-Encoding`, no
//!   upgrades, no redirects (a `3xx` is an answer), no proxy.
//! - Answers framed by `Content-Length`, by the chunked coding, or by the close
//!   ([`framing`] has the rules); interim `1xx` answers are skipped.
//! - Connections: plain TCP (`TCP_NODELAY`) or TLS (rustls with the platform's
//!   verifier, ALPN `http/1.1`), opened within the connect timeout. A connection goes
//!   back to its thread's idle list only after an answer whose framing was exact and
//!   read whole, with nothing after it. A call that fails or is dropped (its deadline)
//!   closes its connection.
//! - Each thread keeps its own idle connections, newest first, at most
//!   `pool.max_idle_per_host` of them and none idle longer than `pool.idle_timeout`
//!   (checked whenever the thread takes or returns one). ctxd runs one single-threaded
//!   runtime per worker, so a connection is only ever driven by the runtime that
//!   registered it, and a call never waits for another thread.
//! - A reused connection the server closed while it sat idle is noticed before use when
//!   the close has arrived (a read that would block means open), and otherwise when the
//!   answer ends before its first byte: the request then goes once more, on a new
//!   connection. A lookup reads and changes nothing, so sending it twice is harmless;
//!   a new connection is never retried.
//!
//! Nothing here knows secrets or lookup values: the caller encodes its fixed headers
//! (the bearer header among them) and checks answers; errors carry no text.

mod framing;

use crate::outcome::Failure;
use framing::{ChunkedDecoder, Framing, Head, HeadError, parse_head};
use rustls::pki_types::{CertificateDer, ServerName};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use thread_local::ThreadLocal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use url::{Host, Url};

/// Room a read offers the socket at least: what hyper starts its read buffers with.
const READ_CHUNK: usize = 8 * 1024;
/// A connection's buffer larger than this after an answer is let go, so one large
/// answer does not keep its memory on an idle connection.
const KEPT_BUFFER: usize = 16 * 1024;

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
    /// `POST <path> HTTP/1.1`, `Host`, the caller's fixed headers and `Content-Length: `,
    /// encoded once. May hold a credential: never printed.
    head: Vec<u8>,
    limits: ConnectionLimits,
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
    /// A client that `POST`s to `url` with `headers` (name, value) on every request,
    /// besides `Host` and `Content-Length`. TLS roots: the platform's, plus
    /// `extra_roots`.
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
        let mut head =
            format!("POST {} HTTP/1.1\r\nhost: {authority}\r\n", url.path()).into_bytes();
        for (name, value) in headers {
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(Http1SetupError::HeaderName((*name).to_owned()));
            }
            if !value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            {
                return Err(Http1SetupError::HeaderValue((*name).to_owned()));
            }
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"content-length: ");
        Ok(Http1Client {
            shared: Arc::new(Shared {
                origin: Origin {
                    host: name,
                    port,
                    address,
                    tls,
                },
                head,
                limits,
                idle: ThreadLocal::new(),
            }),
        })
    }

    /// `POST`s `body` and reads the answer's head. The caller reads the body through
    /// the [`Answer`] (or drops it, which closes the connection).
    pub async fn post(&self, body: &[u8]) -> Result<Answer<'_>, Failure> {
        let shared = &*self.shared;
        if let Some(connection) = shared.checkout() {
            let mut connection = connection;
            match connection.exchange(&shared.head, body).await {
                Ok(head) => return Ok(self.answer(connection, head)),
                // The server closed it while it sat idle: once more, on a new one.
                Err(ExchangeError::Unanswered) => {}
                Err(error) => return Err(error.failure()),
            }
        }
        let mut connection = shared.connect().await?;
        match connection.exchange(&shared.head, body).await {
            Ok(head) => Ok(self.answer(connection, head)),
            Err(error) => Err(error.failure()),
        }
    }

    fn answer(&self, connection: Connection, head: Head) -> Answer<'_> {
        Answer {
            client: self,
            connection: Some(connection),
            head,
        }
    }

    /// Idle connections the calling thread keeps (for tests and observation).
    #[cfg(test)]
    pub(crate) fn idle_here(&self) -> usize {
        self.shared.idle.get().map_or(0, |idle| idle.borrow().len())
    }
}

impl Shared {
    /// The calling thread's newest idle connection that is still usable, if any.
    fn checkout(&self) -> Option<Connection> {
        let mut idle = self.idle.get_or_default().borrow_mut();
        self.drop_expired(&mut idle);
        while let Some(entry) = idle.pop_back() {
            let mut connection = entry.connection;
            if connection.is_open() {
                return Some(connection);
            }
        }
        None
    }

    /// Puts a connection back on the calling thread's idle list.
    fn checkin(&self, mut connection: Connection) {
        if self.limits.max_idle == 0 {
            return;
        }
        for buffer in [
            &mut connection.read,
            &mut connection.write,
            &mut connection.received_head,
        ] {
            buffer.clear();
            if buffer.capacity() > KEPT_BUFFER {
                *buffer = Vec::new();
            }
        }
        let mut idle = self.idle.get_or_default().borrow_mut();
        self.drop_expired(&mut idle);
        if idle.len() >= self.limits.max_idle {
            idle.pop_front();
        }
        idle.push_back(Idle {
            connection,
            since: Instant::now(),
        });
    }

    fn drop_expired(&self, idle: &mut VecDeque<Idle>) {
        while idle
            .front()
            .is_some_and(|entry| entry.since.elapsed() > self.limits.idle_timeout)
        {
            idle.pop_front();
        }
    }

    /// Opens a connection within the connect timeout: TCP to the first address that
    /// accepts, then TLS when the endpoint is `https://`.
    async fn connect(&self) -> Result<Connection, Failure> {
        tokio::time::timeout(self.limits.connect_timeout, self.open())
            .await
            .map_err(|_elapsed| Failure::ConnectFailed)?
            .map_err(|_error| Failure::ConnectFailed)
    }

    async fn open(&self) -> io::Result<Connection> {
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
        let stream = match &origin.tls {
            None => Stream::Plain(tcp),
            Some((connector, name)) => {
                Stream::Tls(Box::new(connector.connect(name.clone(), tcp).await?))
            }
        };
        Ok(Connection {
            stream,
            read: Vec::new(),
            write: Vec::new(),
            received_head: Vec::new(),
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

/// `tchar` of RFC 9110 §5.6.2.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why an exchange on one connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExchangeError {
    /// The connection failed or closed before the answer's first byte.
    Unanswered,
    /// The connection failed or closed after part of the answer.
    CutShort,
    Head(HeadError),
}

impl ExchangeError {
    fn failure(self) -> Failure {
        match self {
            ExchangeError::Unanswered | ExchangeError::CutShort => Failure::ConnectionReset,
            ExchangeError::Head(HeadError::Malformed) => Failure::Malformed,
            ExchangeError::Head(HeadError::TooLarge) => Failure::ResponseTooLarge,
        }
    }
}

/// A plain or TLS stream.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One connection with its buffers.
struct Connection {
    stream: Stream,
    /// Bytes read and not consumed yet.
    read: Vec<u8>,
    /// The request being written.
    write: Vec<u8>,
    /// The heads of the answer being read (interim ones first), as they arrived.
    received_head: Vec<u8>,
}

impl Connection {
    /// Whether an idle connection can take a request: a read that would block means the
    /// server has not closed it; a close, an error or bytes nobody asked for mean it is
    /// done. Never waits.
    fn is_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let mut buf = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        matches!(
            Pin::new(&mut self.stream).poll_read(&mut cx, &mut buf),
            Poll::Pending
        )
    }

    /// Reads more bytes into the read buffer; `Ok(0)` at the close.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.read.capacity() - self.read.len() < READ_CHUNK / 2 {
            self.read.reserve(READ_CHUNK);
        }
        self.stream.read_buf(&mut self.read).await
    }

    /// Writes the request and reads up to the end of the final answer's head.
    async fn exchange(&mut self, head: &[u8], body: &[u8]) -> Result<Head, ExchangeError> {
        self.write.clear();
        self.write.extend_from_slice(head);
        self.write
            .extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        self.write.extend_from_slice(b"\r\n\r\n");
        self.write.extend_from_slice(body);
        let written = async {
            self.stream.write_all(&self.write).await?;
            self.stream.flush().await
        };
        written.await.map_err(|_| ExchangeError::Unanswered)?;

        self.read.clear();
        self.received_head.clear();
        let mut answered = false;
        loop {
            match parse_head(&self.read).map_err(ExchangeError::Head)? {
                Some(head) => {
                    self.received_head.extend_from_slice(&self.read[..head.len]);
                    self.read.drain(..head.len);
                    if !head.is_interim() {
                        return Ok(head);
                    }
                    answered = true;
                }
                None => {
                    let lost = if answered || !self.read.is_empty() {
                        ExchangeError::CutShort
                    } else {
                        ExchangeError::Unanswered
                    };
                    match self.fill().await {
                        Ok(0) | Err(_) => return Err(lost),
                        Ok(_) => {}
                    }
                }
            }
        }
    }
}

/// An answer whose head has been read; its body is read with [`Answer::body`].
/// Dropping it unread closes the connection.
pub struct Answer<'a> {
    client: &'a Http1Client,
    connection: Option<Connection>,
    head: Head,
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
        self.head.code
    }

    /// The declared length of the body, when the answer declares one.
    pub fn content_length(&self) -> Option<u64> {
        self.head.content_length()
    }

    /// The answer's head as it arrived (status line and header fields), for checks on
    /// every header at once.
    pub fn head_bytes(&self) -> &[u8] {
        self.connection
            .as_ref()
            .map_or(&[][..], |connection| &connection.received_head)
    }

    /// Reads the whole body, at most `limit` bytes. The connection goes back to the
    /// thread's idle list when the answer allows it.
    pub async fn body(mut self, limit: usize) -> Result<Vec<u8>, BodyError> {
        let Some(mut connection) = self.connection.take() else {
            return Err(BodyError::Failed(Failure::ConnectionReset));
        };
        let body = read_body(&mut connection, self.head.framing, limit).await?;
        // Bytes after the body were never asked for: the connection is out of step.
        if self.head.reusable && connection.read.is_empty() {
            self.client.shared.checkin(connection);
        }
        Ok(body)
    }
}

/// Reads a body framed as `framing` from `connection`, at most `limit` bytes, into a
/// buffer of its own: the connection keeps its read buffer for its next answer.
async fn read_body(
    connection: &mut Connection,
    framing: Framing,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    let cut_short = BodyError::Failed(Failure::ConnectionReset);
    match framing {
        Framing::Empty => Ok(Vec::new()),
        Framing::Length(length) => {
            let wanted = usize::try_from(length).unwrap_or(usize::MAX);
            let take = wanted.min(limit);
            let mut body = Vec::with_capacity(take);
            loop {
                let part = (take - body.len()).min(connection.read.len());
                body.extend_from_slice(&connection.read[..part]);
                connection.read.drain(..part);
                if body.len() == take {
                    break;
                }
                match connection.fill().await {
                    Ok(0) | Err(_) => return Err(cut_short),
                    Ok(_) => {}
                }
            }
            if wanted > limit {
                return Err(BodyError::TooLarge(body));
            }
            Ok(body)
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            let mut body = Vec::with_capacity(connection.read.len());
            loop {
                let used = decoder
                    .decode(&connection.read, &mut body)
                    .map_err(|_| BodyError::Failed(Failure::Malformed))?;
                connection.read.drain(..used);
                if body.len() > limit {
                    body.truncate(limit);
                    return Err(BodyError::TooLarge(body));
                }
                if decoder.is_done() {
                    return Ok(body);
                }
                match connection.fill().await {
                    Ok(0) | Err(_) => return Err(cut_short),
                    Ok(_) => {}
                }
            }
        }
        Framing::UntilClose => {
            let mut body = Vec::with_capacity(connection.read.len());
            loop {
                body.extend_from_slice(&connection.read);
                connection.read.clear();
                if body.len() > limit {
                    body.truncate(limit);
                    return Err(BodyError::TooLarge(body));
                }
                match connection.fill().await {
                    Ok(0) => return Ok(body),
                    Err(_) => return Err(cut_short),
                    Ok(_) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
