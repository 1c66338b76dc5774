//! Batch assembly: samples are copied once, from the network buffer into
//! the batch's contiguous NHWC buffer.
//!
//! When the number of batches of an epoch is known (the dataset has an
//! index), the assembler yields exactly that many, whatever arrives: every
//! rank of a data-parallel job then takes the same number of steps, even
//! when samples were skipped as unreadable. Missing samples are made up of
//! real samples received before them, distinct within a batch as far as
//! the rank has had them (the epoch wraps, as torch's `DistributedSampler`
//! pads), and counted in [`Batch::padded`]: the last `padded` of a batch.
//! The samples kept for padding are the last batch's worth, held near the
//! epoch's end only. Completions of items ride on the next batch emitted
//! ([`Batch::completes`]). [`batches_per_rank`] and [`LastBatch`] (the
//! last-batch policy) live here too.
//!
//! This is the host side: it knows nothing of the GPU. A [`Batch`] is
//! generic over its device part, which the assembler leaves empty; the
//! crate's `Batch` fixes it to the device module's batch, and the upload
//! (`batch.rs`) fills it. So the device module may build on host types (the
//! pinned ring is host memory), never the other way round.

use std::str::FromStr;

use bytes::Bytes;
use stoker_core::{Fields, ImageSize};
use stoker_cuda::handoff::DevicePixels;

use crate::buffers::{BatchBuffers, Pixels};
use crate::error::ClientError;
use crate::sample::Sample;

/// What happens to the end of an epoch that does not fill a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LastBatch {
    /// Every batch is full; the samples of an incomplete last batch are
    /// left out.
    Drop,
    /// The last batch holds what is left.
    #[default]
    Partial,
    /// The last batch is filled up with samples received before (distinct
    /// ones while there are enough); they are counted in [`Batch::padded`].
    Pad,
}

impl FromStr for LastBatch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop" => Ok(Self::Drop),
            "partial" => Ok(Self::Partial),
            "pad" => Ok(Self::Pad),
            other => Err(format!("last batch policy must be drop, partial or pad, not {other:?}")),
        }
    }
}

impl std::fmt::Display for LastBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Drop => "drop",
            Self::Partial => "partial",
            Self::Pad => "pad",
        })
    }
}

/// Batches each of `world` ranks yields in an epoch of `samples` samples
/// (the dataset's whole epoch), the same on every rank: ranks' shares
/// differ by at most one sample (see `EpochPlan`), so `drop` counts the
/// full batches of the smallest share and `partial` / `pad` the batches of
/// the largest.
pub fn batches_per_rank(samples: u64, world: u32, batch_size: usize, policy: LastBatch) -> u64 {
    let world = u64::from(world.max(1));
    let batch = batch_size.max(1) as u64;
    match policy {
        LastBatch::Drop => samples / world / batch,
        LastBatch::Partial | LastBatch::Pad => samples.div_ceil(world).div_ceil(batch),
    }
}

/// One batch: `len()` images of `height` x `width` x 3, uint8, NHWC, in
/// host memory; or, when the loader uploads to a GPU, in `device`.
///
/// `D` is the batch's form on the GPU (the crate's `Batch` is
/// `Batch<DeviceBatch>`); the assembler leaves `device` empty.
#[derive(Debug)]
pub struct Batch<D> {
    pub epoch: u64,
    /// Position of this batch in the epoch, from 0.
    pub index: u64,
    /// The size of each image's block: the transform's square, or, for a
    /// transform that keeps each image's size ([`ImageSize::Each`]), the
    /// largest height and width in the batch, each image at the top left
    /// of its block and zeros around it (as Detectron2's `ImageList`
    /// pads).
    pub height: u32,
    pub width: u32,
    /// Each image's own (height, width) within its block.
    pub image_sizes: Vec<(u32, u32)>,
    /// `len() * height * width * 3` bytes, in a reused buffer (page-locked
    /// when the loader uploads to a GPU); empty once uploaded.
    pub pixels: Pixels,
    /// The batch on the training GPU, converted to the configured layout
    /// and dtype, when the loader uploads (see `LoaderConfig::device`).
    pub device: Option<D>,
    pub labels: Vec<i64>,
    pub keys: Vec<String>,
    /// Each sample's other fields (`LoaderConfig::fields`, in that
    /// order; `None` for an optional field the sample lacks). Empty rows
    /// when none were asked for.
    pub fields: Vec<Fields>,
    /// The request's views (`LoaderConfig::views`), in its order: each
    /// `len()` images of its own size, uint8 NHWC, in host memory.
    pub views: Vec<ViewPixels>,
    /// The last `padded` samples repeat an earlier one, to fill the batch
    /// (see [`LastBatch`]); a training step should mask them out.
    pub padded: usize,
    /// The plan item of each sample that is not padding, and its position
    /// in the item's shard: the sample's identity.
    pub(crate) items: Vec<u32>,
    pub(crate) positions: Vec<u64>,
    /// Plan items whose samples are all in this batch or before it.
    pub(crate) completes: Vec<u32>,
    /// The images a GPU worker in this process left on the device, by
    /// row: their rows of `pixels` hold nothing, and the upload copies
    /// them in on the device (`Uploader::upload`).
    pub(crate) on_device: Vec<(usize, DevicePixels)>,
    /// Images of their own sizes received, not yet in `pixels`: a batch
    /// of [`ImageSize::Each`] is packed once it is complete, when its
    /// largest image is known.
    held: Vec<Bytes>,
}

/// One view of every sample of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewPixels {
    pub name: String,
    /// Side of each (square) image.
    pub size: u32,
    /// `len() * size * size * 3` bytes, HWC RGB, sample after sample.
    pub pixels: Vec<u8>,
}

impl ViewPixels {
    /// The pixels of image `i` (HWC).
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.size as usize * self.size as usize * 3;
        &self.pixels[i * n..(i + 1) * n]
    }
}

impl<D> Batch<D> {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Samples that are not padding: the first `real()` of the batch.
    pub fn real(&self) -> usize {
        self.len() - self.padded
    }

    /// The pixels of image `i`'s block (HWC, `height` x `width`: the
    /// image at its top left, `image_sizes[i]`).
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.height as usize * self.width as usize * 3;
        &self.pixels[i * n..(i + 1) * n]
    }
}

/// A received sample kept for padding.
#[derive(Debug)]
struct PadSample {
    pixels: Bytes,
    /// Its image's (height, width).
    dims: (u32, u32),
    /// Its image when it was left on the device (`pixels` empty).
    device: Option<DevicePixels>,
    label: i64,
    key: String,
    fields: Fields,
    views: Vec<Bytes>,
}

/// Fills batches of `batch_size` samples (whose device part is a `D`).
#[derive(Debug)]
pub(crate) struct Assembler<D> {
    epoch: u64,
    size: ImageSize,
    batch_size: usize,
    policy: LastBatch,
    /// Batches the epoch has, when known.
    target: Option<u64>,
    next_index: u64,
    current: Option<Batch<D>>,
    /// The samples padding takes, oldest first: the last one outside the
    /// epoch's last three batches, the last `batch_size` within them (a
    /// reference to the received bytes each, no copy; held only where
    /// padding may come, so the shared-memory ring gets its slots back).
    pool: std::collections::VecDeque<PadSample>,
    /// The views asked for: (name, size).
    views: Vec<(String, u32)>,
    /// Completions waiting for the next batch.
    completes: Vec<u32>,
    /// Samples that arrived after the target was reached.
    pub dropped: u64,
    buffers: BatchBuffers,
}

impl<D> Assembler<D> {
    /// An assembler whose first batch has index `first_index` (non-zero
    /// when an epoch resumes).
    pub fn new(
        epoch: u64,
        size: ImageSize,
        batch_size: usize,
        policy: LastBatch,
        target: Option<u64>,
        first_index: u64,
        buffers: BatchBuffers,
    ) -> Self {
        Self {
            epoch,
            size,
            batch_size,
            policy,
            target,
            next_index: first_index,
            current: None,
            pool: std::collections::VecDeque::new(),
            completes: Vec::new(),
            dropped: 0,
            buffers,
            views: Vec::new(),
        }
    }

    /// Batches that also carry these views (name, size) of each sample.
    pub fn with_views(mut self, views: Vec<(String, u32)>) -> Self {
        self.views = views;
        self
    }

    async fn fresh(&self) -> Result<Batch<D>, ClientError> {
        // A batch of each image's size takes its buffer once complete.
        let (side, pixels) = match self.size {
            ImageSize::Square(side) => (side, self.buffers.get().await?),
            ImageSize::Each => (0, Pixels::unset()),
        };
        Ok(Batch {
            epoch: self.epoch,
            index: self.next_index,
            height: side,
            width: side,
            image_sizes: Vec::with_capacity(self.batch_size),
            pixels,
            device: None,
            labels: Vec::with_capacity(self.batch_size),
            keys: Vec::with_capacity(self.batch_size),
            fields: Vec::with_capacity(self.batch_size),
            views: self
                .views
                .iter()
                .map(|(name, size)| ViewPixels {
                    name: name.clone(),
                    size: *size,
                    pixels: Vec::with_capacity(self.batch_size * (*size as usize).pow(2) * 3),
                })
                .collect(),
            padded: 0,
            items: Vec::with_capacity(self.batch_size),
            positions: Vec::with_capacity(self.batch_size),
            completes: Vec::new(),
            on_device: Vec::new(),
            held: Vec::new(),
        })
    }

    async fn current(&mut self) -> Result<Batch<D>, ClientError> {
        match self.current.take() {
            Some(b) => Ok(b),
            None => self.fresh().await,
        }
    }

    fn reached_target(&self) -> bool {
        self.target.is_some_and(|t| self.next_index >= t)
    }

    /// Records that plan item `item` is complete: the next batch carries it.
    pub fn complete(&mut self, item: u32) {
        self.completes.push(item);
    }

    /// Adds a sample; returns a batch when one is full.
    pub async fn push(&mut self, sample: Sample) -> Result<Option<Batch<D>>, ClientError> {
        if self.reached_target() {
            self.dropped += 1;
            return Ok(None);
        }
        let mut batch = self.current().await?;
        let dims = (sample.height, sample.width);
        push_image(&mut batch, &sample.pixels, dims, sample.device.as_ref())?;
        batch.labels.push(sample.label);
        batch.items.push(sample.item);
        batch.positions.push(sample.position);
        batch.keys.push(sample.key.clone());
        batch.fields.push(sample.fields.clone());
        for (view, pixels) in batch.views.iter_mut().zip(&sample.views) {
            view.pixels.extend_from_slice(pixels);
        }
        // Kept for padding: a reference to the received bytes, no copy.
        let keep = if self.padding_may_come() { self.batch_size } else { 1 };
        self.pool.push_back(PadSample {
            pixels: sample.pixels,
            dims,
            device: sample.device,
            label: sample.label,
            key: sample.key,
            fields: sample.fields,
            views: sample.views,
        });
        while self.pool.len() > keep {
            self.pool.pop_front();
        }
        if batch.len() == self.batch_size {
            Ok(Some(self.emit(batch)?))
        } else {
            self.current = Some(batch);
            Ok(None)
        }
    }

    fn emit(&mut self, mut batch: Batch<D>) -> Result<Batch<D>, ClientError> {
        if self.size == ImageSize::Each {
            self.pack(&mut batch)?;
        }
        batch.completes.append(&mut self.completes);
        self.next_index += 1;
        Ok(batch)
    }

    /// Copies a batch of each image's size into one buffer of blocks of
    /// its largest height and width: each image at its block's top left,
    /// zeros to the right and below (a reused buffer holds old bytes).
    fn pack(&self, batch: &mut Batch<D>) -> Result<(), ClientError> {
        let height = batch.image_sizes.iter().map(|s| s.0).max().unwrap_or(1);
        let width = batch.image_sizes.iter().map(|s| s.1).max().unwrap_or(1);
        let row = width as usize * 3;
        let mut pixels = self.buffers.host(batch.len() * height as usize * row)?;
        let mut fits = true;
        for (image, &(h, w)) in batch.held.iter().zip(&batch.image_sizes) {
            let own = w as usize * 3;
            for r in 0..h as usize {
                fits &= pixels.push(&image[r * own..(r + 1) * own]) && pixels.push_zeros(row - own);
            }
            fits &= pixels.push_zeros((height - h) as usize * row);
        }
        if !fits {
            return Err(overflow(batch));
        }
        batch.held.clear();
        (batch.height, batch.width, batch.pixels) = (height, width, pixels);
        Ok(())
    }

    /// Whether the pool must hold a batch: from the third batch before
    /// the end of a known count (a rank short of samples pads its last
    /// batch with the batch before it, and whole batches after it), or
    /// always when the count is not known and the policy pads.
    fn padding_may_come(&self) -> bool {
        match self.target {
            Some(target) => self.next_index + 3 >= target,
            None => self.policy == LastBatch::Pad,
        }
    }

    /// Fills `batch` with the pool's samples, oldest first (those received
    /// before the batch's own) and round again when it holds fewer than
    /// the batch lacks. With no sample at all (a
    /// rank whose share was empty or all skipped, or an epoch resumed where
    /// only padding was left), pads with black images, label -1 and an
    /// empty key: padding is masked out either way.
    fn pad(&self, batch: &mut Batch<D>) -> Result<(), ClientError> {
        // Each image's own size has none to give a blank: one pixel.
        let side = self.size.side().unwrap_or(1);
        let blank = Bytes::from(vec![0u8; side as usize * side as usize * 3]);
        let mut next = 0usize;
        while batch.len() < self.batch_size {
            let from = self.pool.get(next % self.pool.len().max(1));
            next += 1;
            let (pixels, dims, device, label, key, fields, views) = match from {
                Some(p) => (
                    &p.pixels,
                    p.dims,
                    p.device.as_ref(),
                    p.label,
                    p.key.as_str(),
                    Some(&p.fields),
                    Some(&p.views),
                ),
                None => (&blank, (side, side), None, -1, "", None, None),
            };
            push_image(batch, pixels, dims, device)?;
            batch.labels.push(label);
            batch.keys.push(key.to_owned());
            // With nothing to repeat, a pad has no field values at all.
            batch.fields.push(fields.cloned().unwrap_or_default());
            for (j, view) in batch.views.iter_mut().enumerate() {
                match views.and_then(|v| v.get(j)) {
                    Some(p) => view.pixels.extend_from_slice(p),
                    None => view
                        .pixels
                        .resize(view.pixels.len() + (view.size as usize).pow(2) * 3, 0),
                }
            }
            batch.padded += 1;
        }
        Ok(())
    }

    /// The next of the batches that end the epoch once every sample has
    /// arrived: the last, incomplete one as the policy says, and, when the
    /// epoch's batch count is known and fewer samples came than planned,
    /// padded batches up to that count. One at a time, so that each can go
    /// on (and give its pinned buffer back) before the next takes one.
    pub async fn finish_next(&mut self) -> Result<Option<Batch<D>>, ClientError> {
        let batch = match self.target {
            Some(target) if self.next_index < target => {
                let mut batch = self.current().await?;
                let keep_partial =
                    self.policy == LastBatch::Partial && self.next_index + 1 == target && !batch.is_empty();
                if !keep_partial {
                    self.pad(&mut batch)?;
                }
                Some(batch)
            }
            Some(_) => None,
            None => match self.current.take().filter(|b| !b.is_empty()) {
                None => None,
                Some(_) if self.policy == LastBatch::Drop => None,
                Some(batch) if self.policy == LastBatch::Partial => Some(batch),
                Some(mut batch) => {
                    self.pad(&mut batch)?;
                    Some(batch)
                }
            },
        };
        batch.map(|b| self.emit(b)).transpose()
    }

    /// Every batch [`Assembler::finish_next`] gives.
    #[cfg(test)]
    pub async fn finish(&mut self) -> Result<Vec<Batch<D>>, ClientError> {
        let mut out = Vec::new();
        while let Some(b) = self.finish_next().await? {
            out.push(b);
        }
        Ok(out)
    }
}

/// A sample that does not fit its batch's buffer: the wire check of each
/// sample's size makes this a bug, reported rather than a panic.
/// Appends a sample's image of `dims` (height, width) to `batch`: its
/// bytes, or, for an image left on the device, an empty row that the
/// upload fills on the device. A batch of each image's size holds the
/// bytes until it is packed.
fn push_image<D>(
    batch: &mut Batch<D>,
    pixels: &Bytes,
    dims: (u32, u32),
    device: Option<&DevicePixels>,
) -> Result<(), ClientError> {
    let row = batch.len();
    batch.image_sizes.push(dims);
    if batch.pixels.is_unset() {
        if device.is_some() {
            return Err(ClientError::Batches(format!(
                "batch {} of epoch {}: an image left on the device reached a batch of each image's size",
                batch.index, batch.epoch
            )));
        }
        batch.held.push(pixels.clone());
        return Ok(());
    }
    let fits = match device {
        None => batch.pixels.push(pixels),
        Some(on_device) => {
            if !batch.pixels.is_pinned() {
                return Err(ClientError::Batches(format!(
                    "batch {} of epoch {}: an image left on the device reached a batch in host memory",
                    batch.index, batch.epoch
                )));
            }
            batch.on_device.push((row, on_device.clone()));
            batch.pixels.reserve(on_device.len())
        }
    };
    if fits { Ok(()) } else { Err(overflow(batch)) }
}

fn overflow<D>(batch: &Batch<D>) -> ClientError {
    ClientError::Batches(format!(
        "batch {} of epoch {}: a sample does not fit the batch buffer after {} samples",
        batch.index,
        batch.epoch,
        batch.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::HostPool;

    // The host side needs no device: batches whose device part is `()`.
    type Assembler = super::Assembler<()>;
    type Batch = super::Batch<()>;

    fn assembler(epoch: u64, batch_size: usize, policy: LastBatch, target: Option<u64>, first_index: u64) -> Assembler {
        let buffers = BatchBuffers::Host(HostPool::new(batch_size * 12, 2));
        Assembler::new(
            epoch,
            ImageSize::Square(2),
            batch_size,
            policy,
            target,
            first_index,
            buffers,
        )
    }

    /// Pushes samples `range`, returning the batches filled.
    async fn push_all(a: &mut Assembler, range: std::ops::Range<u8>) -> Vec<Batch> {
        let mut out = Vec::new();
        for i in range {
            out.extend(a.push(sample(i)).await.unwrap());
        }
        out
    }

    fn sample(i: u8) -> Sample {
        Sample {
            key: format!("k{i}"),
            label: i64::from(i),
            height: 2,
            width: 2,
            pixels: Bytes::from(vec![i; 2 * 2 * 3]),
            position: u64::from(i),
            item: 0,
            fields: Vec::new(),
            views: Vec::new(),
            device: None,
        }
    }

    fn lens(batches: &[Batch]) -> Vec<(usize, usize)> {
        batches.iter().map(|b| (b.len(), b.padded)).collect()
    }

    #[tokio::test]
    async fn fills_batches_in_order_and_keeps_the_tail() {
        let mut a = assembler(3, 2, LastBatch::Partial, None, 0);
        assert!(a.push(sample(0)).await.unwrap().is_none());
        let b = a.push(sample(1)).await.unwrap().unwrap();
        assert_eq!((b.epoch, b.index, b.len()), (3, 0, 2));
        assert_eq!(b.image(1), &[1u8; 12]);
        assert_eq!(b.keys, ["k0", "k1"]);
        assert!(a.push(sample(2)).await.unwrap().is_none());
        let tail = a.finish().await.unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!((tail[0].index, tail[0].len(), tail[0].pixels.len()), (1, 1, 12));
        assert!(a.finish().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn drop_discards_the_tail_and_pad_fills_it_with_samples_received_before() {
        let mut a = assembler(0, 4, LastBatch::Drop, None, 0);
        push_all(&mut a, 0..1).await;
        assert!(a.finish().await.unwrap().is_empty());

        let mut a = assembler(0, 4, LastBatch::Pad, None, 0);
        push_all(&mut a, 0..2).await;
        let b = a.finish().await.unwrap().pop().unwrap();
        assert_eq!((b.len(), b.padded, b.real()), (4, 2, 2));
        assert_eq!(b.keys, ["k0", "k1", "k0", "k1"]);
        assert_eq!(b.image(3), &[1u8; 12]);
        assert_eq!(b.items.len(), 2, "padding belongs to no item");
    }

    #[tokio::test]
    async fn a_known_batch_count_is_met_exactly() {
        // Planned 3 batches of 2, but only 3 samples came (skips): the
        // rank still yields 3 batches.
        let mut a = assembler(0, 2, LastBatch::Pad, Some(3), 0);
        let mut out = push_all(&mut a, 0..3).await;
        out.extend(a.finish().await.unwrap());
        assert_eq!(lens(&out), [(2, 0), (2, 1), (2, 2)]);
        assert_eq!(out.iter().map(|b| b.index).collect::<Vec<_>>(), [0, 1, 2]);

        // Partial keeps the last batch partial, but fills up batches that
        // are missing.
        let mut a = assembler(0, 2, LastBatch::Partial, Some(2), 0);
        let mut out = push_all(&mut a, 0..1).await;
        out.extend(a.finish().await.unwrap());
        assert_eq!(lens(&out), [(2, 1), (2, 2)]);
        let mut a = assembler(0, 2, LastBatch::Partial, Some(3), 0);
        let mut out = push_all(&mut a, 0..2).await;
        out.extend(a.finish().await.unwrap());
        assert_eq!(lens(&out), [(2, 0), (2, 2), (2, 2)]);
        let mut a = assembler(0, 2, LastBatch::Partial, Some(2), 0);
        let mut out = push_all(&mut a, 0..3).await;
        out.extend(a.finish().await.unwrap());
        assert_eq!(lens(&out), [(2, 0), (1, 0)]);

        // More samples than planned: the surplus is dropped.
        let mut a = assembler(0, 2, LastBatch::Drop, Some(1), 0);
        let out = push_all(&mut a, 0..5).await;
        assert_eq!(lens(&out), [(2, 0)]);
        assert!(a.finish().await.unwrap().is_empty());
        assert_eq!(a.dropped, 3);
    }

    /// A rank short of samples (6 for 3 batches of 4) pads with real
    /// samples, distinct within each batch: its last partial batch with the
    /// batch before it, a whole padded batch with the last ones it had.
    #[tokio::test]
    async fn padding_is_distinct_real_samples_received_before() {
        let mut a = assembler(0, 4, LastBatch::Pad, Some(3), 0);
        let mut out = push_all(&mut a, 0..6).await;
        out.extend(a.finish().await.unwrap());
        assert_eq!(lens(&out), [(4, 0), (4, 2), (4, 4)]);
        assert_eq!(out[1].keys, ["k4", "k5", "k2", "k3"]);
        assert_eq!(out[1].labels, [4, 5, 2, 3]);
        assert_eq!(out[1].image(2), &[2u8; 12]);
        assert_eq!(out[2].keys, ["k2", "k3", "k4", "k5"]);
        // Far from the end, only the last sample is held (the ring's
        // slots go back); from the third batch before it, a batch's worth
        // (10 planned batches of 2: the 15th sample is in the 8th).
        let mut a = assembler(0, 2, LastBatch::Pad, Some(10), 0);
        push_all(&mut a, 0..15).await;
        assert_eq!(a.pool.len(), 2, "the last three batches keep a batch");
        let mut a = assembler(0, 2, LastBatch::Pad, Some(10), 0);
        push_all(&mut a, 0..5).await;
        assert_eq!(a.pool.len(), 1);
    }

    #[tokio::test]
    async fn with_nothing_to_repeat_padding_is_blank() {
        let mut a = assembler(4, 2, LastBatch::Drop, Some(1), 0);
        let b = a.finish().await.unwrap().pop().unwrap();
        assert_eq!((b.len(), b.padded, b.real()), (2, 2, 0));
        assert_eq!((b.labels.clone(), b.image(1)), (vec![-1, -1], &[0u8; 12][..]));
    }

    #[tokio::test]
    async fn completions_ride_on_the_next_batch() {
        let mut a = assembler(0, 2, LastBatch::Partial, None, 5);
        push_all(&mut a, 0..1).await;
        a.complete(7);
        let b = a.push(sample(1)).await.unwrap().unwrap();
        assert_eq!((b.index, b.completes.clone()), (5, vec![7]));
        push_all(&mut a, 2..3).await;
        a.complete(8);
        let tail = a.finish().await.unwrap();
        assert_eq!(tail[0].completes, [8]);
    }

    /// A sample of `h` x `w` whose every byte is `i`.
    fn sized(i: u8, h: u32, w: u32) -> Sample {
        Sample {
            height: h,
            width: w,
            pixels: Bytes::from(vec![i; (h * w * 3) as usize]),
            ..sample(i)
        }
    }

    #[tokio::test]
    async fn images_of_their_own_sizes_are_packed_at_the_top_left_of_the_largest() {
        let buffers = BatchBuffers::Host(HostPool::new(0, 2));
        let mut a = Assembler::new(0, ImageSize::Each, 2, LastBatch::Pad, None, 0, buffers);
        assert!(a.push(sized(1, 2, 3)).await.unwrap().is_none());
        let b = a.push(sized(2, 3, 1)).await.unwrap().unwrap();
        assert_eq!((b.height, b.width, b.image_sizes.clone()), (3, 3, vec![(2, 3), (3, 1)]));
        let rows = |i: usize| -> Vec<Vec<u8>> { b.image(i).chunks(9).map(<[u8]>::to_vec).collect() };
        assert_eq!(rows(0), [vec![1; 9], vec![1; 9], vec![0; 9]]);
        let one_wide = [2, 2, 2, 0, 0, 0, 0, 0, 0].to_vec();
        assert_eq!(rows(1), [one_wide.clone(), one_wide.clone(), one_wide]);
        drop(b);
        // The buffer comes back holding those bytes: padding is written
        // as zeros, never left as it was; padding samples keep their size.
        assert!(a.push(sized(7, 1, 1)).await.unwrap().is_none());
        let b = a.finish().await.unwrap().pop().unwrap();
        assert_eq!((b.height, b.width, b.padded), (3, 1, 1));
        assert_eq!(b.image_sizes, [(1, 1), (3, 1)], "padded with the sample before");
        assert_eq!(b.image(0), &[7, 7, 7, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b.image(1), &[2; 9]);
    }

    #[test]
    fn every_rank_gets_the_same_number_of_batches() {
        // 70 samples, 3 ranks (23, 23, 24), batches of 4.
        assert_eq!(batches_per_rank(70, 3, 4, LastBatch::Drop), 5);
        assert_eq!(batches_per_rank(70, 3, 4, LastBatch::Partial), 6);
        assert_eq!(batches_per_rank(70, 3, 4, LastBatch::Pad), 6);
        assert_eq!(batches_per_rank(70, 1, 7, LastBatch::Drop), 10);
        assert_eq!(batches_per_rank(0, 2, 4, LastBatch::Pad), 0);
    }
}
