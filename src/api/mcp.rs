//! ctxd as an MCP server: `/mcp` (streamable HTTP, stateless, JSON answers) for the
//! tenant whose API key the request carries. The protocol is rmcp's
//! [`StreamableHttpService`]; this module bridges an actix request to it and back, and
//! offers the tools.
//!
//! Every tool is its HTTP twin's code path, not a copy: `get_context` runs
//! [`routes::answer_turn`] (and counts the turn like `/v1/turns`), the `handle_*` tools
//! run [`handles::operate_on`] with the body `{"version", "op": {"kind", …}}`,
//! `search_traces` and `get_trace` run [`traces::search_traces`] and
//! [`traces::show_trace`] — the same parsing, limits, traces and metrics. A tool's answer
//! is the HTTP answer's JSON as structured content; an API error is a tool error whose
//! content is the error envelope. A tool reads its arguments as the client sent them
//! ([`arguments`]), so a key given twice is refused as `/v1/turns` refuses it; an
//! unknown tool is a JSON-RPC error (`-32602`, invalid params), not a tool result.
//!
//! `/mcp` answers only the `Host` and `Origin` values `[server] mcp_allowed_hosts` and
//! `mcp_allowed_origins` allow (by default loopback ones): a page whose DNS name was
//! rebound to ctxd's address is refused `403` with a JSON-RPC error, before its key is
//! looked at.

mod arguments;

use super::{ApiError, ApiState, Tenant, handles, routes, traces};
use crate::actors::Coordinator;
use crate::contract::ErrorBody;
use crate::contract::TurnRequest;
use actix::Addr;
use actix_web::body::MessageBody;
use actix_web::{HttpRequest, HttpResponse, web};
use arguments::RawArguments;
use http_body_util::BodyExt;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value as Json, json};
use std::sync::Arc;

/// The handle operations offered as `handle_<kind>` tools (docs/HANDLES.md).
const HANDLE_OPERATIONS: &[(&str, &str)] = &[
    (
        "metadata",
        "The handle's size: bytes, characters and lines, or items.",
    ),
    (
        "peek",
        "The start or end of the material: exactly one of head: N, tail: N (characters or items), or item: i.",
    ),
    (
        "slice",
        "A range: start and length (characters of text, or items).",
    ),
    (
        "search",
        "Lines that contain pattern (literal, case-sensitive, 1..=1024 bytes).",
    ),
    ("partition", "Chunks: by (size | lines) and size >= 1."),
    (
        "map",
        "A function per line or item: function is identity | lowercase | uppercase | length.",
    ),
    ("reduce", "One value: function is count | byte_count."),
];

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config.route("/mcp", web::route().to(endpoint));
}

/// What a tool call acts for: the authenticated tenant and the worker's state. Carried
/// to the handler in the request's extensions.
#[derive(Clone)]
struct Caller {
    tenant: Arc<Tenant>,
    state: web::Data<ApiState>,
    coordinator: web::Data<Addr<Coordinator>>,
}

/// `/mcp`: the tenant is authenticated first (401 without its key, as every tenant
/// route), the body read within the API's limits, then rmcp answers the MCP message.
#[utoipa::path(
    post,
    path = "/mcp",
    summary = "ctxd as an MCP server: streamable HTTP, stateless, JSON answers (docs/MCP.md)",
    tag = "mcp",
    security(("tenantKey" = [])),
    params(("Accept" = String, Header, pattern = "^application/json, text/event-stream$", description = "The transport's answer types: both are required")),
    request_body(content = ref("#/components/schemas/McpMessage"), content_type = "application/json", description = "One JSON-RPC 2.0 message of the MCP streamable HTTP transport, stateless (docs/MCP.md); send `Accept: application/json, text/event-stream`"),
    responses(
        (status = 200, description = "The JSON-RPC answer", body = Object),
        (status = 202, description = "A notification or response was accepted"),
        (status = 400, description = "Not JSON (`BAD_REQUEST`)", body = ErrorBody),
        (status = 403, description = "A `Host` or `Origin` that `server.mcp_allowed_hosts` / `server.mcp_allowed_origins` do not allow (DNS rebinding): a JSON-RPC error, code -32000", body = Object),
        (status = 406, description = "The `Accept` header takes neither `application/json` nor `text/event-stream`", content_type = "text/plain", body = String),
        (status = 408, description = "The body did not arrive within `server.body_timeout_ms` (`REQUEST_TIMEOUT`)", body = ErrorBody),
        (status = 413, description = "The body exceeds `server.max_body_bytes` (`PAYLOAD_TOO_LARGE`)", body = ErrorBody),
        (status = 415, description = "No `Content-Type: application/json` (`UNSUPPORTED_MEDIA_TYPE`), or JSON that is no JSON-RPC message (plain text)", content(
            (ErrorBody = "application/json"),
            (String = "text/plain"),
        )),
    )
)]
async fn endpoint(
    tenant: Result<Tenant, ApiError>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<ApiState>,
    coordinator: web::Data<Addr<Coordinator>>,
) -> Result<HttpResponse, ApiError> {
    if let Some(refused) = refused_origin(&request, &state.mcp_access) {
        return Ok(refused);
    }
    let tenant = tenant?;
    // A message is read like every JSON body: its type, size, arrival time and the drain.
    let body = if request.method() == actix_web::http::Method::POST {
        super::body::read_json_body(&request, payload, &state)
            .await?
            .freeze()
    } else {
        web::Bytes::new()
    };
    let unavailable = |message: &str| ApiError::RuntimeUnavailable {
        message: message.to_owned(),
    };
    let mut builder = http::Request::builder()
        .method(request.method().as_str())
        .uri(request.uri().to_string());
    for (name, value) in request.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    let mut forwarded = builder
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_vec())))
        .map_err(|_| ApiError::BadRequest {
            field: None,
            message: "the request cannot be read as an MCP message".to_owned(),
        })?;
    if let Some(arguments) = arguments::from_http_body(&body) {
        forwarded.extensions_mut().insert(arguments);
    }
    forwarded.extensions_mut().insert(Caller {
        tenant: Arc::new(tenant),
        state,
        coordinator,
    });
    let service = StreamableHttpService::new(
        || Ok(CtxdTools::default()),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            // `Host` and `Origin` were checked above, against the config's lists, so
            // that a refusal is a JSON-RPC error rather than rmcp's plain text.
            .disable_allowed_hosts()
            .disable_allowed_origins(),
    );
    let answer = service.handle(forwarded).await;
    let (parts, body) = answer.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|_| unavailable("the MCP answer could not be produced"))?
        .to_bytes();
    let status = actix_web::http::StatusCode::from_u16(parts.status.as_u16())
        .map_err(|_| unavailable("the MCP answer could not be produced"))?;
    let mut response = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        response.append_header((name.as_str(), value.as_bytes()));
    }
    // rmcp's own refusals (406, 415) are plain text without a type: name it.
    if !body.is_empty() && !parts.headers.contains_key(http::header::CONTENT_TYPE) {
        response.insert_header((
            actix_web::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        ));
    }
    Ok(response.body(body.to_vec()))
}

/// The `403` for a request whose `Host` or `Origin` the config does not allow, with a
/// JSON-RPC error body; `None` when both are allowed. A header given twice, or not as
/// text, is not allowed. The values are not repeated: they are the page's, not ctxd's.
fn refused_origin(
    request: &HttpRequest,
    access: &crate::config::McpAccess,
) -> Option<HttpResponse> {
    let single = |name: actix_web::http::header::HeaderName| {
        let mut values = request.headers().get_all(name);
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(value), None) => value.to_str().map(Some).map_err(|_| ()),
            (Some(_), Some(_)) => Err(()),
        }
    };
    let (header, key) = match (
        single(actix_web::http::header::HOST),
        single(actix_web::http::header::ORIGIN),
    ) {
        (Ok(host), _) if !access.allows_host(host) => ("Host", "server.mcp_allowed_hosts"),
        (Err(()), _) => ("Host", "server.mcp_allowed_hosts"),
        (_, Ok(origin)) if !access.allows_origin(origin) => {
            ("Origin", "server.mcp_allowed_origins")
        }
        (_, Err(())) => ("Origin", "server.mcp_allowed_origins"),
        _ => return None,
    };
    tracing::warn!(
        header,
        "mcp request refused: its {header} is not allowed ({key})"
    );
    Some(HttpResponse::Forbidden().json(json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32000,
            "message": format!("forbidden: this {header} is not allowed on /mcp ({key}, docs/MCP.md)"),
        },
    })))
}

/// The tools' handler. Over HTTP it is stateless and each call finds its [`Caller`] in
/// the request; over stdio it holds the one caller of the process.
#[derive(Clone, Default)]
pub(crate) struct CtxdTools {
    caller: Option<Caller>,
    /// Over stdio: the arguments of the tool calls read from standard input, as sent.
    seen: Option<arguments::SeenCalls>,
}

impl CtxdTools {
    fn tools() -> Vec<Tool> {
        let turn_schema = rmcp::schemars::schema_for!(TurnRequest);
        let turn_schema = match serde_json::to_value(turn_schema) {
            Ok(Json::Object(schema)) => schema,
            _ => Map::new(),
        };
        let mut tools = vec![Tool::new(
            "get_context",
            "Run a turn: the context for project/profile/objective/consumer and inputs, with every layer's and provider's status and the rendered context (the body of POST /v1/turns).",
            Arc::new(turn_schema),
        )];
        for (kind, description) in HANDLE_OPERATIONS {
            tools.push(Tool::new(
                format!("handle_{kind}"),
                format!(
                    "{description} On a handle a turn returned; limits maxResults, maxBytes, timeLimitMs as POST /v1/handles/{{id}}/ops."
                ),
                Arc::new(object(json!({
                    "type": "object",
                    "properties": {
                        "handle": {"type": "string", "description": "the handle id, h_ + 32 hex digits"},
                        "version": {"type": "integer", "description": "the handle's version (1)", "default": 1},
                        "maxResults": {"type": "integer", "minimum": 1},
                        "maxBytes": {"type": "integer", "minimum": 1},
                        "timeLimitMs": {"type": "integer", "minimum": 1},
                    },
                    "required": ["handle"],
                    "additionalProperties": true,
                }))),
            ));
        }
        tools.push(Tool::new(
            "search_traces",
            "Search the tenant's turn traces (the parameters of GET /v1/traces).",
            Arc::new(object(json!({
                "type": "object",
                "properties": {
                    "provider": {"type": "string"},
                    "providerStatus": {"type": "string"},
                    "layer": {"type": "string"},
                    "status": {"type": "string"},
                    "since": {"type": "string", "description": "RFC 3339 or epoch milliseconds"},
                    "until": {"type": "string", "description": "RFC 3339 or epoch milliseconds"},
                    "limit": {"type": "integer", "minimum": 1},
                    "cursor": {"type": "string"},
                },
                "additionalProperties": false,
            }))),
        ));
        tools.push(Tool::new(
            "get_trace",
            "One of the tenant's turns with its provenance (GET /v1/traces/{turnId}).",
            Arc::new(object(json!({
                "type": "object",
                "properties": {"turnId": {"type": "string"}},
                "required": ["turnId"],
                "additionalProperties": false,
            }))),
        ));
        tools
    }
}

fn object(value: Json) -> Map<String, Json> {
    match value {
        Json::Object(map) => map,
        _ => Map::new(),
    }
}

/// An API error as a tool error: the error envelope, as the HTTP route answers it.
fn refused(error: &ApiError) -> CallToolResult {
    CallToolResult::structured_error(error.envelope())
}

/// A route's JSON answer as the tool's structured content.
fn answered(response: Result<HttpResponse, ApiError>) -> CallToolResult {
    match response {
        Err(error) => refused(&error),
        Ok(response) => {
            let body = response.into_body().try_into_bytes().unwrap_or_default();
            match serde_json::from_slice::<Json>(&body) {
                Ok(value) => CallToolResult::structured(value),
                Err(_) => CallToolResult::structured_error(
                    json!({"error": {"code": "internal", "message": "the answer is not JSON"}}),
                ),
            }
        }
    }
}

fn invalid(message: String) -> CallToolResult {
    refused(&ApiError::BadRequest {
        field: None,
        message,
    })
}

/// A `search_traces` call's arguments as the query string of `GET /v1/traces`.
fn trace_query(arguments: &Map<String, Json>) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in arguments {
        let value = match value {
            Json::String(text) => text.clone(),
            other => other.to_string(),
        };
        query.append_pair(key, &value);
    }
    query.finish()
}

/// A `handle_<kind>` call's arguments as the handle id and the body of
/// `POST /v1/handles/{id}/ops`: `{"version", "op": {"kind", …the other arguments}}`.
fn handle_request(kind: &str, mut op: Map<String, Json>) -> Result<(String, String), String> {
    let Some(Json::String(handle)) = op.remove("handle") else {
        return Err("handle: is required, a string".to_owned());
    };
    let version = op.remove("version").unwrap_or(json!(1));
    op.insert("kind".to_owned(), json!(kind));
    Ok((handle, json!({"version": version, "op": op}).to_string()))
}

/// Whether ctxd offers a tool of this name.
fn is_tool(name: &str) -> bool {
    matches!(name, "get_context" | "search_traces" | "get_trace")
        || name
            .strip_prefix("handle_")
            .is_some_and(|kind| HANDLE_OPERATIONS.iter().any(|(k, _)| *k == kind))
}

/// Runs one tool for `caller` with its arguments' JSON text as sent: `get_context`
/// parses it as a turn body, the others as an object that refuses a repeated key.
async fn run_tool(caller: &Caller, name: &str, arguments: &str) -> CallToolResult {
    let tenant = caller.tenant.as_ref();
    let state = caller.state.get_ref();
    if name == "get_context" {
        let result = routes::answer_turn(
            tenant,
            arguments.as_bytes(),
            state,
            caller.coordinator.get_ref(),
        )
        .await;
        routes::count_turn(Some(tenant), &result);
        return match result {
            Ok(response) => match serde_json::to_value(&response) {
                Ok(value) => CallToolResult::structured(value),
                Err(_) => invalid("the turn's answer cannot be encoded".to_owned()),
            },
            Err(error) => refused(&error),
        };
    }
    let arguments = match arguments::strict_object(arguments) {
        Ok(arguments) => arguments,
        Err(message) => return invalid(message),
    };
    match name {
        "search_traces" => {
            let query = trace_query(&arguments);
            answered(traces::search_traces(tenant, &query, state).await)
        }
        "get_trace" => match arguments.get("turnId").and_then(Json::as_str) {
            Some(turn_id) => answered(traces::show_trace(tenant, turn_id.to_owned(), state).await),
            None => invalid("turnId: is required, a string".to_owned()),
        },
        other => match other.strip_prefix("handle_") {
            Some(kind) => match handle_request(kind, arguments) {
                Ok((handle, body)) => {
                    answered(handles::operate_on(tenant, &handle, body.as_bytes(), state).await)
                }
                Err(message) => invalid(message),
            },
            // `call_tool` answers an unknown tool before running anything.
            None => invalid(format!("unknown tool {other:?}")),
        },
    }
}

impl ServerHandler for CtxdTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ctxd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "get_context runs a turn; work large material through its handles with the handle_* tools; search_traces and get_trace show provenance.",
            )
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let name = request.name.as_ref();
        if !is_tool(name) {
            return Err(rmcp::ErrorData::invalid_params(
                format!("unknown tool {name:?}: tools/list names the tools"),
                None,
            ));
        }
        let http = context.extensions.get::<http::request::Parts>();
        let caller = self
            .caller
            .clone()
            .or_else(|| {
                http.and_then(|parts| parts.extensions.get::<Caller>())
                    .cloned()
            })
            .ok_or_else(|| rmcp::ErrorData::internal_error("no tenant for this call", None))?;
        let sent = match &self.seen {
            Some(seen) => seen.take(&context.id),
            None => http.and_then(|parts| parts.extensions.get::<RawArguments>().cloned()),
        };
        let result = match sent {
            Some(arguments) => run_tool(&caller, name, arguments.text()).await,
            // rmcp read a call whose message ctxd could not: never run on its map.
            None => invalid("the tool's arguments cannot be read as sent".to_owned()),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// `ctxd mcp`: the same tools on standard input/output for one tenant, with the same
/// runtime `serve` starts (providers, coordinator, trace writer), until the client
/// closes the stream. Logs go to standard error; standard output carries only MCP.
pub(crate) async fn serve_stdio(
    config: &crate::config::ServerConfig,
    env: &crate::config::EnvVars,
    tenant_id: &str,
) -> anyhow::Result<()> {
    use crate::actors::{Mode, Topology};
    use actix::Actor;
    use rmcp::ServiceExt;

    let topology = Topology::start(config, env, Mode::Live).await?;
    let registry = topology.registry();
    let served = registry.served();
    let Some(runtime) = served.tenants.iter().find(|t| t.id == tenant_id).cloned() else {
        let known: Vec<&str> = served.tenants.iter().map(|t| t.id.as_str()).collect();
        topology.shutdown().await?;
        anyhow::bail!(
            "--tenant {tenant_id:?}: no such tenant in the config (tenants: {})",
            known.join(", ")
        );
    };
    let state = web::Data::new(ApiState::new(
        registry.clone(),
        None,
        &config.server,
        &config.limits,
    ));
    let coordinator = Coordinator::new(Arc::clone(&registry)).start();
    state.coordinators.register(coordinator.clone());
    let caller = Caller {
        tenant: Arc::new(Tenant::local(runtime, state.drain.admit())),
        state,
        coordinator: web::Data::new(coordinator),
    };
    tracing::info!(tenant = tenant_id, "ctxd mcp serving on stdio");
    let seen = arguments::SeenCalls::default();
    let tools = CtxdTools {
        caller: Some(caller),
        seen: Some(seen.clone()),
    };
    // A message is bounded like an HTTP body (`server.max_body_bytes`); the tap notes
    // each tool call's arguments as sent on the way to rmcp's line reader.
    let max_line = config.server.max_body_bytes;
    let (stdin, stdout) = rmcp::transport::stdio();
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(
        arguments::ArgumentTap::new(stdin, max_line, seen),
        stdout,
    )
    .with_max_line_length(max_line);
    match tools.serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(error) => {
            tracing::warn!(error = %crate::secrets::redact::redacted(&error.to_string()), "mcp client did not initialize")
        }
    }
    topology.shutdown().await?;
    tracing::info!("ctxd mcp stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_are_the_turn_the_handle_operations_and_the_traces() {
        let tools = CtxdTools::tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names[0], "get_context");
        for op in crate::handles::request::OPERATIONS {
            assert!(names.contains(&format!("handle_{op}").as_str()), "{op}");
        }
        assert!(names.contains(&"search_traces") && names.contains(&"get_trace"));
        let turn = &tools[0].input_schema;
        assert_eq!(turn["required"], json!(["project"]), "{turn:?}");
        assert!(turn["properties"]["inputs"].is_object());
    }

    #[test]
    fn a_handle_call_becomes_the_operation_body() {
        let arguments = json!({"handle": "h_1", "pattern": "ERROR", "maxResults": 3});
        let (handle, body) =
            handle_request("search", arguments.as_object().unwrap().clone()).unwrap();
        assert_eq!(handle, "h_1");
        let body: Json = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body,
            json!({"version": 1, "op": {"kind": "search", "pattern": "ERROR", "maxResults": 3}})
        );
        assert!(handle_request("peek", Map::new()).is_err());
    }

    #[test]
    fn trace_arguments_become_the_query_string() {
        let arguments = json!({"provider": "crm", "limit": 5, "since": "2026-11-30T10:00:00Z"});
        assert_eq!(
            trace_query(arguments.as_object().unwrap()),
            "provider=crm&limit=5&since=2026-11-30T10%3A00%3A00Z"
        );
    }
}
