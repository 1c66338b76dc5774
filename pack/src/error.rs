//! [`PackError`], why packing failed, and `io_err`, which names the file
//! an I/O error is about: below `pack` and its shard `writer`, which both
//! fail with them.

use std::path::{Path, PathBuf};

use stoker_storage::StorageError;

/// Why packing failed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("input folder {0} does not exist or is not a folder")]
    NoInput(PathBuf),
    #[error("input folder {0} has no class subfolders with images (jpg, jpeg, png)")]
    Empty(PathBuf),
    /// Images directly in the input, no class subfolders.
    #[error(
        "input folder {dir} holds {images} image(s) but no class subfolders: stoker pack expects one subfolder \
         per class, as torchvision's ImageFolder ({dir}/cat/1.jpg, {dir}/dog/2.jpg); to pack a flat folder as one \
         class, move its images into a subfolder (mkdir {dir}/all && mv {dir}/*.* {dir}/all/)"
    )]
    Flat { dir: PathBuf, images: usize },
    /// Nothing in the input at all.
    #[error(
        "input folder {0} is empty: stoker pack expects one subfolder per class of images (jpg, jpeg, png), \
         or shards to convert"
    )]
    EmptyFolder(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("shard size must be at least 1 KiB, got {0}")]
    ShardSize(u64),
    /// A shard of the input that cannot be read to its end.
    #[error("cannot read {shard} to its end: {reason}")]
    Unreadable { shard: String, reason: String },
    /// Every file of the input was left out.
    #[error("nothing packed: {0}")]
    NothingPacked(String),
    #[error("{dataset} holds no sample to convert ({skipped} skipped)")]
    NothingToConvert { dataset: String, skipped: usize },
    /// A detection dataset's annotations that cannot be read at all (not
    /// JSON, no `images`, a `data.yaml` without `names`...). One bad
    /// annotation is no such error: its image is left out and reported.
    #[error("{file}: {why}")]
    Annotations { file: PathBuf, why: String },
    /// RecordIO's records hold an image and a label array, no targets.
    #[error("recordio has no place for detection targets: pack a detection dataset as wds, tfrecord or parquet")]
    TargetsInRecordIo,
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_owned(),
        source,
    }
}
