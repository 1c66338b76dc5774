//! The parsers that read untrusted bytes before anything else does.
//!
//! - [`shard`]: the format layer the worker reads samples through
//!   ([`shard::ShardSamples`]), over:
//!   - [`wds`]: WebDataset shards, the members of a tar ([`tar`]: a
//!     streaming reader) grouped into samples;
//!   - [`tfrecord`]: TFRecord shards (both checksums verified) of
//!     `tf.train.Example`s;
//!   - [`recordio`]: MXNet RecordIO shards (`IRHeader`, multi-part
//!     records).
//! - [`index`]: record index files (RecordIO's and DALI's TFRecord
//!   `.idx`), from which a sample range's bytes are found.
//! - [`sample`]: the sample every format yields, before decoding.
//! - [`start`]: where a read starts ([`start::SampleStart`]), and
//!   [`error`]: why it stopped ([`error::RecordError`], naming the format).
//! - `stream`: exact reads and skips with the offset counted, under both
//!   shard readers.
//! - [`image`]: image kinds, and the JPEG / PNG header checks (dimensions,
//!   pixel limit, truncation) that run before any decoder allocates.
//!
//! Every function here takes bytes from a shard as they come and returns an
//! error, never a panic; the fuzz targets in `fuzz/` hold them to that. The
//! crate has no I/O of its own beyond `tokio::io::AsyncRead` and no decoder,
//! so the fuzzers build in seconds. It depends on no other Stoker crate,
//! not even `stoker-core`. The worker uses it by name
//! (`stoker_formats::...`); `pipeline::samples` turns a work item's
//! `ShardFormat` and `RecordFields` into a `ShardKind`.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

pub mod error;
pub mod image;
pub mod index;
pub mod recordio;
pub mod sample;
pub mod shard;
pub mod start;
mod stream;
pub mod tar;
pub mod tfrecord;
pub mod wds;
