//! A Rust training loop fed by Stoker: batches land on the GPU through the
//! client's pinned ring, converted to normalised bfloat16 NCHW there, and
//! the trainer's CUDA stream waits for each batch without blocking the host.
//!
//! ```sh
//! stoker synth --output /tmp/imgs --images 2048
//! stoker pack --input /tmp/imgs --output /tmp/shards
//! stoker worker --listen 127.0.0.1:50051 &
//! cargo run --release -p stoker-client --example train_loop -- 127.0.0.1:50051 /tmp/shards 2
//! ```
//!
//! Without a usable GPU the loader yields host batches; the loop says why
//! and runs its host step instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use stoker_client::device::{DType, DeviceBatch, Layout, UploadSpec};
use stoker_client::{Batch, DeviceTarget, LastBatch, Loader, LoaderConfig, TransformSpec};

const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(workers), Some(dataset)) = (args.next(), args.next()) else {
        return Err("usage: train_loop WORKERS DATASET [EPOCHS]".into());
    };
    let epochs: u64 = args.next().map_or(Ok(1), |e| e.parse())?;

    let workers = workers.split(',').map(str::to_owned).collect();
    let mut config = LoaderConfig::new(workers, dataset, 256, TransformSpec::train(224));
    config.seed = 42;
    // Every step gets a full batch; with an index, every rank the same count.
    config.last_batch = LastBatch::Drop;
    config.device = Some(DeviceTarget {
        ordinal: 0,
        spec: UploadSpec::new(Layout::Nchw, DType::Bf16).with_mean_std(IMAGENET_MEAN, IMAGENET_STD),
    });
    let loader = Loader::connect(config).await?;

    // The stream the model's kernels would run on (a framework has its own;
    // PyTorch's current stream, say). Same device, primary context.
    let trainer: Option<Arc<CudaStream>> = if loader.uploads() {
        Some(stoker_cuda::open_context(0)?.new_stream()?)
    } else {
        let reason = stoker_client::device::probe(0).err().map(|e| e.to_string());
        println!(
            "no usable gpu ({}): training on host batches",
            reason.as_deref().unwrap_or("the upload could not start")
        );
        None
    };

    for epoch in 0..epochs {
        let mut batches = loader.epoch(epoch)?;
        let (started, mut waited, mut images) = (Instant::now(), Duration::ZERO, 0usize);
        loop {
            let asked = Instant::now();
            let Some(batch) = batches.next_batch().await else {
                break;
            };
            waited += asked.elapsed();
            let batch = batch?;
            images += batch.len();
            match (&batch.device, &trainer) {
                (Some(on_gpu), Some(stream)) => gpu_step(on_gpu, stream)?,
                _ => host_step(&batch),
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "epoch {epoch}: {images} images in {seconds:.2}s, {:.0} images/s, {:.0}% of the time waiting for data",
            images as f64 / seconds,
            100.0 * waited.as_secs_f64() / seconds
        );
    }
    Ok(())
}

/// One step on the GPU: the trainer's stream waits for the batch's copy and
/// conversion (no host wait), then the model would read `device_ptr()`
/// (`shape()` is [256, 3, 224, 224], bfloat16). The batch's memory is freed
/// when it is dropped, after the work queued on `stream` so far.
fn gpu_step(batch: &DeviceBatch, stream: &Arc<CudaStream>) -> Result<(), Box<dyn std::error::Error>> {
    batch.wait_on_stream(stream)?;
    // forward + backward + optimizer step, queued on `stream`, go here.
    stream.synchronize()?;
    Ok(())
}

/// One step on host batches: `pixels` holds uint8 NHWC images.
fn host_step(batch: &Batch) {
    let mean: f64 = batch.image(0).iter().map(|&p| f64::from(p)).sum::<f64>() / batch.image(0).len() as f64;
    std::hint::black_box(mean);
}
