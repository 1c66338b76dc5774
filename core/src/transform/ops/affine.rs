//! RandomAffine, and torchvision's inverse affine matrix that it and the
//! policies' shears and translations use.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use super::rotate::check_degrees;
use crate::params::{Bounds, Cx, ResolveError, Step, round_half_even};
use crate::transform::args::{Fill, Interpolation, Range, check_fill, check_range, fill_rgb};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional, required};

/// torchvision's `shear`: a number `s` (x in `[-s, s]`), `[min, max]` (x),
/// or `[x min, x max, y min, y max]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Shear {
    One(f64),
    Values(Vec<f64>),
}

/// A random rotation, translation, scale and shear about the centre
/// (torchvision's `RandomAffine` on PIL images).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomAffine {
    pub degrees: Range,
    pub translate: Option<[f64; 2]>,
    pub scale: Option<[f64; 2]>,
    pub shear: Option<Shear>,
    pub interpolation: Interpolation,
    pub fill: Option<Fill>,
    pub center: Option<[f64; 2]>,
}

impl Described for RandomAffine {
    const SCHEMA: OpSchema = OpSchema {
        doc: "A random rotation, translation, scale and shear.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required("degrees", ArgKind::Range, "range of the rotation"),
            optional(
                "translate",
                ArgKind::OptPair,
                "null",
                "largest shift [x, y] as fractions of the width and height",
            ),
            optional("scale", ArgKind::OptPair, "null", "range of the scale factor"),
            optional(
                "shear",
                ArgKind::Shear,
                "null",
                "range of the shear angles (x, or x then y)",
            ),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"nearest\"",
                "nearest or bilinear",
            ),
            optional("fill", ArgKind::Fill, "0", "colour of the area outside the image"),
            optional(
                "center",
                ArgKind::OptPair,
                "null",
                "centre [x, y] (the image's centre when None)",
            ),
        ],
    };
}

/// The shear's x range and, when given, its y range.
type ShearRanges = ((f64, f64), Option<(f64, f64)>);

impl RandomAffine {
    /// (x range, y range).
    fn shear_ranges(&self) -> Option<ShearRanges> {
        match self.shear.as_ref()? {
            Shear::One(s) => Some(((-s, *s), None)),
            Shear::Values(v) => match v[..] {
                [a, b] => Some(((a, b), None)),
                [a, b, c, d] => Some(((a, b), Some((c, d)))),
                _ => None,
            },
        }
    }
}

/// torchvision's `_get_inverse_affine_matrix`: the matrix PIL's
/// `Image.transform` takes for a rotation by `angle` degrees, a
/// translation, a scale and a shear (degrees) about `center`.
pub(crate) fn inverse_affine_matrix(
    center: [f64; 2],
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
) -> [f64; 6] {
    let rot = angle.to_radians();
    let (sx, sy) = (shear[0].to_radians(), shear[1].to_radians());
    let [cx, cy] = center;
    let [tx, ty] = translate;
    let (cos_sy, tan_sx, rot_minus_sy) = (sy.cos(), sx.tan(), rot - sy);
    let (cx_plus_tx, cy_plus_ty) = (cx + tx, cy + ty);
    let a = rot_minus_sy.cos() / cos_sy;
    let b = -(a * tan_sx + rot.sin());
    let c = rot_minus_sy.sin() / cos_sy;
    let d = rot.cos() - c * tan_sx;
    let mut m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0];
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
    m
}

/// Appends torchvision's `affine` on a PIL image (same size out).
#[allow(clippy::too_many_arguments, reason = "torchvision's affine arguments, one for one")]
pub(crate) fn push_affine(
    cx: &mut Cx<'_>,
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
    center: Option<[f64; 2]>,
    interpolation: Interpolation,
    fill: [u8; 3],
) {
    let center = center.unwrap_or([f64::from(cx.w) * 0.5, f64::from(cx.h) * 0.5]);
    let matrix = inverse_affine_matrix(center, angle, translate, scale, shear);
    cx.push(Step::Affine {
        matrix,
        out_w: cx.w,
        out_h: cx.h,
        warp: interpolation.warp(),
        fill,
    });
}

impl OpImpl for RandomAffine {
    fn validate(&self) -> Result<(), String> {
        check_degrees(self.degrees)?;
        if let Some([x, y]) = self.translate
            && !((0.0..=1.0).contains(&x) && (0.0..=1.0).contains(&y))
        {
            return Err(format!("translate ({x}, {y}) must lie in [0, 1]"));
        }
        if let Some([a, b]) = self.scale {
            check_range("scale", (a, b), 1e-6, 1e3)?;
        }
        match &self.shear {
            Some(Shear::One(s)) if !(*s >= 0.0 && s.is_finite()) => {
                return Err(format!("shear {s} must be non-negative when it is a single number"));
            }
            Some(Shear::Values(v)) if v.len() != 2 && v.len() != 4 => {
                return Err(format!("shear must have 1, 2 or 4 values, got {}", v.len()));
            }
            _ => {}
        }
        if let Some((x, y)) = self.shear_ranges() {
            check_range("shear", x, -89.0, 89.0)?;
            if let Some(y) = y {
                check_range("shear", y, -89.0, 89.0)?;
            }
        }
        self.interpolation.check_warp()?;
        check_fill(&self.fill)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (lo, hi) = self.degrees.symmetric();
        let angle = cx.rng.uniform(lo, hi);
        let translate = match self.translate {
            Some([fx, fy]) => {
                let (dx, dy) = (fx * f64::from(cx.w), fy * f64::from(cx.h));
                let tx = round_half_even(cx.rng.uniform(-dx, dx));
                let ty = round_half_even(cx.rng.uniform(-dy, dy));
                [tx as f64, ty as f64]
            }
            None => [0.0, 0.0],
        };
        let scale = match self.scale {
            Some([a, b]) => cx.rng.uniform(a, b),
            None => 1.0,
        };
        let mut shear = [0.0, 0.0];
        if let Some((x, y)) = self.shear_ranges() {
            shear[0] = cx.rng.uniform(x.0, x.1);
            if let Some(y) = y {
                shear[1] = cx.rng.uniform(y.0, y.1);
            }
        }
        push_affine(
            cx,
            angle,
            translate,
            scale,
            shear,
            self.center,
            self.interpolation,
            fill_rgb(&self.fill),
        );
        Ok(())
    }
}
