//! The CPU executor for resolved transform steps.
//!
//! Steps come from [`stoker_core::resolve_steps`]; this module only carries
//! them out on an 8-bit RGB image. Arithmetic follows PIL/torchvision so
//! that results stay close to what users compare against.

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use stoker_core::{Rect, Step};

use crate::decode::RgbImage;

/// Why a step could not run (only on inconsistent input; never expected).
#[derive(Debug, thiserror::Error)]
#[error("augment failed: {0}")]
pub struct AugmentError(String);

/// Reusable per-thread state: the resizer keeps its scratch buffers.
#[derive(Debug, Default)]
pub struct Augmenter {
    resizer: Resizer,
}

impl Augmenter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `steps` on `img` and returns the result.
    pub fn run(&mut self, mut img: RgbImage, steps: &[Step]) -> Result<RgbImage, AugmentError> {
        for step in steps {
            img = match *step {
                Step::CropResize { crop, out_w, out_h } => self.crop_resize(&img, crop, out_w, out_h)?,
                Step::FlipHorizontal => flip_horizontal(img),
                Step::FlipVertical => flip_vertical(img),
                Step::Rotate { degrees } => rotate(&img, degrees),
                Step::Jitter { factors, order } => jitter(img, factors, order),
                Step::Blur { kernel_size, sigma } => blur(&img, kernel_size, sigma),
            };
        }
        Ok(img)
    }

    fn crop_resize(&mut self, img: &RgbImage, rect: Rect, out_w: u32, out_h: u32) -> Result<RgbImage, AugmentError> {
        if (rect.width, rect.height) == (out_w, out_h) {
            return Ok(crop(img, rect));
        }
        if !rect.inside(img.width, img.height) {
            // Not produced by today's ops, but well defined: pad, then resize.
            let padded = crop(img, rect);
            return self.crop_resize(&padded, Rect::whole(rect.width, rect.height), out_w, out_h);
        }
        let src = ImageRef::new(img.width, img.height, &img.pixels, PixelType::U8x3)
            .map_err(|e| AugmentError(e.to_string()))?;
        let mut dst = Image::new(out_w, out_h, PixelType::U8x3);
        let options = ResizeOptions::new()
            .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
            .crop(
                rect.left as f64,
                rect.top as f64,
                f64::from(rect.width),
                f64::from(rect.height),
            );
        self.resizer
            .resize(&src, &mut dst, &options)
            .map_err(|e| AugmentError(e.to_string()))?;
        Ok(RgbImage {
            width: out_w,
            height: out_h,
            pixels: dst.into_vec(),
        })
    }
}

/// Copies a box that may reach past the image; outside pixels are zero.
fn crop(img: &RgbImage, rect: Rect) -> RgbImage {
    let Rect {
        left,
        top,
        width,
        height,
    } = rect;
    let mut out = RgbImage::new(width, height);
    let (iw, ih) = (i64::from(img.width), i64::from(img.height));
    let x0 = left.max(0);
    let x1 = (left + i64::from(width)).min(iw);
    if x0 >= x1 {
        return out;
    }
    let row_bytes = (x1 - x0) as usize * 3;
    for oy in 0..i64::from(height) {
        let sy = top + oy;
        if sy < 0 || sy >= ih {
            continue;
        }
        let src = (sy * iw + x0) as usize * 3;
        let dst = (oy * i64::from(width) + (x0 - left)) as usize * 3;
        out.pixels[dst..dst + row_bytes].copy_from_slice(&img.pixels[src..src + row_bytes]);
    }
    out
}

fn flip_horizontal(mut img: RgbImage) -> RgbImage {
    let w = img.width as usize;
    for row in img.pixels.chunks_exact_mut(w * 3) {
        for x in 0..w / 2 {
            let (a, b) = (x * 3, (w - 1 - x) * 3);
            for c in 0..3 {
                row.swap(a + c, b + c);
            }
        }
    }
    img
}

fn flip_vertical(mut img: RgbImage) -> RgbImage {
    let row = img.width as usize * 3;
    let h = img.height as usize;
    for y in 0..h / 2 {
        let (top, bottom) = img.pixels.split_at_mut((h - 1 - y) * row);
        top[y * row..(y + 1) * row].swap_with_slice(&mut bottom[..row]);
    }
    img
}

/// Counter-clockwise rotation about the centre, nearest neighbour, zero
/// fill, same size (PIL's `rotate(angle, NEAREST, expand=False)`).
fn rotate(img: &RgbImage, degrees: f32) -> RgbImage {
    let (w, h) = (img.width as usize, img.height as usize);
    let mut out = RgbImage::new(img.width, img.height);
    let theta = f64::from(degrees).to_radians();
    let (sin, cos) = theta.sin_cos();
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    for y in 0..h {
        let dy = y as f64 + 0.5 - cy;
        for x in 0..w {
            let dx = x as f64 + 0.5 - cx;
            let sx = (dx * cos - dy * sin + cx).floor();
            let sy = (dx * sin + dy * cos + cy).floor();
            if sx >= 0.0 && sy >= 0.0 && (sx as usize) < w && (sy as usize) < h {
                let s = (sy as usize * w + sx as usize) * 3;
                let d = (y * w + x) * 3;
                out.pixels[d..d + 3].copy_from_slice(&img.pixels[s..s + 3]);
            }
        }
    }
    out
}

/// PIL's luma: L = (299 R + 587 G + 114 B) / 1000, in its fixed point.
fn luma(p: &[u8]) -> u8 {
    ((u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471 + 0x8000) >> 16) as u8
}

fn clamp_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// torchvision's ColorJitter on PIL images (ImageEnhance): brightness
/// blends with black, contrast with the mean luma, saturation with the
/// image's own greyscale.
fn jitter(mut img: RgbImage, factors: [f32; 3], order: [u8; 3]) -> RgbImage {
    for which in order {
        let f = factors[which as usize];
        if f == 1.0 {
            continue;
        }
        match which {
            0 => {
                for v in &mut img.pixels {
                    *v = clamp_u8(f32::from(*v) * f);
                }
            }
            1 => {
                let n = (img.pixels.len() / 3).max(1);
                let sum: u64 = img.pixels.chunks_exact(3).map(|p| u64::from(luma(p))).sum();
                let mean = (sum as f32 / n as f32 + 0.5).floor();
                for v in &mut img.pixels {
                    *v = clamp_u8(mean + (f32::from(*v) - mean) * f);
                }
            }
            _ => {
                for p in img.pixels.chunks_exact_mut(3) {
                    let g = f32::from(luma(p));
                    for v in p {
                        *v = clamp_u8(g + (f32::from(*v) - g) * f);
                    }
                }
            }
        }
    }
    img
}

/// Separable Gaussian blur with reflect padding (torchvision's kernel).
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

fn blur(img: &RgbImage, kernel_size: u32, sigma: f32) -> RgbImage {
    let kernel = gaussian_kernel(kernel_size, sigma);
    let half = i64::from(kernel_size) / 2;
    let (w, h) = (i64::from(img.width), i64::from(img.height));
    let reflect = |i: i64, n: i64| -> usize {
        if n == 1 {
            return 0;
        }
        let period = 2 * (n - 1);
        let m = i.rem_euclid(period);
        (if m >= n { period - m } else { m }) as usize
    };
    let mut tmp = vec![0f32; img.pixels.len()];
    for y in 0..h {
        for x in 0..w {
            let mut acc = [0f32; 3];
            for (t, kv) in kernel.iter().enumerate() {
                let sx = reflect(x + t as i64 - half, w);
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
            for (t, kv) in kernel.iter().enumerate() {
                let sy = reflect(y + t as i64 - half, h);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: u32, h: u32) -> RgbImage {
        let mut img = RgbImage::new(w, h);
        for (i, p) in img.pixels.chunks_exact_mut(3).enumerate() {
            let (x, y) = (i as u32 % w, i as u32 / w);
            p.copy_from_slice(&[(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8]);
        }
        img
    }

    #[test]
    fn flips_are_involutions() {
        let img = ramp(13, 7);
        assert_eq!(flip_horizontal(flip_horizontal(img.clone())), img);
        assert_eq!(flip_vertical(flip_vertical(img.clone())), img);
        let f = flip_horizontal(img.clone());
        assert_eq!(&f.pixels[0..3], &img.pixels[12 * 3..13 * 3]);
    }

    #[test]
    fn crop_pads_with_zeros() {
        let img = ramp(4, 4);
        let c = crop(&img, Rect::new(-1, -1, 3, 3));
        assert_eq!(&c.pixels[0..3], &[0, 0, 0]);
        assert_eq!(&c.pixels[4 * 3..5 * 3], &img.pixels[0..3]);
    }

    #[test]
    fn resize_of_flat_image_stays_flat() {
        let mut img = RgbImage::new(100, 60);
        img.pixels.iter_mut().for_each(|v| *v = 77);
        let mut a = Augmenter::new();
        let steps = [Step::CropResize {
            crop: Rect::new(10, 5, 50, 40),
            out_w: 24,
            out_h: 24,
        }];
        let out = a.run(img, &steps).unwrap();
        assert_eq!((out.width, out.height), (24, 24));
        assert!(out.pixels.iter().all(|&v| v == 77));
    }

    #[test]
    fn rotation_by_zero_and_full_turn_is_identity_inside() {
        let img = ramp(9, 9);
        assert_eq!(rotate(&img, 0.0), img);
        // 90 degrees counter-clockwise: the top-right corner goes top-left.
        let r = rotate(&img, 90.0);
        assert_eq!(&r.pixels[0..3], &img.pixels[8 * 3..9 * 3]);
    }

    #[test]
    fn jitter_identity_and_saturation_zero_is_grey() {
        let img = ramp(5, 5);
        assert_eq!(jitter(img.clone(), [1.0, 1.0, 1.0], [0, 1, 2]), img);
        let grey = jitter(img, [1.0, 1.0, 0.0], [2, 1, 0]);
        assert!(grey.pixels.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    }

    #[test]
    fn blur_preserves_flat_and_smooths_edges() {
        let mut img = RgbImage::new(8, 8);
        img.pixels.iter_mut().for_each(|v| *v = 200);
        assert_eq!(blur(&img, 5, 1.5), img);
        let mut edge = RgbImage::new(8, 1);
        edge.pixels[4 * 3..].iter_mut().for_each(|v| *v = 255);
        let b = blur(&edge, 3, 1.0);
        assert!(b.pixels[3 * 3] > 0 && b.pixels[4 * 3] < 255);
    }
}
