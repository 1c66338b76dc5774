//! RandomZoomOut.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, PaddingMode, ResolveError, Step};
use crate::transform::args::{Fill, check_p};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional};

/// With probability `p`, the image placed at a random spot of a canvas
/// `r` times its size (`r` uniform in `side_range`), the rest `fill`
/// (torchvision's `RandomZoomOut`, SSD's "expand"): a constant pad, so
/// boxes and keypoints move with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomZoomOut {
    pub fill: Fill,
    pub side_range: [f64; 2],
    pub p: f64,
}

impl Described for RandomZoomOut {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Placed on a canvas up to side_range times its size, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            optional("fill", ArgKind::Fill, "0", "colour of the canvas around the image"),
            optional(
                "side_range",
                ArgKind::Pair,
                "[1.0, 4.0]",
                "range of the canvas's size, in multiples of the image's",
            ),
            optional("p", ArgKind::Probability, "0.5", "probability of zooming out"),
        ],
    };
}

impl Default for RandomZoomOut {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

/// The largest canvas side in multiples of the image's: a bound on what a
/// spec can make a worker allocate (SSD uses 4).
const MAX_SIDE: f64 = 16.0;

impl OpImpl for RandomZoomOut {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)?;
        self.fill.check()?;
        let [lo, hi] = self.side_range;
        if !(lo.is_finite() && hi.is_finite() && (1.0..=hi).contains(&lo) && hi <= MAX_SIDE) {
            return Err(format!(
                "side_range {:?} must be [min, max] with 1 <= min <= max <= {MAX_SIDE}",
                self.side_range
            ));
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        let hi = self.side_range[1];
        let cap = Bounds::unknown().max_w;
        let grow = |side: u64| (((side as f64) * hi) as u64).min(cap);
        b.union(Bounds {
            min_w: b.min_w,
            min_h: b.min_h,
            max_w: grow(b.max_w).max(b.max_w),
            max_h: grow(b.max_h).max(b.max_h),
        })
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        if !cx.rng.bernoulli(self.p) {
            return Ok(());
        }
        let [lo, hi] = self.side_range;
        let r = cx.rng.uniform(lo, hi);
        let (w, h) = (cx.w, cx.h);
        // torchvision truncates each size and offset to an int.
        let canvas_w = (f64::from(w) * r) as u32;
        let canvas_h = (f64::from(h) * r) as u32;
        let left = (f64::from(canvas_w - w) * cx.rng.next_f64()) as u32;
        let top = (f64::from(canvas_h - h) * cx.rng.next_f64()) as u32;
        let ltrb = [left, top, canvas_w - (left + w), canvas_h - (top + h)];
        if ltrb != [0; 4] {
            cx.push(Step::Pad {
                ltrb,
                mode: PaddingMode::Constant,
                fill: self.fill.rgb(),
            });
        }
        Ok(())
    }
}
