//! Who may reach `/mcp` from where: `[server] mcp_allowed_hosts` and
//! `mcp_allowed_origins`, the `Host` and `Origin` values `/mcp` answers. A browser page
//! whose DNS name was rebound to ctxd's address sends its own name as `Host` and its own
//! origin as `Origin`; the lists refuse both. The default, `["loopback"]` for each, suits
//! ctxd on a loopback address: `Host` a loopback name or address (any port), `Origin`
//! absent (no browser) or a loopback origin. Parsed and checked here, without I/O;
//! matched per request by the API.

use crate::config::{Problems, index_path};
use crate::providers::endpoint::is_loopback_host;

/// The keyword for loopback names and addresses.
const LOOPBACK: &str = "loopback";
/// The keyword that allows any value.
const ANY: &str = "*";
/// Most entries a list may hold: each request is matched against every one.
const MAX_ENTRIES: usize = 256;

/// The `Host` and `Origin` values `/mcp` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct McpAccess {
    hosts: Vec<HostRule>,
    origins: Vec<OriginRule>,
}

impl Default for McpAccess {
    fn default() -> McpAccess {
        McpAccess {
            hosts: vec![HostRule::Loopback],
            origins: vec![OriginRule::Loopback],
        }
    }
}

/// One entry of `mcp_allowed_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Any,
    /// `localhost` or a loopback IP address, any port.
    Loopback,
    /// A name or address (lowercase, without brackets); `port: None` is any port.
    Named {
        host: String,
        port: Option<u16>,
    },
}

/// One entry of `mcp_allowed_origins`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OriginRule {
    Any,
    /// `http` or `https` with a loopback host, any port.
    Loopback,
    /// `scheme://host[:port]`; `port: None` is any port (`:*`), otherwise the port
    /// written or the scheme's default.
    Exact {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

/// A `Host` or origin host as matched: lowercase, without IPv6 brackets or a final dot.
fn normalized_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// `host[:port]` as a `Host` header carries it.
fn split_authority(text: &str) -> Option<(String, Option<u16>)> {
    let authority: http::uri::Authority = text.trim().parse().ok()?;
    if authority.as_str().contains('@') || authority.host().is_empty() {
        return None;
    }
    Some((normalized_host(authority.host()), authority.port_u16()))
}

/// An origin as a browser sends it: `scheme://host[:port]`, the port made explicit.
fn split_origin(text: &str) -> Option<(String, String, Option<u16>)> {
    let url = url::Url::parse(text.trim()).ok()?;
    let host = url.host_str()?;
    if !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    Some((
        url.scheme().to_owned(),
        normalized_host(host),
        url.port_or_known_default(),
    ))
}

impl McpAccess {
    /// Whether `/mcp` answers a request with this `Host` header (`None`: none sent).
    pub(crate) fn allows_host(&self, host: Option<&str>) -> bool {
        if self.hosts.contains(&HostRule::Any) {
            return true;
        }
        let Some((host, port)) = host.and_then(split_authority) else {
            return false;
        };
        self.hosts.iter().any(|rule| match rule {
            HostRule::Any => true,
            HostRule::Loopback => is_loopback_host(&host),
            HostRule::Named {
                host: allowed,
                port: allowed_port,
            } => *allowed == host && allowed_port.is_none_or(|p| Some(p) == port),
        })
    }

    /// Whether `/mcp` answers a request with this `Origin` header. No `Origin` is no
    /// browser page, so no rebinding: always answered.
    pub(crate) fn allows_origin(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else {
            return true;
        };
        if self.origins.contains(&OriginRule::Any) {
            return true;
        }
        let Some((scheme, host, port)) = split_origin(origin) else {
            return false;
        };
        self.origins.iter().any(|rule| match rule {
            OriginRule::Any => true,
            OriginRule::Loopback => {
                matches!(scheme.as_str(), "http" | "https") && is_loopback_host(&host)
            }
            OriginRule::Exact {
                scheme: allowed_scheme,
                host: allowed,
                port: allowed_port,
            } => {
                *allowed_scheme == scheme
                    && *allowed == host
                    && allowed_port.is_none_or(|p| Some(p) == port)
            }
        })
    }
}

/// `mcp_allowed_hosts` and `mcp_allowed_origins` as written (`None`: the default).
pub(super) fn check_mcp_access(
    problems: &mut Problems,
    hosts: Option<&[String]>,
    origins: Option<&[String]>,
) -> Option<McpAccess> {
    let before = problems.len();
    let defaults = McpAccess::default();
    let hosts = match hosts {
        None => defaults.hosts,
        Some(entries) => check_list(problems, "server.mcp_allowed_hosts", entries, host_rule),
    };
    let origins = match origins {
        None => defaults.origins,
        Some(entries) => check_list(problems, "server.mcp_allowed_origins", entries, origin_rule),
    };
    (problems.len() == before).then_some(McpAccess { hosts, origins })
}

fn check_list<T>(
    problems: &mut Problems,
    path: &str,
    entries: &[String],
    rule: fn(&str) -> Result<T, String>,
) -> Vec<T> {
    if entries.is_empty() {
        problems.add(
            path,
            format!("must list at least one entry: \"{LOOPBACK}\" (the default), names, or \"{ANY}\" for any"),
        );
    } else if entries.len() > MAX_ENTRIES {
        problems.add(
            path,
            format!("has {} entries: use at most {MAX_ENTRIES}", entries.len()),
        );
    }
    let mut rules = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        match rule(entry) {
            Ok(parsed) => rules.push(parsed),
            Err(message) => problems.add(&index_path(path, i), message),
        }
    }
    rules
}

fn host_rule(entry: &str) -> Result<HostRule, String> {
    match entry.trim() {
        ANY => Ok(HostRule::Any),
        LOOPBACK => Ok(HostRule::Loopback),
        text => match split_authority(text) {
            Some((host, port)) => Ok(HostRule::Named { host, port }),
            None => Err(format!(
                "{entry:?} is not a host: write a name or address with an optional port (\"ctxd.example.com\", \"10.0.0.5:8080\", \"[::1]\"), \"{LOOPBACK}\" or \"{ANY}\""
            )),
        },
    }
}

fn origin_rule(entry: &str) -> Result<OriginRule, String> {
    let refused = || {
        format!(
            "{entry:?} is not an origin: write scheme://host with an optional :port or :* for any port (\"https://app.example.com\", \"http://localhost:*\"), \"{LOOPBACK}\" or \"{ANY}\""
        )
    };
    match entry.trim() {
        ANY => Ok(OriginRule::Any),
        LOOPBACK => Ok(OriginRule::Loopback),
        text => {
            let (base, any_port) = match text.strip_suffix(":*") {
                Some(base) => (base, true),
                None => (text, false),
            };
            let url = url::Url::parse(base).map_err(|_| refused())?;
            // An origin is scheme, host and port: nothing else may be written.
            let bare = url.path() == "/" && !base.ends_with('/');
            if !bare
                || url.query().is_some()
                || url.fragment().is_some()
                || (any_port && url.port().is_some())
            {
                return Err(refused());
            }
            let (scheme, host, port) = split_origin(base).ok_or_else(refused)?;
            Ok(OriginRule::Exact {
                scheme,
                host,
                port: if any_port { None } else { port },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowing(hosts: &[&str], origins: &[&str]) -> McpAccess {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut problems = Problems::default();
        let access = check_mcp_access(&mut problems, Some(&owned(hosts)), Some(&owned(origins)));
        assert!(problems.is_empty(), "{:?}", problems.into_screened());
        access.unwrap()
    }

    #[test]
    fn the_default_answers_loopback_only() {
        let access = McpAccess::default();
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.1:40001",
            "127.9.9.9:80",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(access.allows_host(Some(host)), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.5:8080",
            "0.0.0.0:8080",
            "[::2]:80",
            "",
            "a b",
        ] {
            assert!(!access.allows_host(Some(host)), "{host}");
        }
        assert!(!access.allows_host(None), "no Host header");
        assert!(access.allows_origin(None), "no browser");
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert!(access.allows_origin(Some(origin)), "{origin}");
        }
        for origin in [
            "http://evil.example",
            "https://evil.example:443",
            "null",
            "file://",
            "chrome-extension://abc",
            "ws://localhost:1",
            "garbage",
        ] {
            assert!(!access.allows_origin(Some(origin)), "{origin}");
        }
    }

    #[test]
    fn configured_lists_replace_the_default() {
        let access = allowing(
            &["ctxd.example.com", "10.0.0.5:8080", "loopback"],
            &["https://app.example.com", "http://tools.example.com:*"],
        );
        assert!(access.allows_host(Some("ctxd.example.com:443")));
        assert!(access.allows_host(Some("CTXD.example.com.")));
        assert!(access.allows_host(Some("10.0.0.5:8080")));
        assert!(!access.allows_host(Some("10.0.0.5:8081")));
        assert!(access.allows_host(Some("localhost:1")));
        assert!(!access.allows_host(Some("other.example.com")));
        assert!(access.allows_origin(Some("https://app.example.com")));
        assert!(access.allows_origin(Some("https://app.example.com:443")));
        assert!(!access.allows_origin(Some("https://app.example.com:8443")));
        assert!(!access.allows_origin(Some("http://app.example.com")));
        assert!(access.allows_origin(Some("http://tools.example.com:9999")));
        assert!(
            !access.allows_origin(Some("http://localhost:3000")),
            "loopback is not listed"
        );
        let open = allowing(&["*"], &["*"]);
        assert!(open.allows_host(Some("anything.example")));
        assert!(open.allows_host(None));
        assert!(open.allows_origin(Some("null")));
    }

    #[test]
    fn bad_entries_are_named_by_their_index() {
        let cases: &[(&[&str], &[&str], &str, &str)] = &[
            (
                &[],
                &["*"],
                "server.mcp_allowed_hosts",
                "at least one entry",
            ),
            (
                &["*"],
                &[],
                "server.mcp_allowed_origins",
                "at least one entry",
            ),
            (
                &["ok.example", "bad host"],
                &["*"],
                "server.mcp_allowed_hosts[1]",
                "is not a host",
            ),
            (
                &["user@h"],
                &["*"],
                "server.mcp_allowed_hosts[0]",
                "is not a host",
            ),
            (
                &["*"],
                &["app.example.com"],
                "server.mcp_allowed_origins[0]",
                "is not an origin",
            ),
            (
                &["*"],
                &["https://app.example.com/path"],
                "server.mcp_allowed_origins[0]",
                "is not an origin",
            ),
            (
                &["*"],
                &["https://app.example.com:1:*"],
                "server.mcp_allowed_origins[0]",
                "is not an origin",
            ),
        ];
        for (hosts, origins, path, needle) in cases {
            let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            let mut problems = Problems::default();
            let access =
                check_mcp_access(&mut problems, Some(&owned(hosts)), Some(&owned(origins)));
            assert!(access.is_none(), "{path}");
            let found = problems.into_screened();
            assert!(
                found
                    .iter()
                    .any(|p| p.path == *path && p.message.contains(needle)),
                "{path} {needle}: {found:?}"
            );
        }
    }
}
