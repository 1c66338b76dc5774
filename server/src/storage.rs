//! Where shards come from: S3 (through aws-sdk-s3) or a local folder.
//!
//! Shards are read as streams, never whole: an S3 object body is consumed as
//! it arrives, a file through a buffered reader.

use std::path::{Path, PathBuf};
use std::pin::Pin;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use serde::{Deserialize, Serialize};
use stoker_core::{DatasetUri, ShardRef};
use tokio::io::AsyncRead;
use tokio::sync::OnceCell;

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

/// Access to datasets on S3 and local disk. The S3 client is created on
/// first use from the standard AWS environment (`AWS_ENDPOINT_URL`,
/// `AWS_ACCESS_KEY_ID`, `AWS_REGION`, profiles...).
#[derive(Debug, Default)]
pub struct Storage {
    s3: OnceCell<aws_sdk_s3::Client>,
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
    pub fn new() -> Self {
        Self::default()
    }

    async fn s3(&self) -> &aws_sdk_s3::Client {
        self.s3
            .get_or_init(|| async {
                let shared = aws_config::load_from_env().await;
                let mut conf = aws_sdk_s3::config::Builder::from(&shared);
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
                let out = self
                    .s3()
                    .await
                    .get_object()
                    .bucket(bucket)
                    .key(format!("{prefix}{name}"))
                    .send()
                    .await
                    .map_err(|e| s3_error(&object, e))?;
                Ok(Box::pin(out.body.into_async_read()))
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
                self.s3()
                    .await
                    .put_object()
                    .bucket(bucket)
                    .key(format!("{prefix}{name}"))
                    .body(body)
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
}
