//! What the detection readers ([`super::coco`], [`super::yolo`],
//! [`super::hf`]) hand on, and [`super::place`] and the packer take: the
//! images with their annotations as given, the dataset's scheme, the
//! problems found.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stoker_core::targets::BoxFormat;
use stoker_storage::PackReport;

/// One image of a detection dataset with its annotations as given.
pub(crate) struct Annotated {
    /// Its sample's key.
    pub key: String,
    /// How reports name it: its file, or its Parquet file and row.
    pub shown: String,
    pub image: ImageSource,
    /// Its size as the annotations give it (COCO's `width`, `height`).
    pub declared: Option<(u32, u32)>,
    pub instances: Vec<Instance>,
    /// Why its annotations are bad, found while reading them.
    pub bad: Option<Problem>,
    /// COCO's `image_id`, written beside its targets.
    pub image_id: Option<i64>,
}

/// Where an image's bytes are.
pub(crate) enum ImageSource {
    File(PathBuf),
    Held(bytes::Bytes),
}

/// One annotated instance, as given.
#[derive(Clone, Debug, Default)]
pub(crate) struct Instance {
    /// How reports name it: `annotation 17`, `line 3`, `object 2`.
    pub id: String,
    /// In the dataset's box format, in pixels or normalised.
    pub bbox: [f64; 4],
    pub label: i64,
    pub iscrowd: bool,
    pub area: Option<f64>,
    /// The dataset's points per instance, or none for an instance of a
    /// category without keypoints.
    pub keypoints: Vec<[f64; 3]>,
    /// COCO's `segmentation`, checked, kept as given.
    pub segmentation: Option<Segmentation>,
}

/// What the instances of a dataset hold, the same for every image.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scheme {
    pub format: BoxFormat,
    /// Coordinates are fractions of the image's width and height (YOLO).
    pub normalised: bool,
    /// Keypoints per instance (0: none).
    pub keypoints: usize,
    pub flip_idx: Vec<usize>,
    /// Whether `iscrowd` and `area` are written.
    pub crowd: bool,
    pub area: bool,
    /// Whether `segmentation` is written.
    pub segmentation: bool,
}

/// A bad annotation or image: what (the image, the annotation, the
/// values) and why (a reason the report counts by).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Problem {
    pub what: String,
    pub reason: String,
}

impl Problem {
    pub fn new(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// A dataset opened: its classes, scheme, and its images (`I`: listed,
/// or read as they are packed).
pub(crate) struct Listing<I> {
    /// Class names by label (empty strings for ids without a category).
    pub classes: Vec<String>,
    pub scheme: Scheme,
    pub images: I,
    /// Annotations of no image, found while listing.
    pub report: PackReport,
}

impl<I> Listing<I> {
    /// The same listing with its images made `J`.
    pub fn with_images<J>(self, f: impl FnOnce(I) -> J) -> Listing<J> {
        Listing {
            classes: self.classes,
            scheme: self.scheme,
            images: f(self.images),
            report: self.report,
        }
    }
}

/// COCO's `segmentation`: polygons (`[[x, y, x, y, ...], ...]`) or a
/// run-length encoding (`{"counts": [...] or "...", "size": [h, w]}`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum Segmentation {
    Polygons(Vec<Vec<Option<f64>>>),
    Rle { counts: RleCounts, size: Vec<u64> },
    Other(serde_json::Value),
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum RleCounts {
    Runs(Vec<u64>),
    Compressed(String),
}

/// A key from a path relative to its images' root: no extension, `/`
/// between folders, no dots (a dot would split it differently when read
/// back).
pub(crate) fn key_of(relative: &Path) -> String {
    let stem = relative.with_extension("");
    stem.components()
        .map(|c| c.as_os_str().to_string_lossy().replace('.', "_"))
        .collect::<Vec<_>>()
        .join("/")
}

/// Class names with each name at its id, gaps empty.
pub(crate) fn classes_by_id(names: &[(i64, String)]) -> Vec<String> {
    let len = names.iter().map(|(id, _)| *id + 1).max().unwrap_or(0).max(0) as usize;
    let mut classes = vec![String::new(); len];
    for (id, name) in names {
        if let Ok(i) = usize::try_from(*id) {
            classes[i].clone_from(name);
        }
    }
    classes
}

/// The largest class id a dataset may use: class names are a list by id,
/// in the dataset index (LVIS has 1203 categories, Open Images 601).
pub(crate) const MAX_CLASS_ID: i64 = 100_000;
