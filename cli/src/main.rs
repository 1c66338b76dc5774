//! The `stoker` binary: parse arguments, run the subcommand, report errors
//! on one line (`stoker_cli::main_with`). The work lives in the
//! `stoker_worker` and `stoker_client` libraries.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = stoker_cli::main_with(std::env::args_os());
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
