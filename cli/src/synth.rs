//! `stoker pack` and `stoker synth`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use stoker_core::{DatasetUri, FormatChoice, RecordFields, ShardFormat};

use crate::progress::Progress;
use crate::{human_bytes, parse_bytes};
use stoker_core::targets::BoxFormat;
use stoker_pack::{
    ConvertFrom, DEFAULT_HF_BOX_FORMAT, DetectionSource, PackError, PackSummary, check_detection, check_image_folder,
    convert, layout_error, pack, pack_detection, scan_image_folder,
};
use stoker_storage::Storage;
use stoker_synth::{encode_jpeg, imagenet_like_from_photo, procedural};
use stoker_worker::pool::CpuPool;

#[derive(Debug, Args)]
pub struct PackArgs {
    /// An ImageFolder tree (one subfolder per class), or a dataset to
    /// convert: s3://bucket/prefix/ or a folder of shards in any format
    /// stoker reads.
    #[arg(long)]
    pub input: String,
    /// The input dataset's format (converting): auto goes by the files'
    /// extensions. Giving it also says the input is a dataset.
    #[arg(long, value_name = "auto|wds|tfrecord|recordio|parquet")]
    pub input_format: Option<FormatChoice>,
    /// Converting: the input's image field (TFRecord feature, Parquet
    /// column); its format's default without it.
    #[arg(long, value_name = "FIELD")]
    pub image_key: Option<String>,
    /// Converting: the input's label field.
    #[arg(long, value_name = "FIELD")]
    pub label_key: Option<String>,
    /// Converting: added to every label read (-1 for TensorFlow's 1-based
    /// ImageNet labels).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true, value_name = "N")]
    pub label_offset: i64,
    /// s3://bucket/prefix/, file:///abs/dir/ or a path.
    #[arg(long)]
    pub output: String,
    /// Target shard size.
    #[arg(long, default_value = "256M", value_parser = parse_bytes)]
    pub shard_size: u64,
    /// Shard format: wds (tar), tfrecord (with DALI's .idx), recordio
    /// (MXNet's .rec + .idx) or parquet (Hugging Face's layout).
    #[arg(long, default_value = "wds", value_parser = parse_pack_format, value_name = "wds|tfrecord|recordio|parquet")]
    pub format: ShardFormat,
    /// ImageFolder or detection input: refuse it if it has any file that is no image (by
    /// name, contents, or empty), an image workers would skip (truncated...)
    /// or a bad annotation, naming them, and write nothing. Without it such
    /// images are left out or packed, and reported (also in the dataset's
    /// index).
    #[arg(long)]
    pub strict: bool,
    /// Detection: a COCO annotations file (instances or person keypoints)
    /// of the images in --input; implies --annotations-format coco.
    #[arg(long, value_name = "FILE")]
    pub annotations: Option<PathBuf>,
    /// Detection: the annotations' format. coco (with --annotations), yolo
    /// (--input is an Ultralytics data.yaml or its folder), or hf (--input
    /// is Hugging Face Parquet with image and objects columns). Each image
    /// becomes a sample of its image and a targets JSON (docs/detection.md).
    #[arg(long, value_name = "coco|yolo|hf")]
    pub annotations_format: Option<AnnotationsFormat>,
    /// Detection, yolo: the split of data.yaml to pack (train without it).
    #[arg(long, value_name = "SPLIT")]
    pub split: Option<String>,
    /// Detection, hf: the format of the objects' bbox, which the schema does
    /// not say: xywh (COCO's, cppe-5; without it), xyxy (pascal_voc,
    /// detection-datasets/coco) or cxcywh.
    #[arg(long, value_parser = parse_box_format, value_name = "xywh|xyxy|cxcywh")]
    pub box_format: Option<BoxFormat>,
}

/// Where a detection dataset's annotations are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AnnotationsFormat {
    Coco,
    Yolo,
    Hf,
}

fn parse_box_format(s: &str) -> Result<BoxFormat, String> {
    BoxFormat::parse(s).map_err(|e| e.to_string())
}

/// The detection dataset `args` name, if they name one; an error for
/// flags that do not go with it.
fn detection_source(args: &PackArgs) -> anyhow::Result<Option<DetectionSource>> {
    let kind = match (args.annotations_format, &args.annotations) {
        (None, None) => None,
        (None | Some(AnnotationsFormat::Coco), Some(_)) => Some(AnnotationsFormat::Coco),
        (Some(AnnotationsFormat::Coco), None) => {
            anyhow::bail!("--annotations-format coco needs --annotations FILE (the COCO json)")
        }
        (Some(_), Some(file)) => anyhow::bail!(
            "--annotations {} names a COCO file: yolo and hf find their annotations from --input",
            file.display()
        ),
        (Some(kind), None) => Some(kind),
    };
    let Some(kind) = kind else {
        for (given, flag) in [
            (args.split.is_some(), "--split"),
            (args.box_format.is_some(), "--box-format"),
        ] {
            anyhow::ensure!(!given, "{flag} is for detection datasets: add --annotations-format");
        }
        return Ok(None);
    };
    let converting =
        args.input_format.is_some() || args.image_key.is_some() || args.label_key.is_some() || args.label_offset != 0;
    anyhow::ensure!(
        !converting,
        "--input-format, --image-key, --label-key and --label-offset are for converting datasets, not detection annotations"
    );
    anyhow::ensure!(
        args.split.is_none() || kind == AnnotationsFormat::Yolo,
        "--split is for --annotations-format yolo"
    );
    anyhow::ensure!(
        args.box_format.is_none() || kind == AnnotationsFormat::Hf,
        "--box-format is for --annotations-format hf (coco is XYWH, yolo CXCYWH)"
    );
    let input = match DatasetUri::parse(&args.input)? {
        DatasetUri::Local(path) => path,
        other => anyhow::bail!("a detection dataset is read from a local folder or file, not {other}"),
    };
    Ok(Some(match kind {
        AnnotationsFormat::Coco => DetectionSource::Coco {
            images: input,
            annotations: args.annotations.clone().unwrap_or_default(),
        },
        AnnotationsFormat::Yolo => DetectionSource::Yolo {
            input,
            split: args.split.clone().unwrap_or_else(|| "train".to_owned()),
        },
        AnnotationsFormat::Hf => DetectionSource::HuggingFace {
            input,
            box_format: args.box_format.unwrap_or(DEFAULT_HF_BOX_FORMAT),
        },
    }))
}

/// `stoker pack` of a detection dataset.
async fn run_pack_detection(
    args: &PackArgs,
    source: DetectionSource,
    storage: &Storage,
    output: &DatasetUri,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let shown = source.shown().display().to_string();
    if args.format == ShardFormat::RecordIo {
        return Err(PackError::TargetsInRecordIo.into());
    }
    if args.strict {
        let report = check_detection(&source)
            .await
            .with_context(|| format!("cannot check {shown}"))?;
        if !report.is_empty() {
            anyhow::bail!(
                "--strict: {shown} has images stoker pack would leave out or workers would skip; nothing was \
                 written:\n  {}",
                report.lines().join("\n  ")
            );
        }
    }
    let mut progress = Progress::new("pack", None);
    let summary = pack_detection(storage, &source, output, args.format, args.shard_size, |done, bytes| {
        progress.update(done, || format!("  {}", human_bytes(bytes as f64)));
    })
    .await
    .with_context(|| format!("cannot pack {shown} into {output}"))?;
    progress.finish();
    print_problems(&summary, "image(s) or annotation(s)");
    if !summary.clamped.is_empty() {
        eprintln!(
            "clamped {} box(es) onto their images (at most {} px outside):",
            summary.clamped.count,
            stoker_pack::detection::CLAMP_PX
        );
        for first in &summary.clamped.first {
            eprintln!("  {first}");
        }
    }
    let boxes = match args.format {
        ShardFormat::WebDataset => "a .json member",
        ShardFormat::TfRecord => "the image/object/targets feature",
        _ => "the targets column",
    };
    eprintln!(
        "packed {} images ({}) with their targets in {boxes}, {} class names, into {} {} shard(s) at {output} in \
         {:.1}s",
        summary.samples,
        human_bytes(summary.bytes as f64),
        summary.classes.iter().filter(|c| !c.is_empty()).count(),
        summary.shards,
        args.format,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What was left out or flagged, on stderr.
fn print_problems(summary: &PackSummary, unit: &str) {
    for (problems, what) in [
        (&summary.report.left_out, "left out"),
        (&summary.report.flagged, "packed, but workers will skip"),
    ] {
        if problems.is_empty() {
            continue;
        }
        eprintln!("{what} {} {unit} of the input: {}", problems.count, problems.reasons());
        for first in &problems.first {
            eprintln!("  {first}");
        }
    }
}

/// A `--format` for `pack`: a format, not `auto`.
fn parse_pack_format(s: &str) -> Result<ShardFormat, String> {
    match s.parse::<FormatChoice>()? {
        FormatChoice::Given(format) => Ok(format),
        FormatChoice::Auto => Err("pack needs a format: wds, tfrecord, recordio or parquet".to_owned()),
    }
}

pub async fn run_pack(args: PackArgs) -> anyhow::Result<()> {
    let output = DatasetUri::parse(&args.output)?;
    let input = DatasetUri::parse(&args.input)?;
    let storage = Storage::new();
    if let Some(source) = detection_source(&args)? {
        return run_pack_detection(&args, source, &storage, &output).await;
    }
    let started = std::time::Instant::now();
    // An ImageFolder is a local folder with class subfolders of images;
    // anything else is a dataset to convert.
    let image_folder = match (&input, args.input_format) {
        (DatasetUri::Local(dir), None) => match scan_image_folder(dir) {
            Ok(folder) => {
                if args.strict {
                    let report = tokio::task::spawn_blocking(move || check_image_folder(&folder))
                        .await
                        .context("checking the input's images")??;
                    if !report.is_empty() {
                        anyhow::bail!(
                            "--strict: {} has files stoker pack would not pack as good images; nothing was written:\n  {}",
                            dir.display(),
                            report.lines().join("\n  ")
                        );
                    }
                }
                Some(dir.clone())
            }
            Err(PackError::Empty(_)) => match layout_error(dir) {
                Some(e) => return Err(e.into()),
                None => None,
            },
            Err(e) => return Err(e).with_context(|| format!("cannot pack {}", dir.display())),
        },
        _ => None,
    };
    if args.strict && image_folder.is_none() {
        anyhow::bail!(
            "--strict checks an ImageFolder before packing it; {input} is a dataset to convert, whose unreadable \
             samples are left out and listed (drop --strict)"
        );
    }
    // An ImageFolder's problems are files; a converted dataset's, samples.
    let unit = if image_folder.is_some() { "file(s)" } else { "sample(s)" };
    let summary = match image_folder {
        Some(dir) => pack_with_progress(&storage, &dir, &output, args.format, args.shard_size).await?,
        None => {
            let from = ConvertFrom {
                dataset: input.clone(),
                format: args.input_format.unwrap_or_default(),
                record: RecordFields {
                    image: args.image_key.clone(),
                    label: args.label_key.clone(),
                    label_offset: args.label_offset,
                },
            };
            let mut progress = Progress::new("convert", None);
            let summary = convert(&storage, &from, &output, args.format, args.shard_size, |done, bytes| {
                progress.update(done, || format!("  {}", human_bytes(bytes as f64)));
            })
            .await
            .with_context(|| format!("cannot convert {input} into {output}"))?;
            progress.finish();
            summary
        }
    };
    print_problems(&summary, unit);
    eprintln!(
        "packed {} samples ({}) of {} classes into {} {} shard(s) at {output} in {:.1}s",
        summary.samples,
        human_bytes(summary.bytes as f64),
        summary.classes.len(),
        summary.shards,
        args.format,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `pack` with a progress line.
pub async fn pack_with_progress(
    storage: &Storage,
    input: &Path,
    output: &DatasetUri,
    format: ShardFormat,
    shard_size: u64,
) -> anyhow::Result<PackSummary> {
    let total = scan_image_folder(input).ok().map(|f| f.images.len() as u64);
    let mut progress = Progress::new("pack", total);
    let summary = pack(storage, input, output, format, shard_size, |done, bytes| {
        progress.update(done, || format!("  {}", human_bytes(bytes as f64)));
    })
    .await
    .with_context(|| format!("cannot pack {} into {output}", input.display()))?;
    progress.finish();
    Ok(summary)
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Folder to write the ImageFolder tree into.
    #[arg(long)]
    pub output: PathBuf,
    /// Images to write, spread over the classes.
    #[arg(long, default_value_t = 1000)]
    pub images: usize,
    /// Classes (subfolders).
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Image width in pixels.
    #[arg(long, default_value_t = 500)]
    pub width: u32,
    /// Image height in pixels.
    #[arg(long, default_value_t = 375)]
    pub height: u32,
    /// JPEG quality (1-100).
    #[arg(long, default_value_t = 90)]
    pub quality: u8,
    /// Cut images from the JPEG photos in this folder instead of drawing
    /// them (falls back to procedural images when it holds none).
    #[arg(long)]
    pub photos: Option<PathBuf>,
    /// Seed of the images' content.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Writes an ImageFolder tree of `images` JPEGs across `classes` classes.
/// Returns the number written and whether real photos were used.
pub async fn write_image_folder(args: &SynthArgs) -> anyhow::Result<(usize, bool)> {
    anyhow::ensure!(
        args.images > 0 && args.classes > 0,
        "--images and --classes must be at least 1"
    );
    anyhow::ensure!(
        (8..=8192).contains(&args.width) && (8..=8192).contains(&args.height),
        "--width and --height must be between 8 and 8192"
    );
    anyhow::ensure!((1..=100).contains(&args.quality), "--quality must be between 1 and 100");
    let photos: Vec<Vec<u8>> = match &args.photos {
        Some(dir) => {
            let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
                .with_context(|| format!("cannot read photos folder {}", dir.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .is_some_and(|e| matches!(e.to_string_lossy().to_ascii_lowercase().as_str(), "jpg" | "jpeg"))
                })
                .collect();
            paths.sort();
            paths
                .iter()
                .map(|p| std::fs::read(p).with_context(|| format!("cannot read {}", p.display())))
                .collect::<anyhow::Result<_>>()?
        }
        None => Vec::new(),
    };
    for c in 0..args.classes {
        let dir = args.output.join(format!("class_{c:03}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let pool = CpuPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))?;
    type Job = std::pin::Pin<
        Box<
            dyn Future<
                    Output = Result<
                        Result<(usize, Vec<Vec<u8>>), stoker_synth::SynthError>,
                        stoker_worker::pool::PoolError,
                    >,
                > + Send,
        >,
    >;
    let mut jobs: Vec<Job> = Vec::new();
    let use_photos = !photos.is_empty();
    if use_photos {
        // Spread the images over the photos, several crops per photo.
        let per_photo = args.images.div_ceil(photos.len());
        for (p, photo) in photos.into_iter().enumerate() {
            let count = per_photo.min(args.images.saturating_sub(p * per_photo));
            if count == 0 {
                break;
            }
            let (w, h, q, seed) = (args.width, args.height, args.quality, args.seed ^ p as u64);
            let first = p * per_photo;
            jobs.push(Box::pin(pool.spawn(move || {
                imagenet_like_from_photo(&photo, count, (w, h), q, seed).map(|v| (first, v))
            })));
        }
    } else {
        const PER_JOB: usize = 16;
        for first in (0..args.images).step_by(PER_JOB) {
            let n = PER_JOB.min(args.images - first);
            let (w, h, q, seed) = (args.width, args.height, args.quality, args.seed);
            jobs.push(Box::pin(pool.spawn(move || {
                (first..first + n)
                    .map(|i| encode_jpeg(&procedural(w, h, seed.wrapping_mul(1_000_003) ^ i as u64), q))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|v| (first, v))
            })));
        }
    }
    let mut written = 0;
    for job in jobs {
        let (first, jpegs) = job.await?.context("cannot make images")?;
        for (j, jpeg) in jpegs.into_iter().enumerate() {
            let i = first + j;
            let path = args
                .output
                .join(format!("class_{:03}", i % args.classes))
                .join(format!("img_{i:06}.jpg"));
            tokio::fs::write(&path, jpeg)
                .await
                .with_context(|| format!("cannot write {}", path.display()))?;
            written += 1;
        }
    }
    Ok((written, use_photos))
}

pub async fn run_synth(args: SynthArgs) -> anyhow::Result<()> {
    let (n, photos) = write_image_folder(&args).await?;
    eprintln!(
        "wrote {n} {}x{} JPEGs ({}) in {} classes under {}",
        args.width,
        args.height,
        if photos { "cut from photos" } else { "procedural" },
        args.classes,
        args.output.display()
    );
    Ok(())
}
