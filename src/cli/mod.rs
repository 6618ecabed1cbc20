//! The `ctxd` command line: one module per subcommand, each a thin layer over the
//! library that prints results and chooses the exit code.

mod build;
mod doctor;
mod output;
mod preview;
mod provider_check;
mod replay;
mod serve;
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
    }
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
/// A `--store` argument as a file: `sqlite:data/traces.db` → `data/traces.db`, as in
/// `[trace] store`.
fn store_file(store: &std::path::Path) -> std::path::PathBuf {
    match store.to_str().and_then(|s| s.strip_prefix("sqlite:")) {
        Some(rest) => std::path::PathBuf::from(rest),
        None => store.to_owned(),
    }
}
