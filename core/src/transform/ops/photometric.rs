//! RandomPhotometricDistort and RandomChannelPermutation: torchvision v2's
//! detection-recipe colour ops (`transforms/v2/_color.py`), on PIL images.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, Enhance, ResolveError, Step};
use crate::transform::args::{check_p, check_range};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional};

/// Brightness, contrast, saturation and hue each changed with probability
/// `p` by a factor uniform in its range, contrast before or after
/// saturation and hue (a fair draw), then the channels permuted with
/// probability `p` (torchvision's `RandomPhotometricDistort`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomPhotometricDistort {
    pub brightness: [f64; 2],
    pub contrast: [f64; 2],
    pub saturation: [f64; 2],
    pub hue: [f64; 2],
    pub p: f64,
}

impl Described for RandomPhotometricDistort {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Brightness, contrast, saturation and hue each changed with probability p, contrast first or last, \
              then the channels shuffled with probability p (SSD's photometric distortion).",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[
            optional(
                "brightness",
                ArgKind::Pair,
                "[0.875, 1.125]",
                "range of the brightness factor",
            ),
            optional("contrast", ArgKind::Pair, "[0.5, 1.5]", "range of the contrast factor"),
            optional(
                "saturation",
                ArgKind::Pair,
                "[0.5, 1.5]",
                "range of the saturation factor",
            ),
            optional(
                "hue",
                ArgKind::Pair,
                "[-0.05, 0.05]",
                "range of the hue shift, within [-0.5, 0.5]",
            ),
            optional(
                "p",
                ArgKind::Probability,
                "0.5",
                "probability of each change and of the channel shuffle",
            ),
        ],
    };
}

impl OpImpl for RandomPhotometricDistort {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)?;
        for (what, [lo, hi]) in [
            ("brightness", self.brightness),
            ("contrast", self.contrast),
            ("saturation", self.saturation),
        ] {
            check_range(what, (lo, hi), 0.0, 1e4)?;
        }
        check_range("hue", (self.hue[0], self.hue[1]), -0.5, 0.5)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn scratch(&self, inp: Bounds, _out: Bounds) -> u64 {
        // Hue's HSV copy.
        inp.pixels().saturating_mul(3)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        // torchvision's draws, in its order: each factor (its coin, then
        // its value), contrast's place, then the permutation's coin.
        let p = self.p;
        let mut factor = |[lo, hi]: [f64; 2]| cx.rng.bernoulli(p).then(|| cx.rng.uniform(lo, hi) as f32);
        let brightness = factor(self.brightness);
        let contrast = factor(self.contrast);
        let saturation = factor(self.saturation);
        let hue = factor(self.hue);
        let contrast_before = cx.rng.bernoulli(0.5);
        let enhance = |what, factor| Step::Enhance { what, factor };
        if let Some(f) = brightness {
            cx.push(enhance(Enhance::Brightness, f));
        }
        if let Some(f) = contrast.filter(|_| contrast_before) {
            cx.push(enhance(Enhance::Contrast, f));
        }
        if let Some(f) = saturation {
            cx.push(enhance(Enhance::Saturation, f));
        }
        if let Some(factor) = hue {
            cx.push(Step::Hue { factor });
        }
        if let Some(f) = contrast.filter(|_| !contrast_before) {
            cx.push(enhance(Enhance::Contrast, f));
        }
        if cx.rng.bernoulli(p) {
            let order = random_permutation(cx);
            cx.push(Step::Permute { order });
        }
        Ok(())
    }
}

/// A uniform permutation of the three channels (Fisher-Yates, as
/// ColorJitter draws its order).
fn random_permutation(cx: &mut Cx<'_>) -> [u8; 3] {
    let mut order = [0u8, 1, 2];
    for i in (1..order.len()).rev() {
        let j = cx.rng.int_inclusive(0, i as i64) as usize;
        order.swap(i, j);
    }
    order
}

/// The channels in a random order (torchvision's
/// `RandomChannelPermutation`: always, a uniform permutation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomChannelPermutation {}

impl Described for RandomChannelPermutation {
    const SCHEMA: OpSchema = OpSchema {
        doc: "The channels in a random order.",
        origin: Origin::Torchvision,
        role: Role::Colour,
        args: &[],
    };
}

impl OpImpl for RandomChannelPermutation {
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let order = random_permutation(cx);
        cx.push(Step::Permute { order });
        Ok(())
    }
}
