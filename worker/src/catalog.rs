//! A dataset's catalogue: which of its files are shards, in which format,
//! and how many samples each holds.
//!
//! Counting samples takes both [`storage`](stoker_storage) (list the
//! files, read the indexes) and [`parquet`](crate::parquet) (read a
//! footer's row count), so it lives here, above both: `catalog` →
//! `parquet` → `storage`, and storage depends on neither. Counts come from
//! the dataset's index (`stoker-index.json`) when it has one; otherwise
//! from each shard's record index (RecordIO, TFRecord) or Parquet footer.
//!
//! [`list_shards`] gives a [`Listing`] (the shards, sorted, with their
//! format and counts); [`select_shards`] picks which listed files are
//! shards of the format asked for (`auto` refuses a mix). `service.rs`
//! (`DescribeDataset`), `pack` (`convert`) and `stoker bench` list through
//! it.

use std::collections::HashSet;

use futures::StreamExt;
use stoker_core::{DatasetUri, FormatChoice, ShardFormat, ShardRef};
use stoker_formats::image::is_image_file_name;

use crate::parquet::{self, ParquetShardError};
use stoker_storage::{PackReport, Storage, StorageError};

/// Record index files read at once while a listing counts samples.
const INDEX_READS_AT_ONCE: usize = 16;

/// A dataset's shards as [`list_shards`] found them.
#[derive(Debug)]
pub struct Listing {
    pub shards: Vec<ShardRef>,
    /// Every shard's sample count is known: from the dataset's index
    /// ([`INDEX_FILE`](stoker_storage::INDEX_FILE)) or from the shards'
    /// record indexes and Parquet footers.
    pub indexed: bool,
    pub format: ShardFormat,
    /// Class names by label, from the dataset's index (none without one).
    pub classes: Vec<String>,
    /// What `stoker pack` left out or flagged, from the dataset's index.
    pub pack_report: PackReport,
}

/// Keeps the shards among a listing's `files`. With a format given, the
/// files it [`ShardFormat::lists`]; with `auto`, the files whose extension
/// names a format, which must all name the same one (else an error naming
/// a file of each).
pub fn select_shards(
    files: Vec<ShardRef>,
    choice: FormatChoice,
    uri: &str,
) -> Result<(Vec<ShardRef>, ShardFormat), StorageError> {
    let (shards, format) = match choice {
        FormatChoice::Given(format) => (files.into_iter().filter(|f| format.lists(&f.name)).collect(), format),
        FormatChoice::Auto => {
            let mut found: Option<(ShardFormat, String)> = None;
            let mut shards = Vec::new();
            for file in files {
                let Some(format) = ShardFormat::from_name(&file.name) else {
                    continue;
                };
                match &found {
                    Some((first_format, first)) if *first_format != format => {
                        return Err(StorageError::MixedFormats {
                            uri: uri.to_owned(),
                            first: first.clone(),
                            first_format: *first_format,
                            second: file.name,
                            second_format: format,
                        });
                    }
                    Some(_) => {}
                    None => found = Some((format, file.name.clone())),
                }
                shards.push(file);
            }
            (shards, found.map_or(ShardFormat::WebDataset, |(f, _)| f))
        }
    };
    if shards.is_empty() {
        let what = match choice {
            FormatChoice::Auto => format!(
                "looked for {}; extension-less TFRecord files need --format tfrecord",
                ShardFormat::ALL.map(ShardFormat::files).join(", ")
            ),
            FormatChoice::Given(ShardFormat::TfRecord) => {
                format!(
                    "looked for {} and files without an extension",
                    ShardFormat::TfRecord.files()
                )
            }
            FormatChoice::Given(format) => format!("looked for {}", format.files()),
        };
        return Err(StorageError::Empty {
            uri: uri.to_owned(),
            what,
        });
    }
    Ok((shards, format))
}

/// `what` a listing without shards found, and, when the place holds
/// `images` image files, that an image folder is packed first, and how.
fn with_pack_hint(what: String, images: usize, uri: &str) -> String {
    if images == 0 {
        return what;
    }
    format!(
        "{what}; it holds {images} image file(s): an image folder is packed into shards first, \
         with `stoker pack --input {uri} --output SHARDS_DIR`"
    )
}

/// The images one folder down in a local dataset folder (an ImageFolder's
/// class subfolders), for [`with_pack_hint`]; at most 10,000 entries are
/// looked at.
async fn images_in_subfolders(dir: &std::path::Path) -> usize {
    let (mut images, mut seen) = (0, 0);
    let Ok(mut top) = tokio::fs::read_dir(dir).await else {
        return 0;
    };
    while let Ok(Some(entry)) = top.next_entry().await {
        if !entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(mut sub) = tokio::fs::read_dir(entry.path()).await else {
            continue;
        };
        while let Ok(Some(file)) = sub.next_entry().await {
            seen += 1;
            if seen > 10_000 {
                return images;
            }
            if is_image_file_name(&file.file_name().to_string_lossy()) {
                images += 1;
            }
        }
    }
    images
}

/// The dataset's shards in `storage`, sorted by name, and their format:
/// from its index when it has one, from a listing otherwise, where
/// `choice` says which files are shards ([`select_shards`]). Listed shards
/// of a format with record indexes (RecordIO, TFRecord) take their sample
/// counts from the indexes beside them, Parquet shards from their
/// footers; the listing is indexed when every shard has a count.
pub async fn list_shards(storage: &Storage, uri: &DatasetUri, choice: FormatChoice) -> Result<Listing, StorageError> {
    if let Some(mut index) = storage.read_index(uri).await? {
        let classes = std::mem::take(&mut index.classes);
        let pack_report = std::mem::take(&mut index.pack_report);
        let (mut shards, format) = select_shards(index.into_shard_refs(), choice, &uri.to_string())?;
        shards.sort_by(|a, b| a.name.cmp(&b.name));
        return Ok(Listing {
            shards,
            indexed: true,
            format,
            classes,
            pack_report,
        });
    }
    let files = storage.list_files(uri).await?;
    let names: HashSet<String> = files.iter().map(|f| f.name.clone()).collect();
    let (mut shards, format) = match select_shards(files, choice, &uri.to_string()) {
        // Images where shards were expected: a folder never packed (a local
        // ImageFolder's images are one folder down).
        Err(StorageError::Empty { uri: shown, what }) => {
            let mut images = names.iter().filter(|n| is_image_file_name(n)).count();
            if let (0, DatasetUri::Local(dir)) = (images, uri) {
                images = images_in_subfolders(dir).await;
            }
            return Err(StorageError::Empty {
                what: with_pack_hint(what, images, &shown),
                uri: shown,
            });
        }
        r => r?,
    };
    shards.sort_by(|a, b| a.name.cmp(&b.name));
    // Parquet footers, and the record indexes the listing holds (no
    // request for the others).
    let countable: Vec<Option<(String, u64)>> = shards
        .iter()
        .map(|s| {
            let footer = format == ShardFormat::Parquet;
            let indexed = format.index_name(&s.name).is_some_and(|i| names.contains(&i));
            (footer || indexed).then(|| (s.name.clone(), s.size_bytes))
        })
        .collect();
    let counts = futures::stream::iter(countable.into_iter().map(|shard| async move {
        match shard {
            Some((name, size)) if format == ShardFormat::Parquet => parquet_rows(storage, uri, &name, size).await,
            Some((name, _)) => Ok(storage
                .record_offsets(uri, &name, format)
                .await?
                .map(|offsets| offsets.len() as u64)),
            None => Ok(None),
        }
    }))
    .buffered(INDEX_READS_AT_ONCE)
    .collect::<Vec<_>>()
    .await;
    for (shard, count) in shards.iter_mut().zip(counts) {
        shard.samples = count?;
    }
    let indexed = shards.iter().all(|s| s.samples.is_some());
    Ok(Listing {
        shards,
        indexed,
        format,
        classes: Vec::new(),
        pack_report: PackReport::default(),
    })
}

/// The rows of the Parquet shard `name`, from its footer; `None`, with
/// a warning, when the footer is unreadable (the shard's items then say
/// why).
async fn parquet_rows(storage: &Storage, uri: &DatasetUri, name: &str, size: u64) -> Result<Option<u64>, StorageError> {
    let object = storage.object_of_size(uri, name, size).await?;
    match parquet::row_count(object).await {
        Ok(rows) => Ok(Some(rows)),
        Err(ParquetShardError::Storage(e)) => Err(e),
        Err(e) => {
            tracing::warn!(shard = %uri.join(name), error = %e, "parquet footer unreadable: no sample count");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lists_local_tars_sorted_and_reports_missing_folder() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["b.tar", "a.tar", "notes.txt"] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let storage = Storage::new();
        let uri = DatasetUri::Local(dir.path().into());
        let listing = list_shards(&storage, &uri, FormatChoice::Auto).await.unwrap();
        assert!(!listing.indexed);
        assert_eq!(listing.format, ShardFormat::WebDataset);
        let names: Vec<_> = listing.shards.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a.tar", "b.tar"]);

        let missing = DatasetUri::Local(dir.path().join("nope"));
        let err = list_shards(&storage, &missing, FormatChoice::Auto).await.unwrap_err();
        assert!(matches!(err, StorageError::NotFound(_)), "{err}");
        assert!(err.to_string().contains("nope"));
    }
}
