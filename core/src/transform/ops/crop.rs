//! Crops: RandomResizedCrop, CenterCrop, RandomCrop.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::Rect;
use crate::params::{Bounds, Cx, RESIZE_BYTES_PER_LINE, ResolveError, Step, round_half_even};
use crate::rng::SampleRng;
use crate::targets::TargetStep;
use crate::transform::args::{CropSize, Fill, Interpolation, Padding, PaddingMode, check_range};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, construct, optional, required};

/// A random box of `scale` of the area and `ratio` aspect, resized to
/// `size` (torchvision's `RandomResizedCrop`; PIL always antialiases, so
/// `antialias` is accepted and has no effect, as on PIL images).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomResizedCrop {
    pub size: CropSize,
    pub scale: [f64; 2],
    pub ratio: [f64; 2],
    pub interpolation: Interpolation,
    pub antialias: Option<bool>,
}

impl Described for RandomResizedCrop {
    const SCHEMA: OpSchema = OpSchema {
        doc: "A crop of random area (scale) and aspect ratio (ratio), resized to size.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required("size", ArgKind::Size, "output size"),
            optional(
                "scale",
                ArgKind::Pair,
                "[0.08, 1.0]",
                "range of the crop's area, as a fraction of the image's",
            ),
            optional(
                "ratio",
                ArgKind::Pair,
                "[0.75, 1.3333333333333333]",
                "range of the crop's aspect ratio (width / height), drawn log-uniformly",
            ),
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

impl RandomResizedCrop {
    /// torchvision's defaults around `size`.
    pub fn new(size: u32) -> Self {
        construct(serde_json::json!({ "size": size }))
    }
}

/// A resize's scratch: the pass between its two directions (either may
/// run first: `in_w x out_h` or `out_w x in_h`, which for a strip can be
/// far more than input and output together), and its weights, per output
/// and input line of each direction (a 1-pixel-high strip scaled up has as
/// many weight rows as it has columns). Both found by the fuzz target
/// `image_transform`.
pub(crate) fn resize_scratch(inp: Bounds, out: Bounds) -> u64 {
    let lines = |b: &Bounds| b.max_w.saturating_add(b.max_h);
    let pass = (inp.max_w.saturating_mul(out.max_h)).max(out.max_w.saturating_mul(inp.max_h));
    pass.max(inp.pixels())
        .max(out.pixels())
        .saturating_mul(3)
        .saturating_add(RESIZE_BYTES_PER_LINE.saturating_mul(lines(&inp).saturating_add(lines(&out))))
}

impl OpImpl for RandomResizedCrop {
    fn validate(&self) -> Result<(), String> {
        self.size.check("size")?;
        let [s0, s1] = self.scale;
        if !(s0 > 0.0 && s0 <= s1 && s1 <= 1.0) {
            return Err(format!("scale ({s0}, {s1}) must satisfy 0 < min <= max <= 1"));
        }
        let [r0, r1] = self.ratio;
        check_range("ratio", (r0, r1), f64::MIN_POSITIVE, 1e6)?;
        if r0 <= 0.0 {
            return Err(format!("ratio ({r0}, {r1}) must be positive"));
        }
        Ok(())
    }

    fn bounds(&self, _b: Bounds) -> Bounds {
        let (w, h) = self.size.wh();
        Bounds::exact(u64::from(w), u64::from(h))
    }

    fn scratch(&self, inp: Bounds, out: Bounds) -> u64 {
        resize_scratch(inp, out)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (top, left, ch, cw) = random_resized_crop_box(
            &mut cx.rng,
            cx.w,
            cx.h,
            (self.scale[0], self.scale[1]),
            (self.ratio[0], self.ratio[1]),
        );
        let (out_w, out_h) = self.size.wh();
        cx.push(Step::CropResize {
            crop: Rect::new(left, top, cw, ch),
            out_w,
            out_h,
            filter: self.interpolation,
        });
        Ok(())
    }
}

/// torchvision's `RandomResizedCrop.get_params`: (top, left, height, width).
pub(crate) fn random_resized_crop_box(
    rng: &mut SampleRng,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> (i64, i64, u32, u32) {
    let (w_img, h_img) = (f64::from(width), f64::from(height));
    let area = w_img * h_img;
    let (log_r0, log_r1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target_area = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_r0, log_r1).exp();
        let w = round_half_even((target_area * aspect).sqrt());
        let h = round_half_even((target_area / aspect).sqrt());
        if 0 < w && w <= i64::from(width) && 0 < h && h <= i64::from(height) {
            let top = rng.int_inclusive(0, i64::from(height) - h);
            let left = rng.int_inclusive(0, i64::from(width) - w);
            return (top, left, h as u32, w as u32);
        }
    }
    // Fallback: a centre crop of the whole image within the ratio bounds.
    let in_ratio = w_img / h_img;
    let (w, h) = if in_ratio < ratio.0 {
        (i64::from(width), round_half_even(w_img / ratio.0))
    } else if in_ratio > ratio.1 {
        (round_half_even(h_img * ratio.1), i64::from(height))
    } else {
        (i64::from(width), i64::from(height))
    };
    let (w, h) = (w.max(1), h.max(1));
    (
        (i64::from(height) - h) / 2,
        (i64::from(width) - w) / 2,
        h as u32,
        w as u32,
    )
}

/// The centre `size`, padded with zeros where the image is smaller
/// (torchvision's `CenterCrop`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CenterCrop {
    pub size: CropSize,
}

impl Described for CenterCrop {
    const SCHEMA: OpSchema = OpSchema {
        doc: "The central size x size crop (padded when the image is smaller).",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[required("size", ArgKind::Size, "output size")],
    };
}

impl CenterCrop {
    pub fn new(size: u32) -> Self {
        Self {
            size: CropSize::Square(size),
        }
    }
}

/// torchvision's centre-crop anchor along one side: the image's offset in
/// the crop's coordinates (negative: the crop starts inside the image).
fn center_offset(image: u32, crop: u32) -> i64 {
    if crop > image {
        // Padded first: (crop - image) // 2 before, the rest after.
        -i64::from((crop - image) / 2)
    } else {
        round_half_even((f64::from(image) - f64::from(crop)) / 2.0)
    }
}

impl OpImpl for CenterCrop {
    fn validate(&self) -> Result<(), String> {
        self.size.check("size")
    }

    fn bounds(&self, _b: Bounds) -> Bounds {
        let (w, h) = self.size.wh();
        Bounds::exact(u64::from(w), u64::from(h))
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (cw, ch) = self.size.wh();
        if (cw, ch) == (cx.w, cx.h) {
            return Ok(());
        }
        let crop = Rect::new(center_offset(cx.w, cw), center_offset(cx.h, ch), cw, ch);
        let step = Step::CropResize {
            crop,
            out_w: cw,
            out_h: ch,
            filter: Interpolation::Bilinear,
        };
        // torchvision places boxes and keypoints at `round((image - crop) /
        // 2)` even where it pads the image (which it pads by `(crop -
        // image) // 2`): with an odd difference, a crop larger than the
        // image moves them a pixel further than its pixels
        // (`center_crop_bounding_boxes`). They follow torchvision's rule.
        let anchor = |image: u32, crop: u32| round_half_even((f64::from(image) - f64::from(crop)) / 2.0);
        let boxes = Rect::new(anchor(cx.w, cw), anchor(cx.h, ch), cw, ch);
        cx.push_with_target(step, TargetStep::Crop(boxes));
        Ok(())
    }
}

/// A random `size` box, after optional padding (torchvision's `RandomCrop`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomCrop {
    pub size: CropSize,
    pub padding: Option<Padding>,
    pub pad_if_needed: bool,
    pub fill: Fill,
    pub padding_mode: PaddingMode,
}

impl Described for RandomCrop {
    const SCHEMA: OpSchema = OpSchema {
        doc: "A crop at a random position, after optional padding.",
        origin: Origin::Torchvision,
        role: Role::Geometry,
        args: &[
            required("size", ArgKind::Size, "output size"),
            optional("padding", ArgKind::OptPadding, "null", "padding added first"),
            optional(
                "pad_if_needed",
                ArgKind::Bool,
                "false",
                "pad an image smaller than size",
            ),
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

impl RandomCrop {
    pub fn new(size: u32) -> Self {
        construct(serde_json::json!({ "size": size }))
    }
}

impl OpImpl for RandomCrop {
    fn validate(&self) -> Result<(), String> {
        self.size.check("size")?;
        if let Some(p) = &self.padding {
            p.check()?;
        }
        self.fill.check()
    }

    fn bounds(&self, _b: Bounds) -> Bounds {
        let (w, h) = self.size.wh();
        Bounds::exact(u64::from(w), u64::from(h))
    }

    fn scratch(&self, inp: Bounds, out: Bounds) -> u64 {
        // The padded image, when the padding is not plain zeros.
        if self.padding.is_some() || self.pad_if_needed {
            inp.pixels().saturating_add(out.pixels()).saturating_mul(6)
        } else {
            0
        }
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (cw, ch) = self.size.wh();
        let [mut l, mut t, mut r, mut b] = self.padding.as_ref().map_or([0; 4], Padding::ltrb);
        let mut pw = cx.w + l + r;
        let mut ph = cx.h + t + b;
        if self.pad_if_needed {
            if ph < ch {
                let d = ch - ph;
                (t, b, ph) = (t + d, b + d, ph + 2 * d);
            }
            if pw < cw {
                let d = cw - pw;
                (l, r, pw) = (l + d, r + d, pw + 2 * d);
            }
        }
        if ph < ch || pw < cw {
            return Err(cx.err(format!(
                "required crop size {ch}x{cw} is larger than the (padded) image {ph}x{pw}; set pad_if_needed"
            )));
        }
        let top = if ph > ch {
            cx.rng.int_inclusive(0, i64::from(ph - ch))
        } else {
            0
        };
        let left = if pw > cw {
            cx.rng.int_inclusive(0, i64::from(pw - cw))
        } else {
            0
        };
        let fill = self.fill.rgb();
        let plain_zeros = self.padding_mode == PaddingMode::Constant && fill == [0; 3];
        if [l, t, r, b] != [0; 4] && !plain_zeros {
            cx.push(Step::Pad {
                ltrb: [l, t, r, b],
                mode: self.padding_mode,
                fill,
            });
            (l, t) = (0, 0);
        }
        // Zero padding is a box reaching past the image.
        let crop = Rect::new(left - i64::from(l), top - i64::from(t), cw, ch);
        if (cw, ch) == (cx.w, cx.h) && crop.left == 0 && crop.top == 0 {
            return Ok(());
        }
        cx.push(Step::CropResize {
            crop,
            out_w: cw,
            out_h: ch,
            filter: Interpolation::Bilinear,
        });
        Ok(())
    }
}
