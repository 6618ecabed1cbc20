//! The `rest` provider: any JSON API as a provider. One request per lookup, built from
//! the binding ([`request`]), sent with the same exchange rules as the HTTP provider —
//! the call's deadline, no redirects, no proxy, the 1 MiB streamed cap, the bound
//! secret looked for in every answer header and body (`CREDENTIAL_REFLECTED`) — and the
//! answer's JSON mapped to items ([`mapping`]), each then bounded (64 KiB) and scanned
//! for secrets by [`bounds::check_secrets`].
//!
//! Status mapping: 2xx → map the body; 404 → `NOT_FOUND`; 401/403 →
//! `UNAVAILABLE`/`UNAUTHORIZED`; 429 → `UNAVAILABLE`/`RATE_LIMITED`, and no call to the
//! API until its `Retry-After` has passed ([`backoff`]; calls meanwhile fail fast with the
//! same status without contacting it, and the breaker does not count them); 3xx →
//! `REDIRECT_REFUSED`; other 4xx → `INVALID_REQUEST`/`HTTP_4xx`; anything else →
//! `UNAVAILABLE`/`HTTP_5xx`. A 2xx body that is not JSON is `INVALID_RESPONSE`/`NOT_JSON`;
//! one the mapping finds no list in is `NO_ITEM_LIST`; an item that does not map is
//! `MAPPING_FAILED`, with the binding's path and the item index in the log.
//!
//! The request URL is never logged, traced or shown: with `query` auth it holds the
//! secret, and the value is in it.

mod backoff;
mod mapping;
mod request;

use super::PoolSettings;
use super::http::{self, BoundSecret, HttpSetupError, Read, read_answer};
use super::http1::{ConnectionLimits, Http1Client};
use super::items::{self, ParseProblem};
use super::untrusted::{Masks, UntrustedText};
use super::{LookupCall, Secret};
use crate::bounds::BoundsViolation;
use crate::bounds::MAX_ITEMS;
use crate::config::{RestAuth, RestMethod, RestSpec};
use crate::contract::{Currentness, Source};
use crate::outcome::{Failure, Outcome};
use ::http::Method;
use ::http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use backoff::Backoff;
use base64::Engine as _;
use bytes::Bytes;
use mapping::MappingError;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::{Instant, timeout_at};

const LIVE: Source = Source::Live;

/// How the bound secret is sent.
enum SentSecret {
    None,
    /// A header carrying the secret (bearer, api_key, header, basic): one of the
    /// client's fixed headers.
    Header(HeaderName, String),
    /// A query parameter: the URL then holds the secret.
    Query {
        param: String,
        secret: Secret,
    },
}

/// A JSON API bound as a provider. Cloning is cheap and shares the connection pool and
/// the back-off state.
#[derive(Clone)]
pub struct RestProvider {
    client: Http1Client,
    spec: Arc<RestSpec>,
    /// The `query` auth parameter, when the secret goes in the URL.
    query_secret: Option<Arc<(String, Secret)>>,
    reflection: Option<BoundSecret>,
    backoff: Backoff,
}

impl fmt::Debug for RestProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestProvider")
            .field("endpoint", &self.spec.endpoint.as_str())
            .field("auth", &self.spec.auth.type_name())
            .finish_non_exhaustive()
    }
}

/// What an exchange produced, before parsing.
enum Answer {
    NotFound,
    Body(Vec<u8>),
}

impl RestProvider {
    /// Builds the client as the HTTP provider does ([`Http1Client`]: rustls, no
    /// redirects, no proxy, the binding's pool limits, connect timeout `timeout`), with
    /// the binding's headers and a header secret fixed at set-up. `secret` is the
    /// value of the env var the binding's `auth` names; required exactly when it names
    /// one.
    pub fn new(
        spec: &RestSpec,
        secret: Option<Secret>,
        pool: &PoolSettings,
        timeout: Duration,
    ) -> Result<RestProvider, HttpSetupError> {
        http::check_endpoint(&spec.endpoint)?;
        let reflection = secret.as_ref().map(BoundSecret::new).transpose()?;
        let sent = match (&spec.auth, secret) {
            (RestAuth::None, _) => SentSecret::None,
            (_, None) => return Err(HttpSetupError::EmptySecret),
            (RestAuth::Bearer { .. }, Some(secret)) => SentSecret::Header(
                ::http::header::AUTHORIZATION,
                sensitive(&format!("Bearer {}", secret.expose()))?,
            ),
            (
                RestAuth::ApiKey { header: name, .. } | RestAuth::Header { name, .. },
                Some(secret),
            ) => {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| HttpSetupError::SecretNotAHeaderValue)?;
                SentSecret::Header(name, sensitive(secret.expose())?)
            }
            (RestAuth::Basic { username, .. }, Some(password)) => {
                let pair = format!("{username}:{}", password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                SentSecret::Header(
                    ::http::header::AUTHORIZATION,
                    sensitive(&format!("Basic {encoded}"))?,
                )
            }
            (RestAuth::Query { param, .. }, Some(secret)) => SentSecret::Query {
                param: param.clone(),
                secret,
            },
        };
        let mut headers: Vec<(&str, &str)> = Vec::with_capacity(spec.headers.len() + 3);
        headers.push(("user-agent", USER_AGENT));
        if !spec
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("accept"))
        {
            headers.push(("accept", "application/json"));
        }
        for (name, value) in &spec.headers {
            HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HttpSetupError::SecretNotAHeaderValue)?;
            HeaderValue::from_str(value).map_err(|_| HttpSetupError::SecretNotAHeaderValue)?;
            headers.push((name, value));
        }
        if let SentSecret::Header(name, value) = &sent {
            headers.push((name.as_str(), value));
        }
        let limits = ConnectionLimits {
            max_idle: pool.max_idle_per_host,
            idle_timeout: pool.idle_timeout,
            connect_timeout: timeout,
        };
        let client = Http1Client::new(&spec.endpoint, &headers, limits, Vec::new())
            .map_err(HttpSetupError::Connections)?;
        let query_secret = match sent {
            SentSecret::Query { param, secret } => Some(Arc::new((param, secret))),
            SentSecret::None | SentSecret::Header(..) => None,
        };
        Ok(RestProvider {
            client,
            spec: Arc::new(spec.clone()),
            query_secret,
            reflection,
            backoff: Backoff::default(),
        })
    }
    /// One lookup. Never panics; every failure is an outcome with a typed failure.
    pub async fn lookup(&self, call: &LookupCall<'_>) -> Outcome {
        let (outcome, _reason) = self.lookup_explained(call).await;
        tracing::debug!(
            provider = %call.provider,
            status = %outcome.status(),
            detail = outcome.detail().unwrap_or(""),
            items_dropped = outcome.items_dropped,
            "rest provider call finished"
        );
        outcome
    }

    /// [`RestProvider::lookup`] with, when the answer did not map, why: the binding's
    /// path and the item index (never a value from the answer), for `provider-check`.
    pub(crate) async fn lookup_explained(
        &self,
        call: &LookupCall<'_>,
    ) -> (Outcome, Option<String>) {
        if self.backoff.is_waiting(Instant::now()) {
            return (failed(Failure::BackingOff), None);
        }
        let limit = call.limit.min(MAX_ITEMS as u32);
        let built = match request::build(&self.spec, call.value, limit, self.query_secret()) {
            Ok(built) => built,
            Err(failure) => return (failed(failure), None),
        };
        let body = match built.body.as_ref().map(serde_json::to_vec).transpose() {
            Ok(body) => body,
            Err(_) => return (failed(Failure::RequestUnencodable), None),
        };
        let method = match self.spec.method {
            RestMethod::Get => Method::GET,
            RestMethod::Post => Method::POST,
        };
        match self
            .exchange_by(call.deadline, method, &built.url, body.map(Bytes::from))
            .await
        {
            Err(failure) => (failed(failure), None),
            Ok(Answer::NotFound) => (Outcome::not_found(LIVE), None),
            Ok(Answer::Body(bytes)) => self.parse(call, &bytes, limit),
        }
    }

    /// The readiness probe: a `GET` of `probe_path` below the endpoint, with the
    /// binding's auth, ready on a 2xx. Without a `probe_path`, a `GET` of the endpoint
    /// itself, ready on any answer that shows the API is up and takes the credential
    /// (an API root often answers 404 or 405): everything but a transport failure, a
    /// timeout, 401/403, 429 and 5xx. Honours a pending `Retry-After` like a lookup.
    /// The error is a status and detail, never the URL.
    pub async fn probe(&self, deadline: Instant) -> Result<(), String> {
        if self.backoff.is_waiting(Instant::now()) {
            return Err(Failure::BackingOff.to_string());
        }
        let segments = self.spec.probe_path.as_deref().unwrap_or_default();
        let mut url = request::with_segments(&self.spec.endpoint, segments, None)
            .map_err(|failure| failure.to_string())?;
        if let Some((param, secret)) = self.query_secret() {
            url.query_pairs_mut().append_pair(param, secret);
        }
        let strict = self.spec.probe_path.is_some();
        match self.exchange_by(deadline, Method::GET, &url, None).await {
            Ok(Answer::Body(_)) => Ok(()),
            Ok(Answer::NotFound) if !strict => Ok(()),
            Err(Failure::RequestRefused(_) | Failure::RedirectRefused) if !strict => Ok(()),
            Ok(Answer::NotFound) => Err("NOT_FOUND (HTTP 404 from the probe path)".to_owned()),
            Err(failure) => Err(failure.to_string()),
        }
    }

    fn query_secret(&self) -> Option<(&str, &str)> {
        self.query_secret
            .as_deref()
            .map(|(param, secret)| (param.as_str(), secret.expose()))
    }

    async fn exchange_by(
        &self,
        deadline: Instant,
        method: Method,
        url: &url::Url,
        body: Option<Bytes>,
    ) -> Result<Answer, Failure> {
        if Instant::now() >= deadline {
            return Err(Failure::Deadline);
        }
        timeout_at(deadline, self.exchange(method, url, body))
            .await
            .map_err(|_elapsed| Failure::Deadline)?
    }

    /// Sends the request and reads a 2xx body within the limits: transport, reflection,
    /// status and size, in the HTTP provider's order. A 429 starts the back-off its
    /// `Retry-After` asks for.
    async fn exchange(
        &self,
        method: Method,
        url: &url::Url,
        body: Option<Bytes>,
    ) -> Result<Answer, Failure> {
        let answer = self.client.request(method, url, body).await?;
        let read = read_answer(answer, self.reflection.as_ref(), |code, headers| {
            if code == 429 {
                let header = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok());
                let wait = backoff::retry_after(header, SystemTime::now());
                self.backoff.wait(Instant::now(), wait);
            }
        })
        .await?;
        match read {
            Read::Body(bytes) => Ok(Answer::Body(bytes)),
            Read::Refused(code) => match classify_status(code) {
                None => Ok(Answer::NotFound),
                Some(failure) => Err(failure),
            },
        }
    }

    fn parse(&self, call: &LookupCall<'_>, bytes: &[u8], limit: u32) -> (Outcome, Option<String>) {
        let json = match items::parse_bounded(bytes, items::MAX_VALUES) {
            Ok(json) => json,
            Err(ParseProblem::NotJson) => return (failed(Failure::NotJson), None),
            Err(ParseProblem::TooManyValues) => {
                let violation = BoundsViolation::TooManyValues {
                    limit: items::MAX_VALUES,
                };
                return (
                    failed(Failure::from(&violation)),
                    Some(violation.to_string()),
                );
            }
        };
        let mapped = match mapping::map_items(&self.spec.mapping, &json, limit as usize) {
            Ok(mapped) => mapped,
            Err(MappingError::Bounds(violation)) => {
                return (
                    failed(Failure::from(&violation)),
                    Some(violation.to_string()),
                );
            }
            Err(error) => {
                let reason = UntrustedText::new(&error.to_string(), &Masks::none()).into_string();
                tracing::warn!(
                    provider = %call.provider,
                    reason = %reason,
                    "rest answer does not map to items"
                );
                let failure = match error {
                    MappingError::NoItemList { .. } => Failure::NoItemList,
                    MappingError::Field { .. } | MappingError::Bounds(_) => Failure::MappingFailed,
                };
                return (failed(failure), Some(reason));
            }
        };
        let dropped = mapped.dropped;
        let (items, redactions) = match mapped.items.finish(call.secrets) {
            Ok(finished) => finished,
            Err(violation) => {
                return (
                    failed(Failure::from(&violation)),
                    Some(violation.to_string()),
                );
            }
        };
        if dropped > 0 {
            tracing::debug!(
                provider = %call.provider,
                kept = items.len(),
                dropped,
                "rest answer had more items than the limit"
            );
        }
        let outcome = Outcome::answered(items, Currentness::Current, LIVE)
            .with_redactions(redactions)
            .with_items_dropped(u32::try_from(dropped).unwrap_or(u32::MAX));
        (outcome, None)
    }
}

/// What the readiness probe requests, for messages: the endpoint and probe path, never
/// a query (with `query` auth it would hold the secret).
pub(crate) fn probe_target(spec: &RestSpec) -> String {
    let segments = spec.probe_path.as_deref().unwrap_or_default();
    let url = request::with_segments(&spec.endpoint, segments, None)
        .unwrap_or_else(|_| spec.endpoint.clone());
    format!("endpoint {}", url.as_str())
}

/// `text` as a header value, checked here so that a secret that cannot be sent is
/// told as such.
fn sensitive(text: &str) -> Result<String, HttpSetupError> {
    HeaderValue::from_str(text).map_err(|_| HttpSetupError::SecretNotAHeaderValue)?;
    Ok(text.to_owned())
}

/// What ctxd calls itself in the `User-Agent` of its requests.
const USER_AGENT: &str = concat!("ctxd/", env!("CARGO_PKG_VERSION"));

fn failed(failure: Failure) -> Outcome {
    Outcome::failed(failure, LIVE)
}

/// What a non-2xx status gives: `None` for 404 (no record), else the failure.
pub(crate) fn classify_status(code: u16) -> Option<Failure> {
    Some(match code {
        404 => return None,
        401 | 403 => Failure::Unauthorized,
        429 => Failure::RateLimited,
        300..=399 => Failure::RedirectRefused,
        400..=499 => Failure::RequestRefused(code),
        100..=999 => Failure::HttpStatus(code),
        _ => Failure::Malformed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ProviderStatus;

    #[test]
    fn the_breaker_counts_a_429_but_not_the_calls_held_back_after_it() {
        use crate::resilience::breaker::{CallResult, classify};
        let rate_limited = Outcome::failed(Failure::RateLimited, LIVE);
        assert_eq!(classify(&rate_limited), CallResult::Failure);
        let held = Outcome::failed(Failure::BackingOff, LIVE);
        assert_eq!(classify(&held), CallResult::Neutral);
        assert_eq!(
            (held.status(), held.detail()),
            (rate_limited.status(), rate_limited.detail())
        );
        let refused = Outcome::failed(Failure::RequestRefused(422), LIVE);
        assert_eq!(classify(&refused), CallResult::Neutral);
        let unmappable = Outcome::failed(Failure::MappingFailed, LIVE);
        assert_eq!(classify(&unmappable), CallResult::Success);
    }

    #[test]
    fn status_codes_map_to_failures() {
        use ProviderStatus::*;
        let cases: &[(u16, Option<(ProviderStatus, &str)>)] = &[
            (404, None),
            (401, Some((Unavailable, "UNAUTHORIZED"))),
            (403, Some((Unavailable, "UNAUTHORIZED"))),
            (429, Some((Unavailable, "RATE_LIMITED"))),
            (301, Some((InvalidResponse, "REDIRECT_REFUSED"))),
            (400, Some((InvalidRequest, "HTTP_400"))),
            (410, Some((InvalidRequest, "HTTP_410"))),
            (422, Some((InvalidRequest, "HTTP_422"))),
            (500, Some((Unavailable, "HTTP_500"))),
            (503, Some((Unavailable, "HTTP_503"))),
        ];
        for (code, expected) in cases {
            let got = classify_status(*code).map(|f| (f.status(), f.detail().unwrap().to_owned()));
            assert_eq!(
                got,
                expected.map(|(s, d)| (s, d.to_owned())),
                "status {code}"
            );
        }
    }
}
