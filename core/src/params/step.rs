//! The step language: what a transform spec resolves to for one sample.
//!
//! A [`Step`] is one concrete operation on an image of known size; the
//! CPU path and the CUDA kernels carry steps out and draw nothing
//! themselves. Besides `Step` and its parameters (the crop box [`Rect`],
//! which may reach past the image, with its `inside` check, used by the
//! CPU region decode, the augmenter and the GPU crop alike;
//! [`PaddingMode`], [`Interpolation`] and the warp filter [`Warp`],
//! [`Enhance`], [`EraseFill`]), the arithmetic every executor must do
//! alike: [`erase_noise`] and Python's rounding.

use serde::{Deserialize, Serialize};

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
    /// The channels reordered: output channel `c` is input channel
    /// `order[c]` (torchvision's `permute_channels`).
    Permute {
        order: [u8; 3],
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
            | Step::Permute { .. }
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
            Self::Permute { .. } => "permute",
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
