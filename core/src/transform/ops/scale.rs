//! The detection recipes' random resizes: ScaleJitter (large scale
//! jitter) and RandomShortestSize (multi-scale training).

use serde::{Deserialize, Serialize};

use super::crop::resize_scratch;
use super::op_impl::OpImpl;
use crate::Rect;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::transform::args::{Interpolation, MAX_OUTPUT_SIZE};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// Resizes to `min(a / width, b / height)` of `target_size = [a, b]`
/// times a scale drawn from `scale_range` (torchvision's `ScaleJitter`,
/// the large scale jitter of Copy-Paste).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleJitter {
    pub target_size: [u32; 2],
    pub scale_range: [f64; 2],
    pub interpolation: Interpolation,
    pub antialias: Option<bool>,
}

impl Described for ScaleJitter {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Resized to fit target_size, times a scale drawn from scale_range.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required(
                "target_size",
                ArgKind::IntPair,
                "[a, b]: the base scale is min(a / width, b / height), torchvision's order",
            ),
            optional("scale_range", ArgKind::Pair, "[0.1, 2.0]", "range of the scale drawn"),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"bilinear\"",
                "the resize's filter",
            ),
            optional(
                "antialias",
                ArgKind::OptBool,
                "true",
                "antialias when downscaling (PIL always does)",
            ),
        ],
    };
}

impl ScaleJitter {
    pub fn new(target_size: [u32; 2]) -> Self {
        construct(serde_json::json!({ "target_size": target_size }))
    }
}

impl OpImpl for ScaleJitter {
    fn validate(&self) -> Result<(), String> {
        let [a, b] = self.target_size;
        let [lo, hi] = self.scale_range;
        if !(lo > 0.0 && lo <= hi && hi.is_finite()) {
            return Err(format!("scale_range [{lo}, {hi}] must satisfy 0 < min <= max"));
        }
        for s in [a, b] {
            if s == 0 || f64::from(s) * hi > f64::from(MAX_OUTPUT_SIZE) {
                return Err(format!(
                    "target_size {s} times scale_range's max {hi} must lie in [1, {MAX_OUTPUT_SIZE}]"
                ));
            }
        }
        Ok(())
    }

    fn bounds(&self, _b: Bounds) -> Bounds {
        let side = |s: u32| (f64::from(s) * self.scale_range[1]).ceil() as u64;
        Bounds {
            min_w: 1,
            min_h: 1,
            max_w: side(self.target_size[0]),
            max_h: side(self.target_size[1]),
        }
    }

    fn scratch(&self, inp: Bounds, out: Bounds) -> u64 {
        resize_scratch(inp, out)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let [lo, hi] = self.scale_range;
        let scale = lo + cx.rng.next_f64() * (hi - lo);
        let [a, b] = self.target_size.map(f64::from);
        let r = (b / f64::from(cx.h)).min(a / f64::from(cx.w)) * scale;
        push_resize(cx, r, self.interpolation);
        Ok(())
    }
}

/// One size or several: RandomShortestSize's `min_size`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Sizes {
    One(u32),
    Many(Vec<u32>),
}

impl Sizes {
    fn all(&self) -> &[u32] {
        match self {
            Self::One(s) => std::slice::from_ref(s),
            Self::Many(v) => v,
        }
    }
}

/// Resizes the shorter side to a size drawn from `min_size`, the longer
/// to at most `max_size` (torchvision's `RandomShortestSize`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomShortestSize {
    pub min_size: Sizes,
    pub max_size: Option<u32>,
    pub interpolation: Interpolation,
    pub antialias: Option<bool>,
}

impl Described for RandomShortestSize {
    const SCHEMA: OpSchema = OpSchema {
        doc: "The shorter side resized to a size drawn from min_size, the longer at most max_size.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required("min_size", ArgKind::Ints, "the shorter sides drawn from"),
            optional("max_size", ArgKind::OptInt, "null", "largest longer side"),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"bilinear\"",
                "the resize's filter",
            ),
            optional(
                "antialias",
                ArgKind::OptBool,
                "true",
                "antialias when downscaling (PIL always does)",
            ),
        ],
    };
}

impl OpImpl for RandomShortestSize {
    fn validate(&self) -> Result<(), String> {
        let sizes = self.min_size.all();
        if sizes.is_empty() || sizes.len() > 64 {
            return Err(format!("min_size must have 1 to 64 sizes, got {}", sizes.len()));
        }
        for &s in sizes.iter().chain(&self.max_size) {
            if s == 0 || s > MAX_OUTPUT_SIZE {
                return Err(format!("size {s} must lie in [1, {MAX_OUTPUT_SIZE}]"));
            }
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        let largest = u64::from(self.min_size.all().iter().copied().max().unwrap_or(1));
        let short = b.min_w.min(b.min_h).max(1);
        let long = b.max_w.max(b.max_h);
        let mut side = largest.saturating_mul(long) / short + 1;
        if let Some(m) = self.max_size {
            side = side.min(u64::from(m).max(largest));
        }
        let side = side.max(largest).min(Bounds::unknown().max_w);
        Bounds {
            min_w: 1,
            min_h: 1,
            max_w: side,
            max_h: side,
        }
    }

    fn scratch(&self, inp: Bounds, out: Bounds) -> u64 {
        resize_scratch(inp, out)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let sizes = self.min_size.all();
        let pick = if sizes.len() > 1 {
            cx.rng.int_inclusive(0, sizes.len() as i64 - 1) as usize
        } else {
            0
        };
        let (w, h) = (f64::from(cx.w), f64::from(cx.h));
        let mut r = f64::from(sizes[pick]) / w.min(h);
        if let Some(m) = self.max_size {
            r = r.min(f64::from(m) / w.max(h));
        }
        push_resize(cx, r, self.interpolation);
        Ok(())
    }
}

/// The whole image resized by `r`, each side truncated as torchvision
/// does (`int(side * r)`), and at least a pixel (torchvision raises on an
/// empty side).
fn push_resize(cx: &mut Cx<'_>, r: f64, filter: Interpolation) {
    let side = |s: u32| ((f64::from(s) * r) as u32).max(1);
    let (out_w, out_h) = (side(cx.w), side(cx.h));
    if (out_w, out_h) != (cx.w, cx.h) {
        cx.push(Step::CropResize {
            crop: Rect::whole(cx.w, cx.h),
            out_w,
            out_h,
            filter,
        });
    }
}
