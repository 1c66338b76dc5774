//! `--allow-dataset`: the datasets a worker may read ([`AllowList`],
//! carried in `ServeOptions`). A dataset outside is [`Denied`]
//! (PERMISSION_DENIED).
//!
//! The dataset URI and the shard name come from the client. A worker
//! started with allowed prefixes serves only what lies under one of them:
//! an S3 bucket and key prefix (`s3://bucket/prefix/`), or a local folder.
//! Anything else is refused before storage is touched.
//!
//! What is compared is what storage may end up reading, under every
//! reading of the request:
//!
//! - **S3.** The key (the dataset's prefix, or the prefix and the shard
//!   name of a work item) must lie under an allowed prefix as written
//!   (S3 keys are literal) *and* once percent-decoded (as often as that
//!   changes it) with `.` and `..` resolved and empty segments dropped, as
//!   an S3-compatible store on a file system may read it. A `..` above the
//!   bucket is refused.
//! - **Local folders.** The path (and each percent-decoded reading of it)
//!   is resolved the way the file system will: the deepest part that
//!   exists is canonicalized (symlinks followed, `..` resolved), and what
//!   does not exist yet may hold only plain names. The allowed folders are
//!   canonicalized at start. A work item reads the resolved folder, so the
//!   path checked is the path read.
//!
//! Prefixes match by path component: `s3://b/data/` does not allow
//! `s3://b/data-other/`, nor `/srv/data` `/srv/data-other`.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use percent_encoding::percent_decode_str;
use stoker_core::DatasetUri;
use stoker_core::uri::UriError;

/// How many times a key is percent-decoded at most; a key that still
/// changes after that is refused.
const MAX_DECODES: usize = 4;

/// The datasets a worker serves: everything (no `--allow-dataset`), or
/// what lies under one of its prefixes.
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    prefixes: Vec<Allowed>,
}

/// One allowed prefix, normalized.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Allowed {
    /// A bucket and the segments of a key prefix (none: the whole bucket).
    S3 { bucket: String, segments: Vec<String> },
    /// A canonical folder.
    Local(PathBuf),
}

/// Why an `--allow-dataset` prefix was refused at start.
#[derive(Debug, thiserror::Error)]
pub enum AllowListError {
    #[error("allowed dataset prefix {prefix:?} is not a dataset uri")]
    Uri {
        prefix: String,
        #[source]
        source: UriError,
    },
    #[error("allowed dataset prefix {prefix:?} {reason}")]
    Invalid { prefix: String, reason: &'static str },
    #[error("allowed dataset folder {prefix:?} cannot be resolved")]
    Folder {
        prefix: String,
        #[source]
        source: std::io::Error,
    },
}

/// A dataset (or a shard of it) outside every allowed prefix.
#[derive(Debug, thiserror::Error)]
#[error("dataset {dataset} is not under a prefix this worker allows (--allow-dataset)")]
pub struct Denied {
    /// The dataset, or the shard under it, as the request named it.
    pub dataset: String,
}

impl AllowList {
    /// Every dataset allowed (no `--allow-dataset`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// The datasets under `prefixes` (`s3://bucket/prefix/`, `file:///dir`
    /// or a folder path) only; local folders must exist, and are resolved
    /// here. An empty list allows everything.
    pub fn new<S: AsRef<str>>(prefixes: &[S]) -> Result<Self, AllowListError> {
        let prefixes = prefixes
            .iter()
            .map(|p| Allowed::parse(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { prefixes })
    }

    /// True when some datasets are refused.
    pub fn is_restricted(&self) -> bool {
        !self.prefixes.is_empty()
    }

    /// Checks the dataset `uri` (what `DescribeDataset` lists) and returns
    /// the dataset to read: `uri` itself, or on a restricted worker a local
    /// folder resolved (see the module's documentation).
    pub async fn check_dataset(&self, uri: &DatasetUri) -> Result<DatasetUri, Denied> {
        self.check(uri, None).await
    }

    /// Checks the shard `name` of the dataset `uri` (what a work item
    /// reads), like [`AllowList::check_dataset`].
    pub async fn check_shard(&self, uri: &DatasetUri, name: &str) -> Result<DatasetUri, Denied> {
        self.check(uri, Some(name)).await
    }

    async fn check(&self, uri: &DatasetUri, shard: Option<&str>) -> Result<DatasetUri, Denied> {
        if !self.is_restricted() {
            return Ok(uri.clone());
        }
        let denied = || Denied {
            dataset: shard.map_or_else(|| uri.to_string(), |name| uri.join(name)),
        };
        match uri {
            DatasetUri::S3 { bucket, prefix } => {
                let key = format!("{prefix}{}", shard.unwrap_or(""));
                self.allows_s3(bucket, &key).then(|| uri.clone()).ok_or_else(denied)
            }
            DatasetUri::Local(dir) => {
                let (dir, shard) = (dir.clone(), shard.map(str::to_owned));
                let prefixes = self.prefixes.clone();
                // Resolving touches the file system: off the runtime.
                let resolved = tokio::task::spawn_blocking(move || local_allowed(&prefixes, &dir, shard.as_deref()))
                    .await
                    .ok()
                    .flatten();
                resolved.map(DatasetUri::Local).ok_or_else(denied)
            }
        }
    }

    /// Whether every reading of `key` in `bucket` is under an allowed
    /// prefix.
    fn allows_s3(&self, bucket: &str, key: &str) -> bool {
        let Some(readings) = key_readings(key) else {
            return false;
        };
        readings.iter().all(|reading| {
            self.prefixes.iter().any(|p| match p {
                Allowed::S3 { bucket: b, segments } => b == bucket && reading.is_under(segments),
                Allowed::Local(_) => false,
            })
        })
    }
}

impl fmt::Display for AllowList {
    /// The allowed prefixes, comma-separated, or `everything`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefixes.is_empty() {
            return f.write_str("everything");
        }
        for (i, p) in self.prefixes.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match p {
                Allowed::S3 { bucket, segments } if segments.is_empty() => write!(f, "s3://{bucket}/")?,
                Allowed::S3 { bucket, segments } => write!(f, "s3://{bucket}/{}/", segments.join("/"))?,
                Allowed::Local(dir) => write!(f, "{}", dir.display())?,
            }
        }
        Ok(())
    }
}

impl Allowed {
    fn parse(prefix: &str) -> Result<Self, AllowListError> {
        let invalid = |reason| AllowListError::Invalid {
            prefix: prefix.to_owned(),
            reason,
        };
        // The operator writes prefixes plainly: no escapes to decode, no
        // dot segments to resolve.
        if prefix.contains('%') {
            return Err(invalid("holds a percent sign: write it unescaped"));
        }
        let uri = DatasetUri::parse(prefix).map_err(|source| AllowListError::Uri {
            prefix: prefix.to_owned(),
            source,
        })?;
        match uri {
            DatasetUri::S3 { bucket, prefix: key } => {
                let segments: Vec<String> = key.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect();
                if segments.iter().any(|s| s == "." || s == "..") {
                    return Err(invalid("holds a '.' or '..' segment"));
                }
                Ok(Self::S3 { bucket, segments })
            }
            DatasetUri::Local(dir) => {
                if !dir.is_absolute() {
                    return Err(invalid("is not an absolute folder path"));
                }
                let canonical = std::fs::canonicalize(&dir).map_err(|source| AllowListError::Folder {
                    prefix: prefix.to_owned(),
                    source,
                })?;
                if !canonical.is_dir() {
                    return Err(invalid("is not a folder"));
                }
                Ok(Self::Local(canonical))
            }
        }
    }
}

/// One way a store may read an S3 key: its segments, and whether it names
/// a "folder" (ends with `/`, or is empty) rather than an object.
#[derive(Debug, PartialEq, Eq)]
struct KeyReading {
    segments: Vec<String>,
    folder: bool,
}

impl KeyReading {
    /// Under `prefix` by component: the prefix's segments come first, and
    /// something follows them, if only the `/` that ends a folder.
    fn is_under(&self, prefix: &[String]) -> bool {
        self.segments.starts_with(prefix) && (self.segments.len() > prefix.len() || self.folder)
    }

    /// The key as written: S3 keys are literal.
    fn literal(key: &str) -> Self {
        let folder = key.is_empty() || key.ends_with('/');
        let mut segments: Vec<String> = key.split('/').map(str::to_owned).collect();
        if folder {
            segments.pop();
        }
        Self { segments, folder }
    }

    /// The key with empty and `.` segments dropped and `..` resolved, as a
    /// file system would; `None` when `..` climbs above the bucket.
    fn resolved(key: &str) -> Option<Self> {
        let mut segments: Vec<String> = Vec::new();
        let mut folder = true;
        for part in key.split('/') {
            match part {
                "" | "." => folder = true,
                ".." => {
                    segments.pop()?;
                    folder = true;
                }
                name => {
                    segments.push(name.to_owned());
                    folder = false;
                }
            }
        }
        Some(Self { segments, folder })
    }
}

/// Every reading of `key` a store may make: as written, resolved, and the
/// same for each percent-decoding of it; `None` when one of them climbs
/// out of the bucket, is not UTF-8, or decoding never settles.
fn key_readings(key: &str) -> Option<Vec<KeyReading>> {
    let mut readings = Vec::new();
    let mut current = key.to_owned();
    for _ in 0..=MAX_DECODES {
        readings.push(KeyReading::literal(&current));
        readings.push(KeyReading::resolved(&current)?);
        let decoded = percent_decode_str(&current).decode_utf8().ok()?;
        if decoded == current {
            return Some(readings);
        }
        current = decoded.into_owned();
    }
    None
}

/// The folder to read for `dir` (and its shard `shard`), resolved, when it
/// and every percent-decoded reading of its path lie in an allowed folder.
fn local_allowed(prefixes: &[Allowed], dir: &Path, shard: Option<&str>) -> Option<PathBuf> {
    let inside = |path: &Path| {
        prefixes.iter().any(|p| match p {
            Allowed::Local(folder) => path.starts_with(folder),
            Allowed::S3 { .. } => false,
        })
    };
    let target = match shard {
        Some(name) => dir.join(name),
        None => dir.to_owned(),
    };
    let resolved_dir = resolve(dir)?;
    if !inside(&resolved_dir) {
        return None;
    }
    // The shard itself (a symlink may point out), and each decoded
    // reading of the whole path.
    let mut current = target.to_str()?.to_owned();
    // A folder's path as written is `resolved_dir`, checked already.
    let mut checked = shard.is_none();
    for _ in 0..=MAX_DECODES {
        if !checked && !inside(&resolve(Path::new(&current))?) {
            return None;
        }
        checked = false;
        let decoded = percent_decode_str(&current).decode_utf8().ok()?;
        if decoded == current {
            return Some(resolved_dir);
        }
        current = decoded.into_owned();
    }
    None
}

/// `path` as the file system will find it: its deepest existing ancestor
/// canonicalized, then the names below it that do not exist (yet); `None`
/// when a `..` or `.` follows a part that does not exist, or the path is
/// not absolute and the working folder is unknown.
fn resolve(path: &Path) -> Option<PathBuf> {
    let mut existing = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    let mut missing = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(&existing) {
            let mut resolved = canonical;
            for name in missing.iter().rev() {
                resolved.push(name);
            }
            return Some(resolved);
        }
        match existing.components().next_back() {
            Some(Component::Normal(name)) => missing.push(name.to_owned()),
            _ => return None,
        }
        existing = existing.parent()?.to_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(prefixes: &[&str]) -> AllowList {
        AllowList::new(prefixes).unwrap()
    }

    async fn allowed(list: &AllowList, dataset: &str, shard: Option<&str>) -> bool {
        let uri = DatasetUri::parse(dataset).unwrap();
        list.check(&uri, shard).await.is_ok()
    }

    #[tokio::test]
    async fn everything_is_allowed_without_prefixes() {
        let all = AllowList::everything();
        assert!(!all.is_restricted());
        assert!(allowed(&all, "s3://any/where/../else/", Some("../x.tar")).await);
        assert!(allowed(&all, "/etc", None).await);
        assert_eq!(all.to_string(), "everything");
    }

    #[tokio::test]
    async fn s3_prefixes_match_by_component() {
        let l = list(&["s3://data/train", "s3://whole"]);
        assert_eq!(l.to_string(), "s3://data/train/,s3://whole/");
        assert!(allowed(&l, "s3://data/train/", None).await);
        assert!(allowed(&l, "s3://data/train/a/b/", None).await);
        assert!(allowed(&l, "s3://data/train/", Some("shard-0.tar")).await);
        assert!(allowed(&l, "s3://data/", Some("train/shard-0.tar")).await);
        assert!(allowed(&l, "s3://whole/", None).await);
        assert!(allowed(&l, "s3://whole/any/thing/", Some("x.tar")).await);
        // Siblings, parents, other buckets.
        assert!(!allowed(&l, "s3://data/train-other/", None).await);
        assert!(!allowed(&l, "s3://data/trai/", None).await);
        assert!(!allowed(&l, "s3://data/", None).await);
        assert!(!allowed(&l, "s3://data/", Some("train")).await);
        assert!(!allowed(&l, "s3://data/", Some("train-other/x.tar")).await);
        assert!(!allowed(&l, "s3://other/train/", None).await);
        assert!(!allowed(&l, "s3://wholes/", None).await);
    }

    #[tokio::test]
    async fn dot_segments_and_percent_encoding_cannot_escape() {
        let l = list(&["s3://data/train/"]);
        for (dataset, shard) in [
            ("s3://data/train/../train-other/", None),
            ("s3://data/train/..", None),
            ("s3://data/train/./../secret/", None),
            ("s3://data/train//../../secret/", None),
            ("s3://data/train/", Some("../secret/x.tar")),
            ("s3://data/train/", Some("a/../../secret/x.tar")),
            ("s3://data/train/%2e%2e/secret/", None),
            ("s3://data/train/%2E%2E/secret/", None),
            ("s3://data/train/.%2e/secret/", None),
            ("s3://data/train/%2e%2e%2fsecret/", None),
            ("s3://data/train/%252e%252e/secret/", None),
            ("s3://data/train/", Some("%2e%2e/secret/x.tar")),
            ("s3://data/train/", Some("%2E%2E%2Fsecret%2Fx.tar")),
            ("s3://data/%74rain/", None),
            ("s3://data/train/%ff/", None),
            ("s3://data/train/%25252525252e/", None),
        ] {
            assert!(!allowed(&l, dataset, shard).await, "{dataset} {shard:?} allowed");
        }
        // Dots and escapes that stay inside are fine.
        assert!(allowed(&l, "s3://data/train/a/../b/", None).await);
        assert!(allowed(&l, "s3://data/train/", Some("a%20b.tar")).await);
        assert!(allowed(&l, "s3://data/train/", Some("x.y.tar")).await);
        // Climbing above the bucket is refused even where it is allowed whole.
        let whole = list(&["s3://data/"]);
        assert!(allowed(&whole, "s3://data/", None).await);
        assert!(!allowed(&whole, "s3://data/../other/", None).await);
        assert!(!allowed(&whole, "s3://data/", Some("%2e%2e/other/x.tar")).await);
    }

    #[test]
    fn refuses_unclear_prefixes() {
        for bad in [
            "s3://data/a/../b/",
            "s3://data/%2e/",
            "gs://b/p",
            "relative/dir",
            "",
            "s3:///x",
        ] {
            assert!(AllowList::new(&[bad]).is_err(), "{bad:?} accepted");
        }
        let err = AllowList::new(&["/no/such/stoker/folder"]).unwrap_err();
        assert!(err.to_string().contains("/no/such/stoker/folder"), "{err}");
        let file = tempfile::NamedTempFile::new().unwrap();
        assert!(AllowList::new(&[file.path().to_str().unwrap()]).is_err());
    }

    #[tokio::test]
    async fn local_folders_are_compared_resolved() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for d in ["allowed/ds", "allowed-other", "outside/ds", "allowed/%2e%2e"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("outside/ds/x.tar"), b"x").unwrap();
        std::fs::write(r.join("allowed/ds/x.tar"), b"x").unwrap();
        std::os::unix::fs::symlink(r.join("outside/ds"), r.join("allowed/link")).unwrap();
        std::os::unix::fs::symlink(r.join("outside/ds/x.tar"), r.join("allowed/ds/out.tar")).unwrap();
        std::os::unix::fs::symlink(r.join("allowed/ds"), r.join("inward")).unwrap();
        let allowed_dir = r.join("allowed");
        let l = list(&[allowed_dir.to_str().unwrap()]);
        let p = |rel: &str| format!("{}/{rel}", r.display());

        assert!(allowed(&l, &p("allowed"), None).await);
        assert!(allowed(&l, &p("allowed/ds"), None).await);
        assert!(allowed(&l, &format!("file://{}", p("allowed/ds/")), Some("x.tar")).await);
        assert!(allowed(&l, &p("allowed/ds/../ds"), None).await);
        // Not there yet, but inside: storage will say it does not exist.
        assert!(allowed(&l, &p("allowed/new/deeper"), None).await);
        // A symlink into the folder is read as the folder it points to.
        let uri = DatasetUri::parse(&p("inward")).unwrap();
        let resolved = l.check_dataset(&uri).await.unwrap();
        assert_eq!(
            resolved,
            DatasetUri::Local(std::fs::canonicalize(r.join("allowed/ds")).unwrap())
        );

        for (dataset, shard) in [
            (p("outside/ds"), None),
            (p("allowed-other"), None),
            (p("allowed/../outside/ds"), None),
            (p("allowed/missing/../../outside/ds"), None),
            (p("allowed/link"), None),
            (p("allowed/link/"), Some("x.tar")),
            (format!("file://{}", p("allowed/link")), None),
            (p("allowed/ds"), Some("out.tar")),
            (p("allowed/ds"), Some("../../outside/ds/x.tar")),
            (p("allowed/%2e%2e/outside/ds"), None),
            (p("allowed/ds"), Some("%2e%2e/%2e%2e/outside/ds/x.tar")),
            ("s3://allowed/ds/".to_owned(), None),
        ] {
            assert!(!allowed(&l, &dataset, shard).await, "{dataset} {shard:?} allowed");
        }
        let err = l
            .check_dataset(&DatasetUri::parse(&p("allowed/link")).unwrap())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&p("allowed/link")), "{err}");
        let err = l
            .check_shard(&DatasetUri::parse("s3://data/train/").unwrap(), "../x.tar")
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dataset s3://data/train/../x.tar is not under a prefix this worker allows (--allow-dataset)"
        );
    }

    #[test]
    fn key_readings_cover_literal_and_resolved_forms() {
        let r = key_readings("a/./b/../c/").unwrap();
        assert_eq!(
            r[0],
            KeyReading {
                segments: vec!["a".into(), ".".into(), "b".into(), "..".into(), "c".into()],
                folder: true
            }
        );
        assert_eq!(
            r[1],
            KeyReading {
                segments: vec!["a".into(), "c".into()],
                folder: true
            }
        );
        assert!(key_readings("../x").is_none());
        assert!(key_readings("%2e%2e/x").is_none());
    }
}
