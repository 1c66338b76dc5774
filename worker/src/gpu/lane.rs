//! One GPU lane: a thread that owns a stream, a decoder and a page-locked
//! buffer, takes jobs off the queue ([`Lane::serve`]), assembles them into
//! batches (each sample's parts planned on the host: [`super::plan`]),
//! decodes them and makes every part (`run_batch`, with
//! [`super::batch`]) into one output (`finish`), and hands back to the CPU
//! path what it did not finish, a panic's samples included
//! ([`run_caught`]); how lanes are sized ([`GpuRunnerConfig`]) and what
//! they count ([`GpuCounters`]). The runner ([`super::runner`]) starts
//! them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use cudarc::driver::CudaSlice;
use stoker_cuda::PinnedBuffer;
use stoker_cuda::handoff::{DeviceOutput, DevicePixels};
use tracing::{debug, trace, warn};

use super::batch::{At, Awaiting, BatchWork, Made, PartPixels, Render, results};
use super::chain::MaskRender;
use super::decode::{DecodePath, GpuDecoder};
use super::device::{Gpu, GpuError, driver};
use super::lend::Shelf;
use super::plan::{Limits, PlannedSample, plan};
use super::queue::{GpuResult, GpuSample, Job, JobQueue};
use super::steal::StealPolicy;
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
    /// Images decoded in a batch (by the hardware JPEG engine, when the
    /// GPU has one) and alone on nvJPEG's CUDA backend (progressive JPEGs,
    /// a failed batch's retries).
    pub decoded_batched: AtomicU64,
    pub decoded_single: AtomicU64,
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

/// One thread's share of the device.
pub(super) struct Lane {
    gpu: Gpu,
    decoder: GpuDecoder,
    /// Page-locked buffers lent out as the batches' pixels.
    shelf: Shelf,
    /// The copy-back buffer when the shelf has lent all it may.
    pinned: Option<PinnedBuffer>,
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

    #[allow(
        clippy::result_large_err,
        reason = "a sample's plan hands the sample itself back in its Err (see `plan`)"
    )]
    fn run_jobs(&mut self, jobs: Vec<Job>) {
        let mut replies = Vec::with_capacity(jobs.len());
        let mut planned = Vec::new();
        let mut results: Vec<Vec<GpuResult>> = Vec::with_capacity(jobs.len());
        let started = Instant::now();
        let limits = Limits {
            max_image_pixels: self.config.max_image_pixels,
            batch_memory: self.config.batch_memory,
        };
        for (j, job) in jobs.into_iter().enumerate() {
            replies.push(job.reply);
            results.push(Vec::with_capacity(job.samples.len()));
            for sample in job.samples {
                let copy = sample.clone();
                match catch_panic(|| plan(sample, &job.recipe, limits)) {
                    Ok(Ok(p)) => {
                        // An image alone stays on the device when asked;
                        // masks and views come to the host.
                        let on_device = job.recipe.on_device && p.parts.len() == 1;
                        planned.push((p, j, job.recipe.fields.len(), on_device));
                    }
                    Ok(Err(back)) => results[j].push(back),
                    Err(message) => results[j].push(hand_back_after_panic(copy, "gpu host work", &message)),
                }
            }
        }
        add_elapsed(&self.counters.plan_ns, started);
        let refused: usize = results.iter().map(Vec::len).sum();
        self.counters.to_cpu.fetch_add(refused as u64, Ordering::Relaxed);
        // Batches within the byte and count limits.
        let mut planned = planned.into_iter().peekable();
        while planned.peek().is_some() {
            let (mut batch, mut owners, mut bytes) = (Vec::new(), Vec::new(), 0u64);
            // A batch's output is one allocation: on the device only when
            // every sample of it stays there.
            let mut all_on_device = true;
            while batch.len() < self.config.max_batch
                && planned
                    .peek()
                    .is_some_and(|(p, ..)| batch.is_empty() || bytes + p.bytes <= self.config.batch_memory)
                && let Some((p, j, fields, on_device)) = planned.next()
            {
                bytes += p.bytes;
                batch.push((p, fields));
                owners.push(j);
                all_on_device &= on_device;
            }
            let copies: Vec<GpuSample> = batch.iter().map(|(p, _)| p.sample.clone()).collect();
            let counters = Arc::clone(&self.counters);
            let done = run_caught(copies, &counters.to_cpu, || self.run_batch(batch, all_on_device));
            // By index: `run_batch` answers in its own order, and a batch
            // may hold samples of several jobs (items).
            for (i, r) in done {
                results[owners[i]].push(r);
            }
        }
        for (reply, r) in replies.into_iter().zip(results) {
            reply.deliver(r);
        }
    }

    /// Decodes `batch` (each sample with the number of its request's
    /// fields) and makes every part of every sample: the step rounds, then
    /// one output for the batch ([`Lane::finish`]). Each result comes with
    /// its sample's index in `batch`. With `on_device`, the output stays on
    /// the device ([`Lane::finish`]).
    fn run_batch(&mut self, batch: Vec<(PlannedSample, usize)>, on_device: bool) -> Vec<(usize, GpuResult)> {
        let n = batch.len();
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let datas: Vec<&[u8]> = batch.iter().map(|(p, _)| &p.sample.data[..]).collect();
        let decoded = self.decoder.decode_routed(&datas);
        drop(datas);
        add_elapsed(&self.counters.decode_ns, started);
        let started = Instant::now();
        let mut work = BatchWork::new(n);
        let mut samples = Vec::with_capacity(n);
        for (i, ((p, fields), (d, path))) in batch.into_iter().zip(decoded).enumerate() {
            let roles = p.parts.iter().map(|part| part.role).collect();
            trace!(key = %p.sample.key, path = path.name(), "gpu decode");
            match path {
                DecodePath::Batched => self.counters.decoded_batched.fetch_add(1, Ordering::Relaxed),
                DecodePath::Single => self.counters.decoded_single.fetch_add(1, Ordering::Relaxed),
                DecodePath::Refused => 0,
            };
            match d {
                Ok(img) if (img.width, img.height) != p.dims => work.fail(
                    i,
                    format!(
                        "nvjpeg decoded {}x{}, the header says {}x{}",
                        img.width, img.height, p.dims.0, p.dims.1
                    ),
                ),
                Ok(img) => work.add(&self.gpu, i, img, p.parts),
                Err(e) => work.fail(i, e.to_string()),
            }
            samples.push(Awaiting {
                sample: p.sample,
                roles,
                fields,
            });
        }
        work.run_steps(&self.gpu);
        add_elapsed(&self.counters.steps_ns, started);
        let made = match self.finish(&work, on_device) {
            Ok(made) => made,
            Err(e) => {
                let images = work.failed.iter().filter(|f| f.is_none()).count();
                warn!(error = %e, images, "gpu batch failed; its images go to the cpu");
                for i in 0..n {
                    work.fail(i, format!("gpu batch failed: {e}"));
                }
                Vec::new()
            }
        };
        let out = results(samples, work.failed, made);
        let to_cpu = out.iter().filter(|(_, r)| matches!(r, GpuResult::Cpu { .. })).count();
        self.counters.images.fetch_add((n - to_cpu) as u64, Ordering::Relaxed);
        if to_cpu > 0 {
            self.counters.to_cpu.fetch_add(to_cpu as u64, Ordering::Relaxed);
            debug!(to_cpu, batch = n, "gpu batch handed images back to the cpu path");
        }
        out
    }

    /// Writes every part of `work` whose sample has not failed into one
    /// device output (the crop-resizes a launch per output size, the
    /// images the step rounds finished a copy each, the masks one launch),
    /// copies it to the page-locked buffer and splits it per part; or, with
    /// `on_device`, leaves it on the device, each part a view of it that
    /// keeps it alive, with the event recorded after its kernels for a
    /// consumer's stream to wait on.
    fn finish(&mut self, work: &BatchWork, on_device: bool) -> Result<Vec<Made>, GpuError> {
        let started = Instant::now();
        let live: Vec<&(At, Render)> = work
            .renders
            .iter()
            .filter(|(at, _)| work.failed[at.0].is_none())
            .collect();
        if live.is_empty() {
            return Ok(Vec::new());
        }
        // The output's layout: the crop-resizes by size (one launch
        // each), then the copies, then the masks.
        let mut order: Vec<usize> = (0..live.len()).collect();
        order.sort_by_key(|&r| match &live[r].1 {
            Render::Crop { size, .. } => (0, *size),
            Render::Copy(_) => (1, 0),
            Render::Mask(..) => (2, 0),
        });
        let mut places = vec![(0usize, (0u32, 0u32), 0usize); live.len()];
        let mut need = 0;
        for &r in &order {
            let (dims, len) = work.output(&live[r].1);
            places[r] = (need, dims, len);
            need += len;
        }
        let dev = {
            // Every part's bytes are written below, by a kernel or a copy,
            // before the buffer is read.
            let mut dev =
                stoker_cuda::alloc_bytes(&self.gpu.stream, need).map_err(driver("allocation of the batch output"))?;
            let mut masks = Vec::new();
            let mut k = 0;
            while let Some(&r) = order.get(k) {
                let (offset, _, len) = places[r];
                match &live[r].1 {
                    Render::Crop { size, .. } => {
                        let size = *size;
                        let group: Vec<usize> = order[k..]
                            .iter()
                            .copied()
                            .take_while(|&g| matches!(&live[g].1, Render::Crop { size: s, .. } if *s == size))
                            .collect();
                        k += group.len();
                        let (mut images, mut crops, mut chains) = (Vec::new(), Vec::new(), Vec::new());
                        for &g in &group {
                            let Render::Crop {
                                source, chain, crop, ..
                            } = &live[g].1
                            else {
                                continue;
                            };
                            images.push(work.image(*source).ok_or_else(|| {
                                GpuError::Invalid(format!("part {:?} has no image to crop", live[g].0))
                            })?);
                            crops.push(*crop);
                            chains.push(chain);
                        }
                        self.gpu
                            .resized_crop_flip_at(&images, &crops, &chains, (size, size), &mut dev, offset)?;
                    }
                    Render::Copy(m) => {
                        k += 1;
                        let img = work
                            .made
                            .get(*m)
                            .filter(|img| img.pitch == img.width * 3 && img.buf.len() >= len)
                            .ok_or_else(|| GpuError::Invalid(format!("part {:?} has no packed image", live[r].0)))?;
                        let mut view = dev.slice_mut(offset..offset + len);
                        self.gpu
                            .stream
                            .memcpy_dtod(&img.buf.slice(..len), &mut view)
                            .map_err(driver("copying an image into the batch output"))?;
                    }
                    Render::Mask(pixels, chain) => {
                        k += 1;
                        masks.push(MaskRender {
                            pixels,
                            dims: (chain.src_w, chain.src_h),
                            chain,
                            offset,
                        });
                    }
                }
            }
            self.gpu.render_masks_at(&masks, &mut dev)?;
            dev
        };
        if on_device {
            let output =
                DeviceOutput::new(dev, &self.gpu.stream).map_err(driver("recording a batch output's event"))?;
            // Every batch ends with the lane waiting for its stream, as
            // the copy back does: the decoder's jpeg states and the
            // batch's host-side buffers are reused on that rule
            // (ARCHITECTURE.md, Invariants). The consumer's wait on the
            // output's event then costs nothing.
            self.gpu
                .stream
                .synchronize()
                .map_err(driver("waiting for a batch output left on the device"))?;
            add_elapsed(&self.counters.finish_ns, started);
            return live
                .iter()
                .zip(places)
                .map(|((at, _), (offset, dims, len))| {
                    let pixels = DevicePixels::new(&output, offset, len).ok_or_else(|| {
                        GpuError::Invalid(format!(
                            "part {at:?} lies past the batch output of {} bytes",
                            output.len()
                        ))
                    })?;
                    Ok((*at, dims, PartPixels::Device(pixels)))
                })
                .collect();
        }
        let all = self.copy_back(&dev, started)?;
        let started = Instant::now();
        let out = live
            .iter()
            .zip(places)
            .map(|((at, _), (offset, dims, len))| (*at, dims, PartPixels::Host(all.slice(offset..offset + len))))
            .collect();
        add_elapsed(&self.counters.unpack_ns, started);
        Ok(out)
    }

    /// `dev` copied to page-locked memory: a buffer lent off the shelf
    /// (the parts' bytes are slices of it, back on the shelf once they are
    /// sent), or, when the shelf has lent all it may, one copy out of the
    /// lane's own buffer.
    fn copy_back(&mut self, dev: &CudaSlice<u8>, started: Instant) -> Result<Bytes, GpuError> {
        let need = dev.len();
        Ok(match self.shelf.take(need) {
            Some(free) => {
                let mut buf = match free {
                    Some(b) if b.len() >= need => b,
                    // Grown in whole MiB to the largest batch seen.
                    _ => self.gpu.pinned(need.next_multiple_of(1 << 20))?,
                };
                self.gpu.copy_to_pinned(dev, &mut buf)?;
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
                self.gpu.copy_to_pinned(dev, pinned)?;
                let host = pinned.as_slice();
                add_elapsed(&self.counters.finish_ns, started);
                // One allocation for the batch, shared by its samples: a
                // copy per image (and the page faults of as many fresh
                // allocations) cost more than the decode.
                Bytes::copy_from_slice(&host[..need])
            }
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(key: &str) -> GpuSample {
        GpuSample {
            key: key.to_owned(),
            position: 0,
            label: 1,
            data: Bytes::from_static(b"\xff\xd8 not really a jpeg"),
            plan: crate::gpu::queue::test_plan(),
            masks: Vec::new(),
            mask_pixels: Vec::new(),
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
