use super::test_files::{CUSTOMER_DATA, ORDERS, PROJECT};
use super::*;
use std::fs;

const TICKETS: &str = "[providers.tickets]\ntype = \"http\"\nendpoint = \"https://tickets.internal/context\"\nsecret_env = \"TICKETS_TOKEN\"\n";

const ENV: &[(&str, &str)] = &[
    ("CRM_TOKEN", "crm-secret-value"),
    ("TICKETS_TOKEN", "tickets-secret-value"),
    ("ACME_KEY", "acme-key-value"),
];

/// A config in a temp dir: `projects` (file name, JSON) served by tenant `acme` with
/// `bindings/acme.toml` holding `binding_tables`.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new(trace: &str, projects: &[(&str, &str)], binding_tables: &str) -> Files {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("bindings")).unwrap();
        let mut config =
            format!("[trace]\n{trace}\n[[tenants]]\nid = \"acme\"\napi_key_env = \"ACME_KEY\"\n");
        for (file, json) in projects {
            fs::write(dir.path().join(file), json).unwrap();
            config.push_str(&format!(
                "[[tenants.projects]]\npath = {file:?}\nbinding = \"bindings/acme.toml\"\n"
            ));
        }
        fs::write(dir.path().join("ctxd.toml"), config).unwrap();
        fs::write(
            dir.path().join("bindings/acme.toml"),
            format!("revision = \"r1\"\n{binding_tables}"),
        )
        .unwrap();
        Files { dir }
    }

    fn standard(binding_tables: &str) -> Files {
        Files::new(
            "generate_digest_key = true",
            &[("project.json", PROJECT)],
            binding_tables,
        )
    }

    fn config(&self) -> ServerConfig {
        ServerConfig::load(&self.dir.path().join("ctxd.toml")).unwrap()
    }

    fn resolve(&self, env: &[(&str, &str)]) -> Deployment {
        Deployment::resolve(&self.config(), &env.iter().copied().collect())
    }

    fn binding(&self) -> PathBuf {
        self.dir.path().join("bindings/acme.toml")
    }
}

fn kinds(deployment: &Deployment) -> Vec<(ProblemKind, Severity)> {
    deployment
        .problems
        .iter()
        .map(|p| (p.kind.clone(), p.severity()))
        .collect()
}

#[test]
fn a_complete_deployment_resolves_every_provider() {
    let files = Files::standard(&format!("{CUSTOMER_DATA}{ORDERS}"));
    let deployment = files.resolve(ENV);
    assert_eq!(deployment.problems, [], "{deployment:#?}");
    let [tenant] = deployment.tenants.as_slice() else {
        panic!("{deployment:#?}")
    };
    assert_eq!((tenant.index, tenant.id.as_str()), (0, "acme"));
    assert_eq!(tenant.bindings.len(), 1);
    assert_eq!(tenant.bindings[0].path, files.binding());
    let [project] = tenant.projects.as_slice() else {
        panic!("{tenant:#?}")
    };
    assert_eq!(project.index, 0);
    assert_eq!(project.project.id(), "support");
    assert_eq!(project.build_json, project.project.build().to_json_pretty());
    assert!(Arc::ptr_eq(
        project.binding.as_ref().unwrap(),
        &tenant.bindings[0]
    ));
    let ids: Vec<&str> = project.providers.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["customer-data", "orders"]);
}

#[test]
fn severities_are_a_property_of_the_kind() {
    let binding = PathBuf::from("b.toml");
    let provider = || "p".to_owned();
    let cases = [
        (ProblemKind::ApiKey, Severity::Fatal, false),
        (ProblemKind::DigestKey, Severity::Fatal, false),
        (ProblemKind::Project { project: 0 }, Severity::Fatal, false),
        (
            ProblemKind::Binding {
                binding: binding.clone(),
            },
            Severity::Fatal,
            true,
        ),
        (
            ProblemKind::ProjectServedTwice {
                project: 1,
                first: 0,
            },
            Severity::Fatal,
            false,
        ),
        (
            ProblemKind::Unbound {
                project: 0,
                provider: provider(),
            },
            Severity::Degraded,
            true,
        ),
        (
            ProblemKind::Undeclared {
                binding: binding.clone(),
                provider: provider(),
            },
            Severity::Warning,
            true,
        ),
        (
            ProblemKind::Secret {
                binding: binding.clone(),
                provider: provider(),
                served: true,
            },
            Severity::Fatal,
            true,
        ),
        (
            ProblemKind::Secret {
                binding: binding.clone(),
                provider: provider(),
                served: false,
            },
            Severity::Warning,
            true,
        ),
        (
            ProblemKind::Database {
                binding: binding.clone(),
                provider: provider(),
                served: true,
            },
            Severity::Fatal,
            true,
        ),
        (
            ProblemKind::Database {
                binding,
                provider: provider(),
                served: false,
            },
            Severity::Warning,
            true,
        ),
    ];
    for (kind, severity, concerns_bindings) in cases {
        assert_eq!(kind.severity(), severity, "{kind:?}");
        assert_eq!(kind.concerns_bindings(), concerns_bindings, "{kind:?}");
        assert_eq!(
            kind.is_environment(),
            matches!(kind, ProblemKind::ApiKey | ProblemKind::DigestKey),
            "{kind:?}"
        );
    }
}

#[test]
fn a_required_provider_without_an_entry_degrades_turns() {
    let files = Files::standard(CUSTOMER_DATA);
    let deployment = files.resolve(ENV);
    assert_eq!(
        kinds(&deployment),
        [(
            ProblemKind::Unbound {
                project: 0,
                provider: "orders".to_owned()
            },
            Severity::Degraded
        )]
    );
    let problem = &deployment.problems[0];
    assert_eq!(problem.tenant, Some(0));
    assert_eq!(problem.file, files.binding().display().to_string());
    assert_eq!(problem.problem.path, "providers");
    let ids: Vec<&str> = deployment.tenants[0].projects[0]
        .providers
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    assert_eq!(ids, ["customer-data"]);
}

#[test]
fn an_entry_no_project_declares_is_a_warning_and_so_is_its_missing_secret() {
    let files = Files::standard(&format!("{CUSTOMER_DATA}{ORDERS}{TICKETS}"));
    let deployment = files.resolve(&[("CRM_TOKEN", "x"), ("ACME_KEY", "y")]);
    let binding = files.binding();
    assert_eq!(
        kinds(&deployment),
        [
            (
                ProblemKind::Undeclared {
                    binding: binding.clone(),
                    provider: "tickets".to_owned()
                },
                Severity::Warning
            ),
            (
                ProblemKind::Secret {
                    binding,
                    provider: "tickets".to_owned(),
                    served: false
                },
                Severity::Warning
            ),
        ]
    );
    assert_eq!(deployment.problems[0].problem.path, "providers.tickets");
    assert_eq!(
        deployment.problems[1].problem.path,
        "providers.tickets.secret_env"
    );
}

#[test]
fn a_missing_secret_of_a_served_provider_is_fatal() {
    let files = Files::standard(&format!("{CUSTOMER_DATA}{ORDERS}"));
    let deployment = files.resolve(&[("ACME_KEY", "y"), ("CRM_TOKEN", "")]);
    assert_eq!(
        kinds(&deployment),
        [(
            ProblemKind::Secret {
                binding: files.binding(),
                provider: "customer-data".to_owned(),
                served: true
            },
            Severity::Fatal
        )]
    );
    assert!(
        deployment.problems[0]
            .to_string()
            .ends_with("providers.customer-data.secret_env: environment variable \"CRM_TOKEN\" is empty: provider \"customer-data\" cannot authenticate"),
        "{}",
        deployment.problems[0]
    );
}

#[test]
fn environment_problems_name_their_tenant() {
    let files = Files::new(
        "digest_key_env = \"DIGEST\"",
        &[("project.json", PROJECT)],
        &format!("{CUSTOMER_DATA}{ORDERS}"),
    );
    let deployment = files.resolve(&[("CRM_TOKEN", "x")]);
    let found: Vec<(ProblemKind, Option<usize>, String)> = deployment
        .problems
        .iter()
        .map(|p| (p.kind.clone(), p.tenant, p.problem.path.clone()))
        .collect();
    assert_eq!(
        found,
        [
            (
                ProblemKind::ApiKey,
                Some(0),
                "tenants[0].api_key_env".to_owned()
            ),
            (
                ProblemKind::DigestKey,
                None,
                "trace.digest_key_env".to_owned()
            ),
        ]
    );
    let config = files.dir.path().join("ctxd.toml").display().to_string();
    assert!(deployment.problems.iter().all(|p| p.file == config));
    assert_eq!(deployment.problems_of(0).count(), 1);
}

#[test]
fn file_problems_carry_their_file_and_what_they_concern() {
    let files = Files::standard(&format!("{CUSTOMER_DATA}{ORDERS}timeout_ms = 5\n"));
    fs::write(
        files.dir.path().join("project.json"),
        r#"{"id": "support", "version": "1", "layers": []}"#,
    )
    .unwrap();
    let deployment = files.resolve(ENV);
    let project_file = files.dir.path().join("project.json").display().to_string();
    let binding_file = files.binding().display().to_string();
    let project_problems: Vec<&DeploymentProblem> = deployment
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::Project { project: 0 })
        .collect();
    assert!(!project_problems.is_empty(), "{deployment:#?}");
    assert!(project_problems.iter().all(|p| p.file == project_file));
    assert!(
        project_problems
            .iter()
            .all(|p| p.problem.path.starts_with('$'))
    );
    assert!(deployment.problems.iter().any(|p| p.kind
        == ProblemKind::Binding {
            binding: files.binding()
        }
        && p.to_string()
            == format!(
                "{binding_file}: providers.orders.timeout_ms: 5 is out of range: use 50..=10000"
            )));
    // Without the project, which entries are declared is unknown: no false alarms.
    assert!(deployment.tenants[0].projects.is_empty());
    assert!(
        !deployment
            .problems
            .iter()
            .any(|p| matches!(p.kind, ProblemKind::Undeclared { .. }))
    );
}

#[test]
fn an_unreadable_project_is_one_problem_at_the_config_key_naming_it() {
    let files = Files::standard(&format!("{CUSTOMER_DATA}{ORDERS}"));
    fs::remove_file(files.dir.path().join("project.json")).unwrap();
    let deployment = files.resolve(ENV);
    let [problem] = deployment.problems.as_slice() else {
        panic!("{deployment:#?}")
    };
    assert_eq!(problem.kind, ProblemKind::Project { project: 0 });
    assert_eq!(
        problem.file,
        files.dir.path().join("ctxd.toml").display().to_string()
    );
    assert_eq!(problem.problem.path, "tenants[0].projects[0].path");
    let project = files.dir.path().join("project.json");
    assert!(
        problem
            .problem
            .message
            .starts_with(&format!("cannot read {}: ", project.display())),
        "{problem}"
    );
}

/// The `orders` entry with `database` replaced (written as in the binding), and extra
/// top-level lines before it.
fn orders_at(database: &str, top: &str) -> String {
    format!(
        "{top}{CUSTOMER_DATA}{}",
        ORDERS.replace(
            "database = \"orders.db\"",
            &format!("database = {database:?}")
        )
    )
}

fn database_problems(deployment: &Deployment) -> Vec<String> {
    deployment
        .problems
        .iter()
        .filter(|p| matches!(p.kind, ProblemKind::Database { .. }))
        .map(|p| p.problem.to_string())
        .collect()
}

#[test]
fn ctxd_own_files_are_never_a_provider_database() {
    // The store is `data/traces.db` beside the config; the binding is in `bindings/`.
    for (database, what) in [
        ("../data/traces.db", "is the trace store of"),
        (
            "../data/./traces.db-wal",
            "is the write-ahead log of the trace store",
        ),
        (
            "../data/traces.db-shm",
            "is the shared-memory index of the trace store",
        ),
        (
            "../data/traces.db-journal",
            "is the rollback journal of the trace store",
        ),
        (
            "../data/digest.key",
            "is the digest key kept beside the trace store",
        ),
    ] {
        let files = Files::new(
            "store = \"sqlite:data/traces.db\"\ngenerate_digest_key = true",
            &[("project.json", PROJECT)],
            &orders_at(database, ""),
        );
        let deployment = files.resolve(ENV);
        assert_eq!(
            kinds(&deployment),
            [(
                ProblemKind::Database {
                    binding: files.binding(),
                    provider: "orders".to_owned(),
                    served: true,
                },
                Severity::Fatal
            )],
            "{database}"
        );
        let problem = &database_problems(&deployment)[0];
        assert!(
            problem.starts_with("providers.orders.database: ") && problem.contains(what),
            "{database}: {problem}"
        );
        assert!(problem.ends_with("a provider never serves ctxd's own records"));
    }
}

#[cfg(unix)]
#[test]
fn a_link_to_the_trace_store_is_the_trace_store() {
    let files = Files::new(
        "store = \"sqlite:data/traces.db\"\ngenerate_digest_key = true",
        &[("project.json", PROJECT)],
        &orders_at("orders.db", ""),
    );
    fs::create_dir(files.dir.path().join("data")).unwrap();
    fs::write(files.dir.path().join("data/traces.db"), "").unwrap();
    std::os::unix::fs::symlink(
        files.dir.path().join("data/traces.db"),
        files.dir.path().join("bindings/orders.db"),
    )
    .unwrap();
    assert_eq!(database_problems(&files.resolve(ENV)).len(), 1);
    // A hard link is another name for the same file.
    fs::remove_file(files.dir.path().join("bindings/orders.db")).unwrap();
    fs::hard_link(
        files.dir.path().join("data/traces.db"),
        files.dir.path().join("bindings/orders.db"),
    )
    .unwrap();
    assert_eq!(database_problems(&files.resolve(ENV)).len(), 1);
}

#[test]
fn allowed_roots_confine_databases() {
    let inside = Files::standard(&orders_at("data/orders.db", "allowed_roots = [\"data\"]\n"));
    assert_eq!(inside.resolve(ENV).problems, []);

    for database in [
        "orders.db",
        "data/../orders.db",
        "../bindings/dataset/orders.db",
    ] {
        let files = Files::standard(&orders_at(database, "allowed_roots = [\"data\"]\n"));
        let problems = database_problems(&files.resolve(ENV));
        assert_eq!(problems.len(), 1, "{database}: {problems:?}");
        assert!(
            problems[0].contains("is outside allowed_roots ("),
            "{database}: {problems:?}"
        );
    }

    // A link inside a root that points outside it is outside.
    #[cfg(unix)]
    {
        let files = Files::standard(&orders_at("data/orders.db", "allowed_roots = [\"data\"]\n"));
        fs::create_dir(files.dir.path().join("bindings/data")).unwrap();
        fs::write(files.dir.path().join("elsewhere.db"), "").unwrap();
        std::os::unix::fs::symlink(
            files.dir.path().join("elsewhere.db"),
            files.dir.path().join("bindings/data/orders.db"),
        )
        .unwrap();
        assert_eq!(database_problems(&files.resolve(ENV)).len(), 1);
    }

    // Without allowed_roots, anywhere but ctxd's own files.
    let anywhere = Files::standard(&orders_at("../../elsewhere/orders.db", ""));
    assert_eq!(anywhere.resolve(ENV).problems, []);
}

#[test]
fn a_project_id_served_twice_points_at_both_and_shares_the_binding() {
    let files = Files::new(
        "generate_digest_key = true",
        &[("project.json", PROJECT), ("copy.json", PROJECT)],
        &format!("{CUSTOMER_DATA}{ORDERS}"),
    );
    let deployment = files.resolve(ENV);
    assert_eq!(
        kinds(&deployment),
        [(
            ProblemKind::ProjectServedTwice {
                project: 1,
                first: 0
            },
            Severity::Fatal
        )]
    );
    assert_eq!(
        deployment.problems[0].problem.path,
        "tenants[0].projects[1].path"
    );
    let tenant = &deployment.tenants[0];
    assert_eq!(tenant.projects.len(), 2);
    assert_eq!(tenant.bindings.len(), 1, "one binding file, loaded once");
    assert!(Arc::ptr_eq(
        tenant.projects[0].binding.as_ref().unwrap(),
        tenant.projects[1].binding.as_ref().unwrap()
    ));
}
