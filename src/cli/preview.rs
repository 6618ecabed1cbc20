//! `ctxd preview PROJECT.json --input k=v …`: render one turn from fixtures. Statuses and
//! reasons are spelled as the API spells them; every id and text from the Project or
//! its fixtures is escaped (`output::printable`).

use super::output::{printable, printable_lines};
use crate::fixtures::{PreviewRequest, preview};
use anyhow::Context;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(crate) struct PreviewArgs {
    /// The Project or Build to preview
    pub(crate) project: PathBuf,
    /// A turn input as KEY=VALUE; repeat for several
    #[arg(long = "input", value_name = "KEY=VALUE")]
    pub(crate) inputs: Vec<String>,
    /// The turn's objective; layers scoped to objectives need it (`NOT_REQUESTED`
    /// without it)
    #[arg(long)]
    pub(crate) objective: Option<String>,
    /// The turn's consumer; layers scoped to consumers need it (`NOT_REQUESTED` without
    /// it)
    #[arg(long)]
    pub(crate) consumer: Option<String>,
    /// Profile id (`default` when absent)
    #[arg(long)]
    pub(crate) profile: Option<String>,
    /// Byte budget for the rendered text (the project's budget caps it)
    #[arg(long)]
    pub(crate) max_bytes: Option<usize>,
    /// `human`: statuses and the rendered text; `json`: the turn as `POST /v1/turns`
    /// reports it
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub(crate) format: Format,
}

pub(crate) use super::HumanOrJson as Format;

pub(crate) fn run(args: &PreviewArgs) -> anyhow::Result<ExitCode> {
    let project = super::load_project(&args.project)?;
    let request = PreviewRequest {
        profile: args.profile.clone(),
        objective: args.objective.clone(),
        consumer: args.consumer.clone(),
        inputs: super::parse_inputs(&args.inputs)?,
        max_bytes: args.max_bytes,
    };
    let result = preview(&project, &request).context("cannot preview")?;
    match args.format {
        Format::Json => super::print_json(&result)?,
        Format::Human => super::print(&human(&result))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn human(result: &crate::fixtures::PreviewResult) -> String {
    let turn = &result.turn;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "project {} (build {}) — source TEST_FIXTURE",
        printable(&result.project),
        result.build_digest
    );
    let _ = writeln!(out, "\nlayers:");
    for layer in &turn.layers {
        let _ = writeln!(
            out,
            "  {:<24} {:<14} {}{}",
            printable(&layer.id),
            layer.status.as_str(),
            layer.reason,
            if layer.required { "  (required)" } else { "" }
        );
    }
    if !turn.providers.is_empty() {
        let _ = writeln!(out, "\nproviders:");
        for provider in &turn.providers {
            let _ = writeln!(
                out,
                "  {:<24} {:<14} items={}{}",
                printable(&provider.id),
                provider.status.as_str(),
                provider.items,
                provider
                    .detail
                    .as_deref()
                    .map(|d| format!(" detail={}", printable(d)))
                    .unwrap_or_default()
            );
        }
    }
    for warning in &result.warnings {
        let _ = writeln!(
            out,
            "\nwarning {}: provider {} has no fixture for this value",
            warning.code,
            printable(&warning.provider)
        );
    }
    if turn.blocked {
        let _ = writeln!(
            out,
            "\nBLOCKED by required layer(s): {}",
            printable(&turn.blocking_layers.join(", "))
        );
    } else {
        let _ = writeln!(
            out,
            "\nbudget: {} of {} bytes; {} material(s) selected, {} cut(s)",
            turn.budget.used_bytes,
            turn.budget.max_bytes,
            turn.selections.len(),
            turn.cuts.len()
        );
        let _ = writeln!(out, "\n----- rendered context -----");
        out.push_str(&printable_lines(
            turn.rendered.as_deref().unwrap_or_default(),
        ));
        let _ = writeln!(out, "----- end -----");
    }
    out
}
