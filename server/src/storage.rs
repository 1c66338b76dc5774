//! Where shards come from: S3 (through aws-sdk-s3) or a local folder.
//!
//! Shards are read as streams, never whole: an S3 object body is consumed as
//! it arrives, a file through a buffered reader.
//!
//! S3 trouble is handled at two levels. Each request goes through the SDK's
//! standard retry mode (exponential backoff with jitter, a bounded number of
//! attempts, connect and per-attempt timeouts); 403 and 404 are not retried.
//! A shard body that fails or stalls mid-read is resumed by
//! [`ResumingReader`] with a ranged GET from the first byte not yet
//! delivered, pinned to the first response's ETag, so no byte is repeated or
//! skipped and a replaced object is noticed.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use aws_sdk_s3::config::StalledStreamProtectionConfig;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use serde::{Deserialize, Serialize};
use stoker_core::{DatasetUri, ShardRef};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::OnceCell;
use tracing::warn;

/// Name of the optional index file at a dataset's root.
pub const INDEX_FILE: &str = "stoker-index.json";

/// A shard body, read as it arrives.
pub type ShardReader = Pin<Box<dyn AsyncRead + Send>>;

/// Why a storage operation failed. Every message names the object.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{0} does not exist")]
    NotFound(String),
    #[error("access to {object} denied: {reason}")]
    Denied { object: String, reason: String },
    #[error("no shards (*.tar) found under {0}")]
    Empty(String),
    #[error("invalid index {object}: {reason}")]
    BadIndex { object: String, reason: String },
    /// Network trouble, throttling, a server error: worth retrying.
    #[error("{object}: {reason}")]
    Transient { object: String, reason: String },
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

/// The dataset index: shard names with their sample counts.
#[derive(Debug, Serialize, Deserialize)]
pub struct Index {
    pub version: u32,
    pub shards: Vec<IndexEntry>,
    /// Class names by label, when the packer knew them.
    #[serde(default)]
    pub classes: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    pub samples: u64,
    pub size_bytes: u64,
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
    s3: OnceCell<aws_sdk_s3::Client>,
    config: StorageConfig,
}

fn s3_reason<E: ProvideErrorMetadata + std::error::Error + 'static>(err: &SdkError<E>) -> String {
    // The service's own code and message when it answered; the whole chain
    // otherwise (DNS, connection refused, timeouts).
    match err {
        SdkError::ServiceError(e) => {
            let e = e.err();
            match (e.code(), e.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_owned(),
                _ => DisplayErrorContext(err).to_string(),
            }
        }
        _ => DisplayErrorContext(err).to_string(),
    }
}

/// Classifies an S3 error for `object`.
fn s3_error<E: ProvideErrorMetadata + std::error::Error + 'static>(object: &str, err: SdkError<E>) -> StorageError {
    let reason = s3_reason(&err);
    let status = err.raw_response().map(|r| r.status().as_u16());
    let code = err.code().unwrap_or_default();
    match (status, code) {
        (_, "NoSuchBucket") => StorageError::NotFound(format!("bucket of {object}")),
        (_, "NoSuchKey") | (Some(404), _) => StorageError::NotFound(object.to_owned()),
        (_, "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AccessDenied" | "ExpiredToken")
        | (Some(401 | 403), _) => StorageError::Denied {
            object: object.to_owned(),
            reason,
        },
        _ => StorageError::Transient {
            object: object.to_owned(),
            reason,
        },
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
        }
    }

    async fn s3(&self) -> &aws_sdk_s3::Client {
        self.s3
            .get_or_init(|| async {
                let shared = aws_config::load_from_env().await;
                let c = &self.config;
                let mut conf = aws_sdk_s3::config::Builder::from(&shared)
                    .retry_config(
                        RetryConfig::standard()
                            .with_max_attempts(c.max_attempts.max(1))
                            .with_initial_backoff(c.initial_backoff)
                            .with_max_backoff(c.max_backoff),
                    )
                    .timeout_config(
                        TimeoutConfig::builder()
                            .connect_timeout(c.connect_timeout)
                            .operation_attempt_timeout(c.attempt_timeout)
                            .build(),
                    )
                    // Uploads (and the index body) fail when no byte moves
                    // for `read_timeout`; shard bodies also resume then.
                    .stalled_stream_protection(
                        StalledStreamProtectionConfig::enabled()
                            .grace_period(c.read_timeout)
                            .build(),
                    );
                // Custom endpoints (MinIO, Ceph, s3s, moto...) rarely have
                // wildcard DNS for virtual-hosted buckets.
                if shared.endpoint_url().is_some() {
                    conf = conf.force_path_style(true);
                }
                if shared.region().is_none() {
                    conf = conf.region(aws_sdk_s3::config::Region::new("us-east-1"));
                }
                aws_sdk_s3::Client::from_conf(conf.build())
            })
            .await
    }

    /// The dataset's shards, sorted by name: from its index when it has
    /// one, from a listing of `*.tar` otherwise.
    pub async fn list_shards(&self, uri: &DatasetUri) -> Result<(Vec<ShardRef>, bool), StorageError> {
        if let Some(index) = self.read_index(uri).await? {
            let mut shards: Vec<ShardRef> = index
                .shards
                .into_iter()
                .map(|e| ShardRef {
                    name: e.name,
                    size_bytes: e.size_bytes,
                    samples: Some(e.samples),
                })
                .collect();
            shards.sort_by(|a, b| a.name.cmp(&b.name));
            if shards.is_empty() {
                return Err(StorageError::Empty(uri.to_string()));
            }
            return Ok((shards, true));
        }
        let mut shards = match uri {
            DatasetUri::S3 { bucket, prefix } => self.list_s3(bucket, prefix).await?,
            DatasetUri::Local(dir) => list_local(dir).await?,
        };
        shards.sort_by(|a, b| a.name.cmp(&b.name));
        if shards.is_empty() {
            return Err(StorageError::Empty(uri.to_string()));
        }
        Ok((shards, false))
    }

    async fn list_s3(&self, bucket: &str, prefix: &str) -> Result<Vec<ShardRef>, StorageError> {
        let object = format!("s3://{bucket}/{prefix}");
        let mut pages = self
            .s3()
            .await
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut shards = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| s3_error(&object, e))?;
            for obj in page.contents() {
                let Some(key) = obj.key() else { continue };
                let Some(name) = key.strip_prefix(prefix) else { continue };
                if name.ends_with(".tar") {
                    shards.push(ShardRef {
                        name: name.to_owned(),
                        size_bytes: obj.size().unwrap_or(0).max(0) as u64,
                        samples: None,
                    });
                }
            }
        }
        Ok(shards)
    }

    async fn read_index(&self, uri: &DatasetUri) -> Result<Option<Index>, StorageError> {
        let object = uri.join(INDEX_FILE);
        let bytes = match uri {
            DatasetUri::S3 { bucket, prefix } => {
                let got = self
                    .s3()
                    .await
                    .get_object()
                    .bucket(bucket)
                    .key(format!("{prefix}{INDEX_FILE}"))
                    .send()
                    .await;
                match got {
                    Ok(out) => out
                        .body
                        .collect()
                        .await
                        .map_err(|e| StorageError::Transient {
                            object: object.clone(),
                            reason: e.to_string(),
                        })?
                        .into_bytes()
                        .to_vec(),
                    Err(e) => match s3_error(&object, e) {
                        // A missing index is normal; a missing bucket is not.
                        StorageError::NotFound(what) if what == object => return Ok(None),
                        other => return Err(other),
                    },
                }
            }
            DatasetUri::Local(dir) => {
                if !dir.is_dir() {
                    return Err(StorageError::NotFound(format!("folder {}", dir.display())));
                }
                match tokio::fs::read(dir.join(INDEX_FILE)).await {
                    Ok(b) => b,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(source) => return Err(StorageError::Io { object, source }),
                }
            }
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StorageError::BadIndex {
                object,
                reason: e.to_string(),
            })
    }

    /// Opens one shard for streaming.
    pub async fn open(&self, uri: &DatasetUri, name: &str) -> Result<ShardReader, StorageError> {
        let object = uri.join(name);
        match uri {
            DatasetUri::S3 { bucket, prefix } => {
                let client = self.s3().await.clone();
                let key = format!("{prefix}{name}");
                let out = client
                    .get_object()
                    .bucket(bucket)
                    .key(&key)
                    .send()
                    .await
                    .map_err(|e| s3_error(&object, e))?;
                let size = out.content_length().and_then(|n| u64::try_from(n).ok());
                let source = S3Object {
                    client,
                    bucket: bucket.clone(),
                    key,
                    etag: out.e_tag().map(str::to_owned),
                    size,
                };
                let body: ShardReader = Box::pin(out.body.into_async_read());
                Ok(Box::pin(ResumingReader::new(
                    object,
                    body,
                    size,
                    Arc::new(source),
                    ResumePolicy::from(&self.config),
                )))
            }
            DatasetUri::Local(dir) => {
                let path = safe_join(dir, name).ok_or_else(|| StorageError::NotFound(object.clone()))?;
                let file = tokio::fs::File::open(&path).await.map_err(|source| {
                    if source.kind() == std::io::ErrorKind::NotFound {
                        StorageError::NotFound(object.clone())
                    } else {
                        StorageError::Io { object, source }
                    }
                })?;
                Ok(Box::pin(tokio::io::BufReader::with_capacity(1 << 20, file)))
            }
        }
    }

    /// Writes a finished local file to `name` under `uri`.
    pub async fn put_file(&self, uri: &DatasetUri, name: &str, path: &Path) -> Result<(), StorageError> {
        let object = uri.join(name);
        match uri {
            DatasetUri::S3 { bucket, prefix } => {
                let body = ByteStream::from_path(path).await.map_err(|e| StorageError::Io {
                    object: object.clone(),
                    source: std::io::Error::other(e),
                })?;
                // A large upload may take longer than one attempt of a small
                // request; stalled-stream protection bounds it instead.
                let timeouts = TimeoutConfig::builder()
                    .connect_timeout(self.config.connect_timeout)
                    .disable_operation_attempt_timeout()
                    .build();
                self.s3()
                    .await
                    .put_object()
                    .bucket(bucket)
                    .key(format!("{prefix}{name}"))
                    .body(body)
                    .customize()
                    .config_override(aws_sdk_s3::config::Builder::default().timeout_config(timeouts))
                    .send()
                    .await
                    .map_err(|e| s3_error(&object, e))?;
                Ok(())
            }
            DatasetUri::Local(dir) => {
                let dest = dir.join(name);
                tokio::fs::create_dir_all(dir)
                    .await
                    .map_err(|source| StorageError::Io {
                        object: dir.display().to_string(),
                        source,
                    })?;
                if tokio::fs::rename(path, &dest).await.is_err() {
                    tokio::fs::copy(path, &dest)
                        .await
                        .map_err(|source| StorageError::Io { object, source })?;
                }
                Ok(())
            }
        }
    }

    /// Checks that `uri` can be written to before hours of work go into it.
    pub async fn check_writable(&self, uri: &DatasetUri) -> Result<(), StorageError> {
        match uri {
            DatasetUri::S3 { bucket, .. } => {
                let object = format!("s3://{bucket}");
                self.s3()
                    .await
                    .head_bucket()
                    .bucket(bucket)
                    .send()
                    .await
                    .map_err(|e| match s3_error(&object, e) {
                        StorageError::NotFound(_) => StorageError::NotFound(format!("bucket {object}")),
                        other => other,
                    })?;
                Ok(())
            }
            DatasetUri::Local(dir) => tokio::fs::create_dir_all(dir).await.map_err(|source| StorageError::Io {
                object: dir.display().to_string(),
                source,
            }),
        }
    }
}

/// Retry timing of a resumable read, taken from a [`StorageConfig`].
#[derive(Clone, Copy, Debug)]
struct ResumePolicy {
    read_timeout: Duration,
    max_resumes: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl From<&StorageConfig> for ResumePolicy {
    fn from(c: &StorageConfig) -> Self {
        Self {
            read_timeout: c.read_timeout,
            max_resumes: c.max_resumes,
            initial_backoff: c.initial_backoff,
            max_backoff: c.max_backoff,
        }
    }
}

impl ResumePolicy {
    /// Full jitter: uniform in `[0, min(max_backoff, initial * 2^(attempt-1))]`.
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .initial_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(20))
            .min(self.max_backoff);
        ceiling.mul_f64(jitter())
    }
}

/// A number in `[0, 1)` that differs between calls, threads and processes:
/// std's randomly keyed hasher over the clock.
fn jitter() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(now.as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Why a ranged re-read could not start. The message does not name the
/// object; the reader adds it.
#[derive(Debug)]
struct ReopenError {
    message: String,
    /// Another try would fail the same way (404, 403, changed object...).
    permanent: bool,
}

type ReopenFuture = Pin<Box<dyn Future<Output = Result<ShardReader, ReopenError>> + Send>>;

/// An object that can be read again from a byte offset on: the S3 object
/// behind a shard, or a test double.
trait Reopen: Send + Sync + 'static {
    /// The object's bytes from `offset` to its end.
    fn reopen(&self, offset: u64) -> ReopenFuture;
}

/// The S3 object behind a shard being read, as its first response described
/// it.
#[derive(Debug, Clone)]
struct S3Object {
    client: aws_sdk_s3::Client,
    bucket: String,
    key: String,
    etag: Option<String>,
    size: Option<u64>,
}

impl S3Object {
    async fn get_from(self, offset: u64) -> Result<ShardReader, ReopenError> {
        let object = format!("s3://{}/{}", self.bucket, self.key);
        let mut req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .range(format!("bytes={offset}-"));
        if let Some(etag) = &self.etag {
            req = req.if_match(etag);
        }
        let out = req.send().await.map_err(|e| {
            let status = e.raw_response().map(|r| r.status().as_u16());
            if status == Some(412) || e.code() == Some("PreconditionFailed") {
                return ReopenError {
                    message: format!(
                        "changed while being read (no longer etag {})",
                        self.etag.as_deref().unwrap_or("?")
                    ),
                    permanent: true,
                };
            }
            let err = s3_error(&object, e);
            ReopenError {
                permanent: !err.is_transient(),
                message: err.to_string(),
            }
        })?;
        // Servers that ignore If-Match still tell the object apart by ETag.
        if let (Some(first), Some(now)) = (&self.etag, out.e_tag())
            && first != now
        {
            return Err(ReopenError {
                message: format!("changed while being read (etag {first}, now {now})"),
                permanent: true,
            });
        }
        check_content_range(out.content_range(), offset, self.size).map_err(|message| ReopenError {
            message,
            permanent: true,
        })?;
        Ok(Box::pin(out.body.into_async_read()))
    }
}

impl Reopen for S3Object {
    fn reopen(&self, offset: u64) -> ReopenFuture {
        Box::pin(self.clone().get_from(offset))
    }
}

/// Checks that a ranged response (`Content-Range: bytes FIRST-LAST/TOTAL`)
/// starts at `offset` and belongs to an object of `size` bytes. A missing
/// header is only right for a read from the start.
fn check_content_range(header: Option<&str>, offset: u64, size: Option<u64>) -> Result<(), String> {
    let Some(header) = header else {
        return if offset == 0 {
            Ok(())
        } else {
            Err(format!(
                "asked for bytes from {offset}, got a response without content-range"
            ))
        };
    };
    let parsed = header
        .trim()
        .strip_prefix("bytes ")
        .and_then(|r| r.split_once('/'))
        .and_then(|(range, total)| {
            let (first, _last) = range.split_once('-')?;
            let first = first.trim().parse::<u64>().ok()?;
            let total = match total.trim() {
                "*" => None,
                t => Some(t.parse::<u64>().ok()?),
            };
            Some((first, total))
        });
    let Some((first, total)) = parsed else {
        return Err(format!("unreadable content-range {header:?}"));
    };
    if first != offset {
        return Err(format!("asked for bytes from {offset}, got content-range {header:?}"));
    }
    if let (Some(total), Some(size)) = (total, size)
        && total != size
    {
        return Err(format!("object was {size} bytes, now content-range {header:?}"));
    }
    Ok(())
}

/// Where a [`ResumingReader`] is.
enum ReadState {
    /// Reading a body; `stall` runs while the body has nothing to give.
    Reading {
        body: ShardReader,
        stall: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    /// Backing off before the next ranged read.
    Waiting(Pin<Box<tokio::time::Sleep>>),
    /// A ranged read from the current offset is on its way.
    Opening(ReopenFuture),
    Failed(String),
    Done,
}

/// A shard body that survives cut and stalled connections: when the body
/// fails, ends before the object's size, or yields nothing for
/// `read_timeout` while it is read, the reader backs off (exponential, full
/// jitter) and reads on from the first byte it has not delivered, at most
/// `max_resumes` times. Past that, or on a permanent error, reads fail with
/// an error naming the object and the offset.
///
/// The offset only counts bytes handed to the caller, so a resumed body
/// continues exactly where the caller is.
struct ResumingReader {
    object: String,
    source: Arc<dyn Reopen>,
    policy: ResumePolicy,
    /// The object's size, when the first response said.
    size: Option<u64>,
    /// Bytes delivered so far.
    offset: u64,
    resumes: u32,
    state: ReadState,
}

impl ResumingReader {
    fn new(
        object: String,
        body: ShardReader,
        size: Option<u64>,
        source: Arc<dyn Reopen>,
        policy: ResumePolicy,
    ) -> Self {
        Self {
            object,
            source,
            policy,
            size,
            offset: 0,
            resumes: 0,
            state: ReadState::Reading { body, stall: None },
        }
    }

    /// The body broke off because of `cause`: schedule a resume, or fail.
    fn interrupted(&mut self, cause: String) {
        let (object, offset) = (&self.object, self.offset);
        if self.size.is_some_and(|size| offset >= size) {
            // Everything arrived but the body still failed (a checksum
            // trailer, say): there is nothing to read again.
            self.state = ReadState::Failed(format!("{object}: read failed at byte {offset} (the end): {cause}"));
            return;
        }
        if self.resumes >= self.policy.max_resumes {
            self.state = ReadState::Failed(format!(
                "{object}: read failed at byte {offset} after {} resumes: {cause}",
                self.resumes
            ));
            return;
        }
        self.resumes += 1;
        let delay = self.policy.backoff(self.resumes);
        warn!(
            object = %object,
            offset,
            attempt = self.resumes,
            max_resumes = self.policy.max_resumes,
            delay_ms = delay.as_millis() as u64,
            cause = %cause,
            "shard read interrupted, resuming with a ranged get"
        );
        self.state = ReadState::Waiting(Box::pin(tokio::time::sleep(delay)));
    }
}

impl AsyncRead for ResumingReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                ReadState::Reading { body, stall } => {
                    let before = buf.filled().len();
                    match body.as_mut().poll_read(cx, buf) {
                        Poll::Ready(Ok(())) => {
                            let n = buf.filled().len() - before;
                            if n > 0 || buf.remaining() == 0 {
                                this.offset += n as u64;
                                *stall = None;
                                return Poll::Ready(Ok(()));
                            }
                            match this.size {
                                Some(size) if this.offset < size => {
                                    let cause = format!("body ended at byte {} of {size}", this.offset);
                                    this.interrupted(cause);
                                }
                                _ => this.state = ReadState::Done,
                            }
                        }
                        Poll::Ready(Err(e)) => this.interrupted(error_chain(&e)),
                        Poll::Pending => {
                            let timeout = this.policy.read_timeout;
                            let timer = stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                            ready!(timer.as_mut().poll(cx));
                            this.interrupted(format!("no data for {:.1}s", timeout.as_secs_f64()));
                        }
                    }
                }
                ReadState::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    this.state = ReadState::Opening(this.source.reopen(this.offset));
                }
                ReadState::Opening(fut) => match ready!(fut.as_mut().poll(cx)) {
                    Ok(body) => this.state = ReadState::Reading { body, stall: None },
                    Err(e) if e.permanent => {
                        this.state = ReadState::Failed(format!(
                            "{}: read failed at byte {}: {}",
                            this.object, this.offset, e.message
                        ));
                    }
                    Err(e) => this.interrupted(e.message),
                },
                ReadState::Failed(message) => return Poll::Ready(Err(io::Error::other(message.clone()))),
                ReadState::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// An error with its sources, e.g. "error reading a body from connection:
/// end of file before message length reached".
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        source = e.source();
    }
    out
}

/// Joins a shard name to a dataset folder, refusing names that climb out.
fn safe_join(dir: &Path, name: &str) -> Option<PathBuf> {
    let rel = Path::new(name);
    let ok = rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    ok.then(|| dir.join(rel))
}

async fn list_local(dir: &Path) -> Result<Vec<ShardRef>, StorageError> {
    let object = dir.display().to_string();
    let mut entries = tokio::fs::read_dir(dir).await.map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::NotFound(format!("folder {object}"))
        } else {
            StorageError::Io {
                object: object.clone(),
                source,
            }
        }
    })?;
    let mut shards = Vec::new();
    loop {
        let entry = entries.next_entry().await.map_err(|source| StorageError::Io {
            object: object.clone(),
            source,
        })?;
        let Some(entry) = entry else { break };
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".tar") {
            continue;
        }
        let meta = entry.metadata().await.map_err(|source| StorageError::Io {
            object: entry.path().display().to_string(),
            source,
        })?;
        if meta.is_file() {
            shards.push(ShardRef {
                name,
                size_bytes: meta.len(),
                samples: None,
            });
        }
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_names_that_climb_out() {
        let d = Path::new("/data");
        assert!(safe_join(d, "a.tar").is_some());
        assert!(safe_join(d, "sub/a.tar").is_some());
        assert!(safe_join(d, "../a.tar").is_none());
        assert!(safe_join(d, "/etc/passwd").is_none());
    }

    #[tokio::test]
    async fn lists_local_tars_sorted_and_reports_missing_folder() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["b.tar", "a.tar", "notes.txt"] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let storage = Storage::new();
        let uri = DatasetUri::Local(dir.path().into());
        let (shards, indexed) = storage.list_shards(&uri).await.unwrap();
        assert!(!indexed);
        let names: Vec<_> = shards.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a.tar", "b.tar"]);

        let missing = DatasetUri::Local(dir.path().join("nope"));
        let err = storage.list_shards(&missing).await.unwrap_err();
        assert!(matches!(err, StorageError::NotFound(_)), "{err}");
        assert!(err.to_string().contains("nope"));
    }

    /// How one scripted body of [`Scripted`] ends after its bytes.
    #[derive(Clone, Copy, Debug)]
    enum End {
        /// The object's real end.
        Finish,
        /// An I/O error (connection reset).
        Error,
        /// Nothing more, ever (a paused server).
        Stall,
        /// A clean end of stream before the object's end.
        Short,
    }

    /// A body over `data[from..until]`, handed out in odd-sized pieces.
    struct Body {
        data: Arc<Vec<u8>>,
        pos: usize,
        until: usize,
        end: End,
    }

    impl AsyncRead for Body {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if self.pos < self.until {
                let n = (self.until - self.pos).min(997).min(buf.remaining());
                let pos = self.pos;
                buf.put_slice(&self.data[pos..pos + n]);
                self.pos += n;
                return Poll::Ready(Ok(()));
            }
            match self.end {
                End::Finish | End::Short => Poll::Ready(Ok(())),
                End::Error => Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "connection reset"))),
                // Never woken: only the reader's stall timer gets it going.
                End::Stall => Poll::Pending,
            }
        }
    }

    /// A test double for S3: each reopen serves the next scripted body
    /// (bytes to give, then how it ends) or error, and records its offset.
    struct Scripted {
        data: Arc<Vec<u8>>,
        script: std::sync::Mutex<std::collections::VecDeque<Result<(usize, End), ReopenError>>>,
        offsets: std::sync::Mutex<Vec<u64>>,
    }

    impl Scripted {
        fn body(&self, from: usize, step: (usize, End)) -> ShardReader {
            let (len, end) = step;
            let until = from.saturating_add(len).min(self.data.len());
            Box::pin(Body {
                data: Arc::clone(&self.data),
                pos: from,
                until,
                end,
            })
        }
    }

    impl Reopen for Scripted {
        fn reopen(&self, offset: u64) -> ReopenFuture {
            self.offsets.lock().unwrap().push(offset);
            let next = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Ok((usize::MAX, End::Finish)));
            let result = next.map(|step| self.body(offset as usize, step));
            Box::pin(async move { result })
        }
    }

    fn policy(max_resumes: u32) -> ResumePolicy {
        ResumePolicy {
            read_timeout: Duration::from_millis(50),
            max_resumes,
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(10),
        }
    }

    /// A reader whose first body is `first`, then the `script`ed reopens.
    fn scripted(
        size: usize,
        first: (usize, End),
        script: Vec<Result<(usize, End), ReopenError>>,
        max_resumes: u32,
    ) -> (ResumingReader, Arc<Scripted>, Arc<Vec<u8>>) {
        // Bytes whose value depends on their position, so a repeated or
        // skipped range cannot compare equal.
        let data: Arc<Vec<u8>> = Arc::new((0..size).map(|i| (i * 7 + i / 251) as u8).collect());
        let source = Arc::new(Scripted {
            data: Arc::clone(&data),
            script: std::sync::Mutex::new(script.into()),
            offsets: std::sync::Mutex::new(Vec::new()),
        });
        let body = source.body(0, first);
        let reader = ResumingReader::new(
            "s3://b/k.tar".into(),
            body,
            Some(size as u64),
            Arc::clone(&source) as Arc<dyn Reopen>,
            policy(max_resumes),
        );
        (reader, source, data)
    }

    async fn read_all(mut reader: ResumingReader) -> io::Result<Vec<u8>> {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        // Small, odd reads so resumes land inside the caller's buffer.
        let mut buf = [0u8; 1500];
        loop {
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[tokio::test]
    async fn resumes_splice_bytes_without_gaps_or_repeats() {
        let script = vec![
            Ok((10_000, End::Stall)),
            Err(ReopenError {
                message: "503 slow down".into(),
                permanent: false,
            }),
            Ok((1, End::Short)),
            Ok((25_000, End::Error)),
        ];
        let (reader, source, data) = scripted(100_003, (12_345, End::Error), script, 10);
        let got = read_all(reader).await.unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == *data, "bytes differ after resumes");
        // Each resume starts where the previous body stopped; the failed
        // reopen is retried at the same offset.
        let offsets = source.offsets.lock().unwrap().clone();
        assert_eq!(offsets, [12_345, 22_345, 22_345, 22_346, 47_346]);
    }

    #[tokio::test]
    async fn a_body_ending_early_is_resumed_and_the_real_end_is_not() {
        let (reader, source, data) = scripted(5_000, (4_999, End::Short), vec![], 3);
        assert!(read_all(reader).await.unwrap() == *data);
        assert_eq!(*source.offsets.lock().unwrap(), [4_999]);

        let (reader, source, data) = scripted(5_000, (5_000, End::Finish), vec![], 3);
        assert!(read_all(reader).await.unwrap() == *data);
        assert!(source.offsets.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn gives_up_after_max_resumes_naming_object_offset_and_cause() {
        let script = vec![Ok((100, End::Error)), Ok((100, End::Error)), Ok((100, End::Error))];
        let (reader, source, _) = scripted(10_000, (1_000, End::Error), script, 2);
        let err = read_all(reader).await.unwrap_err().to_string();
        assert_eq!(
            err,
            "s3://b/k.tar: read failed at byte 1200 after 2 resumes: connection reset"
        );
        assert_eq!(*source.offsets.lock().unwrap(), [1_000, 1_100]);
    }

    #[tokio::test]
    async fn a_permanent_reopen_error_fails_at_once() {
        let script = vec![Err(ReopenError {
            message: "changed while being read (no longer etag \"abc\")".into(),
            permanent: true,
        })];
        let (reader, source, _) = scripted(10_000, (777, End::Error), script, 10);
        let err = read_all(reader).await.unwrap_err().to_string();
        assert!(
            err.starts_with("s3://b/k.tar: read failed at byte 777: changed while being read"),
            "{err}"
        );
        assert_eq!(
            source.offsets.lock().unwrap().len(),
            1,
            "no retry after a permanent error"
        );
    }

    #[test]
    fn content_range_must_start_at_the_offset() {
        assert!(check_content_range(Some("bytes 100-199/200"), 100, Some(200)).is_ok());
        assert!(check_content_range(Some("bytes 100-199/*"), 100, Some(200)).is_ok());
        assert!(check_content_range(None, 0, Some(200)).is_ok());
        let err = check_content_range(None, 100, Some(200)).unwrap_err();
        assert!(err.contains("without content-range"), "{err}");
        let err = check_content_range(Some("bytes 0-199/200"), 100, Some(200)).unwrap_err();
        assert!(err.contains("asked for bytes from 100"), "{err}");
        assert!(check_content_range(Some("bytes 100-299/300"), 100, Some(200)).is_err());
        assert!(check_content_range(Some("items 1-2/3"), 1, None).is_err());
        assert!(check_content_range(Some("bytes x-2/3"), 1, None).is_err());
    }

    #[test]
    fn backoff_is_jittered_below_a_doubling_ceiling() {
        let p = ResumePolicy {
            read_timeout: Duration::from_secs(1),
            max_resumes: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
        };
        for attempt in 1..40 {
            let ceiling = Duration::from_millis((100u64 << (attempt - 1).min(10)).min(350));
            assert!(p.backoff(attempt) <= ceiling, "attempt {attempt}");
        }
        let draws: std::collections::HashSet<_> = (0..20).map(|_| p.backoff(3)).collect();
        assert!(draws.len() > 1, "backoff is not jittered");
    }
}
