//! [`TargetStep`]: how one step of a sample's geometry moves its boxes and
//! keypoints, as torchvision v2's kernels for `BoundingBoxes` and
//! `KeyPoints` do (`transforms/v2/functional/_geometry.py`, `_misc.py`).

use super::instances::{BoxFormat, Targets};
use crate::params::{PaddingMode, Rect, Step};

impl Targets {
    /// Follows `steps` (recorded with the pixels' steps) in order.
    pub fn follow(&mut self, steps: &[TargetStep]) {
        for s in steps {
            s.apply(self);
        }
    }
}

/// One step of a sample's geometry as it applies to its targets.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetStep {
    /// `crop_bounding_boxes`: everything moves by (-left, -top) onto a
    /// canvas of the crop's size; boxes are clamped to it, keypoints are
    /// not. A box reaching past the image is a crop with padding.
    Crop(Rect),
    /// `resize_bounding_boxes`: everything scales to the new canvas.
    Resize { width: u32, height: u32 },
    /// `pad_bounding_boxes`: everything moves by (left, top) onto the
    /// grown canvas (constant padding only, as torchvision).
    Pad { ltrb: [u32; 4] },
    /// Boxes mirror about the canvas width, keypoints about width - 1;
    /// with a flip index, keypoints swap left and right.
    FlipHorizontal,
    /// As [`TargetStep::FlipHorizontal`], vertically (no swap).
    FlipVertical,
    /// `_affine_bounding_boxes_with_expand`: each box's four corners
    /// through `forward` (input to output, torchvision's
    /// `_get_inverse_affine_matrix(..., inverted=False)`), less `shift`
    /// (the rotated image's top-left corner with `expand`), then their
    /// extent, clamped to the new canvas; keypoints through the same map,
    /// not clamped.
    Affine {
        forward: [f64; 6],
        shift: [f64; 2],
        canvas: (u32, u32),
    },
    /// `ClampBoundingBoxes`.
    Clamp,
    /// `SanitizeBoundingBoxes`: drops boxes smaller than `min_size` on a
    /// side or `min_area`, or outside the canvas, with every per-instance
    /// value.
    Sanitize { min_size: f64, min_area: f64 },
    /// `ConvertBoundingBoxFormat`: the format the boxes are delivered in.
    Format(BoxFormat),
    /// `RandomIoUCrop`'s mark: the boxes flagged `true` (their centre fell
    /// outside its crop) become `[0, 0, 0, 0]`, for a later
    /// `SanitizeBoundingBoxes` to drop; keypoints stay.
    Degenerate(Vec<bool>),
    /// The detection references' `FixedSizeCrop`: boxes left empty by its
    /// crop (`x1 >= x2` or `y1 >= y2`) are dropped with every per-instance
    /// value.
    DropEmpty,
}

/// Why a step cannot move targets (torchvision raises on it too).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

impl TargetStep {
    /// Appends the target steps of a pixel step on an image of `w` x `h`:
    /// none for steps that leave targets where they are (colour, blur,
    /// erasing); a crop, a resize, or a crop then a resize
    /// (`resized_crop_bounding_boxes`) for a resized crop. A pad that is
    /// not constant is refused, as torchvision refuses it for boxes and
    /// keypoints.
    pub fn steps_of(step: &Step, w: u32, h: u32, out: &mut Vec<TargetStep>) -> Result<(), Unsupported> {
        match *step {
            Step::CropResize { crop, out_w, out_h, .. } => {
                if crop != Rect::whole(w, h) {
                    out.push(TargetStep::Crop(crop));
                }
                if (out_w, out_h) != (crop.width, crop.height) {
                    out.push(TargetStep::Resize {
                        width: out_w,
                        height: out_h,
                    });
                }
            }
            Step::Pad { ltrb, mode, .. } => {
                if mode != PaddingMode::Constant {
                    return Err(Unsupported(format!(
                        "padding mode {mode:?} does not move boxes or keypoints \
                         (torchvision pads them only with constant padding)"
                    )));
                }
                out.push(TargetStep::Pad { ltrb });
            }
            Step::FlipHorizontal => out.push(TargetStep::FlipHorizontal),
            Step::FlipVertical => out.push(TargetStep::FlipVertical),
            Step::Affine {
                matrix, out_w, out_h, ..
            } => out.push(TargetStep::Affine {
                forward: invert_affine(matrix),
                shift: [0.0, 0.0],
                canvas: (out_w, out_h),
            }),
            Step::Enhance { .. }
            | Step::Hue { .. }
            | Step::Lut { .. }
            | Step::Permute { .. }
            | Step::Equalize
            | Step::Autocontrast
            | Step::Blur { .. }
            | Step::Erase { .. } => {}
        }
        Ok(())
    }

    /// Moves `t` through this step.
    pub fn apply(&self, t: &mut Targets) {
        let (w, h) = (f64::from(t.canvas.0), f64::from(t.canvas.1));
        match *self {
            TargetStep::Crop(r) => {
                let (dx, dy) = (r.left as f64, r.top as f64);
                t.canvas = (r.width, r.height);
                for b in &mut t.boxes {
                    *b = [b[0] - dx, b[1] - dy, b[2] - dx, b[3] - dy];
                }
                clamp(t);
                for p in &mut t.keypoints {
                    p[0] -= dx;
                    p[1] -= dy;
                }
            }
            TargetStep::Resize { width, height } => {
                if (width, height) == t.canvas {
                    return;
                }
                let (sx, sy) = (f64::from(width) / w, f64::from(height) / h);
                t.canvas = (width, height);
                for b in &mut t.boxes {
                    *b = [b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy];
                }
                for p in &mut t.keypoints {
                    p[0] *= sx;
                    p[1] *= sy;
                }
            }
            TargetStep::Pad {
                ltrb: [l, top, r, bottom],
            } => {
                let (dx, dy) = (f64::from(l), f64::from(top));
                t.canvas = (t.canvas.0 + l + r, t.canvas.1 + top + bottom);
                for b in &mut t.boxes {
                    *b = [b[0] + dx, b[1] + dy, b[2] + dx, b[3] + dy];
                }
                clamp(t);
                for p in &mut t.keypoints {
                    p[0] += dx;
                    p[1] += dy;
                }
            }
            TargetStep::FlipHorizontal => {
                for b in &mut t.boxes {
                    *b = [w - b[2], b[1], w - b[0], b[3]];
                }
                for p in &mut t.keypoints {
                    p[0] = (w - 1.0) - p[0];
                }
                swap_sides(t);
            }
            TargetStep::FlipVertical => {
                for b in &mut t.boxes {
                    *b = [b[0], h - b[3], b[2], h - b[1]];
                }
                for p in &mut t.keypoints {
                    p[1] = (h - 1.0) - p[1];
                }
            }
            TargetStep::Affine { forward, shift, canvas } => {
                let map = |x: f64, y: f64| {
                    (
                        forward[0] * x + forward[1] * y + forward[2] - shift[0],
                        forward[3] * x + forward[4] * y + forward[5] - shift[1],
                    )
                };
                for b in &mut t.boxes {
                    let corners = [(b[0], b[1]), (b[2], b[1]), (b[2], b[3]), (b[0], b[3])].map(|(x, y)| map(x, y));
                    let xs = corners.map(|c| c.0);
                    let ys = corners.map(|c| c.1);
                    *b = [min4(xs), min4(ys), max4(xs), max4(ys)];
                }
                t.canvas = canvas;
                clamp(t);
                for p in &mut t.keypoints {
                    (p[0], p[1]) = map(p[0], p[1]);
                }
            }
            TargetStep::Clamp => clamp(t),
            TargetStep::Sanitize { min_size, min_area } => {
                let keep: Vec<bool> = t
                    .boxes
                    .iter()
                    .map(|b| {
                        let (bw, bh) = (b[2] - b[0], b[3] - b[1]);
                        bw >= min_size
                            && bh >= min_size
                            && bw * bh >= min_area
                            && b.iter().all(|&v| v >= 0.0)
                            && b[0] <= w
                            && b[2] <= w
                            && b[1] <= h
                            && b[3] <= h
                    })
                    .collect();
                t.retain(&keep);
            }
            TargetStep::Format(f) => t.format = f,
            TargetStep::Degenerate(ref marked) => {
                for (b, _) in t.boxes.iter_mut().zip(marked).filter(|(_, m)| **m) {
                    *b = [0.0; 4];
                }
            }
            TargetStep::DropEmpty => {
                let keep: Vec<bool> = t.boxes.iter().map(|b| b[0] < b[2] && b[1] < b[3]).collect();
                t.retain(&keep);
            }
        }
    }
}

/// `clamp_bounding_boxes`: x into [0, width], y into [0, height].
fn clamp(t: &mut Targets) {
    let (w, h) = (f64::from(t.canvas.0), f64::from(t.canvas.1));
    for b in &mut t.boxes {
        *b = [
            b[0].clamp(0.0, w),
            b[1].clamp(0.0, h),
            b[2].clamp(0.0, w),
            b[3].clamp(0.0, h),
        ];
    }
}

/// Keypoint `i` of each instance takes keypoint `flip_idx[i]`'s place.
fn swap_sides(t: &mut Targets) {
    if t.flip_idx.is_empty() || t.per_instance == 0 {
        return;
    }
    for inst in t.keypoints.chunks_exact_mut(t.per_instance) {
        let before = inst.to_vec();
        for (i, &j) in t.flip_idx.iter().enumerate() {
            inst[i] = before[j];
        }
    }
}

fn min4(v: [f64; 4]) -> f64 {
    v.into_iter().fold(f64::INFINITY, f64::min)
}

fn max4(v: [f64; 4]) -> f64 {
    v.into_iter().fold(f64::NEG_INFINITY, f64::max)
}

/// The inverse of the affine map `m`, which takes (x, y) to
/// (`m0 x + m1 y + m2`, `m3 x + m4 y + m5`). The matrices here come from
/// the rotations, shears and scales torchvision accepts (scale above 0,
/// shear under 90 degrees): never singular.
pub fn invert_affine(m: [f64; 6]) -> [f64; 6] {
    let det = m[0] * m[4] - m[1] * m[3];
    let (a, b, d, e) = (m[4] / det, -m[1] / det, -m[3] / det, m[0] / det);
    [a, b, -(a * m[2] + b * m[5]), d, e, -(d * m[2] + e * m[5])]
}
