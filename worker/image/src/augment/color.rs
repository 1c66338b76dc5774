//! Colour steps as torchvision applies them to PIL images: `ImageEnhance`
//! blends (Pillow's `ImagingBlend`, truncating), the HSV round trip of
//! `adjust_hue` (Pillow's Convert.c and numpy's uint8 wrap), `ImageOps`'
//! equalize and autocontrast, lookup tables, and erasing.

use stoker_core::{Enhance, EraseFill, Rect, erase_noise};

use super::filter::smooth;
use crate::decode::RgbImage;

/// Pillow's luma (`L = R * 299/1000 + G * 587/1000 + B * 114/1000`, in its
/// fixed point).
pub(super) fn luma(p: &[u8]) -> u8 {
    ((u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471 + 0x8000) >> 16) as u8
}

/// Pillow's `ImagingBlend` of one value: `in1 + alpha * (in2 - in1)` in
/// float, truncated (clipped when extrapolating).
pub(super) fn blend(in1: u8, in2: u8, alpha: f32) -> u8 {
    let v = f32::from(in1) + alpha * (f32::from(in2) - f32::from(in1));
    if v <= 0.0 {
        0
    } else if v >= 255.0 {
        255
    } else {
        v as u8
    }
}

/// `ImageEnhance.<what>(img).enhance(factor)`: a blend of a degenerate
/// image (`in1`) with the image (`in2`).
pub(super) fn enhance(mut img: RgbImage, what: Enhance, factor: f32) -> RgbImage {
    match what {
        Enhance::Brightness => {
            for v in &mut img.pixels {
                *v = blend(0, *v, factor);
            }
        }
        Enhance::Contrast => {
            let n = (img.pixels.len() / 3).max(1);
            let sum: u64 = img.pixels.chunks_exact(3).map(|p| u64::from(luma(p))).sum();
            // int(ImageStat.Stat(L).mean[0] + 0.5)
            let mean = (sum as f64 / n as f64 + 0.5) as u8;
            for v in &mut img.pixels {
                *v = blend(mean, *v, factor);
            }
        }
        Enhance::Saturation => {
            for p in img.pixels.chunks_exact_mut(3) {
                let g = luma(p);
                for v in p {
                    *v = blend(g, *v, factor);
                }
            }
        }
        Enhance::Sharpness => {
            let degenerate = smooth(&img);
            for (v, d) in img.pixels.iter_mut().zip(&degenerate.pixels) {
                *v = blend(*d, *v, factor);
            }
        }
    }
    img
}

fn clip8(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

/// Pillow's `rgb2hsv_row`.
fn rgb_to_hsv(p: &[u8]) -> [u8; 3] {
    let (r, g, b) = (p[0], p[1], p[2]);
    let (maxc, minc) = (r.max(g).max(b), r.min(g).min(b));
    if minc == maxc {
        return [0, 0, maxc];
    }
    let cr = f32::from(maxc - minc);
    let s = cr / f32::from(maxc);
    let rc = f32::from(maxc - r) / cr;
    let gc = f32::from(maxc - g) / cr;
    let bc = f32::from(maxc - b) / cr;
    // `2.0 + rc - bc` is a double expression in C (2.0 is a double),
    // stored to a float.
    let h: f32 = if r == maxc {
        bc - gc
    } else if g == maxc {
        (2.0 + f64::from(rc) - f64::from(bc)) as f32
    } else {
        (4.0 + f64::from(gc) - f64::from(rc)) as f32
    };
    let h = ((f64::from(h) / 6.0 + 1.0) % 1.0) as f32;
    [
        clip8((f64::from(h) * 255.0) as i32),
        clip8((f64::from(s) * 255.0) as i32),
        maxc,
    ]
}

/// `x.round()` for `x >= 0` (C's `round`: halves away from zero), with
/// a truncating conversion instead of a libm call: `x - trunc(x)` is exact
/// there.
fn round_non_negative(x: f64) -> i32 {
    let i = x as i32;
    if x - f64::from(i) >= 0.5 { i + 1 } else { i }
}

/// Pillow's `hsv2rgb`. Every value is at least 0, so `floor` and `round`
/// need no libm call (a test checks every (h, s, v) against the calls).
fn hsv_to_rgb([h, s, v]: [u8; 3]) -> [u8; 3] {
    if s == 0 {
        return [v, v, v];
    }
    let hf = f64::from(f32::from(h)) * 6.0 / 255.0;
    let i = hf as i32;
    let f = (hf - f64::from(i as f32)) as f32;
    let fs = (f64::from(f32::from(s)) / 255.0) as f32;
    let vf = f64::from(f32::from(v));
    let p = clip8(round_non_negative(vf * (1.0 - f64::from(fs))));
    let q = clip8(round_non_negative(vf * (1.0 - f64::from(fs * f))));
    let t = clip8(round_non_negative(vf * (1.0 - f64::from(fs) * (1.0 - f64::from(f)))));
    match i % 6 {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

/// [`rgb_to_hsv`]'s hue and saturation of every colour, from tables built
/// by calling it. Its hue depends only on which channel is largest (the
/// first of r, g, b that is) and the other two's distances below it, its
/// saturation only on the range and the largest value, so the tables give
/// its exact bytes without its four divisions and `fmod` a pixel, most of
/// the photometric distortion's time (docs/benchmarks.md).
struct HsvTables {
    /// `[channel largest][its distance to the first other][to the second]`.
    hue: Vec<u8>,
    /// `[max - min][max]`.
    saturation: Vec<u8>,
}

fn hsv_tables() -> &'static HsvTables {
    static TABLES: std::sync::OnceLock<HsvTables> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut hue = vec![0u8; 3 * 256 * 256];
        for x in 0..=255u8 {
            for y in 0..=255u8 {
                // A colour of each case with these distances; a case's
                // entries its pixels never reach stay 0.
                let (hi, a, b) = (255, 255 - x, 255 - y);
                let at = usize::from(x) * 256 + usize::from(y);
                hue[at] = rgb_to_hsv(&[hi, a, b])[0];
                if x > 0 {
                    hue[256 * 256 + at] = rgb_to_hsv(&[a, hi, b])[0];
                    if y > 0 {
                        hue[2 * 256 * 256 + at] = rgb_to_hsv(&[a, b, hi])[0];
                    }
                }
            }
        }
        let mut saturation = vec![0u8; 256 * 256];
        for range in 1..=255u8 {
            for max in range..=255u8 {
                let min = max - range;
                saturation[usize::from(range) * 256 + usize::from(max)] = rgb_to_hsv(&[max, min, min])[1];
            }
        }
        HsvTables { hue, saturation }
    })
}

/// [`rgb_to_hsv`], by [`hsv_tables`].
fn rgb_to_hsv_fast(t: &HsvTables, p: &[u8]) -> [u8; 3] {
    let (r, g, b) = (p[0], p[1], p[2]);
    let (maxc, minc) = (r.max(g).max(b), r.min(g).min(b));
    if minc == maxc {
        return [0, 0, maxc];
    }
    let (case, x, y) = if r == maxc {
        (0, maxc - g, maxc - b)
    } else if g == maxc {
        (1, maxc - r, maxc - b)
    } else {
        (2, maxc - r, maxc - g)
    };
    [
        t.hue[(case * 256 + usize::from(x)) * 256 + usize::from(y)],
        t.saturation[usize::from(maxc - minc) * 256 + usize::from(maxc)],
        maxc,
    ]
}

/// torchvision's `adjust_hue` on PIL: HSV, `h += int32(factor * 255)` with
/// uint8 wrap-around, back to RGB.
pub(super) fn hue(mut img: RgbImage, factor: f32) -> RgbImage {
    let shift = (f64::from(factor) * 255.0) as i32 as u8;
    let tables = hsv_tables();
    for p in img.pixels.chunks_exact_mut(3) {
        let [h, s, v] = rgb_to_hsv_fast(tables, p);
        p.copy_from_slice(&hsv_to_rgb([h.wrapping_add(shift), s, v]));
    }
    img
}

pub(super) fn lut(mut img: RgbImage, table: &[u8; 256]) -> RgbImage {
    for v in &mut img.pixels {
        *v = table[usize::from(*v)];
    }
    img
}

/// Output channel `c` is input channel `order[c]`; `order` is a
/// permutation of 0..3 (a core step's), so every index is in range.
pub(super) fn permute(mut img: RgbImage, order: [u8; 3]) -> RgbImage {
    let order = order.map(|c| usize::from(c).min(2));
    for p in img.pixels.chunks_exact_mut(3) {
        let src = [p[0], p[1], p[2]];
        for c in 0..3 {
            p[c] = src[order[c]];
        }
    }
    img
}

fn histograms(img: &RgbImage) -> [[u64; 256]; 3] {
    let mut h = [[0u64; 256]; 3];
    for p in img.pixels.chunks_exact(3) {
        for c in 0..3 {
            h[c][usize::from(p[c])] += 1;
        }
    }
    h
}

fn per_channel(mut img: RgbImage, luts: &[[u8; 256]; 3]) -> RgbImage {
    for p in img.pixels.chunks_exact_mut(3) {
        for c in 0..3 {
            p[c] = luts[c][usize::from(p[c])];
        }
    }
    img
}

/// `ImageOps.equalize`, per channel.
pub(super) fn equalize(img: RgbImage) -> RgbImage {
    let h = histograms(&img);
    let mut luts = [[0u8; 256]; 3];
    for c in 0..3 {
        let identity: [u8; 256] = std::array::from_fn(|i| i as u8);
        let present: Vec<u64> = h[c].iter().copied().filter(|&n| n > 0).collect();
        luts[c] = identity;
        if present.len() <= 1 {
            continue;
        }
        let step = (present.iter().sum::<u64>() - present[present.len() - 1]) / 255;
        if step == 0 {
            continue;
        }
        let mut n = step / 2;
        for i in 0..256 {
            luts[c][i] = (n / step).min(255) as u8;
            n += h[c][i];
        }
    }
    per_channel(img, &luts)
}

/// `ImageOps.autocontrast` (no cutoff), per channel.
pub(super) fn autocontrast(img: RgbImage) -> RgbImage {
    let h = histograms(&img);
    let mut luts = [[0u8; 256]; 3];
    for c in 0..3 {
        let lo = h[c].iter().position(|&n| n > 0).unwrap_or(0);
        let hi = h[c].iter().rposition(|&n| n > 0).unwrap_or(0);
        for (i, v) in luts[c].iter_mut().enumerate() {
            *v = if hi <= lo {
                i as u8
            } else {
                let scale = 255.0 / (hi - lo) as f64;
                let offset = -(lo as f64) * scale;
                ((i as f64 * scale + offset) as i64).clamp(0, 255) as u8
            };
        }
    }
    per_channel(img, &luts)
}

/// Overwrites `rect` (inside the image) with a colour or noise.
pub(super) fn erase(mut img: RgbImage, rect: Rect, fill: &EraseFill) -> RgbImage {
    let w = img.width as usize;
    let mut index = 0u64;
    for y in rect.top..rect.bottom() {
        for x in rect.left..rect.right() {
            let at = (y as usize * w + x as usize) * 3;
            for c in 0..3 {
                img.pixels[at + c] = match fill {
                    EraseFill::Color(rgb) => rgb[c],
                    EraseFill::Noise { seed, scale, offset } => {
                        let n = erase_noise(*seed, index) as f32;
                        (n * scale[c] + offset[c]).round().clamp(0.0, 255.0) as u8
                    }
                };
                index += 1;
            }
        }
    }
    img
}

#[cfg(test)]
mod tests {
    use super::super::ramp;
    use super::*;

    #[test]
    fn identity_factors_and_grey() {
        let img = ramp(5, 5);
        for what in [
            Enhance::Brightness,
            Enhance::Contrast,
            Enhance::Saturation,
            Enhance::Sharpness,
        ] {
            assert_eq!(enhance(img.clone(), what, 1.0), img, "{what:?}");
        }
        let grey = enhance(img, Enhance::Saturation, 0.0);
        assert!(grey.pixels.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    }

    #[test]
    fn blend_truncates_as_pillow() {
        assert_eq!(blend(0, 100, 0.555), 55);
        assert_eq!(blend(0, 200, 1.5), 255);
        assert_eq!(blend(100, 0, 2.0), 0);
    }

    #[test]
    fn hsv_round_trip_of_greys_and_primaries() {
        for p in [[0u8, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255], [77, 77, 77]] {
            assert_eq!(hsv_to_rgb(rgb_to_hsv(&p)), p, "{p:?}");
        }
    }

    /// The tables give Pillow's conversion's bytes for every colour.
    #[test]
    fn the_hsv_tables_give_every_colour_s_exact_hue_and_saturation() {
        let t = hsv_tables();
        for r in 0..=255u8 {
            for g in 0..=255u8 {
                for b in 0..=255u8 {
                    let p = [r, g, b];
                    assert_eq!(rgb_to_hsv_fast(t, &p), rgb_to_hsv(&p), "{p:?}");
                }
            }
        }
    }

    /// Pillow's `hsv2rgb` as written, with libm's `floor` and `round`.
    fn hsv_to_rgb_libm([h, s, v]: [u8; 3]) -> [u8; 3] {
        if s == 0 {
            return [v, v, v];
        }
        let hf = f64::from(f32::from(h)) * 6.0 / 255.0;
        let i = hf.floor() as i32;
        let f = (hf - f64::from(i as f32)) as f32;
        let fs = (f64::from(f32::from(s)) / 255.0) as f32;
        let vf = f64::from(f32::from(v));
        let p = clip8((vf * (1.0 - f64::from(fs))).round() as i32);
        let q = clip8((vf * (1.0 - f64::from(fs * f))).round() as i32);
        let t = clip8((vf * (1.0 - f64::from(fs) * (1.0 - f64::from(f)))).round() as i32);
        match i % 6 {
            0 => [v, t, p],
            1 => [q, v, p],
            2 => [p, v, t],
            3 => [p, q, v],
            4 => [t, p, v],
            _ => [v, p, q],
        }
    }

    #[test]
    fn hsv_to_rgb_gives_every_hsv_the_bytes_libm_gives() {
        for h in 0..=255u8 {
            for s in 0..=255u8 {
                for v in 0..=255u8 {
                    assert_eq!(hsv_to_rgb([h, s, v]), hsv_to_rgb_libm([h, s, v]), "{:?}", [h, s, v]);
                }
            }
        }
    }

    #[test]
    fn equalize_and_autocontrast_stretch() {
        let mut img = RgbImage::new(4, 1);
        img.pixels = vec![10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40];
        let a = autocontrast(img.clone());
        assert_eq!(&a.pixels[..3], &[0, 0, 0]);
        assert_eq!(&a.pixels[9..], &[255, 255, 255]);
        let e = equalize(img);
        assert!(e.pixels[0] < e.pixels[9]);
    }
}
