//! timm's RandAugment, from its config string (`rand-m9-mstd0.5-inc1`),
//! as `timm.data.auto_augment.rand_augment_transform` builds it on PIL
//! images.

use serde::{Deserialize, Serialize};

use super::color::{invert, posterize, solarize, solarize_add};
use super::op_impl::OpImpl;
use super::rotate::push_rotation;
use crate::params::{Bounds, Cx, Enhance, ResolveError, Step};
use crate::transform::args::{Fill, Interpolation, Warp};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional, required};

/// timm's RandAugment. `img_mean` is the fill (timm's `hparams["img_mean"]`,
/// 128 grey by default; `timm.data.create_transform` passes the dataset
/// mean times 255), `interpolation` is `"random"` (bilinear or bicubic per
/// op, timm's default), `"bilinear"` or `"bicubic"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimmRandAugment {
    pub config: String,
    pub img_mean: Option<Fill>,
    pub interpolation: String,
    pub translate_pct: f64,
}

impl Described for TimmRandAugment {
    const SCHEMA: OpSchema = OpSchema {
        doc: "timm's RandAugment from its config string (rand-m9-mstd0.5-inc1): img_mean is the fill (timm's default 128 grey), interpolation random, bilinear or bicubic.",
        origin: Origin::Timm,
        role: Role::Policy,
        args: &[
            required(
                "config",
                ArgKind::Str,
                "timm's config string, as rand_augment_transform reads it",
            ),
            optional(
                "img_mean",
                ArgKind::Fill,
                "null",
                "fill colour (timm's hparams img_mean; 128 grey when None)",
            ),
            optional(
                "interpolation",
                ArgKind::TimmInterpolation,
                "\"random\"",
                "the warps' filter; random picks bilinear or bicubic per warp",
            ),
            optional(
                "translate_pct",
                ArgKind::Number,
                "0.45",
                "largest translation, as a fraction of the size",
            ),
        ],
    };
}

/// The parsed config.
#[derive(Clone, Debug, PartialEq)]
struct Config {
    magnitude: f64,
    num_layers: u32,
    magnitude_std: f64,
    magnitude_max: Option<f64>,
    increasing: bool,
    prob: f64,
}

fn parse(config: &str) -> Result<Config, String> {
    let mut parts = config.split('-');
    if parts.next() != Some("rand") {
        return Err(format!("config {config:?} must start with \"rand\""));
    }
    let mut c = Config {
        magnitude: 10.0,
        num_layers: 2,
        magnitude_std: 0.0,
        magnitude_max: None,
        increasing: false,
        prob: 0.5,
    };
    for part in parts {
        if part.starts_with('t') {
            return Err(format!("config section {part:?} (a transform subset) is not supported"));
        }
        let Some(at) = part.find(|ch: char| ch.is_ascii_digit()) else {
            continue;
        };
        let (key, val) = part.split_at(at);
        let num = |what: &str| -> Result<f64, String> {
            val.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("config section {part:?}: {what} {val:?} is not a number"))
        };
        match key {
            "m" => c.magnitude = num("magnitude")?.trunc(),
            "n" => c.num_layers = num("layers")? as u32,
            "mstd" => {
                let v = num("magnitude std")?;
                c.magnitude_std = if v > 100.0 { f64::INFINITY } else { v };
            }
            "mmax" => c.magnitude_max = Some(num("magnitude max")?.trunc()),
            "inc" => c.increasing = num("inc")? != 0.0,
            "p" => c.prob = num("probability")?,
            _ => {
                return Err(format!(
                    "config section {part:?} is not one of m, n, mstd, mmax, inc, p"
                ));
            }
        }
    }
    if c.num_layers > 32 {
        return Err(format!("config {config:?}: {} layers, at most 32", c.num_layers));
    }
    if !(0.0..=1.0).contains(&c.prob) {
        return Err(format!("config {config:?}: probability {} must lie in [0, 1]", c.prob));
    }
    Ok(c)
}

/// timm's ops; `_RAND_TRANSFORMS` order (the increasing list swaps in the
/// `*Increasing` variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimmOp {
    AutoContrast,
    Equalize,
    Invert,
    Rotate,
    Posterize,
    Solarize,
    SolarizeAdd,
    Color,
    Contrast,
    Brightness,
    Sharpness,
    ShearX,
    ShearY,
    TranslateXRel,
    TranslateYRel,
}

const OPS: [TimmOp; 15] = [
    TimmOp::AutoContrast,
    TimmOp::Equalize,
    TimmOp::Invert,
    TimmOp::Rotate,
    TimmOp::Posterize,
    TimmOp::Solarize,
    TimmOp::SolarizeAdd,
    TimmOp::Color,
    TimmOp::Contrast,
    TimmOp::Brightness,
    TimmOp::Sharpness,
    TimmOp::ShearX,
    TimmOp::ShearY,
    TimmOp::TranslateXRel,
    TimmOp::TranslateYRel,
];

impl TimmRandAugment {
    fn warp(&self, cx: &mut Cx<'_>) -> Warp {
        match self.interpolation.as_str() {
            "bilinear" => Warp::Bilinear,
            "bicubic" => Warp::Bicubic,
            _ if cx.rng.next_f64() < 0.5 => Warp::Bilinear,
            _ => Warp::Bicubic,
        }
    }

    fn fill(&self) -> [u8; 3] {
        self.img_mean.as_ref().map_or([128; 3], Fill::rgb)
    }
}

/// A standard normal draw (Box-Muller).
fn gauss(cx: &mut Cx<'_>) -> f64 {
    let u1 = 1.0 - cx.rng.next_f64();
    let u2 = cx.rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// `_randomly_negate`: negative when `random() > 0.5`.
fn negate(cx: &mut Cx<'_>, v: f64) -> f64 {
    if cx.rng.next_f64() > 0.5 { -v } else { v }
}

impl OpImpl for TimmRandAugment {
    fn validate(&self) -> Result<(), String> {
        parse(&self.config)?;
        if !["random", "bilinear", "bicubic"].contains(&self.interpolation.as_str()) {
            return Err(format!(
                "interpolation {:?} is not one of random, bilinear, bicubic",
                self.interpolation
            ));
        }
        if !(self.translate_pct.is_finite() && (0.0..=1.0).contains(&self.translate_pct)) {
            return Err(format!("translate_pct {} must lie in [0, 1]", self.translate_pct));
        }
        crate::transform::args::check_fill(&self.img_mean)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        inp.pixels().saturating_mul(3)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let c = parse(&self.config).map_err(|e| cx.err(e))?;
        let fill = self.fill();
        for _ in 0..c.num_layers {
            let op = OPS[cx.rng.int_inclusive(0, OPS.len() as i64 - 1) as usize];
            if c.prob < 1.0 && cx.rng.next_f64() > c.prob {
                continue;
            }
            let mut m = c.magnitude;
            if c.magnitude_std == f64::INFINITY {
                m = cx.rng.uniform(0.0, m);
            } else if c.magnitude_std > 0.0 {
                m += c.magnitude_std * gauss(cx);
            }
            let level = m.min(c.magnitude_max.unwrap_or(10.0)).max(0.0) / 10.0;
            let enhance = |cx: &mut Cx<'_>, what| {
                let factor = if c.increasing {
                    let v = negate(cx, level * 0.9);
                    (1.0 + v).max(0.1)
                } else {
                    level * 1.8 + 0.1
                };
                cx.push(Step::Enhance {
                    what,
                    factor: factor as f32,
                });
            };
            match op {
                TimmOp::AutoContrast => cx.push(Step::Autocontrast),
                TimmOp::Equalize => cx.push(Step::Equalize),
                TimmOp::Invert => cx.push(invert()),
                TimmOp::Rotate => {
                    let degrees = negate(cx, level * 30.0);
                    let interpolation = match self.warp(cx) {
                        Warp::Bilinear => Interpolation::Bilinear,
                        _ => Interpolation::Bicubic,
                    };
                    push_rotation(cx, degrees, interpolation, false, None, fill);
                }
                TimmOp::Posterize => {
                    let bits = (level * 4.0) as u32;
                    let bits = if c.increasing { 4 - bits } else { bits };
                    if bits < 8 {
                        cx.push(posterize(bits));
                    }
                }
                TimmOp::Solarize => {
                    let t = ((level * 256.0) as u32).min(256);
                    let t = if c.increasing { 256 - t } else { t };
                    cx.push(solarize(f64::from(t)));
                }
                TimmOp::SolarizeAdd => cx.push(solarize_add(((level * 110.0) as u32).min(128), 128)),
                TimmOp::Color => enhance(cx, Enhance::Saturation),
                TimmOp::Contrast => enhance(cx, Enhance::Contrast),
                TimmOp::Brightness => enhance(cx, Enhance::Brightness),
                TimmOp::Sharpness => enhance(cx, Enhance::Sharpness),
                TimmOp::ShearX | TimmOp::ShearY | TimmOp::TranslateXRel | TimmOp::TranslateYRel => {
                    let matrix = match op {
                        TimmOp::ShearX => [1.0, negate(cx, level * 0.3), 0.0, 0.0, 1.0, 0.0],
                        TimmOp::ShearY => [1.0, 0.0, 0.0, negate(cx, level * 0.3), 1.0, 0.0],
                        TimmOp::TranslateXRel => {
                            let p = negate(cx, level * self.translate_pct) * f64::from(cx.w);
                            [1.0, 0.0, p, 0.0, 1.0, 0.0]
                        }
                        _ => {
                            let p = negate(cx, level * self.translate_pct) * f64::from(cx.h);
                            [1.0, 0.0, 0.0, 0.0, 1.0, p]
                        }
                    };
                    let warp = self.warp(cx);
                    cx.push(Step::Affine {
                        matrix,
                        out_w: cx.w,
                        out_h: cx.h,
                        warp,
                        fill,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_timm_configs() {
        let c = parse("rand-m9-mstd0.5-inc1").unwrap();
        assert_eq!(
            (c.magnitude, c.num_layers, c.magnitude_std, c.increasing),
            (9.0, 2, 0.5, true)
        );
        let c = parse("rand-m7-n3-mmax12-p0.8").unwrap();
        assert_eq!(
            (c.magnitude, c.num_layers, c.magnitude_max, c.prob),
            (7.0, 3, Some(12.0), 0.8)
        );
        assert!(parse("rand-tweights").unwrap_err().contains("transform subset"));
        assert!(parse("augmix-m5").is_err());
        assert!(parse("rand-q3").unwrap_err().contains("not one of"));
    }
}
