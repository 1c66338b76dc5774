//! One work item, end to end: stream the shard, group samples, decode and
//! augment them on the CPU pool, and hand chunks of results to the sender.
//!
//! Backpressure runs the whole way: at most `decode_ahead` samples are in
//! flight on the pool, and the next chunk is only built once the previous
//! one was accepted by the bounded channel to the gRPC stream. A failed send
//! means the client left; the item stops there.
//!
//! This module holds the worker's configuration, context and counters and
//! the types an item produces; each job has a file of its own: `item` (one
//! item's run, [`run_item`]), `route` (where a sample is decoded: the CPU
//! pool or the GPU lanes, and the CPU's share of the lanes' backlog),
//! `cpu` (one sample decoded and augmented on the CPU, [`process_sample`]),
//! `samples` (where an item's samples come from: a streamed shard or a
//! Parquet shard's row groups) and `replay` (the `--replay` cache,
//! [`ReplayCache`]).

mod cpu;
mod fields;
mod item;
mod measure;
mod replay;
mod route;
mod samples;
mod sink;

pub use samples::SampleError;
pub(crate) use samples::{ItemSamples, ShardRead};

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use stoker_core::{
    DatasetUri, FieldSpec, ItemMode, ItemSeed, PositionSet, RecordFields, ShardFormat, TransformSpec, ViewSpec,
};

pub use crate::outcome::{Processed, SkipKind, Skipped};

use crate::gpu::GpuRunner;
use crate::gpu::RunnerGone;
use crate::memory::{MemoryBudget, Reservation};
use crate::metrics::{Clients, WorkerMetrics};
use crate::pool::{CpuPool, PoolError};
use crate::storage::{Storage, StorageConfig, StorageError};

pub use cpu::process_sample;
pub use item::run_item;
pub use replay::ReplayCache;

/// Default target size of a streamed chunk (`--chunk-bytes`).
pub const DEFAULT_CHUNK_BYTES: u64 = 2 << 20;
/// Default limit on one tar member (`--max-member-bytes`).
pub const DEFAULT_MAX_MEMBER_BYTES: u64 = 64 << 20;
/// Default memory limit of a worker process (`--memory-limit`).
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;
pub use stoker_formats::image::DEFAULT_MAX_PIXELS as DEFAULT_MAX_IMAGE_PIXELS;

/// Limits and sizes of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// CPU pool threads.
    pub threads: usize,
    /// Target size of one streamed chunk, in bytes.
    pub chunk_bytes: usize,
    /// Tar members larger than this are skipped without being loaded.
    pub max_member_bytes: u64,
    /// Images with more pixels than this are skipped before decoding.
    pub max_image_pixels: u64,
    /// Samples of one item in flight on the CPU pool.
    pub decode_ahead: usize,
    /// S3 retries, timeouts and resumes.
    pub storage: StorageConfig,
    /// The worker process stays under this many bytes: sample data is
    /// budgeted to fit with [`crate::memory::RESERVE`] to spare.
    pub memory_limit: u64,
    /// Benchmarks only: keep each item's results and replay them for every
    /// later request of the same shard range, whatever the seed and epoch
    /// (see [`ReplayCache`]).
    pub replay: bool,
    /// On a GPU worker, let idle CPU threads take JPEGs while the GPU lanes
    /// have a backlog (see `route::share_backlog`). Off keeps the host's cores
    /// for other work, such as a trainer on the same host.
    pub cpu_jpegs: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            threads,
            chunk_bytes: DEFAULT_CHUNK_BYTES as usize,
            max_member_bytes: DEFAULT_MAX_MEMBER_BYTES,
            max_image_pixels: DEFAULT_MAX_IMAGE_PIXELS,
            decode_ahead: decode_ahead(threads),
            storage: StorageConfig::default(),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            replay: false,
            cpu_jpegs: true,
        }
    }
}

/// What a `--replay` worker asks clients to keep in flight.
const REPLAY_INFLIGHT_SAMPLES: u64 = 1024;

/// Samples one item keeps in flight on a pool of `threads` threads: two
/// per thread and two more, so threads never wait for the reader.
pub fn decode_ahead(threads: usize) -> usize {
    threads * 2 + 2
}

impl WorkerConfig {
    /// `threads` CPU pool threads, with the read-ahead that suits them.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self.decode_ahead = decode_ahead(threads);
        self
    }
}

/// Running totals of a worker, for logs and `Info`.
#[derive(Debug, Default)]
pub struct Counters {
    pub samples: AtomicU64,
    pub skipped: AtomicU64,
    pub bytes: AtomicU64,
    pub items: AtomicU64,
    /// Samples decoded and transformed on the CPU pool (the GPU runner
    /// counts its own).
    pub cpu_samples: AtomicU64,
    /// On a GPU worker: JPEGs the CPU pool took from the GPU lanes' backlog
    /// (see `route::share_backlog`).
    pub cpu_jpegs: AtomicU64,
}

/// What every item needs: storage, the pool, the GPU if any, the limits.
#[derive(Debug)]
pub struct WorkerContext {
    pub storage: Storage,
    pub budget: MemoryBudget,
    pub pool: CpuPool,
    /// Set on a GPU worker: JPEGs whose steps the GPU runs go there, the
    /// rest (and what the GPU hands back) to `pool`.
    pub gpu: Option<GpuRunner>,
    pub config: WorkerConfig,
    pub counters: Counters,
    pub replay: ReplayCache,
    /// Stage latencies and skips, for `--metrics-listen`.
    pub metrics: WorkerMetrics,
    /// Clients with items in progress, for `--metrics-listen`.
    pub clients: Arc<Clients>,
}

impl WorkerContext {
    /// A CPU worker's context.
    pub fn new(config: WorkerConfig) -> std::io::Result<Self> {
        let pool = CpuPool::new(config.threads)?;
        Ok(Self::assemble(config, pool, None))
    }

    /// A GPU worker's context: `gpu` takes the JPEGs it can finish. Its
    /// CPU pool runs in the background ([`CpuPool::background`]): what it
    /// decodes is extra, never at the GPU's expense.
    pub fn with_gpu(config: WorkerConfig, gpu: GpuRunner) -> std::io::Result<Self> {
        let pool = CpuPool::background(config.threads)?;
        Ok(Self::assemble(config, pool, Some(gpu)))
    }

    fn assemble(config: WorkerConfig, pool: CpuPool, gpu: Option<GpuRunner>) -> Self {
        Self {
            storage: Storage::with_config(config.storage.clone()),
            budget: MemoryBudget::for_limit(config.memory_limit),
            pool,
            gpu,
            config,
            counters: Counters::default(),
            replay: ReplayCache::default(),
            metrics: WorkerMetrics::default(),
            clients: Arc::default(),
        }
    }

    /// Samples this worker needs in flight, over all the items it serves,
    /// to keep every executor busy: each item's read-ahead on the CPU
    /// pool, and on a GPU worker three batches per lane (one running, one
    /// waiting, one on its way to the client). Clients size their credit
    /// from it (`Info`).
    pub fn inflight_samples(&self) -> u64 {
        if self.config.replay {
            // Results come from memory: only the transport needs feeding,
            // as much as a GPU worker's default lanes ask.
            return REPLAY_INFLIGHT_SAMPLES;
        }
        let cpu = self.config.decode_ahead.max(1) as u64;
        let gpu = self
            .gpu
            .as_ref()
            .map_or(0, |g| 3 * (g.config().lanes * g.config().max_batch) as u64);
        2 * cpu + gpu
    }
}

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
    pub fields: RecordFields,
    /// The sample's other fields to deliver, checked, with their kinds
    /// resolved for `format` (never `auto` for WebDataset).
    pub extra: Arc<[FieldSpec]>,
    /// More views of each sample's image, each with its own pipeline,
    /// delivered after `extra` as image fields.
    pub views: Arc<[ViewSpec]>,
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

impl Drop for SkipTally {
    fn drop(&mut self) {
        if let Some((key, reason)) = &self.first {
            let total: u64 = self.counts.values().sum();
            tracing::warn!(
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
    /// Pixel bytes in `samples`, kept as they are pushed.
    pub pixel_bytes: usize,
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
    fn push(&mut self, p: Processed, held: Reservation) {
        self.pixel_bytes += p.pixels.len();
        self.samples.push(p);
        self.reservation.absorb(held);
    }

    fn is_empty(&self) -> bool {
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
