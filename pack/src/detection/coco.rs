//! COCO's annotation files (instances, person keypoints): `images`,
//! `annotations` and `categories` read into [`Annotated`] images, as
//! torchvision's `CocoDetection` (wrapped for transforms v2) sees them:
//! images by id, each annotation's `bbox` (XYWH, pixels), `category_id` as
//! its label, `iscrowd`, `area`, `keypoints` ([K, 3]) and `segmentation`
//! (polygons or RLE, checked and kept as given).
//!
//! The file is read whole. Python's `json` writes NaN and Infinity, which
//! JSON has not: such tokens are read as missing numbers, and their
//! annotation is bad. A bad annotation leaves its image out, named with
//! the annotation's id and values; a file without `images`, with two
//! images or categories of one id, or categories whose keypoints
//! disagree in number, is an error.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use stoker_core::targets::{BoxFormat, Outline};
use stoker_storage::PackReport;

use super::types::{
    Annotated, ImageSource, Instance, Listing, MAX_CLASS_ID, Problem, Scheme, Segmentation, classes_by_id, key_of,
};
use crate::error::PackError;

#[derive(Deserialize)]
struct Doc {
    images: Vec<Image>,
    #[serde(default)]
    annotations: Vec<Annotation>,
    #[serde(default)]
    categories: Vec<Category>,
}

#[derive(Deserialize)]
struct Image {
    id: i64,
    file_name: String,
    #[serde(default)]
    width: Option<u32>,
    #[serde(default)]
    height: Option<u32>,
}

#[derive(Deserialize)]
struct Category {
    id: i64,
    name: String,
    #[serde(default)]
    keypoints: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Annotation {
    id: serde_json::Value,
    image_id: i64,
    category_id: serde_json::Value,
    #[serde(default)]
    bbox: Option<Lenient<Vec<Option<f64>>>>,
    #[serde(default)]
    area: Option<Lenient<Option<f64>>>,
    #[serde(default)]
    iscrowd: Option<serde_json::Value>,
    #[serde(default)]
    keypoints: Option<Lenient<Vec<Option<f64>>>>,
    #[serde(default)]
    segmentation: Option<Segmentation>,
}

/// A value of the expected shape, or anything else (a bad annotation, not
/// a bad file).
#[derive(Deserialize)]
#[serde(untagged)]
enum Lenient<T> {
    Good(T),
    Bad(serde_json::Value),
}

/// Reads the COCO file `annotations` of the images under `images`.
pub(super) fn open(images: &Path, annotations: &Path) -> Result<Listing<Vec<Annotated>>, PackError> {
    let file_err = |why: String| PackError::Annotations {
        file: annotations.to_owned(),
        why,
    };
    let bytes = std::fs::read(annotations).map_err(crate::error::io_err(annotations))?;
    let doc: Doc = match serde_json::from_slice(&bytes) {
        Ok(doc) => doc,
        Err(first) => {
            let Some(rewritten) = python_floats_as_null(&bytes) else {
                return Err(file_err(format!("not a coco annotations file: {first}")));
            };
            drop(bytes);
            serde_json::from_slice(&rewritten).map_err(|e| file_err(format!("not a coco annotations file: {e}")))?
        }
    };
    if !images.is_dir() {
        return Err(PackError::NoInput(images.to_owned()));
    }
    // Categories: names at their ids, keypoint names.
    let mut categories: HashMap<i64, Option<usize>> = HashMap::new();
    let mut names = Vec::new();
    let mut keypoint_names: Option<Vec<String>> = None;
    for c in &doc.categories {
        if !(0..=MAX_CLASS_ID).contains(&c.id) {
            return Err(file_err(format!(
                "category {:?} has id {}, outside 0..={MAX_CLASS_ID}",
                c.name, c.id
            )));
        }
        let k = c.keypoints.as_ref().filter(|k| !k.is_empty()).map(Vec::len);
        if categories.insert(c.id, k).is_some() {
            return Err(file_err(format!("two categories have id {}", c.id)));
        }
        names.push((c.id, c.name.clone()));
        if let Some(kp) = c.keypoints.as_ref().filter(|k| !k.is_empty()) {
            match &keypoint_names {
                Some(seen) if seen.len() != kp.len() => {
                    return Err(file_err(format!(
                        "category {:?} has {} keypoints, another {}: every instance needs the same number",
                        c.name,
                        kp.len(),
                        seen.len()
                    )));
                }
                Some(_) => {}
                None => keypoint_names = Some(kp.clone()),
            }
        }
    }
    let k = keypoint_names.as_ref().map_or(0, Vec::len);
    // Images by id, sorted as torchvision's CocoDetection takes them.
    let mut by_id: HashMap<i64, usize> = HashMap::new();
    let mut listed: Vec<Annotated> = Vec::with_capacity(doc.images.len());
    let mut ids: Vec<i64> = doc.images.iter().map(|i| i.id).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(file_err(format!("two images have id {}", w[0])));
    }
    let mut sorted: Vec<&Image> = doc.images.iter().collect();
    sorted.sort_by_key(|i| i.id);
    for img in sorted {
        let path = images.join(&img.file_name);
        by_id.insert(img.id, listed.len());
        listed.push(Annotated {
            key: key_of(Path::new(&img.file_name)),
            shown: path.display().to_string(),
            image: ImageSource::File(path),
            declared: img.width.zip(img.height),
            instances: Vec::new(),
            bad: None,
            image_id: Some(img.id),
        });
    }
    let mut report = PackReport::default();
    let shown_file = annotations.display().to_string();
    let mut segmentation = false;
    for a in doc.annotations {
        let id = format!("annotation {}", a.id);
        let Some(&at) = by_id.get(&a.image_id) else {
            report.left_out.add(
                &format!("{shown_file}, {id} (image_id {})", a.image_id),
                "annotation of no image in the file",
            );
            continue;
        };
        let img = &mut listed[at];
        if img.bad.is_some() {
            continue;
        }
        segmentation |= a.segmentation.is_some();
        match instance(a, id, &categories, k, img.declared) {
            Ok(inst) => img.instances.push(inst),
            Err((what, reason)) => img.bad = Some(Problem::new(format!("{}, {what}", img.shown), reason)),
        }
    }
    Ok(Listing {
        classes: classes_by_id(&names),
        scheme: Scheme {
            format: BoxFormat::Xywh,
            normalised: false,
            keypoints: k,
            flip_idx: keypoint_names.as_deref().map(flip_idx_of).unwrap_or_default(),
            crowd: true,
            area: true,
            segmentation,
        },
        images: listed,
        report,
    })
}

/// One annotation as an instance, or (what, why) it is bad.
fn instance(
    a: Annotation,
    id: String,
    categories: &HashMap<i64, Option<usize>>,
    k: usize,
    declared: Option<(u32, u32)>,
) -> Result<Instance, (String, String)> {
    let bad = |what: String, why: &str| Err((what, why.to_owned()));
    let category = a.category_id.as_i64().and_then(|c| categories.get(&c).map(|k| (c, *k)));
    let Some((label, category_k)) = category else {
        return bad(
            format!("{id} (category_id {})", a.category_id),
            "category not in the file's categories",
        );
    };
    let bbox = match a.bbox {
        Some(Lenient::Good(b)) if b.len() == 4 => std::array::from_fn(|i| b[i].unwrap_or(f64::NAN)),
        Some(Lenient::Good(b)) => {
            return bad(format!("{id} (bbox {b:?})"), "bbox is not 4 numbers");
        }
        Some(Lenient::Bad(v)) => return bad(format!("{id} (bbox {v})"), "bbox is not 4 numbers"),
        None => return bad(id, "no bbox"),
    };
    let area = match a.area {
        Some(Lenient::Good(area)) => area,
        Some(Lenient::Bad(v)) => return bad(format!("{id} (area {v})"), "area is not a number"),
        None => None,
    };
    let iscrowd = match &a.iscrowd {
        None => false,
        Some(v) => match (v.as_i64(), v.as_bool()) {
            (Some(0), _) | (_, Some(false)) => false,
            (Some(1), _) | (_, Some(true)) => true,
            _ => return bad(format!("{id} (iscrowd {v})"), "iscrowd is not 0 or 1"),
        },
    };
    let keypoints = match (a.keypoints, category_k) {
        (None, None) => Vec::new(),
        (Some(Lenient::Good(p)), None) if p.is_empty() => Vec::new(),
        (Some(Lenient::Good(p)), Some(n)) if p.len() == 3 * n && n == k => p
            .chunks_exact(3)
            .map(|c| {
                [
                    c[0].unwrap_or(f64::NAN),
                    c[1].unwrap_or(f64::NAN),
                    c[2].unwrap_or(f64::NAN),
                ]
            })
            .collect(),
        (p, n) => {
            let got = match p {
                Some(Lenient::Good(p)) => format!("{} numbers", p.len()),
                Some(Lenient::Bad(v)) => v.to_string(),
                None => "none".to_owned(),
            };
            return bad(
                format!("{id} (keypoints: {got}, category keypoints: {})", n.unwrap_or(0)),
                "keypoints disagree with the category's keypoint names (3 numbers each)",
            );
        }
    };
    if let Some(s) = &a.segmentation {
        check_segmentation(s, declared).map_err(|why| (format!("{id} (segmentation {})", shown(s)), why))?;
    }
    Ok(Instance {
        id,
        bbox,
        label,
        iscrowd,
        area,
        keypoints,
        segmentation: a.segmentation,
    })
}

/// A segmentation's problem, as a worker asking for masks reads it
/// ([`Outline::from_json`]: a polygon of fewer than 3 points, an odd or
/// missing coordinate, an RLE whose counts do not cover its size), or an
/// RLE whose size is not its image's.
fn check_segmentation(s: &Segmentation, declared: Option<(u32, u32)>) -> Result<(), String> {
    let value = serde_json::to_value(s).map_err(|e| e.to_string())?;
    let outline = Outline::from_json(&value)?;
    match declared {
        Some(canvas) => outline.check(canvas),
        None => Ok(()),
    }
}

/// A segmentation, shortened for a report.
fn shown(s: &Segmentation) -> String {
    let text = serde_json::to_string(s).unwrap_or_default();
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// COCO keypoints' left-right pairing from their names (`left_eye` and
/// `right_eye`...), as Ultralytics' `flip_idx` for COCO pose; none unless
/// every `left_`/`right_` name has its pair.
pub(super) fn flip_idx_of(names: &[String]) -> Vec<usize> {
    let mut flip: Vec<usize> = (0..names.len()).collect();
    let mut paired = false;
    for (i, name) in names.iter().enumerate() {
        let other = if let Some(rest) = name.strip_prefix("left_") {
            format!("right_{rest}")
        } else if let Some(rest) = name.strip_prefix("right_") {
            format!("left_{rest}")
        } else {
            continue;
        };
        match names.iter().position(|n| *n == other) {
            Some(j) => {
                flip[i] = j;
                paired = true;
            }
            None => return Vec::new(),
        }
    }
    if paired { flip } else { Vec::new() }
}

/// `bytes` with Python's `NaN`, `Infinity` and `-Infinity` (outside
/// strings) as `null`; `None` when it has none.
pub(super) fn python_floats_as_null(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if c == b'"' {
            in_string = true;
        } else if let Some(token) = [&b"-Infinity"[..], b"Infinity", b"NaN"]
            .into_iter()
            .find(|t| bytes[i..].starts_with(t))
        {
            out.extend_from_slice(b"null");
            i += token.len();
            changed = true;
            continue;
        }
        out.push(c);
        i += 1;
    }
    changed.then_some(out)
}
