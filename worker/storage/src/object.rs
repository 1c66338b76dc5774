//! One object read by byte ranges, for formats that seek instead of
//! streaming (Parquet: the footer, then the column chunks of the row groups
//! an item needs).

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use stoker_core::DatasetUri;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::s3::{S3Site, s3_error};
use super::{Storage, StorageError, StorageStats, local};

/// A shard opened for ranged reads: cheap to clone, owning what it needs.
#[derive(Clone, Debug)]
pub struct Object {
    location: Location,
    /// The object's name in errors.
    object: String,
    /// Its size when opened.
    size: u64,
    stats: Arc<StorageStats>,
}

#[derive(Clone, Debug)]
enum Location {
    S3 {
        client: aws_sdk_s3::Client,
        site: Arc<S3Site>,
        bucket: String,
        key: String,
    },
    Local(PathBuf),
}

impl Storage {
    /// Opens the shard `name` under `uri` for ranged reads (a HEAD request
    /// on S3 for its size).
    pub async fn object(&self, uri: &DatasetUri, name: &str) -> Result<Object, StorageError> {
        let object = uri.join(name);
        let location = self.location(uri, name, &object).await?;
        let size = match &location {
            Location::S3 {
                client,
                site,
                bucket,
                key,
            } => {
                let head = client
                    .head_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| s3_error(site, &object, e))?;
                head.content_length().and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
            }
            Location::Local(path) => {
                let meta = tokio::fs::metadata(path).await.map_err(local::open_error(&object))?;
                meta.len()
            }
        };
        Ok(self.object_at(location, object, size))
    }

    /// The shard `name` under `uri` for ranged reads, its `size` known
    /// (from a listing): no request.
    pub async fn object_of_size(&self, uri: &DatasetUri, name: &str, size: u64) -> Result<Object, StorageError> {
        let object = uri.join(name);
        let location = self.location(uri, name, &object).await?;
        Ok(self.object_at(location, object, size))
    }

    async fn location(&self, uri: &DatasetUri, name: &str, object: &str) -> Result<Location, StorageError> {
        Ok(match uri {
            DatasetUri::S3 { bucket, prefix } => {
                let s3 = self.s3.s3().await?;
                Location::S3 {
                    client: s3.client.clone(),
                    site: Arc::clone(&s3.site),
                    bucket: bucket.clone(),
                    key: format!("{prefix}{name}"),
                }
            }
            DatasetUri::Local(dir) => {
                Location::Local(local::safe_join(dir, name).ok_or_else(|| StorageError::NotFound(object.to_owned()))?)
            }
        })
    }

    fn object_at(&self, location: Location, object: String, size: u64) -> Object {
        Object {
            location,
            object,
            size,
            stats: Arc::clone(&self.stats),
        }
    }
}

impl Object {
    /// The object's size when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The bytes in `range`: a ranged GET on S3 (retried by the SDK).
    pub async fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        let want = range.end.saturating_sub(range.start);
        if want == 0 {
            return Ok(Bytes::new());
        }
        let short = |got: usize| StorageError::Transient {
            object: self.object.clone(),
            reason: format!("asked for bytes {}..{}, got {got} bytes", range.start, range.end),
        };
        let bytes = match &self.location {
            Location::S3 {
                client,
                site,
                bucket,
                key,
            } => {
                let out = client
                    .get_object()
                    .bucket(bucket)
                    .key(key)
                    .range(format!("bytes={}-{}", range.start, range.end - 1))
                    .send()
                    .await
                    .map_err(|e| s3_error(site, &self.object, e))?;
                out.body
                    .collect()
                    .await
                    .map_err(|e| StorageError::Transient {
                        object: self.object.clone(),
                        reason: e.to_string(),
                    })?
                    .into_bytes()
            }
            Location::Local(path) => {
                let io = |source| StorageError::Io {
                    object: self.object.clone(),
                    source,
                };
                let mut file = tokio::fs::File::open(path).await.map_err(io)?;
                file.seek(std::io::SeekFrom::Start(range.start)).await.map_err(io)?;
                let mut buf = Vec::with_capacity(want as usize);
                file.take(want).read_to_end(&mut buf).await.map_err(io)?;
                Bytes::from(buf)
            }
        };
        self.stats.read_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if bytes.len() as u64 != want {
            return Err(short(bytes.len()));
        }
        Ok(bytes)
    }
}
