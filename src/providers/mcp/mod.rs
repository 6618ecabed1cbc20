//! The MCP provider: an MCP server (streamable HTTP or a stdio child process) used as a
//! context provider. A lookup calls the bound tool with the value as one named argument
//! or reads the bound resource with the value in its URI; the result passes the same
//! bounds and scans as every provider answer ([`answer`]).
//!
//! The session is kept by a supervisor task ([`session`]) that the provider actor starts
//! ([`McpProvider::start`]) and stops ([`McpProvider::close`]); lookups run on the calling
//! coordinator's thread and talk to the session's peer, and tell the session how they
//! fared (a session whose lookups keep failing without an answer is checked and
//! renewed). A call past its deadline is dropped, which makes the client send
//! `notifications/cancelled` for it.
//!
//! Every text the server sends that ctxd shows — a tool's error, a JSON-RPC error, a
//! failed listing, the tools and resources it offers — passes [`UntrustedText`] with the
//! binding's own secrets as masks. An error that quotes the bearer token is refused like
//! an answer that does (`CREDENTIAL_REFLECTED`) and logged nowhere.

pub(crate) mod answer;
mod child;
pub(crate) mod http;
pub(crate) mod session;
mod stderr;

use super::untrusted::{Masks, UntrustedText};
use super::{LookupCall, Secret};
use crate::config::{McpBinding, McpLookup, McpTransport};
use crate::outcome::{Failure, Outcome};
use answer::Mapped;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::service::ServiceError;
use serde_json::{Map, Value as Json};
use session::{Session, SessionState};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};
use url::Url;

/// POSTs in flight at once over streamable HTTP unless the binding says otherwise.
const DEFAULT_MAX_REQUESTS: usize = 16;

/// How long the readiness probe waits for a session that is still being set up.
const STARTUP_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The most bytes of `doctor`'s account of what a server offers.
const MAX_OFFER_BYTES: usize = 4 * 1024;

/// How to reach the server, with the values read from the environment.
#[derive(Clone)]
pub(crate) enum McpConnection {
    Http {
        url: Url,
        secret: Option<Secret>,
        /// Most POSTs in flight at once (the binding's `max_concurrency`).
        max_requests: usize,
    },
    Stdio {
        command: String,
        args: Vec<String>,
        /// The allow-listed variables with their values (`Secret`: never printed).
        env: Vec<(String, Secret)>,
    },
}

impl McpConnection {
    /// The binding's own secrets in this connection: the bearer token, or the value of
    /// every variable a stdio child is given (as [`crate::deployment::binding_masks`]
    /// builds them from the binding).
    pub(crate) fn masks(&self) -> Masks {
        let mut masks = Masks::none();
        match self {
            McpConnection::Http { secret, .. } => {
                if let Some(secret) = secret {
                    masks.secret(secret.expose());
                }
            }
            McpConnection::Stdio { env, .. } => {
                for (_, value) in env {
                    masks.secret(value.expose());
                }
            }
        }
        masks
    }
}

/// One tool the server lists, as `doctor` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolSummary {
    pub(crate) name: String,
    /// The property names of its input schema.
    pub(crate) arguments: Vec<String>,
}

/// What the server offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inventory {
    pub(crate) server: Option<String>,
    pub(crate) tools: Vec<ToolSummary>,
    pub(crate) resources: Vec<String>,
    pub(crate) templates: Vec<String>,
}

/// An MCP provider binding. Clones share the session.
#[derive(Clone)]
pub struct McpProvider {
    inner: Arc<Inner>,
}

struct Inner {
    provider: String,
    lookup: McpLookup,
    connection: McpConnection,
    /// The bearer token, for the reflection check.
    credential: Option<Secret>,
    /// The bearer token alone, as masks: what an error must not quote.
    credential_masks: Masks,
    /// The binding's own secrets: every server text shown passes them.
    masks: Masks,
    state: watch::Sender<SessionState>,
    stop: watch::Sender<bool>,
    started: AtomicBool,
}

impl fmt::Debug for McpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpProvider")
            .field("provider", &self.inner.provider)
            .finish_non_exhaustive()
    }
}

impl McpProvider {
    /// The provider for `binding`, with the token and allow-listed variables already
    /// read, and `masks` the binding's own secrets
    /// ([`crate::deployment::binding_masks`]). Nothing is started until
    /// [`McpProvider::start`].
    pub(crate) fn new(
        provider: &str,
        binding: &McpBinding,
        mut connection: McpConnection,
        max_concurrency: Option<usize>,
        masks: Masks,
    ) -> Self {
        if let (McpConnection::Http { max_requests, .. }, Some(limit)) =
            (&mut connection, max_concurrency)
        {
            *max_requests = limit.max(1);
        }
        let credential = match &connection {
            McpConnection::Http { secret, .. } => secret.clone(),
            McpConnection::Stdio { .. } => None,
        };
        let mut credential_masks = Masks::none();
        if let Some(secret) = &credential {
            credential_masks.secret(secret.expose());
        }
        McpProvider {
            inner: Arc::new(Inner {
                provider: provider.to_owned(),
                lookup: binding.lookup.clone(),
                connection,
                credential,
                credential_masks,
                masks,
                state: watch::Sender::new(SessionState::Connecting),
                stop: watch::Sender::new(false),
                started: AtomicBool::new(false),
            }),
        }
    }

    /// The provider for `binding`, reading the token (`auth_env`) and the allow-listed
    /// variables through `read`. `Err` names the token's variable when it is not set.
    pub fn build(
        provider: &str,
        binding: &McpBinding,
        read: impl Fn(&str) -> Option<String>,
    ) -> Result<McpProvider, String> {
        let connection = connection_for(binding, read)?;
        let masks = connection.masks();
        Ok(McpProvider::new(provider, binding, connection, None, masks))
    }

    /// Starts the session supervisor on the current runtime (once): a stdio server is
    /// launched now and relaunched with backoff whenever it exits.
    pub fn start(&self) {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let supervisor = session::supervise(
            self.inner.provider.clone(),
            self.inner.connection.clone(),
            self.inner.masks.clone(),
            self.inner.state.clone(),
            self.inner.stop.subscribe(),
        );
        tokio::spawn(supervisor);
    }

    /// Stops the supervisor: the session is closed and a stdio child killed.
    pub fn close(&self) {
        self.inner.stop.send_replace(true);
    }

    /// Whether the session is up by `deadline`.
    pub async fn wait_ready(&self, deadline: Instant) -> bool {
        self.session(deadline).await.is_ok()
    }

    /// The session once it is up; `Err` with the failure otherwise.
    async fn session(&self, deadline: Instant) -> Result<Arc<Session>, Failure> {
        let mut state = self.inner.state.subscribe();
        let settled = timeout_at(
            deadline,
            state.wait_for(|state| !matches!(state, SessionState::Connecting)),
        )
        .await;
        match settled {
            Err(_) => Err(Failure::Deadline),
            Ok(Err(_)) => Err(Failure::ConnectFailed),
            Ok(Ok(state)) => match &*state {
                SessionState::Up(session) => Ok(Arc::clone(session)),
                SessionState::Down(failure) => Err(failure.clone()),
                SessionState::Connecting => Err(Failure::ConnectFailed),
            },
        }
    }

    /// One lookup. Never panics; every failure is an outcome with a typed failure, and
    /// neither the value nor the token appears in it or in a log line.
    pub async fn lookup(&self, call: &LookupCall<'_>) -> Outcome {
        let outcome = self.lookup_inner(call).await;
        tracing::debug!(
            provider = %call.provider,
            status = %outcome.status(),
            detail = outcome.detail().unwrap_or(""),
            "mcp provider call finished"
        );
        outcome
    }

    async fn lookup_inner(&self, call: &LookupCall<'_>) -> Outcome {
        let failed = |failure| Outcome::failed(failure, crate::contract::Source::Live);
        let session = match self.session(call.deadline).await {
            Ok(session) => session,
            Err(failure) => return failed(failure),
        };
        let peer = session.peer();
        let answer = match &self.inner.lookup {
            McpLookup::Tool {
                tool,
                argument,
                fixed,
            } => {
                let params = CallToolRequestParams::new(tool.clone())
                    .with_arguments(answer::tool_arguments(fixed, argument, call.value));
                // Dropping the request at the deadline sends `notifications/cancelled`.
                timeout_at(call.deadline, peer.call_tool(params))
                    .await
                    .map(|result| result.map(|result| serde_json::to_value(&result)))
            }
            McpLookup::Resource { template } => {
                let Some(uri) = answer::resource_uri(template, call.value) else {
                    return failed(Failure::RequestNotBuilt);
                };
                let params = ReadResourceRequestParams::new(uri);
                timeout_at(call.deadline, peer.read_resource(params))
                    .await
                    .map(|result| result.map(|result| serde_json::to_value(&result)))
            }
        };
        let result = match answer {
            Err(_) => {
                session.failed();
                return failed(Failure::Deadline);
            }
            Ok(Err(error)) => return failed(self.service_failure(&error, call.value, &session)),
            Ok(Ok(result)) => {
                session.answered();
                result
            }
        };
        let credential = self.inner.credential.as_ref().map(Secret::expose);
        let mapped = match (&self.inner.lookup, result) {
            (_, Err(_)) => Mapped::Failed(Failure::Malformed),
            (McpLookup::Tool { tool, .. }, Ok(result)) => {
                answer::map_tool_result(tool, &result, call.limit, credential)
            }
            (McpLookup::Resource { .. }, Ok(result)) => {
                answer::map_resource_result(&result, call.limit, credential)
            }
        };
        match mapped {
            Mapped::Failed(failure) => failed(failure),
            Mapped::ToolError(text) => {
                // Like an answer that echoes the token: refused, and logged nowhere.
                if self.inner.credential_masks.occurs_in(&text) {
                    return failed(Failure::CredentialReflected);
                }
                tracing::warn!(
                    provider = %call.provider,
                    error = %answer::loggable_error(&text, &self.inner.masks, call.value),
                    "mcp tool answered an error"
                );
                failed(Failure::ToolError)
            }
            Mapped::Items(items) => answer::finish(items, call.secrets),
        }
    }

    /// What a failed request means, told to the session too (an error answer is an
    /// answer; a failed transport is not). A JSON-RPC error's message is logged as
    /// untrusted text, unless it quotes the token: then the call is
    /// `CREDENTIAL_REFLECTED` and nothing is logged.
    fn service_failure(&self, error: &ServiceError, value: &str, session: &Session) -> Failure {
        match error {
            ServiceError::McpError(error) => {
                session.answered();
                let quoted_data = error.data.as_ref().map(Json::to_string);
                if self.inner.credential_masks.occurs_in(&error.message)
                    || quoted_data.is_some_and(|data| self.inner.credential_masks.occurs_in(&data))
                {
                    return Failure::CredentialReflected;
                }
                tracing::warn!(
                    provider = %self.inner.provider,
                    error = %answer::loggable_error(&error.message, &self.inner.masks, value),
                    "mcp server answered an error"
                );
                Failure::ToolError
            }
            ServiceError::TransportSend(error)
                if session::refuses_credentials(error.error.as_ref()) =>
            {
                session.failed();
                Failure::Unauthorized
            }
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                session.failed();
                Failure::ConnectionReset
            }
            ServiceError::Timeout { .. } => {
                session.failed();
                Failure::Deadline
            }
            _ => Failure::Malformed,
        }
    }

    /// The readiness probe: the session is up and the bound tool (with its argument) or
    /// resource template is offered. Reports the server's version.
    pub(crate) async fn probe(&self, deadline: Instant) -> Result<Option<String>, String> {
        // A server that is still starting (a stdio child importing its libraries) gets
        // the start-up allowance; the listing itself gets the probe's own time.
        let allowed = deadline.saturating_duration_since(Instant::now());
        let _ = self.session(Instant::now() + STARTUP_ALLOWANCE).await;
        let inventory = self.inventory(Instant::now() + allowed).await?;
        if let Some(problem) = self.binding_problem(&inventory) {
            return Err(problem);
        }
        Ok(inventory.server)
    }

    /// What is wrong with the binding given what the server offers, if anything. What
    /// the server named is shown as untrusted text.
    pub(crate) fn binding_problem(&self, inventory: &Inventory) -> Option<String> {
        match &self.inner.lookup {
            McpLookup::Tool { tool, argument, .. } => {
                match inventory.tools.iter().find(|t| &t.name == tool) {
                    None => Some(format!("the server has no tool {tool:?}")),
                    Some(found) if !found.arguments.contains(argument) => Some(format!(
                        "tool {tool:?} has no argument {argument:?} in its input schema (it has: {})",
                        self.shown(&found.arguments.join(", "))
                    )),
                    Some(_) => None,
                }
            }
            McpLookup::Resource { template } => {
                let prefix = &template[..template.find('{').unwrap_or(template.len())];
                let offered = inventory.templates.iter().any(|t| t == template)
                    || inventory.resources.iter().any(|r| r.starts_with(prefix));
                (!offered).then(|| format!("the server offers no resource template {template:?}"))
            }
        }
    }

    /// A server's text as it may be shown: bounded, escaped, the binding's own secrets
    /// and secret patterns masked.
    fn shown(&self, text: &str) -> UntrustedText {
        UntrustedText::new(text, &self.inner.masks)
    }

    /// The server's tools, resources and resource templates (first page of each).
    pub(crate) async fn inventory(&self, deadline: Instant) -> Result<Inventory, String> {
        let session = self.session(deadline).await.map_err(|failure| {
            format!("{} ({})", failure.status(), failure.detail().unwrap_or(""))
        })?;
        let peer = session.peer();
        // Checked when the session started: a version that is not a fit label refuses
        // the session.
        let server = peer
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|s| s.version.clone()));
        let fetch = async {
            let tools = peer.list_tools(None).await.map_err(|e| e.to_string())?;
            let tools = tools
                .tools
                .iter()
                .map(|tool| ToolSummary {
                    name: tool.name.to_string(),
                    arguments: schema_properties(&tool.input_schema),
                })
                .collect();
            // A server without resources answers an error here: nothing offered.
            let resources = peer
                .list_resources(None)
                .await
                .map(|r| r.resources.iter().map(|r| r.uri.clone()).collect())
                .unwrap_or_default();
            let templates = peer
                .list_resource_templates(None)
                .await
                .map(|r| {
                    r.resource_templates
                        .iter()
                        .map(|t| t.uri_template.clone())
                        .collect()
                })
                .unwrap_or_default();
            Ok::<_, String>(Inventory {
                server,
                tools,
                resources,
                templates,
            })
        };
        match timeout_at(deadline, fetch).await {
            Err(_) => Err("TIMEOUT listing the server's tools".to_owned()),
            Ok(Err(problem)) if self.inner.credential_masks.occurs_in(&problem) => Err(format!(
                "{} ({}): the server's error listing its tools quoted the bearer token",
                Failure::CredentialReflected.status(),
                Failure::CredentialReflected.detail().unwrap_or(""),
            )),
            Ok(Err(problem)) => Err(format!(
                "listing the server's tools failed: {}",
                self.shown(&problem)
            )),
            Ok(Ok(inventory)) => Ok(inventory),
        }
    }
}

/// The property names of a JSON schema object.
fn schema_properties(schema: &Map<String, Json>) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// The connection a binding names, with values read through `read` (the token from
/// `auth_env`, the allow-listed variables). `Err` names a variable that is not set.
pub(crate) fn connection_for(
    binding: &McpBinding,
    read: impl Fn(&str) -> Option<String>,
) -> Result<McpConnection, String> {
    Ok(match &binding.transport {
        McpTransport::Http { url, auth_env } => McpConnection::Http {
            url: url.clone(),
            max_requests: DEFAULT_MAX_REQUESTS,
            secret: match auth_env {
                Some(name) => Some(Secret::new(read(name).ok_or_else(|| name.clone())?)),
                None => None,
            },
        },
        McpTransport::Stdio { command, args, env } => McpConnection::Stdio {
            command: command.clone(),
            args: args.clone(),
            // An allow-listed variable that is not set is simply not passed.
            env: env
                .iter()
                .filter_map(|name| read(name).map(|value| (name.clone(), Secret::new(value))))
                .collect(),
        },
    })
}

/// What an MCP binding points at, for messages: `mcp server https://…` or `mcp server
/// command python3`.
pub(crate) fn target(binding: &McpBinding) -> String {
    match &binding.transport {
        McpTransport::Http { url, .. } => format!("mcp server {url}"),
        McpTransport::Stdio { command, .. } => format!("mcp server command {command:?}"),
    }
}

impl McpProvider {
    /// `doctor`'s check: the session starts, and the server lists the bound tool with the
    /// argument in its input schema (or the bound resource template). `Ok` says what the
    /// server offers; the session is closed after.
    pub async fn check(&self, limit: std::time::Duration) -> Result<String, String> {
        self.start();
        let inventory = self.inventory(Instant::now() + limit).await;
        self.close();
        let inventory = inventory?;
        if let Some(problem) = self.binding_problem(&inventory) {
            return Err(problem);
        }
        let tools: Vec<String> = inventory
            .tools
            .iter()
            .map(|tool| format!("{}({})", tool.name, tool.arguments.join(", ")))
            .collect();
        let mut resources = inventory.templates.clone();
        resources.extend(inventory.resources.iter().cloned());
        let offer = format!(
            "tools [{}] and resources [{}]",
            tools.join(", "),
            resources.join(", ")
        );
        Ok(format!(
            "server {} offers {}; the binding's {} is among them",
            inventory.server.as_deref().unwrap_or("-"),
            UntrustedText::with_limit(offer.as_bytes(), &self.inner.masks, MAX_OFFER_BYTES),
            match &self.inner.lookup {
                McpLookup::Tool { tool, argument, .. } => format!("tool {tool}({argument})"),
                McpLookup::Resource { template } => format!("resource {template}"),
            }
        ))
    }
}
