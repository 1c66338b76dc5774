//! Stoker's thin client.
//!
//! A [`Loader`] plans each epoch from (seed, epoch, rank, world size), hands
//! shards to workers with a bounded number of items in flight per worker,
//! and assembles the samples that stream back into batches: uint8 NHWC
//! pixels, labels and keys, in host memory, with a prefetch queue.
//!
//! Every sample of the rank's share arrives exactly once per epoch: the
//! client records which samples of each item it holds, and when a worker's
//! stream fails or stalls the item goes to another worker with those samples
//! to skip. Samples from an attempt that was given up on are discarded.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

mod ahead;
mod assemble;
mod batch;
mod budget;
mod buffers;
mod config;
mod conn;
mod cuda;
pub mod device;
mod discovery;
mod dispatch;
pub mod doctor;
mod error;
mod event;
mod health;
mod ledger;
mod loader;
mod local;
pub mod metrics;
mod order;
mod pinned;
mod report;
mod ring;
mod sample;
mod state;
mod supervisor;
mod tls;
mod wire;
mod workers;

pub use ahead::EPOCH_AHEAD_ENV;
pub use assemble::{LastBatch, ViewPixels, batches_per_rank};
pub use batch::Batch;
pub use budget::ErrorBudget;
pub use buffers::Pixels;
pub use config::{
    DEFAULT_PREFETCH, DEFAULT_PROGRESS_TIMEOUT, DEFAULT_RESOLVE_INTERVAL, DEFAULT_SHARED_MEMORY,
    DEFAULT_WORKER_PATIENCE, DeviceTarget, LoaderConfig,
};
pub use error::ClientError;
pub use health::worker_health;
pub use loader::{EpochStream, EpochWatch, Loader};
pub use local::{InProcessStart, InProcessWorker, LOCAL, LOCAL_GPU_SMS_ENV, LocalWorker, LocalWorkers, local_gpu_sms};
pub use report::{EpochReport, WorkerReport};
pub use state::{EpochState, Fingerprint};
pub use stoker_core::{
    FieldKind, FieldSpec, FieldValue, Fields, FormatChoice, PositionSet, RecordFields, Secret, ShardFormat, ShardRef,
    TransformSpec, ViewSpec, validate_fields, validate_views,
};
pub use tls::TlsOptions;
