//! `stoker worker`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tracing::{info, warn};

use crate::ByteSize;
use stoker_proto::transport::MAX_CHUNK_BYTES;
use stoker_worker::allow::AllowList;
use stoker_worker::gpu::{self, GpuRunner, GpuRunnerConfig, SmShare};
use stoker_worker::listen::{ListenAddr, Listener};
use stoker_worker::tls::ServerTls;
use stoker_worker::{ServeOptions, WorkerConfig, WorkerContext, serve};
use stoker_worker::{pipeline, service};

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Address to serve on. The default serves this machine only; use
    /// 0.0.0.0:PORT to accept work from other hosts, or unix:PATH for a
    /// Unix domain socket (made readable by its owner only).
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: String,
    /// Stop, as on SIGTERM, when standard input reaches its end: the
    /// process that started this worker through a pipe has exited, even
    /// if killed (local workers of a loader).
    #[arg(long, hide = true)]
    pub stop_on_stdin_eof: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics: HOST:PORT, or a
    /// PORT alone for this machine only. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// CPU threads for decode and augmentation (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Target size of streamed chunks.
    #[arg(long, default_value_t = ByteSize(pipeline::DEFAULT_CHUNK_BYTES))]
    pub chunk_bytes: ByteSize,
    /// Tar members larger than this are skipped without being loaded.
    #[arg(long, default_value_t = ByteSize(pipeline::DEFAULT_MAX_MEMBER_BYTES))]
    pub max_member_bytes: ByteSize,
    /// Images with more pixels than this are skipped before decoding.
    #[arg(long, default_value_t = pipeline::DEFAULT_MAX_IMAGE_PIXELS)]
    pub max_image_pixels: u64,
    /// Keep the worker process under this much memory: shard data, decoded
    /// images and results are budgeted to fit, whatever the shard sizes and
    /// however many clients (at least 80M).
    #[arg(long, default_value_t = ByteSize(pipeline::DEFAULT_MEMORY_LIMIT))]
    pub memory_limit: ByteSize,
    #[command(flatten)]
    pub token: crate::TokenArgs,
    /// Serve TLS with this PEM certificate (chain); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA (mutual TLS).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve only datasets under this prefix: s3://bucket/prefix/ or a
    /// local folder (which must exist). Repeatable, or comma-separated in
    /// the environment. Others are refused (permission denied) unread.
    /// Default: any dataset the worker's storage credentials reach.
    #[arg(long, env = "STOKER_ALLOW_DATASET", value_name = "PREFIX", value_delimiter = ',')]
    pub allow_dataset: Vec<String>,
    /// On SIGTERM or Ctrl-C, seconds the items in progress get to finish
    /// (new ones are refused) before the rest is handed back to clients.
    #[arg(long, default_value_t = service::DEFAULT_GRACE.as_secs_f64(), value_name = "SECONDS")]
    pub grace_period: f64,
    /// Tries per S3 request, the first included, with exponential backoff
    /// and jitter between them (default 5). 403 and 404 are never retried.
    #[arg(long, value_name = "N")]
    pub s3_max_attempts: Option<u32>,
    /// Limit on one S3 request attempt, up to the response headers
    /// (default 30).
    #[arg(long, value_name = "SECONDS")]
    pub s3_attempt_timeout: Option<f64>,
    /// A shard body that sends nothing for this long is resumed with a
    /// ranged GET (default 30).
    #[arg(long, value_name = "SECONDS")]
    pub s3_read_timeout: Option<f64>,
    /// Ranged re-reads one shard may take before its item fails (default 10).
    #[arg(long, value_name = "N")]
    pub s3_max_resumes: Option<u32>,
    /// Where to decode and augment: `auto` probes for a usable GPU and
    /// says which path it took; `cuda` fails at once when no GPU can be
    /// used; `cpu` never looks.
    #[arg(long, value_enum, default_value = "auto")]
    pub device: Device,
    /// GPU worker: the CUDA device to run on, numbered as this process sees
    /// them (after CUDA_VISIBLE_DEVICES).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub gpu_ordinal: usize,
    /// GPU worker: threads driving the GPU, each with its own CUDA stream
    /// and nvJPEG decoder, so one batch's host work overlaps another's
    /// decode.
    #[arg(long, default_value_t = gpu::DEFAULT_LANES, value_name = "N")]
    pub gpu_lanes: usize,
    /// GPU worker: most JPEGs decoded and transformed in one batch.
    #[arg(long, default_value_t = gpu::DEFAULT_MAX_BATCH, value_name = "N")]
    pub gpu_batch: usize,
    /// GPU worker: device memory one batch may hold for decoded images and
    /// outputs; the stream-ordered pool keeps lanes x this for reuse, so
    /// the footprint stays flat. Larger images go to the CPU path.
    #[arg(long, default_value_t = ByteSize(gpu::DEFAULT_BATCH_MEMORY), value_name = "BYTES")]
    pub gpu_batch_memory: ByteSize,
    /// GPU worker: JPEGs go to the GPU lanes only. By default idle CPU
    /// threads also take JPEGs while the lanes have a backlog; this keeps
    /// the host's cores for other work (a trainer on the same host).
    #[arg(long)]
    pub gpu_only: bool,
    /// GPU worker: the SMs the lanes' kernels (nvJPEG's included) may run
    /// on: `all`, a count (rounded up to what the device can split; 8 SMs
    /// on Hopper), or `auto`, the share chosen for lanes beside a training
    /// step (docs/gpu.md). A count needs green contexts (CUDA 12.4+);
    /// `auto` runs on every SM without them. A worker started by
    /// `workers="local"` in the training process takes `all` unless
    /// `STOKER_LOCAL_GPU_SMS` says otherwise.
    #[arg(long, default_value = "all", value_name = "SHARE")]
    pub gpu_sms: SmShare,
    /// Benchmarks only: process each shard once, then send the same
    /// results again for every later request of it (any seed or epoch),
    /// from memory. Measures the client's transport and upload alone.
    #[arg(long)]
    pub replay: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    Auto,
    Cpu,
    Cuda,
}

impl WorkerArgs {
    fn config(&self) -> anyhow::Result<WorkerConfig> {
        let mut config = WorkerConfig::default();
        if let Some(t) = self.threads {
            anyhow::ensure!(t > 0, "--threads must be at least 1");
            config = config.with_threads(t);
        }
        config.replay = self.replay;
        config.cpu_jpegs = !self.gpu_only;
        anyhow::ensure!(
            (1024..=u64::from(MAX_CHUNK_BYTES)).contains(&self.chunk_bytes.0),
            "--chunk-bytes must be between 1k and {}, got {}",
            ByteSize(MAX_CHUNK_BYTES.into()),
            self.chunk_bytes
        );
        anyhow::ensure!(self.max_member_bytes.0 > 0, "--max-member-bytes must be positive");
        anyhow::ensure!(self.max_image_pixels > 0, "--max-image-pixels must be positive");
        config.chunk_bytes = self.chunk_bytes.0 as usize;
        config.max_member_bytes = self.max_member_bytes.0;
        config.max_image_pixels = self.max_image_pixels;
        anyhow::ensure!(
            self.memory_limit.0 >= stoker_worker::memory::MIN_LIMIT,
            "--memory-limit must be at least {}, got {}",
            ByteSize(stoker_worker::memory::MIN_LIMIT),
            self.memory_limit
        );
        config.memory_limit = self.memory_limit.0;
        let seconds = |flag: &str, s: f64| {
            anyhow::ensure!(
                s.is_finite() && s > 0.0 && s <= 86_400.0,
                "{flag} must be a positive number of seconds, got {s}"
            );
            Ok(std::time::Duration::from_secs_f64(s))
        };
        if let Some(n) = self.s3_max_attempts {
            anyhow::ensure!(n > 0, "--s3-max-attempts must be at least 1");
            config.storage.max_attempts = n;
        }
        if let Some(s) = self.s3_attempt_timeout {
            config.storage.attempt_timeout = seconds("--s3-attempt-timeout", s)?;
        }
        if let Some(s) = self.s3_read_timeout {
            config.storage.read_timeout = seconds("--s3-read-timeout", s)?;
        }
        if let Some(n) = self.s3_max_resumes {
            config.storage.max_resumes = n;
        }
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

/// The GPU runner `--device` asks for, or `None` for the CPU path; either
/// way the log says which path was taken and why.
fn start_gpu(args: &WorkerArgs, config: &WorkerConfig) -> anyhow::Result<Option<GpuRunner>> {
    if args.device == Device::Cpu {
        info!("--device cpu: serving on cpu");
        return Ok(None);
    }
    anyhow::ensure!(
        (1..=16).contains(&args.gpu_lanes),
        "--gpu-lanes must be between 1 and 16, got {}",
        args.gpu_lanes
    );
    anyhow::ensure!(
        (1..=1024).contains(&args.gpu_batch),
        "--gpu-batch must be between 1 and 1024, got {}",
        args.gpu_batch
    );
    anyhow::ensure!(
        args.gpu_batch_memory.0 >= 16 << 20,
        "--gpu-batch-memory must be at least 16M, got {}",
        args.gpu_batch_memory
    );
    let started = stoker_worker::gpu::Gpu::open(args.gpu_ordinal)
        .map_err(|e| e.to_string())
        .and_then(|mut gpu| {
            let confined = gpu
                .confine(args.gpu_sms)
                .map_err(|e| format!("--gpu-sms {}: {e}", args.gpu_sms))?;
            info!(gpu_sms = %args.gpu_sms, lanes_run_on = %confined, "gpu lanes' share of the device");
            let runner_config = GpuRunnerConfig {
                lanes: args.gpu_lanes,
                max_batch: args.gpu_batch,
                batch_memory: args.gpu_batch_memory.0,
                max_image_pixels: config.max_image_pixels,
            };
            GpuRunner::start(&gpu, runner_config).map_err(|e| e.to_string())
        });
    match started {
        Ok(runner) => {
            let c = runner.config();
            info!(
                gpu = %runner.info(),
                lanes = c.lanes,
                batch = c.max_batch,
                batch_memory_mib = c.batch_memory >> 20,
                "serving on gpu: nvjpeg batch decode and cuda kernels for every transform; images the gpu cannot take (png, grey or cmyk jpeg) run on the cpu pool, which also takes jpegs from the gpu lanes' backlog when that measured faster"
            );
            Ok(Some(runner))
        }
        Err(reason) if args.device == Device::Cuda => anyhow::bail!("--device cuda: no usable gpu: {reason}"),
        Err(reason) => {
            info!(%reason, "no usable gpu; serving on cpu");
            Ok(None)
        }
    }
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let parent_gone = args.stop_on_stdin_eof.then(stdin_eof).transpose()?;
    run_until(
        args,
        |addr| {
            // Scripts and tests read the bound addresses (useful with port 0).
            println!("stoker worker listening on {addr}");
        },
        async move {
            match parent_gone {
                Some(eof) => tokio::select! {
                    () = shutdown_signal() => info!("shutdown signal received"),
                    _ = eof => info!("standard input closed: the process that started this worker is gone"),
                },
                None => {
                    shutdown_signal().await;
                    info!("shutdown signal received");
                }
            }
        },
    )
    .await
}

/// Resolves when standard input reaches its end (or fails), read on a
/// thread of its own: the parent holding the pipe's other end exited.
fn stdin_eof() -> anyhow::Result<tokio::sync::oneshot::Receiver<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("stoker-stdin".to_owned())
        .spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
            let _ = tx.send(());
        })
        .context("--stop-on-stdin-eof: cannot start the thread watching standard input")?;
    Ok(rx)
}

/// Runs a worker until `shutdown` resolves, then drains it; `ready` gets
/// its address once it listens. [`run`] is this with the process's
/// signals; an embedded worker ([`crate::embedded`]) installs none.
pub async fn run_until(
    args: WorkerArgs,
    ready: impl FnOnce(&ListenAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Read before anything binds: a bad --token-file fails at once.
    let token = args.token.secret()?;
    // So is a bad CA file for S3 (AWS_CA_BUNDLE, SSL_CERT_FILE), though
    // the S3 client is made at first use.
    let s3_trust = stoker_storage::S3Trust::from_env()?;
    if s3_trust.is_custom() {
        info!(trusted = %s3_trust.describe(), "s3 tls: ca files from the environment");
    }
    let allow = AllowList::new(&args.allow_dataset)?;
    let config = args.config()?;
    #[cfg(feature = "failpoints")]
    for point in stoker_worker::failpoint::configure_from_env().map_err(anyhow::Error::msg)? {
        warn!(%point, "failpoint set: this worker injects faults (tests only)");
    }
    let gpu = start_gpu(&args, &config)?;
    let device = if gpu.is_some() { "cuda" } else { "cpu" };
    let listener = Listener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.address().context("listener has no local address")?;
    // Bound before any work starts, so a port in use fails the start.
    let metrics_listener = match &args.metrics_listen {
        Some(value) => Some(stoker_metrics::bind(stoker_metrics::listen_addr(value)?).await?),
        None => None,
    };
    let threads = config.threads;
    let ctx = match gpu {
        Some(gpu) => WorkerContext::with_gpu(config, gpu),
        None => WorkerContext::new(config),
    };
    let ctx = Arc::new(ctx.context("cannot start the cpu pool")?);
    let jpeg_decoder = if stoker_worker::libjpeg::enabled() {
        "libjpeg-turbo region decode, zune-jpeg fallback"
    } else if stoker_worker::libjpeg::AVAILABLE {
        "zune-jpeg (STOKER_JPEG_DECODER=zune)"
    } else {
        "zune-jpeg (built without libjpeg-turbo)"
    };
    let memory_budget_mib = ctx.budget.capacity() >> 20;
    info!(%addr, threads, device, jpeg_decoder, memory_budget_mib, "worker ready");
    if ctx.config.replay {
        warn!("--replay: each shard is processed once and its results sent again for every epoch; for benchmarks only");
    }
    ready(&addr);
    if let Some(listener) = metrics_listener {
        let metrics_addr = listener.local_addr().context("metrics listener has no local address")?;
        info!(addr = %metrics_addr, "serving metrics at /metrics");
        println!("stoker worker metrics on http://{metrics_addr}/metrics");
        stoker_metrics::spawn(listener, Arc::new(stoker_worker::scrape::registry(&ctx)));
    }
    let _ = std::io::stdout().flush();
    anyhow::ensure!(
        args.grace_period.is_finite() && args.grace_period >= 0.0,
        "--grace-period must be a non-negative number of seconds, got {}",
        args.grace_period
    );
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::from_files(cert, key, args.tls_client_ca.as_deref())?),
        _ => None,
    };
    let options = ServeOptions {
        token,
        tls,
        grace: std::time::Duration::from_secs_f64(args.grace_period),
        allow,
    };
    serve(listener, Arc::clone(&ctx), options, shutdown)
        .await
        .with_context(|| format!("worker on {addr} failed"))?;
    let c = &ctx.counters;
    let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
    info!(
        samples = load(&c.samples),
        skipped = load(&c.skipped),
        gpu_samples = ctx.gpu.as_ref().map_or(0, |g| load(&g.counters.images)),
        cpu_samples = load(&c.cpu_samples),
        cpu_jpeg_samples = load(&c.cpu_jpegs),
        "worker stopped"
    );
    Ok(())
}
