//! The `ctxd` binary: parse the command line, run, print any error chain, exit.

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

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
