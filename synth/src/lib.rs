//! Procedural images for the demo, tests and benchmarks, and ImageNet-like
//! JPEGs cut from real photos when some are at hand.
//!
//! The procedural images are smooth gradients with shapes and grain, so
//! their JPEGs have realistic sizes (tens of KB at 500x375) rather than the
//! few KB of a flat colour.
//!
//! A crate of its own above `stoker-image` (its decoder and `RgbImage`),
//! not in the worker: the command line (`stoker synth`, `demo`, `bench`),
//! the integration tests and the worker's own unit tests (a
//! dev-dependency) share it, and the worker library does not carry it.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use jpeg_encoder::{ColorType, Encoder};
use stoker_core::SampleRng;

use stoker_formats::image::ImageKind;
use stoker_image::decode::{RgbImage, decode};

/// Why an image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("jpeg encode failed: {0}")]
    Encode(String),
    #[error("image too large to encode as jpeg: {0}x{1}")]
    TooLarge(u32, u32),
    #[error("source photo: {0}")]
    Source(String),
}

/// A procedural RGB image; the same `seed` gives the same image.
pub fn procedural(width: u32, height: u32, seed: u64) -> RgbImage {
    let mut rng = SampleRng::from_seed(seed);
    let mut img = RgbImage::new(width, height);
    let base: [f64; 3] = [
        rng.uniform(0.0, 255.0),
        rng.uniform(0.0, 255.0),
        rng.uniform(0.0, 255.0),
    ];
    let grad: [f64; 3] = [rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)];
    let freq = rng.uniform(0.01, 0.06);
    let circles: Vec<(f64, f64, f64, [f64; 3])> = (0..6)
        .map(|_| {
            (
                rng.uniform(0.0, f64::from(width)),
                rng.uniform(0.0, f64::from(height)),
                rng.uniform(10.0, f64::from(width.min(height)) / 2.0 + 11.0),
                [
                    rng.uniform(0.0, 255.0),
                    rng.uniform(0.0, 255.0),
                    rng.uniform(0.0, 255.0),
                ],
            )
        })
        .collect();
    let (w, h) = (f64::from(width), f64::from(height));
    let col_wave: Vec<f64> = (0..width).map(|x| (f64::from(x) * freq).sin() * 40.0).collect();
    for y in 0..height {
        let row_wave = (f64::from(y) * freq * 1.3).cos();
        for x in 0..width {
            let (fx, fy) = (f64::from(x), f64::from(y));
            let wave = col_wave[x as usize] * row_wave;
            let mut px = [0f64; 3];
            for c in 0..3 {
                px[c] = base[c] + grad[c] * (fx / w + fy / h) * 80.0 + wave;
            }
            for (cx, cy, r, color) in &circles {
                if (fx - cx).powi(2) + (fy - cy).powi(2) < r * r {
                    for c in 0..3 {
                        px[c] = 0.6 * px[c] + 0.4 * color[c];
                    }
                }
            }
            let grain = (rng.next_u64() % 25) as f64 - 12.0;
            let d = (y as usize * width as usize + x as usize) * 3;
            for c in 0..3 {
                img.pixels[d + c] = (px[c] + grain).clamp(0.0, 255.0) as u8;
            }
        }
    }
    img
}

/// Encodes an RGB image as a baseline JPEG.
pub fn encode_jpeg(img: &RgbImage, quality: u8) -> Result<Vec<u8>, SynthError> {
    let (w, h) = (
        u16::try_from(img.width).map_err(|_| SynthError::TooLarge(img.width, img.height))?,
        u16::try_from(img.height).map_err(|_| SynthError::TooLarge(img.width, img.height))?,
    );
    let mut out = Vec::new();
    Encoder::new(&mut out, quality)
        .encode(&img.pixels, w, h, ColorType::Rgb)
        .map_err(|e| SynthError::Encode(e.to_string()))?;
    Ok(out)
}

/// Cuts `count` ImageNet-like JPEGs (`width` x `height`) out of one real
/// photo: random regions of 55% to all of the photo's width, with the
/// output's aspect ratio, resized down and encoded at `quality`.
pub fn imagenet_like_from_photo(
    photo: &[u8],
    count: usize,
    (width, height): (u32, u32),
    quality: u8,
    seed: u64,
) -> Result<Vec<Vec<u8>>, SynthError> {
    let src = decode(ImageKind::Jpeg, photo, 200_000_000).map_err(|e| SynthError::Source(e.to_string()))?;
    let src_ref = ImageRef::new(src.width, src.height, &src.pixels, PixelType::U8x3)
        .map_err(|e| SynthError::Source(e.to_string()))?;
    let mut rng = SampleRng::from_seed(seed);
    let mut resizer = Resizer::new();
    let aspect = f64::from(width) / f64::from(height);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let frac = rng.uniform(0.55, 1.0);
        let mut cw = f64::from(src.width) * frac;
        let mut ch = cw / aspect;
        if ch > f64::from(src.height) {
            ch = f64::from(src.height) * frac;
            cw = ch * aspect;
        }
        let left = rng.uniform(0.0, f64::from(src.width) - cw);
        let top = rng.uniform(0.0, f64::from(src.height) - ch);
        let mut dst = Image::new(width, height, PixelType::U8x3);
        let opts = ResizeOptions::new()
            .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
            .crop(left, top, cw, ch);
        resizer
            .resize(&src_ref, &mut dst, &opts)
            .map_err(|e| SynthError::Source(e.to_string()))?;
        let img = RgbImage {
            width,
            height,
            pixels: dst.into_vec(),
        };
        out.push(encode_jpeg(&img, quality)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procedural_jpegs_decode_and_have_realistic_size() {
        let img = procedural(500, 375, 3);
        assert_eq!(img, procedural(500, 375, 3));
        let jpeg = encode_jpeg(&img, 90).unwrap();
        assert!(jpeg.len() > 20_000, "{} bytes", jpeg.len());
        let back = decode(ImageKind::Jpeg, &jpeg, 1 << 30).unwrap();
        assert_eq!((back.width, back.height), (500, 375));
    }
}
