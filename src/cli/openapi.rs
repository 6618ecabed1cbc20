//! `ctxd openapi [--output FILE]`: writes the OpenAPI 3.1 document of the HTTP API —
//! byte for byte what `GET /openapi.json` serves — to standard output or a file. It is
//! how `docs/openapi.json` is regenerated after the API changes.

use anyhow::Context;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Clone, Args)]
pub(crate) struct OpenApiArgs {
    /// Write the document to this file instead of standard output
    #[arg(long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

pub(crate) fn run(args: &OpenApiArgs) -> anyhow::Result<ExitCode> {
    let document = crate::api::openapi_document();
    match &args.output {
        Some(path) => std::fs::write(path, document)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut out = super::stdout();
            let _ = out.write_all(document.as_bytes());
        }
    }
    Ok(ExitCode::SUCCESS)
}
