//! Where a sample is decoded and transformed: the CPU pool, or on a GPU
//! worker the GPU lanes in batches (what they hand back goes to the pool),
//! with idle CPU threads sharing the lanes' backlog.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use stoker_core::{FieldKind, FieldSpec, ItemSeed, TransformSpec, ViewSpec, resolve_steps};
use tracing::debug;

use super::cpu::process_sample_with;
use super::{Item, ItemError, Processed, Skipped, WorkerContext};
use crate::gpu::RunnerGone;
use crate::gpu::{GpuResult, GpuRunner, GpuSample, Recipe, gpu_runs, mask_chain};
use crate::memory::Reservation;
use crate::metrics::Stage;
use crate::pool::PoolError;
use stoker_formats::image::ImageKind;
use stoker_formats::sample::RawSample;
use stoker_image::decode::{check_jpeg, sniff};

impl WorkerContext {
    /// Where `raw` of `item` is decoded: on a GPU worker a JPEG whose
    /// steps the lanes all run (its views' too, and on a `--gpu-only`
    /// worker its masks') goes to the GPU lanes (whose backlog idle CPU
    /// threads share: [`share_backlog`]), anything else to the CPU pool.
    pub(super) fn route(&self, raw: &RawSample, item: &Item) -> Route {
        match &self.gpu {
            Some(_) if gpu_jpeg(raw) && self.lanes_run(raw, item) => Route::Gpu,
            _ => Route::Cpu,
        }
    }

    /// Whether the lanes run every step of `raw`'s transform, of each of
    /// its views, and of its masks (the image's geometric steps as one
    /// chain), decided once, from its header and its draws, before it is
    /// queued: the lanes never receive a sample they would hand back for a
    /// step without a kernel (nor one whose header or draws the CPU path
    /// refuses: it skips it with the reason), and nothing is decoded twice.
    fn lanes_run(&self, raw: &RawSample, item: &Item) -> bool {
        let Ok((_, data)) = &raw.image else { return false };
        let Ok((w, h)) = check_jpeg(data, self.config.max_image_pixels) else {
            return false;
        };
        let draws = item.item_seed().sample(raw.position);
        let Ok(steps) = resolve_steps(&item.spec, &draws, w, h) else {
            return false;
        };
        let masks = item.extra.iter().any(|f| f.kind == FieldKind::Mask);
        // Masks ride the lanes only on a `--gpu-only` worker. Otherwise the
        // CPU pool takes their samples: on 640x480 JPEGs with PNG masks
        // it ran them about 1.8x faster than the lanes did (H200, 16
        // threads; docs/gpu.md), measured before the lanes stopped
        // tracking events (1f4c9b1) and not since.
        if masks && self.config.cpu_jpegs {
            return false;
        }
        steps.iter().all(gpu_runs)
            && (!masks || mask_chain(&steps, w, h).is_some())
            && item.views.iter().enumerate().all(|(j, v)| {
                resolve_steps(&v.transform, &draws.view(j), w, h).is_ok_and(|steps| steps.iter().all(gpu_runs))
            })
    }
}

/// Where a sample is decoded and transformed (see [`WorkerContext::route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// The GPU lanes, in a batch.
    Gpu,
    /// The CPU pool: not a JPEG the GPU takes, or a CPU worker.
    Cpu,
}

/// Lets idle CPU threads share the GPU lanes' backlog: while more than a
/// full batch per lane waits, a pool thread is idle and the runner's steal
/// policy allows it (`GpuRunner::backlogged`: only when stealing measured
/// faster than the lanes alone, and never a sample the lanes would reach
/// before the thread finished it), a thread takes the newest waiting JPEG
/// ([`GpuRunner::steal`]), decodes it on the CPU, hands the result back to
/// its batch, and goes for the next. No ratio to tune (unlike a fixed
/// share, such as DALI's `hw_decoder_load`). Runs at the pool's background
/// priority on a GPU worker; `--gpu-only` turns it off.
fn share_backlog(ctx: &Arc<WorkerContext>) {
    let Some(gpu) = ctx.gpu.as_ref() else { return };
    if !ctx.config.cpu_jpegs {
        return;
    }
    while ctx.pool.has_idle_thread() && gpu.backlogged() {
        let worker = Arc::clone(ctx);
        ctx.pool.execute(move || steal_one(&worker));
    }
}

/// One stolen JPEG on this pool thread, then the next one queued behind
/// whatever else the pool has to do.
fn steal_one(ctx: &Arc<WorkerContext>) {
    let Some(stolen) = ctx.gpu.as_ref().and_then(GpuRunner::steal) else {
        return;
    };
    tracing::trace!(key = %stolen.sample.key, path = "cpu-steal", "gpu decode");
    let raw = stolen.sample.clone_raw();
    let recipe = &stolen.recipe;
    let result = match process_sample_with(
        raw,
        &recipe.spec,
        recipe.seed,
        ctx.config.max_image_pixels,
        &ctx.metrics,
        &recipe.extra,
        &recipe.views,
    ) {
        Ok(p) => {
            ctx.counters.cpu_samples.fetch_add(1, Ordering::Relaxed);
            GpuResult::Done(p)
        }
        Err(s) => GpuResult::Skipped(s),
    };
    ctx.counters.cpu_jpegs.fetch_add(1, Ordering::Relaxed);
    stolen.finish(result);
    let worker = Arc::clone(ctx);
    if ctx.gpu.as_ref().is_some_and(GpuRunner::backlogged) {
        ctx.pool.execute(move || steal_one(&worker));
    }
}

type Outcome = Result<Processed, Skipped>;

/// Samples on their way through the CPU pool or the GPU, in the order they
/// were read.
pub(super) struct InFlight {
    pub(super) results: std::pin::Pin<Box<dyn Future<Output = Result<Vec<Outcome>, ItemError>> + Send>>,
    pub(super) samples: usize,
    pub(super) held: Reservation,
}

/// Whether `raw` is a JPEG the GPU lanes take: named and sniffed as one,
/// with a label. Anything else goes to the CPU path, which decodes it or
/// skips it with its reason.
fn gpu_jpeg(raw: &RawSample) -> bool {
    matches!((&raw.image, &raw.label), (Ok((ImageKind::Jpeg, data)), Ok(_)) if sniff(data) == Some(ImageKind::Jpeg))
}

/// `raw` as the GPU lanes take it; `None` unless [`gpu_jpeg`].
pub(super) fn gpu_sample(raw: RawSample) -> Result<GpuSample, Box<RawSample>> {
    match (&raw.image, &raw.label) {
        (Ok((ImageKind::Jpeg, data)), Ok(label)) if gpu_jpeg(&raw) => Ok(GpuSample {
            label: *label,
            data: data.clone(),
            key: raw.key,
            position: raw.position,
            masks: raw.fields,
            mask_pixels: Vec::new(),
        }),
        _ => Err(Box::new(raw)),
    }
}

/// Queues one sample on the CPU pool now; the future yields its outcome.
fn on_pool(
    ctx: &Arc<WorkerContext>,
    raw: RawSample,
    spec: &Arc<TransformSpec>,
    seed: ItemSeed,
    (extra, views): (&Arc<[FieldSpec]>, &Arc<[ViewSpec]>),
) -> impl Future<Output = Result<Outcome, PoolError>> + Send + 'static {
    let (spec, worker) = (Arc::clone(spec), Arc::clone(ctx));
    let (extra, views) = (Arc::clone(extra), Arc::clone(views));
    let max_pixels = ctx.config.max_image_pixels;
    // `process_sample` catches a panic in decode or transform itself; one
    // anywhere else in the job is caught by the pool, and is this sample's
    // internal skip too.
    let (key, position) = (raw.key.clone(), raw.position);
    let job = ctx.pool.spawn(move || {
        let outcome = process_sample_with(raw, &spec, seed, max_pixels, &worker.metrics, &extra, &views);
        if outcome.is_ok() {
            worker.counters.cpu_samples.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    });
    async move {
        match job.await {
            Err(PoolError::Panicked(message)) => Ok(Err(Skipped::panicked(&key, position, "cpu job", &message))),
            other => other,
        }
    }
}

/// Queues one sample on the CPU pool now, holding `held` until its result
/// is collected.
pub(super) fn on_cpu(ctx: &Arc<WorkerContext>, item: &Item, raw: RawSample, held: Reservation) -> InFlight {
    let one = on_pool(ctx, raw, &item.spec, item.item_seed(), (&item.extra, &item.views));
    InFlight {
        results: Box::pin(async move { Ok(vec![one.await?]) }),
        samples: 1,
        held,
    }
}

/// Runs `samples` on the GPU; those it hands back go to the CPU pool.
/// The batch holds `held` until its results are collected.
///
/// The batch is queued for the lanes at once, by a task of its own, not
/// when the item gets round to awaiting it: an item keeps several batches
/// in flight. Each sample comes back exactly once, finished by the GPU or
/// by the CPU pool after a hand-back (in any order: the client sorts by
/// position where it needs the order).
pub(super) fn on_gpu(ctx: &Arc<WorkerContext>, item: &Item, samples: Vec<GpuSample>, held: Reservation) -> InFlight {
    let n = samples.len();
    let ctx = Arc::clone(ctx);
    let recipe = Recipe {
        spec: Arc::clone(&item.spec),
        seed: item.item_seed(),
        extra: Arc::clone(&item.extra),
        views: Arc::clone(&item.views),
        on_device: item.on_device,
    };
    let task = tokio::spawn(async move {
        let gpu = ctx.gpu.as_ref().ok_or(RunnerGone)?;
        // A lane panicked or the runner stopped: the item fails and the
        // client reassigns it.
        let queued = std::time::Instant::now();
        let samples = match recipe.extra.iter().any(|f| f.kind == FieldKind::Mask) {
            true => decode_masks(&ctx, samples).await,
            false => samples,
        };
        let results = gpu.run(samples, recipe.clone());
        share_backlog(&ctx);
        let results = results.await?;
        ctx.metrics.observe(Stage::GpuBatch, queued.elapsed());
        let mut out = Vec::with_capacity(n);
        let mut back = Vec::new();
        for r in results {
            match r {
                GpuResult::Done(p) => out.push(Ok(p)),
                GpuResult::Skipped(s) => out.push(Err(s)),
                GpuResult::Cpu { sample, reason } => {
                    debug!(key = %sample.key, reason, "gpu handed the sample to the cpu");
                    let fields = (&recipe.extra, &recipe.views);
                    back.push(on_pool(&ctx, sample.into_raw(), &recipe.spec, recipe.seed, fields));
                }
            }
        }
        for outcome in back {
            out.push(outcome.await?);
        }
        Ok::<_, ItemError>(out)
    });
    InFlight {
        results: Box::pin(async move { task.await.map_err(|_| ItemError::Gpu(RunnerGone))? }),
        samples: n,
        held,
    }
}

/// `samples` with their masks decoded ([`GpuSample::decode_masks`]), a
/// pool job each, all at once: the masks' PNG decode is CPU work the
/// pool's threads share, which would otherwise hold the lanes' few
/// threads (on 640x480 masks, a third of the CPU worker's rate). A job
/// that fails leaves its sample's masks to the lane.
async fn decode_masks(ctx: &Arc<WorkerContext>, samples: Vec<GpuSample>) -> Vec<GpuSample> {
    let max_pixels = ctx.config.max_image_pixels;
    let jobs: Vec<_> = samples
        .into_iter()
        .map(|sample| {
            let undecoded = sample.clone();
            let job = ctx.pool.spawn(move || {
                let mut sample = sample;
                sample.decode_masks(max_pixels);
                sample
            });
            (job, undecoded)
        })
        .collect();
    let mut out = Vec::with_capacity(jobs.len());
    for (job, undecoded) in jobs {
        out.push(job.await.unwrap_or(undecoded));
    }
    out
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
