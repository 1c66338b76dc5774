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
    /// The batches being filled: one, or, grouping by aspect
    /// ([`Assembler::grouped_by_aspect`]), the others' (0) and the
    /// landscape images' (1).
    current: [Option<Batch<D>>; 2],
    grouped: bool,
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
            current: [None, None],
            grouped: false,
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

    /// Batches of images of one aspect: landscape images (wider than
    /// high) fill one batch, the others another, each emitted when full,
    /// as Detectron2's `AspectRatioGroupedDataset` groups them. At the
    /// epoch's end the two partial batches are combined, so a rank yields
    /// as many batches as without grouping, each sample once; with
    /// `deterministic`, samples arrive in plan order, so the batches are a
    /// function of (seed, epoch, rank).
    pub fn grouped_by_aspect(mut self, grouped: bool) -> Self {
        self.grouped = grouped;
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
            // Set when emitted: with grouping, batches fill side by side.
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

    async fn current(&mut self, group: usize) -> Result<Batch<D>, ClientError> {
        match self.current[group].take() {
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
        let dims = (sample.height, sample.width);
        let group = usize::from(self.grouped && dims.1 > dims.0);
        let mut batch = self.current(group).await?;
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
            self.current[group] = Some(batch);
            Ok(None)
        }
    }

    fn emit(&mut self, mut batch: Batch<D>) -> Result<Batch<D>, ClientError> {
        if self.size == ImageSize::Each {
            self.pack(&mut batch)?;
        }
        batch.index = self.next_index;
        // An item's completion rides on the batch after its last sample:
        // not while one waits in the other group's batch (a resumed epoch
        // would skip it).
        let waiting: std::collections::HashSet<u32> = self
            .current
            .iter()
            .flatten()
            .flat_map(|b| b.items.iter().copied())
            .collect();
        let (now, later) = std::mem::take(&mut self.completes)
            .into_iter()
            .partition(|item| !waiting.contains(item));
        (batch.completes, self.completes) = (now, later);
        self.next_index += 1;
        Ok(batch)
    }

    /// At the epoch's end, with grouping: the other group's samples join
    /// the first group's batch, oldest first; a batch they fill is
    /// returned, and what is left of them waits for the next call.
    async fn combine_groups(&mut self) -> Result<Option<Batch<D>>, ClientError> {
        let Some(mut from) = self.current[1].take() else {
            return Ok(None);
        };
        let mut into = self.current(0).await?;
        let n = (self.batch_size - into.len()).min(from.len());
        move_samples(&mut from, &mut into, n);
        if !from.is_empty() {
            self.current[1] = Some(from);
        }
        if into.len() == self.batch_size {
            return Ok(Some(into));
        }
        self.current[0] = Some(into);
        Ok(None)
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
        if let Some(full) = self.combine_groups().await? {
            return self.emit(full).map(Some);
        }
        let batch = match self.target {
            Some(target) if self.next_index < target => {
                let mut batch = self.current(0).await?;
                let keep_partial =
                    self.policy == LastBatch::Partial && self.next_index + 1 == target && !batch.is_empty();
                if !keep_partial {
                    self.pad(&mut batch)?;
                }
                Some(batch)
            }
            Some(_) => None,
            None => match self.current[0].take().filter(|b| !b.is_empty()) {
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

/// Moves the first `n` samples of `from` (none of them padding) to the end
/// of `into`, both batches of each image's size, whose images are held
/// until packed.
fn move_samples<D>(from: &mut Batch<D>, into: &mut Batch<D>, n: usize) {
    into.image_sizes.extend(from.image_sizes.drain(..n));
    into.held.extend(from.held.drain(..n));
    into.labels.extend(from.labels.drain(..n));
    into.keys.extend(from.keys.drain(..n));
    into.fields.extend(from.fields.drain(..n));
    into.items.extend(from.items.drain(..n));
    into.positions.extend(from.positions.drain(..n));
    for (to, view) in into.views.iter_mut().zip(&mut from.views) {
        let bytes = n * (view.size as usize).pow(2) * 3;
        to.pixels.extend(view.pixels.drain(..bytes));
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
mod tests;
