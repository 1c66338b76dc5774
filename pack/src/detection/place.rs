//! [`place`]: one image's annotations, as a reader gave them, placed on
//! the image its header describes and built into its targets JSON through
//! `stoker_core::targets::Targets` (which checks every box), or the
//! problem that leaves the image out.

use stoker_core::targets::{BoxFormat, TargetError, Targets};
use stoker_formats::image::{ImageKind, header_dimensions, sniff};

use super::types::{Annotated, Instance, Problem, Scheme};
use crate::scan::{Inspection, inspect};

/// How far (in pixels) a box may leave its image and be clamped onto it,
/// counted: COCO's float rounding puts some boxes a hair past an edge.
/// Farther out, the image is left out.
pub const CLAMP_PX: f64 = 1.0;

/// An image's targets JSON, ready to pack.
#[derive(Debug)]
pub(super) struct Placed {
    pub ext: &'static str,
    pub targets: Vec<u8>,
    /// Its boxes clamped onto the image.
    pub clamped: Vec<Problem>,
    /// An image workers will skip (a truncated JPEG): packed and flagged.
    pub flagged: Option<Problem>,
}

/// Places `img`'s instances on its image (`data`): the image's kind and
/// size from its header, boxes in pixels, each inside the image (clamped
/// when at most [`CLAMP_PX`] outside), built through [`Targets`].
pub(super) fn place(img: &Annotated, scheme: &Scheme, data: &[u8]) -> Result<Placed, Problem> {
    if let Some(bad) = &img.bad {
        return Err(bad.clone());
    }
    let flagged = match inspect(data) {
        Inspection::LeftOut(reason) => return Err(Problem::new(&img.shown, reason)),
        Inspection::Flagged(reason) => Some(Problem::new(&img.shown, reason)),
        Inspection::Good => None,
    };
    let kind = sniff(data).ok_or_else(|| Problem::new(&img.shown, "not a jpeg or png (by its contents)"))?;
    let (w, h) = header_dimensions(kind, data)
        .map_err(|_| Problem::new(&img.shown, "no readable image header: its boxes cannot be placed"))?;
    let shown = format!("{} ({w}x{h})", img.shown);
    if let Some((dw, dh)) = img.declared
        && (dw, dh) != (w, h)
    {
        return Err(Problem::new(
            format!("{shown}, annotated as {dw}x{dh}"),
            "image size disagrees with its annotations' width and height",
        ));
    }
    let scale = if scheme.normalised {
        [f64::from(w), f64::from(h), f64::from(w), f64::from(h)]
    } else {
        [1.0; 4]
    };
    let mut boxes = Vec::with_capacity(img.instances.len());
    let mut clamped = Vec::new();
    for inst in &img.instances {
        let b: [f64; 4] = std::array::from_fn(|i| inst.bbox[i] * scale[i]);
        match clamp(scheme.format, b, (w, h)) {
            Some((onto, by)) => {
                clamped.push(Problem::new(
                    format!("{shown}, {} {:?} by {by:.3} px", inst.id, b),
                    "box clamped onto its image",
                ));
                boxes.push(onto);
            }
            None => boxes.push(b),
        }
    }
    let labels = img.instances.iter().map(|i| i.label).collect();
    let named = |index: usize| img.instances.get(index).map_or("", |i: &Instance| i.id.as_str());
    let mut t = Targets::new((w, h), scheme.format, &boxes, labels).map_err(|e| match e {
        TargetError::Box { index, values, why } => Problem::new(
            format!("{shown}, {} {values:?}", named(index)),
            if why.contains("outside") {
                format!("box {why} by more than {CLAMP_PX} px")
            } else {
                format!("box {why}")
            },
        ),
        TargetError::TooMany { got, limit, .. } => Problem::new(
            format!("{shown}, {got} instances"),
            format!("more than {limit} instances (MAX_INSTANCES)"),
        ),
        other => Problem::new(&shown, other.to_string()),
    })?;
    if scheme.keypoints > 0 {
        let k = scheme.keypoints;
        let mut points = Vec::with_capacity(k * img.instances.len());
        for inst in &img.instances {
            if inst.keypoints.is_empty() {
                // An instance of a category without keypoints.
                points.extend(std::iter::repeat_n([0.0; 3], k));
            } else {
                points.extend(inst.keypoints.iter().map(|p| [p[0] * scale[0], p[1] * scale[1], p[2]]));
            }
        }
        t = t
            .with_keypoints(k, points, scheme.flip_idx.clone())
            .map_err(|e| match e {
                TargetError::Keypoint { index, point, why } => Problem::new(
                    format!("{shown}, {} keypoint {point}", named(index)),
                    format!("keypoint {why}"),
                ),
                other => Problem::new(&shown, other.to_string()),
            })?;
    }
    if scheme.crowd {
        t.iscrowd = img.instances.iter().map(|i| i.iscrowd).collect();
    }
    if scheme.area {
        t.area = img
            .instances
            .iter()
            .zip(&t.boxes)
            .map(|(i, b)| i.area.unwrap_or((b[2] - b[0]) * (b[3] - b[1])))
            .collect();
    }
    let mut doc = t.to_dataset_json();
    // The numbers given (scaled, or clamped), not their round trip through
    // XYXY: what `Targets::new` checked is what a worker reads.
    doc.insert("boxes".into(), serde_json::json!(boxes));
    if scheme.segmentation {
        let masks: Vec<serde_json::Value> = img
            .instances
            .iter()
            .map(|i| serde_json::json!(i.segmentation))
            .collect();
        doc.insert("segmentation".into(), masks.into());
    }
    if let Some(id) = img.image_id {
        doc.insert("image_id".into(), id.into());
    }
    let targets = serde_json::to_vec(&serde_json::Value::Object(doc))
        .map_err(|e| Problem::new(&shown, format!("targets not written as JSON: {e}")))?;
    // Read back as a worker reads and places it: a packed sample is never
    // one every worker skips, and where each instance has a segmentation,
    // each draws (as kind `targets_with_masks` reads them).
    let masks = scheme.segmentation && img.instances.iter().all(|i| i.segmentation.is_some());
    Targets::from_json(&targets, masks)
        .map_err(|e| e.to_string())
        .and_then(|mut back| back.place((w, h)).map_err(|e| e.to_string()))
        .map_err(|e| Problem::new(&shown, format!("targets do not read back: {e}")))?;
    Ok(Placed {
        ext: match kind {
            ImageKind::Jpeg => "jpg",
            ImageKind::Png => "png",
        },
        targets,
        clamped,
        flagged,
    })
}

/// `b` (in `format`) clamped onto a `canvas` it leaves by at most
/// [`CLAMP_PX`], and by how much; `None` when it is inside, or not a box
/// to clamp (not finite, negative size, farther out): [`Targets::new`]
/// says why.
fn clamp(format: BoxFormat, b: [f64; 4], canvas: (u32, u32)) -> Option<([f64; 4], f64)> {
    let x = format.to_xyxy(b);
    let (w, h) = (f64::from(canvas.0), f64::from(canvas.1));
    if !x.iter().all(|v| v.is_finite()) || x[2] < x[0] || x[3] < x[1] {
        return None;
    }
    let by = [-x[0], -x[1], x[2] - w, x[3] - h].into_iter().fold(0.0, f64::max);
    if by <= 0.0 || by > CLAMP_PX {
        return None;
    }
    // Onto the canvas, then (in formats other than XYXY, whose sizes
    // round) a few ulps inside until the box converts back inside it.
    let mut inset = 0.0;
    for _ in 0..64 {
        let pull = |v: f64, m: f64| v.clamp(inset, m - inset);
        let onto = format.from_xyxy([pull(x[0], w), pull(x[1], h), pull(x[2], w), pull(x[3], h)]);
        let back = format.to_xyxy(onto);
        if back[0] >= 0.0 && back[1] >= 0.0 && back[2] <= w && back[3] <= h {
            return Some((onto, by));
        }
        inset = if inset == 0.0 {
            w.max(h) * f64::EPSILON
        } else {
            inset * 2.0
        };
    }
    None
}
