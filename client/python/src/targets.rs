//! `_stoker.follow_targets`: a sample's boxes and keypoints through a
//! transform, as a worker moves them (`stoker_core::targets`), with the
//! geometric steps it resolved. tests/python/targets_oracle.py checks the
//! coordinates against torchvision v2's kernels. `_stoker.draw_outline`:
//! one instance's mask as a worker draws it, which
//! tests/python/instance_masks.py checks against pycocotools.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use stoker_core::targets::{BoxFormat, Outline, Targets};
use stoker_core::{SampleRng, Step, TransformSpec, resolve_with_targets};

use crate::config_err;

/// Resolves `transform` (at `image_size`) for an image of `width` x
/// `height` with the generator of `seed`, and moves `boxes` (in `format`)
/// and `keypoints` (`[instance][point] = (x, y, visibility)`) through it.
/// Returns `{"canvas": (w, h), "boxes", "keypoints", "labels", "steps",
/// "before_last"}` (how many of the steps every op but the last made),
/// the steps being the geometric ones: `("crop_resize", (left, top, w,
/// h), (out_w, out_h))`, `("pad", (l, t, r, b))`, `("flip_horizontal",)`,
/// `("flip_vertical",)`, `("affine", matrix, (out_w, out_h))`. Raises
/// `ValueError` on a bad spec, a bad box, or a step boxes cannot follow.
#[pyfunction]
#[pyo3(signature = (transform, image_size, width, height, seed, boxes, format="XYXY", keypoints=None, flip_idx=None))]
#[allow(clippy::too_many_arguments, reason = "a test entry point, with Python's keywords")]
pub(crate) fn follow_targets<'py>(
    py: Python<'py>,
    transform: &str,
    image_size: Option<u32>,
    width: u32,
    height: u32,
    seed: u64,
    boxes: Vec<[f64; 4]>,
    format: &str,
    keypoints: Option<Vec<Vec<[f64; 3]>>>,
    flip_idx: Option<Vec<usize>>,
) -> PyResult<Bound<'py, PyDict>> {
    let spec = TransformSpec::parse(transform, image_size).map_err(config_err)?;
    let format = BoxFormat::parse(format).map_err(config_err)?;
    let labels = (0..boxes.len() as i64).collect();
    let mut targets = Targets::new((width, height), format, &boxes, labels).map_err(config_err)?;
    if let Some(points) = keypoints {
        let per_instance = points.first().map_or(0, Vec::len);
        if points.iter().any(|p| p.len() != per_instance) {
            return Err(config_err("every instance needs as many keypoints as the first"));
        }
        targets = targets
            .with_keypoints(per_instance, points.concat(), flip_idx.unwrap_or_default())
            .map_err(config_err)?;
    }
    let rng = SampleRng::from_seed(seed);
    let (steps, target_steps) = resolve_with_targets(&spec, &rng, width, height, Some(&targets)).map_err(config_err)?;
    // The steps of every op but the last (the i-th op draws from its own
    // fork of the generator, so a prefix resolves to a prefix).
    let prefix = TransformSpec {
        size: spec.size,
        ops: spec.ops[..spec.ops.len().saturating_sub(1)].to_vec(),
    };
    let (before_last, _) = resolve_with_targets(&prefix, &rng, width, height, Some(&targets)).map_err(config_err)?;
    targets.follow(&target_steps);
    let out = PyDict::new(py);
    out.set_item("canvas", targets.canvas)?;
    out.set_item("boxes", targets.boxes_out())?;
    out.set_item("labels", &targets.labels)?;
    let per = targets.per_instance.max(1);
    let points: Vec<Vec<[f64; 3]>> = targets.keypoints.chunks(per).map(<[_]>::to_vec).collect();
    out.set_item("keypoints", points)?;
    out.set_item("steps", geometric(py, &steps)?)?;
    out.set_item("before_last", geometric(py, &before_last)?.len())?;
    Ok(out)
}

/// One instance's `segmentation` (COCO's polygons or RLE, as JSON) drawn
/// on an image of `width` x `height` as a worker draws it before the
/// image's geometry: `height * width` bytes, row-major, 1 inside. Raises
/// `ValueError` naming what is wrong with a bad outline.
#[pyfunction]
pub(crate) fn draw_outline<'py>(
    py: Python<'py>,
    segmentation: &str,
    width: u32,
    height: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let value: serde_json::Value = serde_json::from_str(segmentation).map_err(config_err)?;
    let outline = Outline::from_json(&value).map_err(config_err)?;
    outline.check((width, height)).map_err(config_err)?;
    let mut out = vec![0u8; width as usize * height as usize];
    outline.draw((width, height), &mut out, 1, 1).map_err(config_err)?;
    Ok(PyBytes::new(py, &out))
}

/// The geometric steps among `steps`, as `follow_targets` lists them.
fn geometric<'py>(py: Python<'py>, steps: &[Step]) -> PyResult<Bound<'py, pyo3::types::PyList>> {
    let geometric = pyo3::types::PyList::empty(py);
    for s in steps {
        let item = match s {
            Step::CropResize { crop, out_w, out_h, .. } => (
                "crop_resize",
                (crop.left, crop.top, crop.width, crop.height),
                (*out_w, *out_h),
            )
                .into_pyobject(py)?
                .into_any(),
            Step::Pad { ltrb, .. } => ("pad", ltrb.to_vec()).into_pyobject(py)?.into_any(),
            Step::FlipHorizontal => ("flip_horizontal",).into_pyobject(py)?.into_any(),
            Step::FlipVertical => ("flip_vertical",).into_pyobject(py)?.into_any(),
            Step::Affine {
                matrix, out_w, out_h, ..
            } => ("affine", matrix.to_vec(), (*out_w, *out_h))
                .into_pyobject(py)?
                .into_any(),
            _ => continue,
        };
        geometric.append(item)?;
    }
    Ok(geometric)
}

/// One image's targets as the Python package builds torchvision's target
/// dict from them: `{"boxes": ("<f4", [N, 4], bytes), "labels": ("<i8",
/// [N], bytes), "iscrowd"?, "area"?, "keypoints"?: ("<f4", [N, K, 3],
/// bytes), "masks"?: ("|u1", [N, H, W], bytes), "format": "XYXY",
/// "canvas_size": (h, w)}`, the optional lists only when the dataset gave
/// them (masks when the field asked for them).
pub(crate) fn targets_to_py<'py>(py: Python<'py>, t: &Targets) -> PyResult<Bound<'py, PyDict>> {
    let n = t.boxes.len();
    let array = |dtype: &'static str, shape: Vec<usize>, bytes: Vec<u8>| (dtype, shape, PyBytes::new(py, &bytes));
    let f32s = |v: &mut dyn Iterator<Item = f64>| v.flat_map(|x| (x as f32).to_le_bytes()).collect::<Vec<u8>>();
    let out = PyDict::new(py);
    let boxes = t.boxes_out();
    out.set_item(
        "boxes",
        array("<f4", vec![n, 4], f32s(&mut boxes.iter().flatten().copied())),
    )?;
    let labels: Vec<u8> = t.labels.iter().flat_map(|l| l.to_le_bytes()).collect();
    out.set_item("labels", array("<i8", vec![n], labels))?;
    if !t.iscrowd.is_empty() {
        let crowd: Vec<u8> = t.iscrowd.iter().flat_map(|&c| i64::from(c).to_le_bytes()).collect();
        out.set_item("iscrowd", array("<i8", vec![n], crowd))?;
    }
    if !t.area.is_empty() {
        out.set_item("area", array("<f4", vec![n], f32s(&mut t.area.iter().copied())))?;
    }
    if t.per_instance > 0 {
        let points = f32s(&mut t.keypoints.iter().flatten().copied());
        out.set_item("keypoints", array("<f4", vec![n, t.per_instance, 3], points))?;
    }
    if let Some(masks) = &t.masks {
        let (w, h) = (t.canvas.0 as usize, t.canvas.1 as usize);
        out.set_item("masks", ("|u1", vec![n, h, w], PyBytes::new(py, masks)))?;
    }
    out.set_item("format", t.format.name())?;
    out.set_item("canvas_size", (t.canvas.1, t.canvas.0))?;
    Ok(out)
}
