//! The S3 backend (aws-sdk-s3): the client (made on first use, path-style
//! when `AWS_ENDPOINT_URL` is set; its CAs from `ca`) and its
//! retries and timeouts, listing, whole-object and streamed reads, uploads,
//! and the ranged re-reads that resume a shard body, each S3 error
//! classified into a [`StorageError`]. A certificate the client refuses is
//! not retried, and its error names the endpoint and what is trusted.

use std::path::Path;
use std::sync::Arc;

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents, StalledStreamProtectionConfig};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority};
use stoker_core::ShardRef;
use tokio::sync::OnceCell;

use super::ca::{AWS_CA_BUNDLE, S3Trust};
use super::resume::{Reopen, ReopenError, ReopenFuture, ResumePolicy, ResumingReader};
use super::types::{ShardReader, StorageConfig, StorageError, StorageStats};

/// The S3 client, with what its errors name: where it connects and which
/// CAs it trusts.
#[derive(Debug)]
pub(super) struct S3 {
    pub client: aws_sdk_s3::Client,
    pub site: Arc<S3Site>,
}

#[derive(Debug)]
pub(super) struct S3Site {
    /// `AWS_ENDPOINT_URL`, or AWS's endpoint for the region.
    endpoint: String,
    /// [`S3Trust::describe`].
    trust: String,
}

/// The certificate problem in an error's chain: rustls refusing the
/// server's certificate (untrusted issuer, wrong name, expired...). The
/// rustls error travels inside `io::Error`s, whose `source` skips the
/// error they wrap, so those are opened too.
fn certificate_problem<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
            .then_some(tls);
        }
        if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref)
            && let Some(tls) = certificate_problem(inner)
        {
            return Some(tls);
        }
        next = e.source();
    }
    None
}

/// Forbids retrying a request whose connection failed on the server's
/// certificate: another attempt meets the same certificate.
#[derive(Debug)]
struct NoRetryOnCertificateProblem;

impl ClassifyRetry for NoRetryOnCertificateProblem {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(Err(err)) = ctx.output_or_error() else {
            return RetryAction::NoActionIndicated;
        };
        match err.as_connector_error() {
            Some(e) if certificate_problem(e).is_some() => RetryAction::RetryForbidden,
            _ => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "NoRetryOnCertificateProblem"
    }

    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

/// Counts the SDK's retries into [`StorageStats::retries`]: every attempt
/// of a request after its first.
#[derive(Debug)]
struct CountRetries(Arc<StorageStats>);

impl Intercept for CountRetries {
    fn name(&self) -> &'static str {
        "CountRetries"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<RequestAttempts>().is_some_and(|a| a.attempts() > 1) {
            self.0.retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
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

/// Classifies an S3 error for `object`, reached through `site`.
pub(super) fn s3_error<E: ProvideErrorMetadata + std::error::Error + 'static>(
    site: &S3Site,
    object: &str,
    err: SdkError<E>,
) -> StorageError {
    if let Some(problem) = certificate_problem(&err) {
        let hint = match problem {
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                format!("; add the CA that issued it with {AWS_CA_BUNDLE}=FILE")
            }
            _ => String::new(),
        };
        return StorageError::Certificate {
            object: object.to_owned(),
            endpoint: site.endpoint.clone(),
            reason: format!("{problem}; trusted: {}{hint}", site.trust),
        };
    }
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

/// `Storage`'s S3 side: the client, created on first use, with the
/// storage's retries and timeouts and its counters (the same
/// [`StorageStats`] as the storage's).
#[derive(Debug)]
pub(super) struct S3Store {
    client: OnceCell<S3>,
    config: StorageConfig,
    stats: Arc<StorageStats>,
}

impl S3Store {
    pub(super) fn new(config: StorageConfig, stats: Arc<StorageStats>) -> Self {
        Self {
            client: OnceCell::new(),
            config,
            stats,
        }
    }

    /// The S3 client, created on first use, with the CAs of
    /// [`S3Trust::from_env`] (a bad CA file is an error naming it).
    pub(super) async fn s3(&self) -> Result<&S3, StorageError> {
        self.client
            .get_or_try_init(|| async {
                let trust = S3Trust::from_env()?;
                let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
                if let Some(http) = trust.http_client() {
                    // Credential providers (STS, SSO) use it too.
                    loader = loader.http_client(http);
                }
                let shared = loader.load().await;
                let c = &self.config;
                let mut conf = aws_sdk_s3::config::Builder::from(&shared)
                    .retry_config(
                        RetryConfig::standard()
                            .with_max_attempts(c.max_attempts.max(1))
                            .with_initial_backoff(c.initial_backoff)
                            .with_max_backoff(c.max_backoff),
                    )
                    .retry_classifier(NoRetryOnCertificateProblem)
                    .timeout_config(
                        TimeoutConfig::builder()
                            .connect_timeout(c.connect_timeout)
                            .operation_attempt_timeout(c.attempt_timeout)
                            .build(),
                    )
                    .interceptor(CountRetries(Arc::clone(&self.stats)))
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
                let conf = conf.build();
                let endpoint = match shared.endpoint_url() {
                    Some(url) => url.to_owned(),
                    None => format!(
                        "the AWS S3 endpoint of region {}",
                        conf.region().map_or("us-east-1", |r| r.as_ref())
                    ),
                };
                Ok(S3 {
                    client: aws_sdk_s3::Client::from_conf(conf),
                    site: Arc::new(S3Site {
                        endpoint,
                        trust: trust.describe(),
                    }),
                })
            })
            .await
    }

    /// The objects directly or deeper under `prefix`, in no order (the
    /// caller keeps the shards).
    pub(super) async fn list_s3(&self, bucket: &str, prefix: &str) -> Result<Vec<ShardRef>, StorageError> {
        let object = format!("s3://{bucket}/{prefix}");
        let s3 = self.s3().await?;
        let mut pages = s3
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut shards = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| s3_error(&s3.site, &object, e))?;
            for obj in page.contents() {
                let Some(key) = obj.key() else { continue };
                let Some(name) = key.strip_prefix(prefix) else { continue };
                if !name.is_empty() && !name.ends_with('/') {
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

    /// The whole object `key`, or `None` when the object (not its bucket)
    /// does not exist; `object` names it in errors.
    pub(super) async fn read_s3_if_exists(
        &self,
        bucket: &str,
        key: &str,
        object: &str,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let s3 = self.s3().await?;
        let got = s3.client.get_object().bucket(bucket).key(key).send().await;
        match got {
            Ok(out) => Ok(Some(
                out.body
                    .collect()
                    .await
                    .map_err(|e| StorageError::Transient {
                        object: object.to_owned(),
                        reason: e.to_string(),
                    })?
                    .into_bytes()
                    .to_vec(),
            )),
            Err(e) => match s3_error(&s3.site, object, e) {
                // A missing object is normal; a missing bucket is not.
                StorageError::NotFound(what) if what == object => Ok(None),
                other => Err(other),
            },
        }
    }

    /// Opens the shard `name` under `prefix`, its bytes from `start` up to
    /// `end` (exclusive; `None`: its end), as a body that resumes when it
    /// breaks off; `object` names it in errors.
    pub(super) async fn open_s3(
        &self,
        bucket: &str,
        prefix: &str,
        name: &str,
        (start, end): (u64, Option<u64>),
        object: String,
    ) -> Result<ShardReader, StorageError> {
        let s3 = self.s3().await?;
        let (client, site) = (s3.client.clone(), Arc::clone(&s3.site));
        let key = format!("{prefix}{name}");
        let mut req = client.get_object().bucket(bucket).key(&key);
        let ranged = start > 0 || end.is_some();
        if ranged {
            req = req.range(range_header(start, end));
        }
        let out = req.send().await.map_err(|e| s3_error(&site, &object, e))?;
        let length = out.content_length().and_then(|n| u64::try_from(n).ok());
        // The object's size: the total of a ranged response's content-range,
        // else the body's length.
        let size = if ranged {
            check_content_range(out.content_range(), start, None).map_err(|reason| StorageError::Transient {
                object: object.clone(),
                reason,
            })?;
            out.content_range().and_then(content_range_total)
        } else {
            length
        };
        let source = S3Object {
            client,
            site,
            bucket: bucket.to_owned(),
            key,
            etag: out.e_tag().map(str::to_owned),
            size,
            end,
        };
        let body: ShardReader = Box::pin(out.body.into_async_read());
        Ok(Box::pin(ResumingReader::new(
            object,
            body,
            (start, length.map(|n| start + n)),
            Arc::new(source),
            ResumePolicy::from(&self.config),
            Arc::clone(&self.stats),
        )))
    }

    /// Uploads the file at `path` as `name` under `prefix`.
    pub(super) async fn put_s3(
        &self,
        bucket: &str,
        prefix: &str,
        name: &str,
        path: &Path,
        object: String,
    ) -> Result<(), StorageError> {
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
        let s3 = self.s3().await?;
        s3.client
            .put_object()
            .bucket(bucket)
            .key(format!("{prefix}{name}"))
            .body(body)
            .customize()
            .config_override(aws_sdk_s3::config::Builder::default().timeout_config(timeouts))
            .send()
            .await
            .map_err(|e| s3_error(&s3.site, &object, e))?;
        Ok(())
    }

    /// Checks that `bucket` exists and answers us.
    pub(super) async fn check_bucket(&self, bucket: &str) -> Result<(), StorageError> {
        let object = format!("s3://{bucket}");
        let s3 = self.s3().await?;
        s3.client
            .head_bucket()
            .bucket(bucket)
            .send()
            .await
            .map_err(|e| match s3_error(&s3.site, &object, e) {
                StorageError::NotFound(_) => StorageError::NotFound(format!("bucket {object}")),
                other => other,
            })?;
        Ok(())
    }
}

/// The S3 object behind a shard being read, as its first response described
/// it.
#[derive(Debug, Clone)]
struct S3Object {
    client: aws_sdk_s3::Client,
    site: Arc<S3Site>,
    bucket: String,
    key: String,
    etag: Option<String>,
    /// The whole object's size.
    size: Option<u64>,
    /// One past the last byte the read wants, when not the object's end.
    end: Option<u64>,
}

impl S3Object {
    async fn get_from(self, offset: u64) -> Result<ShardReader, ReopenError> {
        let object = format!("s3://{}/{}", self.bucket, self.key);
        let mut req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .range(range_header(offset, self.end));
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
            let err = s3_error(&self.site, &object, e);
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

/// An HTTP `Range` header for bytes `start` up to `end` (exclusive).
fn range_header(start: u64, end: Option<u64>) -> String {
    match end {
        Some(end) => format!("bytes={start}-{}", end.saturating_sub(1)),
        None => format!("bytes={start}-"),
    }
}

/// The object's size a `Content-Range` header gives, when it does.
fn content_range_total(header: &str) -> Option<u64> {
    header.rsplit_once('/')?.1.trim().parse().ok()
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn ranges_are_inclusive_on_the_wire() {
        assert_eq!(range_header(100, Some(200)), "bytes=100-199");
        assert_eq!(range_header(100, None), "bytes=100-");
        assert_eq!(content_range_total("bytes 100-199/4096"), Some(4096));
        assert_eq!(content_range_total("bytes 100-199/*"), None);
    }
}
