//! `stoker worker`.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
use tracing::info;

use crate::cli::parse_bytes;
use crate::{WorkerConfig, WorkerContext, serve};

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Address to serve on. The default serves this machine only; use
    /// 0.0.0.0:PORT to accept work from other hosts.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: String,
    /// CPU threads for decode and augmentation (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Target size of streamed chunks.
    #[arg(long, default_value = "2M", value_parser = parse_bytes)]
    pub chunk_bytes: u64,
    /// Tar members larger than this are skipped without being loaded.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    pub max_member_bytes: u64,
    /// Images with more pixels than this are skipped before decoding.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_image_pixels: u64,
    /// Require this bearer token on every request (health checks excepted).
    #[arg(long, env = "STOKER_TOKEN", hide_env_values = true)]
    pub token: Option<stoker_core::Secret>,
}

impl WorkerArgs {
    fn config(&self) -> anyhow::Result<WorkerConfig> {
        let mut config = WorkerConfig::default();
        if let Some(t) = self.threads {
            anyhow::ensure!(t > 0, "--threads must be at least 1");
            config.threads = t;
            config.decode_ahead = t * 2 + 2;
        }
        anyhow::ensure!(
            (1024..=64 << 20).contains(&self.chunk_bytes),
            "--chunk-bytes must be between 1K and 64M, got {}",
            self.chunk_bytes
        );
        anyhow::ensure!(self.max_member_bytes > 0, "--max-member-bytes must be positive");
        anyhow::ensure!(self.max_image_pixels > 0, "--max-image-pixels must be positive");
        config.chunk_bytes = self.chunk_bytes as usize;
        config.max_member_bytes = self.max_member_bytes;
        config.max_image_pixels = self.max_image_pixels;
        Ok(config)
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("listener has no local address")?;
    let threads = config.threads;
    let ctx = Arc::new(WorkerContext::new(config).context("cannot start the cpu pool")?);
    let jpeg_decoder = if crate::libjpeg::enabled() {
        "libjpeg-turbo region decode, zune-jpeg fallback"
    } else if crate::libjpeg::AVAILABLE {
        "zune-jpeg (STOKER_JPEG_DECODER=zune)"
    } else {
        "zune-jpeg (built without libjpeg-turbo)"
    };
    info!(%addr, threads, device = "cpu", jpeg_decoder, "worker ready");
    // Scripts and tests read the bound address (useful with port 0).
    println!("stoker worker listening on {addr}");
    let _ = std::io::stdout().flush();
    serve(listener, ctx, args.token.clone(), async {
        shutdown_signal().await;
        info!("shutdown signal received");
    })
    .await
    .with_context(|| format!("worker on {addr} failed"))?;
    info!("worker stopped");
    Ok(())
}
