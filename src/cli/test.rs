//! `ctxd test PROJECT.json [--format human|json|junit]`: run the Context Tests. The
//! report for people spells outcomes as the JSON report and the docs do (`PASSED`,
//! `FAILED`, `UNKNOWN`) and escapes the Project's text (`output::printable`).

use super::output::printable;
use crate::fixtures::{TestOutcome, TestReport, render_junit, run_tests};
use clap::{Args, ValueEnum};
use std::fmt::Write;
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

/// The report for people: one line per test with its outcome, then its failures and
/// warnings, then the counts.
pub(crate) fn render_human(report: &TestReport, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: project {} {} (build {})",
        printable(source),
        printable(&report.project),
        printable(&report.version),
        report.build_digest
    );
    for test in &report.tests {
        let label = match test.outcome {
            TestOutcome::Passed => "PASSED",
            TestOutcome::Failed => "FAILED",
            TestOutcome::Unknown => "UNKNOWN",
        };
        let determinism = if test.deterministic {
            "deterministic"
        } else {
            "NOT deterministic"
        };
        let _ = writeln!(out, "  {label:<7} {}  ({determinism})", printable(&test.id));
        for failure in &test.failures {
            let _ = writeln!(out, "          - {}", printable(failure));
        }
        for warning in &test.warnings {
            let _ = writeln!(
                out,
                "          warning {}: provider {} has no fixture",
                warning.code,
                printable(&warning.provider)
            );
        }
    }
    let _ = writeln!(
        out,
        "{} tests: {} passed, {} failed, {} unknown",
        report.tests.len(),
        report.passed,
        report.failed,
        report.unknown
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::Project;
    use serde_json::json;

    #[test]
    fn the_report_spells_outcomes_as_the_docs_and_escapes_the_project() {
        let doc = json!({
            "id": "p", "version": "1",
            "providers": [{"id": "crm", "name": "CRM", "lookup": {"input": "customerId"}}],
            "layers": [{"id": "profile", "name": "Profile", "bindings": [{"provider": "crm"}]}],
            "tests": [
                {"id": "passes", "request": {"inputs": {"customerId": "C1"}},
                 "providers": {"crm": {"items": [{"id": "C1", "content": "Gold"}]}},
                 "expect": {"contains": ["Gold"]}},
                {"id": "fails", "request": {"inputs": {"customerId": "C1"}},
                 "providers": {"crm": {"items": [{"id": "C1", "content": "Gold"}]}},
                 "expect": {"contains": ["Silver"]}},
                {"id": "unknown", "request": {"inputs": {"customerId": "C1"}}}
            ]
        });
        let project = Project::from_json(&doc.to_string()).unwrap();
        // A file name is printed as given: escaped, it forges no report line.
        let text = render_human(&run_tests(&project), "p\n  PASSED  forged\u{1b}[2J.json");
        assert!(
            text.starts_with("p\\n  PASSED  forged\\u{1b}[2J.json: project p 1"),
            "{text}"
        );
        assert!(
            text.contains("\n  PASSED  passes  (deterministic)\n"),
            "{text}"
        );
        assert!(
            text.contains("\n  FAILED  fails  (deterministic)\n"),
            "{text}"
        );
        assert!(
            text.contains("\n  UNKNOWN unknown  (deterministic)\n"),
            "{text}"
        );
        assert!(
            !text.contains("forged\n") && !text.contains('\u{1b}'),
            "{text}"
        );
        assert!(
            text.ends_with("3 tests: 1 passed, 1 failed, 1 unknown\n"),
            "{text}"
        );
    }
}
