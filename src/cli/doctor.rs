//! `ctxd doctor [--config F]`: checks that a deployment can actually serve, one line per
//! check with a verdict (`ok`, `warn`, `FAIL`), then a summary; exit 1 on any `FAIL`.
//!
//! Where `ctxd validate` stops at the files and the environment, doctor also touches what
//! `serve` would touch at start-up, without starting anything:
//! - the server config, every tenant's Projects and Bindings load, resolved as `validate`
//!   and `serve` resolve them ([`Deployment::resolve`]); a problem fails when its severity
//!   stops `serve` or breaks turns (a required provider without a binding entry), and
//!   warns when it does neither (a binding entry no project declares);
//! - the environment: tenant API keys by env reference, every `secret_env`, the digest key
//!   (its env var, or `generate_digest_key` with a usable folder for the key file);
//! - the trace store's folder accepts a new file (a temp file is created and removed; the
//!   store itself is neither opened nor migrated);
//! - a Redis handle store: its password variable is set and the server answers `PING`;
//! - each binding entry: a SQLite file that may be served (not one of ctxd's own files, inside
//!   the binding's `allowed_roots`) opens read-only and its query prepares with `?1`
//!   as its only parameter; HTTP endpoints follow the TLS rule and answer a `describe`
//!   probe within the binding's timeout with a compatible contract and `lookup`.
//!
//! Nothing here prints a secret or a lookup value: env vars are named, never shown;
//! provider failures are a status and a fixed detail. Probes run concurrently on a small
//! current-thread runtime created by the command; lines keep the config's order.

use crate::config::{ApiKey, EnvVars, ProviderBinding, ProviderKind, ServerConfig, TenantConfig};
use crate::deployment::SetupError;
use crate::deployment::{Deployment, DeploymentProblem, ProblemKind, Severity, TenantDeployment};
use crate::digest::keyed::MIN_KEY_BYTES;
use crate::outcome::Failure;
use crate::providers::Implementation;
use crate::providers::http::{DescribeError, HttpProvider};
use crate::providers::sqlite::SqliteProvider;
use crate::providers::untrusted::{Masks, UntrustedText};
use clap::Args;
use futures_util::future::join_all;
use sha2::{Digest, Sha256};
use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;
use tokio::time::Instant;

mod rest;

/// Upper bound on opening one SQLite binding and preparing its query. `open` bounds its
/// own waits (5 s); this guards the whole step so one stuck file cannot hang the doctor.
mod postgres;

const SQLITE_CHECK_LIMIT: Duration = Duration::from_secs(15);
/// The public API key of the shipped demo tenant (docs/CONFIGURATION.md).
const DEMO_API_KEY: &str = "ctxd-demo-key";

#[derive(Debug, Clone, Args)]
pub(crate) struct DoctorArgs {
    /// The server config to check
    #[arg(long, default_value = "config/ctxd.toml")]
    pub(crate) config: PathBuf,
}

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ok,
    /// Works, but not as a production deployment should (a generated digest key, the
    /// public demo API key, a binding entry no project uses).
    Warn,
    /// `serve` would refuse to start, or turns would fail.
    Fail,
}

impl Verdict {
    /// A problem that stops `serve` or breaks turns fails; one that does neither warns.
    pub(crate) fn of(severity: Severity) -> Verdict {
        match severity {
            Severity::Fatal | Severity::Degraded => Verdict::Fail,
            Severity::Warning => Verdict::Warn,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One line of the report: what was checked (`subject: message`) and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    pub(crate) verdict: Verdict,
    /// `config`, `digest key`, `trace store`, `tenant acme`,
    /// `tenant acme, provider crm (http)`.
    pub(crate) subject: String,
    pub(crate) message: String,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<4}  {}: {}",
            self.verdict.as_str(),
            self.subject,
            self.message
        )
    }
}

/// Every check, in the order of the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) checks: Vec<Check>,
}

impl Report {
    fn push(&mut self, verdict: Verdict, subject: impl Into<String>, message: impl Into<String>) {
        self.checks.push(Check {
            verdict,
            subject: subject.into(),
            message: message.into(),
        });
    }

    fn ok(&mut self, subject: impl Into<String>, message: impl Into<String>) {
        self.push(Verdict::Ok, subject, message);
    }

    fn warn(&mut self, subject: impl Into<String>, message: impl Into<String>) {
        self.push(Verdict::Warn, subject, message);
    }

    fn fail(&mut self, subject: impl Into<String>, message: impl Into<String>) {
        self.push(Verdict::Fail, subject, message);
    }

    /// A line about a deployment problem, with the verdict its severity calls for.
    fn problem(
        &mut self,
        subject: impl Into<String>,
        problem: &DeploymentProblem,
        message: impl Into<String>,
    ) {
        self.push(Verdict::of(problem.severity()), subject, message);
    }

    pub(crate) fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }

    /// No `FAIL`: warnings do not fail the doctor.
    pub(crate) fn is_ok(&self) -> bool {
        self.count(Verdict::Fail) == 0
    }

    /// `doctor: 9 ok, 1 warn, 0 FAIL`.
    pub(crate) fn summary(&self) -> String {
        format!(
            "doctor: {} ok, {} warn, {} FAIL",
            self.count(Verdict::Ok),
            self.count(Verdict::Warn),
            self.count(Verdict::Fail)
        )
    }
}

pub(crate) fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let env = EnvVars::from_process();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(diagnose(&args.config, &env));
    let mut out = super::stdout();
    for check in &report.checks {
        writeln!(out, "{check}")?;
    }
    writeln!(out, "{}", report.summary())?;
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs every check of a server config. Reads the files, probes the bound providers and
/// the trace store's folder; takes the environment as a map. Needs a tokio runtime.
pub(crate) async fn diagnose(config: &Path, env: &EnvVars) -> Report {
    let mut report = Report::default();
    let file = config.display().to_string();
    let server = match ServerConfig::load(config) {
        Ok(server) => server,
        Err(errors) => {
            for line in errors.lines() {
                report.fail("config", line);
            }
            report.fail(
                "config",
                format!("{file}: nothing else was checked: fix the config first"),
            );
            return report;
        }
    };
    report.ok(
        "config",
        format!(
            "{file} loads (listen {}, {})",
            server.server.listen,
            plural(server.tenants.len(), "tenant")
        ),
    );

    let deployment = Deployment::resolve(&server, env);
    // The digest key's problem is told by its own, more thorough check.
    digest_key(&mut report, &server, env);
    trace_store(&mut report, &server, env);
    // The admin key (`server.admin_key_env`) is the one key problem of no tenant.
    for problem in deployment
        .problems
        .iter()
        .filter(|p| p.tenant.is_none() && p.kind == ProblemKind::ApiKey)
    {
        report.problem("admin key", problem, problem.to_string());
    }
    handle_store(&mut report, &server, env).await;

    for (tenant, resolved) in server.tenants.iter().zip(&deployment.tenants) {
        let subject = format!("tenant {}", tenant.id);
        let mut key_problems = deployment
            .problems_of(resolved.index)
            .filter(|p| p.kind == ProblemKind::ApiKey)
            .peekable();
        if key_problems.peek().is_none() {
            api_key(&mut report, &subject, tenant);
        }
        for problem in key_problems {
            report.problem(&subject, problem, problem.to_string());
        }
        check_tenant(&mut report, tenant, resolved, &deployment, env).await;
    }
    report
}

fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn api_key(report: &mut Report, subject: &str, tenant: &TenantConfig) {
    let demo: [u8; 32] = Sha256::digest(DEMO_API_KEY.as_bytes()).into();
    match &tenant.api_key {
        ApiKey::Sha256(hash) if *hash == demo => {
            report.warn(
                subject,
                format!(
                    "API key is the public demo key {DEMO_API_KEY:?}: replace it (api_key_env or the hash of your own key) before serving real data"
                ),
            );
        }
        ApiKey::Sha256(_) => report.ok(subject, "API key configured as a SHA-256 hash"),
        ApiKey::Env(name) => report.ok(
            subject,
            format!("API key from environment variable {name:?}: set"),
        ),
    }
}

/// The digest key `serve` would use: its env var (at least [`MIN_KEY_BYTES`]), or the
/// generated key file beside the trace store (existing and long enough, or a folder
/// where it can be created). The key itself is never read into a message.
fn digest_key(report: &mut Report, server: &ServerConfig, env: &EnvVars) {
    const SUBJECT: &str = "digest key";
    let source = server.trace.digest_key_source();
    let name = &source.env_name;
    match env.get(name) {
        Some(value) if value.len() >= MIN_KEY_BYTES => {
            report.ok(SUBJECT, format!("environment variable {name:?} is set"));
            return;
        }
        Some("") => {
            report.fail(
                SUBJECT,
                format!(
                    "environment variable {name:?} is set but empty: serve refuses it (at least {MIN_KEY_BYTES} bytes)"
                ),
            );
            return;
        }
        Some(_) => {
            report.fail(
                SUBJECT,
                format!(
                    "environment variable {name:?} is shorter than {MIN_KEY_BYTES} bytes: serve refuses it"
                ),
            );
            return;
        }
        None if !source.generate => {
            report.fail(
                SUBJECT,
                format!(
                    "environment variable {name:?} is not set and generate_digest_key is false: serve refuses to start"
                ),
            );
            return;
        }
        None => {}
    }
    let key_file = source.key_file();
    let shared = format!(
        "every replica writing the same trace store needs the same key: set {name:?} in a real deployment"
    );
    match std::fs::read(&key_file) {
        Ok(bytes) if bytes.len() >= MIN_KEY_BYTES => report.warn(
            SUBJECT,
            format!(
                "{name:?} is not set; the generated key {} is used ({shared})",
                super::shown_path(&key_file)
            ),
        ),
        Ok(_) => report.fail(
            SUBJECT,
            format!(
                "{name:?} is not set and the generated key {} is shorter than {MIN_KEY_BYTES} bytes: serve refuses it",
                super::shown_path(&key_file)
            ),
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            match probe_writable(&source.folder) {
                Ok(_) => report.warn(
                    SUBJECT,
                    format!(
                        "{name:?} is not set; serve will generate {} ({shared})",
                        super::shown_path(&key_file)
                    ),
                ),
                Err(problem) => report.fail(
                    SUBJECT,
                    format!(
                        "{name:?} is not set and the generated key {} cannot be created: {problem}",
                        super::shown_path(&key_file)
                    ),
                ),
            }
        }
        Err(error) => report.fail(
            SUBJECT,
            format!(
                "{name:?} is not set and the generated key {} cannot be read: {error}",
                super::shown_path(&key_file)
            ),
        ),
    }
}

/// The trace store's folder accepts new files (the store, its WAL and journal). The
/// store is not opened: opening would create or migrate it.
fn trace_store(report: &mut Report, server: &ServerConfig, env: &EnvVars) {
    const SUBJECT: &str = "trace store";
    let (Some(store), Some(folder)) = (server.trace.store_path(), server.trace.store_folder())
    else {
        return postgres_trace_store(report, server, env);
    };
    match probe_writable(&folder) {
        Err(problem) => report.fail(
            SUBJECT,
            format!(
                "{} cannot be written: {problem}",
                super::shown_path(store)
            ),
        ),
        Ok(_) if std::fs::metadata(store).is_ok_and(|m| m.permissions().readonly()) => report
            .fail(
                SUBJECT,
                format!("{} is a read-only file: serve cannot write traces", super::shown_path(store)),
            ),
        Ok(Probe::Existing) => report.ok(
            SUBJECT,
            format!(
                "folder {} is writable (a temp file was created and removed; the store {} was not opened)",
                super::shown_path(&folder),
                super::shown_path(store)
            ),
        ),
        Ok(Probe::Ancestor(ancestor)) => report.ok(
            SUBJECT,
            format!(
                "folder {} does not exist yet; serve creates it in {}, which is writable (a temp file was created and removed)",
                super::shown_path(&folder),
                super::shown_path(&ancestor)
            ),
        ),
    }
}

/// The handle store `serve` would open: nothing to check for memory; for Redis, its
/// password variable and a connection answering `PING` (the address is named, never the
/// password).
async fn handle_store(report: &mut Report, server: &ServerConfig, env: &EnvVars) {
    const SUBJECT: &str = "handle store";
    let crate::handles::HandleBackend::Redis(redis) = &server.handle_store else {
        report.ok(
            SUBJECT,
            "in memory (handles are not shared between replicas)",
        );
        return;
    };
    match crate::handles::HandleStore::open(&server.handle_store, server.handles, env).await {
        Ok(_) => report.ok(
            SUBJECT,
            format!(
                "redis at {} answers (key prefix {:?})",
                redis.server(),
                redis.key_prefix
            ),
        ),
        Err(problem) => report.fail(SUBJECT, format!("{problem}: serve refuses to start")),
    }
}

/// A PostgreSQL store (`store_env`): reachable, and the schema version it is at. The
/// store is not migrated here: `serve` does that under its lock.
fn postgres_trace_store(report: &mut Report, server: &ServerConfig, env: &EnvVars) {
    const SUBJECT: &str = "trace store";
    let target = match server.trace.store_target(env) {
        Ok(crate::trace::store::StoreTarget::Postgres(target)) => target,
        Ok(crate::trace::store::StoreTarget::Sqlite(_)) => return,
        Err(problem) => return report.fail(SUBJECT, problem),
    };
    let label = target.label();
    let tls = if target.tls() {
        "TLS"
    } else {
        "no TLS (loopback)"
    };
    match crate::trace::store::probe_postgres(&target) {
        Ok((Some(found), known)) if found == known => report.ok(
            SUBJECT,
            format!(
                "{} reachable ({tls}), schema version {found}",
                label.display()
            ),
        ),
        Ok((Some(found), known)) if found < known => report.warn(
            SUBJECT,
            format!(
                "{} reachable ({tls}), schema version {found}: serve migrates it to {known}",
                label.display()
            ),
        ),
        Ok((Some(found), known)) => report.fail(
            SUBJECT,
            format!(
                "{} has schema version {found}, newer than this ctxd knows ({known}): upgrade ctxd",
                label.display()
            ),
        ),
        Ok((None, known)) => report.ok(
            SUBJECT,
            format!(
                "{} reachable ({tls}), no trace store yet: serve creates schema version {known}",
                label.display()
            ),
        ),
        Err(error) => report.fail(SUBJECT, error.to_string()),
    }
}

/// Where [`probe_writable`] could create a file.
enum Probe {
    /// In the folder itself.
    Existing,
    /// The folder does not exist; its nearest existing ancestor accepted the file.
    Ancestor(PathBuf),
}

/// Creates and removes a uniquely named temp file in `folder`, or in its nearest existing
/// ancestor when the folder does not exist yet (serve creates missing folders).
fn probe_writable(folder: &Path) -> Result<Probe, String> {
    let mut target = folder.to_path_buf();
    let mut existing = true;
    while !target.is_dir() {
        if target.exists() {
            return Err(format!("{} is not a folder", super::shown_path(&target)));
        }
        existing = false;
        target = match target.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if target == Path::new(".") && !target.is_dir() {
            return Err("the current folder is gone".to_owned());
        }
    }
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| format!("no randomness: {e}"))?;
    let probe = target.join(format!(
        ".ctxd-doctor-{}-{}.tmp",
        std::process::id(),
        hex::encode(random)
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut file| file.write_all(b"ctxd doctor\n"));
    let removed = std::fs::remove_file(&probe);
    written.map_err(|e| {
        format!(
            "cannot create a file in {}: {e}",
            super::shown_path(&target)
        )
    })?;
    removed.map_err(|e| format!("cannot remove {}: {e}", super::shown_path(&probe)))?;
    Ok(if existing {
        Probe::Existing
    } else {
        Probe::Ancestor(target)
    })
}

type Probes<'a> = Vec<Pin<Box<dyn Future<Output = Vec<Check>> + 'a>>>;

/// The tenant's Projects and Bindings in the config's order, each with whether it loaded
/// and its problems, then every binding entry's own checks. A missing `secret_env` is told
/// by the entry's checks, which then send no probe.
async fn check_tenant(
    report: &mut Report,
    tenant: &TenantConfig,
    resolved: &TenantDeployment,
    deployment: &Deployment,
    env: &EnvVars,
) {
    let subject = format!("tenant {}", tenant.id);
    let problems: Vec<&DeploymentProblem> = deployment.problems_of(resolved.index).collect();
    let mut bindings_told: Vec<&Path> = Vec::new();
    for (index, reference) in tenant.projects.iter().enumerate() {
        let project_file = super::shown_path(&reference.path);
        let loaded = resolved.projects.iter().find(|p| p.index == index);
        match loaded {
            Some(loaded) => report.ok(
                &subject,
                format!(
                    "project {} {} loads ({project_file}, {})",
                    loaded.project.id(),
                    loaded.project.doc.version,
                    plural(loaded.project.providers.len(), "provider")
                ),
            ),
            None => {
                for problem in &problems {
                    if problem.kind == (ProblemKind::Project { project: index }) {
                        report.problem(&subject, problem, format!("project {problem}"));
                    }
                }
            }
        }
        if !bindings_told.contains(&reference.binding.as_path()) {
            bindings_told.push(&reference.binding);
            binding_loads(report, &subject, &reference.binding, resolved, &problems);
        }
        let Some(loaded) = loaded else {
            continue;
        };
        for problem in &problems {
            match &problem.kind {
                ProblemKind::ProjectServedTwice { project, first } if *project == index => {
                    report.problem(
                        &subject,
                        problem,
                        format!(
                            "project {} ({project_file}) is already served by this tenant from {}",
                            loaded.project.id(),
                            super::shown_path(&tenant.projects[*first].path)
                        ),
                    );
                }
                ProblemKind::Unbound { project, provider } if *project == index => {
                    report.problem(
                        format!("{subject}, provider {provider}"),
                        problem,
                        format!(
                            "required by project {} but {} has no entry for it: its layers would be NOT_BOUND",
                            loaded.project.id(),
                            super::shown_path(&reference.binding)
                        ),
                    );
                }
                _ => {}
            }
        }
    }

    let mut probes: Probes<'_> = Vec::new();
    for binding in &resolved.bindings {
        for provider in binding.binding.providers.values() {
            let subject = format!(
                "{subject}, provider {} ({})",
                provider.id,
                provider.kind.type_name()
            );
            let mut refused = false;
            for problem in &problems {
                match &problem.kind {
                    ProblemKind::Undeclared {
                        binding: path,
                        provider: id,
                    } if *path == binding.path && *id == provider.id => {
                        report.problem(
                            &subject,
                            problem,
                            format!(
                                "no project of the tenant that uses {} declares it: serve never calls it (ctxd validate reports it)",
                                super::shown_path(&binding.path)
                            ),
                        );
                    }
                    // A database that may not be served is not opened either.
                    ProblemKind::Database {
                        binding: path,
                        provider: id,
                        ..
                    } if *path == binding.path && *id == provider.id => {
                        report.problem(&subject, problem, problem.to_string());
                        refused = true;
                    }
                    _ => {}
                }
            }
            if !refused {
                probes.push(Box::pin(check_provider(
                    subject,
                    &binding.path,
                    provider,
                    env,
                )));
            }
        }
    }
    for checks in join_all(probes).await {
        report.checks.extend(checks);
    }
}

/// Whether the binding file at `path` loaded, or its problems.
fn binding_loads(
    report: &mut Report,
    subject: &str,
    path: &Path,
    resolved: &TenantDeployment,
    problems: &[&DeploymentProblem],
) {
    if let Some(loaded) = resolved.bindings.iter().find(|b| b.path == path) {
        report.ok(
            subject,
            format!(
                "binding {} loads (revision {:?}, {}, {})",
                super::shown_path(path),
                loaded.binding.revision,
                plural(loaded.binding.providers.len(), "provider"),
                loaded.binding.digest
            ),
        );
        return;
    }
    for problem in problems {
        if matches!(&problem.kind, ProblemKind::Binding { binding } if binding == path) {
            report.problem(subject, problem, format!("binding {problem}"));
        }
    }
}

/// The checks of one binding entry: what can be judged before building it (an HTTP
/// provider's TLS rule and secret), the build `serve` does at start-up, then readiness
/// by type. Pools are closed after.
async fn check_provider(
    subject: String,
    binding: &Path,
    provider: &ProviderBinding,
    env: &EnvVars,
) -> Vec<Check> {
    let mut report = Report::default();
    let masks = crate::deployment::binding_masks(provider, env);
    if let ProviderKind::Http {
        endpoint,
        secret_env,
    } = &provider.kind
        && !check_http_binding(&mut report, &subject, endpoint, secret_env.as_deref(), env)
    {
        return report.checks;
    }
    if let ProviderKind::Rest(spec) = &provider.kind
        && !rest::check_binding(&mut report, &subject, spec, env)
    {
        return report.checks;
    }
    let built = tokio::time::timeout(
        SQLITE_CHECK_LIMIT,
        crate::deployment::build_implementation(provider, env),
    )
    .await;
    let implementation = match built {
        Ok(Ok(implementation)) => implementation,
        Ok(Err(SetupError::Http(error))) => {
            report.fail(&subject, format!("cannot set up the client: {error}"));
            return report.checks;
        }
        Ok(Err(error)) => {
            // In the words and at the key `validate` and `serve` use; a database's
            // message is outside text, shown as untrusted text.
            let problem = error.problem(&provider.id).to_string();
            report.fail(
                &subject,
                format!(
                    "{}: {}",
                    binding.display(),
                    UntrustedText::new(&problem, &masks)
                ),
            );
            return report.checks;
        }
        Err(_) => {
            report.fail(
                &subject,
                format!(
                    "{}: not opened within {} s",
                    target(provider),
                    SQLITE_CHECK_LIMIT.as_secs()
                ),
            );
            return report.checks;
        }
    };
    match &implementation {
        Implementation::Sqlite(sqlite) => {
            check_sqlite(&mut report, &subject, provider, sqlite).await
        }
        Implementation::Http(client) => {
            check_describe(&mut report, &subject, provider, client).await
        }
        Implementation::Rest(client) => {
            rest::check_probe(&mut report, &subject, provider, client).await
        }
        Implementation::Postgres(postgres) => {
            postgres::check_postgres(&mut report, &subject, provider, postgres).await
        }
        Implementation::Mcp(mcp) => match mcp.check(SQLITE_CHECK_LIMIT).await {
            Ok(found) => report.ok(&subject, format!("{}: {found}", target(provider))),
            Err(problem) => report.fail(
                &subject,
                format!(
                    "{}: {}",
                    target(provider),
                    UntrustedText::new(&problem, &masks)
                ),
            ),
        },
    }
    implementation.close();
    report.checks
}

/// What a binding entry points at, for messages: `database …` or `endpoint …`.
fn target(provider: &ProviderBinding) -> String {
    match &provider.kind {
        ProviderKind::Http { endpoint, .. } => format!("endpoint {endpoint}"),
        ProviderKind::Sqlite { database, .. } => {
            format!("database {}", super::shown_path(database))
        }
        ProviderKind::Rest(spec) => format!("endpoint {}", spec.endpoint),
        ProviderKind::Postgres { dsn_env, .. } => format!("the server named in {dsn_env}"),
        ProviderKind::Mcp(mcp) => crate::providers::mcp::target(mcp),
    }
}

/// The file opened read-only and the query prepared, exactly as `serve` does at start-up;
/// then its readiness check. Whether a write is refused is the provider's own tested
/// guarantee, not re-tested here.
async fn check_sqlite(
    report: &mut Report,
    subject: &str,
    provider: &ProviderBinding,
    sqlite: &SqliteProvider,
) {
    let checked = tokio::time::timeout(SQLITE_CHECK_LIMIT, sqlite.check()).await;
    match checked {
        Ok(Ok(())) => report.ok(
            subject,
            format!(
                "{} opens read-only and the query prepares with ?1 as its only parameter (version {})",
                target(provider),
                provider.version.as_deref().unwrap_or("-")
            ),
        ),
        Ok(Err(problem)) => report.fail(
            subject,
            UntrustedText::new(&problem, &Masks::none()).into_string(),
        ),
        Err(_) => report.fail(
            subject,
            format!(
                "{}: readiness check did not finish within {} s",
                target(provider),
                SQLITE_CHECK_LIMIT.as_secs()
            ),
        ),
    }
}

/// The TLS rule and the secret's presence; `false` when the provider cannot
/// authenticate, so no probe is sent.
fn check_http_binding(
    report: &mut Report,
    subject: &str,
    endpoint: &url::Url,
    secret_env: Option<&str>,
    env: &EnvVars,
) -> bool {
    if endpoint.scheme() == "https" {
        report.ok(subject, format!("endpoint {endpoint} uses https"));
    } else {
        report.ok(
            subject,
            format!(
                "endpoint {endpoint} is plain http to a loopback host, which is allowed only for loopback (https everywhere else)"
            ),
        );
    }
    let Some(name) = secret_env else {
        return true;
    };
    check_secret_set(
        report,
        subject,
        env,
        "secret_env",
        name,
        "describe not probed",
    )
}

/// Whether the env var `name` that `key` names holds a secret: `ok` when it does, else a
/// failure saying what is not done without it (`skipped`). Never reads the value out.
pub(super) fn check_secret_set(
    report: &mut Report,
    subject: &str,
    env: &EnvVars,
    key: &str,
    name: &str,
    skipped: &str,
) -> bool {
    match env.get(name) {
        None | Some("") => {
            let state = if env.get(name).is_some() {
                "is empty"
            } else {
                "is not set"
            };
            report.fail(
                subject,
                format!(
                    "{key}: environment variable {name:?} {state}: the provider cannot authenticate ({skipped})"
                ),
            );
            false
        }
        Some(_) => {
            report.ok(
                subject,
                format!("{key}: environment variable {name:?} is set"),
            );
            true
        }
    }
}

/// A `describe` probe within the binding's timeout.
async fn check_describe(
    report: &mut Report,
    subject: &str,
    provider: &ProviderBinding,
    client: &HttpProvider,
) {
    let timeout_ms = provider.timeout.as_millis();
    let started = Instant::now();
    match client.describe(started + provider.timeout).await {
        Ok(described) => report.ok(
            subject,
            format!(
                "describe answered context-provider.v1 with the lookup capability, version {} ({} ms, timeout {timeout_ms} ms)",
                described.version.as_deref().unwrap_or("not reported"),
                started.elapsed().as_millis()
            ),
        ),
        Err(error) => report.fail(
            subject,
            format!(
                "describe failed: {error}: {}",
                explain(&error, timeout_ms)
            ),
        ),
    }
}

/// What a failed `describe` means, in words an operator can act on.
fn explain(error: &DescribeError, timeout_ms: u128) -> String {
    let failure = match error {
        DescribeError::NotFound => return "the endpoint answered 404 to describe".to_owned(),
        DescribeError::Failed(failure) => failure,
    };
    match failure {
        Failure::ConnectFailed => {
            "nothing answered at the endpoint (connection refused, unreachable, DNS or TLS)"
                .to_owned()
        }
        Failure::ConnectionReset => "the connection closed before a complete answer".to_owned(),
        Failure::Deadline => format!("no complete answer within the binding's {timeout_ms} ms"),
        Failure::WrongContract => "the answer is not context-provider.v1".to_owned(),
        Failure::NoLookupCapability => "the answer's capabilities do not include lookup".to_owned(),
        Failure::RedirectRefused => {
            "the endpoint answered a redirect, which ctxd never follows: bind the final URL"
                .to_owned()
        }
        Failure::Unauthorized => "the endpoint refused the credential (401/403)".to_owned(),
        Failure::CredentialReflected => {
            "the answer echoed the bound secret, which ctxd refuses".to_owned()
        }
        Failure::ResponseTooLarge => "the answer is larger than 1 MiB".to_owned(),
        Failure::Malformed => "the answer is not a describe answer".to_owned(),
        Failure::HttpStatus(code) => format!("the endpoint answered HTTP {code}"),
        other => format!(
            "the provider answer was refused ({})",
            other.detail().unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unset_admin_key_env_var_fails() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ctxd.toml");
        std::fs::write(
            &config,
            "[server]\nadmin_key_env = \"CTXD_ADMIN_KEY\"\n[trace]\ngenerate_digest_key = true\n[[tenants]]\nid = \"demo\"\napi_key_env = \"DEMO_KEY\"\n[[tenants.projects]]\npath = \"p.json\"\nbinding = \"b.toml\"\n",
        )
        .unwrap();
        let env: EnvVars = [("DEMO_KEY", "demo-key-value")].into_iter().collect();
        let report = diagnose(&config, &env).await;
        let admin: Vec<String> = report
            .checks
            .iter()
            .filter(|c| c.subject == "admin key")
            .map(ToString::to_string)
            .collect();
        assert_eq!(admin.len(), 1, "{report:#?}");
        assert!(
            admin[0].starts_with("FAIL  admin key: ")
                && admin[0].ends_with(
                    "server.admin_key_env: environment variable \"CTXD_ADMIN_KEY\" is not set: it holds the admin key"
                ),
            "{admin:#?}"
        );
    }

    #[test]
    fn verdicts_follow_the_severity() {
        assert_eq!(Verdict::of(Severity::Fatal), Verdict::Fail);
        assert_eq!(Verdict::of(Severity::Degraded), Verdict::Fail);
        assert_eq!(Verdict::of(Severity::Warning), Verdict::Warn);
    }

    #[tokio::test]
    async fn problems_are_told_under_their_tenant_with_their_severity() {
        let dir = tempfile::tempdir().unwrap();
        let project = r#"{"id": "support", "version": "1", "layers": [{"id": "policy", "name": "Policy", "content": "Be kind."}]}"#;
        std::fs::write(dir.path().join("project.json"), project).unwrap();
        std::fs::write(
            dir.path().join("binding.toml"),
            "revision = \"r1\"\n[providers.tickets]\ntype = \"http\"\nendpoint = \"https://tickets.internal/context\"\nsecret_env = \"TICKETS_TOKEN\"\n",
        )
        .unwrap();
        let config = dir.path().join("ctxd.toml");
        std::fs::write(
            &config,
            concat!(
                "[trace]\ngenerate_digest_key = true\n",
                "[[tenants]]\nid = \"demo\"\napi_key_env = \"DEMO_KEY\"\n",
                "[[tenants.projects]]\npath = \"project.json\"\nbinding = \"binding.toml\"\n",
                "[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n",
                "[[tenants.projects]]\npath = \"project.json\"\nbinding = \"binding.toml\"\n",
            ),
        )
        .unwrap();
        let env: EnvVars = [("DEMO_KEY", "demo-key-value")].into_iter().collect();
        let report = diagnose(&config, &env).await;
        let lines = |subject: &str| -> Vec<String> {
            report
                .checks
                .iter()
                .filter(|c| c.subject == subject)
                .map(ToString::to_string)
                .collect()
        };
        let acme_key = lines("tenant acme");
        assert!(
            acme_key[0].starts_with("FAIL  tenant acme: ")
                && acme_key[0].ends_with(
                    "tenants[1].api_key_env: environment variable \"ACME_KEY\" is not set: it holds tenant \"acme\"'s API key"
                ),
            "{report:#?}"
        );
        assert!(
            lines("tenant demo")[0].starts_with("ok    tenant demo: API key from environment"),
            "{report:#?}"
        );
        let tickets = lines("tenant demo, provider tickets (http)");
        assert!(
            tickets[0].starts_with(
                "warn  tenant demo, provider tickets (http): no project of the tenant"
            ),
            "{tickets:#?}"
        );
        assert!(
            tickets
                .iter()
                .any(|line| line.starts_with("FAIL")
                    && line.contains("\"TICKETS_TOKEN\" is not set")),
            "{tickets:#?}"
        );
    }

    #[test]
    fn checks_print_verdict_subject_and_message() {
        let mut report = Report::default();
        report.ok("config", "loads");
        report.warn("digest key", "generated");
        report.fail("tenant acme, provider crm (http)", "describe failed");
        let lines: Vec<String> = report.checks.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "ok    config: loads",
                "warn  digest key: generated",
                "FAIL  tenant acme, provider crm (http): describe failed",
            ]
        );
        assert!(!report.is_ok());
        assert_eq!(report.summary(), "doctor: 1 ok, 1 warn, 1 FAIL");
    }

    #[test]
    fn the_write_probe_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(probe_writable(dir.path()), Ok(Probe::Existing)));
        let missing = dir.path().join("a/b");
        match probe_writable(&missing) {
            Ok(Probe::Ancestor(ancestor)) => assert_eq!(ancestor, dir.path()),
            other => panic!("{:?}", other.err()),
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(probe_writable(&file.join("sub")).is_err());
    }

    #[test]
    fn failed_describes_are_explained() {
        let failed = |failure| DescribeError::Failed(failure);
        assert!(explain(&failed(Failure::ConnectFailed), 800).contains("nothing answered"));
        assert!(explain(&failed(Failure::Deadline), 800).contains("800 ms"));
        assert_eq!(
            explain(&failed(Failure::HttpStatus(503)), 800),
            "the endpoint answered HTTP 503"
        );
        assert!(explain(&DescribeError::NotFound, 800).contains("404"));
    }
}
