//! The GPU runner's work-stealing queue: items queue [`Job`]s, lanes take
//! merged batches from the front, and idle CPU threads steal single
//! samples from the back ([`Stolen`]); each job's [`Reply`] gathers its
//! results from both and answers the item once all are in. Also what goes
//! in and what comes out: [`GpuSample`] (with its plan, made where it was
//! routed), [`Recipe`] (a job's transform, fields and views; no seed: the
//! steps are in each sample's plan) and [`GpuResult`].

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use stoker_core::{FieldSpec, ItemSeed, TransformSpec, ViewSpec};
use stoker_formats::image::ImageKind;
use stoker_formats::sample::{RawField, RawSample, RawValue};
use stoker_image::decode::decode_mask;
use stoker_image::{PlanError, RunsOn, SamplePlan};
use tokio::sync::oneshot;

use super::steal::StealPolicy;
use crate::outcome::{Processed, Skipped};

/// A JPEG sample for the GPU. A clone shares the image bytes.
#[derive(Clone, Debug)]
pub struct GpuSample {
    pub key: String,
    /// Position in its shard (see `RawSample::position`).
    pub position: u64,
    pub label: i64,
    pub data: Bytes,
    /// Its plan, made where it was routed: the lane runs it, and a
    /// hand-back to the CPU carries it there.
    pub plan: Arc<SamplePlan>,
    /// The sample's masks, at their indices of the request's fields (every
    /// other index `Ok(None)`), as `read_fields` leaves them in
    /// `RawSample::fields`; empty when the request has none.
    pub masks: Vec<RawField>,
    /// The masks decoded for the lanes ahead of the batch, on the CPU
    /// pool's threads ([`MaskPixels::decode`]); empty when they were not
    /// (the lane decodes them itself then).
    pub mask_pixels: Vec<(usize, MaskPixels)>,
}

/// One mask decoded for the lanes: its class per pixel (the first
/// channel), a byte each, or why it cannot be read (the CPU path then
/// skips the sample with that reason). Shared, not copied, by the lane's
/// plan and its hand-back copies of the sample.
pub type MaskPixels = Result<Bytes, String>;

impl GpuSample {
    /// Decodes the sample's masks for an image of its planned size
    /// ([`decode_mask`]), into [`GpuSample::mask_pixels`]: CPU work for a
    /// pool thread, so that the lanes' threads do not spend it.
    pub fn decode_masks(&mut self, max_pixels: u64) {
        let dims = self.plan.dims;
        self.mask_pixels = self
            .masks
            .iter()
            .enumerate()
            .filter_map(|(i, field)| match field {
                Ok(Some(RawValue::Bytes(data))) => Some((i, mask_pixels(data, dims, max_pixels))),
                _ => None,
            })
            .collect();
    }
}

/// A plan of a 1x1 image with no steps, for tests of what a lane does with
/// samples whatever their plan.
#[cfg(test)]
pub(super) fn test_plan() -> Arc<SamplePlan> {
    Arc::new(SamplePlan {
        kind: ImageKind::Jpeg,
        dims: (1, 1),
        image: Vec::new(),
        views: Vec::new(),
        working_bytes: 0,
        runs_on: RunsOn::Gpu,
        targets: Vec::new(),
    })
}

/// A mask of an image of `dims`, decoded as [`MaskPixels`].
pub(super) fn mask_pixels(data: &[u8], dims: (u32, u32), max_pixels: u64) -> MaskPixels {
    let mask = decode_mask(data, dims, max_pixels)?;
    Ok(mask.pixels.chunks_exact(3).map(|p| p[0]).collect::<Vec<u8>>().into())
}

impl GpuSample {
    /// A JPEG with no fields, planned for the lanes with `spec` from
    /// `seed`'s draws at `position`, as the worker's router plans the
    /// samples it sends there (benchmarks and tests queue these directly).
    pub fn planned(
        key: String,
        position: u64,
        data: Bytes,
        spec: &TransformSpec,
        seed: ItemSeed,
        max_pixels: u64,
    ) -> Result<Self, PlanError> {
        let rng = seed.sample(position);
        let mut plan = SamplePlan::new(ImageKind::Jpeg, &data, spec, &[], &rng, max_pixels)?;
        plan.runs_on = RunsOn::Gpu;
        Ok(Self {
            key,
            position,
            label: 0,
            data,
            plan: Arc::new(plan),
            masks: Vec::new(),
            mask_pixels: Vec::new(),
        })
    }

    /// The sample as the CPU path takes it (the data is shared, not copied).
    pub fn clone_raw(&self) -> RawSample {
        self.clone().into_raw()
    }

    /// The sample as the CPU path takes it: its masks go with it; the
    /// other fields stay with the item, which attaches them to the result.
    pub fn into_raw(self) -> RawSample {
        RawSample {
            key: self.key,
            position: self.position,
            image: Ok((ImageKind::Jpeg, self.data)),
            label: Ok(self.label),
            fields: self.masks,
        }
    }
}

/// What a job's samples become: the transform (each sample's steps are in
/// its plan), and the request's fields (whose masks follow the image's
/// geometry) and views (more pipelines over the same decode).
#[derive(Clone, Debug)]
pub struct Recipe {
    pub spec: Arc<TransformSpec>,
    pub fields: Arc<[FieldSpec]>,
    pub views: Arc<[ViewSpec]>,
    /// Leave finished images on the device (`Processed::device`) where the
    /// sample is an image alone (no masks, no views); see `Item::on_device`.
    pub on_device: bool,
}

impl Recipe {
    /// `spec`, with no masks or views.
    pub fn new(spec: Arc<TransformSpec>) -> Self {
        Self {
            spec,
            fields: Arc::new([]),
            views: Arc::new([]),
            on_device: false,
        }
    }
}

/// What became of a [`GpuSample`].
#[derive(Debug)]
pub enum GpuResult {
    Done(Processed),
    /// Taken from the backlog by the CPU path ([`super::GpuRunner::steal`]),
    /// which could not use it, for this reason.
    Skipped(Skipped),
    /// Not finished on the GPU (not a baseline 3-channel JPEG, a crop the
    /// kernel does not run, over the batch memory, a GPU failure): the CPU
    /// path should take it.
    Cpu {
        sample: GpuSample,
        reason: String,
    },
}

/// Samples an item queued for the lanes, with what their steps depend on.
pub(super) struct Job {
    pub(super) samples: Vec<GpuSample>,
    pub(super) recipe: Recipe,
    pub(super) reply: Arc<Reply>,
}

/// Where a job's results gather: from the lane that runs it and from the
/// CPU threads that stole some of its samples. Sent once all are in.
pub(super) struct Reply {
    state: Mutex<ReplyState>,
}

struct ReplyState {
    results: Vec<GpuResult>,
    remaining: usize,
    tx: Option<oneshot::Sender<Vec<GpuResult>>>,
}

impl Reply {
    pub(super) fn new(samples: usize, tx: oneshot::Sender<Vec<GpuResult>>) -> Self {
        Self {
            state: Mutex::new(ReplyState {
                results: Vec::with_capacity(samples),
                remaining: samples,
                tx: Some(tx),
            }),
        }
    }

    /// Adds `results`; once every sample has one, sends them all.
    pub(super) fn deliver(&self, results: impl IntoIterator<Item = GpuResult>) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for r in results {
            st.results.push(r);
            st.remaining = st.remaining.saturating_sub(1);
        }
        if st.remaining == 0
            && let Some(tx) = st.tx.take()
        {
            let results = std::mem::take(&mut st.results);
            // The item may have gone (client left): nothing to do then.
            let _ = tx.send(results);
        }
    }
}

/// A sample taken from the lanes' backlog for the CPU path; its result
/// goes back with [`Stolen::finish`], with the rest of its batch.
pub struct Stolen {
    pub sample: GpuSample,
    pub recipe: Recipe,
    reply: Arc<Reply>,
    /// When it was taken, and the policy that times the thread's work.
    pub(super) clock: Option<(Instant, Arc<StealPolicy>)>,
}

impl std::fmt::Debug for Stolen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stolen").field("key", &self.sample.key).finish()
    }
}

impl Stolen {
    /// Hands the sample's result back to the item that sent it.
    pub fn finish(self, result: GpuResult) {
        if let Some((taken, policy)) = &self.clock {
            let now = Instant::now();
            policy.stolen(now.saturating_duration_since(*taken), now);
        }
        self.reply.deliver([result]);
    }
}

/// The GPU lanes are gone (the worker is shutting down, or a lane
/// panicked).
#[derive(Debug, thiserror::Error)]
#[error("the gpu runner stopped")]
pub struct RunnerGone;

/// The runner's queue of jobs: lanes take batches from its front, the CPU
/// path steals single samples from its back.
pub(super) struct JobQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
    max_batch: usize,
}

struct QueueState {
    jobs: VecDeque<Job>,
    /// Samples in `jobs`.
    queued: usize,
    closed: bool,
}

impl JobQueue {
    pub(super) fn new(max_batch: usize) -> Self {
        Self {
            state: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                queued: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            max_batch,
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Samples waiting in the queue.
    pub(super) fn queued(&self) -> usize {
        self.lock().queued
    }

    /// Queues `job` for the lanes; refused once the runner is gone.
    pub(super) fn push(&self, job: Job) -> Result<(), RunnerGone> {
        let mut q = self.lock();
        if q.closed {
            return Err(RunnerGone);
        }
        q.queued += job.samples.len();
        q.jobs.push_back(job);
        drop(q);
        self.ready.notify_one();
        Ok(())
    }

    /// Lets the lanes stop once the queue is empty.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Waits for a job, then merges the jobs already waiting behind it into
    /// one batch, up to `max_batch` samples; `None` once the runner is gone
    /// and the queue empty. Says whether it had to wait (the queue was
    /// empty).
    pub(super) fn take(&self) -> Option<(Vec<Job>, bool)> {
        let mut q = self.lock();
        let waited = q.jobs.is_empty();
        while q.jobs.is_empty() {
            if q.closed {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        let mut jobs = Vec::new();
        let mut count = 0;
        while count < self.max_batch
            && let Some(job) = q.jobs.pop_front()
        {
            count += job.samples.len();
            jobs.push(job);
        }
        q.queued -= count;
        Some((jobs, waited))
    }

    /// Takes the newest sample off the back of the queue for the CPU path,
    /// if more than `keep` samples wait.
    pub(super) fn steal(&self, keep: usize) -> Option<Stolen> {
        let mut q = self.lock();
        if q.queued <= keep {
            return None;
        }
        let job = q.jobs.back_mut()?;
        let sample = job.samples.pop()?;
        let stolen = Stolen {
            sample,
            recipe: job.recipe.clone(),
            reply: Arc::clone(&job.reply),
            clock: None,
        };
        if job.samples.is_empty() {
            q.jobs.pop_back();
        }
        q.queued -= 1;
        Some(stolen)
    }
}
