//! torchvision's automatic augmentation policies: AutoAugment (ImageNet),
//! RandAugment, TrivialAugmentWide. Each picks ops from an augmentation
//! space and applies them as torchvision's `_apply_image_or_video_transform`
//! does on PIL images.

use serde::{Deserialize, Serialize};

use super::affine::push_affine;
use super::color::{invert, posterize, solarize};
use super::op_impl::OpImpl;
use super::rotate::push_rotation;
use crate::params::{Bounds, Cx, Enhance, ResolveError, Step};
use crate::transform::args::{Fill, Interpolation, check_fill, fill_rgb};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional};

/// The ops of the augmentation spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Aug {
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
    Invert,
}

/// torch's float32 `linspace(start, end, n)[i]`: from the start for the
/// first half, from the end for the second, each a fused multiply-add (as
/// torch's CPU kernel computes it on AVX512 builds).
pub(crate) fn linspace(start: f64, end: f64, n: usize, i: usize) -> f64 {
    let (s, e) = (start as f32, end as f32);
    if n <= 1 {
        return f64::from(s);
    }
    let step = (e - s) / (n - 1) as f32;
    let v = if i < n / 2 {
        step.mul_add(i as f32, s)
    } else {
        (-step).mul_add((n - 1 - i) as f32, e)
    };
    f64::from(v)
}

/// `(8 - arange(n) / ((n - 1) / div)).round().int()[i]`.
fn posterize_bits(n: usize, div: f64, i: usize) -> f64 {
    let x = i as f32 / ((n - 1) as f64 / div) as f32;
    f64::from((8.0 - x).round_ties_even())
}

/// Which space: its magnitudes differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    /// AutoAugment and RandAugment.
    Standard,
    /// TrivialAugmentWide.
    Wide,
}

impl Space {
    /// The op's magnitude at bin `i` of `n` for an image of `w` x `h`, and
    /// whether its sign is random; `None` for ops without one.
    fn magnitude(self, op: Aug, n: usize, i: usize, w: u32, h: u32) -> Option<(f64, bool)> {
        let wide = self == Self::Wide;
        let lin = |end: f64| linspace(0.0, end, n, i);
        Some(match op {
            Aug::ShearX | Aug::ShearY => (lin(if wide { 0.99 } else { 0.3 }), true),
            Aug::TranslateX => (lin(if wide { 32.0 } else { 150.0 / 331.0 * f64::from(w) }), true),
            Aug::TranslateY => (lin(if wide { 32.0 } else { 150.0 / 331.0 * f64::from(h) }), true),
            Aug::Rotate => (lin(if wide { 135.0 } else { 30.0 }), true),
            Aug::Brightness | Aug::Color | Aug::Contrast | Aug::Sharpness => (lin(if wide { 0.99 } else { 0.9 }), true),
            Aug::Posterize => (posterize_bits(n, if wide { 6.0 } else { 4.0 }, i), false),
            Aug::Solarize => (linspace(1.0, 0.0, n, i), false),
            Aug::Identity | Aug::AutoContrast | Aug::Equalize | Aug::Invert => return None,
        })
    }
}

/// RandAugment's space (and TrivialAugmentWide's ops), in torchvision's
/// order.
const RAND_OPS: [Aug; 14] = [
    Aug::Identity,
    Aug::ShearX,
    Aug::ShearY,
    Aug::TranslateX,
    Aug::TranslateY,
    Aug::Rotate,
    Aug::Brightness,
    Aug::Color,
    Aug::Contrast,
    Aug::Sharpness,
    Aug::Posterize,
    Aug::Solarize,
    Aug::AutoContrast,
    Aug::Equalize,
];

/// Draws the sign of a signed magnitude: negative when `rand() <= 0.5`.
fn signed(cx: &mut Cx<'_>, (m, random_sign): (f64, bool)) -> f64 {
    if random_sign && cx.rng.next_f64() <= 0.5 { -m } else { m }
}

/// torchvision's `_apply_image_or_video_transform` on a PIL image.
pub(crate) fn apply(cx: &mut Cx<'_>, op: Aug, magnitude: f64, interpolation: Interpolation, fill: [u8; 3]) {
    let enhance = |what| Step::Enhance {
        what,
        factor: (1.0 + magnitude) as f32,
    };
    match op {
        Aug::Identity => {}
        Aug::ShearX => push_affine(
            cx,
            0.0,
            [0.0, 0.0],
            1.0,
            [magnitude.atan().to_degrees(), 0.0],
            Some([0.0, 0.0]),
            interpolation,
            fill,
        ),
        Aug::ShearY => push_affine(
            cx,
            0.0,
            [0.0, 0.0],
            1.0,
            [0.0, magnitude.atan().to_degrees()],
            Some([0.0, 0.0]),
            interpolation,
            fill,
        ),
        Aug::TranslateX => push_affine(
            cx,
            0.0,
            [magnitude.trunc(), 0.0],
            1.0,
            [0.0, 0.0],
            None,
            interpolation,
            fill,
        ),
        Aug::TranslateY => push_affine(
            cx,
            0.0,
            [0.0, magnitude.trunc()],
            1.0,
            [0.0, 0.0],
            None,
            interpolation,
            fill,
        ),
        Aug::Rotate => push_rotation(cx, magnitude, interpolation, false, None, fill),
        Aug::Brightness => cx.push(enhance(Enhance::Brightness)),
        Aug::Color => cx.push(enhance(Enhance::Saturation)),
        Aug::Contrast => cx.push(enhance(Enhance::Contrast)),
        Aug::Sharpness => cx.push(enhance(Enhance::Sharpness)),
        Aug::Posterize => cx.push(posterize(magnitude as u32)),
        Aug::Solarize => cx.push(solarize(255.0 * magnitude)),
        Aug::AutoContrast => cx.push(Step::Autocontrast),
        Aug::Equalize => cx.push(Step::Equalize),
        Aug::Invert => cx.push(invert()),
    }
}

/// The ImageNet policy: 25 pairs of (op, probability, magnitude bin).
#[rustfmt::skip]
const IMAGENET: [[(Aug, f64, Option<usize>); 2]; 25] = [
    [(Aug::Posterize, 0.4, Some(8)), (Aug::Rotate, 0.6, Some(9))],
    [(Aug::Solarize, 0.6, Some(5)), (Aug::AutoContrast, 0.6, None)],
    [(Aug::Equalize, 0.8, None), (Aug::Equalize, 0.6, None)],
    [(Aug::Posterize, 0.6, Some(7)), (Aug::Posterize, 0.6, Some(6))],
    [(Aug::Equalize, 0.4, None), (Aug::Solarize, 0.2, Some(4))],
    [(Aug::Equalize, 0.4, None), (Aug::Rotate, 0.8, Some(8))],
    [(Aug::Solarize, 0.6, Some(3)), (Aug::Equalize, 0.6, None)],
    [(Aug::Posterize, 0.8, Some(5)), (Aug::Equalize, 1.0, None)],
    [(Aug::Rotate, 0.2, Some(3)), (Aug::Solarize, 0.6, Some(8))],
    [(Aug::Equalize, 0.6, None), (Aug::Posterize, 0.4, Some(6))],
    [(Aug::Rotate, 0.8, Some(8)), (Aug::Color, 0.4, Some(0))],
    [(Aug::Rotate, 0.4, Some(9)), (Aug::Equalize, 0.6, None)],
    [(Aug::Equalize, 0.0, None), (Aug::Equalize, 0.8, None)],
    [(Aug::Invert, 0.6, None), (Aug::Equalize, 1.0, None)],
    [(Aug::Color, 0.6, Some(4)), (Aug::Contrast, 1.0, Some(8))],
    [(Aug::Rotate, 0.8, Some(8)), (Aug::Color, 1.0, Some(2))],
    [(Aug::Color, 0.8, Some(8)), (Aug::Solarize, 0.8, Some(7))],
    [(Aug::Sharpness, 0.4, Some(7)), (Aug::Invert, 0.6, None)],
    [(Aug::ShearX, 0.6, Some(5)), (Aug::Equalize, 1.0, None)],
    [(Aug::Color, 0.4, Some(0)), (Aug::Equalize, 0.6, None)],
    [(Aug::Equalize, 0.4, None), (Aug::Solarize, 0.2, Some(4))],
    [(Aug::Solarize, 0.6, Some(5)), (Aug::AutoContrast, 0.6, None)],
    [(Aug::Invert, 0.6, None), (Aug::Equalize, 1.0, None)],
    [(Aug::Color, 0.6, Some(4)), (Aug::Contrast, 1.0, Some(8))],
    [(Aug::Equalize, 0.8, None), (Aug::Equalize, 0.6, None)],
];

/// torchvision's `AutoAugment` with its ImageNet policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoAugment {
    pub policy: String,
    pub interpolation: Interpolation,
    pub fill: Option<Fill>,
}

impl Described for AutoAugment {
    const SCHEMA: OpSchema = OpSchema {
        doc: "AutoAugment's learned policy (only the ImageNet one).",
        origin: Origin::Torchvision,
        role: Role::Policy,
        args: &[
            optional(
                "policy",
                ArgKind::Policy,
                "\"imagenet\"",
                "the learned policy; only imagenet",
            ),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"nearest\"",
                "the warps' filter: nearest or bilinear",
            ),
            optional("fill", ArgKind::Fill, "null", "colour outside the image after a warp"),
        ],
    };
}

impl Default for AutoAugment {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

fn check_policy_args(interpolation: Interpolation, fill: &Option<Fill>) -> Result<(), String> {
    interpolation.check_warp()?;
    check_fill(fill)
}

impl OpImpl for AutoAugment {
    fn validate(&self) -> Result<(), String> {
        if self.policy != "imagenet" {
            return Err(format!("policy {:?} is not supported (only \"imagenet\")", self.policy));
        }
        check_policy_args(self.interpolation, &self.fill)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        inp.pixels().saturating_mul(3)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (w, h) = (cx.w, cx.h);
        let policy = IMAGENET[cx.rng.int_inclusive(0, IMAGENET.len() as i64 - 1) as usize];
        for (op, p, bin) in policy {
            if cx.rng.next_f64() > p {
                continue;
            }
            let magnitude = match bin.and_then(|i| Space::Standard.magnitude(op, 10, i, w, h)) {
                Some(m) => signed(cx, m),
                None => 0.0,
            };
            apply(cx, op, magnitude, self.interpolation, fill_rgb(&self.fill));
        }
        Ok(())
    }
}

/// torchvision's `RandAugment`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandAugment {
    pub num_ops: u32,
    pub magnitude: u32,
    pub num_magnitude_bins: u32,
    pub interpolation: Interpolation,
    pub fill: Option<Fill>,
}

impl Described for RandAugment {
    const SCHEMA: OpSchema = OpSchema {
        doc: "num_ops random augmentations of strength magnitude (of num_magnitude_bins).",
        origin: Origin::Torchvision,
        role: Role::Policy,
        args: &[
            optional("num_ops", ArgKind::Int, "2", "augmentations applied in turn"),
            optional(
                "magnitude",
                ArgKind::Int,
                "9",
                "their strength, a bin below num_magnitude_bins",
            ),
            optional("num_magnitude_bins", ArgKind::Int, "31", "number of strength bins"),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"nearest\"",
                "the warps' filter: nearest or bilinear",
            ),
            optional("fill", ArgKind::Fill, "null", "colour outside the image after a warp"),
        ],
    };
}

impl Default for RandAugment {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

fn check_bins(n: u32) -> Result<(), String> {
    if !(2..=1000).contains(&n) {
        return Err(format!("num_magnitude_bins {n} must lie in [2, 1000]"));
    }
    Ok(())
}

impl OpImpl for RandAugment {
    fn validate(&self) -> Result<(), String> {
        check_bins(self.num_magnitude_bins)?;
        if self.magnitude >= self.num_magnitude_bins {
            return Err(format!(
                "magnitude {} must be below num_magnitude_bins {}",
                self.magnitude, self.num_magnitude_bins
            ));
        }
        if self.num_ops > 32 {
            return Err(format!("num_ops {} must be at most 32", self.num_ops));
        }
        check_policy_args(self.interpolation, &self.fill)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        inp.pixels().saturating_mul(3)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (w, h) = (cx.w, cx.h);
        for _ in 0..self.num_ops {
            let op = RAND_OPS[cx.rng.int_inclusive(0, RAND_OPS.len() as i64 - 1) as usize];
            let n = self.num_magnitude_bins as usize;
            let magnitude = match Space::Standard.magnitude(op, n, self.magnitude as usize, w, h) {
                Some(m) => signed(cx, m),
                None => 0.0,
            };
            apply(cx, op, magnitude, self.interpolation, fill_rgb(&self.fill));
        }
        Ok(())
    }
}

/// torchvision's `TrivialAugmentWide`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrivialAugmentWide {
    pub num_magnitude_bins: u32,
    pub interpolation: Interpolation,
    pub fill: Option<Fill>,
}

impl Described for TrivialAugmentWide {
    const SCHEMA: OpSchema = OpSchema {
        doc: "One random augmentation of random strength.",
        origin: Origin::Torchvision,
        role: Role::Policy,
        args: &[
            optional("num_magnitude_bins", ArgKind::Int, "31", "number of strength bins"),
            optional(
                "interpolation",
                ArgKind::Interpolation,
                "\"nearest\"",
                "the warps' filter: nearest or bilinear",
            ),
            optional("fill", ArgKind::Fill, "null", "colour outside the image after a warp"),
        ],
    };
}

impl Default for TrivialAugmentWide {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

impl OpImpl for TrivialAugmentWide {
    fn validate(&self) -> Result<(), String> {
        check_bins(self.num_magnitude_bins)?;
        check_policy_args(self.interpolation, &self.fill)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        inp.pixels().saturating_mul(3)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (w, h) = (cx.w, cx.h);
        let op = RAND_OPS[cx.rng.int_inclusive(0, RAND_OPS.len() as i64 - 1) as usize];
        let n = self.num_magnitude_bins as usize;
        let bin = cx.rng.int_inclusive(0, n as i64 - 1) as usize;
        let magnitude = match Space::Wide.magnitude(op, n, bin, w, h) {
            Some(m) => signed(cx, m),
            None => 0.0,
        };
        apply(cx, op, magnitude, self.interpolation, fill_rgb(&self.fill));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magnitudes_match_torchvision() {
        // torch.linspace(0.0, 0.99, 31)[30] == 0.99 (float32), [15] from the end.
        assert_eq!(linspace(0.0, 0.99, 31, 30), f64::from(0.99f32));
        assert_eq!(linspace(0.0, 30.0, 31, 0), 0.0);
        // (8 - arange(31) / (30 / 4)).round().int(): 8 at 0, 4 at 30.
        assert_eq!(posterize_bits(31, 4.0, 0), 8.0);
        assert_eq!(posterize_bits(31, 4.0, 30), 4.0);
        assert_eq!(posterize_bits(31, 4.0, 9), 7.0);
        assert_eq!(posterize_bits(31, 6.0, 30), 2.0);
        // AutoAugment: 10 bins, solarize from 1 to 0.
        assert_eq!(
            Space::Standard.magnitude(Aug::Solarize, 10, 9, 1, 1),
            Some((0.0, false))
        );
    }
}
