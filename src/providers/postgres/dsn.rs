//! The connection string of a `postgres` provider, read from its `dsn_env`: parsed by the
//! driver, then held to the TLS rule. TLS is required unless every host is loopback
//! (`localhost`, 127.0.0.0/8, `::1`) or a Unix socket: a remote `sslmode=prefer` (the
//! default) is raised to `require`, a remote `sslmode=disable` is refused. On loopback
//! and sockets `prefer` becomes `disable` (TLS to the same machine protects nothing and
//! the server's local certificate is rarely one a client can verify) and an explicit
//! `require` is kept. With TLS the server certificate is verified against the system's
//! roots and the host name (rustls). Messages never quote the string: it may carry a
//! password.

use crate::providers::endpoint::is_loopback_host;
use crate::secrets::redact;
use std::net::IpAddr;
use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode};

/// Where a connection string points, as far as the TLS rule is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Every host is loopback or a Unix socket.
    Local,
    /// At least one host may be another machine.
    Remote,
}

/// A parsed connection string with the TLS rule applied.
#[derive(Debug, Clone)]
pub(crate) struct Dsn {
    pub(crate) config: Config,
}

impl Dsn {
    /// Whether connections use TLS (`sslmode=require` after the rule).
    pub(crate) fn tls(&self) -> bool {
        self.config.get_ssl_mode() == SslMode::Require
    }
}

/// Parses `text` and applies the TLS rule; the error names the problem, never the text.
pub(crate) fn parse(text: &str) -> Result<Dsn, String> {
    let mut config: Config = text.parse().map_err(|error: tokio_postgres::Error| {
        redact::redacted(&error.to_string()).into_owned()
    })?;
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        return Err("names no host: add host=… (or a host in the URL)".to_owned());
    }
    if config.get_dbname().is_none() {
        return Err("names no database: add dbname=… (or /database in the URL)".to_owned());
    }
    let reach = reach_of(&config);
    match (reach, config.get_ssl_mode()) {
        (Reach::Remote, SslMode::Disable) => {
            return Err(
                "sslmode=disable to a host that is not loopback or a Unix socket is refused: TLS is required (remove sslmode or use sslmode=require)"
                    .to_owned(),
            );
        }
        (Reach::Remote, _) => {
            config.ssl_mode(SslMode::Require);
        }
        (Reach::Local, SslMode::Prefer) => {
            config.ssl_mode(SslMode::Disable);
        }
        (Reach::Local, _) => {}
    }
    if config.get_application_name().is_none() {
        config.application_name("ctxd");
    }
    Ok(Dsn { config })
}

/// `Local` when every host and every `hostaddr` is loopback or a Unix socket.
fn reach_of(config: &Config) -> Reach {
    let hosts_local = config.get_hosts().iter().all(|host| match host {
        Host::Tcp(name) => is_loopback_host(name),
        #[cfg(unix)]
        Host::Unix(_) => true,
    });
    let addrs_local = config.get_hostaddrs().iter().all(IpAddr::is_loopback);
    if hosts_local && addrs_local {
        Reach::Local
    } else {
        Reach::Remote
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(text: &str) -> Result<SslMode, String> {
        parse(text).map(|dsn| dsn.config.get_ssl_mode())
    }

    #[test]
    fn loopback_and_sockets_may_go_without_tls() {
        for text in [
            "host=127.0.0.1 dbname=test user=postgres",
            "postgres://postgres@localhost/test",
            "postgres://postgres@127.0.0.2:5433/test",
            "host=/var/run/postgresql dbname=test",
            "host=::1 dbname=test",
        ] {
            assert_eq!(mode(text), Ok(SslMode::Disable), "{text}");
            assert_eq!(
                reach_of(&parse(text).unwrap().config),
                Reach::Local,
                "{text}"
            );
        }
        assert_eq!(
            mode("host=localhost dbname=test sslmode=require"),
            Ok(SslMode::Require)
        );
    }

    #[test]
    fn remote_hosts_require_tls() {
        assert_eq!(mode("host=db.internal dbname=orders"), Ok(SslMode::Require));
        assert_eq!(
            mode("postgres://reader@db.internal/orders?sslmode=prefer"),
            Ok(SslMode::Require)
        );
        // A loopback-looking name is not loopback; neither is a mixed host list.
        assert_eq!(mode("host=db.localhost dbname=x"), Ok(SslMode::Require));
        assert_eq!(
            mode("host=127.0.0.1,db.internal dbname=x"),
            Ok(SslMode::Require)
        );
        assert_eq!(
            mode("host=localhost hostaddr=10.0.0.5 dbname=x"),
            Ok(SslMode::Require)
        );
        let refused = mode("host=db.internal dbname=x sslmode=disable").unwrap_err();
        assert!(refused.contains("sslmode=disable"), "{refused}");
    }

    #[test]
    fn problems_never_quote_the_string() {
        let secret = "hunter2-very-secret";
        for text in [
            format!("host=db.internal password={secret} sslmode=disable dbname=x"),
            format!("postgres://u:{secret}@/x"),
            format!("password={secret} dbname=x"),
            format!("host=h password={secret}"),
            format!("host=h password={secret} bogus_option=1 dbname=x"),
        ] {
            let problem = parse(&text).unwrap_err();
            assert!(!problem.contains(secret), "{problem}");
        }
    }

    #[test]
    fn ctxd_names_itself_to_the_server() {
        let dsn = parse("host=localhost dbname=test").unwrap();
        assert_eq!(dsn.config.get_application_name(), Some("ctxd"));
        let named = parse("host=localhost dbname=test application_name=orders").unwrap();
        assert_eq!(named.config.get_application_name(), Some("orders"));
    }
}
