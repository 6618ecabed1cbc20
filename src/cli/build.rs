//! `ctxd build PROJECT.json [-o BUILD.json]`: validate and write the Build.

use anyhow::Context;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// The Project (or an existing Build) to build
    pub(crate) project: PathBuf,
    /// Where to write the Build; standard output when absent
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
}

pub(crate) fn run(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let project = super::load_project(&args.project)?;
    let text = project.build().to_json_pretty();
    match &args.output {
        Some(path) => {
            write_atomically(path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "built {} {} → {} ({})",
                project.id(),
                project.doc.version,
                path.display(),
                project.digest
            );
        }
        None => super::print(&text)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes beside the target and renames, so a reader never sees half a Build.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let file_name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the output path names no file"))?;
    let mut temporary = path.to_path_buf();
    temporary.set_file_name(format!(".{}.tmp", file_name.to_string_lossy()));
    {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}
