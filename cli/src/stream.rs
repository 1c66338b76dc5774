//! `stoker stream`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use stoker_client::{EpochReport, Loader, LoaderConfig, TlsOptions};

use crate::human_bytes;
use crate::progress::Progress;

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Workers, comma-separated: HOST:PORT, unix:PATH, dns://NAME:PORT for
    /// every address NAME resolves to (a Kubernetes headless Service, a
    /// scaled compose service; resolved again every --resolve-interval),
    /// or `local`: workers this command starts on this host and stops
    /// when it ends (a CPU worker, and a GPU worker with --device cuda).
    #[arg(long, value_delimiter = ',', required = true)]
    pub workers: Vec<String>,
    /// Threads of the `local` CPU worker (default: this host's cores less
    /// one, shared among LOCAL_WORLD_SIZE ranks).
    #[arg(long, value_name = "N")]
    pub local_threads: Option<usize>,
    /// Seconds between two resolutions of dns:// workers: addresses that
    /// appear get work, those that disappear are drained.
    #[arg(long, default_value_t = stoker_client::DEFAULT_RESOLVE_INTERVAL.as_secs_f64(), value_name = "SECONDS")]
    pub resolve_interval: f64,
    /// Ask this DNS server (IP:PORT) for dns:// workers instead of the
    /// system's resolver configuration.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_server: Option<std::net::SocketAddr>,
    /// s3://bucket/prefix/, file:///abs/dir/ or a path, as workers see it
    /// (a relative path is made absolute from this directory first).
    #[arg(long)]
    pub dataset: String,
    /// Samples per batch.
    #[arg(long)]
    pub batch_size: usize,
    /// Epochs to stream.
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// First epoch number (epochs run from here).
    #[arg(long, default_value_t = 0)]
    pub start_epoch: u64,
    /// Seed of the epoch plans and every sample's random draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub transform: crate::transform::TransformArgs,
    /// This client's rank: it streams its share of each epoch.
    #[arg(long, default_value_t = 0)]
    pub rank: u32,
    /// Ranks sharing each epoch.
    #[arg(long, default_value_t = 1)]
    pub world_size: u32,
    /// Batches assembled ahead of the consumer.
    #[arg(long, default_value_t = stoker_client::DEFAULT_PREFETCH)]
    pub prefetch: usize,
    /// Work items in flight per worker. By default each worker gets as many
    /// as it says it needs in flight (in samples: a GPU worker's lanes ×
    /// batch, a CPU worker's read-ahead), whatever the shard size.
    #[arg(long, value_name = "N")]
    pub inflight: Option<usize>,
    /// An epoch's last, incomplete batch: drop it, keep it (partial), or
    /// fill it up with samples received before (pad). With a dataset index every
    /// rank yields the same number of batches.
    #[arg(long, default_value = "partial", value_name = "drop|partial|pad")]
    pub last_batch: stoker_client::LastBatch,
    /// Same as --last-batch drop.
    #[arg(long, conflicts_with = "last_batch")]
    pub drop_last: bool,
    /// Fill batches in plan order, not arrival order: batch k of an epoch
    /// depends only on (seed, epoch, rank, k).
    #[arg(long)]
    pub deterministic: bool,
    /// With a transform that keeps each image's size: landscape images
    /// fill batches of their own, the others theirs (Detectron2's
    /// ASPECT_RATIO_GROUPING).
    #[arg(long)]
    pub aspect_ratio_grouping: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Fail once an epoch skips more samples than this: a count (10), a
    /// fraction of the epoch (0.01) or a percentage (1%).
    #[arg(long, value_name = "N|FRACTION")]
    pub max_errors: Option<stoker_client::ErrorBudget>,
    /// Reassign a work item after this many seconds without progress.
    #[arg(long, default_value_t = stoker_client::DEFAULT_PROGRESS_TIMEOUT.as_secs())]
    pub progress_timeout: u64,
    /// Fail once every worker has been unavailable this many seconds.
    #[arg(long, default_value_t = stoker_client::DEFAULT_WORKER_PATIENCE.as_secs())]
    pub worker_patience: u64,
    /// Write one line per delivered sample: epoch<TAB>key<TAB>label.
    #[arg(long)]
    pub keys_out: Option<PathBuf>,
    /// Write one JSON object per delivered sample: `epoch`, `key`, `label`
    /// and each `--field` by its name (text as a string, JSON as the
    /// document, numbers as numbers or lists, an absent optional field as
    /// null), and each `--view` as its size and the FNV-1a hash of its
    /// pixels.
    #[arg(long, value_name = "FILE")]
    pub fields_out: Option<PathBuf>,
    /// Print a JSON summary as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// MiB of the shared-memory ring that workers on this host (same
    /// kernel and PID namespace) write samples into instead of sending
    /// them; 0 sends everything over the network.
    #[arg(long, default_value_t = stoker_client::DEFAULT_SHARED_MEMORY >> 20, value_name = "MIB")]
    pub shared_memory: usize,
    /// Pause this long after each batch, standing in for a training step
    /// (the local cluster's trainer does): the report's wait time then says
    /// how long such a trainer would wait for its data.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    pub step_seconds: f64,
    #[command(flatten)]
    pub token: crate::TokenArgs,
    /// Connect with TLS, verifying workers against this PEM CA (the system
    /// roots verify `https://` workers when it is not given).
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate for workers that require one (mutual TLS).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Name expected in worker certificates, when not the host of the
    /// worker address.
    #[arg(long, value_name = "NAME")]
    pub tls_domain: Option<String>,
    /// Serve the client's Prometheus metrics at http://ADDR/metrics while
    /// streaming: HOST:PORT, or a PORT alone for this machine only.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct WorkerJson {
    pub addr: String,
    pub samples: u64,
    /// Of them, those that came through the shared-memory ring.
    pub ring_samples: u64,
}

#[derive(Debug, Serialize)]
pub struct StreamSummary {
    pub samples: u64,
    pub batches: u64,
    pub skipped: u64,
    pub epochs: u64,
    pub seconds: f64,
    pub images_per_sec: f64,
    pub bytes_per_sec: f64,
    pub bytes: u64,
    pub retries: u64,
    pub shard_errors: Vec<String>,
    pub workers: Vec<WorkerJson>,
    /// Where batches landed: `cpu`, or `cuda:N` when uploaded.
    pub device: String,
    /// Seconds the consumer (this command) waited for batches.
    pub wait_seconds: f64,
    /// The worker count that would keep the consumer fed, from the last
    /// epoch's rates (see `EpochReport::recommended_workers`).
    pub recommended_workers: Option<u32>,
}

impl StreamArgs {
    pub fn loader_config(&self) -> anyhow::Result<LoaderConfig> {
        anyhow::ensure!(self.batch_size > 0, "--batch-size must be at least 1");
        anyhow::ensure!(self.epochs > 0, "--epochs must be at least 1");
        let transform = self.transform.spec()?;
        let mut config = LoaderConfig::new(self.workers.clone(), self.dataset.clone(), self.batch_size, transform);
        config.seed = self.seed;
        config.rank = self.rank;
        config.world_size = self.world_size;
        config.prefetch = self.prefetch;
        config.inflight_per_worker = self.inflight;
        config.last_batch = if self.drop_last {
            stoker_client::LastBatch::Drop
        } else {
            self.last_batch
        };
        config.deterministic = self.deterministic;
        config.aspect_ratio_grouping = self.aspect_ratio_grouping;
        config.device = self.device.target()?;
        if self.workers.iter().any(|w| w == stoker_client::LOCAL) {
            anyhow::ensure!(self.local_threads != Some(0), "--local-threads must be at least 1");
            let mut local = stoker_client::LocalWorkers::new(crate::self_command()?);
            local.threads = self.local_threads;
            local.gpu = config.device.map(|d| d.ordinal);
            config.local = Some(local);
        }
        self.format.apply(&mut config);
        config.max_errors = self.max_errors;
        config.token = self.token.secret()?;
        if self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_domain.is_some() {
            let mut tls = TlsOptions::from_files(
                self.tls_ca.as_deref(),
                self.tls_cert.as_deref(),
                self.tls_key.as_deref(),
            )
            .map_err(anyhow::Error::msg)?;
            tls.domain = self.tls_domain.clone();
            config.tls = Some(tls);
        }
        config.progress_timeout = std::time::Duration::from_secs(self.progress_timeout.max(1));
        config.worker_patience = std::time::Duration::from_secs(self.worker_patience);
        anyhow::ensure!(
            self.resolve_interval.is_finite() && self.resolve_interval >= 0.1,
            "--resolve-interval must be at least 0.1 seconds, got {}",
            self.resolve_interval
        );
        config.resolve_interval = std::time::Duration::from_secs_f64(self.resolve_interval);
        config.dns_server = self.dns_server;
        config.shared_memory = self
            .shared_memory
            .checked_mul(1 << 20)
            .context("--shared-memory is too large")?;
        config.metrics_listen = self
            .metrics_listen
            .as_deref()
            .map(stoker_metrics::listen_addr)
            .transpose()?;
        Ok(config)
    }
}

/// The dataset's shard format and, for record formats, which fields hold
/// the image and the label (`stream`, `doctor`).
#[derive(Debug, Args)]
pub struct FormatArgs {
    /// Shard format: `auto` goes by the files' extensions (.tar,
    /// .tfrecord / .tfrecords / .tfrec, .rec) and fails naming two files
    /// when a prefix mixes formats; TFRecord files without an extension
    /// (`train-00000-of-01024`) need `tfrecord`. RecordIO's `<stem>.idx`
    /// and TFRecord's `<shard>.idx` (DALI's layout), when present, give
    /// sample counts and let a rank read only its records' bytes.
    #[arg(long, default_value = "auto", value_name = "auto|wds|tfrecord|recordio")]
    pub format: stoker_core::FormatChoice,
    /// The field holding the encoded image: a bytes feature of TFRecord
    /// (default image/encoded), a binary or Image column of Parquet
    /// (default image).
    #[arg(long, value_name = "FIELD")]
    pub image_key: Option<String>,
    /// The field holding the label: an int64 feature of TFRecord (default
    /// image/class/label), an integer column of Parquet (default label).
    /// Samples without it are unlabelled (-1).
    #[arg(long, value_name = "FIELD")]
    pub label_key: Option<String>,
    /// Added to every label read (TFRecord, RecordIO): -1 turns
    /// TensorFlow's 1-based ImageNet labels into 0-based ones.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true, value_name = "N")]
    pub label_offset: i64,
    // Its help is FIELD_HELP; `--help` adds the kinds.
    #[arg(
        long = "field",
        value_name = "NAME=SOURCE[:KIND][?]",
        value_parser = parse_field,
        help = FIELD_HELP,
        long_help = field_long_help()
    )]
    pub fields: Vec<stoker_core::FieldSpec>,
    /// One more augmented view of each sample's image under NAME, from the
    /// same decode, with its own pipeline and draws: `train[:SIZE]`,
    /// `eval[:SIZE]`, a JSON spec or a FILE.json. Repeatable (DINOv2: two
    /// `train:224` and eight local crops).
    #[arg(long = "view", value_name = "NAME=SPEC", value_parser = parse_view)]
    pub views: Vec<stoker_core::ViewSpec>,
}

fn parse_view(text: &str) -> Result<stoker_core::ViewSpec, String> {
    let (name, spec) = text
        .split_once('=')
        .ok_or_else(|| format!("view {text:?}: expected NAME=SPEC"))?;
    let spec = spec.trim();
    let transform = if spec.starts_with('{') {
        stoker_core::TransformSpec::from_json(spec).map_err(|e| e.to_string())
    } else if spec.ends_with(".json") || std::path::Path::new(spec).is_file() {
        let json = std::fs::read_to_string(spec).map_err(|e| format!("cannot read {spec}: {e}"))?;
        stoker_core::TransformSpec::from_json(&json).map_err(|e| e.to_string())
    } else {
        let (preset, size) = match spec.split_once(':') {
            Some((p, s)) => (
                p,
                Some(
                    s.parse::<u32>()
                        .map_err(|_| format!("view {name:?}: size {s:?} is not a number"))?,
                ),
            ),
            None => (spec, None),
        };
        stoker_core::TransformSpec::parse(preset, size).map_err(|e| e.to_string())
    }
    .map_err(|e| format!("view {name:?}: {e}"))?;
    Ok(stoker_core::ViewSpec {
        name: name.to_owned(),
        transform,
    })
}

/// `--field`'s help.
const FIELD_HELP: &str = "Deliver another field of each sample under NAME: a WebDataset member extension \
     (`caption=txt`, `meta=json`), a TFRecord feature, a Parquet column, RecordIO's `label` (the whole label \
     array). A sample without it is skipped (missing_field) unless a `?` follows the source or ends it \
     (`caption=txt?`). Repeatable.";

/// `--field`'s long help: the help, then the kinds from core's table.
fn field_long_help() -> String {
    use stoker_core::FieldKind;
    let kinds: Vec<String> = FieldKind::ALL
        .iter()
        .map(|k| {
            let aliases = match k.aliases() {
                [] => String::new(),
                a => format!(" (or {})", a.join(", ")),
            };
            format!("  {}{aliases}: {}", k.as_str(), k.doc())
        })
        .collect();
    format!("{FIELD_HELP}\n\nKIND (auto when not given):\n{}", kinds.join("\n"))
}

fn parse_field(text: &str) -> Result<stoker_core::FieldSpec, String> {
    stoker_core::FieldSpec::parse(text).map_err(|e| e.to_string())
}

impl FormatArgs {
    /// Sets the loader's format and record fields.
    pub fn apply(&self, config: &mut LoaderConfig) {
        config.format = self.format;
        config.record = stoker_core::RecordFields {
            image: self.image_key.clone(),
            label: self.label_key.clone(),
            label_offset: self.label_offset,
        };
        config.fields = self.fields.clone();
        config.views = self.views.clone();
    }
}

/// Where batches land and how they are converted there (`stream`,
/// `doctor`).
#[derive(Debug, Args)]
pub struct DeviceArgs {
    /// Land batches on this GPU (`cuda` or `cuda:N`) through the client's
    /// pinned ring, converted there; each batch is waited for before the
    /// next is taken, as a training step would. `cpu` keeps them in host
    /// memory. Without a usable GPU the client says so and stays on the host.
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
    /// Element type on the GPU: uint8, float32, float16 or bfloat16.
    #[arg(long, default_value = "bfloat16")]
    pub dtype: stoker_client::device::DType,
    /// Layout on the GPU: nchw or nhwc.
    #[arg(long, default_value = "nchw")]
    pub layout: stoker_client::device::Layout,
    /// Normalise on the GPU with ImageNet's mean and std (after scaling to
    /// [0, 1]).
    #[arg(long)]
    pub normalize: bool,
}

impl DeviceArgs {
    /// The loader's `device` setting these flags ask for.
    pub fn target(&self) -> anyhow::Result<Option<stoker_client::DeviceTarget>> {
        let ordinal = match self.device.as_str() {
            "cpu" => return Ok(None),
            "cuda" => 0,
            d => d
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .with_context(|| format!("--device must be cpu, cuda or cuda:N, not {d:?}"))?,
        };
        let mut spec = stoker_client::device::UploadSpec::new(self.layout, self.dtype);
        if self.normalize {
            spec = spec.with_mean_std([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
        }
        Ok(Some(stoker_client::DeviceTarget { ordinal, spec }))
    }
}

/// Streams `epochs` epochs from `loader`; `on_batch` sees every batch.
pub async fn stream_epochs(
    loader: &Loader,
    start_epoch: u64,
    epochs: u64,
    mut on_batch: impl FnMut(&stoker_client::Batch) -> anyhow::Result<()>,
) -> anyhow::Result<(StreamSummary, Vec<EpochReport>)> {
    let started = Instant::now();
    let mut reports = Vec::new();
    let mut batches = 0u64;
    let planned: Option<u64> = loader.plan(start_epoch).ok().and_then(|p| p.samples());
    for epoch in start_epoch..start_epoch + epochs {
        let mut stream = loader.epoch(epoch)?;
        let mut progress = Progress::new(format!("epoch {epoch}"), planned);
        let epoch_started = Instant::now();
        let mut done = 0u64;
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.with_context(|| format!("epoch {epoch} failed"))?;
            if epoch + 1 < start_epoch + epochs {
                loader.start_ahead(&stream);
            }
            done += batch.real() as u64;
            batches += 1;
            if let Some(device) = &batch.device {
                // A training step would wait for its batch: so does the
                // count, which then measures the rate into device memory.
                tokio::task::block_in_place(|| device.synchronize())
                    .with_context(|| format!("batch {} of epoch {epoch} on the gpu", batch.index))?;
            }
            on_batch(&batch)?;
            progress.update(done, || {
                format!(
                    "  {}/s",
                    human_bytes(stream.bytes() as f64 / epoch_started.elapsed().as_secs_f64().max(1e-6))
                )
            });
        }
        progress.finish();
        reports.push(stream.report());
    }
    let seconds = started.elapsed().as_secs_f64();
    let samples: u64 = reports.iter().map(|r| r.samples).sum();
    let bytes: u64 = reports.iter().map(|r| r.bytes).sum();
    let mut workers: Vec<WorkerJson> = Vec::new();
    for r in &reports {
        for (i, w) in r.workers.iter().enumerate() {
            if let Some(existing) = workers.get_mut(i) {
                existing.samples += w.samples;
                existing.ring_samples += w.ring_samples;
            } else {
                workers.push(WorkerJson {
                    addr: w.addr.clone(),
                    samples: w.samples,
                    ring_samples: w.ring_samples,
                });
            }
        }
    }
    let summary = StreamSummary {
        samples,
        batches,
        skipped: reports.iter().map(|r| r.skipped).sum(),
        epochs,
        seconds,
        images_per_sec: samples as f64 / seconds.max(1e-9),
        bytes_per_sec: bytes as f64 / seconds.max(1e-9),
        bytes,
        retries: reports.iter().map(|r| r.retries).sum(),
        shard_errors: reports.iter().flat_map(|r| r.shard_errors.clone()).collect(),
        workers,
        device: match (loader.uploads(), loader.config().device) {
            (true, Some(t)) => format!("cuda:{}", t.ordinal),
            _ => "cpu".to_owned(),
        },
        wait_seconds: reports.iter().map(|r| r.wait.as_secs_f64()).sum(),
        recommended_workers: reports.last().and_then(|r| r.recommended_workers),
    };
    Ok((summary, reports))
}

/// Prints the summary on stderr. With `recommend`, the wait line ends with
/// the worker count that would keep the consumer fed; a caller whose
/// consumer takes no training step (the demo) leaves it out, since such a
/// consumer always waits and the figure means nothing.
pub fn print_summary(summary: &StreamSummary, reports: &[EpochReport], recommend: bool) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "streamed {} samples in {} batches over {} epoch(s) in {:.2}s: {:.0} images/s, {}/s, into {}",
        summary.samples,
        summary.batches,
        summary.epochs,
        summary.seconds,
        summary.images_per_sec,
        human_bytes(summary.bytes_per_sec),
        if summary.device == "cpu" {
            "host memory"
        } else {
            summary.device.as_str()
        }
    );
    for w in &summary.workers {
        let share = 100.0 * w.samples as f64 / summary.samples.max(1) as f64;
        let path = if w.ring_samples > 0 { ", shared memory" } else { "" };
        let _ = writeln!(err, "  worker {}: {} samples ({share:.0}%{path})", w.addr, w.samples);
    }
    let waited = 100.0 * summary.wait_seconds / summary.seconds.max(1e-9);
    let _ = write!(
        err,
        "  waited for batches {:.2}s ({waited:.0}% of the time)",
        summary.wait_seconds
    );
    match summary.recommended_workers.filter(|_| recommend) {
        Some(n) => {
            let _ = writeln!(err, "; workers to keep up: {n}");
        }
        None => {
            let _ = writeln!(err);
        }
    }
    if summary.skipped > 0 {
        let _ = writeln!(err, "  skipped {} samples:", summary.skipped);
        for (key, reason) in reports.iter().flat_map(|r| r.skip_reasons.iter()).take(10) {
            let _ = writeln!(err, "    {key}: {reason}");
        }
    }
    for e in &summary.shard_errors {
        let _ = writeln!(err, "  shard ended early: {e}");
    }
    if summary.retries > 0 {
        let _ = writeln!(
            err,
            "  {} work item(s) reassigned after a worker failed",
            summary.retries
        );
    }
}

pub async fn run(args: StreamArgs) -> anyhow::Result<()> {
    let config = args.loader_config()?;
    anyhow::ensure!(
        args.step_seconds.is_finite() && args.step_seconds >= 0.0,
        "--step-seconds must be a non-negative number, got {}",
        args.step_seconds
    );
    let step = std::time::Duration::from_secs_f64(args.step_seconds);
    let loader = Loader::connect(config).await?;
    let mut keys_out = match &args.keys_out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    let mut fields_out = match &args.fields_out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    let names: Vec<String> = loader.config().fields.iter().map(|f| f.name.clone()).collect();
    let cannot_write = || {
        let path = args.keys_out.as_ref().map(|p| p.display().to_string());
        format!("cannot write {}", path.unwrap_or_default())
    };
    let cannot_write_fields = || {
        let path = args.fields_out.as_ref().map(|p| p.display().to_string());
        format!("cannot write {}", path.unwrap_or_default())
    };
    let (summary, reports) = stream_epochs(&loader, args.start_epoch, args.epochs, |batch| {
        if let Some(out) = keys_out.as_mut() {
            // Padding repeats a delivered sample: only real samples count.
            let real = batch.real();
            for (key, label) in batch.keys[..real].iter().zip(&batch.labels[..real]) {
                writeln!(out, "{}\t{key}\t{label}", batch.epoch).with_context(cannot_write)?;
            }
            // One write per batch: the file is a live record of what the
            // training loop has been handed, which a watcher can follow.
            out.flush().with_context(cannot_write)?;
        }
        if let Some(out) = fields_out.as_mut() {
            for i in 0..batch.real() {
                let mut line = serde_json::Map::new();
                line.insert("epoch".into(), batch.epoch.into());
                line.insert("key".into(), batch.keys[i].clone().into());
                line.insert("label".into(), batch.labels[i].into());
                for (name, value) in names.iter().zip(&batch.fields[i]) {
                    let value = value.as_ref().map_or(serde_json::Value::Null, |v| v.to_json());
                    line.insert(name.clone(), value);
                }
                for view in &batch.views {
                    let digest = format!("{:016x}", stoker_core::rng::fnv1a(view.image(i)));
                    line.insert(
                        view.name.clone(),
                        serde_json::json!({"size": view.size, "fnv1a": digest}),
                    );
                }
                writeln!(out, "{}", serde_json::Value::Object(line)).with_context(cannot_write_fields)?;
            }
            out.flush().with_context(cannot_write_fields)?;
        }
        if !step.is_zero() {
            tokio::task::block_in_place(|| std::thread::sleep(step));
        }
        Ok(())
    })
    .await?;
    // Without a training step the consumer always waits for the next
    // batch, and a worker count that would stop it waiting means nothing.
    print_summary(&summary, &reports, args.step_seconds > 0.0);
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}
