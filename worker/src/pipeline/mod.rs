//! One work item, end to end: stream the shard, group samples, decode and
//! augment them on the CPU pool, and hand chunks of results to the sender.
//!
//! Backpressure runs the whole way: at most `decode_ahead` samples are in
//! flight on the pool, and the next chunk is only built once the previous
//! one was accepted by the bounded channel to the gRPC stream. A failed send
//! means the client left; the item stops there.
//!
//! This module declares the parts and re-exports what the worker and its
//! tests use; each job has a file of its own: `context` (the worker's
//! configuration, context and counters, [`WorkerContext`]), `types` (a work
//! item and what it produces: [`Item`], [`Chunk`], [`ItemError`]), `item`
//! (one item's run, [`run_item`]), `route` (where a sample is decoded: the CPU
//! pool or the GPU lanes, and the CPU's share of the lanes' backlog),
//! `cpu` (one sample decoded and augmented on the CPU, [`process_sample`]),
//! `samples` (where an item's samples come from: a streamed shard or a
//! Parquet shard's row groups), `fields` (a sample's requested fields),
//! `measure` (`stoker doctor`'s item modes), `replay` (the `--replay`
//! cache, [`ReplayCache`]) and `sink` (where chunks go, cached ones
//! included). It also re-exports `outcome`'s [`Processed`] and [`Skipped`]
//! with its [`SkipKind`], the few values of the skip metric's label:
//! `internal` is a caught panic ([`Skipped::panicked`]), `missing_field` and
//! `bad_field` a requested field absent or not its kind.

mod context;
mod cpu;
mod fields;
mod item;
mod measure;
mod replay;
mod route;
mod samples;
mod sink;
#[cfg(test)]
mod test_shards;
mod types;

pub use context::{
    Counters, DEFAULT_CHUNK_BYTES, DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_MEMBER_BYTES, DEFAULT_MEMORY_LIMIT,
    WorkerConfig, WorkerContext, decode_ahead,
};
pub use cpu::process_sample;
pub use item::run_item;
pub use replay::ReplayCache;
pub use samples::{ItemSamples, ShardRead};
pub(crate) use types::SkipTally;
pub use types::{Chunk, Item, ItemError, SampleError};

pub use crate::outcome::{Processed, SkipKind, Skipped};
