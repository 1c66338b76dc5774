//! Datasets in a local folder: its files are listed (which are shards is
//! the catalog's choice) and read through a buffered reader; uploads are
//! renamed (or copied) into place.

use std::path::{Path, PathBuf};

use stoker_core::ShardRef;

use super::{ShardReader, StorageError};

/// How opening (or looking at) the file `object` failed: missing, or
/// another I/O error.
pub(super) fn open_error(object: &str) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::NotFound(object.to_owned())
        } else {
            StorageError::Io {
                object: object.to_owned(),
                source,
            }
        }
    }
}

/// Opens the shard `name` in `dir`, its bytes from `start` up to `end`
/// (exclusive; `None`: its end); `object` names it in errors.
pub(super) async fn open(
    dir: &Path,
    name: &str,
    (start, end): (u64, Option<u64>),
    object: String,
) -> Result<ShardReader, StorageError> {
    let path = safe_join(dir, name).ok_or_else(|| StorageError::NotFound(object.clone()))?;
    let mut file = tokio::fs::File::open(&path).await.map_err(open_error(&object))?;
    if start > 0 {
        use tokio::io::AsyncSeekExt;
        file.seek(std::io::SeekFrom::Start(start))
            .await
            .map_err(|source| StorageError::Io { object, source })?;
    }
    let file = tokio::io::BufReader::with_capacity(1 << 20, file);
    Ok(match end {
        Some(end) => {
            use tokio::io::AsyncReadExt;
            Box::pin(file.take(end.saturating_sub(start)))
        }
        None => Box::pin(file),
    })
}

/// The whole file `name` in the folder `dir`, or `None` when the folder is
/// there but the file is not.
pub(super) async fn read_if_exists(dir: &Path, name: &str, object: &str) -> Result<Option<Vec<u8>>, StorageError> {
    if !dir.is_dir() {
        return Err(StorageError::NotFound(format!("folder {}", dir.display())));
    }
    match tokio::fs::read(dir.join(name)).await {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StorageError::Io {
            object: object.to_owned(),
            source,
        }),
    }
}

/// Moves the finished file at `path` to `name` in `dir` (copies it when it
/// cannot be renamed, across file systems say).
pub(super) async fn put(dir: &Path, name: &str, path: &Path, object: String) -> Result<(), StorageError> {
    let dest = dir.join(name);
    create_dir(dir).await?;
    if tokio::fs::rename(path, &dest).await.is_err() {
        tokio::fs::copy(path, &dest)
            .await
            .map_err(|source| StorageError::Io { object, source })?;
    }
    Ok(())
}

/// Creates the dataset folder `dir` (and its parents) if need be.
pub(super) async fn create_dir(dir: &Path) -> Result<(), StorageError> {
    tokio::fs::create_dir_all(dir).await.map_err(|source| StorageError::Io {
        object: dir.display().to_string(),
        source,
    })
}

/// Joins a shard name to a dataset folder, refusing names that climb out.
pub(super) fn safe_join(dir: &Path, name: &str) -> Option<PathBuf> {
    let rel = Path::new(name);
    let ok = rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    ok.then(|| dir.join(rel))
}

/// The files in a dataset folder, in no order (the caller keeps the
/// shards).
pub(super) async fn list(dir: &Path) -> Result<Vec<ShardRef>, StorageError> {
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
    use stoker_core::DatasetUri;

    use super::*;
    use crate::Storage;

    #[test]
    fn refuses_names_that_climb_out() {
        let d = Path::new("/data");
        assert!(safe_join(d, "a.tar").is_some());
        assert!(safe_join(d, "sub/a.tar").is_some());
        assert!(safe_join(d, "../a.tar").is_none());
        assert!(safe_join(d, "/etc/passwd").is_none());
    }

    #[tokio::test]
    async fn lists_every_file_and_reports_missing_folder() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["b.tar", "a.tar", "notes.txt"] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let storage = Storage::new();
        let uri = DatasetUri::Local(dir.path().into());
        let mut names: Vec<_> = storage
            .list_files(&uri)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        names.sort();
        assert_eq!(names, ["a.tar", "b.tar", "notes.txt"]);

        let missing = DatasetUri::Local(dir.path().join("nope"));
        let err = storage.list_files(&missing).await.unwrap_err();
        assert!(matches!(err, StorageError::NotFound(_)), "{err}");
        assert!(err.to_string().contains("nope"));
    }
}
