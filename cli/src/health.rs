//! `stoker health`: a worker's grpc.health.v1 status, for container
//! HEALTHCHECKs and scripts.

use clap::Args;

/// Default time `stoker health` waits for an answer (`--timeout`).
pub const DEFAULT_HEALTH_TIMEOUT_SECS: f64 = 3.0;

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The worker's address.
    #[arg(default_value = "127.0.0.1:50051")]
    pub addr: String,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = DEFAULT_HEALTH_TIMEOUT_SECS, value_name = "SECONDS")]
    pub timeout: f64,
}

pub async fn run(args: HealthArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be a positive number of seconds, got {}",
        args.timeout
    );
    let timeout = std::time::Duration::from_secs_f64(args.timeout);
    if stoker_client::worker_health(&args.addr, timeout).await? {
        println!("{}: serving", args.addr);
        Ok(())
    } else {
        anyhow::bail!("{}: not serving (shutting down)", args.addr)
    }
}
