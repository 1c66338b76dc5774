//! Where shards come from: S3 (through aws-sdk-s3) or a local folder.
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
//! skipped and a replaced object is noticed.
//!
//! This module is the [`Storage`] facade, its configuration and its errors;
//! each job has a file of its own: `s3` (the S3 backend), `ca` (the CAs
//! its TLS trusts: the system's, `AWS_CA_BUNDLE`), `local` (dataset
//! folders), `index` (the dataset index, [`INDEX_FILE`]), `resume` (the
//! resumable shard body), `object` (byte-range reads of one object, for
//! Parquet) and `gzip` (gzipped shard bodies, decompressed as they
//! stream).
//!
//! Storage lists files and reads bytes; it imports no other worker module.
//! Which files are shards and how many samples each holds (record indexes,
//! Parquet footers) is the [`catalog`](crate::catalog)'s work.

mod ca;
mod gzip;
mod index;
mod local;
mod object;
mod resume;
mod s3;

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use stoker_core::{DatasetUri, ShardFormat, ShardRef};
use tokio::io::AsyncRead;
use tokio::sync::OnceCell;

pub use ca::{AWS_CA_BUNDLE, CaError, S3Trust, SSL_CERT_FILE};
pub use gzip::gunzip;
pub use index::{INDEX_FILE, Index, IndexEntry};
pub use object::Object;

/// A shard body, read as it arrives.
pub type ShardReader = Pin<Box<dyn AsyncRead + Send>>;

/// Why a storage operation failed. Every message names the object.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{0} does not exist")]
    NotFound(String),
    #[error("access to {object} denied: {reason}")]
    Denied { object: String, reason: String },
    #[error("no shards found under {uri} ({what})")]
    Empty { uri: String, what: String },
    /// `--format auto` over a prefix holding two formats' shards.
    #[error(
        "{uri} mixes shard formats: {first} is {first_format}, {second} is {second_format}; keep one format under a prefix or pass --format"
    )]
    MixedFormats {
        uri: String,
        first: String,
        first_format: ShardFormat,
        second: String,
        second_format: ShardFormat,
    },
    #[error("invalid index {object}: {reason}")]
    BadIndex { object: String, reason: String },
    /// A record index that does not match its shard.
    #[error("record index {object} does not fit its shard: {reason}")]
    BadRecordIndex { object: String, reason: String },
    /// Network trouble, throttling, a server error: worth retrying.
    #[error("{object}: {reason}")]
    Transient { object: String, reason: String },
    /// The S3 endpoint's TLS certificate was refused (untrusted CA, wrong
    /// name, expired): not retried.
    #[error("{object}: the tls certificate of {endpoint} was refused: {reason}")]
    Certificate {
        object: String,
        endpoint: String,
        reason: String,
    },
    /// A CA file that cannot be used (`AWS_CA_BUNDLE`, `SSL_CERT_FILE`).
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error("{object}: {source}")]
    Io {
        object: String,
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    /// True for errors that another attempt may not repeat.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient { .. } | Self::Io { .. })
    }
}

/// How hard storage tries before giving up on S3.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// Tries per S3 request, the first one included (SDK standard retry
    /// mode). Refusals (403) and missing objects (404) are never retried.
    pub max_attempts: u32,
    /// Backoff before the first retry or resume; it doubles each time up to
    /// `max_backoff`, and the actual sleep is drawn uniformly below it
    /// (full jitter).
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Limit on establishing a connection.
    pub connect_timeout: Duration,
    /// Limit on one attempt of a request, up to the response headers for a
    /// shard body; uploads are bounded by `read_timeout` instead.
    pub attempt_timeout: Duration,
    /// A body that delivers no byte for this long, while it is being read,
    /// is treated as cut and resumed.
    pub read_timeout: Duration,
    /// Ranged re-reads one shard read may make before it fails.
    pub max_resumes: u32,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(30),
            max_resumes: 10,
        }
    }
}

/// Access to datasets on S3 and local disk. The S3 client is created on
/// first use from the standard AWS environment (`AWS_ENDPOINT_URL`,
/// `AWS_ACCESS_KEY_ID`, `AWS_REGION`, profiles...), with the retries and
/// timeouts of its [`StorageConfig`].
#[derive(Debug, Default)]
pub struct Storage {
    s3: OnceCell<s3::S3>,
    config: StorageConfig,
    stats: Arc<StorageStats>,
}

/// What storage did beyond the first try, since the worker started.
#[derive(Debug, Default)]
pub struct StorageStats {
    /// S3 request attempts after the first of their request (the SDK's
    /// retries).
    pub retries: AtomicU64,
    /// Shard bodies resumed with a ranged read after a cut or a stall.
    pub resumes: AtomicU64,
    /// Bytes read from storage: shard bodies, indexes.
    pub read_bytes: AtomicU64,
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
        Self {
            s3: OnceCell::new(),
            config,
            stats: Arc::default(),
        }
    }

    /// Retries and resumes so far.
    pub fn stats(&self) -> &StorageStats {
        &self.stats
    }

    /// The files under `uri`, in no order, whatever they are: the
    /// [`catalog`](crate::catalog) keeps the shards among them.
    pub(crate) async fn list_files(&self, uri: &DatasetUri) -> Result<Vec<ShardRef>, StorageError> {
        match uri {
            DatasetUri::S3 { bucket, prefix } => self.list_s3(bucket, prefix).await,
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
            DatasetUri::S3 { bucket, prefix } => self.open_s3(bucket, prefix, name, (start, end), object).await?,
            DatasetUri::Local(dir) => local::open(dir, name, (start, end), object).await?,
        };
        Ok(Box::pin(CountBytes {
            inner,
            stats: Arc::clone(&self.stats),
        }))
    }

    /// The file `name` under `uri`, whole, or `None` when it does not exist
    /// (for small files: indexes).
    pub(super) async fn read_if_exists(&self, uri: &DatasetUri, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let object = uri.join(name);
        let bytes = match uri {
            DatasetUri::S3 { bucket, prefix } => {
                self.read_s3_if_exists(bucket, &format!("{prefix}{name}"), &object)
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
            DatasetUri::S3 { bucket, prefix } => self.put_s3(bucket, prefix, name, path, object).await,
            DatasetUri::Local(dir) => local::put(dir, name, path, object).await,
        }
    }

    /// Checks that `uri` can be written to before hours of work go into it.
    pub async fn check_writable(&self, uri: &DatasetUri) -> Result<(), StorageError> {
        match uri {
            DatasetUri::S3 { bucket, .. } => self.check_bucket(bucket).await,
            DatasetUri::Local(dir) => local::create_dir(dir).await,
        }
    }
}
