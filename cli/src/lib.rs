//! The `stoker` subcommands. Each one is a thin layer over the libraries:
//! argument checks, logging, progress and reports.

mod bench;
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
    /// Turn an ImageFolder tree into WebDataset shards with an index.
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

/// How this program runs itself (`stoker worker` for local workers): set
/// by a host that is not the `stoker` binary, such as the Python package
/// (`python -m stoker`).
static SELF_COMMAND: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// Says how to run this command line again in a new process: the
/// program and its first arguments (`[python, -m, stoker]`). Without it,
/// the running executable is.
pub fn set_self_command(command: Vec<std::ffi::OsString>) {
    let _ = SELF_COMMAND.set(command);
}

/// The program and first arguments that run this command line.
pub(crate) fn self_command() -> anyhow::Result<Vec<std::ffi::OsString>> {
    if let Some(c) = SELF_COMMAND.get() {
        return Ok(c.clone());
    }
    let exe = std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find this program's path: {e}"))?;
    Ok(vec![exe.into_os_string()])
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

/// Parses sizes like `64M`, `1G`, `512k` or plain bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_lowercase();
            let mult: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(format!("unknown size unit in {s:?} (use k, M, G)")),
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    if !(n.is_finite() && n >= 0.0) {
        return Err(format!("not a size: {s:?}"));
    }
    Ok((n * mult as f64) as u64)
}

/// Human-readable byte counts, in the binary units [`parse_bytes`] reads
/// (`64M` in a flag is the `64.0 MiB` printed back).
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// A byte count on the command line: parsed by [`parse_bytes`] and printed
/// in the same binary units, so that clap's `[default: 64M]` shows the
/// library constant a flag defaults to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_bytes(s).map(ByteSize)
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "k")];
        match UNITS
            .iter()
            .find(|(shift, _)| self.0 != 0 && self.0.is_multiple_of(1u64 << shift))
        {
            Some((shift, unit)) => write!(f, "{}{unit}", self.0 >> shift),
            None => write!(f, "{}", self.0),
        }
    }
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

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1.5k"), Ok(1536));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert!(parse_bytes("12x").is_err());
        assert!(parse_bytes("-1").is_err());
    }

    #[test]
    fn humans_read_bytes() {
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(1536.0 * 1024.0), "1.5 MiB");
    }

    #[test]
    fn byte_sizes_print_as_they_parse() {
        for s in ["64M", "2M", "4G", "512M", "1536", "3k", "0"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
        assert_eq!(ByteSize(64 << 20).to_string(), "64M");
    }
}
