//! `ctxd validate [--config F]`: checks the server config, every tenant's Projects and
//! Bindings, that each project's providers are bound (and nothing else is), and that the
//! environment holds every referenced secret and a digest key `serve` accepts — the
//! deployment as [`Deployment::resolve`] finds it — then opens every SQLite database
//! read-only and prepares its query as `serve` does ([`Deployment::inspect_databases`]),
//! and connects to every PostgreSQL server to prepare and dry-run its query
//! ([`Deployment::inspect_servers`]): what `serve` would refuse, `validate` reports. Prints every problem, whatever its
//! severity, then a summary. Calls no HTTP provider (`ctxd doctor` does).

use crate::config::{ConfigErrors, EnvVars, ServerConfig};
use crate::deployment::Deployment;
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Clone, Args)]
pub(crate) struct ValidateArgs {
    /// The server config to check
    #[arg(long, default_value = "config/ctxd.toml")]
    pub(crate) config: PathBuf,
    /// Also print this provider's binding as it will be used: a `rest` preset expanded
    /// to its endpoint, path, params, headers, auth and mapping
    #[arg(long, value_name = "PROVIDER")]
    pub(crate) explain: Option<String>,
}

/// What `validate` found: problems as `file: path: message` lines, and what it checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) problems: Vec<String>,
    /// One line per file or pairing checked, for the operator to see the coverage.
    pub(crate) checked: Vec<String>,
    pub(crate) tenants: usize,
    pub(crate) projects: usize,
    /// Provider requirements of the checked projects.
    pub(crate) providers: usize,
}

impl Report {
    pub(crate) fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// `ok: 1 tenant, 1 project, 3 providers`, or `2 problems`.
    pub(crate) fn summary(&self) -> String {
        if self.is_ok() {
            format!(
                "ok: {}, {}, {}",
                count(self.tenants, "tenant"),
                count(self.projects, "project"),
                count(self.providers, "provider")
            )
        } else {
            count(self.problems.len(), "problem")
        }
    }

    fn problem(&mut self, line: String) {
        if !self.problems.contains(&line) {
            self.problems.push(line);
        }
    }

    fn config_errors(&mut self, errors: &ConfigErrors) {
        for line in errors.lines() {
            self.problem(line);
        }
    }
}

fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

pub(crate) fn run(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let report = check(&args.config, &EnvVars::from_process());
    let mut out = super::stdout();
    for line in &report.checked {
        writeln!(out, "checked {line}")?;
    }
    for line in &report.problems {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "{}", report.summary())?;
    if let Some(provider) = &args.explain {
        let explained = explain(&args.config, &EnvVars::from_process(), provider);
        if explained.is_empty() {
            writeln!(out, "provider {provider:?} is in no binding that loads")?;
            return Ok(ExitCode::from(1));
        }
        for text in explained {
            write!(out, "{text}")?;
        }
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Checks a server config and everything it references. Reads the files; takes the
/// environment as a map.
pub(crate) fn check(config: &Path, env: &EnvVars) -> Report {
    let mut report = Report::default();
    let config_file = config.display().to_string();
    let server = match ServerConfig::load(config) {
        Ok(server) => server,
        Err(errors) => {
            report.config_errors(&errors);
            return report;
        }
    };
    report.checked.push(format!(
        "{config_file}: server config (listen {}, {} tenant{})",
        server.server.listen,
        server.tenants.len(),
        if server.tenants.len() == 1 { "" } else { "s" }
    ));
    let mut deployment = Deployment::resolve(&server, env);
    deployment.inspect_databases();
    deployment.inspect_servers(env);
    report.tenants = server.tenants.len();
    report.projects = server.tenants.iter().map(|t| t.projects.len()).sum();
    for tenant in &deployment.tenants {
        for resolved in &tenant.projects {
            report.providers += resolved.project.providers.len();
            if let Some(binding) = &resolved.binding {
                report.checked.push(format!(
                    "tenant {:?}: project {:?} ({}) with binding {} (revision {:?}, {})",
                    tenant.id,
                    resolved.project.id(),
                    super::shown_path(&resolved.path),
                    super::shown_path(&binding.path),
                    binding.binding.revision,
                    binding.binding.digest
                ));
            }
        }
    }
    // Every problem, whatever its severity: validate is the strict check of the files.
    for problem in &deployment.problems {
        report.problem(problem.to_string());
    }
    report
}

/// `provider`'s entry in every binding that loads and binds it, as TOML with every
/// preset and default applied (env var names, never secret values), each after a
/// `# tenant …, binding …` comment line.
pub(crate) fn explain(config: &Path, env: &EnvVars, provider: &str) -> Vec<String> {
    let Ok(server) = ServerConfig::load(config) else {
        return Vec::new();
    };
    let deployment = Deployment::resolve(&server, env);
    let mut explained = Vec::new();
    for tenant in &deployment.tenants {
        for resolved in &tenant.bindings {
            let Some(bound) = resolved.binding.providers.get(provider) else {
                continue;
            };
            let body = match &bound.kind {
                crate::config::ProviderKind::Rest(spec) => spec.explain(provider),
                other => format!("[providers.{provider}]\ntype = {:?}\n", other.type_name()),
            };
            explained.push(format!(
                "# tenant {:?}, binding {}\n{body}",
                tenant.id,
                super::shown_path(&resolved.path)
            ));
        }
    }
    explained
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployment::test_files::{CUSTOMER_DATA, ORDERS, PROJECT};
    use std::fs;

    /// A deployment in a temp dir: `config/ctxd.toml`, `project.json`, and
    /// `config/bindings/acme.toml` holding `binding_tables`.
    struct Deployment {
        dir: tempfile::TempDir,
    }

    impl Deployment {
        fn new(trace: &str, binding_tables: &str) -> Deployment {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir_all(dir.path().join("config/bindings")).unwrap();
            let config = format!(
                "[trace]\n{trace}\n[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n[[tenants.projects]]\npath = \"../project.json\"\nbinding = \"bindings/acme.toml\"\n"
            );
            fs::write(dir.path().join("config/ctxd.toml"), config).unwrap();
            fs::write(dir.path().join("project.json"), PROJECT).unwrap();
            fs::write(
                dir.path().join("config/bindings/acme.toml"),
                format!("revision = \"r1\"\n{binding_tables}"),
            )
            .unwrap();
            // The database the `orders` entry names, with the table its query reads.
            rusqlite::Connection::open(dir.path().join("config/bindings/orders.db"))
                .unwrap()
                .execute_batch("CREATE TABLE orders (id TEXT, customer_id TEXT);")
                .unwrap();
            Deployment { dir }
        }

        fn standard() -> Deployment {
            Deployment::new(
                "generate_digest_key = true",
                &format!("{CUSTOMER_DATA}{ORDERS}"),
            )
        }

        fn config(&self) -> PathBuf {
            self.dir.path().join("config/ctxd.toml")
        }

        fn path(&self, relative: &str) -> String {
            self.dir.path().join(relative).display().to_string()
        }

        fn check(&self, env: &[(&str, &str)]) -> Report {
            check(&self.config(), &env.iter().copied().collect())
        }
    }

    const ENV: &[(&str, &str)] = &[
        ("CRM_TOKEN", "crm-secret-value"),
        ("ACME_KEY", "acme-key-value"),
    ];

    fn assert_only_problem(report: &Report, expected: &str) {
        assert_eq!(report.problems, [expected.to_owned()], "{report:#?}");
        assert_eq!(report.summary(), "1 problem");
    }

    #[test]
    fn a_complete_deployment_is_ok() {
        let deployment = Deployment::standard();
        let report = deployment.check(ENV);
        assert!(report.is_ok(), "{report:#?}");
        assert_eq!(report.summary(), "ok: 1 tenant, 1 project, 2 providers");
        assert_eq!(report.checked.len(), 2, "{report:#?}");
        assert!(
            report.checked[1].contains("project \"support\""),
            "{report:#?}"
        );
        assert!(report.checked[1].contains("sha256:"), "{report:#?}");
    }

    #[test]
    fn a_missing_secret_env_var_is_a_problem() {
        let deployment = Deployment::standard();
        let report = deployment.check(&[("ACME_KEY", "acme-key-value")]);
        assert_only_problem(
            &report,
            &format!(
                "{}: providers.customer-data.secret_env: environment variable \"CRM_TOKEN\" is not set: provider \"customer-data\" cannot authenticate",
                deployment.path("config/bindings/acme.toml")
            ),
        );
        let report = deployment.check(&[("ACME_KEY", "k"), ("CRM_TOKEN", "")]);
        assert!(
            report.problems[0].contains("\"CRM_TOKEN\" is empty"),
            "{report:#?}"
        );
    }

    #[test]
    fn a_provider_without_binding_entry_is_a_problem() {
        let deployment = Deployment::new("generate_digest_key = true", CUSTOMER_DATA);
        let report = deployment.check(ENV);
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        let problem = &report.problems[0];
        assert!(
            problem.starts_with(&format!(
                "{}: providers: provider \"orders\" required by the project has no binding; its layers would be NOT_BOUND",
                deployment.path("config/bindings/acme.toml")
            )),
            "{problem}"
        );
    }

    #[test]
    fn a_binding_entry_no_project_declares_is_a_problem() {
        let tickets = "[providers.tickets]\ntype = \"http\"\nendpoint = \"https://tickets.internal/context\"\n";
        let deployment = Deployment::new(
            "generate_digest_key = true",
            &format!("{CUSTOMER_DATA}{ORDERS}{tickets}"),
        );
        let report = deployment.check(ENV);
        assert_only_problem(
            &report,
            &format!(
                "{}: providers.tickets: provider \"tickets\" is not declared by any project of tenant \"acme\" that uses this binding",
                deployment.path("config/bindings/acme.toml")
            ),
        );
    }

    #[test]
    fn environment_problems_of_the_config_are_reported() {
        let deployment = Deployment::new(
            "digest_key_env = \"CTXD_DIGEST_KEY\"",
            &format!("{CUSTOMER_DATA}{ORDERS}"),
        );
        let report = deployment.check(&[("CRM_TOKEN", "x")]);
        let config = deployment.config().display().to_string();
        assert_eq!(report.problems.len(), 2, "{report:#?}");
        assert!(report.problems[0].starts_with(&format!(
            "{config}: tenants[0].api_key_env: environment variable \"ACME_KEY\" is not set"
        )));
        assert!(report.problems[1].starts_with(&format!(
            "{config}: trace.digest_key_env: environment variable \"CTXD_DIGEST_KEY\" is not set"
        )));
        assert_eq!(report.summary(), "2 problems");
        // A digest key serve accepts: at least 32 bytes.
        let fixed = deployment.check(&[
            ("CRM_TOKEN", "x"),
            ("ACME_KEY", "y"),
            ("CTXD_DIGEST_KEY", &"z".repeat(32)),
        ]);
        assert!(fixed.is_ok(), "{fixed:#?}");
    }

    #[test]
    fn an_invalid_config_stops_the_check_with_every_problem() {
        let deployment = Deployment::standard();
        fs::write(deployment.config(), "[limits]\nmax_turn_ms = 1\n").unwrap();
        let report = deployment.check(ENV);
        let config = deployment.config().display().to_string();
        assert_eq!(
            report.problems,
            [
                format!("{config}: limits.max_turn_ms: 1 is out of range: use 50..=60000"),
                format!(
                    "{config}: tenants: at least one tenant is required: add a [[tenants]] table"
                ),
            ]
        );
        assert_eq!(report.tenants, 0);
    }

    #[test]
    fn project_and_binding_problems_carry_their_file() {
        let deployment = Deployment::standard();
        fs::write(
            deployment.dir.path().join("project.json"),
            r#"{"id": "support", "version": "1", "layers": [], "endpoint": "https://x"}"#,
        )
        .unwrap();
        fs::write(
            deployment.dir.path().join("config/bindings/acme.toml"),
            format!("revision = \"r1\"\n{CUSTOMER_DATA}{ORDERS}timeout_ms = 5\n"),
        )
        .unwrap();
        let report = deployment.check(ENV);
        let project = deployment.path("config/../project.json");
        let binding = deployment.path("config/bindings/acme.toml");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.starts_with(&format!("{project}: "))),
            "{report:#?}"
        );
        assert!(
            report.problems.contains(&format!(
                "{binding}: providers.orders.timeout_ms: 5 is out of range: use 50..=10000"
            )),
            "{report:#?}"
        );
        // Without a valid project, unknown entries cannot be judged: no false alarms.
        assert!(
            !report
                .problems
                .iter()
                .any(|p| p.contains("is not declared")),
            "{report:#?}"
        );
        assert!(!report.is_ok());
    }

    #[test]
    fn a_missing_file_is_named_with_the_config_key_that_points_to_it() {
        let deployment = Deployment::standard();
        fs::remove_file(deployment.dir.path().join("project.json")).unwrap();
        let report = deployment.check(ENV);
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        let config = deployment.path("config/ctxd.toml");
        let project = deployment.path("config/../project.json");
        assert!(
            report.problems[0].starts_with(&format!(
                "{config}: tenants[0].projects[0].path: cannot read {project}: "
            )),
            "{report:#?}"
        );

        let deployment = Deployment::standard();
        fs::remove_file(deployment.dir.path().join("config/bindings/acme.toml")).unwrap();
        let report = deployment.check(ENV);
        let config = deployment.path("config/ctxd.toml");
        let binding = deployment.path("config/bindings/acme.toml");
        assert!(
            report.problems[0].starts_with(&format!(
                "{config}: tenants[0].projects[0].binding: cannot read {binding}: "
            )),
            "{report:#?}"
        );
    }

    #[test]
    fn what_serve_refuses_of_a_sqlite_entry_is_a_problem() {
        let deployment = Deployment::standard();
        let binding = deployment.path("config/bindings/acme.toml");
        let database = deployment.path("config/bindings/orders.db");
        let with_orders = |orders: &str| {
            fs::write(
                deployment.dir.path().join("config/bindings/acme.toml"),
                format!("revision = \"r1\"\n{CUSTOMER_DATA}{orders}"),
            )
            .unwrap();
            deployment.check(ENV)
        };
        // A query that writes passes the binding's own rule (one statement, ?1 only) but
        // does not prepare read-only.
        let report = with_orders(&ORDERS.replace(
            "SELECT id FROM orders WHERE customer_id = ?1",
            "DELETE FROM orders WHERE customer_id = ?1 RETURNING id",
        ));
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        assert!(
            report.problems[0].starts_with(&format!(
                "{binding}: providers.orders.query: does not prepare as a read-only SELECT: "
            )),
            "{report:#?}"
        );
        let report = with_orders(&ORDERS.replace("FROM orders", "FROM missing"));
        assert!(
            report.problems[0].contains("providers.orders.query: does not prepare as a read-only SELECT: no such table: missing"),
            "{report:#?}"
        );
        // The database does not exist: nothing is created.
        fs::remove_file(&database).unwrap();
        let report = with_orders(ORDERS);
        assert_only_problem(
            &report,
            &format!("{binding}: providers.orders.database: {database}: the file does not exist"),
        );
        assert!(!Path::new(&database).exists());
    }

    #[test]
    fn a_digest_key_serve_refuses_is_a_problem() {
        let deployment = Deployment::new(
            "digest_key_env = \"CTXD_DIGEST_KEY\"",
            &format!("{CUSTOMER_DATA}{ORDERS}"),
        );
        let mut env = ENV.to_vec();
        env.push(("CTXD_DIGEST_KEY", "12345"));
        let report = deployment.check(&env);
        assert_only_problem(
            &report,
            &format!(
                "{}: trace.digest_key_env: environment variable \"CTXD_DIGEST_KEY\" is shorter than 32 bytes: serve refuses such a digest key",
                deployment.path("config/ctxd.toml")
            ),
        );
        assert!(!report.problems[0].contains("12345"));
    }

    #[test]
    fn the_trace_store_is_never_a_provider_database() {
        let deployment = Deployment::new(
            "store = \"sqlite:bindings/orders.db\"\ngenerate_digest_key = true",
            &format!("{CUSTOMER_DATA}{ORDERS}"),
        );
        let report = deployment.check(ENV);
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        let real = fs::canonicalize(deployment.path("config/bindings/orders.db")).unwrap();
        assert_eq!(
            report.problems[0],
            format!(
                "{}: providers.orders.database: {} is the trace store of {} (trace.store): a provider never serves ctxd's own records",
                deployment.path("config/bindings/acme.toml"),
                real.display(),
                deployment.path("config/ctxd.toml"),
            )
        );
    }

    #[test]
    fn a_project_served_twice_by_a_tenant_is_a_problem() {
        let deployment = Deployment::standard();
        fs::copy(
            deployment.dir.path().join("project.json"),
            deployment.dir.path().join("copy.json"),
        )
        .unwrap();
        let mut config = fs::read_to_string(deployment.config()).unwrap();
        config.push_str(
            "[[tenants.projects]]\npath = \"../copy.json\"\nbinding = \"bindings/acme.toml\"\n",
        );
        fs::write(deployment.config(), config).unwrap();
        let report = deployment.check(ENV);
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        assert!(
            report.problems[0]
                .contains("tenants[0].projects[1].path: project id \"support\" is already served"),
            "{report:#?}"
        );
    }

    #[test]
    fn summaries_count_in_words() {
        let report = Report {
            tenants: 2,
            projects: 1,
            providers: 0,
            ..Report::default()
        };
        assert_eq!(report.summary(), "ok: 2 tenants, 1 project, 0 providers");
    }

    #[test]
    fn the_shipped_config_passes_once_the_demo_fixtures_exist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let report = check(&root.join("config/ctxd.toml"), &EnvVars::default());
        // Only problems that the demo fixtures' absence can explain are tolerated.
        for problem in &report.problems {
            assert!(problem.contains("fixtures/demo/project.json"), "{problem}");
        }
        if report.is_ok() {
            assert_eq!(report.summary(), "ok: 1 tenant, 1 project, 3 providers");
        }
    }
}
