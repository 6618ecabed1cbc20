//! The deployment a server config describes, resolved once for `serve`, `validate` and
//! `doctor`: every tenant's Projects and Bindings loaded, each project's providers matched
//! to their binding entries, the environment checked — and every problem found, with its
//! file and path, the tenant, project, binding file or provider it concerns, and the
//! [`Severity`] that says what it means for serving.
//!
//! Reads the Project and binding files; opens no database, resolves no host, starts
//! nothing. The environment is passed in.
//!
//! What each command does with a severity is fixed: `validate` reports every problem
//! (exit 1); `doctor` fails on [`Severity::Fatal`] and [`Severity::Degraded`] and warns
//! on [`Severity::Warning`]; `serve` refuses to start on `Fatal`, logs `Degraded`, and
//! says nothing of `Warning`.

use crate::config::{
    Binding, EnvVars, EnvironmentNeed, McpTransport, ProviderBinding, ProviderKind, ServerConfig,
    TenantConfig, index_path, key_path,
};
use crate::project::{LoadError, Project};
use crate::providers::http::{HttpProvider, HttpSetupError};
use crate::providers::http1::Http1SetupError;
use crate::providers::postgres::{PostgresProvider, PostgresSetupError};
use crate::providers::rest::RestProvider;
use crate::providers::sqlite::{SqliteProvider, SqliteSetupError};
use crate::providers::untrusted::Masks;
use crate::providers::{Implementation, Secret};
use crate::validation::Problem;
use base64::Engine as _;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod databases;
mod servers;

use databases::OwnFiles;

/// What a problem means for serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// `serve` refuses to start.
    Fatal,
    /// `serve` starts, but turns cannot be answered as the Project intends: a required
    /// provider without a binding entry answers `NOT_BOUND`.
    Degraded,
    /// `serve` is unaffected, but the files say something they do not mean: a binding
    /// entry no project declares is never called.
    Warning,
}

/// What a problem is about, with the indexes and ids that locate it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProblemKind {
    /// A tenant's `api_key_env` is unset or empty, or holds another tenant's key.
    ApiKey,
    /// The digest key's env var is unset and no key may be generated.
    DigestKey,
    /// `[trace] store_env` is unset, empty, or holds a connection string that is refused.
    TraceStore,
    /// The Project file at `project` (index in the tenant's `projects`) cannot be read or
    /// is invalid.
    Project { project: usize },
    /// The binding file cannot be read or is invalid.
    Binding { binding: PathBuf },
    /// The project at `project` has the id of the one at `first`: a tenant serves a
    /// project id once.
    ProjectServedTwice { project: usize, first: usize },
    /// The project at `project` requires `provider`, which its binding has no entry for.
    Unbound { project: usize, provider: String },
    /// The binding has an entry for `provider`, which no project of the tenant that uses
    /// the binding declares.
    Undeclared { binding: PathBuf, provider: String },
    /// The `secret_env` of the binding's entry for `provider` is unset or empty; `served`
    /// when a project of the tenant declares the provider, so `serve` builds it.
    Secret {
        binding: PathBuf,
        provider: String,
        served: bool,
    },
    /// The SQLite `database` of the binding's entry for `provider` may not be served (one
    /// of ctxd's own files, or outside `allowed_roots`), or — found by `validate` — does
    /// not open or its query does not prepare; `served` as for [`ProblemKind::Secret`].
    Database {
        binding: PathBuf,
        provider: String,
        served: bool,
    },
}

impl ProblemKind {
    /// What the problem means for serving: decided here, once, for every command.
    pub(crate) fn severity(&self) -> Severity {
        match self {
            ProblemKind::ApiKey
            | ProblemKind::DigestKey
            | ProblemKind::TraceStore
            | ProblemKind::Project { .. }
            | ProblemKind::Binding { .. }
            | ProblemKind::ProjectServedTwice { .. }
            | ProblemKind::Secret { served: true, .. }
            | ProblemKind::Database { served: true, .. } => Severity::Fatal,
            ProblemKind::Unbound { .. } => Severity::Degraded,
            ProblemKind::Undeclared { .. }
            | ProblemKind::Secret { served: false, .. }
            | ProblemKind::Database { served: false, .. } => Severity::Warning,
        }
    }

    /// Whether the environment lacks what the server config itself needs.
    pub(crate) fn is_environment(&self) -> bool {
        matches!(
            self,
            ProblemKind::ApiKey | ProblemKind::DigestKey | ProblemKind::TraceStore
        )
    }

    /// Whether it concerns bindings, which `serve --fixtures` does not use.
    pub(crate) fn concerns_bindings(&self) -> bool {
        matches!(
            self,
            ProblemKind::Binding { .. }
                | ProblemKind::Unbound { .. }
                | ProblemKind::Undeclared { .. }
                | ProblemKind::Secret { .. }
                | ProblemKind::Database { .. }
        )
    }
}

/// One problem of a deployment. Displays as `file: path: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeploymentProblem {
    /// The file it is in, as given: the server config, a Project or a binding.
    pub(crate) file: String,
    /// Where in that file, and what.
    pub(crate) problem: Problem,
    /// The tenant it belongs to (index in `ServerConfig::tenants`); `None` for the
    /// digest key.
    pub(crate) tenant: Option<usize>,
    pub(crate) kind: ProblemKind,
}

impl DeploymentProblem {
    pub(crate) fn severity(&self) -> Severity {
        self.kind.severity()
    }
}

impl fmt::Display for DeploymentProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.problem)
    }
}

/// A server config's tenants with what they serve, and every problem found.
#[derive(Debug)]
pub(crate) struct Deployment {
    /// One per tenant of the config, in its order.
    pub(crate) tenants: Vec<TenantDeployment>,
    /// Every problem, in the config's order: the environment first, then each tenant's
    /// projects in order (with the binding each names first), then its bindings.
    pub(crate) problems: Vec<DeploymentProblem>,
}

/// One tenant's Projects and Bindings, as far as they loaded.
#[derive(Debug)]
pub(crate) struct TenantDeployment {
    /// Index in `ServerConfig::tenants`.
    pub(crate) index: usize,
    pub(crate) id: String,
    /// Each project that loaded, in the config's order. A project id served twice is
    /// here twice, and a [`ProblemKind::ProjectServedTwice`].
    pub(crate) projects: Vec<ResolvedProject>,
    /// Each binding file that loaded, once, in the order the projects name them.
    pub(crate) bindings: Vec<Arc<ResolvedBinding>>,
}

impl TenantDeployment {
    /// Whether a project of the tenant that uses the binding at `binding` declares
    /// `provider`: `serve` builds that entry.
    pub(crate) fn serves(&self, binding: &Path, provider: &str) -> bool {
        serves(&self.projects, binding, provider)
    }
}

fn serves(projects: &[ResolvedProject], binding: &Path, provider: &str) -> bool {
    projects.iter().any(|project| {
        project.binding.as_ref().is_some_and(|b| b.path == binding)
            && project.providers.iter().any(|entry| entry.id == provider)
    })
}

/// A binding file that loaded.
#[derive(Debug)]
pub(crate) struct ResolvedBinding {
    /// As the config names it; one provider actor runs per tenant × file × provider id.
    pub(crate) path: PathBuf,
    pub(crate) binding: Binding,
}

/// A project that loaded, with the binding entries that serve it.
#[derive(Debug)]
pub(crate) struct ResolvedProject {
    /// Index in the tenant's `projects`.
    pub(crate) index: usize,
    /// The Project (or Build) file.
    pub(crate) path: PathBuf,
    pub(crate) project: Project,
    /// The Build's JSON, which traces record so that replays run the same build.
    pub(crate) build_json: String,
    /// Its binding, when that loaded.
    pub(crate) binding: Option<Arc<ResolvedBinding>>,
    /// The entry of each provider the project requires that its binding serves, in the
    /// project's order; the others are [`ProblemKind::Unbound`].
    pub(crate) providers: Vec<ProviderBinding>,
}

impl Deployment {
    /// Loads every tenant's Projects and Bindings and checks them against each other and
    /// against `env`, collecting every problem.
    pub(crate) fn resolve(config: &ServerConfig, env: &EnvVars) -> Deployment {
        let mut problems = ProblemList {
            config_file: &config.file,
            list: Vec::new(),
        };
        check_environment(config, env, &mut problems);
        let own_files = OwnFiles::of(config);
        let tenants = config
            .tenants
            .iter()
            .enumerate()
            .map(|(index, tenant)| resolve_tenant(index, tenant, env, &own_files, &mut problems))
            .collect();
        Deployment {
            tenants,
            problems: problems.list,
        }
    }

    /// The problems of the tenant at `index`.
    pub(crate) fn problems_of(&self, index: usize) -> impl Iterator<Item = &DeploymentProblem> {
        self.problems
            .iter()
            .filter(move |p| p.tenant == Some(index))
    }
}

/// Collects the problems of one resolution.
struct ProblemList<'a> {
    /// The server config's file, for problems found in it.
    config_file: &'a str,
    list: Vec<DeploymentProblem>,
}

impl ProblemList<'_> {
    fn add(
        &mut self,
        file: impl Into<String>,
        problem: Problem,
        tenant: Option<usize>,
        kind: ProblemKind,
    ) {
        self.list.push(DeploymentProblem {
            file: file.into(),
            problem,
            tenant,
            kind,
        });
    }

    fn in_config(&mut self, problem: Problem, tenant: Option<usize>, kind: ProblemKind) {
        let file = self.config_file.to_owned();
        self.add(file, problem, tenant, kind);
    }
}

/// The environment's problems, each with the tenant whose API key it concerns.
fn check_environment(config: &ServerConfig, env: &EnvVars, problems: &mut ProblemList<'_>) {
    for found in config.environment_problems(env) {
        let (tenant, kind) = match found.need {
            EnvironmentNeed::ApiKey { tenant } => (Some(tenant), ProblemKind::ApiKey),
            EnvironmentNeed::DigestKey => (None, ProblemKind::DigestKey),
            EnvironmentNeed::Admin => (None, ProblemKind::ApiKey),
            EnvironmentNeed::TraceStore => (None, ProblemKind::TraceStore),
        };
        problems.in_config(found.problem, tenant, kind);
    }
    if let Some(problem) = config.trace.digest_key_source().refusal(env) {
        problems.in_config(problem, None, ProblemKind::DigestKey);
    }
}

/// One binding file as a tenant's projects use it.
struct BindingUse {
    path: PathBuf,
    binding: Option<Arc<ResolvedBinding>>,
    /// Provider ids declared by the projects using this binding.
    declared: BTreeSet<String>,
    /// Whether every project using it loaded, so `declared` is complete.
    all_projects_loaded: bool,
}

fn resolve_tenant(
    index: usize,
    tenant: &TenantConfig,
    env: &EnvVars,
    own_files: &OwnFiles,
    problems: &mut ProblemList<'_>,
) -> TenantDeployment {
    let mut uses: Vec<BindingUse> = Vec::new();
    let mut projects: Vec<ResolvedProject> = Vec::new();
    let mut first_of_id: HashMap<String, usize> = HashMap::new();
    for (project_index, reference) in tenant.projects.iter().enumerate() {
        let project_file = reference.path.display().to_string();
        let at = key_path(&index_path("tenants", index), "projects");
        let at = index_path(&at, project_index);
        let kind = ProblemKind::Project {
            project: project_index,
        };
        let project = match Project::load(&reference.path) {
            Ok(project) => Some(project),
            // A file that cannot be read is named with the config key that points to it.
            Err(LoadError::Read { path, source }) => {
                let problem = Problem::new(
                    key_path(&at, "path"),
                    format!("cannot read {path}: {source}"),
                );
                problems.in_config(problem, Some(index), kind);
                None
            }
            Err(LoadError::Invalid { errors, .. }) => {
                for problem in errors.0 {
                    problems.add(&project_file, problem, Some(index), kind.clone());
                }
                None
            }
        };
        let position = match uses.iter().position(|u| u.path == reference.binding) {
            Some(position) => position,
            None => {
                let key = key_path(&at, "binding");
                uses.push(load_binding(index, &reference.binding, &key, problems));
                uses.len() - 1
            }
        };
        let use_ = &mut uses[position];
        let Some(project) = project else {
            use_.all_projects_loaded = false;
            continue;
        };
        if let Some(&first) = first_of_id.get(project.id()) {
            problems.in_config(
                Problem::new(
                    format!("tenants[{index}].projects[{project_index}].path"),
                    format!(
                        "project id {:?} is already served by tenant {:?} at projects[{first}]",
                        project.id(),
                        tenant.id
                    ),
                ),
                Some(index),
                ProblemKind::ProjectServedTwice {
                    project: project_index,
                    first,
                },
            );
        } else {
            first_of_id.insert(project.id().to_owned(), project_index);
        }
        use_.declared
            .extend(project.providers.iter().map(|spec| spec.id.clone()));
        let mut providers = Vec::new();
        if let Some(binding) = &use_.binding {
            let binding_file = binding.path.display().to_string();
            for spec in &project.providers {
                match binding.binding.providers.get(&spec.id) {
                    Some(entry) => providers.push(entry.clone()),
                    None => problems.add(
                        &binding_file,
                        Problem::new(
                            "providers",
                            format!(
                                "provider {:?} required by the project has no binding; its layers would be NOT_BOUND (project {:?}, {project_file})",
                                spec.id,
                                project.id(),
                            ),
                        ),
                        Some(index),
                        ProblemKind::Unbound {
                            project: project_index,
                            provider: spec.id.clone(),
                        },
                    ),
                }
            }
        }
        projects.push(ResolvedProject {
            index: project_index,
            path: reference.path.clone(),
            build_json: project.build().to_json_pretty(),
            project,
            binding: use_.binding.clone(),
            providers,
        });
    }
    for use_ in &uses {
        check_binding_use(index, tenant, use_, env, &projects, problems);
        check_databases(index, use_, own_files, &projects, problems);
    }
    TenantDeployment {
        index,
        id: tenant.id.clone(),
        projects,
        bindings: uses.into_iter().filter_map(|u| u.binding).collect(),
    }
}

/// Loads the binding file at `path`, which the config names at `key`: a file that cannot
/// be read is named with that key, every problem of one that can at its own path.
fn load_binding(
    tenant: usize,
    path: &Path,
    key: &str,
    problems: &mut ProblemList<'_>,
) -> BindingUse {
    let kind = ProblemKind::Binding {
        binding: path.to_path_buf(),
    };
    let binding = if let Err(error) = std::fs::metadata(path) {
        let message = format!("cannot read {}: {error}", path.display());
        problems.in_config(Problem::new(key, message), Some(tenant), kind);
        None
    } else {
        match Binding::load(path) {
            Ok(binding) => Some(Arc::new(ResolvedBinding {
                path: path.to_path_buf(),
                binding,
            })),
            Err(errors) => {
                for problem in errors.errors {
                    problems.add(&errors.file, problem, Some(tenant), kind.clone());
                }
                None
            }
        }
    };
    BindingUse {
        path: path.to_path_buf(),
        binding,
        declared: BTreeSet::new(),
        all_projects_loaded: true,
    }
}

/// Entries no project declares, and secrets the environment lacks. A missing secret
/// stops `serve` only for an entry it builds: one a project of the tenant declares.
fn check_binding_use(
    tenant_index: usize,
    tenant: &TenantConfig,
    use_: &BindingUse,
    env: &EnvVars,
    projects: &[ResolvedProject],
    problems: &mut ProblemList<'_>,
) {
    let Some(binding) = &use_.binding else {
        return;
    };
    let binding_file = binding.path.display().to_string();
    if use_.all_projects_loaded {
        for id in binding.binding.providers.keys() {
            if !use_.declared.contains(id) {
                problems.add(
                    &binding_file,
                    Problem::new(
                        key_path("providers", id),
                        format!(
                            "provider {id:?} is not declared by any project of tenant {:?} that uses this binding",
                            tenant.id
                        ),
                    ),
                    Some(tenant_index),
                    ProblemKind::Undeclared {
                        binding: binding.path.clone(),
                        provider: id.clone(),
                    },
                );
            }
        }
    }
    for (id, name) in binding.binding.secret_envs() {
        let state = match env.get(name) {
            None => "is not set",
            Some("") => "is empty",
            Some(_) => continue,
        };
        let problem = match binding.binding.providers.get(id).map(|p| &p.kind) {
            Some(kind @ ProviderKind::Postgres { .. }) => databases::at_key(
                id,
                kind.secret_env_key(),
                format!(
                    "environment variable {name:?} {state}: provider {id:?} has no connection string"
                ),
            ),
            kind => secret_problem(
                id,
                kind.map_or("secret_env", ProviderKind::secret_env_key),
                name,
                state,
            ),
        };
        problems.add(
            &binding_file,
            problem,
            Some(tenant_index),
            ProblemKind::Secret {
                binding: binding.path.clone(),
                provider: id.to_owned(),
                served: serves(projects, &binding.path, id),
            },
        );
    }
}

/// The secret reference `key` (`secret_env`, `auth_env`) of `provider` lacks its value
/// (`state`: `is not set`, `is empty`).
fn secret_problem(provider: &str, key: &str, name: &str, state: &str) -> Problem {
    databases::at_key(
        provider,
        key,
        format!("environment variable {name:?} {state}: provider {provider:?} cannot authenticate"),
    )
}

/// SQLite entries whose database may not be served: one of ctxd's own files, or outside
/// the binding's `allowed_roots`.
fn check_databases(
    tenant_index: usize,
    use_: &BindingUse,
    own_files: &OwnFiles,
    projects: &[ResolvedProject],
    problems: &mut ProblemList<'_>,
) {
    let Some(binding) = &use_.binding else {
        return;
    };
    for entry in binding.binding.providers.values() {
        let ProviderKind::Sqlite { database, .. } = &entry.kind else {
            continue;
        };
        let Some(refusal) = own_files.refusal(database, &binding.binding.allowed_roots) else {
            continue;
        };
        problems.add(
            binding.path.display().to_string(),
            databases::at_key(&entry.id, "database", refusal),
            Some(tenant_index),
            ProblemKind::Database {
                binding: binding.path.clone(),
                provider: entry.id.clone(),
                served: serves(projects, &binding.path, &entry.id),
            },
        );
    }
}

#[cfg(test)]
pub(crate) mod test_files;
/// Why the implementation a binding names could not be built. Messages never include a
/// secret.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error("secret env var {0} is not set")]
    SecretNotSet(String),
    #[error(transparent)]
    Http(#[from] HttpSetupError),
    #[error(transparent)]
    Sqlite(#[from] SqliteSetupError),
    #[error(transparent)]
    Postgres(#[from] PostgresSetupError),
    /// The MCP token's env var (`auth_env`) is not set.
    #[error("environment variable {0:?} is not set")]
    McpTokenNotSet(String),
}

impl SetupError {
    /// The failure as a problem at the binding key it is about — `providers.<id>.database`,
    /// `.query`, `.endpoint`, `.secret_env`, or the provider's table — in the words
    /// `validate` uses, so `serve`, `validate` and `doctor` say it alike.
    pub(crate) fn problem(&self, provider: &str) -> Problem {
        match self {
            SetupError::SecretNotSet(name) => {
                secret_problem(provider, "secret_env", name, "is not set")
            }
            SetupError::Http(error) => {
                let key = match error {
                    HttpSetupError::EmptySecret | HttpSetupError::SecretNotAHeaderValue => {
                        "secret_env"
                    }
                    HttpSetupError::Connections(Http1SetupError::Tls(_)) => {
                        return Problem::new(key_path("providers", provider), error.to_string());
                    }
                    _ => "endpoint",
                };
                databases::at_key(provider, key, error.to_string())
            }
            SetupError::Sqlite(error) => databases::at_key(provider, error.key(), error.reason()),
            SetupError::Postgres(error) => databases::at_key(provider, error.key(), error.reason()),
            SetupError::McpTokenNotSet(name) => {
                secret_problem(provider, "auth_env", name, "is not set")
            }
        }
    }
}

/// Builds the implementation a binding names, as `serve` does at start-up: the HTTP
/// client with the secret read from `env`, or the SQLite file opened read-only with its
/// query prepared — so a broken binding stops start-up instead of failing turns.
pub(crate) async fn build_implementation(
    binding: &ProviderBinding,
    env: &EnvVars,
) -> Result<Implementation, SetupError> {
    match &binding.kind {
        ProviderKind::Http {
            endpoint,
            secret_env,
        } => {
            let secret = match secret_env {
                Some(name) => Some(Secret::new(
                    env.get(name)
                        .ok_or_else(|| SetupError::SecretNotSet(name.clone()))?,
                )),
                None => None,
            };
            let provider =
                HttpProvider::new(endpoint.clone(), secret, &binding.pool, binding.timeout)?;
            Ok(Implementation::Http(provider))
        }
        ProviderKind::Sqlite { database, query } => {
            let provider = SqliteProvider::open(database, query, &binding.pool).await?;
            Ok(Implementation::Sqlite(provider))
        }
        ProviderKind::Rest(spec) => {
            let secret = match spec.auth.secret_env() {
                Some(name) => Some(Secret::new(
                    env.get(name)
                        .ok_or_else(|| SetupError::SecretNotSet(name.to_owned()))?,
                )),
                None => None,
            };
            let provider = RestProvider::new(spec, secret, &binding.pool, binding.timeout)?;
            Ok(Implementation::Rest(provider))
        }
        ProviderKind::Postgres { dsn_env, query } => {
            let provider =
                PostgresProvider::open(dsn_env, env.get(dsn_env), query, &binding.pool).await?;
            Ok(Implementation::Postgres(provider))
        }
        ProviderKind::Mcp(mcp) => {
            let connection =
                crate::providers::mcp::connection_for(mcp, |name| env.get(name).map(str::to_owned))
                    .map_err(SetupError::McpTokenNotSet)?;
            Ok(Implementation::Mcp(
                crate::providers::mcp::McpProvider::new(
                    &binding.id,
                    mcp,
                    connection,
                    Some(binding.max_concurrency),
                    binding_masks(binding, env),
                ),
            ))
        }
    }
}

/// The binding's own secrets as they may come back in an upstream's text: the env
/// values it sends or gives away (a bearer or API token, a basic-auth password and its
/// encoded `user:password`, a DSN's password, an MCP token, the values of the variables
/// a stdio child is given). Every text from the binding's upstream is shown through
/// these masks ([`crate::providers::untrusted`]). Unset variables add nothing: the
/// binding cannot start without them anyway.
pub(crate) fn binding_masks(binding: &ProviderBinding, env: &EnvVars) -> Masks {
    let mut masks = Masks::none();
    match &binding.kind {
        ProviderKind::Http { secret_env, .. } => {
            if let Some(secret) = secret_env.as_deref().and_then(|name| env.get(name)) {
                masks.secret(secret);
            }
        }
        ProviderKind::Sqlite { .. } => {}
        ProviderKind::Rest(spec) => {
            if let Some(secret) = spec.auth.secret_env().and_then(|name| env.get(name)) {
                masks.secret(secret);
                if let Some(username) = spec.auth.basic_username() {
                    let pair = format!("{username}:{secret}");
                    masks.secret(&base64::engine::general_purpose::STANDARD.encode(pair));
                }
            }
        }
        ProviderKind::Postgres { dsn_env, .. } => {
            if let Some(dsn) = env.get(dsn_env) {
                let config = dsn.parse::<tokio_postgres::Config>().ok();
                if let Some(password) = config.as_ref().and_then(|c| c.get_password()) {
                    masks.secret(&String::from_utf8_lossy(password));
                }
            }
        }
        ProviderKind::Mcp(mcp) => match &mcp.transport {
            McpTransport::Http { auth_env, .. } => {
                if let Some(token) = auth_env.as_deref().and_then(|name| env.get(name)) {
                    masks.secret(token);
                }
            }
            McpTransport::Stdio { env: names, .. } => {
                for value in names.iter().filter_map(|name| env.get(name)) {
                    masks.secret(value);
                }
            }
        },
    }
    masks
}

#[cfg(test)]
mod tests;
