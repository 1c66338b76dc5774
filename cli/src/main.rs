//! The `stoker` binary: parse arguments, run the subcommand, report errors
//! on one line. The work lives in the `stoker_server` library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = stoker_cli::Cli::parse();
    match stoker_cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the cause chain joined with ": ".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
