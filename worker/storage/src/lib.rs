//! Where the worker's shards come from: S3 (through aws-sdk-s3) or a local
//! folder. A crate of its own: it imports no other Stoker crate but
//! `stoker-core` (dataset URIs, shard references) and `stoker-formats`
//! (record indexes), and the worker (`stoker-worker`) builds on it.
//!
//! Shards are read as streams, never whole: an S3 object body is consumed as
//! it arrives, a file through a buffered reader.
//!
//! S3 trouble is handled at two levels. Each request goes through the SDK's
//! standard retry mode (exponential backoff with jitter, a bounded number of
//! attempts, connect and per-attempt timeouts); 403 and 404 are not retried.
//! A shard body that fails or stalls mid-read is resumed by a
//! `ResumingReader` with a ranged GET from the first byte not yet
//! delivered, pinned to the first response's ETag, so no byte is repeated or
//! skipped and a replaced object is noticed. A body may be a byte range
//! ([`Storage::open_range`], for indexed sample ranges). Every byte read
//! is counted (`StorageStats::read_bytes`).
//!
//! This crate's root is the [`Storage`] facade; each job has a file of its own:
//! `types` (its configuration, counters and errors, and the shard body
//! type, which every backend shares), `s3` (the S3 backend, [`Storage`]'s
//! lazily made client with its own copy of the configuration), `ca` (the CAs
//! its TLS trusts: the system's, `AWS_CA_BUNDLE`), `local` (dataset
//! folders), `index` (the dataset index, [`INDEX_FILE`]), `resume` (the
//! resumable shard body), `object` (byte-range reads of one object, for
//! Parquet) and `gzip` (gzipped shard bodies, decompressed as they
//! stream).
//!
//! Storage lists files and reads bytes. Which files are shards and how many
//! samples each holds (record indexes, Parquet footers) is the worker's
//! catalog's work (`stoker_worker::catalog`).

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

mod ca;
mod gzip;
mod index;
mod local;
mod object;
mod resume;
mod s3;
mod types;

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use stoker_core::{DatasetUri, ShardFormat, ShardRef};
use tokio::io::AsyncRead;

pub use ca::{AWS_CA_BUNDLE, CaError, S3Trust, SSL_CERT_FILE};
pub use gzip::gunzip;
pub use index::{INDEX_FILE, Index, IndexEntry, PackReport, Problems};
pub use object::Object;
use s3::S3Store;
pub use types::{ShardReader, StorageConfig, StorageError, StorageStats};

/// Access to datasets on S3 and local disk. The S3 client is created on
/// first use from the standard AWS environment (`AWS_ENDPOINT_URL`,
/// `AWS_ACCESS_KEY_ID`, `AWS_REGION`, profiles...), with the retries and
/// timeouts of its [`StorageConfig`].
#[derive(Debug)]
pub struct Storage {
    s3: S3Store,
    stats: Arc<StorageStats>,
}

impl Default for Storage {
    fn default() -> Self {
        Self::with_config(StorageConfig::default())
    }
}

/// A shard body that counts the bytes it hands out into
/// [`StorageStats::read_bytes`].
struct CountBytes {
    inner: ShardReader,
    stats: Arc<StorageStats>,
}

impl AsyncRead for CountBytes {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.stats.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        polled
    }
}

impl Storage {
    /// Storage with the default [`StorageConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_config(config: StorageConfig) -> Self {
        let stats = Arc::<StorageStats>::default();
        Self {
            s3: S3Store::new(config, Arc::clone(&stats)),
            stats,
        }
    }

    /// Retries and resumes so far.
    pub fn stats(&self) -> &StorageStats {
        &self.stats
    }

    /// The files under `uri`, in no order, whatever they are: the
    /// catalog (`stoker_worker::catalog`) keeps the shards among them.
    pub async fn list_files(&self, uri: &DatasetUri) -> Result<Vec<ShardRef>, StorageError> {
        match uri {
            DatasetUri::S3 { bucket, prefix } => self.s3.list_s3(bucket, prefix).await,
            DatasetUri::Local(dir) => local::list(dir).await,
        }
    }

    /// Opens one shard for streaming.
    pub async fn open(&self, uri: &DatasetUri, name: &str) -> Result<ShardReader, StorageError> {
        self.open_range(uri, name, 0, None).await
    }

    /// Opens one shard's bytes from `start` up to `end` (exclusive;
    /// `None`: the shard's end) for streaming: a ranged GET on S3.
    pub async fn open_range(
        &self,
        uri: &DatasetUri,
        name: &str,
        start: u64,
        end: Option<u64>,
    ) -> Result<ShardReader, StorageError> {
        let object = uri.join(name);
        let inner = match uri {
            DatasetUri::S3 { bucket, prefix } => self.s3.open_s3(bucket, prefix, name, (start, end), object).await?,
            DatasetUri::Local(dir) => local::open(dir, name, (start, end), object).await?,
        };
        Ok(Box::pin(CountBytes {
            inner,
            stats: Arc::clone(&self.stats),
        }))
    }

    /// The file `name` under `uri`, whole, or `None` when it does not exist
    /// (for small files: indexes).
    pub(crate) async fn read_if_exists(&self, uri: &DatasetUri, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let object = uri.join(name);
        let bytes = match uri {
            DatasetUri::S3 { bucket, prefix } => {
                self.s3
                    .read_s3_if_exists(bucket, &format!("{prefix}{name}"), &object)
                    .await?
            }
            DatasetUri::Local(dir) => local::read_if_exists(dir, name, &object).await?,
        };
        if let Some(b) = &bytes {
            self.stats.read_bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        Ok(bytes)
    }

    /// Where each record of the shard `name` starts, in file order, from
    /// the record index beside it ([`ShardFormat::index_name`]); `None`
    /// when the format has none or the shard has no index file.
    pub async fn record_offsets(
        &self,
        uri: &DatasetUri,
        name: &str,
        format: ShardFormat,
    ) -> Result<Option<Vec<u64>>, StorageError> {
        let Some(index) = format.index_name(name) else {
            return Ok(None);
        };
        let Some(bytes) = self.read_if_exists(uri, &index).await? else {
            return Ok(None);
        };
        let parsed = match format {
            ShardFormat::RecordIo => stoker_formats::index::recordio_offsets(&bytes),
            _ => stoker_formats::index::tfrecord_offsets(&bytes),
        };
        parsed.map(Some).map_err(|e| StorageError::BadIndex {
            object: uri.join(&index),
            reason: e.to_string(),
        })
    }

    /// Writes a finished local file to `name` under `uri`.
    pub async fn put_file(&self, uri: &DatasetUri, name: &str, path: &Path) -> Result<(), StorageError> {
        let object = uri.join(name);
        match uri {
            DatasetUri::S3 { bucket, prefix } => self.s3.put_s3(bucket, prefix, name, path, object).await,
            DatasetUri::Local(dir) => local::put(dir, name, path, object).await,
        }
    }

    /// Checks that `uri` can be written to before hours of work go into it.
    pub async fn check_writable(&self, uri: &DatasetUri) -> Result<(), StorageError> {
        match uri {
            DatasetUri::S3 { bucket, .. } => self.s3.check_bucket(bucket).await,
            DatasetUri::Local(dir) => local::create_dir(dir).await,
        }
    }
}
