//! Provider implementations: HTTP, SQLite, REST, PostgreSQL and MCP, and what they
//! share (the endpoint rule, the items they build, untrusted text). Every answer passes
//! the rules of [`crate::bounds`] and [`crate::secrets`]. Implementations are plain async code with no actor types. A
//! `ProviderActor` creates one per binding, owns its lifecycle (readiness probe, closing
//! on shutdown) and hands it out through its `ProviderGate`; each lookup runs on the
//! thread of the coordinator that was granted it.

pub(crate) mod endpoint;
pub mod http;
pub mod http1;
pub(crate) mod items;
pub mod mcp;
pub mod postgres;
pub mod rest;
pub mod sqlite;
pub mod untrusted;
pub(crate) mod wire_answer;

use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// Connection reuse of a binding's implementation: `max_idle_per_host` and
/// `idle_timeout` apply to HTTP clients, `max_size` to SQLite and PostgreSQL connection
/// pools, `connect_timeout` and `recycle` to PostgreSQL pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    pub(crate) max_idle_per_host: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) recycle: RecycleCheck,
}

/// How a pooled PostgreSQL connection is checked before it is handed out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecycleCheck {
    /// Only that the connection is not closed: no round trip.
    #[default]
    Fast,
    /// A round trip to the server (an empty query) before every reuse.
    Verified,
}

impl RecycleCheck {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RecycleCheck::Fast => "fast",
            RecycleCheck::Verified => "verified",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<RecycleCheck> {
        match text {
            "fast" => Some(RecycleCheck::Fast),
            "verified" => Some(RecycleCheck::Verified),
            _ => None,
        }
    }
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_idle_per_host: 32,
            idle_timeout: Duration::from_millis(90_000),
            max_size: 4,
            connect_timeout: Duration::from_millis(5000),
            recycle: RecycleCheck::Fast,
        }
    }
}

/// One lookup as a provider implementation sees it.
#[derive(Debug, Clone, Copy)]
pub struct LookupCall<'a> {
    /// Provider id (from the Project), sent on the wire and used in messages.
    pub provider: &'a str,
    /// Lookup key name.
    pub key: &'a str,
    /// The lookup value: validated by gating; never logged.
    pub value: &'a str,
    /// Most items the answer may hold.
    pub limit: u32,
    /// The call must be answered by then: the earlier of the provider's timeout and the
    /// turn's deadline. Past it the outcome is `TIMEOUT`.
    pub deadline: Instant,
    /// What a secret in the answer's items gives (the binding's `secrets`): every
    /// implementation passes it to [`crate::bounds::check_secrets`].
    pub secrets: crate::secrets::redact::SecretHandling,
}

/// A credential read from the environment. Its value is never printed: `Debug` and
/// `Display` show a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that sends it (the `Authorization` header) and the
    /// reflection check.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("s3cr3t-value");
        assert!(!format!("{secret:?}").contains("s3cr3t"));
        assert!(!format!("{secret}").contains("s3cr3t"));
        assert_eq!(secret.expose(), "s3cr3t-value");
    }

    /// The size of what `lookup` returns, for any provider and call.
    fn future_size<'a, P: 'a, F>(_: impl FnOnce(&'a P, &'a LookupCall<'a>) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_lookup_future_is_the_size_of_an_inline_providers_not_of_the_largest() {
        let inline = [
            future_size(http::HttpProvider::lookup),
            future_size(sqlite::SqliteProvider::lookup),
            future_size(rest::RestProvider::lookup),
        ];
        let largest_inline = inline.into_iter().max().expect("three sizes");
        // The boxed ones are larger than any inline one; were they inline, every call's
        // future would be as large as the largest of them.
        for boxed in [
            future_size(postgres::PostgresProvider::lookup),
            future_size(mcp::McpProvider::lookup),
        ] {
            assert!(boxed > largest_inline, "{boxed} vs {largest_inline}");
        }
        let lookup = future_size(Implementation::lookup);
        assert!(
            lookup <= largest_inline + 128,
            "a lookup future takes {lookup} bytes; the largest inline provider's takes {largest_inline}"
        );
    }
}

/// The implementation behind one provider binding. Cheap to clone: clones share the
/// HTTP client's connection pool or the SQLite connection pool.
#[derive(Clone)]
pub(crate) enum Implementation {
    Http(http::HttpProvider),
    Sqlite(sqlite::SqliteProvider),
    Rest(rest::RestProvider),
    Postgres(postgres::PostgresProvider),
    Mcp(mcp::McpProvider),
}

/// What a readiness probe learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeReport {
    /// The version the provider describes itself with (HTTP `describe`).
    pub(crate) version: Option<String>,
}

impl Implementation {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Implementation::Http(_) => "http",
            Implementation::Sqlite(_) => "sqlite",
            Implementation::Rest(_) => "rest",
            Implementation::Postgres(_) => "postgres",
            Implementation::Mcp(_) => "mcp",
        }
    }

    /// One lookup. A future is as large as its largest arm's, and a turn's calls are
    /// moved (joined, timed) by value, so the two lookups whose futures are several
    /// times the others' — PostgreSQL's (a pooled connection and its query) and MCP's
    /// (a session and its request) — wait in a box of their own: every other call's
    /// future stays the size of its own provider's, not theirs.
    pub(crate) async fn lookup(&self, call: &LookupCall<'_>) -> crate::outcome::Outcome {
        match self {
            Implementation::Http(provider) => provider.lookup(call).await,
            Implementation::Sqlite(provider) => provider.lookup(call).await,
            Implementation::Rest(provider) => provider.lookup(call).await,
            Implementation::Postgres(provider) => Box::pin(provider.lookup(call)).await,
            Implementation::Mcp(provider) => Box::pin(provider.lookup(call)).await,
        }
    }

    /// The readiness probe: `describe` for HTTP, a connection and a prepare for SQLite.
    /// The error is a short description with status and detail, never a value.
    pub(crate) async fn probe(&self, deadline: Instant) -> Result<ProbeReport, String> {
        match self {
            Implementation::Http(provider) => match provider.describe(deadline).await {
                Ok(described) => Ok(ProbeReport {
                    version: described.version,
                }),
                Err(failure) => Err(failure.to_string()),
            },
            Implementation::Sqlite(provider) => {
                match tokio::time::timeout_at(deadline, provider.check()).await {
                    Ok(Ok(())) => Ok(ProbeReport { version: None }),
                    Ok(Err(problem)) => Err(problem),
                    Err(_) => Err("TIMEOUT".to_owned()),
                }
            }
            Implementation::Rest(provider) => provider
                .probe(deadline)
                .await
                .map(|()| ProbeReport { version: None }),
            Implementation::Postgres(provider) => {
                match tokio::time::timeout_at(deadline, provider.check()).await {
                    Ok(Ok(())) => Ok(ProbeReport { version: None }),
                    Ok(Err(problem)) => Err(problem),
                    Err(_) => Err("TIMEOUT".to_owned()),
                }
            }
            Implementation::Mcp(provider) => provider
                .probe(deadline)
                .await
                .map(|version| ProbeReport { version }),
        }
    }

    /// Starts what the implementation runs in the background (an MCP session and its
    /// stdio child), on the current runtime: the provider actor calls it when it starts.
    pub(crate) fn start(&self) {
        if let Implementation::Mcp(provider) = self {
            provider.start();
        }
    }

    /// Releases pooled connections (ordered shutdown).
    pub(crate) fn close(&self) {
        match self {
            Implementation::Sqlite(provider) => provider.close(),
            Implementation::Postgres(provider) => provider.close(),
            Implementation::Mcp(provider) => provider.close(),
            Implementation::Http(_) | Implementation::Rest(_) => {}
        }
    }
}
