//! `stoker pack`: an ImageFolder tree (one subfolder per class) to shards
//! of any format Stoker reads (WebDataset, TFRecord, RecordIO, Parquet),
//! each with its record index ([`writer`]), plus the dataset's index,
//! locally or on S3.
//!
//! Labels are the class folders' positions in sorted order, as torchvision's
//! `ImageFolder` assigns them. Each image becomes a sample keyed
//! `<class>/<stem>` with members `<key>.<ext>` and `<key>.cls`.

use std::path::{Path, PathBuf};

use stoker_core::{DatasetUri, ShardFormat};

use crate::storage::{INDEX_FILE, Index, IndexEntry, Storage, StorageError};
use writer::{RecordIndex, Sample, ShardWriter};

pub mod writer;

/// Why packing failed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("input folder {0} does not exist or is not a folder")]
    NoInput(PathBuf),
    #[error("input folder {0} has no class subfolders with images (jpg, jpeg, png)")]
    Empty(PathBuf),
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
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One image to pack.
#[derive(Debug, Clone)]
pub struct SourceImage {
    pub path: PathBuf,
    pub key: String,
    pub ext: String,
    pub label: i64,
    pub size: u64,
}

/// What `pack` produced.
#[derive(Debug)]
pub struct PackSummary {
    pub shards: usize,
    pub samples: u64,
    pub bytes: u64,
    pub classes: Vec<String>,
}

/// Lists an ImageFolder tree: class folders sorted, images sorted within.
pub fn scan_image_folder(input: &Path) -> Result<(Vec<SourceImage>, Vec<String>), PackError> {
    if !input.is_dir() {
        return Err(PackError::NoInput(input.to_owned()));
    }
    let mut classes: Vec<String> = std::fs::read_dir(input)
        .map_err(io_err(input))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    classes.sort();
    let mut images = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let dir = input.join(class);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for path in files {
            let Some(ext) = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()) else {
                continue;
            };
            if !matches!(ext.as_str(), "jpg" | "jpeg" | "png") {
                continue;
            }
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // A dot in the key would split it differently when read back.
            let key = format!("{}/{}", class.replace('.', "_"), stem.replace('.', "_"));
            let size = path.metadata().map_err(io_err(&path))?.len();
            images.push(SourceImage {
                path,
                key,
                ext,
                label: label as i64,
                size,
            });
        }
    }
    if images.is_empty() {
        return Err(PackError::Empty(input.to_owned()));
    }
    Ok((images, classes))
}

/// Packs `input` into `format` shards of about `shard_size` bytes under
/// `output`. `progress` is called after each shard with (samples done,
/// bytes done).
pub async fn pack(
    storage: &Storage,
    input: &Path,
    output: &DatasetUri,
    format: ShardFormat,
    shard_size: u64,
    progress: impl FnMut(u64, u64),
) -> Result<PackSummary, PackError> {
    let (images, classes) = scan_image_folder(input)?;
    pack_images(storage, &images, classes, output, format, shard_size, progress).await
}

/// Packs `images` (labels are positions in `classes`) into `format` shards
/// of about `shard_size` bytes under `output`, each with the record index
/// its format's tools write ([`writer`]), and the dataset's index.
pub async fn pack_images(
    storage: &Storage,
    images: &[SourceImage],
    classes: Vec<String>,
    output: &DatasetUri,
    format: ShardFormat,
    shard_size: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<PackSummary, PackError> {
    if shard_size < 1024 {
        return Err(PackError::ShardSize(shard_size));
    }
    storage.check_writable(output).await?;
    let staging = tempfile_dir()?;
    let mut entries: Vec<IndexEntry> = Vec::new();
    let mut done = 0u64;
    let mut bytes = 0u64;
    let mut start = 0;
    while start < images.len() {
        // Greedy: fill this shard up to shard_size (at least one sample).
        let mut end = start;
        let mut size = 0u64;
        while end < images.len() {
            let s = writer::sample_bytes(format, images[end].size, images[end].label);
            if end > start && size + s > shard_size {
                break;
            }
            size += s;
            end += 1;
        }
        let name = writer::shard_name(format, entries.len());
        let local = staging.path().join(&name);
        // Reading images and encoding the shard is blocking work.
        let job = (
            images[start..end].to_vec(),
            classes.clone(),
            local.clone(),
            name.clone(),
        );
        let written = tokio::task::spawn_blocking(move || {
            let (images, classes, local, name) = job;
            write_shard(format, &local, &name, &images, start as u64, &classes)
        })
        .await
        .map_err(|e| PackError::Io {
            path: local.clone(),
            source: std::io::Error::other(e),
        })??;
        storage.put_file(output, &name, &local).await?;
        if let Some(index) = written.index {
            let index_path = staging.path().join(&index.name);
            tokio::fs::write(&index_path, &index.text)
                .await
                .map_err(io_err(&index_path))?;
            storage.put_file(output, &index.name, &index_path).await?;
        }
        done += (end - start) as u64;
        bytes += written.image_bytes;
        progress(done, bytes);
        entries.push(IndexEntry {
            name,
            samples: (end - start) as u64,
            size_bytes: written.size,
        });
        start = end;
    }
    let index = Index {
        version: 1,
        shards: entries,
        classes: classes.clone(),
    };
    let index_path = staging.path().join(INDEX_FILE);
    let json = serde_json::to_vec_pretty(&index).map_err(|e| PackError::Io {
        path: index_path.clone(),
        source: std::io::Error::other(e),
    })?;
    tokio::fs::write(&index_path, json).await.map_err(io_err(&index_path))?;
    storage.put_file(output, INDEX_FILE, &index_path).await?;
    Ok(PackSummary {
        shards: index.shards.len(),
        samples: done,
        bytes,
        classes,
    })
}

/// The shard `name` of `images` (the first numbered `first_id`) at `path`:
/// its size, its record index, and the image bytes it holds.
fn write_shard(
    format: ShardFormat,
    path: &Path,
    name: &str,
    images: &[SourceImage],
    first_id: u64,
    classes: &[String],
) -> Result<WrittenShard, PackError> {
    let mut shard = ShardWriter::create(format, path, classes)?;
    let mut image_bytes = 0u64;
    for (i, img) in images.iter().enumerate() {
        let data = std::fs::read(&img.path).map_err(io_err(&img.path))?;
        shard.add(&Sample {
            key: &img.key,
            ext: &img.ext,
            data: &data,
            label: img.label,
            id: first_id + i as u64,
        })?;
        image_bytes += data.len() as u64;
    }
    let (size, index) = shard.finish(name)?;
    Ok(WrittenShard {
        size,
        index,
        image_bytes,
    })
}

/// What [`write_shard`] wrote.
struct WrittenShard {
    /// The shard's bytes.
    size: u64,
    index: Option<RecordIndex>,
    /// The images' bytes in it.
    image_bytes: u64,
}

fn tempfile_dir() -> Result<tempfile::TempDir, PackError> {
    tempfile::tempdir().map_err(io_err(&std::env::temp_dir()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn packs_an_image_folder_into_indexed_shards() {
        let input = tempfile::tempdir().unwrap();
        for (class, n) in [("cat", 3), ("dog", 4)] {
            std::fs::create_dir(input.path().join(class)).unwrap();
            for i in 0..n {
                std::fs::write(
                    input.path().join(class).join(format!("im.{i}.jpg")),
                    vec![i as u8; 3000],
                )
                .unwrap();
            }
        }
        std::fs::write(input.path().join("cat/readme.txt"), b"ignored").unwrap();
        let out = tempfile::tempdir().unwrap();
        let uri = DatasetUri::Local(out.path().into());
        let storage = Storage::new();
        let summary = pack(&storage, input.path(), &uri, ShardFormat::WebDataset, 10_000, |_, _| {})
            .await
            .unwrap();
        assert_eq!(summary.samples, 7);
        assert_eq!(summary.classes, ["cat", "dog"]);
        assert!(summary.shards >= 3, "{} shards", summary.shards);
        let listing = storage
            .list_shards(&uri, stoker_core::FormatChoice::Auto)
            .await
            .unwrap();
        let (shards, indexed) = (listing.shards, listing.indexed);
        assert!(indexed);
        assert_eq!(shards.iter().map(|s| s.samples.unwrap()).sum::<u64>(), 7);

        let mut keys = Vec::new();
        for s in &shards {
            let r = storage.open(&uri, &s.name).await.unwrap();
            let mut samples = crate::wds::SampleReader::new(r, 1 << 20);
            while let Some(raw) = samples.next_sample().await.unwrap() {
                keys.push((raw.key, raw.label.unwrap()));
            }
        }
        assert_eq!(keys.len(), 7);
        assert_eq!(keys[0], ("cat/im_0".to_owned(), 0));
        assert_eq!(keys[6], ("dog/im_3".to_owned(), 1));
    }

    #[tokio::test]
    async fn refuses_missing_or_empty_input() {
        let storage = Storage::new();
        let uri = DatasetUri::Local("/tmp/stoker-never".into());
        let err = pack(
            &storage,
            Path::new("/nonexistent/x"),
            &uri,
            ShardFormat::WebDataset,
            1 << 20,
            |_, _| {},
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
        let empty = tempfile::tempdir().unwrap();
        let err = pack(
            &storage,
            empty.path(),
            &uri,
            ShardFormat::WebDataset,
            1 << 20,
            |_, _| {},
        )
        .await
        .unwrap_err();
        assert!(matches!(err, PackError::Empty(_)), "{err}");
    }
}
