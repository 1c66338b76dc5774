//! `stoker pack`: an ImageFolder tree (one subfolder per class), a
//! dataset in any format Stoker reads ([`convert`]), or a detection
//! dataset (COCO, YOLO, Hugging Face: [`detection`]), to shards of any
//! format (WebDataset, TFRecord, RecordIO, Parquet; detection targets in
//! all but RecordIO), each with its record index ([`writer`]), plus the
//! dataset's index, locally or on S3.
//!
//! Labels are the class folders' positions in sorted order, as torchvision's
//! `ImageFolder` assigns them. Each image becomes a sample keyed
//! `<class>/<stem>` with members `<key>.<ext>` and `<key>.cls`.
//!
//! Each image's bytes pass a header check as they are packed ([`inspect`]):
//! a file that is no image (by name, by contents, or empty) is left out,
//! an image every worker would skip (truncated, no readable header) is
//! packed and flagged; both are counted by reason in the summary and in
//! the dataset's index ([`PackReport`]), where workers and `stoker doctor`
//! read them. [`check_image_folder`] finds the same before packing, for
//! `stoker pack --strict`.
//!
//! [`convert`] reads through the worker's own readers
//! (`stoker_worker::pipeline::ItemSamples::open_shard`, `catalog`,
//! `parquet`), so that a dataset converts exactly as workers read it: this
//! crate is a tool above the worker, never below it. The worker does not
//! depend on it, not even in its tests, which write their shard fixtures
//! by hand (`stoker-formats`' tar framing, the parquet crate), so a reader
//! is checked against bytes that this crate's [`writer`] did not make. The
//! [`PackReport`] type lives beside the dataset index (`stoker-storage`'s
//! `index.rs`); `DescribeDataset` carries its lines to clients.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

use std::path::Path;

use stoker_core::{DatasetUri, FormatChoice, RecordFields, ShardFormat};
use stoker_formats::image::ImageKind;

use stoker_worker::pipeline::{ItemSamples, ShardRead};

use error::io_err;
use stoker_storage::{INDEX_FILE, Index, IndexEntry, PackReport, Problems, Storage};
use writer::{Carries, RecordIndex, Sample, ShardWriter};

pub mod detection;
mod error;
mod scan;
pub mod writer;

pub use detection::{DEFAULT_HF_BOX_FORMAT, DetectionSource, check_detection, pack_detection};
pub use error::PackError;
use scan::NOT_AN_IMAGE_NAME;
pub use scan::{ImageFolder, SourceImage, check_image_folder, layout_error, scan_image_folder};
use scan::{Inspection, inspect};

/// What `pack` produced.
#[derive(Debug)]
pub struct PackSummary {
    pub shards: usize,
    pub samples: u64,
    pub bytes: u64,
    pub classes: Vec<String>,
    /// What was left out of the input or packed with a flag, by reason.
    pub report: PackReport,
    /// Detection boxes a hair outside their image, clamped onto it
    /// ([`detection::CLAMP_PX`]).
    pub clamped: Problems,
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
    let folder = scan_image_folder(input)?;
    // Files not named as images are never read, only reported.
    let mut report = PackReport::default();
    for path in &folder.not_images {
        report.left_out.add(&path.display().to_string(), NOT_AN_IMAGE_NAME);
    }
    let mut sink = ShardSink::new(storage, output, format, shard_size, folder.classes, Carries::Labels).await?;
    sink.report = report;
    put_images(&mut sink, &folder.images, shard_size, progress).await?;
    sink.finish().await
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
    progress: impl FnMut(u64, u64),
) -> Result<PackSummary, PackError> {
    let mut sink = ShardSink::new(storage, output, format, shard_size, classes, Carries::Labels).await?;
    put_images(&mut sink, images, shard_size, progress).await?;
    sink.finish().await
}

/// Writes `images` into `sink`'s shards of about `shard_size` bytes.
async fn put_images(
    sink: &mut ShardSink<'_>,
    images: &[SourceImage],
    shard_size: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<(), PackError> {
    let format = sink.format;
    let mut start = 0;
    while start < images.len() {
        // Greedy: fill this shard up to shard_size (at least one sample).
        let mut end = start;
        let mut size = 0u64;
        while end < images.len() {
            let s = writer::sample_bytes(format, images[end].size, writer::label_bytes(images[end].label));
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
    Ok(())
}

/// What a shard is written from: image files, or samples read from a
/// dataset.
enum ShardInput {
    Files(Vec<SourceImage>),
    Samples(Vec<OwnedSample>),
}

/// A sample read from a dataset, or a detection dataset's image with its
/// targets, to write.
struct OwnedSample {
    key: String,
    ext: &'static str,
    data: bytes::Bytes,
    label: Option<i64>,
    targets: Option<Vec<u8>>,
}

/// The shards written so far under `output`, and the staging folder they
/// pass through.
struct ShardSink<'a> {
    storage: &'a Storage,
    output: &'a DatasetUri,
    format: ShardFormat,
    classes: Vec<String>,
    carries: Carries,
    staging: tempfile::TempDir,
    entries: Vec<IndexEntry>,
    samples: u64,
    image_bytes: u64,
    /// What was left out or flagged so far.
    report: PackReport,
}

impl<'a> ShardSink<'a> {
    async fn new(
        storage: &'a Storage,
        output: &'a DatasetUri,
        format: ShardFormat,
        shard_size: u64,
        classes: Vec<String>,
        carries: Carries,
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
            carries,
            staging: tempfile_dir()?,
            entries: Vec::new(),
            samples: 0,
            image_bytes: 0,
            report: PackReport::default(),
        })
    }

    /// Writes one shard of `input` (blocking work, off the runtime) and
    /// uploads it with its record index.
    async fn put(&mut self, input: ShardInput) -> Result<(), PackError> {
        let name = writer::shard_name(self.format, self.entries.len());
        let local = self.staging.path().join(&name);
        let job = (
            (self.format, self.carries),
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
        self.report.merge(written.report);
        // Every file of it left out: no shard (the next takes its name).
        if written.samples == 0 {
            return Ok(());
        }
        self.storage.put_file(self.output, &name, &local).await?;
        if let Some(index) = written.index {
            let index_path = self.staging.path().join(&index.name);
            tokio::fs::write(&index_path, &index.text)
                .await
                .map_err(io_err(&index_path))?;
            self.storage.put_file(self.output, &index.name, &index_path).await?;
        }
        self.samples += written.samples;
        self.image_bytes += written.image_bytes;
        self.entries.push(IndexEntry {
            name,
            samples: written.samples,
            size_bytes: written.size,
        });
        Ok(())
    }

    /// Writes the dataset's index.
    async fn finish(self) -> Result<PackSummary, PackError> {
        if self.samples == 0 {
            return Err(PackError::NothingPacked(self.report.lines().join("; ")));
        }
        let index = Index {
            version: 1,
            shards: self.entries,
            classes: self.classes.clone(),
            pack_report: self.report.clone(),
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
            report: self.report,
            clamped: Problems::default(),
        })
    }
}

/// The shard `name` of `input` (its first sample numbered `first_id`) at
/// `path`: its size, its record index, and the image bytes it holds.
fn write_shard(
    (format, carries): (ShardFormat, Carries),
    path: &Path,
    name: &str,
    input: ShardInput,
    first_id: u64,
    classes: &[String],
) -> Result<WrittenShard, PackError> {
    let mut shard = ShardWriter::create(format, path, classes, carries)?;
    let mut image_bytes = 0u64;
    let mut samples = 0u64;
    let mut add = |key: &str, ext: &str, data: &[u8], label: Option<i64>, targets: Option<&[u8]>| {
        image_bytes += data.len() as u64;
        samples += 1;
        shard.add(&Sample {
            key,
            ext,
            data,
            label,
            targets,
            id: first_id + samples - 1,
        })
    };
    let mut report = PackReport::default();
    match input {
        ShardInput::Files(images) => {
            for img in &images {
                let data = std::fs::read(&img.path).map_err(io_err(&img.path))?;
                let shown = || img.path.display().to_string();
                match inspect(&data) {
                    Inspection::LeftOut(reason) => {
                        report.left_out.add(&shown(), reason);
                        continue;
                    }
                    Inspection::Flagged(reason) => report.flagged.add(&shown(), reason),
                    Inspection::Good => {}
                }
                add(&img.key, &img.ext, &data, Some(img.label), None)?;
            }
        }
        ShardInput::Samples(converted) => {
            for s in &converted {
                add(&s.key, s.ext, &s.data, s.label, s.targets.as_deref())?;
            }
        }
    }
    let (size, index) = shard.finish(name)?;
    Ok(WrittenShard {
        size,
        index,
        image_bytes,
        samples,
        report,
    })
}

/// What [`write_shard`] wrote.
struct WrittenShard {
    /// The shard's bytes.
    size: u64,
    index: Option<RecordIndex>,
    /// The images' bytes in it.
    image_bytes: u64,
    /// The samples in it.
    samples: u64,
    /// Its input's files left out or flagged.
    report: PackReport,
}

/// Where `convert` reads: a dataset in any format Stoker reads.
#[derive(Clone, Debug)]
pub struct ConvertFrom {
    pub dataset: DatasetUri,
    pub format: FormatChoice,
    pub record: RecordFields,
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
    let listing = stoker_worker::catalog::list_shards(storage, &from.dataset, from.format).await?;
    let mut sink = ShardSink::new(
        storage,
        output,
        format,
        shard_size,
        listing.classes.clone(),
        Carries::Labels,
    )
    .await?;
    let mut pending: Vec<OwnedSample> = Vec::new();
    let mut pending_bytes = 0u64;
    let mut skipped = PackReport::default();
    for shard in &listing.shards {
        let read = ShardRead {
            dataset: &from.dataset,
            shard: &shard.name,
            format: listing.format,
            record: &from.record,
            fields: &[],
            start: 0,
            end: None,
            max_member_bytes: stoker_worker::pipeline::DEFAULT_MAX_MEMBER_BYTES,
            row_group_limit: stoker_worker::parquet::RowGroupLimit::Fixed(stoker_worker::parquet::MAX_ROW_GROUP_BYTES),
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
                    skipped.left_out.add(&raw.key, &problem.to_string());
                    continue;
                }
                (_, Err(reason)) => {
                    skipped.left_out.add(&raw.key, &reason.to_string());
                    continue;
                }
            };
            let size = writer::sample_bytes(format, data.len() as u64, writer::label_bytes(label));
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
                label: Some(label),
                targets: None,
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
            skipped: skipped.left_out.count as usize,
        });
    }
    // In the new dataset's index too.
    sink.report.merge(skipped);
    sink.finish().await
}

fn tempfile_dir() -> Result<tempfile::TempDir, PackError> {
    tempfile::tempdir().map_err(io_err(&std::env::temp_dir()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real JPEG of about 3 KB.
    fn jpeg(seed: u64) -> Vec<u8> {
        stoker_synth::encode_jpeg(&stoker_synth::procedural(64, 48, seed), 90).unwrap()
    }

    #[tokio::test]
    async fn packs_an_image_folder_into_indexed_shards() {
        let input = tempfile::tempdir().unwrap();
        let mut largest = 0;
        for (class, n) in [("cat", 3), ("dog", 4)] {
            std::fs::create_dir(input.path().join(class)).unwrap();
            for i in 0..n {
                let data = jpeg(i);
                largest = largest.max(data.len() as u64);
                std::fs::write(input.path().join(class).join(format!("im.{i}.jpg")), data).unwrap();
            }
        }
        std::fs::write(input.path().join("cat/.hidden.jpg"), b"a hidden file: not listed").unwrap();
        let out = tempfile::tempdir().unwrap();
        let uri = DatasetUri::Local(out.path().into());
        let storage = Storage::new();
        // About two samples a shard.
        let shard_size = 2 * largest + 2048;
        let summary = pack(
            &storage,
            input.path(),
            &uri,
            ShardFormat::WebDataset,
            shard_size,
            |_, _| {},
        )
        .await
        .unwrap();
        assert!(summary.report.is_empty(), "{:?}", summary.report);
        assert_eq!(summary.samples, 7);
        assert_eq!(summary.classes, ["cat", "dog"]);
        assert!(summary.shards >= 3, "{} shards", summary.shards);
        let listing = stoker_worker::catalog::list_shards(&storage, &uri, stoker_core::FormatChoice::Auto)
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

    #[tokio::test]
    async fn files_that_are_no_images_are_left_out_and_broken_images_flagged_in_the_report_and_index() {
        let input = tempfile::tempdir().unwrap();
        let class = input.path().join("cats");
        std::fs::create_dir(&class).unwrap();
        for i in 0..4 {
            std::fs::write(class.join(format!("good{i}.jpg")), jpeg(i)).unwrap();
        }
        let good = jpeg(9);
        std::fs::write(class.join("cut.jpg"), &good[..good.len() / 2]).unwrap();
        std::fs::write(class.join("empty.jpg"), b"").unwrap();
        std::fs::write(class.join("z.jpg"), b"this is text, not a jpeg").unwrap();
        std::fs::write(class.join("notes.txt"), b"notes").unwrap();
        std::fs::write(class.join(".DS_Store"), b"\0\0\0\x01Bud1").unwrap();
        let folder = scan_image_folder(input.path()).unwrap();
        assert_eq!(folder.images.len(), 7);
        assert_eq!(
            folder.not_images,
            [class.join("notes.txt")],
            "hidden files are not listed"
        );

        // --strict's check finds every problem before anything is written.
        let checked = check_image_folder(&folder).unwrap();
        assert_eq!((checked.left_out.count, checked.flagged.count), (3, 1), "{checked:?}");

        let out = tempfile::tempdir().unwrap();
        let uri = DatasetUri::Local(out.path().into());
        let storage = Storage::new();
        let summary = pack(
            &storage,
            input.path(),
            &uri,
            ShardFormat::WebDataset,
            1 << 20,
            |_, _| {},
        )
        .await
        .unwrap();
        assert_eq!(summary.samples, 5, "4 good images and the truncated one");
        let report = &summary.report;
        assert_eq!(report, &checked);
        let reasons: Vec<(&str, u64)> = report
            .left_out
            .by_reason
            .iter()
            .map(|(r, n)| (r.as_str(), *n))
            .collect();
        assert_eq!(
            reasons,
            [
                ("empty file", 1),
                ("not a jpeg or png (by its contents)", 1),
                (NOT_AN_IMAGE_NAME, 1)
            ]
        );
        assert_eq!(
            report.flagged.first,
            [format!(
                "{}: truncated jpeg (no end-of-image marker after its last scan)",
                class.join("cut.jpg").display()
            )]
        );
        let lines = report.lines();
        assert!(
            lines[0].starts_with("stoker pack left out 3 file(s) of the input: 1 empty file"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("stoker pack packed 1 image(s) that workers will skip"),
            "{lines:?}"
        );
        // The index says the same, for workers and `stoker doctor`.
        let listing = stoker_worker::catalog::list_shards(&storage, &uri, FormatChoice::Auto)
            .await
            .unwrap();
        assert_eq!(&listing.pack_report, report);

        // Nothing but bad files: nothing packed, and why.
        let bad = tempfile::tempdir().unwrap();
        std::fs::create_dir(bad.path().join("a")).unwrap();
        std::fs::write(bad.path().join("a/x.jpg"), b"").unwrap();
        let out = tempfile::tempdir().unwrap();
        let err = pack(
            &storage,
            bad.path(),
            &DatasetUri::Local(out.path().into()),
            ShardFormat::WebDataset,
            1 << 20,
            |_, _| {},
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("nothing packed: stoker pack left out 1 file(s)"),
            "{err}"
        );
        assert!(!out.path().join(INDEX_FILE).exists());
    }
}
