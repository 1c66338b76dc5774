//! Where a sample is decoded and transformed: the CPU pool, or on a GPU
//! worker the GPU lanes in batches (what they hand back goes to the pool),
//! with idle CPU threads sharing the lanes' backlog.
//!
//! Where a sample runs is decided once, with its plan
//! ([`WorkerContext::plan`], `runs_on`), before it is queued; the pool, a
//! stealing thread, the lanes and a hand-back all run that plan. On a GPU
//! worker ([`WorkerContext::gpu`]) the JPEGs planned for the lanes are
//! gathered into batches of `--gpu-batch`, each queued to the `GpuRunner`
//! at once ([`on_gpu`]), so an item keeps several in flight. While more
//! than a full batch per lane waits and the runner's `StealPolicy` allows
//! it, idle CPU threads take the newest waiting JPEGs one at a time
//! ([`share_backlog`]) and hand the results back to their batch: no ratio
//! to tune (`--gpu-only` turns it off, `WorkerConfig::cpu_jpegs`). A
//! sample's masks travel with it (`GpuSample::masks`, decoded on the pool
//! before the batch is queued: [`decode_masks`]), to the CPU pool too when
//! the lanes hand it back. What the runner hands back, and whatever was
//! planned for the CPU, goes to the CPU pool, and a sample that cannot be
//! planned is its skip at once, so a GPU worker skips exactly what a CPU
//! worker skips, for the same reasons. The unit tests (`route_tests.rs`)
//! drive every mix of paths through emulated lanes
//! (`GpuRunner::emulated`), masks and views included, without a GPU, and
//! check that every executor receives the routing's plan (`PlanLog`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use stoker_core::{FieldKind, FieldSpec, FieldValue, Fields, ViewSpec};
use stoker_image::{RunsOn, SamplePlan};
use tracing::debug;

use super::cpu::{Instances, plan_sample, process_sample_with};
use super::{Item, ItemError, Processed, Skipped, WorkerContext};
use crate::gpu::RunnerGone;
use crate::gpu::{GpuResult, GpuRunner, GpuSample, Recipe, gpu_runs, mask_chain};
use crate::memory::Reservation;
use crate::metrics::Stage;
use crate::pool::PoolError;
use stoker_formats::image::ImageKind;
use stoker_formats::sample::RawSample;
use stoker_image::decode::sniff;

impl WorkerContext {
    /// `raw`'s plan, made once here for every executor that will touch the
    /// sample ([`plan_sample`]), with where it runs: on a GPU worker a
    /// JPEG whose steps the lanes all run (its views' too, and on a
    /// `--gpu-only` worker its masks') goes to the GPU lanes (whose backlog
    /// idle CPU threads share: [`share_backlog`]), anything else to the CPU
    /// pool. `Err` is the sample's skip: nothing is queued for it.
    /// `fields` are the sample's, as read: with a targets field the plan
    /// records how targets move, and ops that choose by the boxes see the
    /// first one's.
    pub(super) fn plan(
        &self,
        raw: &RawSample,
        item: &Item,
        fields: Option<&Fields>,
    ) -> Result<Arc<SamplePlan>, Skipped> {
        let max_pixels = self.config.max_image_pixels;
        let targets =
            item.fields
                .iter()
                .position(|f| f.kind.is_targets())
                .map(|i| match fields.and_then(|f| f.get(i)) {
                    Some(Some(FieldValue::Targets(t))) => Some(&**t),
                    _ => None,
                });
        let mut plan = plan_sample(raw, &item.spec, &item.views, item.item_seed(), max_pixels, targets)?;
        plan.runs_on = self.runs_on(raw, item, &plan);
        let plan = Arc::new(plan);
        #[cfg(test)]
        self.plan_log.saw("route", &raw.key, &plan);
        Ok(plan)
    }

    /// Whether the lanes run every step of the plan: the image's, each
    /// view's, and its masks' (the image's geometric steps as one chain),
    /// decided before the sample is queued, so the lanes never receive a
    /// sample they would hand back for a step without a kernel, and
    /// nothing is decoded twice.
    fn runs_on(&self, raw: &RawSample, item: &Item, plan: &SamplePlan) -> RunsOn {
        if self.gpu.is_none() {
            return RunsOn::Cpu("a cpu worker");
        }
        if !gpu_jpeg(raw) {
            return RunsOn::Cpu("not a jpeg");
        }
        if item.spec.size.side().is_none() {
            return RunsOn::Cpu("each image's own size, and the lanes write one square size");
        }
        if item.fields.iter().any(|f| f.kind == FieldKind::TargetsWithMasks) {
            return RunsOn::Cpu("instance masks, which the cpu pool draws");
        }
        let masks = item.fields.iter().any(|f| f.kind == FieldKind::Mask);
        let (w, h) = plan.dims;
        // Masks ride the lanes only on a `--gpu-only` worker. Otherwise the
        // CPU pool takes their samples: on 640x480 JPEGs with PNG masks
        // it ran them about 1.8x faster than the lanes did (H200, 16
        // threads; docs/gpu.md), measured before the lanes stopped
        // tracking events (1f4c9b1) and not since.
        if masks && self.config.cpu_jpegs {
            RunsOn::Cpu("masks, which the cpu pool runs unless --gpu-only")
        } else if !plan.image.iter().all(gpu_runs) {
            RunsOn::Cpu("a step without a gpu kernel")
        } else if masks && mask_chain(&plan.image, w, h).is_none() {
            RunsOn::Cpu("the masks' steps do not chain")
        } else if !plan.views.iter().all(|steps| steps.iter().all(gpu_runs)) {
            RunsOn::Cpu("a view's step without a gpu kernel")
        } else {
            RunsOn::Gpu
        }
    }
}

/// Every plan an executor received, by where (`route` made it; `cpu`, and
/// a test's emulated `lane`), key and address: tests check that each is
/// the one routing made.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct PlanLog(std::sync::Mutex<Vec<(&'static str, String, usize)>>);

#[cfg(test)]
impl PlanLog {
    pub(crate) fn saw(&self, at: &'static str, key: &str, plan: &Arc<SamplePlan>) {
        let address = Arc::as_ptr(plan) as usize;
        self.0.lock().expect("plan log").push((at, key.to_owned(), address));
    }

    pub(crate) fn entries(&self) -> Vec<(&'static str, String, usize)> {
        self.0.lock().expect("plan log").clone()
    }
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
    let plan = &stolen.sample.plan;
    #[cfg(test)]
    ctx.plan_log.saw("cpu", &raw.key, plan);
    let result = match process_sample_with(
        raw,
        plan,
        ctx.config.max_image_pixels,
        &ctx.metrics,
        &recipe.fields,
        &recipe.views,
        Vec::new(),
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

type Results = std::pin::Pin<Box<dyn Future<Output = Result<Vec<Outcome>, ItemError>> + Send>>;

/// Samples on their way through the CPU pool or the GPU, in the order they
/// were read.
pub(super) struct InFlight {
    pub(super) results: Results,
    pub(super) samples: usize,
    pub(super) held: Reservation,
}

/// Whether `raw` is a JPEG the GPU lanes take: named and sniffed as one,
/// with a label. Anything else goes to the CPU path, which decodes it or
/// skips it with its reason.
fn gpu_jpeg(raw: &RawSample) -> bool {
    matches!((&raw.image, &raw.label), (Ok((ImageKind::Jpeg, data)), Ok(_)) if sniff(data) == Some(ImageKind::Jpeg))
}

/// `raw` as the GPU lanes take it, with its plan; `Err` unless
/// [`gpu_jpeg`].
pub(super) fn gpu_sample(raw: RawSample, plan: Arc<SamplePlan>) -> Result<GpuSample, Box<RawSample>> {
    match (&raw.image, &raw.label) {
        (Ok((ImageKind::Jpeg, data)), Ok(label)) if gpu_jpeg(&raw) => Ok(GpuSample {
            label: *label,
            data: data.clone(),
            key: raw.key,
            position: raw.position,
            plan,
            masks: raw.fields,
            mask_pixels: Vec::new(),
        }),
        _ => Err(Box::new(raw)),
    }
}

/// Queues one sample on the CPU pool now, with its plan; the future yields
/// its outcome.
fn on_pool(
    ctx: &Arc<WorkerContext>,
    raw: RawSample,
    plan: Arc<SamplePlan>,
    (fields, views): (&Arc<[FieldSpec]>, &Arc<[ViewSpec]>),
    instances: Instances,
) -> impl Future<Output = Result<Outcome, PoolError>> + Send + 'static {
    #[cfg(test)]
    ctx.plan_log.saw("cpu", &raw.key, &plan);
    let worker = Arc::clone(ctx);
    let (fields, views) = (Arc::clone(fields), Arc::clone(views));
    let max_pixels = ctx.config.max_image_pixels;
    // `process_sample` catches a panic in decode or transform itself; one
    // anywhere else in the job is caught by the pool, and is this sample's
    // internal skip too.
    let (key, position) = (raw.key.clone(), raw.position);
    let job = ctx.pool.spawn(move || {
        let outcome = process_sample_with(raw, &plan, max_pixels, &worker.metrics, &fields, &views, instances);
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

/// Queues one sample on the CPU pool now with its plan and the targets
/// whose masks it draws, holding `held` until its result is collected; a
/// sample that could not be planned is its skip at once.
pub(super) fn on_cpu(
    ctx: &Arc<WorkerContext>,
    item: &Item,
    raw: RawSample,
    (plan, instances): (Result<Arc<SamplePlan>, Skipped>, Instances),
    held: Reservation,
) -> InFlight {
    let results: Results = match plan {
        Ok(plan) => {
            let one = on_pool(ctx, raw, plan, (&item.fields, &item.views), instances);
            Box::pin(async move { Ok(vec![one.await?]) })
        }
        Err(skipped) => Box::pin(std::future::ready(Ok(vec![Err(skipped)]))),
    };
    InFlight {
        results,
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
        fields: Arc::clone(&item.fields),
        views: Arc::clone(&item.views),
        on_device: item.on_device,
    };
    let task = tokio::spawn(async move {
        let gpu = ctx.gpu.as_ref().ok_or(RunnerGone)?;
        // A lane panicked or the runner stopped: the item fails and the
        // client reassigns it.
        let queued = std::time::Instant::now();
        let samples = match recipe.fields.iter().any(|f| f.kind == FieldKind::Mask) {
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
                    let fields = (&recipe.fields, &recipe.views);
                    let plan = Arc::clone(&sample.plan);
                    back.push(on_pool(&ctx, sample.into_raw(), plan, fields, Vec::new()));
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
