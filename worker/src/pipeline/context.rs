//! The worker's configuration ([`WorkerConfig`]), what every item needs
//! ([`WorkerContext`]: storage, the memory budget, the pools, the replay
//! cache, the metrics) and its running [`Counters`]. The named defaults
//! (`DEFAULT_*`) are what the CLI's flags show;
//! [`WorkerContext::inflight_samples`] is what the worker needs in flight
//! to keep its executors busy (reported in `Info`).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::replay::ReplayCache;
use crate::gpu::GpuRunner;
use crate::memory::MemoryBudget;
use crate::metrics::{Clients, WorkerMetrics};
use crate::pool::CpuPool;
use stoker_storage::{Storage, StorageConfig};

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
    /// The plans routing made and executors received (tests only).
    #[cfg(test)]
    pub(crate) plan_log: super::route::PlanLog,
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
            #[cfg(test)]
            plan_log: Default::default(),
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
