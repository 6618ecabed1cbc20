//! The `ctxd` binary: parse the command line, run, print any error chain, exit.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = ctxd::cli::Cli::parse();
    match ctxd::cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
