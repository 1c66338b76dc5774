//! The Stoker worker: a library. The `stoker` binary (crate `cli/`) runs it.
//!
//! - Storage (S3 and local folders) is a crate of its own, `stoker-storage`.
//! - [`catalog`]: a dataset's shards, their format and sample counts (the
//!   listing), above storage and [`parquet`].
//! - [`wds`]: WebDataset tar shards, read as a stream and grouped into samples
//!   (re-exported from `stoker-formats`, the fuzzed parsers).
//! - [`decode`], [`augment`]: CPU decode and transform execution
//!   (re-exported from `stoker-image`, which the fuzz target builds on its own);
//!   [`libjpeg`]: region-of-interest JPEG decoding with libjpeg-turbo.
//! - [`gpu`]: the GPU path, found at run time (CUDA driver, NVRTC, nvJPEG).
//! - [`pool`]: the CPU thread pool that keeps that work off the runtime.
//! - `rings`: the shared-memory rings of clients on this host, which
//!   pixels are written into instead of the response (`stoker-shm`).
//! - [`outcome`]: what processing a sample comes to ([`outcome::Processed`],
//!   [`outcome::Skipped`]), below both `pipeline` and `gpu`.
//! - [`pipeline`]: one work item from shard to chunks, within the worker's
//!   [`memory`] budget.
//! - [`service`]: the gRPC edge, `serve` and its graceful drain; [`tls`]:
//!   the worker's certificate and the CA for client certificates;
//!   [`allow`]: the datasets it may read (`--allow-dataset`).
//! - [`metrics`]: the worker's Prometheus metrics (`--metrics-listen`);
//!   [`scrape`]: what a scrape reads (the registry and a snapshot of the
//!   pipeline's counters).
//! - [`parquet`]: Parquet shards, read by row groups over ranged reads.
//! - `failpoint` (feature `failpoints`, tests only): fault injection.
//!
//! No two modules import each other: `catalog` → `parquet` → storage;
//! `outcome` sits below `pipeline` and `gpu`, so `pipeline` → `gpu` runs
//! one way; `pipeline` updates `metrics`, and `scrape`, above both, reads
//! them.
//!
//! Tools that write datasets sit above the worker in crates of their own:
//! `stoker-pack` (which reads through [`pipeline::ItemSamples`]) and
//! `stoker-synth` (test images, a dev-dependency here).

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]
// Items are `pub` only where other crates use them; the rest is
// `pub(crate)`, so the public surface shows what the CLI and tests need.
#![warn(unreachable_pub)]

pub mod allow;
pub mod catalog;
mod chained;
#[cfg(feature = "failpoints")]
pub mod failpoint;
pub mod gpu;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod outcome;
pub mod parquet;
pub mod pipeline;
pub mod pool;
mod rings;
pub mod scrape;
pub mod service;
pub mod tls;

pub use pipeline::{WorkerConfig, WorkerContext};
pub use service::{ServeOptions, serve};
/// Region-of-interest JPEG decoding with libjpeg-turbo (`stoker-libjpeg`).
pub use stoker_libjpeg as libjpeg;
