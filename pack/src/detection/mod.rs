//! `stoker pack` of a detection dataset: COCO JSON ([`coco`]), YOLO
//! (Ultralytics' `data.yaml` and `labels/*.txt`, [`yolo`]) or Hugging
//! Face Parquet with an `objects` column ([`hf`]), to shards whose
//! samples each hold an image and its targets JSON, the schema
//! `stoker_core::targets::Targets::from_json` reads (written by
//! `Targets::to_dataset_json`), where a worker's `targets` field finds it
//! (`writer`'s [`Carries::Targets`]).
//!
//! Each reader lists the dataset's images with their annotations as
//! given ([`Annotated`]); [`place`] reads each image's header and builds
//! its targets through core's `Targets` (one source of truth for what is
//! valid), so a packed sample is one a worker places. An image whose
//! annotations are bad (a box outside it, NaN, an unknown category...) is
//! left out and reported naming the image, the annotation and the
//! values; a box at most [`CLAMP_PX`] outside is clamped onto the image
//! and counted ([`PackSummary::clamped`]). [`check_detection`] finds the
//! same without writing, for `--strict`.
//!
//! Reading runs on one blocking thread, a bounded channel ahead of the
//! shard writer: memory holds the annotations and a shard's images.

use std::path::{Path, PathBuf};

use stoker_core::targets::BoxFormat;
use stoker_core::{DatasetUri, ShardFormat};
use stoker_storage::{PackReport, Problems, Storage};

use super::{Carries, OwnedSample, PackSummary, ShardInput, ShardSink, writer};
use crate::error::PackError;
use types::{Annotated, ImageSource, Listing, Problem};

mod coco;
mod hf;
mod place;
mod types;
mod yaml;
mod yolo;

pub use place::CLAMP_PX;

/// A detection dataset to pack.
#[derive(Clone, Debug)]
pub enum DetectionSource {
    /// A COCO annotations file (instances or person keypoints) and the
    /// folder its images' `file_name`s are in.
    Coco { images: PathBuf, annotations: PathBuf },
    /// An Ultralytics dataset: its `data.yaml`, or the folder holding it,
    /// and the split to pack (`train`, `val`, `test`).
    Yolo { input: PathBuf, split: String },
    /// Hugging Face Parquet files (a file, or a folder of them) with an
    /// `image` and an `objects` column, their boxes in `box_format`.
    HuggingFace { input: PathBuf, box_format: BoxFormat },
}

impl DetectionSource {
    /// The file or folder the source is named by, for errors.
    pub fn shown(&self) -> &Path {
        match self {
            Self::Coco { annotations, .. } => annotations,
            Self::Yolo { input, .. } | Self::HuggingFace { input, .. } => input,
        }
    }
}

/// The box format Hugging Face datasets are read in without
/// `--box-format`: COCO's, as `cppe-5` and the `datasets` object detection
/// guide give them (`detection-datasets/coco` gives XYXY: say so).
pub const DEFAULT_HF_BOX_FORMAT: BoxFormat = BoxFormat::Xywh;

/// A dataset's images, listed (COCO, YOLO) or read row group by row
/// group (Parquet).
enum Images {
    Listed(Vec<Annotated>),
    Parquet(hf::Rows),
}

/// What the reading thread hands the writer.
enum Event {
    Sample(OwnedSample),
    LeftOut(Problem),
    Flagged(Problem),
    Clamped(Problem),
    Failed(PackError),
}

/// Opens `source` (blocking).
fn open(source: &DetectionSource) -> Result<Listing<Images>, PackError> {
    Ok(match source {
        DetectionSource::Coco { images, annotations } => coco::open(images, annotations)?.with_images(Images::Listed),
        DetectionSource::Yolo { input, split } => yolo::open(input, split)?.with_images(Images::Listed),
        DetectionSource::HuggingFace { input, box_format } => {
            hf::open(input, *box_format)?.with_images(Images::Parquet)
        }
    })
}

/// Reads every image of `opened`, places its targets and sends the
/// results down `tx` (blocking); stops when the receiver is gone.
fn produce(opened: Listing<Images>, tx: &tokio::sync::mpsc::Sender<Event>) {
    let scheme = opened.scheme;
    let send_one = |img: Annotated| -> bool {
        let event = match read_image(&img) {
            Ok(data) => match place::place(&img, &scheme, &data) {
                Ok(placed) => {
                    for c in placed.clamped {
                        if tx.blocking_send(Event::Clamped(c)).is_err() {
                            return false;
                        }
                    }
                    if let Some(f) = placed.flagged
                        && tx.blocking_send(Event::Flagged(f)).is_err()
                    {
                        return false;
                    }
                    Event::Sample(OwnedSample {
                        key: img.key,
                        ext: placed.ext,
                        data,
                        label: None,
                        targets: Some(placed.targets),
                    })
                }
                Err(p) => Event::LeftOut(p),
            },
            Err(p) => Event::LeftOut(p),
        };
        tx.blocking_send(event).is_ok()
    };
    match opened.images {
        Images::Listed(images) => {
            for img in images {
                if !send_one(img) {
                    return;
                }
            }
        }
        Images::Parquet(mut rows) => loop {
            match rows.next_batch() {
                Ok(Some(batch)) => {
                    for img in batch {
                        if !send_one(img) {
                            return;
                        }
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    let _ = tx.blocking_send(Event::Failed(e));
                    return;
                }
            }
        },
    }
}

/// An image's bytes; a missing or unreadable file is its problem.
fn read_image(img: &Annotated) -> Result<bytes::Bytes, Problem> {
    match &img.image {
        ImageSource::Held(b) => Ok(b.clone()),
        ImageSource::File(path) => match std::fs::read(path) {
            Ok(data) => Ok(data.into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Problem::new(&img.shown, "image file missing")),
            Err(e) => Err(Problem::new(format!("{} ({e})", img.shown), "image file unreadable")),
        },
    }
}

/// Opens `source` and starts reading it on a blocking thread.
async fn start(
    source: &DetectionSource,
) -> Result<(Vec<String>, PackReport, tokio::sync::mpsc::Receiver<Event>), PackError> {
    let owned = source.clone();
    let opened = tokio::task::spawn_blocking(move || open(&owned))
        .await
        .map_err(|e| PackError::Annotations {
            file: source.shown().to_owned(),
            why: e.to_string(),
        })??;
    let classes = opened.classes.clone();
    let report = opened.report.clone();
    // A few images ahead of the writer.
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::task::spawn_blocking(move || produce(opened, &tx));
    Ok((classes, report, rx))
}

/// What `stoker pack` would leave out of the detection dataset `source`
/// or flag, reading every image and annotation and writing nothing:
/// `stoker pack --strict` refuses a dataset with any. Boxes it would
/// clamp are no problem.
pub async fn check_detection(source: &DetectionSource) -> Result<PackReport, PackError> {
    let (_, mut report, mut rx) = start(source).await?;
    while let Some(event) = rx.recv().await {
        match event {
            Event::Sample(_) | Event::Clamped(_) => {}
            Event::LeftOut(p) => report.left_out.add(&p.what, &p.reason),
            Event::Flagged(p) => report.flagged.add(&p.what, &p.reason),
            Event::Failed(e) => return Err(e),
        }
    }
    Ok(report)
}

/// Packs the detection dataset `source` into `format` shards of about
/// `shard_size` bytes under `output`, each sample an image and its
/// targets JSON, with the record indexes and the dataset index (class
/// names at their labels). Images with bad annotations are left out and
/// reported; boxes a hair outside their image are clamped and counted.
pub async fn pack_detection(
    storage: &Storage,
    source: &DetectionSource,
    output: &DatasetUri,
    format: ShardFormat,
    shard_size: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<PackSummary, PackError> {
    if format == ShardFormat::RecordIo {
        return Err(PackError::TargetsInRecordIo);
    }
    let (classes, report, mut rx) = start(source).await?;
    let mut sink = ShardSink::new(storage, output, format, shard_size, classes, Carries::Targets).await?;
    sink.report = report;
    let mut clamped = Problems::default();
    let mut pending: Vec<OwnedSample> = Vec::new();
    let mut pending_bytes = 0u64;
    while let Some(event) = rx.recv().await {
        let sample = match event {
            Event::Sample(s) => s,
            Event::LeftOut(p) => {
                sink.report.left_out.add(&p.what, &p.reason);
                continue;
            }
            Event::Flagged(p) => {
                sink.report.flagged.add(&p.what, &p.reason);
                continue;
            }
            Event::Clamped(p) => {
                clamped.add(&p.what, &p.reason);
                continue;
            }
            Event::Failed(e) => return Err(e),
        };
        let extra = sample.targets.as_ref().map_or(0, |t| t.len() as u64);
        let size = writer::sample_bytes(format, sample.data.len() as u64, extra);
        if !pending.is_empty() && pending_bytes + size > shard_size {
            sink.put(ShardInput::Samples(std::mem::take(&mut pending))).await?;
            pending_bytes = 0;
            progress(sink.samples, sink.image_bytes);
        }
        pending_bytes += size;
        pending.push(sample);
    }
    if !pending.is_empty() {
        sink.put(ShardInput::Samples(pending)).await?;
        progress(sink.samples, sink.image_bytes);
    }
    let mut summary = sink.finish().await?;
    summary.clamped = clamped;
    Ok(summary)
}

#[cfg(test)]
mod tests;
