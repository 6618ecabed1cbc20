//! Connecting, for `validate`: every `postgres` entry whose connection string is set is
//! opened as `serve` opens it at start-up — the TLS rule, a connection, the query
//! prepared and dry-run read-only ([`PostgresProvider::open`]) — then closed, so that
//! what `serve` would refuse, `validate` reports with the server's words at the same key.

use super::{Deployment, DeploymentProblem, ProblemKind, SetupError};
use crate::config::{EnvVars, ProviderKind};
use crate::providers::postgres::PostgresProvider;

impl Deployment {
    /// Opens every PostgreSQL entry of the tenants' bindings whose `dsn_env` is set (an
    /// unset one is already a problem); each failure is a [`ProblemKind::Database`]
    /// problem at the entry's `dsn_env` or `query` key. Runs on a runtime of its own, on
    /// a thread of its own, so it may be called from anywhere.
    pub(crate) fn inspect_servers(&mut self, env: &EnvVars) {
        let mut entries = Vec::new();
        for tenant in &self.tenants {
            for binding in &tenant.bindings {
                for entry in binding.binding.providers.values() {
                    let ProviderKind::Postgres { dsn_env, query } = &entry.kind else {
                        continue;
                    };
                    let Some(dsn) = env.get(dsn_env).filter(|dsn| !dsn.is_empty()) else {
                        continue;
                    };
                    entries.push((
                        tenant.index,
                        binding.path.clone(),
                        entry.clone(),
                        dsn_env.clone(),
                        dsn.to_owned(),
                        query.clone(),
                        tenant.serves(&binding.path, &entry.id),
                    ));
                }
            }
        }
        if entries.is_empty() {
            return;
        }
        let found = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return Vec::new();
            };
            runtime.block_on(async {
                let mut found = Vec::new();
                for (tenant, path, entry, dsn_env, dsn, query, served) in entries {
                    match PostgresProvider::open(&dsn_env, Some(&dsn), &query, &entry.pool).await {
                        Ok(provider) => provider.close(),
                        Err(error) => found.push(DeploymentProblem {
                            file: path.display().to_string(),
                            problem: SetupError::Postgres(error).problem(&entry.id),
                            tenant: Some(tenant),
                            kind: ProblemKind::Database {
                                binding: path.clone(),
                                provider: entry.id.clone(),
                                served,
                            },
                        }),
                    }
                }
                found
            })
        })
        .join()
        .unwrap_or_default();
        self.problems.extend(found);
    }
}
