//! Pillow's resampling (`Resample.c`), as torchvision's `Resize` on PIL
//! images runs it: a separable convolution with the filter scaled to the
//! downscale (antialiasing), 8-bit coefficients in 22-bit fixed point,
//! the horizontal pass first, its rows rounded to 8 bits, then the
//! vertical pass. Ported step for step, so results are Pillow's exactly.

use std::f64::consts::PI;

use stoker_core::Interpolation;

use crate::decode::RgbImage;

/// Fixed-point precision of the 8-bit coefficients (`PRECISION_BITS`).
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// A filter and its support at scale 1.
#[derive(Clone, Copy)]
struct Filter {
    support: f64,
    weight: fn(f64) -> f64,
}

fn box_filter(x: f64) -> f64 {
    if x > -0.5 && x <= 0.5 { 1.0 } else { 0.0 }
}

fn bilinear_filter(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 { 1.0 - x } else { 0.0 }
}

fn hamming_filter(x: f64) -> f64 {
    let x = x.abs();
    if x == 0.0 {
        1.0
    } else if x >= 1.0 {
        0.0
    } else {
        let x = x * PI;
        // `0.54f + 0.46f * cos(x)`: float constants in double arithmetic.
        x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
    }
}

fn bicubic_filter(x: f64) -> f64 {
    // a = -0.5, as Pillow (Keys' cubic, Catmull-Rom).
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

fn sinc_filter(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * PI;
    x.sin() / x
}

fn lanczos_filter(x: f64) -> f64 {
    // Truncated sinc, 3 lobes.
    if (-3.0..3.0).contains(&x) {
        sinc_filter(x) * sinc_filter(x / 3.0)
    } else {
        0.0
    }
}

fn filter_for(interpolation: Interpolation) -> Filter {
    let (support, weight): (f64, fn(f64) -> f64) = match interpolation {
        Interpolation::Box => (0.5, box_filter),
        Interpolation::Hamming => (1.0, hamming_filter),
        Interpolation::Bicubic => (2.0, bicubic_filter),
        Interpolation::Lanczos => (3.0, lanczos_filter),
        _ => (1.0, bilinear_filter),
    };
    Filter { support, weight }
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for a side of
/// `in_size` pixels resampled to `out_size`: each output's first input and
/// its count (`bounds`), and its fixed-point weights (`ksize` per output,
/// the first `count` used).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coeffs {
    pub ksize: usize,
    pub bounds: Vec<(usize, usize)>,
    pub weights: Vec<i32>,
}

/// How Pillow resamples an image to a new size ([`resample_plan`]): a
/// horizontal pass over the rows the vertical pass reads, its rows rounded
/// to 8 bits, then the vertical pass; a side that keeps its size has no
/// pass. The GPU's kernel runs the same passes with the same weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResamplePlan {
    /// Along rows, over rows `rows.0..rows.1`, when the width changes.
    pub horizontal: Option<Coeffs>,
    /// Along columns, when the height changes.
    pub vertical: Option<Coeffs>,
    /// The rows of the source the vertical pass reads.
    pub rows: (usize, usize),
}

/// The passes of `img.resize((out_w, out_h), filter)` on an `in_w` x
/// `in_h` image (any filter but nearest, which is an affine scale).
pub fn resample_plan(in_w: u32, in_h: u32, out_w: u32, out_h: u32, interpolation: Interpolation) -> ResamplePlan {
    let filter = filter_for(interpolation);
    let (in_w, in_h) = (in_w as usize, in_h as usize);
    let (ow, oh) = (out_w as usize, out_h as usize);
    let vert = coeffs(in_h, oh, filter);
    // The rows the vertical pass reads.
    let rows = match (vert.bounds.first(), vert.bounds.last()) {
        (Some(&(f, _)), Some(&(l, n))) => (f, l + n),
        _ => (0, in_h),
    };
    ResamplePlan {
        horizontal: (ow != in_w).then(|| coeffs(in_w, ow, filter)),
        vertical: (oh != in_h).then_some(vert),
        rows,
    }
}

fn coeffs(in_size: usize, out_size: usize, filter: Filter) -> Coeffs {
    let (in0, in1) = (0.0f64, in_size as f32 as f64);
    let scale = (in1 - in0) / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let mut k = vec![0f64; ksize];
    for xx in 0..out_size {
        let center = in0 + (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64).max(xmin as i64) as usize - xmin;
        let xmax = xmax.min(ksize);
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(xmax) {
            let w = (filter.weight)((x as f64 + xmin as f64 - center + 0.5) * ss);
            *kx = w;
            ww += w;
        }
        let row = &mut weights[xx * ksize..(xx + 1) * ksize];
        for (x, kx) in k.iter().enumerate().take(xmax) {
            let w = if ww != 0.0 { kx / ww } else { *kx };
            let f = w * f64::from(1u32 << PRECISION_BITS);
            row[x] = if w < 0.0 { (-0.5 + f) as i32 } else { (0.5 + f) as i32 };
        }
        bounds.push((xmin, xmax));
    }
    Coeffs { ksize, bounds, weights }
}

/// Pillow's `clip8`: the fixed-point sum shifted down, clamped to 0..=255.
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `img.resize((out_w, out_h), filter)` on an RGB image (any filter but
/// nearest, which is an affine scale).
pub(super) fn resize(img: &RgbImage, out_w: u32, out_h: u32, interpolation: Interpolation) -> RgbImage {
    let plan = resample_plan(img.width, img.height, out_w, out_h, interpolation);
    let in_w = img.width as usize;
    let ow = out_w as usize;
    let (first, last) = plan.rows;
    let half = 1i32 << (PRECISION_BITS - 1);
    let temp = plan.horizontal.map(|horiz| {
        let rows = last - first;
        let mut out = RgbImage::new(out_w, rows as u32);
        for (y, out_row) in out.pixels.chunks_exact_mut(ow * 3).enumerate() {
            let in_row = &img.pixels[(y + first) * in_w * 3..(y + first + 1) * in_w * 3];
            for ((o, &(xmin, n)), k) in out_row
                .chunks_exact_mut(3)
                .zip(&horiz.bounds)
                .zip(horiz.weights.chunks_exact(horiz.ksize))
            {
                let (mut s0, mut s1, mut s2) = (half, half, half);
                for (p, &w) in in_row[xmin * 3..(xmin + n) * 3].chunks_exact(3).zip(&k[..n]) {
                    s0 += i32::from(p[0]) * w;
                    s1 += i32::from(p[1]) * w;
                    s2 += i32::from(p[2]) * w;
                }
                o.copy_from_slice(&[clip8(s0), clip8(s1), clip8(s2)]);
            }
        }
        out
    });
    let Some(vert) = plan.vertical else {
        return temp.unwrap_or_else(|| img.clone());
    };
    let (src, row0) = match &temp {
        Some(t) => (t, first),
        None => (img, 0),
    };
    let stride = src.width as usize * 3;
    let mut out = RgbImage::new(src.width, out_h);
    // Row by row (the same sums as Pillow's column walk, in an order the
    // cache and the vectoriser like): each output row accumulates its
    // input rows times their weights.
    let mut acc = vec![half; stride];
    for ((out_row, &(ymin, n)), k) in out
        .pixels
        .chunks_exact_mut(stride)
        .zip(&vert.bounds)
        .zip(vert.weights.chunks_exact(vert.ksize))
    {
        acc.fill(half);
        let rows = &src.pixels[(ymin - row0) * stride..(ymin - row0 + n) * stride];
        for (row, &w) in rows.chunks_exact(stride).zip(&k[..n]) {
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += i32::from(p) * w;
            }
        }
        for (o, &a) in out_row.iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::ramp;
    use super::*;

    #[test]
    fn flat_images_stay_flat_and_sizes_hold() {
        let mut img = RgbImage::new(100, 60);
        img.pixels.iter_mut().for_each(|v| *v = 77);
        for f in [
            Interpolation::Bilinear,
            Interpolation::Bicubic,
            Interpolation::Box,
            Interpolation::Hamming,
            Interpolation::Lanczos,
        ] {
            for (w, h) in [(24, 24), (250, 7), (100, 30), (31, 60)] {
                let out = resize(&img, w, h, f);
                assert_eq!((out.width, out.height), (w, h));
                assert!(out.pixels.iter().all(|&v| v == 77), "{f:?} {w}x{h}");
            }
        }
        let r = ramp(9, 5);
        assert_eq!(resize(&r, 9, 5, Interpolation::Bilinear), r);
    }
}
