//! RandomRotation, and PIL's rotation matrix that it and the policies use.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, ResolveError, Step};
use crate::targets::TargetStep;
use crate::transform::args::{Fill, Interpolation, Range, check_fill, check_range, fill_rgb};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// Rotation by an angle uniform in `degrees` (counter-clockwise, a lone
/// number `d` meaning `[-d, d]`), as torchvision's `RandomRotation` on PIL
/// images (`Image.rotate`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomRotation {
    pub degrees: Range,
    pub interpolation: Interpolation,
    pub expand: bool,
    pub center: Option<[f64; 2]>,
    pub fill: Option<Fill>,
}

impl Described for RandomRotation {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Rotated by an angle uniform in degrees ([-d, d] for a number d).",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required("degrees", ArgKind::Range, "range of the angle, counter-clockwise"),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"nearest\"",
                "nearest or bilinear",
            ),
            optional(
                "expand",
                ArgKind::Bool,
                "false",
                "grow the output to hold the whole rotated image",
            ),
            optional(
                "center",
                ArgKind::OptPair,
                "null",
                "centre of rotation [x, y] (the image's centre when None)",
            ),
            optional("fill", ArgKind::Fill, "0", "colour of the area outside the image"),
        ],
    };
}

impl RandomRotation {
    pub fn new(degrees: f64) -> Self {
        construct(serde_json::json!({ "degrees": degrees }))
    }
}

/// Checks torchvision's `degrees`: a non-negative number or an ordered pair.
pub(crate) fn check_degrees(degrees: Range) -> Result<(), String> {
    if let Range::One(d) = degrees
        && (d.is_nan() || d < 0.0)
    {
        return Err(format!("degrees {d} must be non-negative when it is a single number"));
    }
    check_range("degrees", degrees.symmetric(), -36000.0, 36000.0)
}

/// Python's `round(x, 15)`.
fn round15(x: f64) -> f64 {
    (x * 1e15).round() / 1e15
}

/// PIL's `Image.rotate(angle, expand=expand, center=center)` as an affine
/// `Image.transform`: the matrix and the output size, for a `w` x `h`
/// image. `None` for a rotation PIL returns as a copy (0 degrees).
pub(crate) fn pil_rotate(
    angle: f64,
    w: u32,
    h: u32,
    expand: bool,
    center: Option<[f64; 2]>,
) -> Option<([f64; 6], u32, u32)> {
    let angle = angle.rem_euclid(360.0);
    if center.is_none() && angle == 0.0 {
        return None;
    }
    let (fw, fh) = (f64::from(w), f64::from(h));
    let [cx, cy] = center.unwrap_or([fw / 2.0, fh / 2.0]);
    let a = -angle.to_radians();
    let mut m = [
        round15(a.cos()),
        round15(a.sin()),
        0.0,
        round15(-a.sin()),
        round15(a.cos()),
        0.0,
    ];
    let apply = |m: &[f64; 6], x: f64, y: f64| (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]);
    (m[2], m[5]) = apply(&m, -cx, -cy);
    m[2] += cx;
    m[5] += cy;
    let (mut ow, mut oh) = (w, h);
    if expand {
        let corners = [(0.0, 0.0), (fw, 0.0), (fw, fh), (0.0, fh)].map(|(x, y)| apply(&m, x, y));
        let (xs, ys) = (corners.map(|c| c.0), corners.map(|c| c.1));
        let max = |v: [f64; 4]| v.into_iter().fold(f64::MIN, f64::max);
        let min = |v: [f64; 4]| v.into_iter().fold(f64::MAX, f64::min);
        let nw = (max(xs).ceil() - min(xs).floor()).max(1.0);
        let nh = (max(ys).ceil() - min(ys).floor()).max(1.0);
        (m[2], m[5]) = apply(&m, -(nw - fw) / 2.0, -(nh - fh) / 2.0);
        (ow, oh) = (nw as u32, nh as u32);
    }
    Some((m, ow, oh))
}

/// Appends PIL's rotation by `angle` degrees.
pub(crate) fn push_rotation(
    cx: &mut Cx<'_>,
    angle: f64,
    interpolation: Interpolation,
    expand: bool,
    center: Option<[f64; 2]>,
    fill: [u8; 3],
) {
    let Some((matrix, out_w, out_h)) = pil_rotate(angle, cx.w, cx.h, expand, center) else {
        return;
    };
    let step = Step::Affine {
        matrix,
        out_w,
        out_h,
        warp: interpolation.warp(),
        fill,
    };
    if !expand {
        return cx.push(step);
    }
    // torchvision moves boxes through the rotation about the centre, then
    // by the rotated image's top-left corner, where PIL centres the
    // rotated image in its canvas (`_affine_bounding_boxes_with_expand`):
    // up to half a pixel apart, and the boxes follow torchvision's rule.
    let (w, h) = (f64::from(cx.w), f64::from(cx.h));
    let about_centre = pil_rotate(angle, cx.w, cx.h, false, center).map_or([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], |r| r.0);
    let forward = crate::targets::invert_affine(about_centre);
    let corners = [(0.0, 0.0), (0.0, h), (w, h), (w, 0.0)].map(|(x, y)| {
        (
            forward[0] * x + forward[1] * y + forward[2],
            forward[3] * x + forward[4] * y + forward[5],
        )
    });
    let shift = [
        corners.iter().map(|c| c.0).fold(f64::INFINITY, f64::min),
        corners.iter().map(|c| c.1).fold(f64::INFINITY, f64::min),
    ];
    cx.push_with_target(
        step,
        TargetStep::Affine {
            forward,
            shift,
            canvas: (out_w, out_h),
        },
    );
}

impl OpImpl for RandomRotation {
    fn validate(&self) -> Result<(), String> {
        check_degrees(self.degrees)?;
        self.interpolation.check_warp()?;
        check_fill(&self.fill)?;
        if let Some(c) = self.center
            && !c.iter().all(|v| v.is_finite())
        {
            return Err(format!("center {c:?} must be finite"));
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        if self.expand { b.rotated() } else { b }
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (lo, hi) = self.degrees.symmetric();
        let angle = cx.rng.uniform(lo, hi);
        push_rotation(
            cx,
            angle,
            self.interpolation,
            self.expand,
            self.center,
            fill_rgb(&self.fill),
        );
        Ok(())
    }
}
