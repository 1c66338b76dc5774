//! The Stoker worker, and the `stoker` command line.
//!
//! - [`storage`]: S3 and local folders.
//! - [`wds`]: WebDataset tar shards, read as a stream and grouped into samples.
//! - [`decode`], [`augment`]: CPU decode and transform execution;
//!   [`libjpeg`]: region-of-interest JPEG decoding with libjpeg-turbo.
//! - [`pool`]: the CPU thread pool that keeps that work off the runtime.
//! - [`pipeline`]: one work item from shard to chunks.
//! - [`service`]: the gRPC edge and `serve`.
//! - [`pack`]: ImageFolder trees to WebDataset shards.
//! - [`synth`]: procedural images for the demo and benchmarks.
//! - [`cli`]: the subcommands of the `stoker` binary.

pub mod augment;
pub mod cli;
pub mod decode;
pub mod libjpeg;
pub mod pack;
pub mod pipeline;
pub mod pool;
pub mod service;
pub mod storage;
pub mod synth;
pub mod wds;

pub use pipeline::{WorkerConfig, WorkerContext};
pub use service::serve;
