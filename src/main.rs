//! The `ctxd` binary: parse the command line, run, print any error chain, exit.

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

/// jemalloc, not the system allocator: a turn allocates and frees many small buffers on
/// several threads, which glibc's malloc serves with locks and consolidation that cost
/// a fifth of a turn's CPU (docs/PERFORMANCE.md, "Before/after: the allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = ctxd::cli::Cli::parse();
    match ctxd::cli::run(cli) {
        Ok(code) => code,
        // The reader of standard output stopped early (`ctxd build | head`): nothing is
        // wrong with the command, so it ends quietly.
        Err(error) if ctxd::cli::stdout_closed(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // Not `eprintln!`: a closed standard error must not turn an error into a panic.
            let _ = writeln!(std::io::stderr(), "error: {error:#}");
            ExitCode::from(2)
        }
    }
}
