//! Dataset locations.

use std::fmt;
use std::path::PathBuf;

/// Where a dataset's shards live.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DatasetUri {
    /// `s3://bucket/prefix/`; `prefix` is empty or ends with `/`.
    S3 { bucket: String, prefix: String },
    /// A local folder (`file:///abs/dir/` or a plain path).
    Local(PathBuf),
}

/// Why a dataset URI was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UriError {
    #[error("empty dataset uri")]
    Empty,
    #[error("dataset uri {0:?} names no bucket (expected s3://bucket/prefix/)")]
    NoBucket(String),
    #[error("dataset uri {0:?} is not an absolute path (expected file:///abs/dir/)")]
    RelativeFileUri(String),
    #[error("dataset uri {0:?} has unsupported scheme {1:?} (expected s3://, file:// or a path)")]
    Scheme(String, String),
}

impl DatasetUri {
    /// Parses `s3://bucket/prefix`, `file:///abs/dir` or a plain path.
    ///
    /// An S3 prefix is normalized to end with `/` so that `s3://b/train`
    /// never matches `s3://b/train-old/`.
    pub fn parse(s: &str) -> Result<Self, UriError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(UriError::Empty);
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(UriError::NoBucket(s.to_owned()));
            }
            let prefix = prefix.trim_start_matches('/');
            let prefix = if prefix.is_empty() || prefix.ends_with('/') {
                prefix.to_owned()
            } else {
                format!("{prefix}/")
            };
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix,
            });
        }
        if let Some(rest) = s.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(UriError::RelativeFileUri(s.to_owned()));
            }
            return Ok(Self::Local(PathBuf::from(rest)));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(UriError::Scheme(s.to_owned(), scheme.to_owned()));
        }
        Ok(Self::Local(PathBuf::from(s)))
    }

    /// The location of one shard (or other object) under this dataset.
    pub fn join(&self, name: &str) -> String {
        match self {
            Self::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}{name}"),
            Self::Local(dir) => dir.join(name).display().to_string(),
        }
    }
}

impl fmt::Display for DatasetUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            Self::Local(dir) => write!(f, "{}", dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_s3_and_normalizes_prefix() {
        assert_eq!(
            DatasetUri::parse("s3://b/train").unwrap(),
            DatasetUri::S3 {
                bucket: "b".into(),
                prefix: "train/".into()
            }
        );
        assert_eq!(
            DatasetUri::parse("s3://b").unwrap(),
            DatasetUri::S3 {
                bucket: "b".into(),
                prefix: String::new()
            }
        );
        assert_eq!(DatasetUri::parse("s3://b/a/").unwrap().join("x.tar"), "s3://b/a/x.tar");
    }

    #[test]
    fn parses_local_forms() {
        assert_eq!(
            DatasetUri::parse("file:///data/x/").unwrap(),
            DatasetUri::Local("/data/x/".into())
        );
        assert_eq!(
            DatasetUri::parse("rel/dir").unwrap(),
            DatasetUri::Local("rel/dir".into())
        );
    }

    #[test]
    fn refuses_bad_uris() {
        assert_eq!(DatasetUri::parse(""), Err(UriError::Empty));
        assert!(matches!(DatasetUri::parse("s3:///x"), Err(UriError::NoBucket(_))));
        assert!(matches!(
            DatasetUri::parse("file://rel"),
            Err(UriError::RelativeFileUri(_))
        ));
        assert!(matches!(DatasetUri::parse("gs://b/p"), Err(UriError::Scheme(_, _))));
    }
}
