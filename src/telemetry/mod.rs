//! Logging and metrics. Log lines are structured (`provider = …, status = …`) and never
//! carry a lookup value, a secret or provider content; metric labels never carry ids or
//! values.

pub(crate) mod metrics;

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One line per event for people: time, level, message, `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Installs the global subscriber: `format` lines on standard error, the level from
/// `CTXD_LOG` (default `info`; the PostgreSQL driver at `warn` at most; the MCP library
/// never, see [`shown_target`]). Text is coloured only when standard error is a terminal
/// and `NO_COLOR` is unset or empty, so files and pipes never receive escape codes. Safe
/// to call more than once (later calls do nothing).
pub(crate) fn init_logging(format: LogFormat) {
    let mut filter = EnvFilter::try_from_env("CTXD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // The PostgreSQL driver logs statements with their parameters (lookup values) at
    // debug and server notices at info: whatever CTXD_LOG says, only its warnings pass.
    if let Ok(directive) = "tokio_postgres=warn".parse() {
        filter = filter.add_directive(directive);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .finish()
            .with(filter_fn(shown_target))
            .try_init(),
        LogFormat::Text => {
            let no_color = std::env::var_os("NO_COLOR");
            let ansi = colour_wanted(
                std::io::stderr().is_terminal(),
                no_color.as_ref().map(|v| !v.is_empty()),
            );
            builder
                .with_ansi(ansi)
                .finish()
                .with(filter_fn(shown_target))
                .try_init()
        }
    };
}

/// Whether events of `target` may be logged at all, whatever CTXD_LOG asks for. The MCP
/// library's (`rmcp`) may not: at every level they quote protocol messages (lookup
/// values, turn inputs, rendered context) and an upstream's text no rule has passed (an
/// answer's body, a header's value, a parser's excerpt of a message — a token a server
/// echoes), so none is shown; ctxd logs each MCP event itself, as untrusted text.
fn shown_target(metadata: &tracing::Metadata<'_>) -> bool {
    let target = metadata.target();
    !(target == "rmcp" || target.starts_with("rmcp::"))
}

/// Whether text logs get ANSI colour: only on a terminal, and never when `NO_COLOR` is
/// set to a non-empty value (<https://no-color.org>). `no_color` is `None` when the
/// variable is unset, else whether its value is non-empty.
fn colour_wanted(stderr_is_terminal: bool, no_color: Option<bool>) -> bool {
    stderr_is_terminal && no_color != Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_librarys_events_are_never_shown() {
        use tracing::callsite::Identifier;
        use tracing::metadata::{Kind, Level, Metadata};
        struct Site;
        impl tracing::Callsite for Site {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!()
            }
        }
        static SITE: Site = Site;
        let at = |target: &'static str| {
            Metadata::new(
                "event",
                target,
                Level::ERROR,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], Identifier(&SITE)),
                Kind::EVENT,
            )
        };
        for target in ["rmcp", "rmcp::transport::worker", "rmcp::service"] {
            assert!(!shown_target(&at(target)), "{target}");
        }
        for target in ["ctxd::providers::mcp::session", "rmcpx", "tokio_postgres"] {
            assert!(shown_target(&at(target)), "{target}");
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let cases = [
            (true, None, true),
            (true, Some(false), true),
            (true, Some(true), false),
            (false, None, false),
            (false, Some(false), false),
            (false, Some(true), false),
        ];
        for (terminal, no_color, expected) in cases {
            assert_eq!(
                colour_wanted(terminal, no_color),
                expected,
                "terminal {terminal}, NO_COLOR {no_color:?}"
            );
        }
    }
}
