//! What storage's parts share, below all of them: the shard body type
//! ([`ShardReader`]), the errors ([`StorageError`]), the retry and
//! timeout settings ([`StorageConfig`]) and the counters
//! ([`StorageStats`]: the SDK's retries, through an interceptor that sees
//! each attempt, `ResumingReader`'s resumes, and the bytes read). A
//! `StorageError` names the object it is about.

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use stoker_core::ShardFormat;
use tokio::io::AsyncRead;

use super::ca::CaError;

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
