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

mod assemble;
mod budget;
mod buffers;
pub mod device;
mod dispatch;
mod error;
mod loader;
mod order;
mod state;
mod tls;
mod wire;

pub use assemble::{Batch, LastBatch, batches_per_rank};
pub use budget::ErrorBudget;
pub use buffers::Pixels;
pub use error::ClientError;
pub use loader::{DeviceTarget, EpochReport, EpochStream, EpochWatch, Loader, LoaderConfig, WorkerReport};
pub use state::{EpochState, Fingerprint};
pub use stoker_core::{Secret, ShardRef, TransformSpec};
pub use tls::TlsOptions;
