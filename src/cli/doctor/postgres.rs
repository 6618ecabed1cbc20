//! `doctor` for a `postgres` provider: the query was prepared and dry-run by the build
//! (as `serve` does); this connects again and tells the server version, whether the
//! connection uses TLS, and whether the role could write anywhere (a warning: the
//! read-only transaction is the guarantee, a read-only role a second one).

use super::{Report, SQLITE_CHECK_LIMIT};
use crate::config::ProviderBinding;
use crate::providers::postgres::PostgresProvider;
use crate::secrets::redact::redacted;

pub(super) async fn check_postgres(
    report: &mut Report,
    subject: &str,
    provider: &ProviderBinding,
    postgres: &PostgresProvider,
) {
    let server = match tokio::time::timeout(SQLITE_CHECK_LIMIT, postgres.report()).await {
        Ok(Ok(server)) => server,
        Ok(Err(problem)) => {
            report.fail(subject, redacted(&problem).into_owned());
            return;
        }
        Err(_) => {
            report.fail(
                subject,
                format!(
                    "the server did not answer within {} s",
                    SQLITE_CHECK_LIMIT.as_secs()
                ),
            );
            return;
        }
    };
    report.ok(
        subject,
        format!(
            "PostgreSQL {} answers; the query prepares with $1 as its only parameter and runs read-only (version {})",
            server.version,
            provider.version.as_deref().unwrap_or("-")
        ),
    );
    match (server.tls, postgres.tls_required()) {
        (true, _) => report.ok(subject, "the connection uses TLS (certificate and host verified)"),
        (false, false) => report.ok(
            subject,
            "the connection does not use TLS, which is allowed only to a loopback host or a Unix socket",
        ),
        (false, true) => report.fail(subject, "TLS is required but the connection does not use it"),
    }
    if server.role_can_write {
        report.warn(
            subject,
            format!(
                "role {:?} can write (superuser, a write privilege on a table, CREATE on a schema, or membership in a role that writes server files or runs programs, which a read-only transaction does not stop): use a role that can only read",
                server.role
            ),
        );
    } else {
        report.ok(
            subject,
            format!("role {:?} cannot write anywhere", server.role),
        );
    }
}
