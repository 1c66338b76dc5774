//! RandomErasing.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::Rect;
use crate::params::{Bounds, Cx, EraseFill, ResolveError, Step, round_half_even};
use crate::transform::args::{check_p, check_range};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional};

/// What RandomErasing writes: a number for every channel, one per channel,
/// or `"random"` (normal noise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EraseValue {
    All(f64),
    Channels(Vec<f64>),
    Random(String),
}

/// Erases a random box with probability `p` (torchvision's
/// `RandomErasing`). Its `value` means what it means where the op sits:
/// after `Normalize`, 0 is the mean colour; after `ToDtype(scale=True)`, 1
/// is white; before them, values are 0..=255. Stoker erases the uint8
/// image, so a value is rounded to the nearest pixel value, and noise
/// outside 0..=255 is clamped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomErasing {
    pub p: f64,
    pub scale: [f64; 2],
    pub ratio: [f64; 2],
    pub value: EraseValue,
    pub inplace: bool,
}

impl Described for RandomErasing {
    const SCHEMA: OpSchema = OpSchema {
        doc: "A random box erased to value (a number, one per channel, or 'random' noise), with probability p.",
        origin: Origin::Torchvision,
        role: Role::Erase,
        args: &[
            optional("p", ArgKind::Probability, "0.5", "probability of erasing"),
            optional(
                "scale",
                ArgKind::Pair,
                "[0.02, 0.33]",
                "range of the box's area, as a fraction of the image's",
            ),
            optional("ratio", ArgKind::Pair, "[0.3, 3.3]", "range of the box's aspect ratio"),
            optional(
                "value",
                ArgKind::EraseValue,
                "0",
                "the box's value, per channel, or random normal noise",
            ),
            optional(
                "inplace",
                ArgKind::Bool,
                "false",
                "accepted for torchvision's signature; no effect",
            ),
        ],
    };
}

impl Default for RandomErasing {
    fn default() -> Self {
        construct(serde_json::json!({}))
    }
}

impl OpImpl for RandomErasing {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)?;
        check_range("scale", (self.scale[0], self.scale[1]), 0.0, 1.0)?;
        check_range("ratio", (self.ratio[0], self.ratio[1]), 1e-9, 1e9)?;
        match &self.value {
            EraseValue::All(v) if !v.is_finite() => Err(format!("value {v} must be finite")),
            EraseValue::Channels(v) if v.len() != 1 && v.len() != 3 => {
                Err(format!("value must have 1 or 3 values, got {}", v.len()))
            }
            EraseValue::Channels(v) if !v.iter().all(|x| x.is_finite()) => Err(format!("value {v:?} must be finite")),
            EraseValue::Random(s) if s != "random" => {
                Err(format!("value {s:?} must be a number, a list of numbers or \"random\""))
            }
            _ => Ok(()),
        }
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        if !cx.rng.bernoulli(self.p) {
            return Ok(());
        }
        let (img_w, img_h) = (i64::from(cx.w), i64::from(cx.h));
        let area = (img_w * img_h) as f64;
        let (lr0, lr1) = (self.ratio[0].ln(), self.ratio[1].ln());
        for _ in 0..10 {
            let erase_area = area * cx.rng.uniform(self.scale[0], self.scale[1]);
            let aspect = cx.rng.uniform(lr0, lr1).exp();
            let h = round_half_even((erase_area * aspect).sqrt());
            let w = round_half_even((erase_area / aspect).sqrt());
            if !(h < img_h && w < img_w) {
                continue;
            }
            let top = cx.rng.int_inclusive(0, img_h - h);
            let left = cx.rng.int_inclusive(0, img_w - w);
            if h <= 0 || w <= 0 {
                return Ok(());
            }
            let stage = cx.scale;
            let fill = match &self.value {
                EraseValue::Random(_) => {
                    let (s, o): (Vec<f32>, Vec<f32>) = (0..3).map(|c| stage.affine(c)).unzip();
                    EraseFill::Noise {
                        seed: cx.rng.next_u64(),
                        scale: [s[0], s[1], s[2]],
                        offset: [o[0], o[1], o[2]],
                    }
                }
                EraseValue::All(v) => EraseFill::Color([0, 1, 2].map(|c| stage.to_pixel(*v, c))),
                EraseValue::Channels(v) => {
                    EraseFill::Color([0, 1, 2].map(|c| stage.to_pixel(v[if v.len() == 3 { c } else { 0 }], c)))
                }
            };
            cx.push(Step::Erase {
                rect: Rect::new(left, top, w as u32, h as u32),
                fill,
            });
            return Ok(());
        }
        Ok(())
    }
}
