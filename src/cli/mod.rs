//! The `ctxd` command line: one module per subcommand, each a thin layer over the
//! library that prints results and chooses the exit code.

mod build;
mod doctor;
mod mcp;
mod openapi;
mod output;
mod preview;
mod provider_check;
mod prune;
mod replay;
mod serve;
mod store;
mod test;
mod traces;
pub(crate) mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "ctxd",
    version,
    about = "A runtime for context providers: gated lookups, hard bounds, budgeted rendering and provenance"
)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the multi-tenant turn API until SIGTERM or SIGINT
    Serve(serve::ServeArgs),
    /// Check the server config and every tenant's Project and Binding
    Validate(validate::ValidateArgs),
    /// Validate a Project and write its Build (normalized, digested, static layers pinned)
    Build(build::BuildArgs),
    /// Run a Project's Context Tests from fixtures, with no network
    Test(test::TestArgs),
    /// Render one turn from the Project's fixtures, matched by lookup value
    Preview(preview::PreviewArgs),
    /// Reproduce a recorded turn from the trace store with its original inputs, contacting
    /// no provider (exit 0 exact, 1 not exact)
    Replay(replay::ReplayArgs),
    /// Search the trace store and show recorded turns, read-only (`search`, `show TURN`)
    Traces(traces::TracesArgs),
    /// Check that a deployment can serve: configs load, secrets and the digest key are
    /// present, SQLite files open read-only, `describe` probes answer (exit 1 on any FAIL)
    Doctor(doctor::DoctorArgs),
    /// Check a context-provider.v1 endpoint against the contract, rule by rule (exit 1 if
    /// any rule fails)
    ProviderCheck(provider_check::ProviderCheckArgs),
    /// Serve the MCP tools (get_context, handle_*, search_traces, get_trace) for one
    /// tenant on standard input/output
    Mcp(mcp::McpArgs),
    /// Write the OpenAPI 3.1 document of the HTTP API (what GET /openapi.json serves)
    Openapi(openapi::OpenApiArgs),
}

/// Output of commands that print either for people or as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HumanOrJson {
    Human,
    Json,
}

/// Runs a parsed command line. Errors are for the caller to print with `{:#}`.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Build(args) => build::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Preview(args) => preview::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Traces(args) => traces::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::ProviderCheck(args) => provider_check::run(&args),
        Command::Mcp(args) => mcp::run(&args),
        Command::Openapi(args) => openapi::run(&args),
    }
}

/// Standard output for a command's results. A reader that stops early (`ctxd test |
/// head`) closes the pipe; the rest of the output is then dropped quietly and the command
/// still ends with its own exit code — `print!` would panic there, and a `?` on the write
/// would end the command with an error.
pub(crate) fn stdout() -> Stdout {
    Stdout {
        inner: std::io::stdout().lock(),
        reader_gone: false,
    }
}

/// Prints `text` as it is on [`stdout`].
pub(crate) fn print(text: &str) -> std::io::Result<()> {
    std::io::Write::write_all(&mut stdout(), text.as_bytes())
}

/// Prints `value` as pretty JSON and a newline on [`stdout`].
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(print(&text)?)
}

/// See [`stdout`].
pub(crate) struct Stdout {
    inner: std::io::StdoutLock<'static>,
    /// A write met a closed pipe: later writes are dropped without a try.
    reader_gone: bool,
}

impl Stdout {
    /// Runs `write` unless the reader has gone; a closed pipe counts as `written`.
    fn unless_reader_gone(
        &mut self,
        write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<usize>,
        written: usize,
    ) -> std::io::Result<usize> {
        if self.reader_gone {
            return Ok(written);
        }
        match write(&mut self.inner) {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                self.reader_gone = true;
                Ok(written)
            }
            other => other,
        }
    }
}

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.unless_reader_gone(|out| out.write(buf), buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.unless_reader_gone(|out| out.flush().map(|()| 0), 0)
            .map(drop)
    }
}

/// Whether a command failed only because standard output was closed by its reader
/// (`BrokenPipe` anywhere in the chain): `main` then ends quietly with exit 0 instead of
/// printing `Broken pipe`. Writes through [`stdout`] never get here; this catches any
/// other write to a closed pipe.
pub fn stdout_closed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Loads a Project or Build, turning every validation problem into one error line.
fn load_project(path: &std::path::Path) -> anyhow::Result<crate::project::Project> {
    crate::project::Project::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Parses repeated `--input KEY=VALUE` arguments. A key given twice is an error.
pub(crate) fn parse_inputs(
    inputs: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut map = std::collections::BTreeMap::new();
    for input in inputs {
        let Some((key, value)) = input.split_once('=') else {
            anyhow::bail!("--input {input:?}: expected KEY=VALUE");
        };
        if key.is_empty() {
            anyhow::bail!("--input {input:?}: the key is empty");
        }
        if map.insert(key.to_owned(), value.to_owned()).is_some() {
            anyhow::bail!("--input {key}: given twice");
        }
    }
    Ok(map)
}
/// A path as people read it: `.` dropped and `dir/..` folded away, so
/// `config/../data/digest.key` shows as `data/digest.key`. Lexical, for messages only:
/// the files themselves are always opened by the path as configured.
pub(crate) fn shown_path(path: &std::path::Path) -> String {
    use std::path::Component;
    let mut parts: Vec<Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match parts.last() {
                Some(Component::Normal(_)) => {
                    parts.pop();
                }
                // `/..` is `/`.
                Some(Component::RootDir | Component::Prefix(_)) => {}
                None | Some(Component::ParentDir | Component::CurDir) => parts.push(component),
            },
            other => parts.push(other),
        }
    }
    if parts.is_empty() {
        return ".".to_owned();
    }
    parts
        .iter()
        .collect::<std::path::PathBuf>()
        .display()
        .to_string()
}

/// A `--store` argument as a file: `sqlite:data/traces.db` → `data/traces.db`, as in
/// `[trace] store`.
fn store_file(store: &std::path::Path) -> std::path::PathBuf {
    match store.to_str().and_then(|s| s.strip_prefix("sqlite:")) {
        Some(rest) => std::path::PathBuf::from(rest),
        None => store.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_option_is_described_in_help() {
        fn undescribed(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.get_help().is_none() && !matches!(id, "help" | "version") {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                undescribed(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        undescribed(
            &<Cli as clap::CommandFactory>::command(),
            "ctxd",
            &mut missing,
        );
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn paths_are_shown_without_dot_segments() {
        let cases = [
            ("config/../data/digest.key", "data/digest.key"),
            (
                "/srv/ctxd/config/bindings/../../fixtures/demo/data/support.db",
                "/srv/ctxd/fixtures/demo/data/support.db",
            ),
            ("./config/./ctxd.toml", "config/ctxd.toml"),
            ("../shared/traces.db", "../shared/traces.db"),
            ("a/../../b", "../b"),
            ("/../etc", "/etc"),
            ("config/..", "."),
            ("data/traces.db", "data/traces.db"),
        ];
        for (path, shown) in cases {
            assert_eq!(shown_path(Path::new(path)), shown, "{path}");
        }
    }
}
