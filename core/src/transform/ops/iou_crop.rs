//! RandomIoUCrop (SSD's crop, which chooses by the sample's boxes) and
//! FixedSizeCrop (torchvision's detection references' crop-or-pad).

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::Rect;
use crate::params::{Bounds, Cx, PaddingMode, ResolveError, Step};
use crate::targets::TargetStep;
use crate::transform::args::{CropSize, Fill, Interpolation};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// A crop whose overlap (IoU) with some box whose centre it holds is at
/// least a threshold drawn from `sampler_options`, 1.0 or more meaning no
/// crop (torchvision's `RandomIoUCrop`, after SSD). Boxes whose centre it
/// leaves out become `[0, 0, 0, 0]`, for a later `SanitizeBoundingBoxes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomIoUCrop {
    pub min_scale: f64,
    pub max_scale: f64,
    pub min_aspect_ratio: f64,
    pub max_aspect_ratio: f64,
    pub sampler_options: Option<Vec<f64>>,
    pub trials: u32,
}

impl Described for RandomIoUCrop {
    const SCHEMA: OpSchema = OpSchema {
        doc: "A crop overlapping some box by a drawn IoU (SSD); boxes whose centre it leaves out are zeroed.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            optional(
                "min_scale",
                ArgKind::Number,
                "0.3",
                "smallest side of the crop, as a fraction",
            ),
            optional(
                "max_scale",
                ArgKind::Number,
                "1.0",
                "largest side of the crop, as a fraction",
            ),
            optional(
                "min_aspect_ratio",
                ArgKind::Number,
                "0.5",
                "smallest width / height of the crop",
            ),
            optional(
                "max_aspect_ratio",
                ArgKind::Number,
                "2.0",
                "largest width / height of the crop",
            ),
            optional(
                "sampler_options",
                ArgKind::OptNumbers,
                "null",
                "the IoU thresholds drawn from (1.0: no crop); None is [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]",
            ),
            optional("trials", ArgKind::Int, "40", "crops tried for each threshold drawn"),
        ],
    };
}

impl Default for RandomIoUCrop {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

/// torchvision's `sampler_options` default.
const DEFAULT_OPTIONS: [f64; 7] = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0];

/// Thresholds drawn before the image is left as it is. torchvision draws
/// until one succeeds, forever for an image without a box and options
/// without 1.0; with the defaults, all 100 fail once in five million.
const MAX_THRESHOLDS: usize = 100;

/// Most trials per threshold: bounds a sample's work.
const MAX_TRIALS: u32 = 1000;

impl RandomIoUCrop {
    fn options(&self) -> &[f64] {
        self.sampler_options.as_deref().unwrap_or(&DEFAULT_OPTIONS)
    }
}

impl OpImpl for RandomIoUCrop {
    fn validate(&self) -> Result<(), String> {
        let (lo, hi) = (self.min_scale, self.max_scale);
        if !(lo > 0.0 && lo <= hi && hi <= 1.0) {
            return Err(format!(
                "min_scale {lo} and max_scale {hi} must satisfy 0 < min <= max <= 1"
            ));
        }
        let (lo, hi) = (self.min_aspect_ratio, self.max_aspect_ratio);
        if !(lo > 0.0 && lo <= hi && hi.is_finite()) {
            return Err(format!(
                "min_aspect_ratio {lo} and max_aspect_ratio {hi} must satisfy 0 < min <= max"
            ));
        }
        let options = self.options();
        if options.is_empty() || options.len() > 64 || !options.iter().all(|v| v.is_finite()) {
            return Err(format!("sampler_options {options:?} must be 1 to 64 finite thresholds"));
        }
        if !(1..=MAX_TRIALS).contains(&self.trials) {
            return Err(format!("trials {} must lie in [1, {MAX_TRIALS}]", self.trials));
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        Bounds {
            min_w: 1,
            min_h: 1,
            ..b
        }
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        // Without boxes no crop holds a box's centre: only a threshold of
        // 1.0 ends the draws, leaving the image as it is. A request with
        // this op and no targets field is refused before any work
        // (`TransformSpec::needs_boxes`), as torchvision refuses it.
        let boxes = cx.current_targets().map(|t| t.boxes).unwrap_or_default();
        let (w, h) = (f64::from(cx.w), f64::from(cx.h));
        let options = self.options();
        let scale = |r: f64| self.min_scale + (self.max_scale - self.min_scale) * r;
        for _ in 0..MAX_THRESHOLDS {
            let pick = cx.rng.int_inclusive(0, options.len() as i64 - 1) as usize;
            let min_iou = options[pick];
            if min_iou >= 1.0 {
                return Ok(());
            }
            for _ in 0..self.trials {
                let (r0, r1) = (cx.rng.next_f64(), cx.rng.next_f64());
                let (new_w, new_h) = ((w * scale(r0)).trunc(), (h * scale(r1)).trunc());
                // torchvision divides by a zero height here; no crop is empty.
                if new_w < 1.0 || new_h < 1.0 {
                    continue;
                }
                let aspect = new_w / new_h;
                if !(self.min_aspect_ratio <= aspect && aspect <= self.max_aspect_ratio) {
                    continue;
                }
                let (r0, r1) = (cx.rng.next_f64(), cx.rng.next_f64());
                let left = ((w - new_w) * r0).trunc();
                let top = ((h - new_h) * r1).trunc();
                let crop = [left, top, left + new_w, top + new_h];
                let outside: Vec<bool> = boxes.iter().map(|b| !centre_within(b, &crop)).collect();
                let best = boxes
                    .iter()
                    .zip(&outside)
                    .filter(|(_, out)| !**out)
                    .map(|(b, _)| iou(b, &crop))
                    .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
                if !best.is_some_and(|best| best >= min_iou) {
                    continue;
                }
                let (cw, ch) = (new_w as u32, new_h as u32);
                cx.push(Step::CropResize {
                    crop: Rect::new(left as i64, top as i64, cw, ch),
                    out_w: cw,
                    out_h: ch,
                    filter: Interpolation::Bilinear,
                });
                cx.push_target(TargetStep::Degenerate(outside));
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Whether box `b`'s centre lies strictly inside `crop` (both XYXY).
fn centre_within(b: &[f64; 4], crop: &[f64; 4]) -> bool {
    let (cx, cy) = (0.5 * (b[0] + b[2]), 0.5 * (b[1] + b[3]));
    crop[0] < cx && cx < crop[2] && crop[1] < cy && cy < crop[3]
}

/// torchvision's `box_iou` of two XYXY boxes.
fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let area = |r: &[f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    inter / (area(a) + area(b) - inter)
}

/// Crops an image larger than `size` at a random offset (one draw for
/// both sides), dropping the boxes the crop leaves empty, then pads it to
/// `size` on the right and bottom: the `FixedSizeCrop` of torchvision's
/// `references/detection/transforms.py` (its `lsj` recipe), which the
/// torchvision package does not ship.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedSizeCrop {
    pub size: CropSize,
    pub fill: Fill,
    pub padding_mode: PaddingMode,
}

impl Described for FixedSizeCrop {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Cropped at a random offset where larger than size, padded right and bottom where smaller.",
        origin: Origin::TorchvisionReferences,
        role: Role::Geometry,
        args: &[
            required("size", ArgKind::Size, "output size"),
            optional("fill", ArgKind::Fill, "0", "the constant padding's colour"),
            optional(
                "padding_mode",
                ArgKind::PaddingMode,
                "\"constant\"",
                "how padding is filled",
            ),
        ],
    };
}

impl OpImpl for FixedSizeCrop {
    fn validate(&self) -> Result<(), String> {
        self.size.check("size")?;
        self.fill.check()
    }

    fn bounds(&self, _b: Bounds) -> Bounds {
        let (w, h) = self.size.wh();
        Bounds::exact(u64::from(w), u64::from(h))
    }

    fn scratch(&self, inp: Bounds, out: Bounds) -> u64 {
        // The padded image.
        inp.pixels().saturating_add(out.pixels()).saturating_mul(6)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (cw, ch) = self.size.wh();
        let (nw, nh) = (cx.w.min(cw), cx.h.min(ch));
        if (nw, nh) != (cx.w, cx.h) {
            let r = cx.rng.next_f64();
            let top = (f64::from(cx.h - nh) * r) as i64;
            let left = (f64::from(cx.w - nw) * r) as i64;
            cx.push(Step::CropResize {
                crop: Rect::new(left, top, nw, nh),
                out_w: nw,
                out_h: nh,
                filter: Interpolation::Bilinear,
            });
            cx.push_target(TargetStep::DropEmpty);
        }
        let ltrb = [0, 0, cw - nw, ch - nh];
        if ltrb != [0; 4] {
            // Right and bottom padding moves no box, whatever its mode.
            let pad = Step::Pad {
                ltrb,
                mode: self.padding_mode,
                fill: self.fill.rgb(),
            };
            cx.push_with_target(pad, TargetStep::Pad { ltrb });
        }
        Ok(())
    }
}
