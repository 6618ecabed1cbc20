//! `doctor`'s checks of a `rest` provider: the endpoint rule, the auth secret's presence,
//! the warning that `query` auth puts the secret in the URL, and the readiness probe. No
//! URL is shown with its query.

use super::{Report, target};
use crate::config::{EnvVars, ProviderBinding, ProviderKind};
use tokio::time::Instant;

/// A rest binding's endpoint rule, its auth secret's presence and, for `query` auth, the
/// warning that the secret travels in the URL; `false` when the provider cannot
/// authenticate, so nothing is sent.
pub(super) fn check_binding(
    report: &mut Report,
    subject: &str,
    spec: &crate::config::RestSpec,
    env: &EnvVars,
) -> bool {
    let endpoint = &spec.endpoint;
    if endpoint.scheme() == "https" {
        report.ok(subject, format!("endpoint {endpoint} uses https"));
    } else {
        report.ok(
            subject,
            format!("endpoint {endpoint} is plain http to a loopback host, which is allowed only for loopback (https everywhere else)"),
        );
    }
    let auth = &spec.auth;
    if let crate::config::RestAuth::Query { param, .. } = auth {
        report.warn(
            subject,
            format!(
                "auth type \"query\" sends the secret in the URL (parameter {param:?}): ctxd never logs or shows that URL, but the API's own access logs and any proxy in between may record it; prefer a header method if the API offers one"
            ),
        );
    }
    let Some(name) = auth.secret_env() else {
        report.ok(subject, "auth type \"none\": no secret is sent");
        return true;
    };
    let key = format!("auth ({})", auth.type_name());
    super::check_secret_set(report, subject, env, &key, name, "not probed")
}

/// What the REST probe's success meant, for its `ok` line.
fn reachable_means(provider: &ProviderBinding) -> &'static str {
    match &provider.kind {
        ProviderKind::Rest(spec) if spec.probe_path.is_some() => "GET of probe_path answered 2xx",
        _ => "GET of the endpoint was answered (no 401/403, 429 or 5xx)",
    }
}

/// The REST readiness probe (a `GET` of `probe_path`, or of the endpoint) within the
/// binding's timeout. The URL is never shown with its query.
pub(super) async fn check_probe(
    report: &mut Report,
    subject: &str,
    provider: &ProviderBinding,
    rest: &crate::providers::rest::RestProvider,
) {
    let timeout_ms = provider.timeout.as_millis();
    let started = Instant::now();
    let probed = match &provider.kind {
        ProviderKind::Rest(spec) => crate::providers::rest::probe_target(spec),
        _ => target(provider),
    };
    match rest.probe(started + provider.timeout).await {
        Ok(()) => report.ok(
            subject,
            format!(
                "{probed} is reachable: {} ({} ms, timeout {timeout_ms} ms)",
                reachable_means(provider),
                started.elapsed().as_millis()
            ),
        ),
        Err(problem) => report.fail(subject, format!("{probed}: GET failed: {problem}")),
    }
}
