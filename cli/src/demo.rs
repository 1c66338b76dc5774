//! `stoker demo`: the whole path on a small synthetic dataset, with workers
//! started in this process. Needs no set-up, no S3 and no arguments.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use stoker_client::{Loader, LoaderConfig, TransformSpec};
use stoker_core::{DatasetUri, ShardFormat};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::human_bytes;
use crate::stream::{print_summary, stream_epochs};
use crate::synth::{SynthArgs, pack_with_progress, write_image_folder};
use stoker_storage::Storage;
use stoker_worker::{ServeOptions, WorkerConfig, WorkerContext, serve};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Images in the synthetic dataset.
    #[arg(long, default_value_t = 1024)]
    pub images: usize,
    /// Workers to start in this process.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Output images are SIZE x SIZE.
    #[arg(long, default_value_t = 224)]
    pub image_size: u32,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.images > 0, "--images must be at least 1");
    anyhow::ensure!(args.workers > 0, "--workers must be at least 1");
    let dir = tempfile::tempdir().context("cannot create a temporary folder")?;
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    println!(
        "Stoker demo: {} synthetic images, {} in-process workers",
        args.images, args.workers
    );

    let t = Instant::now();
    let synth = SynthArgs {
        output: images.clone(),
        images: args.images,
        classes: 10,
        width: 500,
        height: 375,
        quality: 90,
        photos: None,
        seed: 0,
    };
    write_image_folder(&synth).await?;
    println!(
        "  1. drew {} ImageNet-sized (500x375) JPEGs in 10 classes in {:.1}s",
        args.images,
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let uri = DatasetUri::Local(shards.clone());
    let packed = pack_with_progress(&Storage::new(), &images, &uri, ShardFormat::WebDataset, 8 << 20).await?;
    println!(
        "  2. packed them into {} WebDataset shards ({}) with an index in {:.1}s",
        packed.shards,
        human_bytes(packed.bytes as f64),
        t.elapsed().as_secs_f64()
    );

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / args.workers).max(1);
    let mut addrs = Vec::new();
    let mut stops = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..args.workers {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot bind a loopback port")?;
        addrs.push(listener.local_addr()?.to_string());
        let config = WorkerConfig::default().with_threads(threads);
        let ctx = Arc::new(WorkerContext::new(config)?);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        stops.push(stop_tx);
        servers.push(tokio::spawn(serve(listener, ctx, ServeOptions::default(), async {
            let _ = stop_rx.await;
        })));
    }
    println!(
        "  3. started {} workers ({threads} CPU threads each) on {}",
        args.workers,
        addrs.join(", ")
    );

    let transform = TransformSpec::preset("train", args.image_size)?;
    let mut config = LoaderConfig::new(
        addrs.clone(),
        shards.display().to_string(),
        args.batch_size,
        transform.clone(),
    );
    config.seed = 0;
    let loader = Loader::connect(config).await?;
    let mut keys = HashSet::new();
    let mut duplicates = 0u64;
    let (summary, reports) = stream_epochs(&loader, 0, 1, |batch| {
        for k in &batch.keys[..batch.real()] {
            if !keys.insert(k.clone()) {
                duplicates += 1;
            }
        }
        Ok(())
    })
    .await?;
    println!("  4. streamed one epoch through the workers with transform {transform}");
    // No recommended worker count: the demo takes no training step, so it
    // always waits for its batches and the figure would mean nothing.
    print_summary(&summary, &reports, false);

    for stop in stops {
        let _ = stop.send(());
    }
    for server in servers {
        server.await.context("worker task failed")??;
    }

    let expected = packed.samples - summary.skipped;
    let exact = keys.len() as u64 == expected && duplicates == 0;
    println!();
    println!("Report");
    println!(
        "  samples delivered : {} of {} ({} skipped)",
        summary.samples, packed.samples, summary.skipped
    );
    println!(
        "  exactly once      : {} ({} unique keys, {duplicates} duplicates)",
        if exact { "yes" } else { "NO" },
        keys.len()
    );
    println!("  batches           : {} of up to {}", summary.batches, args.batch_size);
    println!("  time              : {:.2}s", summary.seconds);
    println!(
        "  throughput        : {:.0} images/s, {}/s of uint8 pixels",
        summary.images_per_sec,
        human_bytes(summary.bytes_per_sec)
    );
    println!(
        "  per core          : {:.0} images/s ({cores} cores on this machine)",
        summary.images_per_sec / cores as f64
    );
    for w in &summary.workers {
        println!("  worker {:<21}: {} samples", w.addr, w.samples);
    }
    println!();
    println!("Next: `stoker worker --listen 0.0.0.0:50051` on preprocessing hosts, then");
    println!("`stoker stream --workers HOST:50051 --dataset s3://bucket/prefix/ --batch-size 256 --image-size 224`");
    println!("(or --workers dns://NAME:50051 for every address of NAME); `stoker doctor` with the same");
    println!("flags names the stage that holds the rate down and how many workers a target rate needs.");
    anyhow::ensure!(
        exact,
        "exactly-once check failed: {} unique keys for {expected} samples, {duplicates} duplicates",
        keys.len()
    );
    Ok(())
}
