//! `ctxd provider-check --mcp-tool NAME --mcp-argument ARG URL` (or `--mcp-resource
//! TEMPLATE`): the check of an MCP server as ctxd would bind it, through the MCP provider
//! itself — the session, the bound tool or resource, a lookup of `--value` and of a value
//! no one holds, each answer through the bounds and scans of every provider answer.
//! Nothing is sent before the `https` rule passes.

use super::{Conformance, Target, Verdict, absent_value, https_rule};
use crate::config::{McpBinding, McpLookup, McpTransport};
use crate::contract::ProviderStatus;
use crate::providers::LookupCall;
use crate::providers::mcp::McpProvider;
use tokio::time::Instant;

/// The env var name the check's token travels under (never read from the environment:
/// the value is the one `--secret-env` named).
const TOKEN_SLOT: &str = "CTXD_PROVIDER_CHECK_TOKEN";

pub(super) async fn check(target: &Target, lookup: McpLookup) -> Conformance {
    let mut report = Conformance {
        url: target.url.to_string(),
        contract: "mcp",
        rules: Vec::new(),
    };
    match https_rule(&target.url) {
        Ok(detail) => report.push("https", Verdict::Pass, detail),
        Err(detail) => {
            report.push("https", Verdict::Fail, detail);
            return report;
        }
    }
    let binding = McpBinding {
        transport: McpTransport::Http {
            url: target.url.clone(),
            auth_env: target.secret.as_ref().map(|_| TOKEN_SLOT.to_owned()),
        },
        lookup,
    };
    let secret = target.secret.clone();
    let provider = match McpProvider::build(&target.provider, &binding, |_| secret.clone()) {
        Ok(provider) => provider,
        Err(name) => {
            report.push("initialize", Verdict::Fail, format!("{name} is not set"));
            return report;
        }
    };
    provider.start();
    let inventory = provider.inventory(Instant::now() + target.timeout).await;
    let inventory = match inventory {
        Ok(inventory) => {
            report.push(
                "initialize",
                Verdict::Pass,
                format!(
                    "a session initialized (server version {}); {} tools, {} resource templates",
                    inventory.server.as_deref().unwrap_or("-"),
                    inventory.tools.len(),
                    inventory.templates.len()
                ),
            );
            inventory
        }
        Err(problem) => {
            report.push("initialize", Verdict::Fail, problem);
            provider.close();
            return report;
        }
    };
    match provider.binding_problem(&inventory) {
        None => report.push(
            "bound-lookup-offered",
            Verdict::Pass,
            bound(&binding.lookup),
        ),
        Some(problem) => report.push("bound-lookup-offered", Verdict::Fail, problem),
    }

    let call = |value: &str| {
        let provider = provider.clone();
        let value = value.to_owned();
        let (key, name, limit, timeout) = (
            target.key.clone(),
            target.provider.clone(),
            target.limit,
            target.timeout,
        );
        async move {
            provider
                .lookup(&LookupCall {
                    provider: &name,
                    key: &key,
                    value: &value,
                    limit,
                    deadline: Instant::now() + timeout,
                    secrets: Default::default(),
                })
                .await
        }
    };
    let found = call(&target.value).await;
    let absent = match absent_value() {
        Ok(value) => call(&value).await,
        Err(_) => found.clone(),
    };
    provider.close();

    let shown = |outcome: &crate::outcome::Outcome| match outcome.detail() {
        Some(detail) => format!("{} ({detail})", outcome.status()),
        None => outcome.status().to_string(),
    };
    match found.status() {
        ProviderStatus::Ok => report.push(
            "lookup-answers",
            Verdict::Pass,
            format!(
                "the value found {} item(s), within every bound",
                found.items_found().len()
            ),
        ),
        ProviderStatus::NotFound => report.push(
            "lookup-answers",
            Verdict::Warn,
            "NOT_FOUND: the server holds nothing for --value; pass a value it holds",
        ),
        _ => report.push(
            "lookup-answers",
            Verdict::Fail,
            format!("the lookup answered {}", shown(&found)),
        ),
    }
    match absent.status() {
        ProviderStatus::NotFound => report.push(
            "absent-value",
            Verdict::Pass,
            "a value no one holds answers NOT_FOUND",
        ),
        ProviderStatus::Unavailable if absent.detail() == Some("TOOL_ERROR") => report.push(
            "absent-value",
            Verdict::Warn,
            "a value no one holds answers an error (isError): ctxd reports UNAVAILABLE, and it counts toward the circuit; return no content instead",
        ),
        ProviderStatus::Ok => report.push(
            "absent-value",
            Verdict::Warn,
            "a value no one holds still answers items",
        ),
        _ => report.push(
            "absent-value",
            Verdict::Fail,
            format!("a value no one holds answered {}", shown(&absent)),
        ),
    }
    let reflected = [&found, &absent]
        .iter()
        .any(|outcome| outcome.detail() == Some("CREDENTIAL_REFLECTED"));
    match (&target.secret, reflected) {
        (None, _) => report.push(
            "no-credential-reflection",
            Verdict::Skip,
            "no --secret-env: nothing to look for",
        ),
        (Some(_), true) => report.push(
            "no-credential-reflection",
            Verdict::Fail,
            "an answer echoed the bearer token",
        ),
        (Some(_), false) => report.push(
            "no-credential-reflection",
            Verdict::Pass,
            "no answer echoed the bearer token",
        ),
    }
    report
}

fn bound(lookup: &McpLookup) -> String {
    match lookup {
        McpLookup::Tool { tool, argument, .. } => {
            format!("tool {tool:?} is listed with {argument:?} in its input schema")
        }
        McpLookup::Resource { template } => format!("resource template {template:?} is listed"),
    }
}
