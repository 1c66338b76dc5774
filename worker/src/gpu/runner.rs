//! The worker's GPU at work: a few dedicated threads ("lanes") own the
//! device, each with its own CUDA stream, nvJPEG decoder and page-locked
//! buffer, and turn batches of JPEG samples into finished samples.
//! [`GpuRunner`] is the worker's handle on its `--gpu-lanes` threads,
//! joined when it drops, so no lane frees CUDA memory while the process
//! exits.
//!
//! Items hand [`GpuSample`]s to [`GpuRunner::run`], which pushes them as
//! one job onto the runner's queue (`queue::JobQueue`, with no bound of
//! its own: what an item can have queued is bounded by its read-ahead and
//! the worker's memory budget) and awaits the job's results. While more
//! than a full batch per lane waits, idle CPU threads take the newest
//! samples off the queue's back ([`GpuRunner::steal`]). A lane takes the
//! job at the queue's front and the jobs waiting behind it until it holds
//! `max_batch` images (the last job may take it past), and for them:
//!
//! 1. takes each sample's plan as it was routed (`GpuSample::plan`, never
//!    resolved again), makes its parts (`super::plan`) and keeps the
//!    samples that fit `batch_memory`;
//! 2. in batches of at most `max_batch` images and `batch_memory` bytes,
//!    decodes with nvJPEG (the hardware engine when there is one), runs the
//!    step rounds, then one output (a fused crop + resize + flip launch per
//!    output size), and copies it to a page-locked buffer;
//! 3. hands every sample it did not finish back as [`GpuResult::Cpu`] with
//!    the reason, for the CPU path, which runs it or skips it with the CPU
//!    worker's own reason.
//!
//! Two lanes overlap one batch's host work with the other's decode and
//! kernels. A panic never takes a lane down: one in a sample's host work
//! hands that sample to the CPU path, one in a batch's work the batch's
//! samples, with the panic's message as the reason; the CPU path runs them
//! by the same plan, or skips them as `internal` if it panics too: the
//! GPU never skips on its own.
//!
//! Each lane allocates, uses and frees its buffers on its own stream and
//! hands the host only what it copied back and waited for, so the
//! worker's context runs without cudarc's cross-stream event tracking
//! ([`GpuRunner::start`]'s `SAFETY:` note); a batch output left on the
//! device for a loader in this process
//! (`stoker_cuda::handoff::DeviceOutput`) carries that ordering itself.
//! A buffer shared between lanes would need the same.
//!
//! Device memory per batch is capped by `batch_memory`
//! (`--gpu-batch-memory`; an image alone over it goes to the CPU). Decoded
//! images come from the stream-ordered pool, which keeps that much for
//! reuse, so the footprint stays flat ([`GpuRunner::memory`]; `Info`
//! reports it: held, peak, in use).

use std::sync::Arc;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::device::{Gpu, GpuError, GpuInfo, driver, keep_pool_memory};
#[cfg(test)]
use super::lane::{BatchTimer, hand_back_after_panic};
use super::lane::{GpuCounters, GpuRunnerConfig, Lane};
pub(crate) use super::queue::Stolen;
use super::queue::{GpuResult, GpuSample, Job, JobQueue, Recipe, Reply, RunnerGone};
use super::steal::StealPolicy;
#[cfg(test)]
use crate::pool::catch_panic;
use tokio::sync::oneshot;

/// Device memory of the runner's stream-ordered pool (the device's
/// default pool): `used` is zero when no batch is running, unless
/// something leaks.
pub type GpuMemory = stoker_cuda::PoolMemory;

/// The GPU lanes of a worker. Dropping it stops them once their queue is
/// empty.
pub struct GpuRunner {
    info: GpuInfo,
    config: GpuRunnerConfig,
    /// `None` for the lanes of [`GpuRunner::emulated`].
    ctx: Option<Arc<cudarc::driver::CudaContext>>,
    pub counters: Arc<GpuCounters>,
    queue: Arc<JobQueue>,
    /// When the CPU path may take samples from the queue.
    policy: Arc<StealPolicy>,
    /// Joined on drop, so that no lane is still freeing its stream, decoder
    /// or pinned buffer while the process exits (the CUDA libraries tear
    /// themselves down at exit; a lane freeing into them then segfaults).
    lanes: Vec<std::thread::JoinHandle<()>>,
    /// The pool memory kept for the lanes' batches; given back after they
    /// stop (`None` for emulated lanes).
    keep: Option<stoker_cuda::PoolKeep>,
}

impl std::fmt::Debug for GpuRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuRunner")
            .field("info", &self.info)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for GpuRunner {
    fn drop(&mut self) {
        // The lanes finish the jobs queued, free what they hold, and stop.
        self.queue.close();
        for lane in self.lanes.drain(..) {
            if lane.join().is_err() {
                tracing::error!("a gpu lane panicked");
            }
        }
        // What the pool kept for the lanes' next batches goes back to the
        // driver: in a trainer's process (an in-process worker) that
        // memory is the trainer's again once the worker stops. The lanes'
        // last frees are stream-ordered on streams now gone: the context's
        // wait (a trainer's queued step included) lets them complete
        // first, or the trim would keep what they free.
        if let Some(ctx) = &self.ctx
            && ctx.has_async_alloc()
        {
            let trimmed = ctx.synchronize().and_then(|()| stoker_cuda::trim_pool(ctx));
            if let Err(e) = trimmed {
                tracing::warn!(error = %e, "handing the lanes' unused pool memory back to the driver failed");
            }
        }
        // The lanes' claim on the pool: the last claim on the device puts
        // its release threshold back (`PoolKeep`).
        drop(self.keep.take());
    }
}

impl GpuRunner {
    /// Starts `config.lanes` lanes on `gpu`'s device.
    pub fn start(gpu: &Gpu, config: GpuRunnerConfig) -> Result<Self, GpuError> {
        if config.lanes == 0 || config.max_batch == 0 || config.batch_memory == 0 {
            return Err(GpuError::Invalid(format!(
                "gpu runner needs at least one lane, batch and byte: {config:?}"
            )));
        }
        let keep = keep_pool_memory(&gpu.ctx, config.batch_memory.saturating_mul(config.lanes as u64))
            .map_err(driver("setting the memory pool's release threshold"))?;
        // The lanes order each buffer by its stream, not by cudarc's events
        // (half the rate on the recipe with them: docs/gpu.md).
        stoker_cuda::order_by_streams(&gpu.ctx);
        let queue = Arc::new(JobQueue::new(config.max_batch));
        let counters = Arc::new(GpuCounters::default());
        let mut runner = Self {
            info: gpu.info.clone(),
            config,
            ctx: Some(Arc::clone(&gpu.ctx)),
            counters,
            queue,
            policy: Arc::new(StealPolicy::new(config.lanes, Instant::now())),
            lanes: Vec::with_capacity(config.lanes),
            keep: Some(keep),
        };
        for i in 0..config.lanes {
            // On an error, dropping `runner` stops the lanes already started.
            let mut lane = Lane::new(gpu, &runner.config, Arc::clone(&runner.counters))?;
            let (queue, policy) = (Arc::clone(&runner.queue), Arc::clone(&runner.policy));
            let handle = std::thread::Builder::new()
                .name(format!("stoker-gpu-{i}"))
                .spawn(move || lane.serve(&queue, &policy))
                .map_err(|e| GpuError::Invalid(format!("cannot start gpu lane thread: {e}")))?;
            runner.lanes.push(handle);
        }
        Ok(runner)
    }

    /// Lanes without a GPU, for tests of what the pipeline does with the
    /// runner's answers: each lane takes jobs exactly as a GPU lane does
    /// and answers each sample with `answer` (finish it, or hand it back).
    /// The CPU path may take from their backlog exactly when `steal` says
    /// ([`StealPolicy::fixed`]).
    #[cfg(test)]
    pub(crate) fn emulated(
        config: GpuRunnerConfig,
        steal: bool,
        answer: impl Fn(GpuSample, &Recipe) -> GpuResult + Send + Sync + 'static,
    ) -> Self {
        let queue = Arc::new(JobQueue::new(config.max_batch));
        let counters = Arc::new(GpuCounters::default());
        let policy = Arc::new(StealPolicy::fixed(config.lanes, steal));
        let answer = Arc::new(answer);
        let mut lanes = Vec::with_capacity(config.lanes);
        for _ in 0..config.lanes {
            let (queue, answer, counters) = (Arc::clone(&queue), Arc::clone(&answer), Arc::clone(&counters));
            let policy = Arc::clone(&policy);
            lanes.push(std::thread::spawn(move || {
                let mut timer = BatchTimer::default();
                while let Some((jobs, waited)) = queue.take() {
                    timer.taken(&jobs, waited, &policy);
                    for job in jobs {
                        // Each answer is a sample's host work, caught as
                        // a lane catches it.
                        let results: Vec<GpuResult> = job
                            .samples
                            .into_iter()
                            .map(|s| {
                                let back = s.clone();
                                catch_panic(|| answer(s, &job.recipe))
                                    .unwrap_or_else(|message| hand_back_after_panic(back, "emulated lane", &message))
                            })
                            .collect();
                        for r in &results {
                            let counter = match r {
                                GpuResult::Done(_) => &counters.images,
                                GpuResult::Cpu { .. } | GpuResult::Skipped(_) => &counters.to_cpu,
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                        job.reply.deliver(results);
                    }
                }
            }));
        }
        Self {
            info: GpuInfo {
                device: stoker_cuda::DeviceInfo {
                    ordinal: 0,
                    name: "emulated lanes (tests)".to_owned(),
                    compute_capability: (0, 0),
                    memory_bytes: 0,
                },
                nvjpeg_soname: "none",
                nvjpeg_version: (0, 0, 0),
                jpeg_backend: stoker_cuda::nvjpeg::Backend::Default,
                hardware_unavailable: None,
            },
            config,
            ctx: None,
            counters,
            queue,
            policy,
            lanes,
            keep: None,
        }
    }

    /// Whether the CPU path may take from the lanes' backlog now: more
    /// than a full batch per lane waits (so every lane has its next batch
    /// ready whenever it is free), and the steal policy lets it
    /// ([`StealPolicy`]: only where that finishes the work sooner).
    pub fn backlogged(&self) -> bool {
        self.policy
            .may_steal(self.queue.queued(), self.backlog(), Instant::now())
    }

    /// Samples kept waiting for the lanes before the CPU path may steal.
    fn backlog(&self) -> usize {
        self.config.lanes * self.config.max_batch
    }

    /// Takes one sample off the end of the backlog for the CPU path, if
    /// the lanes have one ([`GpuRunner::backlogged`]): the newest sample,
    /// so that the lanes keep the full batches at the front. Its result
    /// goes back through [`Stolen::finish`] and reaches its item with the
    /// rest of its batch.
    pub fn steal(&self) -> Option<Stolen> {
        if !self.backlogged() {
            return None;
        }
        let mut stolen = self.queue.steal(self.backlog())?;
        stolen.clock = Some((Instant::now(), Arc::clone(&self.policy)));
        Some(stolen)
    }

    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    pub fn config(&self) -> &GpuRunnerConfig {
        &self.config
    }

    /// Decodes and transforms `samples` as `recipe` says (their images,
    /// masks and views), one result per sample (in any order). Queues them at once (the queue has no bound) and
    /// waits until every sample has its result, from a lane or from a CPU
    /// thread that stole it.
    pub async fn run(&self, samples: Vec<GpuSample>, recipe: Recipe) -> Result<Vec<GpuResult>, RunnerGone> {
        if samples.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = oneshot::channel();
        let job = Job {
            reply: Arc::new(Reply::new(samples.len(), tx)),
            samples,
            recipe,
        };
        self.queue.push(job)?;
        rx.await.map_err(|_| RunnerGone)
    }

    /// The device memory held by the runner's pool.
    pub fn memory(&self) -> Result<GpuMemory, GpuError> {
        match &self.ctx {
            Some(ctx) => stoker_cuda::pool_memory(ctx).map_err(driver("reading the memory pool")),
            None => Ok(GpuMemory::default()),
        }
    }
}
