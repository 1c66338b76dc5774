//! The size bounds of a spec: the sizes an image can have at each point
//! of a pipeline ([`Bounds`]), and the walk over them ([`Walk`]) that
//! finds the most a sample's transform holds at once, or the first step
//! that would make an image over the pixel limit ([`TooLarge`]), from the
//! image size alone.

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
