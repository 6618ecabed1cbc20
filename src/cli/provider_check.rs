//! `ctxd provider-check URL`: a conformance check for provider authors. It speaks the
//! `context-provider.v1` wire to one endpoint and reports each rule of the contract as
//! `PASS`, `WARN` (met, but read by ctxd in a way that bites: a lookup answer without
//! `currentness`), `FAIL` or `SKIP` with a detail; exit 1 if any rule failed.
//!
//! It uses the providers' HTTP client ([`Http1Client`]) rather than `HttpProvider`,
//! because it must see what ctxd only classifies: raw statuses, header names, bodies.
//! So it has ctxd's stance: redirects never followed, no proxy, no retries, every
//! exchange bounded by `--timeout-ms`, bodies read up to 1 MiB. Nothing is
//! sent before the `https` rule passes, so a plain-http URL to a non-loopback host is
//! never contacted.
//!
//! Exchanges, in order: `describe`, a lookup of `--value` with `--limit`, the same lookup
//! with limit 1, and a lookup of a fresh random value that no provider can hold
//! (`ctxd-check-<16 hex>`). The rules judge those answers; `no-redirects` and
//! `no-credential-reflection` look at all of them. The bound secret is never printed:
//! where it was found is reported by exchange and header name.

use crate::bounds::{self, MAX_ITEMS, MAX_RESPONSE_BYTES};
use crate::config::EnvVars;
use crate::contract::{CONTRACT, DescribeRequest, DescribeResponse, LookupRequest, LookupResponse};
use crate::outcome::Failure;
use crate::providers::endpoint::{self, Violation};
use crate::providers::http::contract_client;
use crate::providers::http1::{BodyError, ConnectionLimits, Http1Client};
use crate::secrets;
use crate::validation::{ID_RULE, is_valid_id};
use anyhow::{Context as _, bail};
use clap::Args;
use http::header::{HeaderMap, HeaderValue};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;
use url::Url;

mod rest;

/// Longest provider-reported label (contract, version, capability) shown in a detail.
const MAX_SHOWN_CHARS: usize = 64;

#[derive(Debug, Clone, Args)]
pub(crate) struct ProviderCheckArgs {
    /// The provider endpoint: https://…, or http:// to a loopback host; with
    /// `--binding`, the id of a rest provider in that binding file
    #[arg(value_name = "URL|PROVIDER")]
    pub(crate) url: String,
    /// Check a `rest` provider of this binding file (PROVIDER is its id) through the
    /// provider ctxd runs: secret, probe, lookup and mapping, limit, not-found
    #[arg(long, value_name = "FILE")]
    pub(crate) binding: Option<std::path::PathBuf>,
    /// Environment variable holding the bearer secret to send; answers are then checked
    /// for reflecting it
    #[arg(long, value_name = "VAR")]
    pub(crate) secret_env: Option<String>,
    /// A lookup value the provider holds a record for (base grammar
    /// `^[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}$`)
    #[arg(long, default_value = "CUST-1042")]
    pub(crate) value: String,
    /// The lookup key name sent in the body
    #[arg(long, default_value = "customerId")]
    pub(crate) key: String,
    /// The provider id sent in the body
    #[arg(long, default_value = "customer-data")]
    pub(crate) provider: String,
    /// The `limit` of the first lookup (1..=100)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) limit: u32,
    /// Deadline of each exchange, in milliseconds (50..=10000, as in bindings)
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(50..=10_000))]
    pub(crate) timeout_ms: u64,
    /// `human`: one `PASS|WARN|FAIL|SKIP rule: detail` line per rule; `json`: the rules
    /// and their counts as one object
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub(crate) format: Format,
    /// Check an MCP server (streamable HTTP at URL) instead: the tool a lookup calls
    #[arg(
        long,
        value_name = "NAME",
        requires = "mcp_argument",
        conflicts_with = "mcp_resource"
    )]
    pub(crate) mcp_tool: Option<String>,
    /// With --mcp-tool: the tool argument that receives the lookup value
    #[arg(long, value_name = "NAME", requires = "mcp_tool")]
    pub(crate) mcp_argument: Option<String>,
    /// Check an MCP server instead: the resource URI template a lookup reads, with one
    /// {slot} for the value
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) mcp_resource: Option<String>,
}

mod mcp;

pub(crate) use super::HumanOrJson as Format;

/// How a rule ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Verdict {
    Pass,
    /// Meets the contract, but ctxd will read the answer in a way the author may not
    /// expect; does not fail the check.
    Warn,
    Fail,
    /// Could not be judged (no secret bound, nothing answered); does not fail the check.
    Skip,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// One rule's result: `PASS rule: detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RuleResult {
    pub(crate) rule: &'static str,
    pub(crate) verdict: Verdict,
    pub(crate) detail: String,
}

/// Every rule checked, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Conformance {
    pub(crate) url: String,
    pub(crate) contract: &'static str,
    pub(crate) rules: Vec<RuleResult>,
}

impl Conformance {
    fn push(&mut self, rule: &'static str, verdict: Verdict, detail: impl Into<String>) {
        self.rules.push(RuleResult {
            rule,
            verdict,
            detail: detail.into(),
        });
    }

    fn judged(&mut self, rule: &'static str, judgement: Result<String, String>) {
        match judgement {
            Ok(detail) => self.push(rule, Verdict::Pass, detail),
            Err(detail) => self.push(rule, Verdict::Fail, detail),
        }
    }

    fn judgement(&mut self, rule: &'static str, judgement: Judgement) {
        match judgement {
            Judgement::Pass(detail) => self.push(rule, Verdict::Pass, detail),
            Judgement::Warn(detail) => self.push(rule, Verdict::Warn, detail),
            Judgement::Fail(detail) => self.push(rule, Verdict::Fail, detail),
            Judgement::Skip(detail) => self.push(rule, Verdict::Skip, detail),
        }
    }

    pub(crate) fn count(&self, verdict: Verdict) -> usize {
        self.rules.iter().filter(|r| r.verdict == verdict).count()
    }

    pub(crate) fn passed(&self) -> bool {
        self.count(Verdict::Fail) == 0
    }

    /// `provider-check: 7 passed, 0 failed, 1 skipped`; `, 1 warned` after `passed` only
    /// when a rule warned.
    pub(crate) fn summary(&self) -> String {
        let warned = match self.count(Verdict::Warn) {
            0 => String::new(),
            n => format!(", {n} warned"),
        };
        format!(
            "provider-check: {} passed{warned}, {} failed, {} skipped",
            self.count(Verdict::Pass),
            self.count(Verdict::Fail),
            self.count(Verdict::Skip)
        )
    }

    fn human(&self) -> String {
        let mut out = format!("checking {} against {}\n", self.url, self.contract);
        for rule in &self.rules {
            let _ = writeln!(
                out,
                "{} {}: {}",
                rule.verdict.as_str(),
                rule.rule,
                rule.detail
            );
        }
        let _ = writeln!(out, "{}", self.summary());
        out
    }

    fn json(&self) -> Value {
        serde_json::json!({
            "url": self.url,
            "contract": self.contract,
            "passed": self.passed(),
            "counts": {
                "passed": self.count(Verdict::Pass),
                "warned": self.count(Verdict::Warn),
                "failed": self.count(Verdict::Fail),
                "skipped": self.count(Verdict::Skip),
            },
            "rules": self.rules,
        })
    }
}

/// The checked arguments.
struct Target {
    url: Url,
    /// The bearer secret: sent as `Authorization`, looked for in answers, never printed.
    secret: Option<String>,
    value: String,
    key: String,
    provider: String,
    limit: u32,
    timeout: Duration,
}

pub(crate) fn run(args: &ProviderCheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let conformance = match (&args.binding, mcp_lookup(args)?) {
        (Some(binding), _) => {
            runtime.block_on(rest::check(binding, args, &EnvVars::from_process()))?
        }
        (None, Some(lookup)) => {
            let target = target(args, &EnvVars::from_process())?;
            runtime.block_on(mcp::check(&target, lookup))
        }
        (None, None) => {
            let target = target(args, &EnvVars::from_process())?;
            runtime.block_on(check(&target))?
        }
    };
    match args.format {
        Format::Human => super::print(&conformance.human())?,
        Format::Json => super::print_json(&conformance.json())?,
    }
    Ok(if conformance.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A `postgres://` or `postgresql://` URL, or a `key=value` connection string.
fn is_postgres_dsn(text: &str) -> bool {
    let lower = text.trim().to_ascii_lowercase();
    lower.starts_with("postgres://")
        || lower.starts_with("postgresql://")
        || (!lower.contains("://")
            && ["host=", "dbname=", "user=", "password="]
                .iter()
                .any(|key| lower.split_whitespace().any(|word| word.starts_with(key))))
}

/// The MCP lookup the arguments describe, if the check is of an MCP server.
fn mcp_lookup(args: &ProviderCheckArgs) -> anyhow::Result<Option<crate::config::McpLookup>> {
    use crate::config::McpLookup;
    Ok(
        match (&args.mcp_tool, &args.mcp_argument, &args.mcp_resource) {
            (Some(tool), Some(argument), _) => Some(McpLookup::Tool {
                tool: tool.clone(),
                argument: argument.clone(),
                fixed: serde_json::Map::new(),
            }),
            (_, _, Some(template)) => {
                if let Some(problem) = crate::config::mcp_template_problem(template) {
                    bail!("--mcp-resource: {problem}");
                }
                Some(McpLookup::Resource {
                    template: template.clone(),
                })
            }
            _ => None,
        },
    )
}

/// Checks the arguments; an error names the argument and never shows the secret or the
/// value.
fn target(args: &ProviderCheckArgs, env: &EnvVars) -> anyhow::Result<Target> {
    if is_postgres_dsn(&args.url) {
        bail!(
            "URL: a PostgreSQL connection string, not a context-provider.v1 endpoint (not shown: it may carry a password). A postgres provider is checked by `ctxd doctor`: it connects with the binding's dsn_env, prepares and dry-runs the query read-only, and reports the server version, TLS and whether the role can write"
        );
    }
    let url = Url::parse(&args.url).with_context(|| format!("URL {:?} is not a URL", args.url))?;
    let violations = endpoint::violations(&url);
    if violations.contains(&Violation::Credentials) {
        bail!("URL: carries a user name or password: pass the credential with --secret-env");
    }
    if violations
        .iter()
        .any(|v| matches!(v, Violation::Query | Violation::Fragment))
    {
        bail!(
            "URL: has a query string or fragment: ctxd refuses them in a binding, request data travels only in the body"
        );
    }
    if crate::gate::check_value(&args.value, None).is_some() {
        bail!(
            "--value: does not match the base grammar {}",
            crate::project::BASE_VALUE_GRAMMAR
        );
    }
    if args.key.is_empty() {
        bail!("--key: must not be empty");
    }
    if !is_valid_id(&args.provider) {
        bail!("--provider: {ID_RULE}");
    }
    let secret = match &args.secret_env {
        None => None,
        Some(name) => match env.get(name) {
            None => bail!("--secret-env: environment variable {name:?} is not set"),
            Some("") => bail!("--secret-env: environment variable {name:?} is empty"),
            Some(value) => Some(value.to_owned()),
        },
    };
    Ok(Target {
        url,
        secret,
        value: args.value.clone(),
        key: args.key.clone(),
        provider: args.provider.clone(),
        limit: args.limit,
        timeout: Duration::from_millis(args.timeout_ms),
    })
}

/// Runs the rules against the endpoint. Errors only when the client cannot be built.
async fn check(target: &Target) -> anyhow::Result<Conformance> {
    let mut report = Conformance {
        url: target.url.to_string(),
        contract: CONTRACT,
        rules: Vec::new(),
    };
    match https_rule(&target.url) {
        Ok(detail) => report.push("https", Verdict::Pass, detail),
        Err(detail) => {
            report.push("https", Verdict::Fail, detail);
            return Ok(report);
        }
    }

    let client = Client::new(target)?;
    let describe = client
        .exchange("describe", serde_json::to_vec(&DescribeRequest::default())?)
        .await;
    let lookup_body = |value: &str, limit: u32| {
        serde_json::to_vec(&LookupRequest::new(
            &target.provider,
            &target.key,
            value,
            limit,
        ))
    };
    let lookup = client
        .exchange("lookup", lookup_body(&target.value, target.limit)?)
        .await;
    let limited = client
        .exchange("lookup with limit 1", lookup_body(&target.value, 1)?)
        .await;
    let absent_value = absent_value()?;
    let absent = client
        .exchange(
            "not-found lookup",
            lookup_body(&absent_value, target.limit)?,
        )
        .await;

    report.judged("describe", describe_rule(&describe));
    let first = lookup_rule(&lookup, target.limit);
    let first_items = first.as_ref().ok().map(|(count, _)| *count);
    match first {
        Ok((_, detail)) if currentness_missing(&lookup) => report.push(
            "lookup",
            Verdict::Warn,
            format!(
                "{detail}; ctxd reads an answer without currentness as UNKNOWN, so a layer with \"currentness\": \"required\" is UNKNOWN (NOT_CURRENT) and blocks the turn if required: send \"currentness\": \"CURRENT\", \"STALE\" or \"UNKNOWN\" beside items"
            ),
        ),
        first => report.judged("lookup", first.map(|(_, detail)| detail)),
    }
    report.judgement("limit-honoured", limit_rule(&limited, &lookup, first_items));
    report.judgement("not-found", not_found_rule(&absent, &absent_value));

    let exchanges = [&describe, &lookup, &limited, &absent];
    report.judgement("no-redirects", redirect_rule(&exchanges));
    report.judgement(
        "no-credential-reflection",
        reflection_rule(&exchanges, target.secret.as_deref()),
    );
    report.push(
        "value-in-body-only",
        Verdict::Pass,
        format!(
            "every request was POST {} with the same URL and no query; the lookup value travelled only in the JSON body (ctxd never puts request data in the URL)",
            target.url
        ),
    );
    Ok(report)
}

/// A rule that may not be judgeable.
enum Judgement {
    Pass(String),
    /// Meets the contract as ctxd reads it, in a way the author may not expect.
    Warn(String),
    Fail(String),
    Skip(String),
}

/// `ctxd-check-<16 hex>`: in the base grammar, and no real record's id.
fn absent_value() -> anyhow::Result<String> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(format!("ctxd-check-{}", hex::encode(random)))
}

/// `https://`, or `http://` to a loopback host, by the endpoint rule ctxd holds bindings
/// to (credentials, query and fragment are refused before, in [`target`]).
fn https_rule(url: &Url) -> Result<String, String> {
    let violations = endpoint::violations(url);
    if violations.contains(&Violation::NoHost) {
        return Err("the URL has no host".to_owned());
    }
    let host = url.host_str().unwrap_or_default();
    for violation in violations {
        match violation {
            Violation::Insecure { host } => {
                return Err(format!(
                    "http:// to {host}, which is not loopback (localhost, 127.0.0.0/8, [::1]): ctxd refuses it, use https://; no request was sent"
                ));
            }
            Violation::UnsupportedScheme(other) => {
                return Err(format!(
                    "scheme {other:?} is not supported: use https:// (http:// only to a loopback host); no request was sent"
                ));
            }
            Violation::NoHost | Violation::Credentials | Violation::Query | Violation::Fragment => {
            }
        }
    }
    Ok(if url.scheme() == "https" {
        "the URL is https".to_owned()
    } else {
        format!(
            "plain http to the loopback host {host}: allowed only for loopback (https everywhere else)"
        )
    })
}

/// The raw client: ctxd's stance, but every answer is kept whole for the rules.
struct Client {
    http: Http1Client,
    timeout: Duration,
}

/// One request and what came back.
struct Exchange {
    /// `describe`, `lookup`, … — for details.
    label: &'static str,
    /// The answer, or why there was none (no URL, no secret in the text).
    answer: Result<Answer, String>,
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    /// At most [`MAX_RESPONSE_BYTES`].
    body: Vec<u8>,
    /// The body was larger than [`MAX_RESPONSE_BYTES`]; only the start was read.
    too_large: bool,
}

/// What ctxd-provider-check calls itself in the `User-Agent` of its requests.
const USER_AGENT: &str = concat!("ctxd-provider-check/", env!("CARGO_PKG_VERSION"));

impl Client {
    fn new(target: &Target) -> anyhow::Result<Client> {
        if let Some(secret) = &target.secret
            && HeaderValue::from_str(&format!("Bearer {secret}")).is_err()
        {
            bail!(
                "--secret-env: the secret cannot be sent in an HTTP header (control characters or non-ASCII)"
            );
        }
        let limits = ConnectionLimits {
            max_idle: 1,
            idle_timeout: Duration::from_secs(90),
            connect_timeout: target.timeout,
        };
        let token = target.secret.as_deref();
        let http = contract_client(&target.url, USER_AGENT, token, limits, Vec::new())
            .context("cannot set up the HTTP client")?;
        Ok(Client {
            http,
            timeout: target.timeout,
        })
    }

    /// `POST`s `body` and reads the whole answer, whatever its status, within the
    /// timeout and the size limit.
    async fn exchange(&self, label: &'static str, body: Vec<u8>) -> Exchange {
        let answer = match tokio::time::timeout(self.timeout, self.send(body)).await {
            Ok(answer) => answer,
            Err(_) => Err(self.no_answer_in_time()),
        };
        Exchange { label, answer }
    }

    async fn send(&self, body: Vec<u8>) -> Result<Answer, String> {
        let answer = self.http.post(body).await.map_err(|f| self.transport(f))?;
        let status = answer.code();
        let headers = answer.headers().clone();
        let declared_too_large = answer
            .content_length()
            .is_some_and(|length| length > MAX_RESPONSE_BYTES as u64);
        let (body, too_large) = if declared_too_large {
            (Vec::new(), true)
        } else {
            match answer.body(MAX_RESPONSE_BYTES).await {
                Ok(body) => (body, false),
                Err(BodyError::TooLarge(part)) => (part, true),
                Err(BodyError::Failed(failure)) => return Err(self.transport(failure)),
            }
        };
        Ok(Answer {
            status,
            headers,
            body,
            too_large,
        })
    }

    fn no_answer_in_time(&self) -> String {
        format!("no complete answer within {} ms", self.timeout.as_millis())
    }

    /// A transport failure in words (never the URL).
    fn transport(&self, failure: Failure) -> String {
        match failure {
            Failure::ConnectFailed => {
                "connect failed (refused, unreachable, DNS or TLS)".to_owned()
            }
            Failure::Deadline => self.no_answer_in_time(),
            Failure::Malformed => {
                "the answer is not HTTP/1.1 (or its framing is broken)".to_owned()
            }
            Failure::ResponseTooLarge => format!(
                "the answer's head is over {} KiB",
                crate::providers::http1::MAX_HEAD_BYTES / 1024
            ),
            _ => "the connection closed or was reset before a complete answer".to_owned(),
        }
    }
}

/// A provider-reported label, shortened and quoted so it cannot garble a line.
fn shown(text: &str) -> String {
    let short: String = text.chars().take(MAX_SHOWN_CHARS).collect();
    if short.len() < text.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
}

/// Why a status is not the expected one, with what to do about it.
fn status_problem(label: &str, status: u16, expected: u16) -> String {
    match status {
        300..=399 => format!(
            "{label} answered {status}, a redirect: ctxd never follows redirects, serve the contract at this URL"
        ),
        401 | 403 => format!(
            "{label} answered {status}: the credential was refused (bind it with --secret-env)"
        ),
        404 if expected == 200 => format!(
            "{label} answered 404 (no record): pass a --value that has a record so the answer can be checked"
        ),
        _ => format!("{label} answered HTTP {status}, expected {expected}"),
    }
}

/// The answer's JSON object with the right `contract`, or why not.
fn contract_object(label: &str, answer: &Answer) -> Result<serde_json::Map<String, Value>, String> {
    if answer.too_large {
        return Err(format!(
            "the {label} answer is larger than {MAX_RESPONSE_BYTES} bytes (1 MiB)"
        ));
    }
    let value: Value = serde_json::from_slice(&answer.body)
        .map_err(|_| format!("the {label} answer is not JSON"))?;
    let Value::Object(object) = value else {
        return Err(format!("the {label} answer is not a JSON object"));
    };
    match object.get("contract") {
        Some(Value::String(contract)) if contract == CONTRACT => Ok(object),
        Some(Value::String(contract)) => Err(format!(
            "the {label} answer has contract {}, expected {CONTRACT:?}",
            shown(contract)
        )),
        Some(_) => Err(format!("the {label} answer's contract is not a string")),
        None => Err(format!("the {label} answer has no contract field")),
    }
}

/// A secret pattern in a label that traces keep (version, revision).
fn label_secret(name: &str, label: Option<&str>) -> Result<(), String> {
    match label.and_then(secrets::scan) {
        Some(detector) => Err(format!(
            "{name} looks like a secret ({}); ctxd refuses the answer",
            detector.name()
        )),
        None => Ok(()),
    }
}

/// 200, the contract, and `lookup` among the capabilities.
fn describe_rule(exchange: &Exchange) -> Result<String, String> {
    let answer = exchange
        .answer
        .as_ref()
        .map_err(|e| format!("describe: {e}"))?;
    if answer.status != 200 {
        return Err(status_problem("describe", answer.status, 200));
    }
    let object = contract_object("describe", answer)?;
    let described: DescribeResponse = serde_json::from_value(Value::Object(object))
        .map_err(|e| format!("the describe answer is malformed: {e}"))?;
    if !described.capabilities.iter().any(|c| c == "lookup") {
        let listed: Vec<String> = described.capabilities.iter().map(|c| shown(c)).collect();
        return Err(format!(
            "capabilities [{}] do not include \"lookup\"",
            listed.join(", ")
        ));
    }
    label_secret("version", described.version.as_deref())?;
    Ok(match &described.version {
        Some(version) => format!(
            "200, contract {CONTRACT}, capabilities include lookup, version {}",
            shown(version)
        ),
        None => format!(
            "200, contract {CONTRACT}, capabilities include lookup, no version reported (ctxd then reports the binding's version)"
        ),
    })
}

/// A lookup answer held to the contract: `(items, detail)` when it passes.
fn lookup_rule(exchange: &Exchange, limit: u32) -> Result<(usize, String), String> {
    let answer = exchange
        .answer
        .as_ref()
        .map_err(|e| format!("lookup: {e}"))?;
    if answer.status != 200 {
        return Err(status_problem("lookup", answer.status, 200));
    }
    let response = parse_lookup("lookup", answer)?;
    bounds::check_items_refusing(&response.items, limit)
        .map_err(|violation| format!("{violation} (requested limit {limit}, at most {MAX_ITEMS}; items at most 64 KiB with a non-empty id; no secret patterns)"))?;
    label_secret("version", response.version.as_deref())?;
    label_secret("revision", response.revision.as_deref())?;
    let count = response.items.len();
    let mut detail = format!(
        "200, {} (limit {limit}), currentness {}, version {}, revision {}",
        items(count),
        if currentness_missing(exchange) {
            "not given"
        } else {
            response.currentness.as_str()
        },
        response.version.as_deref().map_or("-".to_owned(), shown),
        response.revision.as_deref().map_or("-".to_owned(), shown),
    );
    if count == 0 {
        detail.push_str(
            "; no item to check: a value without a record should answer 404, pass a --value that has one",
        );
    }
    Ok((count, detail))
}

/// A lookup answer that leaves out `currentness`, which ctxd reads as `UNKNOWN` — the
/// contract allows it, but a `currentness: "required"` layer then never takes the
/// provider's data. (`null` is no answer either: it is malformed, and `lookup` fails.)
fn currentness_missing(exchange: &Exchange) -> bool {
    let Ok(answer) = &exchange.answer else {
        return false;
    };
    serde_json::from_slice::<Value>(&answer.body)
        .is_ok_and(|body| body.get("currentness").is_none())
}

fn items(count: usize) -> String {
    format!("{count} item{}", if count == 1 { "" } else { "s" })
}

/// The contract, `currentness` and the item shape of a lookup answer.
fn parse_lookup(label: &str, answer: &Answer) -> Result<LookupResponse, String> {
    let object = contract_object(label, answer)?;
    match object.get("currentness") {
        None | Some(Value::Null) => {}
        Some(Value::String(c)) if ["CURRENT", "STALE", "UNKNOWN"].contains(&c.as_str()) => {}
        Some(other) => {
            let text = other.as_str().map_or_else(|| other.to_string(), shown);
            return Err(format!(
                "the {label} answer has currentness {text}: use CURRENT, STALE or UNKNOWN"
            ));
        }
    }
    if !object.get("items").is_some_and(Value::is_array) {
        return Err(format!("the {label} answer has no items array"));
    }
    serde_json::from_value(Value::Object(object))
        .map_err(|e| format!("the {label} answer is malformed: {e}"))
}

/// The lookup with limit 1 returns at most one item.
fn limit_rule(limited: &Exchange, first: &Exchange, first_items: Option<usize>) -> Judgement {
    let answer = match &limited.answer {
        Ok(answer) => answer,
        Err(e) => return Judgement::Fail(format!("{}: {e}", limited.label)),
    };
    match answer.status {
        200 => match parse_lookup(limited.label, answer) {
            Err(problem) => Judgement::Fail(problem),
            Ok(response) if response.items.len() > 1 => Judgement::Fail(format!(
                "a lookup with limit 1 returned {}: honour the requested limit",
                items(response.items.len())
            )),
            Ok(response) => {
                let mut detail = format!(
                    "a lookup with limit 1 returned {}",
                    items(response.items.len())
                );
                if first_items.is_some_and(|n| n <= 1) {
                    detail.push_str(
                        " (the value has at most 1 record, so this shows little: use a --value with 2 or more)",
                    );
                }
                Judgement::Pass(detail)
            }
        },
        404 if first.answer.as_ref().is_ok_and(|a| a.status == 404) => Judgement::Skip(
            "the --value has no record (404), so the limit cannot be observed".to_owned(),
        ),
        status => Judgement::Fail(status_problem(limited.label, status, 200)),
    }
}

/// A value that cannot exist answers 404. A 200 with zero items is read the same way
/// (`NOT_FOUND`), so it is a warning: the contract's spelling is 404.
fn not_found_rule(absent: &Exchange, value: &str) -> Judgement {
    let answer = match absent.answer.as_ref() {
        Ok(answer) => answer,
        Err(e) => return Judgement::Fail(format!("{}: {e}", absent.label)),
    };
    match answer.status {
        404 => Judgement::Pass(format!(
            "a lookup of {value}, which has no record, answered 404"
        )),
        200 => match parse_lookup(absent.label, answer) {
            Ok(response) if response.items.is_empty() => Judgement::Warn(format!(
                "a lookup of {value}, which has no record, answered 200 with zero items: ctxd reads it as NOT_FOUND like a 404, but the contract says 404 means no record"
            )),
            Ok(response) => Judgement::Fail(format!(
                "a lookup of {value}, which has no record, answered 200 with {}: answer 404 when there is no record",
                items(response.items.len())
            )),
            Err(problem) => Judgement::Fail(format!("{problem}; expected 404")),
        },
        status => Judgement::Fail(status_problem(absent.label, status, 404)),
    }
}

/// No answer was a 3xx.
fn redirect_rule(exchanges: &[&Exchange]) -> Judgement {
    let answered: Vec<(&str, u16)> = exchanges
        .iter()
        .filter_map(|e| e.answer.as_ref().ok().map(|a| (e.label, a.status)))
        .collect();
    if answered.is_empty() {
        return Judgement::Skip("no exchange was answered".to_owned());
    }
    let redirects: Vec<String> = answered
        .iter()
        .filter(|(_, status)| (300..=399).contains(status))
        .map(|(label, status)| format!("{label} answered {status}"))
        .collect();
    if redirects.is_empty() {
        Judgement::Pass(format!(
            "none of the {} answers was a 3xx (ctxd never follows redirects)",
            answered.len()
        ))
    } else {
        Judgement::Fail(format!(
            "{}: ctxd never follows redirects and refuses such answers (REDIRECT_REFUSED)",
            redirects.join(", ")
        ))
    }
}

/// The bound secret appears in no header (name or value) and no body.
fn reflection_rule(exchanges: &[&Exchange], secret: Option<&str>) -> Judgement {
    let Some(secret) = secret else {
        return Judgement::Skip(
            "no --secret-env given, so there is no secret to look for".to_owned(),
        );
    };
    let needle = secret.as_bytes();
    let contains = |haystack: &[u8]| {
        haystack.len() >= needle.len() && haystack.windows(needle.len()).any(|w| w == needle)
    };
    let mut found = Vec::new();
    let mut answered = 0;
    for exchange in exchanges {
        let Ok(answer) = &exchange.answer else {
            continue;
        };
        answered += 1;
        for (name, value) in &answer.headers {
            if contains(value.as_bytes()) || contains(name.as_str().as_bytes()) {
                found.push(format!("{} header {name}", exchange.label));
            }
        }
        if contains(&answer.body) {
            found.push(format!("{} body", exchange.label));
        }
    }
    if answered == 0 {
        Judgement::Skip("no exchange was answered".to_owned())
    } else if found.is_empty() {
        Judgement::Pass(format!(
            "the secret appeared in no header and no body of the {answered} answers"
        ))
    } else {
        Judgement::Fail(format!(
            "the secret was reflected in: {} (ctxd refuses such answers: CREDENTIAL_REFLECTED)",
            found.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_connection_strings_are_told_apart_and_never_shown() {
        for text in [
            "postgres://reader:hunter2@db.internal/orders",
            "POSTGRESQL://db/orders",
            "host=db.internal dbname=orders password=hunter2",
        ] {
            assert!(is_postgres_dsn(text), "{text}");
            let args = ProviderCheckArgs {
                url: text.to_owned(),
                binding: None,
                mcp_tool: None,
                mcp_argument: None,
                mcp_resource: None,
                secret_env: None,
                value: "CUST-1042".to_owned(),
                key: "customerId".to_owned(),
                provider: "customer-data".to_owned(),
                limit: 2,
                timeout_ms: 2000,
                format: Format::Human,
            };
            let error = target(&args, &EnvVars::default())
                .err()
                .unwrap()
                .to_string();
            assert!(error.contains("ctxd doctor"), "{error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
        assert!(!is_postgres_dsn("https://crm.internal/context"));
        assert!(!is_postgres_dsn("http://127.0.0.1:8080/ctx"));
    }

    fn answer(status: u16, body: Value) -> Exchange {
        Exchange {
            label: "lookup",
            answer: Ok(Answer {
                status,
                headers: HeaderMap::new(),
                body: serde_json::to_vec(&body).unwrap(),
                too_large: false,
            }),
        }
    }

    #[test]
    fn https_is_required_unless_loopback() {
        for text in [
            "https://crm.internal/context",
            "http://localhost:8080/x",
            "http://127.0.0.1:9/x",
            "http://[::1]/x",
        ] {
            assert!(https_rule(&Url::parse(text).unwrap()).is_ok(), "{text}");
        }
        for text in [
            "http://192.0.2.1/x",
            "http://api.localhost/x",
            "ftp://crm.internal/x",
        ] {
            let detail = https_rule(&Url::parse(text).unwrap()).unwrap_err();
            assert!(detail.contains("no request was sent"), "{detail}");
        }
    }

    #[test]
    fn lookups_are_held_to_the_contract() {
        let ok = answer(
            200,
            serde_json::json!({"contract": CONTRACT, "currentness": "CURRENT", "items": [{"id": "a"}]}),
        );
        assert_eq!(lookup_rule(&ok, 2).unwrap().0, 1);
        let cases = [
            (
                serde_json::json!({"contract": "context-provider.v2", "items": []}),
                "contract",
            ),
            (
                serde_json::json!({"contract": CONTRACT, "currentness": "FRESH", "items": []}),
                "currentness",
            ),
            (serde_json::json!({"contract": CONTRACT}), "items"),
            (
                serde_json::json!({"contract": CONTRACT, "items": [{"id": ""}]}),
                "empty id",
            ),
            (
                serde_json::json!({"contract": CONTRACT, "items": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}),
                "exceed",
            ),
        ];
        for (body, needle) in cases {
            let detail = lookup_rule(&answer(200, body.clone()), 2).unwrap_err();
            assert!(detail.contains(needle), "{body}: {detail}");
        }
        assert!(
            lookup_rule(&answer(404, Value::Null), 2)
                .unwrap_err()
                .contains("--value")
        );
    }

    #[test]
    fn a_lookup_answer_without_currentness_is_noticed() {
        let items = serde_json::json!([{"id": "a"}]);
        for (body, missing) in [
            (
                serde_json::json!({"contract": CONTRACT, "items": items}),
                true,
            ),
            (
                serde_json::json!({"contract": CONTRACT, "currentness": null, "items": items}),
                false,
            ),
            (
                serde_json::json!({"contract": CONTRACT, "currentness": "UNKNOWN", "items": items}),
                false,
            ),
            (
                serde_json::json!({"contract": CONTRACT, "currentness": "CURRENT", "items": items}),
                false,
            ),
        ] {
            assert_eq!(
                currentness_missing(&answer(200, body.clone())),
                missing,
                "{body}"
            );
        }
        let unanswered = Exchange {
            label: "lookup",
            answer: Err("connect failed".to_owned()),
        };
        assert!(!currentness_missing(&unanswered));
    }

    #[test]
    fn warnings_are_counted_only_when_there_are_some() {
        let mut report = Conformance {
            url: "http://127.0.0.1:9/".to_owned(),
            contract: CONTRACT,
            rules: Vec::new(),
        };
        report.push("https", Verdict::Pass, "");
        assert_eq!(
            report.summary(),
            "provider-check: 1 passed, 0 failed, 0 skipped"
        );
        report.push("lookup", Verdict::Warn, "");
        assert!(report.passed());
        assert_eq!(
            report.summary(),
            "provider-check: 1 passed, 1 warned, 0 failed, 0 skipped"
        );
        assert_eq!(report.json()["counts"]["warned"], 1);
        assert!(report.human().contains("WARN lookup: "));
    }

    #[test]
    fn not_found_wants_404_and_warns_about_an_empty_200() {
        assert!(matches!(
            not_found_rule(&answer(404, Value::Null), "v"),
            Judgement::Pass(_)
        ));
        let empty = answer(200, serde_json::json!({"contract": CONTRACT, "items": []}));
        assert!(matches!(
            not_found_rule(&empty, "v"),
            Judgement::Warn(detail) if detail.contains("zero items") && detail.contains("NOT_FOUND")
        ));
        let some = answer(
            200,
            serde_json::json!({"contract": CONTRACT, "items": [{"id": "x"}]}),
        );
        assert!(matches!(not_found_rule(&some, "v"), Judgement::Fail(_)));
    }

    #[test]
    fn reflection_is_reported_by_place_never_by_value() {
        let mut headers = HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_static("Bearer tok-123456"));
        let echoed = Exchange {
            label: "describe",
            answer: Ok(Answer {
                status: 200,
                headers,
                body: b"{}".to_vec(),
                too_large: false,
            }),
        };
        let Judgement::Fail(detail) = reflection_rule(&[&echoed], Some("tok-123456")) else {
            panic!("reflection not found");
        };
        assert!(detail.contains("describe header x-echo"), "{detail}");
        assert!(!detail.contains("tok-123456"));
        assert!(matches!(
            reflection_rule(&[&echoed], None),
            Judgement::Skip(_)
        ));
    }

    #[test]
    fn labels_are_shortened_and_quoted() {
        assert_eq!(shown("5.0.1"), "\"5.0.1\"");
        assert!(shown(&"v".repeat(100)).ends_with('…'));
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
    }
}
