//! Ultralytics (YOLO) datasets: a `data.yaml` (`path`, the splits
//! `train`/`val`/`test`, `names` as a list or a map, `kpt_shape`,
//! `flip_idx`) and a label file per image, found by Ultralytics' rule
//! (the last `images` folder of the image's path turned into `labels`,
//! the extension into `.txt`). Each line `cls cx cy w h` (normalised to
//! the image), then `kpt_shape[0]` points of `px py [v]`: boxes are
//! CXCYWH fractions of the image, scaled to pixels by its header's size
//! when placed. An image without a label file has no boxes (Ultralytics'
//! background image).
//!
//! Paths as Ultralytics resolves them, but one: a relative `path` is taken
//! from the yaml's folder (Ultralytics takes it from its own datasets
//! folder setting); no `path` is the yaml's folder. A split is a folder
//! of images (searched recursively), a `.txt` list of image paths, or a
//! list of those; a folder `../x` that does not exist is tried as `x`, as
//! Ultralytics does for Roboflow's exports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stoker_core::targets::BoxFormat;
use stoker_formats::image::is_image_file_name;
use stoker_storage::PackReport;

use super::types::{Annotated, ImageSource, Instance, Listing, MAX_CLASS_ID, Problem, Scheme, classes_by_id, key_of};
use super::yaml::{self, Value};
use crate::error::PackError;
use crate::error::io_err;

/// The dataset description `input` names: the yaml itself, or the folder
/// holding `data.yaml` (or its only `.yaml`).
fn find_yaml(input: &Path) -> Result<PathBuf, PackError> {
    if input.is_file() {
        return Ok(input.to_owned());
    }
    if !input.is_dir() {
        return Err(PackError::NoInput(input.to_owned()));
    }
    let data = input.join("data.yaml");
    if data.is_file() {
        return Ok(data);
    }
    let yamls: Vec<PathBuf> = std::fs::read_dir(input)
        .map_err(io_err(input))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    match yamls.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(PackError::Annotations {
            file: input.to_owned(),
            why: format!(
                "no data.yaml here ({} other yaml files): name the dataset's yaml with --input",
                yamls.len()
            ),
        }),
    }
}

/// Reads the YOLO dataset `input` (its yaml, or the folder holding it),
/// the images of `split` and their labels.
pub(super) fn open(input: &Path, split: &str) -> Result<Listing<Vec<Annotated>>, PackError> {
    let file = find_yaml(input)?;
    let err = |why: String| PackError::Annotations {
        file: file.clone(),
        why,
    };
    let text = std::fs::read_to_string(&file).map_err(io_err(&file))?;
    let doc = yaml::parse(&text).map_err(&err)?;
    let here = file.parent().unwrap_or(Path::new("."));
    let root = match doc.get("path") {
        Some(Value::Scalar(p)) if !p.is_empty() => here.join(p),
        _ => here.to_owned(),
    };
    let names = names(&doc).map_err(&err)?;
    let (k, dims) = match doc.get("kpt_shape") {
        None | Some(Value::Null) => (0, 0),
        Some(Value::List(shape)) => match shape.iter().map(|s| s.parse::<usize>()).collect::<Result<Vec<_>, _>>() {
            Ok(s) if s.len() == 2 && (s[1] == 2 || s[1] == 3) && s[0] > 0 => (s[0], s[1]),
            _ => return Err(err(format!("kpt_shape {shape:?} is not [keypoints, 2 or 3]"))),
        },
        Some(other) => return Err(err(format!("kpt_shape {other:?} is not [keypoints, 2 or 3]"))),
    };
    let flip_idx = match doc.get("flip_idx") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::List(f)) if k > 0 => f
            .iter()
            .map(|s| s.parse::<usize>())
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| err(format!("flip_idx {f:?} is not a list of keypoint indices")))?,
        Some(other) => return Err(err(format!("flip_idx {other:?} without kpt_shape, or not a list"))),
    };
    let entries = match doc.get(split) {
        Some(Value::Scalar(s)) => vec![s.clone()],
        Some(Value::List(l)) => l.clone(),
        _ => {
            return Err(err(format!(
                "no {split:?} split (a folder of images, a .txt list, or a list)"
            )));
        }
    };
    let mut images = Vec::new();
    for entry in &entries {
        images.extend(split_images(&root, entry).map_err(&err)?);
    }
    let classes = classes_by_id(&names);
    let listed = images
        .into_iter()
        .map(|image| annotate(&root, image, &classes, k, dims))
        .collect::<Result<Vec<_>, _>>()?;
    if listed.is_empty() {
        return Err(err(format!("the {split:?} split has no images")));
    }
    Ok(Listing {
        classes,
        scheme: Scheme {
            format: BoxFormat::Cxcywh,
            normalised: true,
            keypoints: k,
            flip_idx,
            ..Scheme::default()
        },
        images: listed,
        report: PackReport::default(),
    })
}

/// `names` (a list, a map of ids, or `nc` alone) as (id, name).
fn names(doc: &BTreeMap<String, Value>) -> Result<Vec<(i64, String)>, String> {
    match doc.get("names") {
        Some(Value::List(l)) => Ok(l.iter().enumerate().map(|(i, n)| (i as i64, n.clone())).collect()),
        Some(Value::Map(m)) => m
            .iter()
            .map(|(id, n)| match id.parse::<i64>() {
                Ok(id) if (0..=MAX_CLASS_ID).contains(&id) => Ok((id, n.clone())),
                _ => Err(format!("names: {id:?} is not a class id in 0..={MAX_CLASS_ID}")),
            })
            .collect(),
        _ => match doc.get("nc") {
            Some(Value::Scalar(nc)) => match nc.parse::<i64>() {
                Ok(nc) if (0..=MAX_CLASS_ID).contains(&nc) => Ok((0..nc).map(|i| (i, format!("class_{i}"))).collect()),
                _ => Err(format!("nc {nc:?} is not a number of classes")),
            },
            _ => Err("no names (a list, or a map of class ids) and no nc".to_owned()),
        },
    }
}

/// The images of one split entry: a folder (recursively), or a `.txt`
/// list of paths.
fn split_images(root: &Path, entry: &str) -> Result<Vec<PathBuf>, String> {
    let mut at = root.join(entry);
    if !at.exists()
        && let Some(rest) = entry.strip_prefix("../")
    {
        at = root.join(rest);
    }
    if at.is_dir() {
        let mut found = Vec::new();
        walk(&at, &mut found).map_err(|e| format!("{}: {e}", at.display()))?;
        found.sort();
        return Ok(found);
    }
    if at.is_file() && at.extension().is_some_and(|e| e == "txt") {
        let text = std::fs::read_to_string(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        let parent = at.parent().unwrap_or(root);
        return Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| match l.strip_prefix("./") {
                Some(rest) => parent.join(rest),
                None => root.join(l),
            })
            .collect());
    }
    Err(format!(
        "split {entry:?}: {} is no folder of images or .txt list",
        at.display()
    ))
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, found)?;
        } else if is_image_file_name(&path.to_string_lossy()) {
            found.push(path);
        }
    }
    Ok(())
}

/// Ultralytics' `img2label_paths`: the last `images` folder of the path
/// turned into `labels`, the extension into `.txt`.
pub(super) fn label_path(image: &Path) -> PathBuf {
    let parts: Vec<_> = image.components().collect();
    let mut out = PathBuf::new();
    let last = parts.iter().rposition(|c| c.as_os_str() == "images");
    for (i, c) in parts.iter().enumerate() {
        if Some(i) == last && i + 1 < parts.len() {
            out.push("labels");
        } else {
            out.push(c);
        }
    }
    out.with_extension("txt")
}

/// An image and its label file's instances (or the line that is bad).
fn annotate(root: &Path, image: PathBuf, classes: &[String], k: usize, dims: usize) -> Result<Annotated, PackError> {
    let key = match image.strip_prefix(root) {
        Ok(rel) => key_of(rel),
        Err(_) => key_of(Path::new(image.file_name().unwrap_or_default())),
    };
    let shown = image.display().to_string();
    let labels = label_path(&image);
    let mut img = Annotated {
        key,
        shown,
        image: ImageSource::File(image),
        declared: None,
        instances: Vec::new(),
        bad: None,
        image_id: None,
    };
    let text = match std::fs::read_to_string(&labels) {
        Ok(text) => text,
        // No label file: a background image.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(img),
        Err(e) => return Err(io_err(&labels)(e)),
    };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let id = format!("{} line {}", labels.display(), n + 1);
        match instance(line, classes, k, dims) {
            Ok(mut inst) => {
                inst.id = id;
                img.instances.push(inst);
            }
            Err(why) => {
                img.bad = Some(Problem::new(format!("{}, {id} {:?}", img.shown, line.trim()), why));
                break;
            }
        }
    }
    Ok(img)
}

/// One label line: `cls cx cy w h` then `k` points of `dims` numbers;
/// `classes` are the names by id (an empty one is no class).
pub(super) fn instance(line: &str, classes: &[String], k: usize, dims: usize) -> Result<Instance, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let want = 5 + k * dims;
    if fields.len() != want {
        // The line is in the report beside it: its count shows.
        return Err(if k == 0 {
            "line not of 5 fields (cls cx cy w h)".to_owned()
        } else {
            format!("line not of {want} fields (cls cx cy w h and {k} keypoints of {dims})")
        });
    }
    let numbers: Vec<f64> = fields
        .iter()
        .map(|f| f.parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| "a field is not a number".to_owned())?;
    let cls = numbers[0];
    let named = cls.fract() == 0.0 && cls >= 0.0 && classes.get(cls as usize).is_some_and(|n| !n.is_empty());
    if !named {
        return Err(format!("class not in names (0..{})", classes.len()));
    }
    let keypoints = numbers[5..]
        .chunks_exact(dims.max(1))
        .map(|p| [p[0], p[1], if dims == 3 { p[2] } else { 2.0 }])
        .collect();
    Ok(Instance {
        id: String::new(),
        bbox: [numbers[1], numbers[2], numbers[3], numbers[4]],
        label: cls as i64,
        keypoints,
        ..Instance::default()
    })
}
