//! A transform spec resolved into concrete steps for one sample.
//!
//! All randomness is drawn here, on the host, from the sample's
//! [`SampleRng`]. Executors (the CPU path, and later CUDA kernels) only carry
//! out [`Step`]s, so every executor makes the same choices for a sample.
//! The ops themselves live in `transform::ops`, one module each; this
//! module holds what they resolve to and the walk that bounds their memory.

use serde::{Deserialize, Serialize};

use crate::rng::SampleRng;

/// A box of `width` x `height` pixels whose top-left corner is at
/// (`left`, `top`) of an image. It may reach past the image's edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    pub left: i64,
    pub top: i64,
    pub width: u32,
    pub height: u32,
}

impl Rect {
    pub const fn new(left: i64, top: i64, width: u32, height: u32) -> Self {
        Self {
            left,
            top,
            width,
            height,
        }
    }

    /// The whole of a `width` x `height` image.
    pub const fn whole(width: u32, height: u32) -> Self {
        Self::new(0, 0, width, height)
    }

    /// One past the box's last column.
    pub fn right(&self) -> i64 {
        self.left + i64::from(self.width)
    }

    /// One past the box's last row.
    pub fn bottom(&self) -> i64 {
        self.top + i64::from(self.height)
    }

    /// Whether every pixel of the box lies inside an `img_w` x `img_h`
    /// image (no padding needed to read it).
    pub fn inside(&self, img_w: u32, img_h: u32) -> bool {
        self.left >= 0 && self.top >= 0 && self.right() <= i64::from(img_w) && self.bottom() <= i64::from(img_h)
    }
}

/// How a pad fills the border (torchvision's `padding_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaddingMode {
    /// The fill colour.
    #[default]
    Constant,
    /// The edge pixel repeated.
    Edge,
    /// Mirrored without repeating the edge: `2 1 | 0 1 2`.
    Reflect,
    /// Mirrored with the edge: `1 0 | 0 1 2`.
    Symmetric,
}

/// torchvision's `InterpolationMode`, by its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interpolation {
    Nearest,
    NearestExact,
    Bilinear,
    Bicubic,
    Box,
    Hamming,
    Lanczos,
}

impl Interpolation {
    pub fn name(self) -> &'static str {
        match self {
            Self::Nearest => "nearest",
            Self::NearestExact => "nearest-exact",
            Self::Bilinear => "bilinear",
            Self::Bicubic => "bicubic",
            Self::Box => "box",
            Self::Hamming => "hamming",
            Self::Lanczos => "lanczos",
        }
    }

    /// The filters PIL's `Image.transform` takes (rotation, affine).
    pub fn check_warp(self) -> Result<(), String> {
        match self {
            Self::Nearest | Self::NearestExact | Self::Bilinear | Self::Bicubic => Ok(()),
            other => Err(format!(
                "interpolation {:?} is not one of nearest, bilinear, bicubic (what PIL rotates and warps with)",
                other.name()
            )),
        }
    }

    /// The resampling of a warp: nearest-exact warps as nearest (PIL has one
    /// nearest filter).
    pub fn warp(self) -> Warp {
        match self {
            Self::Bilinear => Warp::Bilinear,
            Self::Bicubic => Warp::Bicubic,
            _ => Warp::Nearest,
        }
    }
}

/// The resampling filter of an affine warp (PIL's `Image.transform`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Warp {
    Nearest,
    Bilinear,
    Bicubic,
}

/// A colour enhancement of PIL's `ImageEnhance`, as torchvision applies it
/// to PIL images: a blend of the image with a degenerate copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Enhance {
    /// Blend with black.
    Brightness,
    /// Blend with the mean luma (rounded).
    Contrast,
    /// Blend with the image's own luma (factor 0 is `Grayscale`).
    Saturation,
    /// Blend with PIL's 3x3 `SMOOTH` filter of the image.
    Sharpness,
}

impl Enhance {
    /// The index the GPU kernel takes (0 brightness, 1 contrast, 2
    /// saturation).
    pub fn index(self) -> u32 {
        match self {
            Self::Brightness => 0,
            Self::Contrast => 1,
            Self::Saturation => 2,
            Self::Sharpness => 3,
        }
    }
}

/// What RandomErasing writes into its box.
#[derive(Clone, Debug, PartialEq)]
pub enum EraseFill {
    /// One colour.
    Color([u8; 3]),
    /// Per-pixel normal noise `n` ([`erase_noise`] of `seed`), written as
    /// `round(n * scale[c] + offset[c])`, clamped to 0..=255.
    Noise {
        seed: u64,
        scale: [f32; 3],
        offset: [f32; 3],
    },
}

/// One concrete operation on an image of known size.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Take the box `crop`, which may reach past the image (those pixels
    /// are zero), and resize it to `out_w` x `out_h` with PIL's resampling
    /// filter `filter` (antialiased). A box of the output's size is a plain
    /// crop.
    CropResize {
        crop: Rect,
        out_w: u32,
        out_h: u32,
        filter: Interpolation,
    },
    /// Add `ltrb` (left, top, right, bottom) pixels around the image.
    Pad {
        ltrb: [u32; 4],
        mode: PaddingMode,
        fill: [u8; 3],
    },
    FlipHorizontal,
    FlipVertical,
    /// PIL's `Image.transform(size, AFFINE, matrix, resample, fillcolor)`:
    /// output pixel (x, y) samples the input at `matrix` applied to
    /// (x + 0.5, y + 0.5); outside the input is `fill`.
    Affine {
        matrix: [f64; 6],
        out_w: u32,
        out_h: u32,
        warp: Warp,
        fill: [u8; 3],
    },
    Enhance {
        what: Enhance,
        factor: f32,
    },
    /// Shift the hue (PIL's HSV, as torchvision's `adjust_hue` on PIL).
    Hue {
        factor: f32,
    },
    /// Map every channel value through a table (invert, posterize,
    /// solarize).
    Lut {
        table: Box<[u8; 256]>,
    },
    /// PIL's `ImageOps.equalize`.
    Equalize,
    /// PIL's `ImageOps.autocontrast` (cutoff 0).
    Autocontrast,
    /// Gaussian blur of `kernel` (width, height) taps, reflect border.
    Blur {
        kernel: (u32, u32),
        sigma: f32,
    },
    /// Overwrite `rect` (inside the image).
    Erase {
        rect: Rect,
        fill: EraseFill,
    },
}

impl Step {
    /// This step as it applies to a segmentation mask of the image: the
    /// geometric steps with nearest-neighbour sampling and a fill of 0
    /// (torchvision's handling of `tv_tensors.Mask`); colour steps, blurs
    /// and erasing leave a mask as it is (`None`).
    pub fn for_mask(&self) -> Option<Step> {
        match self {
            Step::CropResize { crop, out_w, out_h, .. } => Some(Step::CropResize {
                crop: *crop,
                out_w: *out_w,
                out_h: *out_h,
                filter: Interpolation::Nearest,
            }),
            Step::Pad { ltrb, mode, .. } => Some(Step::Pad {
                ltrb: *ltrb,
                mode: *mode,
                fill: [0; 3],
            }),
            Step::FlipHorizontal => Some(Step::FlipHorizontal),
            Step::FlipVertical => Some(Step::FlipVertical),
            Step::Affine {
                matrix, out_w, out_h, ..
            } => Some(Step::Affine {
                matrix: *matrix,
                out_w: *out_w,
                out_h: *out_h,
                warp: Warp::Nearest,
                fill: [0; 3],
            }),
            Step::Enhance { .. }
            | Step::Hue { .. }
            | Step::Lut { .. }
            | Step::Equalize
            | Step::Autocontrast
            | Step::Blur { .. }
            | Step::Erase { .. } => None,
        }
    }

    /// The step's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::CropResize { .. } => "crop_resize",
            Self::Pad { .. } => "pad",
            Self::FlipHorizontal => "flip_horizontal",
            Self::FlipVertical => "flip_vertical",
            Self::Affine { .. } => "affine",
            Self::Enhance { .. } => "enhance",
            Self::Hue { .. } => "hue",
            Self::Lut { .. } => "lut",
            Self::Equalize => "equalize",
            Self::Autocontrast => "autocontrast",
            Self::Blur { .. } => "blur",
            Self::Erase { .. } => "erase",
        }
    }

    /// The size of the step's output for an input of `w` x `h`.
    pub fn output_size(&self, w: u32, h: u32) -> (u32, u32) {
        match *self {
            Self::CropResize { out_w, out_h, .. } | Self::Affine { out_w, out_h, .. } => (out_w, out_h),
            Self::Pad { ltrb: [l, t, r, b], .. } => (w + l + r, h + t + b),
            _ => (w, h),
        }
    }
}

/// The standard normal draw of RandomErasing's noise at `index` (pixel
/// index times 3 plus channel, in the erased box): Box-Muller on two
/// counter-based uniforms, in `f64`, so any executor computes it alike.
pub fn erase_noise(seed: u64, index: u64) -> f64 {
    let a = crate::rng::mix64(seed ^ crate::rng::mix64(index.wrapping_mul(2)));
    let b = crate::rng::mix64(seed ^ crate::rng::mix64(index.wrapping_mul(2) + 1));
    let u1 = ((a >> 11) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64);
    let u2 = (b >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Python's `round()`: half to even, as torchvision's arithmetic uses.
pub(crate) fn round_half_even(x: f64) -> i64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        (2.0 * (x / 2.0).round()) as i64
    } else {
        r as i64
    }
}

/// Largest side the size analysis tracks; beyond it every size is "huge".
const SIDE_CAP: u64 = 1 << 40;

/// The sizes an image can have at some point of a pipeline: each side
/// between a min and a max. The input of a spec is either one exact size
/// (an image header) or unknown (validation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub min_w: u64,
    pub min_h: u64,
    pub max_w: u64,
    pub max_h: u64,
}

impl Bounds {
    pub fn exact(w: u64, h: u64) -> Self {
        Self {
            min_w: w,
            min_h: h,
            max_w: w,
            max_h: h,
        }
    }

    /// Any size at all.
    pub fn unknown() -> Self {
        Self {
            min_w: 1,
            min_h: 1,
            max_w: SIDE_CAP,
            max_h: SIDE_CAP,
        }
    }

    /// The one size, when there is one.
    pub fn fixed(&self) -> Option<(u64, u64)> {
        (self.min_w == self.max_w && self.min_h == self.max_h).then_some((self.max_w, self.max_h))
    }

    /// Either of two.
    pub fn union(self, o: Self) -> Self {
        Self {
            min_w: self.min_w.min(o.min_w),
            min_h: self.min_h.min(o.min_h),
            max_w: self.max_w.max(o.max_w),
            max_h: self.max_h.max(o.max_h),
        }
    }

    /// The most pixels.
    pub fn pixels(&self) -> u64 {
        self.max_w.saturating_mul(self.max_h)
    }

    /// Every side grown by `ltrb`.
    pub fn padded(self, [l, t, r, b]: [u32; 4]) -> Self {
        let (dw, dh) = (u64::from(l) + u64::from(r), u64::from(t) + u64::from(b));
        Self {
            min_w: self.min_w + dw,
            min_h: self.min_h + dh,
            max_w: (self.max_w + dw).min(SIDE_CAP),
            max_h: (self.max_h + dh).min(SIDE_CAP),
        }
    }

    /// Square sides of at most the diagonal: where a rotation with
    /// `expand` can take an image.
    pub fn rotated(self) -> Self {
        let d = ((self.max_w as f64).hypot(self.max_h as f64).ceil() as u64 + 2).min(SIDE_CAP);
        let lo = self.min_w.min(self.min_h);
        Self {
            min_w: lo,
            min_h: lo,
            max_w: d,
            max_h: d,
        }
    }
}

/// A transform that would make an image over the pixel limit: the stage
/// (the op's position and name) and the size it would have made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "transform step {index} ({op}) would make a {width}x{height} image ({pixels} pixels), over the limit of {limit} pixels"
)]
pub struct TooLarge {
    pub index: usize,
    pub op: &'static str,
    pub width: u64,
    pub height: u64,
    pub pixels: u64,
    pub limit: u64,
}

/// What a resize holds per column and per row of its input and its output,
/// besides the images: Pillow's weights, as `stoker-image` ports them (a
/// window of 32-bit fixed-point taps per output line, two per input line a
/// downscale spans plus three, up to six for lanczos) and the bounds of
/// each window. An upper bound (the fuzz target `image_transform` measures
/// it).
pub const RESIZE_BYTES_PER_LINE: u64 = 64;

/// The walk of a spec over sizes for [`footprint`].
#[derive(Debug)]
pub struct Walk {
    index: usize,
    peak: u64,
    max_pixels: u64,
    too_large: Option<TooLarge>,
}

impl Walk {
    /// A walk from a decoded `width` x `height` image.
    pub fn new(width: u32, height: u32, max_pixels: u64) -> Self {
        Self {
            index: 0,
            peak: u64::from(width).saturating_mul(u64::from(height)).saturating_mul(3),
            max_pixels,
            too_large: None,
        }
    }

    /// The top-level op being walked, for [`TooLarge::index`].
    pub fn at(&mut self, index: usize) {
        self.index = index;
    }

    /// The peak, or the first step over the limit.
    pub fn finish(self) -> Result<u64, TooLarge> {
        match self.too_large {
            Some(e) => Err(e),
            None => Ok(self.peak),
        }
    }

    /// One op ran from sizes `inp` to `out`, holding `scratch` bytes more.
    pub fn step(&mut self, op: &'static str, inp: Bounds, out: Bounds, scratch: u64) {
        let pixels = out.pixels();
        if pixels > self.max_pixels && self.too_large.is_none() {
            self.too_large = Some(TooLarge {
                index: self.index,
                op,
                width: out.max_w,
                height: out.max_h,
                pixels,
                limit: self.max_pixels,
            });
        }
        let bytes = |b: &Bounds| b.pixels().saturating_mul(3);
        self.peak = self
            .peak
            .max(bytes(&inp).saturating_add(bytes(&out)).saturating_add(scratch));
    }
}

/// Where the pixel values are, for ops that write values (RandomErasing):
/// torchvision's erasing value means a different colour before and after
/// `ToDtype` and `Normalize`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stage {
    /// uint8, 0..=255 (PIL images, `ToImage`).
    Uint8,
    /// Floats scaled to [0, 1] (`ToDtype(float, scale=True)`).
    Float,
    /// After `Normalize(mean, std)`.
    Normalized { mean: [f64; 3], std: [f64; 3] },
}

impl Stage {
    /// The uint8 pixel of channel `c` whose value at this stage is `v`.
    pub fn to_pixel(self, v: f64, c: usize) -> u8 {
        let p = match self {
            Self::Uint8 => v,
            Self::Float => v * 255.0,
            Self::Normalized { mean, std } => (v * std[c] + mean[c]) * 255.0,
        };
        p.round().clamp(0.0, 255.0) as u8
    }

    /// `(scale, offset)` with `pixel = v * scale + offset`.
    pub fn affine(self, c: usize) -> (f32, f32) {
        match self {
            Self::Uint8 => (1.0, 0.0),
            Self::Float => (255.0, 0.0),
            Self::Normalized { mean, std } => ((std[c] * 255.0) as f32, (mean[c] * 255.0) as f32),
        }
    }
}

/// A sample whose draws cannot be carried out (torchvision raises on it):
/// a crop larger than its input without `pad_if_needed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("transform {op}: {reason}")]
pub struct ResolveError {
    pub op: &'static str,
    pub reason: String,
}

/// The state of resolving one sample: its generator (this op's), the size
/// so far, the steps so far and the value stage.
#[derive(Debug)]
pub struct Cx<'a> {
    pub rng: SampleRng,
    pub w: u32,
    pub h: u32,
    pub steps: &'a mut Vec<Step>,
    pub stage: Stage,
    /// The op being resolved, for errors.
    pub op: &'static str,
}

impl Cx<'_> {
    /// Appends a step, updating the size.
    pub fn push(&mut self, step: Step) {
        (self.w, self.h) = step.output_size(self.w, self.h);
        self.steps.push(step);
    }

    pub fn err(&self, reason: impl Into<String>) -> ResolveError {
        ResolveError {
            op: self.op,
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::{EXAMPLES, example_spec};
    use crate::transform::{TransformSpec, footprint, resolve_steps};

    /// The generator of sample `position` of shard "s", seed 1, epoch 2.
    fn rng(position: u64) -> SampleRng {
        SampleRng::for_sample(1, 2, "s", position)
    }

    fn spec(json: &str) -> TransformSpec {
        TransformSpec::from_json(json).unwrap()
    }

    #[test]
    fn a_box_is_inside_only_when_every_edge_is() {
        assert!(Rect::whole(10, 8).inside(10, 8));
        assert!(Rect::new(2, 3, 8, 5).inside(10, 8));
        assert!(!Rect::new(2, 3, 9, 5).inside(10, 8), "past the right edge");
        assert!(!Rect::new(0, 4, 10, 5).inside(10, 8), "past the bottom edge");
        assert!(!Rect::new(-1, 0, 4, 4).inside(10, 8), "left of the image");
        assert!(!Rect::new(0, -1, 4, 4).inside(10, 8), "above the image");
    }

    #[test]
    fn python_rounding() {
        assert_eq!(round_half_even(0.5), 0);
        assert_eq!(round_half_even(1.5), 2);
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(-0.5), 0);
        assert_eq!(round_half_even(2.6), 3);
    }

    #[test]
    fn train_crop_stays_inside_and_is_deterministic() {
        let spec = TransformSpec::train(224);
        for i in 0..2000 {
            let a = resolve_steps(&spec, &rng(i), 500, 375).unwrap();
            assert_eq!(
                a,
                resolve_steps(&spec, &SampleRng::for_sample(1, 2, "s", i), 500, 375).unwrap()
            );
            match a[0] {
                Step::CropResize {
                    crop,
                    out_w,
                    out_h,
                    filter,
                } => {
                    assert!(crop.inside(500, 375), "{crop:?}");
                    assert_eq!((out_w, out_h, filter), (224, 224, Interpolation::Bilinear));
                }
                ref other => panic!("unexpected first step {other:?}"),
            }
        }
    }

    #[test]
    fn flips_about_half_the_time() {
        let spec = TransformSpec::train(32);
        let flips = (0..4000)
            .filter(|&i| {
                resolve_steps(&spec, &rng(i), 64, 64)
                    .unwrap()
                    .contains(&Step::FlipHorizontal)
            })
            .count();
        assert!((1800..2200).contains(&flips), "{flips} flips of 4000");
    }

    #[test]
    fn eval_matches_torchvision_geometry() {
        // 500x375 -> shorter side 256 -> 341x256 -> centre 224.
        let steps = resolve_steps(&TransformSpec::eval(224), &rng(0), 500, 375).unwrap();
        let bilinear = Interpolation::Bilinear;
        assert_eq!(
            steps,
            vec![
                Step::CropResize {
                    crop: Rect::new(0, 0, 500, 375),
                    out_w: 341,
                    out_h: 256,
                    filter: bilinear
                },
                Step::CropResize {
                    crop: Rect::new(58, 16, 224, 224),
                    out_w: 224,
                    out_h: 224,
                    filter: bilinear
                },
            ]
        );
    }

    #[test]
    fn center_crop_pads_as_torchvision() {
        // A 3-row image cropped to 6: padded (6 - 3) // 2 = 1 row on top.
        let steps = resolve_steps(&spec(r#"{"ops": [{"op": "CenterCrop", "size": 6}]}"#), &rng(0), 6, 3).unwrap();
        assert!(
            matches!(
                steps[0],
                Step::CropResize {
                    crop: Rect { left: 0, top: -1, .. },
                    ..
                }
            ),
            "{steps:?}"
        );
    }

    #[test]
    fn footprint_refuses_a_resize_bomb_from_its_size_alone() {
        let eval = TransformSpec::eval(224);
        // 65000x1: the shorter side to 256 makes the long side 16.6 M.
        for (w, h) in [(65000, 1), (1, 65000)] {
            let err = footprint(&eval, w, h, 100_000_000).unwrap_err();
            assert_eq!((err.index, err.op), (0, "Resize"));
            assert_eq!(err.pixels, 65000 * 256 * 256);
            assert!(err.to_string().contains("16640000"), "{err}");
        }
        // An expanding rotation of a large image is bounded by its diagonal.
        let rot = spec(
            r#"{"ops": [{"op": "RandomRotation", "degrees": 30, "expand": true}, {"op": "CenterCrop", "size": 64}]}"#,
        );
        let err = footprint(&rot, 20000, 20000, 500_000_000).unwrap_err();
        assert_eq!((err.index, err.op), (0, "RandomRotation"));
        assert!(footprint(&rot, 2000, 2000, 500_000_000).is_ok());
    }

    #[test]
    fn footprint_counts_a_strip_resize_weights_per_line() {
        // 11000x1 to a shorter side of 19: 209000 output columns, each with
        // its own weights (the fuzzer's image_transform found the resizer
        // holding 32 bytes a column when weights were counted per
        // square-root side).
        let eval = TransformSpec::eval(17);
        let peak = footprint(&eval, 11000, 1, 1 << 22).unwrap();
        let (out_w, out_h) = (11000 * 19, 19);
        let pixels = out_w * out_h;
        assert!(
            peak >= 2 * 3 * pixels + RESIZE_BYTES_PER_LINE * (out_w + out_h),
            "{peak}"
        );
    }

    #[test]
    fn footprint_of_absurd_header_dimensions_is_refused_not_overflowed() {
        // A PNG header can declare 2^32-1 on each side (found by
        // image_transform): the walk saturates instead of overflowing, and
        // the peak is at least the decoded image (the decoder refuses it by
        // the pixel limit first).
        match footprint(&TransformSpec::eval(17), u32::MAX, u32::MAX, 1 << 22) {
            Ok(peak) => assert_eq!(peak, u64::MAX),
            Err(err) => assert_eq!(err.op, "Resize", "{err}"),
        }
        // And no op's bounds or scratch overflows on them (a padded
        // RandomCrop's did, found by image_transform too).
        for (op, ops) in crate::transform::EXAMPLES {
            let spec = TransformSpec::from_json(&crate::transform::example_spec(ops, 32)).unwrap();
            for (w, h) in [(u32::MAX, u32::MAX), (u32::MAX, 1), (1, u32::MAX)] {
                if let Ok(peak) = footprint(&spec, w, h, 1 << 22) {
                    assert!(peak >= u64::from(w) * u64::from(h), "{op}: {peak}");
                }
            }
        }
    }

    #[test]
    fn random_crop_with_padding_reaches_past_the_edge() {
        let spec = spec(r#"{"ops": [{"op": "RandomCrop", "size": 32, "padding": 4}]}"#);
        let mut lefts = std::collections::BTreeSet::new();
        for i in 0..500 {
            // No step: the box is the image itself.
            let (left, top) = match resolve_steps(&spec, &rng(i), 32, 32).unwrap().first() {
                Some(Step::CropResize { crop, .. }) => (crop.left, crop.top),
                _ => (0, 0),
            };
            assert!((-4..=4).contains(&left) && (-4..=4).contains(&top));
            lefts.insert(left);
        }
        assert_eq!(lefts.len(), 9);
        // Smaller than the crop, without pad_if_needed: refused, as torchvision.
        let err = resolve_steps(&spec, &rng(0), 20, 20).unwrap_err();
        assert!(
            err.to_string().contains("RandomCrop") && err.to_string().contains("pad_if_needed"),
            "{err}"
        );
    }

    /// Every example of the registry: deterministic, the output size the
    /// spec says, and within its footprint at every step, over sizes from
    /// one pixel to extreme aspect ratios.
    #[test]
    fn every_example_resolves_within_its_footprint() {
        for (op, ops) in EXAMPLES {
            let spec = spec(&example_spec(ops, 48));
            for (w, h) in [(1, 1), (2, 3), (7, 300), (300, 7), (97, 61), (500, 375)] {
                let peak = footprint(&spec, w, h, 100_000_000).unwrap();
                for i in 0..40 {
                    let Ok(steps) = resolve_steps(&spec, &rng(i), w, h) else {
                        continue;
                    };
                    assert_eq!(Ok(&steps), resolve_steps(&spec, &rng(i), w, h).as_ref(), "{op}");
                    let (mut cw, mut ch) = (w, h);
                    for s in &steps {
                        let (nw, nh) = s.output_size(cw, ch);
                        let bytes = 3 * (u64::from(cw) * u64::from(ch) + u64::from(nw) * u64::from(nh));
                        assert!(bytes <= peak, "{op} {w}x{h}: {s:?} holds {bytes} > {peak}");
                        (cw, ch) = (nw, nh);
                    }
                    assert_eq!((cw, ch), (48, 48), "{op} {w}x{h}: {steps:?}");
                }
            }
        }
    }
}
