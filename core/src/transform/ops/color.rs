//! Colour ops: ColorJitter, Grayscale, RandomGrayscale, RandomSolarize,
//! RandomPosterize, RandomEqualize, RandomAutocontrast,
//! RandomAdjustSharpness, RandomInvert. Each follows torchvision on PIL
//! images (`ImageEnhance`, `ImageOps`).

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, Enhance, ResolveError, Step};
use crate::transform::args::{Range, check_p, check_range};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional, required};

/// Random brightness, contrast, saturation and hue factors, applied in a
/// random order (torchvision's `ColorJitter`). A lone number `x` is
/// `[max(0, 1 - x), 1 + x]`, for hue `[-x, x]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColorJitter {
    pub brightness: Option<Range>,
    pub contrast: Option<Range>,
    pub saturation: Option<Range>,
    pub hue: Option<Range>,
}

impl Described for ColorJitter {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Brightness, contrast, saturation and hue changed by random factors, in a random order.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[
            optional(
                "brightness",
                ArgKind::OptRange,
                "null",
                "factor range; a number x is [max(0, 1 - x), 1 + x]",
            ),
            optional(
                "contrast",
                ArgKind::OptRange,
                "null",
                "factor range; a number x is [max(0, 1 - x), 1 + x]",
            ),
            optional(
                "saturation",
                ArgKind::OptRange,
                "null",
                "factor range; a number x is [max(0, 1 - x), 1 + x]",
            ),
            optional(
                "hue",
                ArgKind::OptRange,
                "null",
                "shift range within [-0.5, 0.5]; a number x is [-x, x]",
            ),
        ],
    };
}

impl ColorJitter {
    fn factor_range(r: Option<Range>) -> Option<(f64, f64)> {
        let r = r?.around_one();
        (r != (1.0, 1.0)).then_some(r)
    }

    fn hue_range(&self) -> Option<(f64, f64)> {
        let r = self.hue?.symmetric();
        (r != (0.0, 0.0)).then_some(r)
    }
}

fn check_nonneg_number(what: &str, r: Option<Range>) -> Result<(), String> {
    if let Some(Range::One(x)) = r
        && !(x >= 0.0 && x.is_finite())
    {
        return Err(format!("{what} {x} must be non-negative"));
    }
    Ok(())
}

impl OpImpl for ColorJitter {
    fn validate(&self) -> Result<(), String> {
        for (what, r) in [
            ("brightness", self.brightness),
            ("contrast", self.contrast),
            ("saturation", self.saturation),
        ] {
            check_nonneg_number(what, r)?;
            if let Some(r) = r {
                check_range(what, r.around_one(), 0.0, 1e4)?;
            }
        }
        check_nonneg_number("hue", self.hue)?;
        if let Some(r) = self.hue {
            check_range("hue", r.symmetric(), -0.5, 0.5)?;
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        // Hue's HSV copy.
        inp.pixels().saturating_mul(3)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        // torch.randperm(4), then every factor that is set.
        let mut order = [0usize, 1, 2, 3];
        for i in (1..order.len()).rev() {
            let j = cx.rng.int_inclusive(0, i as i64) as usize;
            order.swap(i, j);
        }
        let mut draw = |r: Option<(f64, f64)>| r.map(|(a, b)| cx.rng.uniform(a, b) as f32);
        let factors = [
            draw(Self::factor_range(self.brightness)),
            draw(Self::factor_range(self.contrast)),
            draw(Self::factor_range(self.saturation)),
            draw(self.hue_range()),
        ];
        for which in order {
            let Some(factor) = factors[which] else { continue };
            let step = match which {
                0 => Step::Enhance {
                    what: Enhance::Brightness,
                    factor,
                },
                1 => Step::Enhance {
                    what: Enhance::Contrast,
                    factor,
                },
                2 => Step::Enhance {
                    what: Enhance::Saturation,
                    factor,
                },
                _ => Step::Hue { factor },
            };
            cx.push(step);
        }
        Ok(())
    }
}

/// The image's luma in every channel (torchvision's `Grayscale` with
/// `num_output_channels=3`; Stoker delivers three channels, so 1 is
/// refused rather than silently widened).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grayscale {
    pub num_output_channels: u32,
}

impl Described for Grayscale {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Converted to grey (Stoker delivers 3 channels: num_output_channels must be 3).",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[optional(
            "num_output_channels",
            ArgKind::Int,
            "1",
            "channels of the output; only 3 is accepted",
        )],
    };
}

fn grey() -> Step {
    Step::Enhance {
        what: Enhance::Saturation,
        factor: 0.0,
    }
}

impl OpImpl for Grayscale {
    fn validate(&self) -> Result<(), String> {
        match self.num_output_channels {
            3 => Ok(()),
            n => Err(format!(
                "num_output_channels={n}: Stoker delivers 3-channel images; use Grayscale(num_output_channels=3) or RandomGrayscale(p=1.0)"
            )),
        }
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        cx.push(grey());
        Ok(())
    }
}

/// Greyscale with probability `p` (channels kept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomGrayscale {
    pub p: f64,
}

impl Described for RandomGrayscale {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Converted to grey (3 channels) with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[optional(
            "p",
            ArgKind::Probability,
            "0.1",
            "probability of the conversion",
        )],
    };
}

/// An op that runs one step with probability `p`; `$step` builds it.
macro_rules! with_p {
    ($ty:ident, |$s:ident, $cx:ident| $check:expr, |$s2:ident| $step:expr) => {
        impl OpImpl for $ty {
            fn validate(&self) -> Result<(), String> {
                check_p(self.p)?;
                let $s = self;
                $check
            }

            fn bounds(&self, b: Bounds) -> Bounds {
                b
            }

            fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
                // Sharpness's smoothed copy; the others hold less.
                inp.pixels().saturating_mul(3)
            }

            fn resolve(&self, $cx: &mut Cx<'_>) -> Result<(), ResolveError> {
                if $cx.rng.bernoulli(self.p) {
                    let $s2 = self;
                    $cx.push($step);
                }
                Ok(())
            }
        }
    };
}

with_p!(RandomGrayscale, |_s, cx| Ok(()), |_s| grey());

/// Values at or above `threshold` inverted, with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomSolarize {
    pub threshold: f64,
    pub p: f64,
}

impl Described for RandomSolarize {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Values at or above threshold inverted, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[
            required("threshold", ArgKind::Number, "values at or above it are inverted"),
            optional("p", ArgKind::Probability, "0.5", "probability of solarizing"),
        ],
    };
}

with_p!(
    RandomSolarize,
    |s, cx| check_range("threshold", (s.threshold, s.threshold), 0.0, 255.0),
    |s| solarize(s.threshold)
);

/// Only the top `bits` of each value kept, with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomPosterize {
    pub bits: u32,
    pub p: f64,
}

impl Described for RandomPosterize {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Only the top bits of each value kept, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[
            required("bits", ArgKind::Int, "bits kept per channel, 0 to 8"),
            optional("p", ArgKind::Probability, "0.5", "probability of posterizing"),
        ],
    };
}

with_p!(
    RandomPosterize,
    |s, cx| if s.bits <= 8 {
        Ok(())
    } else {
        Err(format!("bits {} must lie in [0, 8]", s.bits))
    },
    |s| posterize(s.bits)
);

/// Histogram equalisation with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomEqualize {
    pub p: f64,
}

impl Described for RandomEqualize {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Histogram equalised, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[optional("p", ArgKind::Probability, "0.5", "probability of equalising")],
    };
}

with_p!(RandomEqualize, |_s, cx| Ok(()), |_s| Step::Equalize);

/// Each channel stretched to 0..=255, with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomAutocontrast {
    pub p: f64,
}

impl Described for RandomAutocontrast {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Contrast stretched to the full range, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[optional("p", ArgKind::Probability, "0.5", "probability of the stretch")],
    };
}

with_p!(RandomAutocontrast, |_s, cx| Ok(()), |_s| Step::Autocontrast);

/// Sharpness by `sharpness_factor` (0 blurs, 1 keeps, 2 sharpens), with
/// probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomAdjustSharpness {
    pub sharpness_factor: f64,
    pub p: f64,
}

impl Described for RandomAdjustSharpness {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Sharpness by sharpness_factor (0 blurs, 1 keeps, 2 sharpens), with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[
            required("sharpness_factor", ArgKind::Number, "non-negative sharpness factor"),
            optional("p", ArgKind::Probability, "0.5", "probability of the change"),
        ],
    };
}

with_p!(
    RandomAdjustSharpness,
    |s, cx| check_range("sharpness_factor", (s.sharpness_factor, s.sharpness_factor), 0.0, 1e4),
    |s| Step::Enhance {
        what: Enhance::Sharpness,
        factor: s.sharpness_factor as f32
    }
);

/// Every value `v` becomes `255 - v`, with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomInvert {
    pub p: f64,
}

impl Described for RandomInvert {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Inverted, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[optional("p", ArgKind::Probability, "0.5", "probability of inverting")],
    };
}

with_p!(RandomInvert, |_s, cx| Ok(()), |_s| invert());

fn lut(f: impl Fn(u32) -> u32) -> Step {
    let mut table = Box::new([0u8; 256]);
    for (i, v) in table.iter_mut().enumerate() {
        *v = f(i as u32).min(255) as u8;
    }
    Step::Lut { table }
}

/// `ImageOps.solarize(threshold)`.
pub(crate) fn solarize(threshold: f64) -> Step {
    lut(|i| if f64::from(i) < threshold { i } else { 255 - i })
}

/// timm's `solarize_add`: `add` to values below `threshold`.
pub(crate) fn solarize_add(add: u32, threshold: u32) -> Step {
    lut(|i| if i < threshold { i + add } else { i })
}

/// `ImageOps.posterize(bits)`.
pub(crate) fn posterize(bits: u32) -> Step {
    let mask = !((1u32 << (8 - bits.min(8))) - 1);
    lut(move |i| i & mask)
}

/// `ImageOps.invert`.
pub(crate) fn invert() -> Step {
    lut(|i| 255 - i)
}
