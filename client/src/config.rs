//! The loader's configuration: [`LoaderConfig`], its defaults and its
//! checks, and where batches are uploaded ([`DeviceTarget`]).

use std::time::Duration;

use stoker_core::{FieldSpec, FormatChoice, RecordFields, Secret, TransformSpec, ViewSpec};

use crate::assemble::LastBatch;
use crate::budget::ErrorBudget;
use crate::device::UploadSpec;
use crate::discovery::WorkerSource;
use crate::error::ClientError;
use crate::local::{LOCAL, LocalWorkers};
use crate::tls::TlsOptions;

/// Items a worker whose needs are unknown (unreachable at the start, or
/// too old to say) gets at once.
/// Default batches assembled ahead of the consumer.
pub const DEFAULT_PREFETCH: usize = 4;
/// Default time without progress before an item is reassigned.
pub const DEFAULT_PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time every worker may be unavailable before an epoch fails.
pub const DEFAULT_WORKER_PATIENCE: Duration = Duration::from_secs(30);
/// Default interval between two resolutions of `dns://` worker entries
/// (`--resolve-interval`).
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(10);

/// Bytes of the shared-memory ring that workers on the client's host
/// write samples into ([`LoaderConfig::shared_memory`]).
pub const DEFAULT_SHARED_MEMORY: usize = 256 << 20;
pub(crate) const DEFAULT_INFLIGHT_ITEMS: usize = 2;

/// The most lanes, and so items in flight, one worker gets.
pub(crate) const MAX_LANES_PER_WORKER: usize = 64;

/// Everything a loader needs to know.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Worker addresses: `HOST:PORT` (or `http://HOST:PORT`,
    /// `https://HOST:PORT`), `unix:PATH`, `dns://NAME:PORT`, or `"local"`
    /// for workers this loader starts on this host ([`Self::local`]).
    pub workers: Vec<String>,
    /// `s3://bucket/prefix/`, `file:///abs/dir/` or a path, as the workers
    /// see it.
    pub dataset: String,
    /// The shards' format; `Auto` goes by the files' extensions.
    pub format: FormatChoice,
    /// Which fields of a record format hold the image and the label.
    pub record: RecordFields,
    /// The sample's other fields to deliver with each image (captions,
    /// metadata, multi-labels, arrays): [`crate::Batch::fields`].
    pub fields: Vec<FieldSpec>,
    /// More augmented views of each sample's image, each with its own
    /// pipeline, from the same decode: [`crate::Batch::views`].
    pub views: Vec<ViewSpec>,
    pub batch_size: usize,
    pub transform: TransformSpec,
    pub seed: u64,
    pub rank: u32,
    pub world_size: u32,
    /// Batches assembled ahead of the consumer.
    pub prefetch: usize,
    /// Work items streamed from each worker at once; `None` (the default)
    /// sizes each worker's share in samples, from what the worker says it
    /// needs in flight (`Info.inflight_samples`) and the items' sample
    /// counts, so a GPU worker's batches fill whatever the shard size.
    pub inflight_per_worker: Option<usize>,
    /// What happens to an epoch's last, incomplete batch. When the
    /// dataset has an index, every rank yields the same number of batches
    /// (see [`batches_per_rank`](crate::batches_per_rank)).
    pub last_batch: LastBatch,
    /// Batch `k` of an epoch is a function of (seed, epoch, rank, `k`)
    /// alone: samples go into batches in plan order (each item's samples by
    /// position in the shard), not in arrival order. Costs memory: up to
    /// twice the items in flight (`workers × inflight_per_worker`) are held,
    /// decoded, until those before them finish.
    pub deterministic: bool,
    /// Landscape images fill batches of their own, the others theirs, as
    /// Detectron2's `ASPECT_RATIO_GROUPING` (`Assembler::grouped_by_aspect`):
    /// for a transform that keeps each image's size, so a batch's block
    /// wastes less on padding.
    pub aspect_ratio_grouping: bool,
    /// Target chunk size asked of workers (0: the worker's default).
    pub chunk_bytes: u32,
    /// An attempt that sends nothing for this long is reassigned.
    pub progress_timeout: Duration,
    /// How long every worker may be failing before the epoch fails.
    pub worker_patience: Duration,
    pub connect_timeout: Duration,
    /// Attempts per work item before the epoch fails.
    pub max_attempts: u32,
    /// Skipped samples tolerated per epoch; `None` for no limit.
    pub max_errors: Option<ErrorBudget>,
    /// Bearer token for workers that require one.
    pub token: Option<Secret>,
    /// TLS towards the workers; plain HTTP/2 when `None`.
    pub tls: Option<TlsOptions>,
    /// Upload each batch to this CUDA device and convert it there; `None`
    /// keeps batches in host memory. Without a usable GPU the loader logs
    /// why and yields host batches.
    pub device: Option<DeviceTarget>,
    /// Serve the loader's Prometheus metrics at `/metrics` on this address
    /// (see `stoker_metrics::listen_addr`); `None` serves none.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How often `dns://` worker entries are resolved again.
    pub resolve_interval: Duration,
    /// Ask this DNS server for `dns://` entries instead of the system's
    /// resolver configuration (`/etc/resolv.conf`).
    pub dns_server: Option<std::net::SocketAddr>,
    /// Bytes of the shared-memory ring workers on this host write samples
    /// into instead of sending them (0: every worker over the network).
    /// Its pages are allocated as they are first written.
    pub shared_memory: usize,
    /// How to start the local workers that a `"local"` entry of
    /// [`workers`](Self::workers) stands for.
    pub local: Option<LocalWorkers>,
}

/// Where and how batches are uploaded.
#[derive(Debug, Clone, Copy)]
pub struct DeviceTarget {
    /// The CUDA device (its primary context, the one PyTorch uses).
    pub ordinal: usize,
    /// Layout, dtype, mean and std of the batches on the device.
    pub spec: UploadSpec,
}

impl LoaderConfig {
    /// A configuration with the usual defaults.
    pub fn new(workers: Vec<String>, dataset: impl Into<String>, batch_size: usize, transform: TransformSpec) -> Self {
        Self {
            workers,
            dataset: dataset.into(),
            format: FormatChoice::Auto,
            record: RecordFields::default(),
            fields: Vec::new(),
            views: Vec::new(),
            batch_size,
            transform,
            seed: 0,
            rank: 0,
            world_size: 1,
            prefetch: DEFAULT_PREFETCH,
            inflight_per_worker: None,
            last_batch: LastBatch::Partial,
            deterministic: false,
            aspect_ratio_grouping: false,
            chunk_bytes: 0,
            progress_timeout: DEFAULT_PROGRESS_TIMEOUT,
            worker_patience: DEFAULT_WORKER_PATIENCE,
            connect_timeout: Duration::from_secs(5),
            max_attempts: 5,
            max_errors: None,
            token: None,
            tls: None,
            device: None,
            metrics_listen: None,
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            dns_server: None,
            shared_memory: DEFAULT_SHARED_MEMORY,
            local: None,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: String| Err(ClientError::Config(m));
        if self.workers.is_empty() {
            return bad("no workers given".into());
        }
        for w in self.workers.iter().filter(|w| *w != LOCAL) {
            WorkerSource::parse(w)?;
        }
        if self.resolve_interval < Duration::from_millis(100) {
            return bad(format!(
                "the resolve interval must be at least 0.1 s, got {:?}",
                self.resolve_interval
            ));
        }
        if self.batch_size == 0 {
            return bad("batch size must be at least 1".into());
        }
        if self.world_size == 0 || self.rank >= self.world_size {
            return bad(format!(
                "rank {} must be below world size {}",
                self.rank, self.world_size
            ));
        }
        if let Some(n) = self.inflight_per_worker
            && !(1..=MAX_LANES_PER_WORKER).contains(&n)
        {
            return bad(format!(
                "items in flight per worker must be between 1 and {MAX_LANES_PER_WORKER}, got {n}"
            ));
        }
        stoker_core::validate_fields(&self.fields, None).map_err(|e| ClientError::Config(e.to_string()))?;
        stoker_core::validate_views(&self.views, &self.fields).map_err(|e| ClientError::Config(e.to_string()))?;
        stoker_core::validate_targets(&self.fields, &self.transform).map_err(|e| ClientError::Config(e.to_string()))?;
        if self.max_attempts == 0 {
            return bad("max attempts must be at least 1".into());
        }
        if self.aspect_ratio_grouping
            && let Some(side) = self.transform.size.side()
        {
            return bad(format!(
                "aspect ratio grouping groups images of their own sizes, and the transform ends at one square \
                 size ({side}x{side})"
            ));
        }
        self.transform
            .validate()
            .map_err(|e| ClientError::Config(e.to_string()))
    }
}
