//! The `stoker` subcommands. Each one is a thin layer over the libraries:
//! argument checks, logging, progress and reports.
//!
//! The only crate that depends on both the worker and the client. One
//! module per subcommand; what they share sits below them (`common`,
//! `token`, `progress`, `transform`). Every flag default is a named
//! constant of the library it configures (`pipeline::DEFAULT_*`,
//! `gpu::DEFAULT_*`, `service::DEFAULT_GRACE`, `stoker_client::DEFAULT_*`),
//! so `--help` shows the value the library uses.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

mod bench;
mod common;
mod demo;
mod doctor;
pub mod embedded;
mod health;
mod progress;
#[cfg(test)]
mod reference;
mod stream;
mod synth;
mod token;
mod transform;
mod worker;

use clap::{Parser, Subcommand};

pub use bench::BenchArgs;
pub(crate) use common::self_command;
pub use common::{ByteSize, human_bytes, parse_bytes, set_self_command};
pub use demo::DemoArgs;
pub use doctor::DoctorArgs;
pub use health::HealthArgs;
pub use stream::StreamArgs;
pub use synth::{PackArgs, SynthArgs};
pub use token::TokenArgs;
pub use worker::WorkerArgs;

/// Stoker: preprocessing workers that keep training GPUs fed.
#[derive(Debug, Parser)]
#[command(
    name = "stoker",
    version,
    about = "Stoker: workers that decode and augment images and stream ready batches to training jobs",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once at start and matched once: its size costs nothing"
)]
pub enum Command {
    /// Serve work items: read shards, decode, augment, stream samples back.
    Worker(WorkerArgs),
    /// Stream epochs of a dataset through workers and report the rate.
    Stream(StreamArgs),
    /// Turn an ImageFolder tree, a dataset or a detection dataset (COCO, YOLO,
    /// Hugging Face) into indexed shards.
    Pack(PackArgs),
    /// Write an ImageFolder tree of procedural (or photo-derived) JPEGs.
    Synth(SynthArgs),
    /// Run the whole path on a small synthetic dataset, no set-up needed.
    Demo(DemoArgs),
    /// Measure the CPU decode + transform pipeline on a folder of images.
    Bench(BenchArgs),
    /// Measure storage, decode, transport and the client one at a time,
    /// name the bottleneck and size the fleet for a target rate.
    Doctor(DoctorArgs),
    /// Ask a worker's grpc.health.v1 whether it serves: exit 0 if it does
    /// (a container HEALTHCHECK), 1 otherwise.
    Health(HealthArgs),
    /// Run a transform spec on one image, as a worker would for one sample,
    /// and write the result as PNG or JPEG (by the output's extension): try
    /// a pipeline from the shell.
    Augment(transform::AugmentArgs),
    /// List the transform ops a spec may use, with their arguments and
    /// defaults (torchvision's), or their schema as JSON.
    Transforms(transform::TransformsArgs),
}

/// The whole command: parses `args` (the program's name first), runs it,
/// prints an error on one line (the cause chain joined with ": "), and
/// returns the process's exit code. The `stoker` binary and the Python
/// package's `stoker` command (`python -m stoker`) are both this.
pub fn main_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version too, on stdout, with exit code 0.
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err:#}");
            1
        }
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let default_level = match cli.command {
        Command::Worker(_) => "info",
        _ => "warn",
    };
    init_logging(default_level);
    let command = match cli.command {
        // Plain threads: no runtime in the measurement.
        Command::Bench(args) => return bench::run(args),
        Command::Augment(args) => return transform::run_augment(args),
        Command::Transforms(args) => return transform::run_transforms(&args),
        other => other,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("stoker-io")
        .build()?;
    runtime.block_on(async move {
        match command {
            Command::Worker(args) => worker::run(args).await,
            Command::Stream(args) => stream::run(args).await,
            Command::Pack(args) => synth::run_pack(args).await,
            Command::Synth(args) => synth::run_synth(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Health(args) => health::run(args).await,
            Command::Bench(_) | Command::Augment(_) | Command::Transforms(_) => {
                unreachable!("handled before the runtime starts")
            }
        }
    })
}

fn init_logging(default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("STOKER_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal: log files and pipes get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_and_flag_has_a_line_of_help() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            if sub.get_about().is_none() {
                missing.push(sub.get_name().to_owned());
            }
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{} --{}", sub.get_name(), arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help for: {missing:?}");
    }
}
