//! `ctxd test PROJECT.json [--format human|json|junit]`: run the Context Tests.

use crate::fixtures::{render_human, render_junit, run_tests};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(crate) struct TestArgs {
    /// The Project or Build whose tests to run
    pub(crate) project: PathBuf,
    /// `human`: one line per test and a summary; `json`: the full report; `junit`:
    /// JUnit XML for CI
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub(crate) format: Format,
    /// Treat UNKNOWN tests (a provider without a fixture) as failures
    #[arg(long)]
    pub(crate) strict: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Human,
    Json,
    Junit,
}

pub(crate) fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let project = super::load_project(&args.project)?;
    let report = run_tests(&project);
    match args.format {
        Format::Human => super::print(&render_human(&report, &args.project.display().to_string()))?,
        Format::Json => super::print_json(&report)?,
        Format::Junit => super::print(&render_junit(&report))?,
    }
    let failed = !report.all_passed() || (args.strict && report.unknown > 0);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
