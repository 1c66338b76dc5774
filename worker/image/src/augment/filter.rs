//! Convolutions: torchvision's Gaussian blur (on PIL images it blurs the
//! tensor: reflect padding, float convolution, rounding) and Pillow's 3x3
//! `SMOOTH` filter, the degenerate image of the sharpness blend.

use crate::decode::RgbImage;

/// The normalised weights of a Gaussian blur of `kernel_size` taps (the GPU
/// path uploads the same ones).
pub fn gaussian_kernel(kernel_size: u32, sigma: f32) -> Vec<f32> {
    let k = i64::from(kernel_size);
    let half = k / 2;
    let mut kernel: Vec<f32> = (0..k)
        .map(|i| {
            let x = (i - half) as f32 / sigma;
            (-0.5 * x * x).exp()
        })
        .collect();
    let total: f32 = kernel.iter().sum();
    kernel.iter_mut().for_each(|v| *v /= total);
    kernel
}

fn clamp_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// Reflect-101 border: `... 2 1 | 0 1 2 ... n-1 | n-2 ...`.
fn reflect(i: i64, n: i64) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n - 1);
    let m = i.rem_euclid(period);
    (if m >= n { period - m } else { m }) as usize
}

/// Separable Gaussian blur, `kernel` (width, height) taps.
pub(super) fn blur(img: &RgbImage, (kx, ky): (u32, u32), sigma: f32) -> RgbImage {
    let (wx, wy) = (gaussian_kernel(kx, sigma), gaussian_kernel(ky, sigma));
    let (hx, hy) = (i64::from(kx) / 2, i64::from(ky) / 2);
    let (w, h) = (i64::from(img.width), i64::from(img.height));
    let mut tmp = vec![0f32; img.pixels.len()];
    for y in 0..h {
        for x in 0..w {
            let mut acc = [0f32; 3];
            for (t, kv) in wx.iter().enumerate() {
                let sx = reflect(x + t as i64 - hx, w);
                let s = (y as usize * w as usize + sx) * 3;
                for c in 0..3 {
                    acc[c] += kv * f32::from(img.pixels[s + c]);
                }
            }
            let d = (y * w + x) as usize * 3;
            tmp[d..d + 3].copy_from_slice(&acc);
        }
    }
    let mut out = RgbImage::new(img.width, img.height);
    for y in 0..h {
        for x in 0..w {
            let mut acc = [0f32; 3];
            for (t, kv) in wy.iter().enumerate() {
                let sy = reflect(y + t as i64 - hy, h);
                let s = (sy * w as usize + x as usize) * 3;
                for c in 0..3 {
                    acc[c] += kv * tmp[s + c];
                }
            }
            let d = (y * w + x) as usize * 3;
            for c in 0..3 {
                out.pixels[d + c] = clamp_u8(acc[c]);
            }
        }
    }
    out
}

/// Pillow's `ImageFilter.SMOOTH` (3x3, weights 1 1 1 / 1 5 1 / 1 1 1 over
/// 13) as `ImagingFilter3x3` computes it: float sums from the bottom row
/// up, plus 0.5, truncated; the border rows and columns copied.
pub(super) fn smooth(img: &RgbImage) -> RgbImage {
    let mut out = img.clone();
    let (w, h) = (img.width as usize, img.height as usize);
    if w < 3 || h < 3 {
        return out;
    }
    let k: [f32; 9] = [1.0, 1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0].map(|v: f32| v / 13.0);
    let at = |y: usize, x: usize, c: usize| f32::from(img.pixels[(y * w + x) * 3 + c]);
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            for c in 0..3 {
                let row =
                    |yy: usize, kk: &[f32]| at(yy, x - 1, c) * kk[0] + at(yy, x, c) * kk[1] + at(yy, x + 1, c) * kk[2];
                let mut ss = 0.5f32;
                ss += row(y + 1, &k[0..3]);
                ss += row(y, &k[3..6]);
                ss += row(y - 1, &k[6..9]);
                out.pixels[(y * w + x) * 3 + c] = if ss <= 0.0 {
                    0
                } else if ss >= 255.0 {
                    255
                } else {
                    ss as u8
                };
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blur_preserves_flat_and_smooths_edges() {
        let mut img = RgbImage::new(8, 8);
        img.pixels.iter_mut().for_each(|v| *v = 200);
        assert_eq!(blur(&img, (5, 5), 1.5), img);
        let mut edge = RgbImage::new(8, 1);
        edge.pixels[4 * 3..].iter_mut().for_each(|v| *v = 255);
        let b = blur(&edge, (3, 1), 1.0);
        assert!(b.pixels[3 * 3] > 0 && b.pixels[4 * 3] < 255);
    }

    #[test]
    fn smooth_keeps_flat_images_and_borders() {
        let mut img = RgbImage::new(5, 4);
        img.pixels
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = (i * 7 % 251) as u8);
        let s = smooth(&img);
        assert_eq!(&s.pixels[..15], &img.pixels[..15], "first row copied");
        let mut flat = RgbImage::new(6, 6);
        flat.pixels.iter_mut().for_each(|v| *v = 90);
        assert_eq!(smooth(&flat), flat);
    }
}
