//! The one rule for a provider endpoint: `https://` anywhere, `http://` only to a
//! loopback host; no user name or password, query or fragment. Request data never goes
//! in the URL, so nothing the URL carries may vary per request, and a credential in it
//! would leak into logs and traces.
//!
//! Pure. Bindings report every [`Violation`] in their own words; the HTTP provider
//! refuses to be built on the first one; `ctxd provider-check` judges a URL by it.

use url::{Host, Url};

/// One way an endpoint breaks the rule. Declared from the most fundamental (nowhere a
/// request could go) to the least, so the smallest of several is the one to tell first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Violation {
    /// The URL names no host.
    NoHost,
    /// `http://` to a host that is not loopback (the host as the URL writes it).
    Insecure { host: String },
    /// A scheme other than `https` and `http`.
    UnsupportedScheme(String),
    /// A user name or password: an inline credential.
    Credentials,
    /// A query string, even an empty one.
    Query,
    /// A `#…` fragment.
    Fragment,
}

/// Every violation of the rule by `url`: first what the URL carries (credentials, query,
/// fragment), then where it goes (scheme, host).
pub(crate) fn violations(url: &Url) -> Vec<Violation> {
    let mut found = Vec::new();
    if !url.username().is_empty() || url.password().is_some() {
        found.push(Violation::Credentials);
    }
    if url.query().is_some() {
        found.push(Violation::Query);
    }
    if url.fragment().is_some() {
        found.push(Violation::Fragment);
    }
    match url.scheme() {
        "https" => {}
        "http" => {
            if !url.host().is_some_and(|host| is_loopback(&host)) {
                found.push(Violation::Insecure {
                    host: url.host_str().unwrap_or_default().to_owned(),
                });
            }
        }
        other => found.push(Violation::UnsupportedScheme(other.to_owned())),
    }
    if url.host_str().is_none_or(str::is_empty) {
        found.push(Violation::NoHost);
    }
    found
}

/// `localhost`, 127.0.0.0/8 and `::1`. Other names (`*.localhost`, hosts-file aliases)
/// depend on the resolver, and IPv4-mapped addresses on the stack, so they do not count.
pub(crate) fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// [`is_loopback`] of a host written alone: a name, an IPv4 address, or an IPv6 address
/// with or without brackets (a connection string's host, a `Host` header's).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => is_loopback(&Host::Ipv4(ip)),
        Ok(std::net::IpAddr::V6(ip)) => is_loopback(&Host::Ipv6(ip)),
        Err(_) => is_loopback(&Host::Domain(bare)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Violation::*;

    fn of(text: &str) -> Vec<Violation> {
        violations(&Url::parse(text).unwrap())
    }

    #[test]
    fn https_anywhere_http_only_to_loopback() {
        for text in [
            "https://crm.internal/context",
            "https://10.0.0.1:8443/v1/context",
            "http://localhost:8080/context",
            "http://LOCALHOST/context",
            "http://127.0.0.1:9000/context",
            "http://127.8.9.10/context",
            "http://[::1]:9000/context",
        ] {
            assert_eq!(of(text), [], "{text}");
        }
        let insecure = |host: &str| Insecure {
            host: host.to_owned(),
        };
        let cases: &[(&str, Vec<Violation>)] = &[
            (
                "http://crm.internal/context",
                vec![insecure("crm.internal")],
            ),
            ("http://10.0.0.8/context", vec![insecure("10.0.0.8")]),
            ("http://api.localhost/x", vec![insecure("api.localhost")]),
            (
                "http://localhost.evil.com/x",
                vec![insecure("localhost.evil.com")],
            ),
            ("http://[::2]/x", vec![insecure("[::2]")]),
            (
                "http://[::ffff:127.0.0.1]/x",
                vec![insecure("[::ffff:7f00:1]")],
            ),
            (
                "ftp://crm.internal/x",
                vec![UnsupportedScheme("ftp".to_owned())],
            ),
            (
                "file:///etc/passwd",
                vec![UnsupportedScheme("file".to_owned()), NoHost],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(&of(text), expected, "{text}");
        }
    }

    #[test]
    fn nothing_may_ride_in_the_url() {
        assert_eq!(of("https://svc@crm.internal/x"), [Credentials]);
        assert_eq!(of("https://svc:pw@crm.internal/x"), [Credentials]);
        assert_eq!(of("https://crm.internal/x?"), [Query]);
        assert_eq!(of("https://crm.internal/x#part"), [Fragment]);
        assert_eq!(
            of("http://u:p@crm.internal/x?k=v#f"),
            [
                Credentials,
                Query,
                Fragment,
                Insecure {
                    host: "crm.internal".to_owned()
                }
            ]
        );
    }

    #[test]
    fn where_a_request_goes_is_told_first() {
        let all = of("file:///etc/passwd?k#f");
        assert_eq!(all.iter().min(), Some(&NoHost), "{all:?}");
        let mut found = of("http://u@crm.internal/x?k");
        found.sort();
        assert_eq!(
            found,
            [
                Insecure {
                    host: "crm.internal".to_owned()
                },
                Credentials,
                Query
            ]
        );
    }
}
