//! A transform spec resolved into concrete steps for one sample.
//!
//! All randomness is drawn here, on the host, from the sample's
//! [`SampleRng`]. Executors (the CPU path, and later CUDA kernels) only carry
//! out [`Step`]s, so every executor makes the same choices for a sample.

use crate::rng::SampleRng;
use crate::transform::{Op, TransformSpec};

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

/// One concrete operation on an image of known size.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Take the box `crop`, which may reach past the image (those pixels
    /// are zero), and resize it to `out_w` x `out_h` with an antialiased
    /// bilinear filter. A box of the output's size is a plain crop.
    CropResize {
        crop: Rect,
        out_w: u32,
        out_h: u32,
    },
    FlipHorizontal,
    FlipVertical,
    /// Rotate counter-clockwise by `degrees` about the centre.
    Rotate {
        degrees: f32,
    },
    /// Apply the three factors in `order` (0 brightness, 1 contrast,
    /// 2 saturation).
    Jitter {
        factors: [f32; 3],
        order: [u8; 3],
    },
    Blur {
        kernel_size: u32,
        sigma: f32,
    },
}

/// Python's `round()`: half to even, as torchvision's arithmetic uses.
fn round_half_even(x: f64) -> i64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        (2.0 * (x / 2.0).round()) as i64
    } else {
        r as i64
    }
}

/// torchvision's `RandomResizedCrop.get_params`: (top, left, height, width).
fn random_resized_crop_box(
    rng: &mut SampleRng,
    width: u32,
    height: u32,
    scale: (f32, f32),
    ratio: (f32, f32),
) -> (i64, i64, u32, u32) {
    let (w_img, h_img) = (f64::from(width), f64::from(height));
    let area = w_img * h_img;
    let (log_r0, log_r1) = (f64::from(ratio.0).ln(), f64::from(ratio.1).ln());
    for _ in 0..10 {
        let target_area = area * rng.uniform(f64::from(scale.0), f64::from(scale.1));
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
    let (w, h) = if in_ratio < f64::from(ratio.0) {
        (i64::from(width), round_half_even(w_img / f64::from(ratio.0)))
    } else if in_ratio > f64::from(ratio.1) {
        (round_half_even(h_img * f64::from(ratio.1)), i64::from(height))
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

/// torchvision's `Resize(shorter)`: the shorter side becomes `shorter`, the
/// longer one `int(shorter * long / short)`. Saturates at `u32::MAX` rather
/// than wrapping, so an absurd aspect ratio stays absurd for
/// [`footprint`] to refuse.
fn resize_dims(shorter: u32, w: u32, h: u32) -> (u32, u32) {
    let (w, h) = (w.max(1), h.max(1));
    let long = |long: u32, short: u32| {
        u32::try_from(u64::from(shorter) * u64::from(long) / u64::from(short)).unwrap_or(u32::MAX)
    };
    let (nw, nh) = if w <= h {
        (shorter, long(h, w))
    } else {
        (long(w, h), shorter)
    };
    (nw.max(1), nh.max(1))
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
/// besides the images: fast_image_resize's weights (a window of `f64`s per
/// output line, two taps per input line a downscale spans plus three, then
/// their fixed-point copy) and the bounds of each window. An upper bound of
/// what it measured at (about 32 bytes per output column).
pub const RESIZE_BYTES_PER_LINE: u64 = 64;

/// The most memory, in bytes, that running `spec` on a decoded `width` x
/// `height` RGB image holds at once (the decoded image included), or the
/// stage that would make an image over `max_pixels`.
///
/// It depends on the sizes alone, never on a random draw: every op's output
/// size is fixed by its arguments and its input's size, and a random crop's
/// box lies within its input. So the worker can refuse a sample, or reserve
/// its memory, from the image header, before anything is decoded. A step
/// holds its input, its output and a scratch buffer (a separable resize's
/// pass between the two, at most the larger of them; a blur's float copy,
/// four bytes a channel; a resize's weights, [`RESIZE_BYTES_PER_LINE`]).
pub fn footprint(spec: &TransformSpec, width: u32, height: u32, max_pixels: u64) -> Result<u64, TooLarge> {
    let bytes = |w: u32, h: u32| u64::from(w) * u64::from(h) * 3;
    let (mut w, mut h) = (width, height);
    let mut peak = bytes(w, h);
    for (index, op) in spec.ops.iter().enumerate() {
        let (nw, nh) = match *op {
            Op::RandomResizedCrop { size, .. } | Op::CenterCrop { size } | Op::RandomCrop { size, .. } => (size, size),
            Op::Resize { shorter } => resize_dims(shorter, w, h),
            Op::HorizontalFlip { .. }
            | Op::VerticalFlip { .. }
            | Op::RandomRotation { .. }
            | Op::ColorJitter { .. }
            | Op::GaussianBlur { .. } => (w, h),
        };
        let pixels = u64::from(nw) * u64::from(nh);
        if pixels > max_pixels {
            return Err(TooLarge {
                index,
                op: op.name(),
                width: u64::from(nw),
                height: u64::from(nh),
                pixels,
                limit: max_pixels,
            });
        }
        let (input, output) = (bytes(w, h), bytes(nw, nh));
        let scratch = match op {
            Op::GaussianBlur { .. } => 4 * input,
            Op::HorizontalFlip { .. } | Op::VerticalFlip { .. } => 0,
            // A resize also holds its filter's weights, a window per output
            // column and row: linear in the sides, not the pixels, but
            // megabytes at an extreme aspect ratio (the fuzz target
            // image_transform measures them).
            Op::RandomResizedCrop { .. } | Op::Resize { .. } => {
                input.max(output)
                    + RESIZE_BYTES_PER_LINE * (u64::from(w) + u64::from(h) + u64::from(nw) + u64::from(nh))
            }
            _ => input.max(output),
        };
        peak = peak.max(input + output + scratch);
        (w, h) = (nw, nh);
    }
    Ok(peak)
}

/// Resolves `spec` for one sample whose decoded image is `width` x `height`,
/// drawing from the sample's generator `base` ([`crate::rng::ItemSeed::sample`]).
///
/// The spec must have passed [`TransformSpec::validate`].
pub fn resolve_steps(spec: &TransformSpec, base: &SampleRng, width: u32, height: u32) -> Vec<Step> {
    let (mut w, mut h) = (width, height);
    let mut steps = Vec::with_capacity(spec.ops.len());
    for (i, op) in spec.ops.iter().enumerate() {
        let mut rng = base.fork(i as u64);
        match *op {
            Op::RandomResizedCrop { size, scale, ratio } => {
                let (top, left, ch, cw) = random_resized_crop_box(&mut rng, w, h, scale, ratio);
                steps.push(Step::CropResize {
                    crop: Rect::new(left, top, cw, ch),
                    out_w: size,
                    out_h: size,
                });
                (w, h) = (size, size);
            }
            Op::Resize { shorter } => {
                let (nw, nh) = resize_dims(shorter, w, h);
                if (nw, nh) != (w, h) {
                    steps.push(Step::CropResize {
                        crop: Rect::whole(w, h),
                        out_w: nw,
                        out_h: nh,
                    });
                }
                (w, h) = (nw, nh);
            }
            Op::CenterCrop { size } => {
                let top = round_half_even((f64::from(h) - f64::from(size)) / 2.0);
                let left = round_half_even((f64::from(w) - f64::from(size)) / 2.0);
                steps.push(Step::CropResize {
                    crop: Rect::new(left, top, size, size),
                    out_w: size,
                    out_h: size,
                });
                (w, h) = (size, size);
            }
            Op::RandomCrop { size, padding } => {
                // Pad by `padding` on every side (and more if still smaller
                // than the crop), then pick the crop inside the padded image.
                let pad = i64::from(padding);
                let pw = (i64::from(w) + 2 * pad).max(i64::from(size));
                let ph = (i64::from(h) + 2 * pad).max(i64::from(size));
                let extra_w = (pw - i64::from(w) - 2 * pad) / 2;
                let extra_h = (ph - i64::from(h) - 2 * pad) / 2;
                let top = rng.int_inclusive(0, ph - i64::from(size)) - pad - extra_h;
                let left = rng.int_inclusive(0, pw - i64::from(size)) - pad - extra_w;
                steps.push(Step::CropResize {
                    crop: Rect::new(left, top, size, size),
                    out_w: size,
                    out_h: size,
                });
                (w, h) = (size, size);
            }
            Op::HorizontalFlip { p } => {
                if rng.bernoulli(f64::from(p)) {
                    steps.push(Step::FlipHorizontal);
                }
            }
            Op::VerticalFlip { p } => {
                if rng.bernoulli(f64::from(p)) {
                    steps.push(Step::FlipVertical);
                }
            }
            Op::RandomRotation { degrees } => {
                let d = f64::from(degrees);
                let angle = rng.uniform(-d, d) as f32;
                if angle != 0.0 {
                    steps.push(Step::Rotate { degrees: angle });
                }
            }
            Op::ColorJitter {
                brightness,
                contrast,
                saturation,
            } => {
                let mut order = [0u8, 1, 2];
                for i in (1..order.len()).rev() {
                    let j = rng.int_inclusive(0, i as i64) as usize;
                    order.swap(i, j);
                }
                let mut factor = |x: f32| {
                    if x == 0.0 {
                        1.0
                    } else {
                        rng.uniform(f64::from((1.0 - x).max(0.0)), f64::from(1.0 + x)) as f32
                    }
                };
                let factors = [factor(brightness), factor(contrast), factor(saturation)];
                steps.push(Step::Jitter { factors, order });
            }
            Op::GaussianBlur { kernel_size, sigma } => {
                let s = rng.uniform(f64::from(sigma.0), f64::from(sigma.1)) as f32;
                steps.push(Step::Blur { kernel_size, sigma: s });
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator of sample `position` of shard "s", seed 1, epoch 2.
    fn rng(position: u64) -> SampleRng {
        SampleRng::for_sample(1, 2, "s", position)
    }

    #[test]
    fn a_box_is_inside_only_when_every_edge_is() {
        assert!(Rect::whole(10, 8).inside(10, 8));
        assert!(Rect::new(2, 3, 8, 5).inside(10, 8));
        assert!(!Rect::new(2, 3, 9, 5).inside(10, 8), "past the right edge");
        assert!(!Rect::new(0, 4, 10, 5).inside(10, 8), "past the bottom edge");
        assert!(!Rect::new(-1, 0, 4, 4).inside(10, 8), "left of the image");
        assert!(!Rect::new(0, -1, 4, 4).inside(10, 8), "above the image");
        assert_eq!(
            (Rect::new(-4, 6, 3, 2).right(), Rect::new(-4, 6, 3, 2).bottom()),
            (-1, 8)
        );
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
            let a = resolve_steps(&spec, &rng(i), 500, 375);
            assert_eq!(a, resolve_steps(&spec, &SampleRng::for_sample(1, 2, "s", i), 500, 375));
            match a[0] {
                Step::CropResize { crop, out_w, out_h } => {
                    assert!(crop.left >= 0 && crop.top >= 0);
                    assert!(crop.right() <= 500 && crop.bottom() <= 375);
                    assert!(crop.inside(500, 375), "{crop:?}");
                    assert_eq!((out_w, out_h), (224, 224));
                }
                ref other => panic!("unexpected first step {other:?}"),
            }
        }
    }

    #[test]
    fn flips_about_half_the_time() {
        let spec = TransformSpec::train(32);
        let flips = (0..4000)
            .filter(|&i| resolve_steps(&spec, &rng(i), 64, 64).contains(&Step::FlipHorizontal))
            .count();
        assert!((1800..2200).contains(&flips), "{flips} flips of 4000");
    }

    #[test]
    fn eval_matches_torchvision_geometry() {
        // 500x375 -> shorter side 256 -> 341x256 -> centre 224.
        let steps = resolve_steps(&TransformSpec::eval(224), &rng(0), 500, 375);
        assert_eq!(
            steps,
            vec![
                Step::CropResize {
                    crop: Rect::new(0, 0, 500, 375),
                    out_w: 341,
                    out_h: 256
                },
                Step::CropResize {
                    crop: Rect::new(58, 16, 224, 224),
                    out_w: 224,
                    out_h: 224
                },
            ]
        );
    }

    #[test]
    fn footprint_refuses_a_resize_bomb_from_its_size_alone() {
        let eval = TransformSpec::eval(224);
        // 65000x1: the shorter side to 256 makes the long side 16.6 M.
        for (w, h) in [(65000, 1), (1, 65000)] {
            let err = footprint(&eval, w, h, 100_000_000).unwrap_err();
            assert_eq!((err.index, err.op), (0, "resize"));
            assert_eq!(err.pixels, 65000 * 256 * 256);
            assert!(err.to_string().contains("16640000"), "{err}");
        }
        // An ordinary photo: decoded, resized, and the resize's scratch
        // (as large as the larger of the two).
        let lines = |sides: u32| RESIZE_BYTES_PER_LINE * u64::from(sides);
        let peak = footprint(&eval, 500, 375, 100_000_000).unwrap();
        assert_eq!(peak, 2 * 500 * 375 * 3 + 341 * 256 * 3 + lines(500 + 375 + 341 + 256));
        // Train crops first, so the decoded image is the largest part.
        let train = footprint(&TransformSpec::train(224), 65000, 1, 100_000_000).unwrap();
        assert_eq!(train, 2 * 65000 * 3 + 224 * 224 * 3 + lines(65000 + 1 + 224 + 224));
    }

    #[test]
    fn footprint_bounds_what_the_steps_make() {
        let spec = TransformSpec {
            size: 64,
            ops: vec![
                Op::Resize { shorter: 80 },
                Op::RandomRotation { degrees: 30.0 },
                Op::GaussianBlur {
                    kernel_size: 3,
                    sigma: (0.1, 2.0),
                },
                Op::RandomCrop { size: 64, padding: 4 },
            ],
        };
        for (w, h) in [(500, 375), (7, 3000), (1, 1)] {
            let peak = footprint(&spec, w, h, 100_000_000).unwrap();
            let steps = resolve_steps(&spec, &rng(0), w, h);
            let (mut cw, mut ch) = (u64::from(w), u64::from(h));
            for s in &steps {
                if let Step::CropResize { out_w, out_h, .. } = *s {
                    assert!(
                        3 * (cw * ch + u64::from(out_w) * u64::from(out_h)) <= peak,
                        "{s:?} of {w}x{h}"
                    );
                    (cw, ch) = (u64::from(out_w), u64::from(out_h));
                }
            }
        }
    }

    #[test]
    fn random_crop_with_padding_reaches_past_the_edge() {
        let spec = TransformSpec {
            size: 32,
            ops: vec![Op::RandomCrop { size: 32, padding: 4 }],
        };
        let mut lefts = std::collections::BTreeSet::new();
        for i in 0..500 {
            if let Step::CropResize {
                crop: Rect { left, top, .. },
                ..
            } = resolve_steps(&spec, &rng(i), 32, 32)[0]
            {
                assert!((-4..=4).contains(&left) && (-4..=4).contains(&top));
                lefts.insert(left);
            }
        }
        assert_eq!(lefts.len(), 9);
    }
}
