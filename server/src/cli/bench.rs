//! `stoker bench`: the worker's CPU pipeline (decode + transform) on a
//! folder of images, without network or storage, in images/s per core.
//! Used by scripts/bench-cpu.sh next to the PIL baseline, and by operators
//! to size a worker fleet.

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
}

#[derive(Debug, Serialize)]
struct BenchResult {
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
    let started = Instant::now();
    let (done, skipped) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (images, spec) = (&images, &spec);
                s.spawn(move || {
                    let (mut done, mut skipped) = (0u64, 0u64);
                    for epoch in 0..args.passes {
                        for (key, kind, data) in images.iter().skip(t).step_by(args.threads) {
                            let raw = RawSample {
                                key: key.clone(),
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
    let result = BenchResult {
        images: done,
        threads: args.threads,
        seconds,
        images_per_sec: rate,
        images_per_sec_per_core: rate / args.threads as f64,
        skipped,
    };
    eprintln!(
        "{done} images ({}x{} {}) on {} thread(s) in {seconds:.2}s: {rate:.0} images/s, {:.0} per thread",
        args.image_size, args.image_size, args.transform, args.threads, result.images_per_sec_per_core
    );
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}
