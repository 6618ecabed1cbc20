//! `ctxd provider-check --binding FILE PROVIDER`: the same report for a `rest` provider
//! of a binding file, through the provider ctxd itself would run (request template,
//! auth, bounds, mapping). Rules: `secret` (the auth env var is set), `reachable` (the
//! probe: a `GET` of `probe_path`, or of the endpoint), `lookup` (`--value` maps to
//! items, with the reason when it does not: the binding's path and the item index),
//! `limit` (`--limit` 1 gives at most one item) and `not-found` (a fresh value no record
//! can have gives `NOT_FOUND`; items there mean the value does not filter the request).
//! Neither the secret nor a URL with its query is ever printed.

use super::{Conformance, Judgement, ProviderCheckArgs, Verdict, absent_value};
use crate::config::{Binding, EnvVars, ProviderKind};
use crate::contract::ProviderStatus;
use crate::providers::rest::RestProvider;
use crate::providers::{LookupCall, PoolSettings, Secret};
use anyhow::{Context as _, bail};
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// What the report says it checked.
const CHECKED: &str = "a rest binding";

/// Loads `binding`, finds `args.url` (the provider id) there and runs the rules.
pub(super) async fn check(
    binding: &Path,
    args: &ProviderCheckArgs,
    env: &EnvVars,
) -> anyhow::Result<Conformance> {
    if args.secret_env.is_some() {
        bail!("--secret-env: not used with --binding: the binding's `auth` names the env var");
    }
    let loaded = Binding::load(binding).map_err(|errors| anyhow::anyhow!("{errors}"))?;
    let id = &args.url;
    let provider = loaded
        .providers
        .get(id)
        .with_context(|| format!("provider {id:?} is not in {}", binding.display()))?;
    let ProviderKind::Rest(spec) = &provider.kind else {
        bail!(
            "provider {id:?} is of type {}: --binding checks rest providers (check an http provider by its URL)",
            provider.kind.type_name()
        );
    };
    if crate::gate::check_value(&args.value, None).is_some() {
        bail!(
            "--value: does not match the base grammar {}",
            crate::project::BASE_VALUE_GRAMMAR
        );
    }
    let mut report = Conformance {
        url: format!(
            "provider {id} in {} ({})",
            binding.display(),
            crate::providers::rest::probe_target(spec)
        ),
        contract: CHECKED,
        rules: Vec::new(),
    };
    let secret = match spec.auth.secret_env() {
        None => {
            report.push(
                "secret",
                Verdict::Skip,
                "auth type \"none\": no secret is sent",
            );
            None
        }
        Some(name) => match env.get(name) {
            None | Some("") => {
                report.push(
                    "secret",
                    Verdict::Fail,
                    format!("environment variable {name:?} is not set or empty: nothing is sent"),
                );
                return Ok(report);
            }
            Some(value) => {
                report.push(
                    "secret",
                    Verdict::Pass,
                    format!(
                        "environment variable {name:?} is set ({})",
                        spec.auth.type_name()
                    ),
                );
                Some(Secret::new(value))
            }
        },
    };
    let timeout = Duration::from_millis(args.timeout_ms);
    let rest = match RestProvider::new(spec, secret, &PoolSettings::default(), timeout) {
        Ok(rest) => rest,
        Err(error) => {
            report.push(
                "secret",
                Verdict::Fail,
                format!("cannot set up the client: {error}"),
            );
            return Ok(report);
        }
    };
    match rest.probe(Instant::now() + timeout).await {
        Ok(()) => report.push(
            "reachable",
            Verdict::Pass,
            if spec.probe_path.is_some() {
                "GET of probe_path answered 2xx"
            } else {
                "GET of the endpoint was answered (no 401/403, 429 or 5xx)"
            },
        ),
        Err(problem) => report.push(
            "reachable",
            Verdict::Fail,
            format!("the probe GET failed: {problem}"),
        ),
    }

    let lookup = |value: String, limit: u32| {
        let rest = rest.clone();
        let provider = id.clone();
        let key = args.key.clone();
        async move {
            let call = LookupCall {
                provider: &provider,
                key: &key,
                value: &value,
                limit,
                deadline: Instant::now() + timeout,
                secrets: Default::default(),
            };
            rest.lookup_explained(&call).await
        }
    };
    let (found, reason) = lookup(args.value.clone(), args.limit).await;
    let judgement = match found.status() {
        ProviderStatus::Ok => Judgement::Pass(format!(
            "--value mapped to {} item(s){}",
            found.items_found().len(),
            match found.items_dropped {
                0 => String::new(),
                n => format!("; {n} more past --limit {} were dropped", args.limit),
            }
        )),
        ProviderStatus::NotFound => Judgement::Warn(
            "no record for --value (404 or an empty list): pass a value the API holds to check the mapping".to_owned(),
        ),
        _ => Judgement::Fail(format!(
            "{}{}",
            found.failure().map(ToString::to_string).unwrap_or_default(),
            reason.map(|r| format!(": {r}")).unwrap_or_default()
        )),
    };
    report.judgement("lookup", judgement);

    let (limited, _) = lookup(args.value.clone(), 1).await;
    report.judgement(
        "limit",
        match (limited.status(), limited.items_found().len()) {
            (ProviderStatus::Ok, n) if n <= 1 => Judgement::Pass(format!(
                "limit 1 gave {n} item ({} dropped)",
                limited.items_dropped
            )),
            (ProviderStatus::Ok, n) => Judgement::Fail(format!("limit 1 gave {n} items")),
            (status, _) => Judgement::Skip(format!("the lookup gave {status}")),
        },
    );

    let (absent, _) = lookup(absent_value()?, args.limit).await;
    report.judgement(
        "not-found",
        match absent.status() {
            ProviderStatus::NotFound => {
                Judgement::Pass("a value no record can have gave NOT_FOUND".to_owned())
            }
            ProviderStatus::Ok => Judgement::Warn(format!(
                "a value no record can have gave {} item(s): the value may not filter the request (check the slot in path/params/body)",
                absent.items_found().len()
            )),
            _ => Judgement::Fail(format!(
                "a value no record can have gave {}",
                absent.failure().map(ToString::to_string).unwrap_or_default()
            )),
        },
    );
    Ok(report)
}
