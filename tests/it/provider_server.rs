//! Scripted `context-provider.v1` servers for integration tests.
//!
//! A [`ProviderServer`] is built fluently, then [`ProviderServer::start`]ed on
//! `127.0.0.1:0`. It speaks hand-written HTTP/1.1 over `tokio::net::TcpListener`, so it
//! can misbehave in ways a framework would not allow: hang, reset mid-body, lie about
//! sizes, echo the credential. It records every request.
//!
//! Which [`Behaviour`] answers a request, first match wins:
//! 1. a describe probe (`"capability":"describe"` in the body) when
//!    [`ProviderServer::describe_behaviour`] is set;
//! 2. the next entry of the [`ProviderServer::script`], consumed one per request;
//! 3. the [`ProviderServer::respond_with`] closure;
//! 4. the [`ProviderServer::behaviour`] (default [`Behaviour::Answer`]).
//!
//! Every behaviour stops by itself and is bounded: a hang lasts until the client goes
//! away or [`HANG_LIMIT`]; oversize bodies stop at 2 MiB or when the client disconnects.
//! Dropping the [`RunningProvider`] aborts the accept loop and every connection task.

#![allow(dead_code)] // a toolbox: not every test uses every helper

use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The contract every default answer carries.
pub const CONTRACT: &str = "context-provider.v1";
/// Longest a [`Behaviour::Hang`] holds a connection when the client never gives up.
pub const HANG_LIMIT: Duration = Duration::from_secs(30);
/// Total size of the oversize bodies: twice the 1 MiB response limit.
pub const OVERSIZE_BYTES: usize = 2 * 1024 * 1024;
/// Size of each write of an oversize body.
pub const OVERSIZE_CHUNK: usize = 64 * 1024;
/// Pause between oversize chunks, so a client that stops reading is noticed (by a failed
/// write) long before the kernel's socket buffers could absorb the whole body.
const OVERSIZE_PACE: Duration = Duration::from_millis(3);
/// Largest request head or body the server reads.
const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// How the server answers one request.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// A compatible answer: the configured lookup items, or the configured description
    /// for a describe probe.
    Answer,
    /// This status with a small JSON error body (404, 401, 403, 429, 500, 503 …).
    Status(u16),
    /// This status with this JSON body.
    Json(u16, Value),
    /// `302 Found` with this `Location`.
    Redirect(String),
    /// Sleep, then behave.
    Delay(Duration, Box<Behaviour>),
    /// Never answer; hold the connection until the client disconnects (or [`HANG_LIMIT`]).
    Hang,
    /// 200 with a truthful `Content-Length` of 2 MiB; the body is written in paced
    /// chunks until done or the client disconnects.
    OversizeContentLength,
    /// 200 chunked, no `Content-Length`: 64 KiB chunks until 2 MiB or the client
    /// disconnects.
    OversizeChunked,
    /// A compatible lookup answer with this many items.
    TooManyItems(usize),
    /// A compatible lookup answer with one item over 64 KiB.
    ItemTooLarge,
    /// This status, with the request's `Authorization` value echoed in an `X-Echo`
    /// response header; the body is the compatible answer.
    ReflectHeader(u16),
    /// This status, with the request's `Authorization` value echoed in the body (in an
    /// item's content for 2xx).
    ReflectBody(u16),
    /// A compatible lookup answer whose item content holds a PEM private key header
    /// (detector `private_key`), built at runtime.
    SecretItem,
    /// Answers with contract `context-provider.v2`, lookups and describes alike.
    WrongContract,
    /// A describe answer without the `lookup` capability (lookups answered normally).
    NoLookupCapability,
    /// 200 with a non-JSON body.
    Garbage,
    /// Headers with `Content-Length: 1000`, 10 body bytes, then a reset (linger 0).
    ResetMidBody,
    /// Headers with `Content-Length: 1000` and 10 body bytes, then nothing more: held
    /// like [`Behaviour::Hang`].
    StallAfterHead,
    /// These bytes verbatim, then the connection is closed.
    Raw(Vec<u8>),
}

impl Behaviour {
    /// Whether the connection stays open for another request after this answer.
    fn keeps_connection(&self) -> bool {
        match self {
            Behaviour::Answer
            | Behaviour::Status(_)
            | Behaviour::Json(..)
            | Behaviour::Redirect(_)
            | Behaviour::TooManyItems(_)
            | Behaviour::ItemTooLarge
            | Behaviour::ReflectHeader(_)
            | Behaviour::ReflectBody(_)
            | Behaviour::SecretItem
            | Behaviour::WrongContract
            | Behaviour::NoLookupCapability
            | Behaviour::Garbage => true,
            Behaviour::Delay(_, inner) => inner.keeps_connection(),
            Behaviour::Hang
            | Behaviour::OversizeContentLength
            | Behaviour::OversizeChunked
            | Behaviour::ResetMidBody
            | Behaviour::StallAfterHead
            | Behaviour::Raw(_) => false,
        }
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// The request target exactly as sent (path and query).
    pub target: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, if the target had a `?`.
    pub query: Option<String>,
    /// Header names lowercased, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Whether this is the readiness probe.
    pub fn is_describe(&self) -> bool {
        self.json()["capability"] == "describe"
    }

    /// The request line and headers as text, for "never in the URL or headers" checks.
    pub fn head_text(&self) -> String {
        let mut text = format!("{} {}\r\n", self.method, self.target);
        for (name, value) in &self.headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text
    }
}

type Responder = dyn Fn(&RecordedRequest, usize) -> Behaviour + Send + Sync;

/// A scripted provider server, not yet started.
#[derive(Clone)]
pub struct ProviderServer {
    path: String,
    items: Vec<Value>,
    version: Option<String>,
    revision: Option<String>,
    currentness: Option<String>,
    capabilities: Vec<String>,
    behaviour: Behaviour,
    describe_behaviour: Option<Behaviour>,
    script: Vec<Behaviour>,
    responder: Option<Arc<Responder>>,
    delay: Option<Duration>,
}

impl Default for ProviderServer {
    fn default() -> Self {
        Self::new()
    }
}

impl ProviderServer {
    /// Answers lookups with the seed's one item and describe with a compatible
    /// description, at path `/context`.
    pub fn new() -> Self {
        ProviderServer {
            path: "/context".to_owned(),
            items: vec![json!({
                "id": "CUST-1042",
                "title": "Current account state",
                "content": "Plan Enterprise, renewal due 2026-11-01.",
                "metadata": {"plan": "Enterprise"},
                "updatedAt": "2026-10-08"
            })],
            version: Some("5.0.1".to_owned()),
            revision: Some("crm-r9".to_owned()),
            currentness: Some("CURRENT".to_owned()),
            capabilities: vec!["describe".to_owned(), "lookup".to_owned()],
            behaviour: Behaviour::Answer,
            describe_behaviour: None,
            script: Vec::new(),
            responder: None,
            delay: None,
        }
    }

    /// The path in [`RunningProvider::url`] (the server answers on any path and records it).
    pub fn path(mut self, path: &str) -> Self {
        self.path = path.to_owned();
        self
    }

    /// Items of a compatible lookup answer (JSON, sent as given).
    pub fn lookup_items(mut self, items: Vec<Value>) -> Self {
        self.items = items;
        self
    }

    /// `version` of lookup and describe answers; `None` leaves it out.
    pub fn version(mut self, version: Option<&str>) -> Self {
        self.version = version.map(str::to_owned);
        self
    }

    /// `revision` of lookup answers; `None` leaves it out.
    pub fn revision(mut self, revision: Option<&str>) -> Self {
        self.revision = revision.map(str::to_owned);
        self
    }

    /// `currentness` of lookup answers (`CURRENT`, `STALE`, `UNKNOWN`); `None` leaves it out.
    pub fn currentness(mut self, currentness: Option<&str>) -> Self {
        self.currentness = currentness.map(str::to_owned);
        self
    }

    /// `capabilities` of describe answers.
    pub fn capabilities(mut self, capabilities: &[&str]) -> Self {
        self.capabilities = capabilities.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    /// How every request is answered once the script is spent.
    pub fn behaviour(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }

    /// How describe probes are answered, whatever the script or behaviour say (probes
    /// then consume no script entry).
    pub fn describe_behaviour(mut self, behaviour: Behaviour) -> Self {
        self.describe_behaviour = Some(behaviour);
        self
    }

    /// Behaviours consumed one per request, in order, before the closure or the
    /// behaviour apply: e.g. five `Status(503)` then `Answer`.
    pub fn script(mut self, script: Vec<Behaviour>) -> Self {
        self.script = script;
        self
    }

    /// Chooses each answer from the request and its 0-based index among all requests.
    pub fn respond_with(
        mut self,
        responder: impl Fn(&RecordedRequest, usize) -> Behaviour + Send + Sync + 'static,
    ) -> Self {
        self.responder = Some(Arc::new(responder));
        self
    }

    /// Waits this long before every answer.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Shorthand for `.behaviour(Behaviour::Status(code))`.
    pub fn status(self, code: u16) -> Self {
        self.behaviour(Behaviour::Status(code))
    }

    /// Shorthand for `.behaviour(Behaviour::Redirect(location))`.
    pub fn redirect(self, location: &str) -> Self {
        self.behaviour(Behaviour::Redirect(location.to_owned()))
    }

    /// Shorthand for `.behaviour(Behaviour::Hang)`.
    pub fn hang(self) -> Self {
        self.behaviour(Behaviour::Hang)
    }

    /// Binds `127.0.0.1:0` and serves until the returned handle is dropped.
    pub async fn start(self) -> RunningProvider {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            config: self,
            requests: Mutex::new(Vec::new()),
            script_position: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            body_bytes_written: AtomicU64::new(0),
            aborted_writes: AtomicUsize::new(0),
        });
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        RunningProvider { addr, state, task }
    }
}

/// Shared between the handle, the accept loop and connection tasks.
struct State {
    config: ProviderServer,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Next script entry to consume.
    script_position: AtomicUsize,
    connections: AtomicUsize,
    /// Body bytes the oversize behaviours managed to write.
    body_bytes_written: AtomicU64,
    /// Answers cut short because the client went away mid-write.
    aborted_writes: AtomicUsize,
}

/// A started server. Dropping it stops the server and every open connection.
pub struct RunningProvider {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for RunningProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RunningProvider {
    /// `http://127.0.0.1:PORT/context` (or the configured path).
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.state.config.path)
    }

    /// [`RunningProvider::url`] parsed.
    pub fn endpoint(&self) -> url::Url {
        url::Url::parse(&self.url()).expect("a valid url")
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// How many requests were received.
    pub fn hits(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// How many lookups (requests that are not describe probes) were received.
    pub fn lookups(&self) -> usize {
        self.requests().iter().filter(|r| !r.is_describe()).count()
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Body bytes written by the oversize behaviours.
    pub fn body_bytes_written(&self) -> u64 {
        self.state.body_bytes_written.load(Ordering::SeqCst)
    }

    /// Answers cut short because the client disconnected before the server finished.
    pub fn aborted_writes(&self) -> usize {
        self.state.aborted_writes.load(Ordering::SeqCst)
    }

    /// Waits (up to `limit`) until `condition` holds, for effects that land just after a
    /// client returns (a failed write noticed by the server).
    pub async fn wait_for(&self, limit: Duration, condition: impl Fn(&Self) -> bool) -> bool {
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            if condition(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        condition(self)
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    // Owned here so that aborting this task drops — and aborts — every connection task.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                state.connections.fetch_add(1, Ordering::SeqCst);
                connections.spawn(serve_connection(stream, Arc::clone(&state)));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves requests on one connection until the client closes it or a behaviour ends it.
async fn serve_connection(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let index = {
            let mut requests = state.requests.lock().unwrap();
            requests.push(request.clone());
            requests.len() - 1
        };
        let behaviour = choose(&state, &request, index);
        if let Some(delay) = state.config.delay {
            tokio::time::sleep(delay).await;
        }
        let keep = behaviour.keeps_connection();
        if respond(&mut stream, &state, &request, behaviour)
            .await
            .is_err()
            || !keep
        {
            return;
        }
    }
}

fn choose(state: &State, request: &RecordedRequest, index: usize) -> Behaviour {
    let config = &state.config;
    if let Some(describe) = &config.describe_behaviour
        && request.is_describe()
    {
        return describe.clone();
    }
    let position = state.script_position.fetch_add(1, Ordering::SeqCst);
    if let Some(next) = config.script.get(position) {
        return next.clone();
    }
    match &config.responder {
        Some(responder) => responder(request, index),
        None => config.behaviour.clone(),
    }
}

/// Reads one request (head, then a `Content-Length` body). `None` at EOF or on anything
/// the server does not understand; both end the connection.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<RecordedRequest> {
    let head_end = loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end;
        }
        if buffer.len() > MAX_REQUEST_BYTES || read_more(stream, buffer).await? == 0 {
            return None;
        }
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(Some(0), |(_, value)| value.parse().ok())?;
    if length > MAX_REQUEST_BYTES {
        return None;
    }
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        if read_more(stream, buffer).await? == 0 {
            return None;
        }
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (target.clone(), None),
    };
    Some(RecordedRequest {
        method,
        target,
        path,
        query,
        headers,
        body,
    })
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let read = stream.read(&mut chunk).await.ok()?;
    buffer.extend_from_slice(&chunk[..read]);
    Some(read)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The compatible lookup answer with these items.
fn lookup_answer(config: &ProviderServer, items: Vec<Value>) -> Value {
    let mut answer = json!({ "contract": CONTRACT });
    if let Some(version) = &config.version {
        answer["version"] = json!(version);
    }
    if let Some(revision) = &config.revision {
        answer["revision"] = json!(revision);
    }
    if let Some(currentness) = &config.currentness {
        answer["currentness"] = json!(currentness);
    }
    answer["items"] = Value::Array(items);
    answer
}

fn describe_answer(config: &ProviderServer, capabilities: &[String]) -> Value {
    let mut answer = json!({ "contract": CONTRACT, "capabilities": capabilities });
    if let Some(version) = &config.version {
        answer["version"] = json!(version);
    }
    answer
}

/// The compatible answer to this request.
fn compatible(config: &ProviderServer, request: &RecordedRequest) -> Value {
    if request.is_describe() {
        describe_answer(config, &config.capabilities)
    } else {
        lookup_answer(config, config.items.clone())
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// A complete response with a `Content-Length` body.
fn response(code: u16, extra_headers: &[(&str, &str)], content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
        reason(code),
        body.len()
    );
    for (name, value) in extra_headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

fn json_response(code: u16, extra_headers: &[(&str, &str)], body: &Value) -> Vec<u8> {
    response(
        code,
        extra_headers,
        "application/json",
        &serde_json::to_vec(body).expect("json"),
    )
}

async fn respond(
    stream: &mut TcpStream,
    state: &State,
    request: &RecordedRequest,
    behaviour: Behaviour,
) -> std::io::Result<()> {
    let config = &state.config;
    let authorization = request.header("authorization").unwrap_or("").to_owned();
    let bytes = match behaviour {
        Behaviour::Answer => json_response(200, &[], &compatible(config, request)),
        Behaviour::Status(code) => {
            json_response(code, &[], &json!({"error": reason(code), "status": code}))
        }
        Behaviour::Json(code, body) => json_response(code, &[], &body),
        Behaviour::Redirect(location) => {
            response(302, &[("location", &location)], "text/plain", b"moved")
        }
        Behaviour::Delay(delay, inner) => {
            tokio::time::sleep(delay).await;
            return Box::pin(respond(stream, state, request, *inner)).await;
        }
        Behaviour::Hang => {
            hang(stream).await;
            return Ok(());
        }
        Behaviour::OversizeContentLength => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {OVERSIZE_BYTES}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            return write_oversize(stream, state, false).await;
        }
        Behaviour::OversizeChunked => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
            stream.write_all(head.as_bytes()).await?;
            return write_oversize(stream, state, true).await;
        }
        Behaviour::TooManyItems(count) => {
            let items = (0..count)
                .map(|i| json!({"id": format!("rec-{i}"), "content": "row"}))
                .collect();
            json_response(200, &[], &lookup_answer(config, items))
        }
        Behaviour::ItemTooLarge => {
            let items = vec![json!({"id": "big", "content": "x".repeat(70 * 1024)})];
            json_response(200, &[], &lookup_answer(config, items))
        }
        Behaviour::ReflectHeader(code) => json_response(
            code,
            &[("x-echo", &authorization)],
            &compatible(config, request),
        ),
        Behaviour::ReflectBody(code) => {
            let body = if (200..300).contains(&code) {
                let items =
                    vec![json!({"id": "echo", "content": format!("you sent {authorization}")})];
                lookup_answer(config, items)
            } else {
                json!({"error": format!("credential refused: {authorization}")})
            };
            json_response(code, &[], &body)
        }
        Behaviour::SecretItem => {
            let key = format!(
                "-----BEGIN {}PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
                "RSA "
            );
            let items = vec![json!({"id": "leak", "title": "Key", "content": key})];
            json_response(200, &[], &lookup_answer(config, items))
        }
        Behaviour::WrongContract => {
            let mut body = compatible(config, request);
            body["contract"] = json!("context-provider.v2");
            json_response(200, &[], &body)
        }
        Behaviour::NoLookupCapability => {
            let body = if request.is_describe() {
                describe_answer(config, &["describe".to_owned()])
            } else {
                compatible(config, request)
            };
            json_response(200, &[], &body)
        }
        Behaviour::Garbage => response(
            200,
            &[],
            "application/json",
            b"<html><body>Service temporarily moved</body></html>",
        ),
        Behaviour::ResetMidBody => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"contract\":";
            stream.write_all(head.as_bytes()).await?;
            stream.flush().await?;
            // Give the client the head before the reset destroys unread data.
            tokio::time::sleep(Duration::from_millis(20)).await;
            stream.set_zero_linger()?;
            return Ok(()); // dropping the stream now sends RST
        }
        Behaviour::StallAfterHead => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"contract\":";
            stream.write_all(head.as_bytes()).await?;
            stream.flush().await?;
            hang(stream).await;
            return Ok(());
        }
        Behaviour::Raw(bytes) => bytes,
    };
    stream.write_all(&bytes).await?;
    stream.flush().await
}

/// Holds the connection without answering until the client closes it (or HANG_LIMIT).
async fn hang(stream: &mut TcpStream) {
    let wait = async {
        let mut sink = [0u8; 1024];
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(HANG_LIMIT, wait).await;
}

/// Writes 2 MiB in paced 64 KiB chunks (chunked framing if asked), stopping at the first
/// failed write: the client went away. Counts what was written.
async fn write_oversize(
    stream: &mut TcpStream,
    state: &State,
    chunked: bool,
) -> std::io::Result<()> {
    // A JSON-looking start, so only the size can be the problem.
    let mut chunk = vec![b' '; OVERSIZE_CHUNK];
    chunk[..1].copy_from_slice(b"[");
    let mut written = 0;
    while written < OVERSIZE_BYTES {
        let result = if chunked {
            let mut framed = format!("{OVERSIZE_CHUNK:x}\r\n").into_bytes();
            framed.extend_from_slice(&chunk);
            framed.extend_from_slice(b"\r\n");
            stream.write_all(&framed).await
        } else {
            stream.write_all(&chunk).await
        };
        if let Err(error) = result {
            state.aborted_writes.fetch_add(1, Ordering::SeqCst);
            return Err(error);
        }
        written += OVERSIZE_CHUNK;
        state
            .body_bytes_written
            .fetch_add(OVERSIZE_CHUNK as u64, Ordering::SeqCst);
        chunk[0] = b' ';
        tokio::time::sleep(OVERSIZE_PACE).await;
    }
    if chunked {
        stream.write_all(b"0\r\n\r\n").await?;
    }
    stream.flush().await
}
