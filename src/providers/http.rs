//! The `context-provider.v1` HTTP provider: one `POST` per lookup or readiness probe to
//! the endpoint exactly as bound, with every answer bounded, scanned and mapped to an
//! explicit provider status. Plain async code: the provider actor owns the connections
//! (the hyper-based [`Http1Client`], which keeps each calling thread's connections
//! apart); lookups run on the calling coordinator's thread, over connections that
//! thread opened.
//!
//! Order of checks on an answer, so that the strongest signal wins and nothing is read
//! or parsed that need not be:
//!
//! 1. the whole exchange runs under the call's deadline (`TIMEOUT` / `DEADLINE`);
//! 2. the bound secret in any response header value or the reason phrase, whatever the
//!    status (`SECRET_DETECTED` / `CREDENTIAL_REFLECTED`);
//! 3. the status code ([`classify_status`]); a non-2xx body is drained (bounded) only to
//!    look for the secret and to let the connection be reused;
//! 4. a `Content-Length` over [`MAX_RESPONSE_BYTES`], refused before reading;
//! 5. the body, streamed and cut off as soon as it exceeds the limit;
//! 6. the secret anywhere in the body bytes, before parsing;
//! 7. parsing straight into the budgeted item builder ([`super::wire_answer`]: the item
//!    count, each item's size and the answer's values bounded as it parses), the
//!    contract, then [`bounds::check_secrets`] (which refuses or redacts secrets in the
//!    items as the binding says); an answer with no items is `NOT_FOUND`, as a 404 is
//!    (one meaning of "no record" for every provider).
//!
//! Neither the lookup value nor the secret ever appears in an outcome, an error or a
//! log line: failures carry only a status and a fixed detail.

use super::PoolSettings;
use super::endpoint::{self, Violation};
use super::http1::{Answer as Received, BodyError, ConnectionLimits, Http1Client, Http1SetupError};
use super::untrusted::{self, Masks};
use super::wire_answer::{self, WireProblem};
use super::{LookupCall, Secret};
use crate::bounds::MAX_RESPONSE_BYTES;
use crate::contract::{CONTRACT, DescribeRequest, DescribeResponse, LookupRequest, Source};
use crate::outcome::{Failure, Outcome};
use crate::secrets::redact::SecretHandling;
use http::header::{HeaderMap, HeaderValue};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;
use tokio::time::{Instant, timeout_at};
use url::Url;

/// Why an HTTP provider could not be set up. Messages never include the secret.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    #[error(
        "http:// is only allowed to a loopback host (localhost, 127.0.0.0/8, [::1]), not {host:?}: use https://"
    )]
    InsecureEndpoint { host: String },
    #[error("scheme {0:?} is not supported: use https:// (http:// only to a loopback host)")]
    UnsupportedScheme(String),
    #[error("the endpoint has no host")]
    NoHost,
    #[error("the endpoint carries a user name or password; credentials belong in the secret")]
    CredentialsInEndpoint,
    #[error("the endpoint has a query string or fragment; request data never goes in the URL")]
    QueryInEndpoint,
    #[error("the bound secret is empty")]
    EmptySecret,
    #[error("the bound secret cannot be sent in an HTTP header (control characters or non-ASCII)")]
    SecretNotAHeaderValue,
    #[error("cannot set up the provider's connections")]
    Connections(#[source] Http1SetupError),
}

/// Why a readiness probe did not pass: the endpoint answered 404, or the probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescribeError {
    NotFound,
    Failed(Failure),
}

impl fmt::Display for DescribeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescribeError::NotFound => f.write_str("NOT_FOUND"),
            DescribeError::Failed(failure) => failure.fmt(f),
        }
    }
}

/// What a successful readiness probe learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// The version the provider reports for itself, if any.
    pub version: Option<String>,
}

/// A `context-provider.v1` endpoint. Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct HttpProvider {
    client: Http1Client,
    endpoint: Url,
    secret: Option<BoundSecret>,
}

/// The bound secret's reflection check, built once.
#[derive(Clone)]
pub(crate) struct BoundSecret {
    /// A literal matcher for the secret (memchr-backed), for the reflection check on
    /// headers and bodies up to 1 MiB. Its `Debug` would print the secret: this type
    /// deliberately has no `Debug`.
    reflection: regex::bytes::Regex,
}

impl BoundSecret {
    pub(crate) fn new(secret: &Secret) -> Result<Self, HttpSetupError> {
        let value = secret.expose();
        if value.is_empty() {
            return Err(HttpSetupError::EmptySecret);
        }
        HeaderValue::from_str(&bearer(value)).map_err(|_| HttpSetupError::SecretNotAHeaderValue)?;
        // An escaped literal always compiles; the error arm only guards against a size limit.
        let reflection = regex::bytes::Regex::new(&regex::escape(value))
            .map_err(|_| HttpSetupError::SecretNotAHeaderValue)?;
        Ok(BoundSecret { reflection })
    }

    pub(crate) fn is_in(&self, bytes: &[u8]) -> bool {
        self.reflection.is_match(bytes)
    }

    /// Every value of every header (and, for good measure, the names).
    pub(crate) fn is_in_headers(&self, headers: &HeaderMap) -> bool {
        headers
            .iter()
            .any(|(name, value)| self.is_in(value.as_bytes()) || self.is_in(name.as_ref()))
    }
}

impl fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProvider")
            .field("endpoint", &self.endpoint.as_str())
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl HttpProvider {
    /// Sets up the client ([`Http1Client`]: no redirects, no proxy, no retries but a
    /// request whose reused connection had closed, rustls with the platform's roots):
    /// idle connections as `pool` says, connect timeout `timeout`. Refuses an endpoint
    /// that is not `https://` unless its host is loopback, and (like bindings) one with
    /// credentials, a query or a fragment — defence in depth, bindings already check.
    pub fn new(
        endpoint: Url,
        secret: Option<Secret>,
        pool: &PoolSettings,
        timeout: Duration,
    ) -> Result<HttpProvider, HttpSetupError> {
        Self::trusting(endpoint, secret, pool, timeout, Vec::new())
    }

    /// [`HttpProvider::new`], trusting `extra_roots` beside the platform's roots.
    pub(crate) fn trusting(
        endpoint: Url,
        secret: Option<Secret>,
        pool: &PoolSettings,
        timeout: Duration,
        extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<HttpProvider, HttpSetupError> {
        check_endpoint(&endpoint)?;
        let bound = secret.as_ref().map(BoundSecret::new).transpose()?;
        let limits = ConnectionLimits {
            max_idle: pool.max_idle_per_host,
            idle_timeout: pool.idle_timeout,
            connect_timeout: timeout,
        };
        let token = secret.as_ref().map(Secret::expose);
        let client = contract_client(&endpoint, USER_AGENT, token, limits, extra_roots)
            .map_err(HttpSetupError::Connections)?;
        Ok(HttpProvider {
            client,
            endpoint,
            secret: bound,
        })
    }

    /// One lookup. Never panics; every failure is an outcome with a typed failure.
    /// The whole exchange (connect, headers, body) must finish by `call.deadline`.
    pub async fn lookup(&self, call: &LookupCall<'_>) -> Outcome {
        let request = LookupRequest::new(call.provider, call.key, call.value, call.limit);
        let outcome = match crate::json::to_vec(&request) {
            Ok(body) => match self.exchange_by(call.deadline, body).await {
                Err(failure) => failed(failure),
                Ok(Answer::NotFound) => Outcome::not_found(LIVE),
                Ok(Answer::Body(bytes)) => parse_lookup(&bytes, call.limit, call.secrets),
            },
            Err(_) => failed(Failure::RequestUnencodable),
        };
        tracing::debug!(
            provider = %call.provider,
            status = %outcome.status(),
            detail = outcome.detail().unwrap_or(""),
            "http provider call finished"
        );
        outcome
    }

    /// The readiness probe: `{"contract":"context-provider.v1","capability":"describe"}`.
    /// `Ok` only for a 2xx answer with the right contract and the `lookup` capability.
    pub async fn describe(&self, deadline: Instant) -> Result<Described, DescribeError> {
        let body = serde_json::to_vec(&DescribeRequest::default())
            .map_err(|_| DescribeError::Failed(Failure::RequestUnencodable))?;
        match self.exchange_by(deadline, body).await {
            Err(failure) => Err(DescribeError::Failed(failure)),
            Ok(Answer::NotFound) => Err(DescribeError::NotFound),
            Ok(Answer::Body(bytes)) => parse_describe(&bytes).map_err(DescribeError::Failed),
        }
    }

    /// [`HttpProvider::exchange`] bounded by `deadline`. A deadline already past sends
    /// nothing: no answer could arrive in time.
    async fn exchange_by(&self, deadline: Instant, body: Vec<u8>) -> Result<Answer, Failure> {
        if Instant::now() >= deadline {
            return Err(Failure::Deadline);
        }
        timeout_at(deadline, self.exchange(body))
            .await
            .map_err(|_elapsed| Failure::Deadline)?
    }

    /// `POST`s `body` and reads a 2xx answer's body within the limits. Everything up to
    /// parsing: transport, reflection, status and size.
    async fn exchange(&self, body: Vec<u8>) -> Result<Answer, Failure> {
        let answer = self.client.post(body).await?;
        match read_answer(answer, self.secret.as_ref(), |_, _| {}).await? {
            Read::Body(bytes) => Ok(Answer::Body(bytes)),
            Read::Refused(code) => match classify_status(code) {
                Some(StatusRefusal::NotFound) => Ok(Answer::NotFound),
                Some(StatusRefusal::Failed(failure)) => Err(failure),
                None => Err(Failure::Malformed),
            },
        }
    }
}

/// What an answer gave under the rules every provider that speaks HTTP keeps.
pub(crate) enum Read {
    /// A 2xx body, within the size limit and free of the secret.
    Body(Vec<u8>),
    /// A status that is not 2xx (its bounded body drained and found free of the secret).
    Refused(u16),
}

/// Reads an answer in the order the module describes: the secret in any header or the
/// reason phrase, the status (`on_refusal` sees a non-2xx code and its headers before
/// the body is drained), a declared length over [`MAX_RESPONSE_BYTES`], the body
/// streamed and cut at the limit, the secret in the body.
pub(crate) async fn read_answer(
    answer: Received<'_>,
    secret: Option<&BoundSecret>,
    on_refusal: impl FnOnce(u16, &HeaderMap),
) -> Result<Read, Failure> {
    if secret.is_some_and(|s| {
        s.is_in_headers(answer.headers()) || answer.reason().is_some_and(|r| s.is_in(r))
    }) {
        return Err(Failure::CredentialReflected);
    }
    let code = answer.code();
    if !(200..=299).contains(&code) {
        on_refusal(code, answer.headers());
        // Drain a bounded error body: the secret may be echoed there (a 401 saying
        // which token it refused), and a fully read body lets the connection be
        // reused. Reading problems change nothing: the status already decided.
        if answer
            .content_length()
            .is_none_or(|length| length <= MAX_RESPONSE_BYTES as u64)
        {
            let echoed = match answer.body(MAX_RESPONSE_BYTES).await {
                Ok(bytes) | Err(BodyError::TooLarge(bytes)) => {
                    secret.is_some_and(|s| s.is_in(&bytes))
                }
                Err(BodyError::Failed(_)) => false,
            };
            if echoed {
                return Err(Failure::CredentialReflected);
            }
        }
        return Ok(Read::Refused(code));
    }
    if answer
        .content_length()
        .is_some_and(|length| length > MAX_RESPONSE_BYTES as u64)
    {
        return Err(Failure::ResponseTooLarge);
    }
    let bytes = match answer.body(MAX_RESPONSE_BYTES).await {
        Ok(bytes) => bytes,
        // The part read is still checked: a reflected credential is the stronger
        // finding.
        Err(BodyError::TooLarge(part)) => {
            return Err(if secret.is_some_and(|s| s.is_in(&part)) {
                Failure::CredentialReflected
            } else {
                Failure::ResponseTooLarge
            });
        }
        Err(BodyError::Failed(failure)) => return Err(failure),
    };
    if secret.is_some_and(|s| s.is_in(&bytes)) {
        return Err(Failure::CredentialReflected);
    }
    Ok(Read::Body(bytes))
}

/// A client that speaks the contract to `endpoint`: `POST`s of JSON, with `user_agent`
/// and, with a `token`, its bearer `Authorization` on every request (the providers' and
/// `ctxd provider-check`'s).
pub(crate) fn contract_client(
    endpoint: &Url,
    user_agent: &str,
    token: Option<&str>,
    limits: ConnectionLimits,
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
) -> Result<Http1Client, Http1SetupError> {
    let authorization = token.map(bearer);
    let mut headers = vec![
        ("user-agent", user_agent),
        ("content-type", "application/json"),
        ("accept", "application/json"),
    ];
    if let Some(authorization) = &authorization {
        headers.push(("authorization", authorization));
    }
    Http1Client::new(endpoint, &headers, limits, extra_roots)
}

/// What an exchange produced, before parsing.
enum Answer {
    /// 404: no record.
    NotFound,
    /// A 2xx body, within the size limit and free of the secret.
    Body(Vec<u8>),
}

const LIVE: Source = Source::Live;

/// What ctxd calls itself in the `User-Agent` of its provider requests.
const USER_AGENT: &str = concat!("ctxd/", env!("CARGO_PKG_VERSION"));

/// The `Authorization` value of a bearer secret.
fn bearer(secret: &str) -> String {
    format!("Bearer {secret}")
}

fn failed(failure: Failure) -> Outcome {
    Outcome::failed(failure, LIVE)
}

/// What a non-2xx status means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StatusRefusal {
    /// 404: no record.
    NotFound,
    Failed(Failure),
}

/// Maps a response status to what it gives, or `None` for 2xx (parse the body).
///
/// 404 is "no record"; 401/403 mean the bound secret was refused; every 3xx is a
/// redirect, never followed; any other status is the provider being unavailable, with
/// the code as detail (`HTTP_503`).
pub(crate) fn classify_status(code: u16) -> Option<StatusRefusal> {
    let failure = match code {
        200..=299 => return None,
        404 => return Some(StatusRefusal::NotFound),
        401 | 403 => Failure::Unauthorized,
        300..=399 => Failure::RedirectRefused,
        100..=999 => Failure::HttpStatus(code),
        // Not an HTTP status at all (the HTTP stack never produces one).
        _ => Failure::Malformed,
    };
    Some(StatusRefusal::Failed(failure))
}

/// Just enough of any answer to tell a foreign contract from a malformed body.
#[derive(Deserialize)]
struct Envelope {
    contract: String,
}

/// Parses a failed body again, loosely, to report `WRONG_CONTRACT` for an answer of
/// another contract whatever its shape; otherwise `MALFORMED`.
fn shape_failure(bytes: &[u8]) -> Failure {
    match serde_json::from_slice::<Envelope>(bytes) {
        Ok(envelope) if envelope.contract != CONTRACT => Failure::WrongContract,
        _ => Failure::Malformed,
    }
}

/// A provider-reported label that traces keep (version, revision) passes the label rule
/// every provider type applies ([`untrusted::check_label`]): bounded, printable, no
/// secret. The bound credential is not looked for here: the whole body already was.
fn scan_label(label: Option<&str>) -> Result<(), Failure> {
    match label.map(|label| untrusted::check_label(label, &Masks::none())) {
        Some(Err(problem)) => Err(problem.failure()),
        _ => Ok(()),
    }
}

pub(crate) fn parse_lookup(bytes: &[u8], limit: u32, secrets: SecretHandling) -> Outcome {
    let answer = match wire_answer::parse(bytes, limit) {
        Ok(answer) => answer,
        // Another contract's answer is that, whatever else is wrong with it.
        Err(WireProblem::Bounds(violation)) => {
            return failed(match shape_failure(bytes) {
                Failure::WrongContract => Failure::WrongContract,
                _ => Failure::from(&violation),
            });
        }
        Err(WireProblem::Malformed) => return failed(shape_failure(bytes)),
    };
    if answer.contract != CONTRACT {
        return failed(Failure::WrongContract);
    }
    let (items, redactions) = match answer.items.finish(secrets) {
        Ok(finished) => finished,
        Err(violation) => return failed(Failure::from(&violation)),
    };
    if let Err(failure) =
        scan_label(answer.version.as_deref()).and_then(|()| scan_label(answer.revision.as_deref()))
    {
        return failed(failure);
    }
    let mut outcome =
        Outcome::answered(items, answer.currentness, LIVE).with_redactions(redactions);
    outcome.version = answer.version;
    outcome.revision = answer.revision;
    outcome
}

pub(crate) fn parse_describe(bytes: &[u8]) -> Result<Described, Failure> {
    let response: DescribeResponse =
        serde_json::from_slice(bytes).map_err(|_| shape_failure(bytes))?;
    if response.contract != CONTRACT {
        return Err(Failure::WrongContract);
    }
    if !response.capabilities.iter().any(|c| c == "lookup") {
        return Err(Failure::NoLookupCapability);
    }
    scan_label(response.version.as_deref())?;
    Ok(Described {
        version: response.version,
    })
}

/// The endpoint rule ([`endpoint`]), telling the most fundamental violation.
pub(crate) fn check_endpoint(url: &Url) -> Result<(), HttpSetupError> {
    match endpoint::violations(url).into_iter().min() {
        None => Ok(()),
        Some(Violation::NoHost) => Err(HttpSetupError::NoHost),
        Some(Violation::Insecure { host }) => Err(HttpSetupError::InsecureEndpoint { host }),
        Some(Violation::UnsupportedScheme(scheme)) => {
            Err(HttpSetupError::UnsupportedScheme(scheme))
        }
        Some(Violation::Credentials) => Err(HttpSetupError::CredentialsInEndpoint),
        Some(Violation::Query | Violation::Fragment) => Err(HttpSetupError::QueryInEndpoint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Currentness, Item, ProviderStatus};
    use serde_json::json;

    /// A status refusal as the status and detail it reports.
    fn reported(refusal: StatusRefusal) -> (ProviderStatus, Option<String>) {
        match refusal {
            StatusRefusal::NotFound => (ProviderStatus::NotFound, None),
            StatusRefusal::Failed(failure) => {
                (failure.status(), failure.detail().map(str::to_owned))
            }
        }
    }

    #[test]
    fn status_codes_map_to_outcomes() {
        use ProviderStatus::*;
        type Expected = Option<(ProviderStatus, Option<&'static str>)>;
        let cases: &[(u16, Expected)] = &[
            (200, None),
            (201, None),
            (204, None),
            (299, None),
            (404, Some((NotFound, None))),
            (401, Some((Unavailable, Some("UNAUTHORIZED")))),
            (403, Some((Unavailable, Some("UNAUTHORIZED")))),
            (300, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (301, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (302, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (304, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (307, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (308, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (399, Some((InvalidResponse, Some("REDIRECT_REFUSED")))),
            (400, Some((Unavailable, Some("HTTP_400")))),
            (405, Some((Unavailable, Some("HTTP_405")))),
            (429, Some((Unavailable, Some("HTTP_429")))),
            (499, Some((Unavailable, Some("HTTP_499")))),
            (500, Some((Unavailable, Some("HTTP_500")))),
            (502, Some((Unavailable, Some("HTTP_502")))),
            (503, Some((Unavailable, Some("HTTP_503")))),
            (504, Some((Unavailable, Some("HTTP_504")))),
            (599, Some((Unavailable, Some("HTTP_599")))),
            (100, Some((Unavailable, Some("HTTP_100")))),
            (101, Some((Unavailable, Some("HTTP_101")))),
            (600, Some((Unavailable, Some("HTTP_600")))),
            (999, Some((Unavailable, Some("HTTP_999")))),
            (0, Some((InvalidResponse, Some("MALFORMED")))),
            (99, Some((InvalidResponse, Some("MALFORMED")))),
            (1000, Some((InvalidResponse, Some("MALFORMED")))),
            (u16::MAX, Some((InvalidResponse, Some("MALFORMED")))),
        ];
        for (code, expected) in cases {
            let expected = expected.map(|(status, detail)| (status, detail.map(str::to_owned)));
            assert_eq!(
                classify_status(*code).map(reported),
                expected,
                "status {code}"
            );
        }
        for code in 100..=999u16 {
            if let Some((_, Some(detail))) = classify_status(code).map(reported)
                && detail.starts_with("HTTP_")
            {
                assert_eq!(detail, format!("HTTP_{code}"));
            }
        }
    }

    #[test]
    fn endpoints_must_be_https_unless_loopback() {
        let accepted = [
            "https://crm.internal/context",
            "https://10.0.0.1:8443/v1/context",
            "http://localhost:8080/context",
            "http://LOCALHOST/context",
            "http://127.0.0.1:9000/context",
            "http://127.1.2.3/context",
            "http://[::1]:9000/context",
        ];
        for text in accepted {
            let url = Url::parse(text).unwrap();
            check_endpoint(&url).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
        let refused: &[(&str, &str)] = &[
            ("http://crm.internal/context", "only allowed to a loopback"),
            ("http://10.0.0.1/context", "only allowed to a loopback"),
            ("http://localhost.evil.com/context", "only allowed"),
            ("http://api.localhost/context", "only allowed"),
            ("http://[::2]/context", "only allowed"),
            ("ftp://crm.internal/context", "not supported"),
            ("file:///etc/passwd", "no host"),
            (
                "https://user:pw@crm.internal/context",
                "user name or password",
            ),
            ("https://crm.internal/context?k=v", "query string"),
            ("https://crm.internal/context#x", "query string or fragment"),
        ];
        for (text, needle) in refused {
            let url = Url::parse(text).unwrap();
            let error = check_endpoint(&url).unwrap_err().to_string();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn setup_refuses_unusable_secrets_without_printing_them() {
        let url = Url::parse("https://crm.internal/context").unwrap();
        let pool = PoolSettings::default();
        let timeout = Duration::from_millis(500);
        let empty = HttpProvider::new(url.clone(), Some(Secret::new("")), &pool, timeout);
        assert!(matches!(empty, Err(HttpSetupError::EmptySecret)));
        let bad = HttpProvider::new(url.clone(), Some(Secret::new("a\nb-zzz")), &pool, timeout);
        let error = bad.unwrap_err();
        assert!(matches!(error, HttpSetupError::SecretNotAHeaderValue));
        assert!(!format!("{error} {error:?}").contains("zzz"));
        let provider =
            HttpProvider::new(url, Some(Secret::new("tok-zzz.1")), &pool, timeout).unwrap();
        assert!(!format!("{provider:?}").contains("zzz"));
    }

    #[test]
    fn reflection_matches_the_literal_secret() {
        let secret = BoundSecret::new(&Secret::new("a.b*c+")).unwrap();
        assert!(secret.is_in(b"xx a.b*c+ yy"));
        assert!(!secret.is_in(b"aXb*c+ and abbbc"));
    }

    fn lookup_body(value: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn lookup_bodies_parse_to_outcomes() {
        let ok = parse_lookup(
            &lookup_body(json!({
                "contract": CONTRACT, "version": "5.0.1", "revision": "crm-r9",
                "currentness": "STALE",
                "items": [{"id": "CUST-1042", "content": "x", "updatedAt": "2026-10-08"}]
            })),
            2,
            SecretHandling::Refuse,
        );
        assert_eq!(ok.status(), ProviderStatus::Ok);
        assert_eq!(ok.currentness(), Some(Currentness::Stale));
        assert_eq!(ok.version.as_deref(), Some("5.0.1"));
        assert_eq!(ok.revision.as_deref(), Some("crm-r9"));
        assert_eq!(ok.source, Source::Live);
        assert_eq!(
            ok.items_found(),
            [Item {
                id: "CUST-1042".into(),
                title: None,
                content: "x".into(),
                metadata: Default::default(),
                updated_at: Some("2026-10-08".into()),
            }]
        );

        // No items: no record, as a 404 says it; the version the answer reports is kept.
        let empty = parse_lookup(
            &lookup_body(json!({"contract": CONTRACT, "items": [], "version": "5.0.1"})),
            2,
            SecretHandling::Refuse,
        );
        assert_eq!(
            (
                empty.status(),
                empty.items_found().len(),
                empty.currentness(),
                empty.version.as_deref()
            ),
            (
                ProviderStatus::NotFound,
                0,
                Some(Currentness::Unknown),
                Some("5.0.1")
            )
        );

        let github = format!("{}{}", "ghp_", "a".repeat(36));
        let cases: &[(Vec<u8>, ProviderStatus, &str)] = &[
            (
                b"not json".to_vec(),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (b"[]".to_vec(), ProviderStatus::InvalidResponse, "MALFORMED"),
            (
                lookup_body(json!({"contract": CONTRACT, "items": {}})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"contract": CONTRACT})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"items": []})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"contract": 1, "items": []})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"contract": CONTRACT, "currentness": "FRESH", "items": []})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"contract": CONTRACT, "items": [{"id": "a", "extra": 1}]})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"contract": CONTRACT, "items": [{"id": ""}]})),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
            (
                lookup_body(json!({"contract": "context-provider.v2", "items": []})),
                ProviderStatus::Incompatible,
                "WRONG_CONTRACT",
            ),
            (
                lookup_body(json!({"contract": "context-provider.v2", "records": 7})),
                ProviderStatus::Incompatible,
                "WRONG_CONTRACT",
            ),
            (
                lookup_body(
                    json!({"contract": CONTRACT, "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}),
                ),
                ProviderStatus::LimitExceeded,
                "TOO_MANY_ITEMS",
            ),
            (
                lookup_body(
                    json!({"contract": CONTRACT, "items": [{"id": "a", "content": "x".repeat(70_000)}]}),
                ),
                ProviderStatus::LimitExceeded,
                "ITEM_TOO_LARGE",
            ),
            (
                lookup_body(
                    json!({"contract": CONTRACT, "items": [{"id": "a", "content": github}]}),
                ),
                ProviderStatus::SecretDetected,
                "github_token",
            ),
            (
                lookup_body(json!({"contract": CONTRACT, "revision": github, "items": []})),
                ProviderStatus::SecretDetected,
                "github_token",
            ),
        ];
        for (body, status, detail) in cases {
            let outcome = parse_lookup(body, 2, SecretHandling::Refuse);
            assert_eq!(
                (outcome.status(), outcome.detail()),
                (*status, Some(*detail)),
                "{}",
                String::from_utf8_lossy(body)
            );
            assert!(outcome.items_found().is_empty());
        }
    }

    #[test]
    fn labels_over_their_bound_or_unprintable_are_refused() {
        let long = "v".repeat(300 * 1024);
        for label in [long.as_str(), "5.0\nINFO forged", "5.0\u{1b}[2J"] {
            for field in ["version", "revision"] {
                let outcome = parse_lookup(
                    &lookup_body(json!({"contract": CONTRACT, field: label, "items": []})),
                    2,
                    SecretHandling::Refuse,
                );
                assert_eq!(
                    (outcome.status(), outcome.detail()),
                    (ProviderStatus::InvalidResponse, Some("INVALID_LABEL")),
                    "{field}"
                );
                assert_eq!(outcome.version, None);
            }
            let described = parse_describe(
                &serde_json::to_vec(&json!({
                    "contract": CONTRACT, "version": label, "capabilities": ["lookup"]
                }))
                .unwrap(),
            );
            assert_eq!(described, Err(Failure::InvalidLabel));
        }
        let longest = "v".repeat(untrusted::MAX_LABEL_BYTES);
        let kept = parse_lookup(
            &lookup_body(json!({"contract": CONTRACT, "version": longest, "items": []})),
            2,
            SecretHandling::Refuse,
        );
        assert_eq!(kept.version.as_deref(), Some(longest.as_str()));
    }

    #[test]
    fn describe_bodies_parse_to_results() {
        let ok = parse_describe(&lookup_body(json!({
            "contract": CONTRACT, "version": "5.0.1", "capabilities": ["describe", "lookup"]
        })));
        assert_eq!(
            ok,
            Ok(Described {
                version: Some("5.0.1".into())
            })
        );
        let cases: &[(serde_json::Value, ProviderStatus, &str)] = &[
            (
                json!({"contract": "context-provider.v0", "capabilities": ["lookup"]}),
                ProviderStatus::Incompatible,
                "WRONG_CONTRACT",
            ),
            (
                json!({"contract": CONTRACT, "capabilities": ["describe"]}),
                ProviderStatus::Incompatible,
                "NO_LOOKUP_CAPABILITY",
            ),
            (
                json!({"contract": CONTRACT}),
                ProviderStatus::Incompatible,
                "NO_LOOKUP_CAPABILITY",
            ),
            (
                json!({"contract": CONTRACT, "capabilities": "lookup"}),
                ProviderStatus::InvalidResponse,
                "MALFORMED",
            ),
        ];
        for (body, status, detail) in cases {
            let outcome = parse_describe(&lookup_body(body.clone())).unwrap_err();
            assert_eq!(
                (outcome.status(), outcome.detail()),
                (*status, Some(*detail)),
                "{body}"
            );
        }
    }
}
