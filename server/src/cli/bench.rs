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

use crate::pipeline::process_sample;
use crate::wds::{ImageKind, RawSample};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Folder of JPEG/PNG images (searched recursively).
    #[arg(long)]
    pub input: PathBuf,
    /// Threads, each with its own share of the images.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, default_value = "train")]
    pub transform: String,
    #[arg(long, default_value_t = 224)]
    pub image_size: u32,
    /// Passes over the images (each pass is a new epoch: new crops).
    #[arg(long, default_value_t = 3)]
    pub passes: u64,
    /// `cpu`, or `cuda` for the GPU worker's runner.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// cuda: work items feeding the GPU at once.
    #[arg(long, default_value_t = 8)]
    pub items: usize,
    /// cuda: images per batch an item hands the GPU (the worker's --gpu-batch).
    #[arg(long, default_value_t = 128)]
    pub gpu_batch: usize,
    /// cuda: threads driving the GPU (the worker's --gpu-lanes).
    #[arg(long, default_value_t = 4)]
    pub gpu_lanes: usize,
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
    anyhow::ensure!(args.threads > 0, "--threads must be at least 1");
    anyhow::ensure!(args.passes > 0, "--passes must be at least 1");
    let spec = TransformSpec::preset(&args.transform, args.image_size)?;
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
        "{} images ({}x{} {}) on {} in {:.2}s: {:.0} images/s, {:.0} per thread",
        result.images,
        args.image_size,
        args.image_size,
        args.transform,
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

/// The GPU runner, fed by `--items` tasks that each hand it batches of
/// their share of the images, pass after pass. One warm-up pass first
/// (NVRTC, nvJPEG buffers, the memory pool).
fn run_gpu(args: &BenchArgs, spec: TransformSpec, images: &[(String, ImageKind, Bytes)]) -> anyhow::Result<()> {
    use crate::gpu::{Gpu, GpuResult, GpuRunner, GpuRunnerConfig, GpuSample};
    use std::sync::Arc;
    anyhow::ensure!(
        args.items > 0 && args.gpu_batch > 0,
        "--items and --gpu-batch must be at least 1"
    );
    let gpu = Gpu::open(0).map_err(|e| anyhow::anyhow!("--device cuda: no usable gpu: {e}"))?;
    let config = GpuRunnerConfig {
        lanes: args.gpu_lanes,
        max_batch: args.gpu_batch,
        ..GpuRunnerConfig::default()
    };
    let runner = Arc::new(GpuRunner::start(&gpu, config)?);
    eprintln!("{}", runner.info());
    let spec = Arc::new(spec);
    let jpegs: Arc<Vec<(String, Bytes)>> = Arc::new(
        images
            .iter()
            .filter(|(_, kind, _)| *kind == ImageKind::Jpeg)
            .map(|(k, _, d)| (k.clone(), d.clone()))
            .collect(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let pass = |epochs: std::ops::Range<u64>| {
        rt.block_on(async {
            let tasks: Vec<_> = (0..args.items)
                .map(|t| {
                    let (runner, spec, jpegs) = (Arc::clone(&runner), Arc::clone(&spec), Arc::clone(&jpegs));
                    let (items, batch) = (args.items, args.gpu_batch);
                    let epochs = epochs.clone();
                    tokio::spawn(async move {
                        let (mut done, mut to_cpu) = (0u64, 0u64);
                        for epoch in epochs {
                            let mine: Vec<&(String, Bytes)> = jpegs.iter().skip(t).step_by(items).collect();
                            for part in mine.chunks(batch) {
                                let samples = part
                                    .iter()
                                    .map(|(key, data)| GpuSample {
                                        key: key.clone(),
                                        position: 0,
                                        label: 0,
                                        data: data.clone(),
                                    })
                                    .collect();
                                let results = runner.run(samples, Arc::clone(&spec), 0, epoch).await?;
                                for r in results {
                                    match r {
                                        GpuResult::Done(p) => {
                                            std::hint::black_box(&p.pixels);
                                            done += 1;
                                        }
                                        GpuResult::Cpu { .. } => to_cpu += 1,
                                    }
                                }
                            }
                        }
                        Ok::<_, crate::gpu::runner::RunnerGone>((done, to_cpu))
                    })
                })
                .collect();
            let (mut done, mut to_cpu) = (0, 0);
            for t in tasks {
                let (d, c) = t.await??;
                done += d;
                to_cpu += c;
            }
            anyhow::Ok((done, to_cpu))
        })
    };
    pass(1_000..1_001)?;
    let started = Instant::now();
    let (done, to_cpu) = pass(0..args.passes)?;
    let seconds = started.elapsed().as_secs_f64();
    let c = &runner.counters;
    let per_image = |ns: &std::sync::atomic::AtomicU64| {
        ns.load(std::sync::atomic::Ordering::Relaxed) as f64
            / 1e3
            / c.images.load(std::sync::atomic::Ordering::Relaxed).max(1) as f64
    };
    eprintln!(
        "gpu lanes' time per image (all passes, summed over lanes): plan {:.1} us, decode queueing {:.1} us, per-image steps {:.1} us, kernel + copy + wait {:.1} us, unpack {:.1} us; {} batches",
        per_image(&c.plan_ns),
        per_image(&c.decode_ns),
        per_image(&c.steps_ns),
        per_image(&c.finish_ns),
        per_image(&c.unpack_ns),
        c.batches.load(std::sync::atomic::Ordering::Relaxed)
    );
    let memory = runner.memory()?;
    eprintln!(
        "gpu memory pool: {:.0} MiB held, peak {:.0} MiB",
        memory.reserved as f64 / 1048576.0,
        memory.reserved_high as f64 / 1048576.0
    );
    let rate = done as f64 / seconds;
    report(
        args,
        &BenchResult {
            device: "cuda",
            images: done,
            threads: args.gpu_lanes,
            seconds,
            images_per_sec: rate,
            images_per_sec_per_core: rate / args.gpu_lanes as f64,
            skipped: to_cpu,
        },
    )
}

fn run_cpu(args: &BenchArgs, spec: &TransformSpec, images: &[(String, ImageKind, Bytes)]) -> anyhow::Result<()> {
    let started = Instant::now();
    let (done, skipped) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (images, spec) = (images, spec);
                s.spawn(move || {
                    let (mut done, mut skipped) = (0u64, 0u64);
                    for epoch in 0..args.passes {
                        for (key, kind, data) in images.iter().skip(t).step_by(args.threads) {
                            let raw = RawSample {
                                key: key.clone(),
                                position: 0,
                                image: Ok((*kind, data.clone())),
                                label: Ok(0),
                            };
                            match process_sample(raw, spec, 0, epoch, 100_000_000) {
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
            threads: args.threads,
            seconds,
            images_per_sec: rate,
            images_per_sec_per_core: rate / args.threads as f64,
            skipped,
        },
    )
}
