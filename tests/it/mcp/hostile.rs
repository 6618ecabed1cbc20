//! A scripted MCP server over streamable HTTP, for the provider's tests of servers that
//! misbehave: raw HTTP/1.1 and JSON-RPC on `127.0.0.1:0`, answered from a script the test
//! changes while it runs. It can hold `initialize` open, forget its sessions and answer
//! the old id as the spec says (`404`) or as the TypeScript SDK's examples do (`400`,
//! `"No valid session ID provided"`), stall a session, and echo the bearer token wherever
//! a server can. It runs on the test's runtime, so paused time applies to it too.
//!
//! The first path segment picks what a binding's server does (`/<mode>/mcp`):
//! - `plain`: answers; `tools/call` of `lookup` says `customer <value> ok`;
//! - `tool-error`, `rpc-error`: `tools/call` answers an error (`isError`, or a JSON-RPC
//!   error) quoting the `Authorization` header it received;
//! - `list-error`: `tools/list` answers a JSON-RPC error quoting it;
//! - `unauthorized`: `initialize` answers `401` without a challenge, its body quoting it;
//! - `content-type`: `initialize` answers `200` with the header quoted in its
//!   `Content-Type`;
//! - `control`: `tools/call` answers an error and `tools/list` a tool whose argument is
//!   named with a newline, CR, ESC and OSC in the text;
//! - `version-long`, `version-secret`: `serverInfo.version` is 300 bytes, or holds a
//!   GitHub token.

use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A GitHub token, as a server might put one in a label.
pub fn github_token() -> String {
    format!("{}{}", "ghp_", "Zq7".repeat(12))
}

/// How the server answers a request in a session it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgotten {
    /// `404`, as the transport specification says.
    NotFound,
    /// `400` with the TypeScript SDK examples' JSON-RPC error without an id.
    TypeScript400,
}

#[derive(Debug)]
struct Script {
    hold_initialize: bool,
    forgotten: Forgotten,
    /// Sessions the server knows, and those of them whose requests it never answers.
    sessions: HashSet<String>,
    stalled: HashSet<String>,
    next_session: u32,
    /// What every `initialize` asked for, in order.
    initialize_versions: Vec<String>,
    /// `tools/call` requests answered.
    calls: usize,
    /// Requests that arrived in a session the server did not know.
    unknown_session_requests: usize,
    /// Requests left unanswered (a held `initialize`, anything in a stalled session).
    held: usize,
}

/// The running server; stops when dropped.
pub struct Hostile {
    pub port: u16,
    script: Arc<Mutex<Script>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

enum Reply {
    Send {
        status: &'static str,
        headers: Vec<(String, String)>,
        body: String,
    },
    Hold,
}

fn json_reply(body: Value) -> Reply {
    Reply::Send {
        status: "200 OK",
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: body.to_string(),
    }
}

fn result(id: &Value, result: Value) -> Reply {
    json_reply(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn error(id: &Value, message: &str) -> Reply {
    json_reply(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}}))
}

/// A text with a forged log line, a CR, a terminal escape and an OSC title in it.
pub const CONTROL_TEXT: &str =
    "bad\n2026-01-01T00:00:00.000000Z  INFO forged line\r\x1b[31mred\x1b]0;owned\x07";

impl Hostile {
    pub async fn start() -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = Arc::new(Mutex::new(Script {
            hold_initialize: false,
            forgotten: Forgotten::NotFound,
            sessions: HashSet::new(),
            stalled: HashSet::new(),
            next_session: 0,
            initialize_versions: Vec::new(),
            calls: 0,
            unknown_session_requests: 0,
            held: 0,
        }));
        let shared = Arc::clone(&script);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Hostile { port, script, task }
    }

    pub fn url(&self, mode: &str) -> String {
        format!("http://127.0.0.1:{}/{mode}/mcp", self.port)
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }

    /// Whether `initialize` is left unanswered from now on.
    pub fn hold_initialize(&self, hold: bool) {
        self.script().hold_initialize = hold;
    }

    /// The server restarts as far as sessions go: it knows none of the ids it gave, and
    /// answers them as `answer` says.
    pub fn forget_sessions(&self, answer: Forgotten) {
        let mut script = self.script();
        script.sessions.clear();
        script.forgotten = answer;
    }

    /// Requests in every session the server gave so far are never answered.
    pub fn stall_sessions(&self) {
        let mut script = self.script();
        script.stalled = script.sessions.clone();
    }

    pub fn initialize_versions(&self) -> Vec<String> {
        self.script().initialize_versions.clone()
    }

    pub fn initializes(&self) -> usize {
        self.script().initialize_versions.len()
    }

    pub fn calls(&self) -> usize {
        self.script().calls
    }

    pub fn unknown_session_requests(&self) -> usize {
        self.script().unknown_session_requests
    }

    pub fn held(&self) -> usize {
        self.script().held
    }
}

struct Request {
    method: String,
    mode: String,
    session: Option<String>,
    authorization: String,
    body: Vec<u8>,
}

async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let (mut length, mut session, mut authorization) = (0, None, String::new());
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        let value = value.trim().to_owned();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().ok()?,
            "mcp-session-id" => session = Some(value),
            "authorization" => authorization = value,
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    let mode = path.trim_start_matches('/').split('/').next()?.to_owned();
    Some(Request {
        method,
        mode,
        session,
        authorization,
        body,
    })
}

async fn serve(stream: TcpStream, script: Arc<Mutex<Script>>) {
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader).await {
        let reply = answer(&request, &script);
        let Reply::Send {
            status,
            headers,
            body,
        } = reply
        else {
            // Held: the connection stays open and silent until the client gives up.
            std::future::pending::<()>().await;
            return;
        };
        let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let stream = reader.get_mut();
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(body.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

fn answer(request: &Request, script: &Mutex<Script>) -> Reply {
    let empty = |status| Reply::Send {
        status,
        headers: Vec::new(),
        body: String::new(),
    };
    match request.method.as_str() {
        "POST" => {}
        // No standalone SSE stream; sessions end when the client goes.
        "GET" => return empty("405 Method Not Allowed"),
        _ => return empty("200 OK"),
    }
    let Ok(message) = serde_json::from_slice::<Value>(&request.body) else {
        return empty("400 Bad Request");
    };
    let method = message["method"].as_str().unwrap_or_default();
    let id = &message["id"];
    if id.is_null() {
        // A notification (or a client's answer): accepted.
        return empty("202 Accepted");
    }
    let echo = format!("you sent {}", request.authorization);
    let mut script = script.lock().unwrap();
    if method == "initialize" {
        let version = message["params"]["protocolVersion"].as_str().unwrap_or("");
        script.initialize_versions.push(version.to_owned());
        if script.hold_initialize {
            script.held += 1;
            return Reply::Hold;
        }
        match request.mode.as_str() {
            "unauthorized" => {
                return Reply::Send {
                    status: "401 Unauthorized",
                    headers: vec![("Content-Type".into(), "text/plain".into())],
                    body: echo,
                };
            }
            "content-type" => {
                return Reply::Send {
                    status: "200 OK",
                    headers: vec![(
                        "Content-Type".into(),
                        format!("application/x-{}", request.authorization.replace(' ', "-")),
                    )],
                    body: "{}".into(),
                };
            }
            _ => {}
        }
        script.next_session += 1;
        let session = format!("session-{}", script.next_session);
        script.sessions.insert(session.clone());
        let server_version = match request.mode.as_str() {
            "version-long" => "9".repeat(300),
            "version-secret" => format!("1.0.0+{}", github_token()),
            _ => "4.5.6".to_owned(),
        };
        let Reply::Send {
            status,
            mut headers,
            body,
        } = result(
            id,
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": server_version}
            }),
        )
        else {
            unreachable!()
        };
        headers.push(("Mcp-Session-Id".into(), session));
        return Reply::Send {
            status,
            headers,
            body,
        };
    }
    match &request.session {
        Some(session) if script.stalled.contains(session) => {
            script.held += 1;
            return Reply::Hold;
        }
        Some(session) if script.sessions.contains(session) => {}
        _ => {
            script.unknown_session_requests += 1;
            return match script.forgotten {
                Forgotten::NotFound => empty("404 Not Found"),
                Forgotten::TypeScript400 => Reply::Send {
                    status: "400 Bad Request",
                    headers: vec![("Content-Type".into(), "application/json".into())],
                    body: json!({
                        "jsonrpc": "2.0",
                        "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"},
                        "id": null
                    })
                    .to_string(),
                },
            };
        }
    }
    match (method, request.mode.as_str()) {
        ("ping", _) => result(id, json!({})),
        ("tools/list", "list-error") => error(id, &format!("cannot list: {echo}")),
        ("tools/list", mode) => {
            let argument = if mode == "control" {
                CONTROL_TEXT
            } else {
                "customer"
            };
            result(
                id,
                json!({"tools": [{
                    "name": "lookup",
                    "inputSchema": {"type": "object", "properties": {argument: {"type": "string"}}}
                }]}),
            )
        }
        ("tools/call", mode) => {
            script.calls += 1;
            let value = message["params"]["arguments"]["customer"]
                .as_str()
                .unwrap_or_default();
            match mode {
                "tool-error" => result(
                    id,
                    json!({"content": [{"type": "text", "text": format!("refused: {echo}")}], "isError": true}),
                ),
                "rpc-error" => error(id, &format!("refused: {echo}")),
                "control" => result(
                    id,
                    json!({"content": [{"type": "text", "text": CONTROL_TEXT}], "isError": true}),
                ),
                _ => result(
                    id,
                    json!({"content": [{"type": "text", "text": format!("customer {value} ok")}]}),
                ),
            }
        }
        _ => json_reply(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "method not found"}
        })),
    }
}
