//! One GPU lane: a thread that owns a stream, a decoder and a page-locked
//! buffer, takes jobs off the queue ([`Lane::serve`]), assembles them into
//! batches (header reads and steps resolved on the host, `plan`), decodes
//! and runs the kernels (`run_batch`), and hands back to the CPU path what
//! it did not finish, a panic's samples included (`finish`,
//! [`run_caught`]); how lanes are sized ([`GpuRunnerConfig`]) and what they
//! count ([`GpuCounters`]). The runner ([`super::runner`]) starts them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use cudarc::driver::PinnedHostSlice;
use stoker_core::{ItemSeed, Step, TransformSpec, footprint, resolve_steps};
use tracing::{debug, warn};

use stoker_image::augment::Chain;
use stoker_image::decode::check_jpeg;

use super::decode::{DeviceImage, GpuDecoder};
use super::device::{Gpu, GpuError, driver};
use super::lend::Shelf;
use super::queue::{GpuResult, GpuSample, Job, JobQueue};
use super::steal::StealPolicy;
use super::steps::{GpuCrop, fused, gpu_runs};
use crate::outcome::Processed;
use crate::pool::catch_panic;

/// How the runner is sized.
#[derive(Clone, Copy, Debug)]
pub struct GpuRunnerConfig {
    /// Threads, each with its own stream, decoder and page-locked buffer.
    pub lanes: usize,
    /// Most images in one nvJPEG batch and kernel launch.
    pub max_batch: usize,
    /// Most device bytes of decoded images and outputs in one batch.
    pub batch_memory: u64,
    /// Images with more pixels are refused from their header.
    pub max_image_pixels: u64,
}

/// Default lanes (`--gpu-lanes`): more measured no faster on an H100.
pub const DEFAULT_LANES: usize = 4;
/// Default images per batch (`--gpu-batch`).
pub const DEFAULT_MAX_BATCH: usize = 128;
/// Default device memory of one batch (`--gpu-batch-memory`).
pub const DEFAULT_BATCH_MEMORY: u64 = 512 << 20;

impl Default for GpuRunnerConfig {
    fn default() -> Self {
        Self {
            lanes: DEFAULT_LANES,
            max_batch: DEFAULT_MAX_BATCH,
            batch_memory: DEFAULT_BATCH_MEMORY,
            max_image_pixels: stoker_formats::image::DEFAULT_MAX_PIXELS,
        }
    }
}

/// Running totals of the GPU path. The `*_ns` fields add up the lanes'
/// wall time in each phase of a batch.
#[derive(Debug, Default)]
pub struct GpuCounters {
    pub batches: AtomicU64,
    pub images: AtomicU64,
    /// Samples handed back to the CPU path.
    pub to_cpu: AtomicU64,
    /// Reading headers and resolving crops.
    pub plan_ns: AtomicU64,
    /// Queueing the nvJPEG batch (its host-side parsing included).
    pub decode_ns: AtomicU64,
    /// Launching the kernels of images that are not fused.
    pub steps_ns: AtomicU64,
    /// Launching the fused kernel, copying back and waiting for the device.
    pub finish_ns: AtomicU64,
    /// Copying the results out of the page-locked buffer.
    pub unpack_ns: AtomicU64,
}

fn add_elapsed(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// `sample`, whose host work in `what` panicked with `message`, handed to
/// the CPU path with that reason.
pub(super) fn hand_back_after_panic(sample: GpuSample, what: &str, message: &str) -> GpuResult {
    warn!(key = %sample.key, panic = %message, "{what} panicked; the sample goes to the cpu");
    GpuResult::Cpu {
        reason: format!("{what} panicked on {}: {message}", sample.key),
        sample,
    }
}

/// Runs a batch's work, `batch`, whose samples are `copies` (sharing their
/// bytes): if it panics, every sample goes to the CPU path with the panic's
/// message (counted in `to_cpu`), and the lane carries on. Each result
/// comes with its sample's index in the batch.
pub(super) fn run_caught(
    copies: Vec<GpuSample>,
    to_cpu: &AtomicU64,
    batch: impl FnOnce() -> Vec<(usize, GpuResult)>,
) -> Vec<(usize, GpuResult)> {
    match catch_panic(batch) {
        Ok(results) => results,
        Err(message) => {
            warn!(images = copies.len(), panic = %message, "gpu batch panicked; its images go to the cpu");
            to_cpu.fetch_add(copies.len() as u64, Ordering::Relaxed);
            let reason = format!("gpu batch panicked: {message}");
            copies
                .into_iter()
                .enumerate()
                .map(|(i, sample)| {
                    (
                        i,
                        GpuResult::Cpu {
                            sample,
                            reason: reason.clone(),
                        },
                    )
                })
                .collect()
        }
    }
}

/// What the lane does to a decoded image.
enum Plan {
    /// The fused kernel, with the batch's other fused images: the crop of
    /// the chain's output, read through the chain.
    Fused(Chain, GpuCrop),
    /// A kernel per step ([`Gpu::run_steps`]).
    Steps(Vec<Step>),
}

/// A sample whose steps are known, ready for a batch.
struct PlannedSample {
    sample: GpuSample,
    plan: Plan,
    /// The size the header gives; the decoded image must have it.
    dims: (u32, u32),
    size: u32,
    /// Device bytes it needs: decoded image, intermediates, output.
    bytes: u64,
}

/// One thread's share of the device.
pub(super) struct Lane {
    gpu: Gpu,
    decoder: GpuDecoder,
    /// Page-locked buffers lent out as the batches' pixels.
    shelf: Shelf,
    /// The copy-back buffer when the shelf has lent all it may.
    pinned: Option<PinnedHostSlice<u8>>,
    config: GpuRunnerConfig,
    counters: Arc<GpuCounters>,
}

impl Lane {
    pub(super) fn new(gpu: &Gpu, config: &GpuRunnerConfig, counters: Arc<GpuCounters>) -> Result<Self, GpuError> {
        let gpu = gpu.with_new_stream()?;
        let decoder = gpu.decoder(config.max_image_pixels)?;
        Ok(Self {
            gpu,
            decoder,
            shelf: Shelf::default(),
            pinned: None,
            config: *config,
            counters,
        })
    }

    pub(super) fn serve(&mut self, queue: &JobQueue, policy: &StealPolicy) {
        if let Err(e) = self.gpu.ctx.bind_to_thread() {
            warn!(error = %e, "gpu lane cannot bind the cuda context; it stops");
            return;
        }
        let mut timer = BatchTimer::default();
        while let Some((jobs, waited)) = queue.take() {
            timer.taken(&jobs, waited, policy);
            // Samples and batches catch their own panics; this is the last
            // line, for the lane's bookkeeping: the jobs' items then fail
            // (their replies are dropped: `RunnerGone`) and go to another
            // attempt, and the lane takes the next jobs.
            if let Err(message) = catch_panic(|| self.run_jobs(jobs)) {
                tracing::error!(panic = %message, "gpu lane panicked outside a sample or batch; its jobs fail");
            }
        }
    }

    fn run_jobs(&mut self, jobs: Vec<Job>) {
        let mut replies = Vec::with_capacity(jobs.len());
        let mut planned = Vec::new();
        let mut owner = Vec::new();
        let mut results: Vec<Vec<GpuResult>> = Vec::with_capacity(jobs.len());
        let started = Instant::now();
        for (j, job) in jobs.into_iter().enumerate() {
            replies.push(job.reply);
            results.push(Vec::with_capacity(job.samples.len()));
            for sample in job.samples {
                let copy = sample.clone();
                match catch_panic(|| self.plan(sample, &job.spec, job.seed)) {
                    Ok(Ok(p)) => {
                        planned.push(p);
                        owner.push(j);
                    }
                    Ok(Err(back)) => results[j].push(back),
                    Err(message) => results[j].push(hand_back_after_panic(copy, "gpu host work", &message)),
                }
            }
        }
        add_elapsed(&self.counters.plan_ns, started);
        let refused: usize = results.iter().map(Vec::len).sum();
        self.counters.to_cpu.fetch_add(refused as u64, Ordering::Relaxed);
        // Batches of one output size within the byte and count limits.
        let mut order: Vec<usize> = (0..planned.len()).collect();
        order.sort_by_key(|&i| planned[i].size);
        let mut slots: Vec<Option<PlannedSample>> = planned.into_iter().map(Some).collect();
        let mut start = 0;
        while start < order.len() {
            let size = slots[order[start]].as_ref().map_or(0, |p| p.size);
            let (mut end, mut bytes) = (start, 0u64);
            while end < order.len() && end - start < self.config.max_batch {
                let Some(p) = slots[order[end]].as_ref() else { break };
                if p.size != size || (end > start && bytes + p.bytes > self.config.batch_memory) {
                    break;
                }
                bytes += p.bytes;
                end += 1;
            }
            let batch: Vec<(usize, PlannedSample)> = order[start..end]
                .iter()
                .filter_map(|&i| slots[i].take().map(|p| (owner[i], p)))
                .collect();
            start = end;
            let (owners, batch): (Vec<usize>, Vec<PlannedSample>) = batch.into_iter().unzip();
            let copies: Vec<GpuSample> = batch.iter().map(|p| p.sample.clone()).collect();
            let counters = Arc::clone(&self.counters);
            let done = run_caught(copies, &counters.to_cpu, || self.run_batch(batch, size));
            // By index: `run_batch` answers in its own order (hand-backs
            // first, then the kernel's outputs), and a batch may hold
            // samples of several jobs (items).
            for (i, r) in done {
                results[owners[i]].push(r);
            }
        }
        for (reply, r) in replies.into_iter().zip(results) {
            reply.deliver(r);
        }
    }

    /// Reads the header and resolves the sample's crop, or says why the
    /// GPU does not take it.
    fn plan(&self, sample: GpuSample, spec: &TransformSpec, seed: ItemSeed) -> Result<PlannedSample, GpuResult> {
        #[cfg(feature = "failpoints")]
        crate::failpoint::panic_if_chosen(crate::failpoint::GPU_PLAN_PANIC, &sample.key);
        let back = |sample: GpuSample, reason: String| GpuResult::Cpu { sample, reason };
        let (w, h) = match check_jpeg(&sample.data, self.config.max_image_pixels) {
            Ok(dims) => dims,
            Err(e) => return Err(back(sample, e.to_string())),
        };
        // What the CPU would refuse as too large the GPU does not try: the
        // CPU path skips it with the reason.
        if let Err(e) = footprint(spec, w, h, self.config.max_image_pixels) {
            return Err(back(sample, e.to_string()));
        }
        let steps = match resolve_steps(spec, &seed.sample(sample.position), w, h) {
            Ok(steps) => steps,
            // The CPU path skips it with the reason.
            Err(e) => return Err(back(sample, e.to_string())),
        };
        // Known before decoding: a step without a kernel sends the whole
        // sample to the CPU, so nothing is decoded twice.
        if let Some(step) = steps.iter().find(|s| !gpu_runs(s)) {
            return Err(back(sample, format!("step {} runs on the cpu", step.name())));
        }
        // The largest image the steps make, held twice while a step runs
        // (a blur's float intermediate counts four times).
        let largest = steps
            .iter()
            .filter_map(|s| match *s {
                Step::CropResize { out_w, out_h, .. } | Step::Affine { out_w, out_h, .. } => {
                    Some(u64::from(out_w) * u64::from(out_h) * 3)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let plan = match fused(&steps, w, h, spec.size) {
            Some((chain, crop)) => Plan::Fused(chain, crop),
            None => Plan::Steps(steps),
        };
        let working = match plan {
            Plan::Fused(..) => 0,
            Plan::Steps(_) => 6 * largest.max(u64::from(w) * u64::from(h) * 3),
        };
        let bytes = 3 * (u64::from(w) * u64::from(h) + u64::from(spec.size).pow(2)) + working;
        if bytes > self.config.batch_memory {
            let reason = format!(
                "{w}x{h} needs {} MiB of device memory, over the batch limit of {} MiB",
                bytes >> 20,
                self.config.batch_memory >> 20
            );
            return Err(back(sample, reason));
        }
        Ok(PlannedSample {
            sample,
            plan,
            dims: (w, h),
            size: spec.size,
            bytes,
        })
    }

    /// Each result comes with its sample's index in `batch`, in no
    /// particular order.
    fn run_batch(&mut self, batch: Vec<PlannedSample>, size: u32) -> Vec<(usize, GpuResult)> {
        let n = batch.len();
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let datas: Vec<&[u8]> = batch.iter().map(|p| &p.sample.data[..]).collect();
        let decoded = self.decoder.decode_batch(&datas);
        drop(datas);
        add_elapsed(&self.counters.decode_ns, started);
        let mut fused = Vec::with_capacity(n);
        let mut finished = Vec::new();
        // Batch indices of `fused`, then of `finished`.
        let (mut fused_at, mut finished_at) = (Vec::with_capacity(n), Vec::new());
        let mut out = Vec::with_capacity(n);
        let started = Instant::now();
        // Samples with steps: batch index, sample, image, steps.
        let mut stepped = Vec::new();
        for (i, (p, d)) in batch.into_iter().zip(decoded).enumerate() {
            let back = |sample, reason| (i, GpuResult::Cpu { sample, reason });
            match d {
                Ok(img) if (img.width, img.height) != p.dims => {
                    let reason = format!(
                        "nvjpeg decoded {}x{}, the header says {}x{}",
                        img.width, img.height, p.dims.0, p.dims.1
                    );
                    out.push(back(p.sample, reason));
                }
                Ok(img) => match p.plan {
                    Plan::Fused(chain, crop) => {
                        fused.push((p.sample, img, crop, chain));
                        fused_at.push(i);
                    }
                    Plan::Steps(steps) => stepped.push((i, p.sample, img, steps)),
                },
                Err(e) => out.push(back(p.sample, e.to_string())),
            }
        }
        if !stepped.is_empty() {
            // A round of steps per step index over the whole batch; a
            // tail of crop-resize to the output (and a horizontal flip)
            // joins the fused kernel's launch.
            let (metas, images): (Vec<Stepped>, Vec<DeviceImage>) = stepped
                .into_iter()
                .map(|(i, sample, img, steps)| ((i, sample, steps), img))
                .unzip();
            let tails: Vec<usize> = metas.iter().map(|(_, _, steps)| fusable_tail(steps, size)).collect();
            let prefixes: Vec<&[Step]> = metas
                .iter()
                .zip(&tails)
                .map(|((_, _, steps), &t)| &steps[..steps.len() - t])
                .collect();
            let results = self.gpu.run_steps_batch(images, &prefixes);
            drop(prefixes);
            for (((i, sample, steps), tail), result) in metas.into_iter().zip(tails).zip(results) {
                let back = |sample, reason| (i, GpuResult::Cpu { sample, reason });
                // Each image on its own: one that fails goes to the CPU,
                // which runs it or skips it with its own reason.
                let img = match result {
                    Ok(img) => img,
                    Err(e) => {
                        out.push(back(sample, format!("gpu steps failed: {e}")));
                        continue;
                    }
                };
                let crop = (tail > 0)
                    .then(|| GpuCrop::from_steps(&steps[steps.len() - tail..], img.width, img.height, size))
                    .flatten();
                match crop {
                    Some(crop) => {
                        let chain = Chain::new(img.width, img.height);
                        fused.push((sample, img, crop, chain));
                        fused_at.push(i);
                    }
                    None if tail == 0 && (img.width, img.height) == (size, size) => {
                        finished.push((sample, img));
                        finished_at.push(i);
                    }
                    None => {
                        let reason = format!("gpu steps made {}x{}, not {size}x{size}", img.width, img.height);
                        out.push(back(sample, reason));
                    }
                }
            }
        }
        add_elapsed(&self.counters.steps_ns, started);
        if !fused.is_empty() || !finished.is_empty() {
            match self.finish(&fused, &finished, size) {
                Ok(pixels) => {
                    self.counters.images.fetch_add(pixels.len() as u64, Ordering::Relaxed);
                    let samples = fused
                        .into_iter()
                        .map(|(s, ..)| s)
                        .chain(finished.into_iter().map(|(s, _)| s));
                    let at = fused_at.iter().chain(&finished_at).copied();
                    for ((i, sample), pixels) in at.zip(samples).zip(pixels) {
                        out.push((
                            i,
                            GpuResult::Done(Processed {
                                key: sample.key,
                                position: sample.position,
                                label: sample.label,
                                width: size,
                                height: size,
                                pixels,
                                fields: Vec::new(),
                            }),
                        ));
                    }
                }
                Err(e) => {
                    let images = fused.len() + finished.len();
                    warn!(error = %e, images, "gpu batch failed; its images go to the cpu");
                    let reason = format!("gpu batch failed: {e}");
                    let samples = fused
                        .into_iter()
                        .map(|(s, ..)| s)
                        .chain(finished.into_iter().map(|(s, _)| s));
                    let at = fused_at.iter().chain(&finished_at).copied();
                    out.extend(at.zip(samples).map(|(i, sample)| {
                        (
                            i,
                            GpuResult::Cpu {
                                sample,
                                reason: reason.clone(),
                            },
                        )
                    }));
                }
            }
        }
        let to_cpu = out.iter().filter(|(_, r)| matches!(r, GpuResult::Cpu { .. })).count();
        if to_cpu > 0 {
            self.counters.to_cpu.fetch_add(to_cpu as u64, Ordering::Relaxed);
            debug!(to_cpu, batch = n, "gpu batch handed images back to the cpu path");
        }
        out
    }

    /// Runs the fused kernel over the `fused` images in one launch into the
    /// batch output, copies the `finished` ones after them, copies the
    /// output to the page-locked buffer and splits it per image, in that
    /// order.
    fn finish(
        &mut self,
        fused: &[(GpuSample, DeviceImage, GpuCrop, Chain)],
        finished: &[(GpuSample, DeviceImage)],
        size: u32,
    ) -> Result<Vec<Bytes>, GpuError> {
        let started = Instant::now();
        let image_bytes = size as usize * size as usize * 3;
        let count = fused.len() + finished.len();
        let images: Vec<&DeviceImage> = fused.iter().map(|(_, img, ..)| img).collect();
        let crops: Vec<GpuCrop> = fused.iter().map(|(_, _, c, _)| *c).collect();
        let chains: Vec<&Chain> = fused.iter().map(|(.., chain)| chain).collect();
        let dev = {
            let stream = &self.gpu.stream;
            // SAFETY: u8 has no invalid values; every slot is written below,
            // by the kernel or by a copy, before the buffer is read.
            let mut dev =
                unsafe { stream.alloc::<u8>(image_bytes * count) }.map_err(driver("allocation of the batch output"))?;
            if !images.is_empty() {
                self.gpu
                    .resized_crop_flip_into(&images, &crops, &chains, (size, size), &mut dev)?;
            }
            for (i, (_, img)) in finished.iter().enumerate() {
                let slot = (fused.len() + i) * image_bytes;
                let mut view = dev.slice_mut(slot..slot + image_bytes);
                stream
                    .memcpy_dtod(&img.buf, &mut view)
                    .map_err(driver("copying an image into the batch output"))?;
            }
            dev
        };
        let need = dev.len();
        let all = match self.shelf.take(need) {
            // Lent: the samples' pixels are slices of the page-locked
            // buffer itself, back on the shelf once they are sent.
            Some(free) => {
                let mut buf = match free {
                    Some(b) if b.len() >= need => b,
                    // Grown in whole MiB to the largest batch seen.
                    _ => self.gpu.pinned(need.next_multiple_of(1 << 20))?,
                };
                self.gpu.copy_to_pinned(&dev, &mut buf)?;
                add_elapsed(&self.counters.finish_ns, started);
                self.shelf.lend(buf, need)?
            }
            None => {
                if self.pinned.as_ref().is_none_or(|p| p.len() < need) {
                    self.pinned = Some(self.gpu.pinned(need)?);
                }
                let Some(pinned) = self.pinned.as_mut() else {
                    return Err(GpuError::Invalid("no page-locked buffer".into()));
                };
                self.gpu.copy_to_pinned(&dev, pinned)?;
                let host = pinned.as_slice().map_err(driver("waiting for the copy to the host"))?;
                add_elapsed(&self.counters.finish_ns, started);
                // One allocation for the batch, shared by its samples: a
                // copy per image (and the page faults of as many fresh
                // allocations) cost more than the decode.
                Bytes::copy_from_slice(&host[..need])
            }
        };
        let started = Instant::now();
        let out = (0..count)
            .map(|i| all.slice(i * image_bytes..(i + 1) * image_bytes))
            .collect();
        add_elapsed(&self.counters.unpack_ns, started);
        Ok(out)
    }
}

/// Times a lane's batches for the [`StealPolicy`]: from one take to the
/// next is what a batch cost the lane, when it never waited for work.
#[derive(Default)]
pub(super) struct BatchTimer {
    last: Option<(Instant, usize)>,
}

impl BatchTimer {
    pub(super) fn taken(&mut self, jobs: &[Job], waited: bool, policy: &StealPolicy) {
        let now = Instant::now();
        if let Some((at, samples)) = self.last {
            policy.lane_batch(samples, now.saturating_duration_since(at), waited, now);
        }
        self.last = Some((now, jobs.iter().map(|j| j.samples.len()).sum()));
    }
}

/// A sample of a lane batch with steps to run: its index in the batch, the
/// sample and its steps.
type Stepped = (usize, GpuSample, Vec<Step>);

/// How many of `steps`' last steps the fused kernel can run: a bilinear
/// crop-resize to `size` x `size`, alone or followed by a horizontal flip.
fn fusable_tail(steps: &[Step], size: u32) -> usize {
    let is_crop = |s: &Step| {
        matches!(
            s,
            Step::CropResize {
                out_w,
                out_h,
                filter: stoker_core::Interpolation::Bilinear,
                ..
            } if (*out_w, *out_h) == (size, size)
        )
    };
    match steps {
        [.., crop, Step::FlipHorizontal] if is_crop(crop) => 2,
        [.., crop] if is_crop(crop) => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(key: &str) -> GpuSample {
        GpuSample {
            key: key.to_owned(),
            position: 0,
            label: 1,
            data: Bytes::from_static(b"\xff\xd8 not really a jpeg"),
        }
    }

    #[test]
    fn a_batch_that_panics_hands_every_sample_to_the_cpu_with_the_message() {
        let to_cpu = AtomicU64::new(0);
        let copies = vec![sample("a"), sample("b")];
        let out = run_caught(copies, &to_cpu, || panic!("kernel wrapper bug"));
        let back: Vec<(String, String)> = out
            .into_iter()
            .map(|(_, r)| match r {
                GpuResult::Cpu { sample, reason } => (sample.key, reason),
                other => panic!("not handed back: {other:?}"),
            })
            .collect();
        let reason = "gpu batch panicked: kernel wrapper bug".to_owned();
        assert_eq!(back, vec![("a".to_owned(), reason.clone()), ("b".to_owned(), reason)]);
        assert_eq!(to_cpu.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_batch_that_does_not_panic_keeps_its_results() {
        let to_cpu = AtomicU64::new(0);
        let out = run_caught(vec![sample("a")], &to_cpu, || {
            vec![(
                0,
                GpuResult::Cpu {
                    sample: sample("a"),
                    reason: "progressive".to_owned(),
                },
            )]
        });
        assert!(matches!(&out[..], [(0, GpuResult::Cpu { reason, .. })] if reason == "progressive"));
        assert_eq!(to_cpu.load(Ordering::Relaxed), 0, "the batch counts its own hand-backs");
    }

    #[test]
    fn a_sample_whose_host_work_panicked_goes_to_the_cpu_naming_it() {
        match hand_back_after_panic(sample("k7"), "gpu host work", "index out of bounds") {
            GpuResult::Cpu { sample, reason } => {
                assert_eq!(sample.key, "k7");
                assert_eq!(reason, "gpu host work panicked on k7: index out of bounds");
            }
            other => panic!("not handed back: {other:?}"),
        }
    }
}
