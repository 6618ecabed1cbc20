//! The `postgres` entry of a binding: the env var that holds the connection string (never
//! the string itself) and the query. What the server says about the query — whether it
//! prepares, its parameters, its columns, whether it writes — is checked when the
//! provider is opened, against the server.

use super::{Problems, ProviderKind, RawIdentity, key_path};
use serde_json::{Value as Json, json};

/// Keys that would hold a connection string inline: refused, the value never shown.
const INLINE_DSN_KEYS: &[&str] = &["dsn", "url", "connection_string", "database_url"];

/// Refuses (and removes) a connection string written in the provider's table: it may
/// carry a password, so it belongs in the environment. An mcp provider's `url` is its
/// endpoint, checked by the endpoint rules (which refuse credentials in it).
pub(super) fn refuse_inline_dsn(
    problems: &mut Problems,
    path: &str,
    table: &mut toml::Table,
    is_mcp: bool,
) {
    for key in INLINE_DSN_KEYS {
        if is_mcp && *key == "url" {
            continue;
        }
        if table.remove(*key).is_some() {
            problems.add(
                &key_path(path, key),
                "an inline connection string is refused (it may carry a password): put it in an environment variable and name it with dsn_env = \"VAR_NAME\"",
            );
        }
    }
}

/// The `postgres` kind, and for the digest what the binding wrote.
pub(super) fn check(
    problems: &mut Problems,
    path: &str,
    raw: &RawIdentity,
) -> Option<(ProviderKind, Json)> {
    for (key, present) in [
        ("endpoint", raw.endpoint.is_some()),
        ("secret_env", raw.secret_env.is_some()),
        ("database", raw.database.is_some()),
    ] {
        if present {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is not a setting of postgres providers (the connection string is named by dsn_env)"),
            );
        }
    }
    let dsn_path = key_path(path, "dsn_env");
    let dsn_env = match &raw.dsn_env {
        None => {
            problems.add(
                &dsn_path,
                "is required for a postgres provider: the environment variable holding the connection string",
            );
            None
        }
        Some(name) => problems.env_name(&dsn_path, name).then(|| name.clone()),
    };
    let query_path = key_path(path, "query");
    let query = match &raw.query {
        None => {
            problems.add(
                &query_path,
                "is required for a postgres provider: a SELECT using $1 for the lookup value",
            );
            None
        }
        Some(query) if query.trim().is_empty() => {
            problems.add(&query_path, "must not be empty");
            None
        }
        Some(query) => Some(query.clone()),
    };
    let (dsn_env, query) = (dsn_env?, query?);
    let written = json!({ "type": "postgres", "dsn_env": dsn_env, "query": query });
    Some((ProviderKind::Postgres { dsn_env, query }, written))
}

#[cfg(test)]
mod tests {
    use super::super::Binding;
    use super::*;
    use crate::providers::RecycleCheck;
    use std::path::Path;
    use std::time::Duration;

    fn parse(extra: &str) -> Result<Binding, crate::config::ConfigErrors> {
        let text = format!(
            "revision = \"r1\"\n[providers.orders]\ntype = \"postgres\"\nversion = \"v1\"\n{extra}\n"
        );
        Binding::parse(&text, Path::new("/srv"))
    }

    fn problems(extra: &str) -> Vec<String> {
        parse(extra)
            .unwrap_err()
            .errors
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn a_postgres_provider_names_its_dsn_env_and_query() {
        let binding = parse(
            "dsn_env = \"ORDERS_DSN\"\nquery = \"SELECT id FROM orders WHERE customer = $1\"\n\
             pool = { max_size = 8, connect_timeout_ms = 2000, recycle = \"verified\" }",
        )
        .unwrap();
        let orders = &binding.providers["orders"];
        assert_eq!(
            orders.kind,
            ProviderKind::Postgres {
                dsn_env: "ORDERS_DSN".to_owned(),
                query: "SELECT id FROM orders WHERE customer = $1".to_owned(),
            }
        );
        assert_eq!(orders.kind.secret_env(), Some("ORDERS_DSN"));
        assert_eq!(orders.kind.secret_env_key(), "dsn_env");
        assert_eq!(orders.pool.max_size, 8);
        assert_eq!(orders.pool.connect_timeout, Duration::from_millis(2000));
        assert_eq!(orders.pool.recycle, RecycleCheck::Verified);
        assert_eq!(
            binding.secret_envs().collect::<Vec<_>>(),
            [("orders", "ORDERS_DSN")]
        );
    }

    #[test]
    fn required_keys_and_keys_of_other_types() {
        let found = problems("endpoint = \"https://x\"\ndatabase = \"x.db\"");
        for needle in [
            "providers.orders.dsn_env: is required for a postgres provider",
            "providers.orders.query: is required for a postgres provider",
            "providers.orders.endpoint: `endpoint` is not a setting of postgres providers",
            "providers.orders.database: `database` is not a setting of postgres providers",
        ] {
            assert!(
                found.iter().any(|p| p.starts_with(needle)),
                "{needle} in {found:#?}"
            );
        }
        let found = problems("dsn_env = \"1BAD\"\nquery = \" \"");
        assert!(
            found
                .iter()
                .any(|p| p.contains("is not an environment variable name"))
        );
        assert!(found.iter().any(|p| p.contains("query: must not be empty")));
        let found = problems(
            "dsn_env = \"D\"\nquery = \"SELECT $1 AS id\"\npool = { recycle = \"sometimes\" }",
        );
        assert!(
            found
                .iter()
                .any(|p| p.contains("pool.recycle: \"sometimes\" is not a recycle check"))
        );
    }

    #[test]
    fn an_inline_connection_string_is_refused_without_echoing_it() {
        for line in [
            "dsn = \"host=db.internal user=reader password=hunter2hunter2\"",
            "url = \"postgres://reader:hunter2hunter2@db.internal/orders\"",
        ] {
            let errors = parse(&format!(
                "dsn_env = \"D\"\nquery = \"SELECT $1 AS id\"\n{line}"
            ))
            .unwrap_err()
            .to_string();
            assert!(errors.contains("dsn_env"), "{errors}");
            assert!(!errors.contains("hunter2"), "{errors}");
        }
    }

    #[test]
    fn the_shipped_example_loads() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("config/bindings/example-postgres.toml");
        let example = Binding::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            example.secret_envs().collect::<Vec<_>>(),
            [("orders", "SHOP_DB_DSN"), ("tickets", "SUPPORT_DB_DSN")]
        );
        assert!(
            example
                .providers
                .values()
                .all(|p| p.kind.type_name() == "postgres")
        );
    }

    #[test]
    fn pool_settings_of_postgres_are_in_the_digest() {
        let base = "dsn_env = \"D\"\nquery = \"SELECT $1 AS id\"\n";
        let fast = parse(base).unwrap();
        let verified = parse(&format!("{base}pool = {{ recycle = \"verified\" }}")).unwrap();
        assert_ne!(fast.digest, verified.digest);
    }
}
