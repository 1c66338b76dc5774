//! The `stoker` binary: parse arguments, run the subcommand, report errors
//! on one line (`stoker_cli::main_with`). The work lives in the
//! `stoker_server` and `stoker_client` libraries.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = stoker_cli::main_with(std::env::args_os());
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
