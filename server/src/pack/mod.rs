//! `stoker pack`: an ImageFolder tree (one subfolder per class), or a
//! dataset in any format Stoker reads ([`convert`]), to shards of any
//! format (WebDataset, TFRecord, RecordIO, Parquet), each with its record
//! index ([`writer`]), plus the dataset's index, locally or on S3.
//!
//! Labels are the class folders' positions in sorted order, as torchvision's
//! `ImageFolder` assigns them. Each image becomes a sample keyed
//! `<class>/<stem>` with members `<key>.<ext>` and `<key>.cls`.

use std::path::{Path, PathBuf};

use stoker_core::{DatasetUri, FormatChoice, RecordFields, ShardFormat};
use stoker_formats::image::{ImageKind, is_image_file_name};

use crate::pipeline::{ItemSamples, ShardRead};

use crate::storage::{INDEX_FILE, Index, IndexEntry, Storage};
use error::io_err;
use writer::{RecordIndex, Sample, ShardWriter};

mod error;
pub mod writer;

pub use error::PackError;

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
    /// Samples of the input left out (`convert`), each with its reason.
    pub skipped: Vec<String>,
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
            if !is_image_file_name(&path.to_string_lossy()) {
                continue;
            }
            let Some(ext) = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()) else {
                continue;
            };
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

/// Why a local folder that is no ImageFolder is no dataset to convert
/// either, in words a newcomer can act on: images directly in it
/// ([`PackError::Flat`]) or nothing at all ([`PackError::EmptyFolder`]).
/// `None` when it may hold shards (the converter then says what it found).
pub fn layout_error(input: &Path) -> Option<PackError> {
    let entries: Vec<PathBuf> = std::fs::read_dir(input)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    if entries.is_empty() {
        return Some(PackError::EmptyFolder(input.to_owned()));
    }
    let images = entries
        .iter()
        .filter(|p| p.is_file() && is_image_file_name(&p.to_string_lossy()))
        .count();
    (images > 0).then(|| PackError::Flat {
        dir: input.to_owned(),
        images,
    })
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
    let mut sink = ShardSink::new(storage, output, format, shard_size, classes).await?;
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
        sink.put(ShardInput::Files(images[start..end].to_vec())).await?;
        progress(sink.samples, sink.image_bytes);
        start = end;
    }
    sink.finish().await
}

/// What a shard is written from: image files, or samples read from a
/// dataset.
enum ShardInput {
    Files(Vec<SourceImage>),
    Samples(Vec<OwnedSample>),
}

impl ShardInput {
    fn len(&self) -> usize {
        match self {
            Self::Files(f) => f.len(),
            Self::Samples(s) => s.len(),
        }
    }
}

/// A sample read from a dataset, to write again.
struct OwnedSample {
    key: String,
    ext: &'static str,
    data: bytes::Bytes,
    label: i64,
}

/// The shards written so far under `output`, and the staging folder they
/// pass through.
struct ShardSink<'a> {
    storage: &'a Storage,
    output: &'a DatasetUri,
    format: ShardFormat,
    classes: Vec<String>,
    staging: tempfile::TempDir,
    entries: Vec<IndexEntry>,
    samples: u64,
    image_bytes: u64,
}

impl<'a> ShardSink<'a> {
    async fn new(
        storage: &'a Storage,
        output: &'a DatasetUri,
        format: ShardFormat,
        shard_size: u64,
        classes: Vec<String>,
    ) -> Result<Self, PackError> {
        if shard_size < 1024 {
            return Err(PackError::ShardSize(shard_size));
        }
        storage.check_writable(output).await?;
        Ok(Self {
            storage,
            output,
            format,
            classes,
            staging: tempfile_dir()?,
            entries: Vec::new(),
            samples: 0,
            image_bytes: 0,
        })
    }

    /// Writes one shard of `input` (blocking work, off the runtime) and
    /// uploads it with its record index.
    async fn put(&mut self, input: ShardInput) -> Result<(), PackError> {
        let name = writer::shard_name(self.format, self.entries.len());
        let local = self.staging.path().join(&name);
        let count = input.len() as u64;
        let job = (
            self.format,
            local.clone(),
            name.clone(),
            self.samples,
            self.classes.clone(),
        );
        let written = tokio::task::spawn_blocking(move || {
            let (format, local, name, first_id, classes) = job;
            write_shard(format, &local, &name, input, first_id, &classes)
        })
        .await
        .map_err(|e| PackError::Io {
            path: local.clone(),
            source: std::io::Error::other(e),
        })??;
        self.storage.put_file(self.output, &name, &local).await?;
        if let Some(index) = written.index {
            let index_path = self.staging.path().join(&index.name);
            tokio::fs::write(&index_path, &index.text)
                .await
                .map_err(io_err(&index_path))?;
            self.storage.put_file(self.output, &index.name, &index_path).await?;
        }
        self.samples += count;
        self.image_bytes += written.image_bytes;
        self.entries.push(IndexEntry {
            name,
            samples: count,
            size_bytes: written.size,
        });
        Ok(())
    }

    /// Writes the dataset's index.
    async fn finish(self) -> Result<PackSummary, PackError> {
        let index = Index {
            version: 1,
            shards: self.entries,
            classes: self.classes.clone(),
        };
        let index_path = self.staging.path().join(INDEX_FILE);
        let json = serde_json::to_vec_pretty(&index).map_err(|e| PackError::Io {
            path: index_path.clone(),
            source: std::io::Error::other(e),
        })?;
        tokio::fs::write(&index_path, json).await.map_err(io_err(&index_path))?;
        self.storage.put_file(self.output, INDEX_FILE, &index_path).await?;
        Ok(PackSummary {
            shards: index.shards.len(),
            samples: self.samples,
            bytes: self.image_bytes,
            classes: self.classes,
            skipped: Vec::new(),
        })
    }
}

/// The shard `name` of `input` (its first sample numbered `first_id`) at
/// `path`: its size, its record index, and the image bytes it holds.
fn write_shard(
    format: ShardFormat,
    path: &Path,
    name: &str,
    input: ShardInput,
    first_id: u64,
    classes: &[String],
) -> Result<WrittenShard, PackError> {
    let mut shard = ShardWriter::create(format, path, classes)?;
    let mut image_bytes = 0u64;
    let mut add = |i: usize, key: &str, ext: &str, data: &[u8], label: i64| {
        image_bytes += data.len() as u64;
        shard.add(&Sample {
            key,
            ext,
            data,
            label,
            id: first_id + i as u64,
        })
    };
    match input {
        ShardInput::Files(images) => {
            for (i, img) in images.iter().enumerate() {
                let data = std::fs::read(&img.path).map_err(io_err(&img.path))?;
                add(i, &img.key, &img.ext, &data, img.label)?;
            }
        }
        ShardInput::Samples(samples) => {
            for (i, s) in samples.iter().enumerate() {
                add(i, &s.key, s.ext, &s.data, s.label)?;
            }
        }
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

/// Where `convert` reads: a dataset in any format Stoker reads.
#[derive(Clone, Debug)]
pub struct ConvertFrom {
    pub dataset: DatasetUri,
    pub format: FormatChoice,
    pub fields: RecordFields,
}

/// Converts the dataset `from` into `format` shards of about `shard_size`
/// bytes under `output`, with their record indexes and the dataset index
/// (class names carried over when the input's index has them). Every
/// sample keeps its key, image bytes and label (plus `--label-offset`). A
/// sample the readers skip (not an image, a corrupt record...) is left out
/// and listed in the summary with its reason; a shard that cannot be read
/// to its end stops the conversion, naming it.
pub async fn convert(
    storage: &Storage,
    from: &ConvertFrom,
    output: &DatasetUri,
    format: ShardFormat,
    shard_size: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<PackSummary, PackError> {
    let listing = crate::catalog::list_shards(storage, &from.dataset, from.format).await?;
    let mut sink = ShardSink::new(storage, output, format, shard_size, listing.classes.clone()).await?;
    let mut pending: Vec<OwnedSample> = Vec::new();
    let mut pending_bytes = 0u64;
    let mut skipped = Vec::new();
    for shard in &listing.shards {
        let read = ShardRead {
            dataset: &from.dataset,
            shard: &shard.name,
            format: listing.format,
            fields: &from.fields,
            extra: &[],
            start: 0,
            end: None,
            max_member_bytes: crate::pipeline::DEFAULT_MAX_MEMBER_BYTES,
            row_group_limit: crate::parquet::RowGroupLimit::Fixed(crate::parquet::MAX_ROW_GROUP_BYTES),
        };
        let mut samples = ItemSamples::open_shard(read, storage).await?;
        loop {
            let raw = match samples.next_sample().await {
                Ok(Some(raw)) => raw,
                Ok(None) => break,
                Err(e) => {
                    return Err(PackError::Unreadable {
                        shard: from.dataset.join(&shard.name),
                        reason: e.to_string(),
                    });
                }
            };
            let (kind, data, label) = match (raw.image, raw.label) {
                (Ok((kind, data)), Ok(label)) => (kind, data, label),
                (Err(problem), _) => {
                    skipped.push(format!("{}: {problem}", raw.key));
                    continue;
                }
                (_, Err(reason)) => {
                    skipped.push(format!("{}: {reason}", raw.key));
                    continue;
                }
            };
            let size = writer::sample_bytes(format, data.len() as u64, label);
            if !pending.is_empty() && pending_bytes + size > shard_size {
                sink.put(ShardInput::Samples(std::mem::take(&mut pending))).await?;
                pending_bytes = 0;
                progress(sink.samples, sink.image_bytes);
            }
            pending_bytes += size;
            pending.push(OwnedSample {
                key: raw.key,
                ext: match kind {
                    ImageKind::Jpeg => "jpg",
                    ImageKind::Png => "png",
                },
                data,
                label,
            });
        }
    }
    if !pending.is_empty() {
        sink.put(ShardInput::Samples(pending)).await?;
        progress(sink.samples, sink.image_bytes);
    }
    if sink.samples == 0 {
        return Err(PackError::NothingToConvert {
            dataset: from.dataset.to_string(),
            skipped: skipped.len(),
        });
    }
    let mut summary = sink.finish().await?;
    summary.skipped = skipped;
    Ok(summary)
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
        let listing = crate::catalog::list_shards(&storage, &uri, stoker_core::FormatChoice::Auto)
            .await
            .unwrap();
        let (shards, indexed) = (listing.shards, listing.indexed);
        assert!(indexed);
        assert_eq!(shards.iter().map(|s| s.samples.unwrap()).sum::<u64>(), 7);

        let mut keys = Vec::new();
        for s in &shards {
            let r = storage.open(&uri, &s.name).await.unwrap();
            let mut samples = stoker_formats::wds::SampleReader::new(r, 1 << 20);
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

    #[test]
    fn a_flat_or_empty_folder_is_told_the_layout_pack_expects() {
        let dir = tempfile::tempdir().unwrap();
        let err = layout_error(dir.path()).unwrap().to_string();
        assert!(
            err.contains("is empty") && err.contains("one subfolder per class"),
            "{err}"
        );
        std::fs::write(dir.path().join("a.jpg"), b"x").unwrap();
        std::fs::write(dir.path().join("b.PNG"), b"x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let err = layout_error(dir.path()).unwrap().to_string();
        let path = dir.path().display().to_string();
        assert!(err.contains("holds 2 image(s) but no class subfolders"), "{err}");
        assert!(err.contains(&format!("mkdir {path}/all")), "{err}");
        // Shards (or anything else): the converter's to judge.
        let shards = tempfile::tempdir().unwrap();
        std::fs::write(shards.path().join("shard-0.tar"), b"x").unwrap();
        assert!(layout_error(shards.path()).is_none());
    }
}
