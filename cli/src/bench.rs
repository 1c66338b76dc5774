//! `stoker bench`: the worker's pipeline (decode + transform) on a folder
//! of images, without network or storage. `--device cpu` runs the CPU path
//! on `--threads` threads and reports images/s per core (scripts/bench-cpu.sh
//! sets it beside the PIL baseline); `--device cuda` runs the GPU worker's
//! runner (nvJPEG batches, the fused crop kernel, copies back to host
//! memory) fed by `--items` concurrent work items, as a worker serving
//! that many items would be (scripts/gpu-check.sh sets it beside
//! torchvision's GPU decode). Operators use it to size a fleet.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use stoker_core::TransformSpec;

use stoker_formats::image::ImageKind;
use stoker_formats::sample::RawSample;
use stoker_pack::{SourceImage, pack_images};
use stoker_worker::metrics::WorkerMetrics;
use stoker_worker::pipeline::process_sample;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Folder of JPEG/PNG images (searched recursively).
    #[arg(long)]
    pub input: PathBuf,
    /// cpu: threads, each with its own share of the images (default 1).
    /// cuda: the CPU pool's threads (default: all cores, as a worker).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub transform: crate::transform::TransformArgs,
    /// Passes over the images (each pass is a new epoch: new crops).
    #[arg(long, default_value_t = 3)]
    pub passes: u64,
    /// `cpu`, or `cuda` for the GPU worker's runner.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// cuda: work items in flight at once (default: as many as a client
    /// keeps in flight on such a worker).
    #[arg(long)]
    pub items: Option<usize>,
    /// cuda: JPEGs go to the GPU lanes only (the worker's --gpu-only).
    #[arg(long)]
    pub gpu_only: bool,
    /// cuda: images per batch an item hands the GPU (the worker's --gpu-batch).
    #[arg(long, default_value_t = stoker_worker::gpu::DEFAULT_MAX_BATCH)]
    pub gpu_batch: usize,
    /// cuda: threads driving the GPU (the worker's --gpu-lanes).
    #[arg(long, default_value_t = stoker_worker::gpu::DEFAULT_LANES)]
    pub gpu_lanes: usize,
    /// cuda: the SMs the lanes run on (the worker's --gpu-sms).
    #[arg(long, default_value = "all", value_name = "SHARE")]
    pub gpu_sms: stoker_worker::gpu::SmShare,
}

#[derive(Debug, Serialize)]
struct BenchResult {
    device: &'static str,
    images: u64,
    threads: usize,
    seconds: f64,
    images_per_sec: f64,
    images_per_sec_per_core: f64,
    skipped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_only: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<usize>,
    /// cuda: samples finished on the GPU and on the CPU pool in the
    /// measured passes, and the JPEGs among the latter.
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_jpeg_samples: Option<u64>,
}

fn collect(dir: &Path, out: &mut Vec<(String, ImageKind, Bytes)>) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out)?;
            continue;
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let kind = match ext.as_str() {
            "jpg" | "jpeg" => ImageKind::Jpeg,
            "png" => ImageKind::Png,
            _ => continue,
        };
        let data = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        out.push((path.display().to_string(), kind, Bytes::from(data)));
    }
    Ok(())
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.threads != Some(0), "--threads must be at least 1");
    anyhow::ensure!(args.passes > 0, "--passes must be at least 1");
    let spec = args.transform.spec()?;
    let mut images = Vec::new();
    collect(&args.input, &mut images)?;
    anyhow::ensure!(
        !images.is_empty(),
        "no images (jpg, jpeg, png) under {}",
        args.input.display()
    );
    match args.device.as_str() {
        "cpu" => run_cpu(&args, &spec, &images),
        "cuda" => run_gpu(&args, spec, &images),
        other => anyhow::bail!("--device must be cpu or cuda, got {other:?}"),
    }
}

fn report(args: &BenchArgs, result: &BenchResult) -> anyhow::Result<()> {
    eprintln!(
        "{} images ({}) on {} in {:.2}s: {:.0} images/s, {:.0} per thread",
        result.images,
        args.transform.spec()?,
        if result.device == "cuda" {
            "the gpu".to_owned()
        } else {
            format!("{} thread(s)", result.threads)
        },
        result.seconds,
        result.images_per_sec,
        result.images_per_sec_per_core
    );
    println!("{}", serde_json::to_string(result)?);
    Ok(())
}

/// A GPU worker's pipeline as `stoker worker --device cuda` runs it, minus
/// the network: the images packed into shards in a temporary folder, read
/// by `--items` concurrent work items (by default as many as a client
/// keeps in flight from the worker's `Info`), JPEGs batched to the GPU
/// lanes, the CPU pool taking what the GPU cannot and, unless
/// `--gpu-only`, JPEGs while the lanes have a backlog. One warm-up pass
/// first (NVRTC, nvJPEG buffers, the memory pool).
fn run_gpu(args: &BenchArgs, spec: TransformSpec, images: &[(String, ImageKind, Bytes)]) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use stoker_worker::gpu::{Gpu, GpuRunner, GpuRunnerConfig};
    use stoker_worker::pipeline::{WorkerConfig, WorkerContext};
    anyhow::ensure!(args.gpu_batch > 0, "--gpu-batch must be at least 1");
    let mut gpu = Gpu::open(0).map_err(|e| anyhow::anyhow!("--device cuda: no usable gpu: {e}"))?;
    let confined = gpu
        .confine(args.gpu_sms)
        .with_context(|| format!("--gpu-sms {}", args.gpu_sms))?;
    eprintln!("lanes on {confined}");
    let runner = GpuRunner::start(
        &gpu,
        GpuRunnerConfig {
            lanes: args.gpu_lanes,
            max_batch: args.gpu_batch,
            ..GpuRunnerConfig::default()
        },
    )?;
    eprintln!("{}", runner.info());
    let mut config = WorkerConfig::default();
    if let Some(t) = args.threads {
        config = config.with_threads(t);
    }
    config.cpu_jpegs = !args.gpu_only;
    let threads = config.threads;
    let ctx = Arc::new(WorkerContext::with_gpu(config, runner)?);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let dir = tempfile::tempdir().context("cannot make a temporary folder for the shards")?;
    let dataset = stoker_core::DatasetUri::Local(dir.path().to_owned());
    let sources: Vec<SourceImage> = images
        .iter()
        .enumerate()
        .map(|(i, (path, kind, data))| SourceImage {
            path: PathBuf::from(path),
            key: format!("bench/{i:06}"),
            ext: if *kind == ImageKind::Jpeg { "jpg" } else { "png" }.to_owned(),
            label: 0,
            size: data.len() as u64,
        })
        .collect();
    let (shards, items) = rt.block_on(async {
        pack_images(
            &ctx.storage,
            &sources,
            vec!["bench".to_owned()],
            &dataset,
            stoker_core::ShardFormat::WebDataset,
            8 << 20,
            |_, _| {},
        )
        .await?;
        let shards = stoker_worker::catalog::list_shards(&ctx.storage, &dataset, stoker_core::FormatChoice::Auto)
            .await?
            .shards;
        let per_shard = (sources.len() as u64).div_ceil(shards.len().max(1) as u64).max(1);
        let items = args
            .items
            .unwrap_or_else(|| ctx.inflight_samples().div_ceil(per_shard).max(2) as usize);
        anyhow::Ok((shards, items))
    })?;
    anyhow::ensure!(items > 0, "--items must be at least 1");
    let names: Vec<String> = shards.into_iter().map(|s| s.name).collect();
    let spec = Arc::new(spec);
    let pass = |epochs: std::ops::Range<u64>| rt.block_on(run_items(&ctx, &dataset, &names, &spec, epochs, items));
    pass(1_000..1_001)?;
    let c = &ctx.counters;
    let gpu_done = |ctx: &WorkerContext| {
        ctx.gpu
            .as_ref()
            .map_or(0, |g| g.counters.images.load(Ordering::Relaxed))
    };
    let before = (
        gpu_done(&ctx),
        c.cpu_samples.load(Ordering::Relaxed),
        c.cpu_jpegs.load(Ordering::Relaxed),
    );
    let started = Instant::now();
    let (done, skipped) = pass(0..args.passes)?;
    let seconds = started.elapsed().as_secs_f64();
    let gpu_samples = gpu_done(&ctx) - before.0;
    let cpu_samples = c.cpu_samples.load(Ordering::Relaxed) - before.1;
    let cpu_jpeg_samples = c.cpu_jpegs.load(Ordering::Relaxed) - before.2;
    if let Some(g) = &ctx.gpu {
        let gc = &g.counters;
        let per_image = |ns: &std::sync::atomic::AtomicU64| {
            ns.load(Ordering::Relaxed) as f64 / 1e3 / gc.images.load(Ordering::Relaxed).max(1) as f64
        };
        eprintln!(
            "gpu lanes' time per image (all passes, summed over lanes): plan {:.1} us, decode queueing {:.1} us, per-image steps {:.1} us, kernel + copy + wait {:.1} us, unpack {:.1} us; {} batches",
            per_image(&gc.plan_ns),
            per_image(&gc.decode_ns),
            per_image(&gc.steps_ns),
            per_image(&gc.finish_ns),
            per_image(&gc.unpack_ns),
            gc.batches.load(Ordering::Relaxed)
        );
        eprintln!(
            "gpu decodes (all passes): {} in batches ({} jpeg decoder), {} alone on the cuda backend; {} handed to the cpu path",
            gc.decoded_batched.load(Ordering::Relaxed),
            g.info().jpeg_backend.name(),
            gc.decoded_single.load(Ordering::Relaxed),
            gc.to_cpu.load(Ordering::Relaxed)
        );
        let memory = g.memory()?;
        eprintln!(
            "gpu memory pool: {:.0} MiB held, peak {:.0} MiB",
            memory.reserved as f64 / 1048576.0,
            memory.reserved_high as f64 / 1048576.0
        );
    }
    eprintln!(
        "decoded on the gpu: {gpu_samples}, on the cpu: {cpu_samples} ({cpu_jpeg_samples} of them jpegs taken while the gpu lanes had a backlog); {items} items in flight, {threads} cpu threads{}",
        if args.gpu_only { ", --gpu-only" } else { "" }
    );
    let rate = done as f64 / seconds;
    report(
        args,
        &BenchResult {
            device: "cuda",
            images: done,
            threads,
            seconds,
            images_per_sec: rate,
            images_per_sec_per_core: rate / threads as f64,
            skipped,
            gpu_only: Some(args.gpu_only),
            items: Some(items),
            gpu_samples: Some(gpu_samples),
            cpu_samples: Some(cpu_samples),
            cpu_jpeg_samples: Some(cpu_jpeg_samples),
        },
    )
}

/// Every shard of `names` once per epoch of `epochs`, `concurrency` work
/// items at a time, through the worker's own `run_item`; returns samples
/// delivered and skipped.
async fn run_items(
    ctx: &std::sync::Arc<stoker_worker::pipeline::WorkerContext>,
    dataset: &stoker_core::DatasetUri,
    names: &[String],
    spec: &std::sync::Arc<TransformSpec>,
    epochs: std::ops::Range<u64>,
    concurrency: usize,
) -> anyhow::Result<(u64, u64)> {
    use std::sync::{Arc, Mutex};
    use stoker_worker::pipeline::{Item, run_item};
    let queue: Vec<(u64, String)> = epochs.flat_map(|e| names.iter().map(move |n| (e, n.clone()))).collect();
    let queue = Arc::new(Mutex::new(queue.into_iter()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (ctx, queue, dataset, spec) = (Arc::clone(ctx), Arc::clone(&queue), dataset.clone(), Arc::clone(spec));
        tasks.spawn(async move {
            let (mut done, mut skipped) = (0u64, 0u64);
            loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some((epoch, shard)) = next else {
                    return anyhow::Ok((done, skipped));
                };
                let item = Item {
                    dataset: dataset.clone(),
                    shard,
                    seed: 0,
                    epoch,
                    spec: Arc::clone(&spec),
                    skip: Default::default(),
                    chunk_bytes: ctx.config.chunk_bytes,
                    start: 0,
                    end: None,
                    mode: stoker_core::ItemMode::Process,
                    format: stoker_core::ShardFormat::WebDataset,
                    record: stoker_core::RecordFields::default(),
                    fields: Arc::new([]),
                    views: Arc::new([]),
                    on_device: false,
                };
                let (tx, mut rx) = tokio::sync::mpsc::channel(2);
                let running = tokio::spawn(run_item(Arc::clone(&ctx), item, tx));
                while let Some(chunk) = rx.recv().await {
                    let chunk = chunk?;
                    done += chunk.samples.len() as u64;
                    skipped += chunk.skipped.len() as u64;
                    std::hint::black_box(&chunk.samples);
                }
                running.await?;
            }
        });
    }
    let (mut done, mut skipped) = (0, 0);
    while let Some(t) = tasks.join_next().await {
        let (d, s) = t??;
        done += d;
        skipped += s;
    }
    Ok((done, skipped))
}

fn run_cpu(args: &BenchArgs, spec: &TransformSpec, images: &[(String, ImageKind, Bytes)]) -> anyhow::Result<()> {
    let threads = args.threads.unwrap_or(1);
    let metrics = WorkerMetrics::default();
    let started = Instant::now();
    let (done, skipped) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (images, spec, metrics) = (images, spec, &metrics);
                s.spawn(move || {
                    let (mut done, mut skipped) = (0u64, 0u64);
                    for epoch in 0..args.passes {
                        let seed = stoker_core::ItemSeed::new(0, epoch, "bench");
                        for (position, (key, kind, data)) in images.iter().enumerate().skip(t).step_by(threads) {
                            let raw = RawSample {
                                key: key.clone(),
                                position: position as u64,
                                image: Ok((*kind, data.clone())),
                                label: Ok(0),
                                fields: Vec::new(),
                            };
                            match process_sample(raw, spec, seed, 100_000_000, metrics) {
                                Ok(p) => {
                                    std::hint::black_box(&p.pixels);
                                    done += 1;
                                }
                                Err(_) => skipped += 1,
                            }
                        }
                    }
                    (done, skipped)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, 0)))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    let seconds = started.elapsed().as_secs_f64();
    let rate = done as f64 / seconds;
    report(
        args,
        &BenchResult {
            device: "cpu",
            images: done,
            threads,
            seconds,
            images_per_sec: rate,
            images_per_sec_per_core: rate / threads as f64,
            skipped,
            gpu_only: None,
            items: None,
            gpu_samples: None,
            cpu_samples: None,
            cpu_jpeg_samples: None,
        },
    )
}
