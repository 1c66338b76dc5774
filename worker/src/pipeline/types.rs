//! What a work item is ([`Item`]) and what it produces: the [`Chunk`]s of
//! results on their way to the client, the skips it tallies
//! ([`SkipTally`]), and why it failed as a whole ([`ItemError`], with
//! [`SampleError`] when its shard's samples stopped coming). Below every
//! part of the pipeline.

use std::sync::Arc;

use stoker_core::{
    DatasetUri, FieldSpec, ItemMode, ItemSeed, PositionSet, RecordFields, ShardFormat, TransformSpec, ViewSpec,
};
use stoker_formats::error::RecordError;

use crate::gpu::RunnerGone;
use crate::memory::Reservation;
use crate::outcome::{Processed, Skipped};
use crate::parquet::ParquetShardError;
use crate::pool::PoolError;
use stoker_storage::StorageError;

/// A work item in domain terms.
#[derive(Debug)]
pub struct Item {
    pub dataset: DatasetUri,
    pub shard: String,
    pub seed: u64,
    pub epoch: u64,
    pub spec: Arc<TransformSpec>,
    /// Positions of the samples the client holds already: neither decoded
    /// nor sent.
    pub skip: PositionSet,
    pub chunk_bytes: usize,
    /// The samples to process, by position in the shard: from `start`, up
    /// to (not including) `end`, or to the shard's end.
    pub start: u64,
    pub end: Option<u64>,
    /// What to do with the samples (always `Process` for training).
    pub mode: ItemMode,
    /// How to read the shard.
    pub format: ShardFormat,
    /// Where the record keeps the image and the label (the shard's own
    /// columns, keys or features).
    pub record: RecordFields,
    /// The user's fields to deliver with each sample, checked, with their
    /// kinds resolved for `format` (never `auto` for WebDataset).
    pub fields: Arc<[FieldSpec]>,
    /// More views of each sample's image, each with its own pipeline,
    /// delivered after `fields` as image fields.
    pub views: Arc<[ViewSpec]>,
    /// Whether the GPU lanes leave the item's finished images on the
    /// device (`Processed::device`): a loader in this process, uploading
    /// to the lanes' device, offered its sink (`stoker_cuda::handoff`).
    pub on_device: bool,
}

impl Item {
    /// Where the randomness of the item's samples comes from: (seed,
    /// epoch, shard), and each sample's position.
    pub fn item_seed(&self) -> ItemSeed {
        ItemSeed::new(self.seed, self.epoch, &self.shard)
    }
}

/// An item's skips, logged once when the item ends (at WARN: counts by
/// kind, and the first sample's key and reason); each sample's reason goes
/// to DEBUG as it happens, and to the client in full. A bad shard thus
/// costs one line, not one per sample.
#[derive(Debug)]
pub(crate) struct SkipTally {
    shard: String,
    counts: std::collections::BTreeMap<&'static str, u64>,
    first: Option<(String, String)>,
}

impl SkipTally {
    pub(crate) fn new(shard: &str) -> Self {
        Self {
            shard: shard.to_owned(),
            counts: Default::default(),
            first: None,
        }
    }

    pub(crate) fn add(&mut self, s: &Skipped) {
        tracing::debug!(shard = %self.shard, key = %s.key, position = s.position, reason = %s.reason, "sample skipped");
        *self.counts.entry(s.kind.as_str()).or_default() += 1;
        self.first.get_or_insert_with(|| (s.key.clone(), s.reason.clone()));
    }

    /// "3 decode, 1 too_large".
    fn counts(&self) -> String {
        self.counts
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The log target of a worker's per-shard skip summary. A local worker
/// started by a client turns it off: the client reports the skips it
/// receives, and the worker's line would say each one twice.
const SKIPS_TARGET: &str = "stoker_skips";

impl Drop for SkipTally {
    fn drop(&mut self) {
        if let Some((key, reason)) = &self.first {
            let total: u64 = self.counts.values().sum();
            tracing::warn!(
                target: SKIPS_TARGET,
                shard = %self.shard,
                skipped = total,
                by_kind = %self.counts(),
                first_key = %key,
                first_reason = %reason,
                "samples skipped"
            );
        }
    }
}

/// A batch of results on its way to the client.
#[derive(Debug, Default)]
pub struct Chunk {
    pub samples: Vec<Processed>,
    /// Pixel bytes in `samples` (in host memory or left on the device) and
    /// their fields' (instance masks can outweigh the pixels), kept as
    /// they are pushed: what a chunk's size is measured in.
    pub payload_bytes: usize,
    pub skipped: Vec<Skipped>,
    pub done: bool,
    /// Set on the last chunk when the shard's data ended early or was
    /// corrupt: the samples after that point could not be read.
    pub shard_error: Option<String>,
    /// The memory budget held by `samples`, released when the chunk is
    /// dropped (once it is encoded for the network).
    pub reservation: Reservation,
    /// `Read` items: samples read and their encoded bytes, counted instead
    /// of sent.
    pub read_samples: u64,
    pub read_bytes: u64,
}

impl Chunk {
    pub(super) fn push(&mut self, p: Processed, held: Reservation) {
        let fields: usize = p.fields.iter().flatten().map(stoker_core::FieldValue::byte_len).sum();
        self.payload_bytes += p.pixels.len() + p.device.as_ref().map_or(0, |d| d.len()) + fields;
        self.samples.push(p);
        self.reservation.absorb(held);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.samples.is_empty() && self.skipped.is_empty() && self.read_samples == 0
    }
}

/// Why an item failed as a whole (as opposed to a sample being skipped).
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The shard's bytes stopped arriving; another attempt may succeed.
    #[error("shard {shard}: {source}")]
    Read {
        shard: String,
        #[source]
        source: SampleError,
    },

    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The GPU lanes stopped (shutting down, or a lane panicked).
    #[error(transparent)]
    Gpu(#[from] RunnerGone),
    /// The worker is shutting down and its grace period ran out.
    #[error("worker shut down before finishing {shard}; its rest goes to another worker")]
    ShutDown { shard: String },
}

/// Why a shard's samples stopped coming: a streamed shard's reader (its
/// error names the format) or a Parquet shard's.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Parquet(#[from] ParquetShardError),
}

impl SampleError {
    /// The transport failed (another attempt may succeed); otherwise the
    /// shard itself is bad from here on.
    pub fn is_io(&self) -> bool {
        match self {
            Self::Record(e) => e.is_io(),
            Self::Parquet(e) => e.is_io(),
        }
    }
}
