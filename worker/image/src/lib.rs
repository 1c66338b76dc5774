//! Stoker's CPU image path, without the worker around it: [`decode`] (JPEG
//! with zune-jpeg, PNG with zune-png, after the header checks of
//! `stoker-formats`) and [`augment`] (the executor of the `Step`s that
//! `stoker_core::resolve_steps` makes).
//!
//! It depends on `stoker-core` and `stoker-formats` only: no tokio runtime,
//! storage or gRPC.
//!
//! [`decode_and_transform`] is what the worker does to a whole image: the
//! header, the transform's footprint (refused over the pixel limit before a
//! byte is decoded), decode, the sample's steps, augment. The crate is
//! small so that the fuzz target `image_transform` (worker/formats/fuzz)
//! builds it with libFuzzer's instrumentation, which the worker library
//! (aws-sdk, parquet) is too heavy for. The worker (`stoker-worker`)
//! re-exports [`decode`] and [`augment`]; its region decode with
//! libjpeg-turbo stays there.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

pub mod augment;
pub mod decode;
mod error;
pub mod plan;

use stoker_core::{SampleRng, TransformSpec};

use crate::augment::Augmenter;
use crate::decode::{ImageKind, RgbImage};
pub use crate::error::ImageError;
pub use crate::plan::{PlanError, RunsOn, SamplePlan};

/// Plans a decoded image with `spec` ([`SamplePlan::for_size`]: the
/// footprint on the decoded size, so nothing over `max_pixels` is
/// allocated whatever the header said, then the steps) and runs it.
pub fn transform(
    augmenter: &mut Augmenter,
    img: RgbImage,
    spec: &TransformSpec,
    rng: &SampleRng,
    max_pixels: u64,
) -> Result<RgbImage, ImageError> {
    let plan = SamplePlan::for_size(ImageKind::Jpeg, (img.width, img.height), spec, &[], rng, max_pixels)
        .map_err(PlanError::into_image)?;
    plan.run(augmenter, img)
}

/// Decodes `data` (a `kind` image, or the other kind if its bytes say so)
/// and transforms it with `spec`, drawing from the sample's `rng`, as the
/// worker's CPU path does: the sample's plan ([`SamplePlan::new`]: header,
/// footprint refusal, steps), decode, augment. Nothing is decoded when the
/// header shows a transform step over `max_pixels`.
///
/// The whole image is decoded; the worker decodes only a crop's box where
/// libjpeg-turbo can (`stoker_worker::pipeline`).
pub fn decode_and_transform(
    augmenter: &mut Augmenter,
    kind: ImageKind,
    data: &[u8],
    spec: &TransformSpec,
    rng: &SampleRng,
    max_pixels: u64,
) -> Result<RgbImage, ImageError> {
    let plan = SamplePlan::new(kind, data, spec, &[], rng, max_pixels).map_err(PlanError::into_image)?;
    let img = plan.decode(data, max_pixels)?;
    plan.run(augmenter, img)
}

/// Test images: a gradient with some detail, encoded by jpeg-encoder.
#[cfg(test)]
pub(crate) mod testimg {
    use super::RgbImage;

    pub(crate) fn rgb(width: u32, height: u32, seed: u8) -> RgbImage {
        let mut img = RgbImage::new(width, height);
        for (i, p) in img.pixels.chunks_exact_mut(3).enumerate() {
            let (x, y) = (i as u32 % width, i as u32 / width);
            let v = x.wrapping_mul(7) ^ y.wrapping_mul(5) ^ u32::from(seed);
            p.copy_from_slice(&[v as u8, (x + y) as u8, (v >> 3) as u8]);
        }
        img
    }

    pub(crate) fn jpeg(width: u32, height: u32, seed: u8) -> Vec<u8> {
        let img = rgb(width, height, seed);
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, 85)
            .encode(
                &img.pixels,
                u16::try_from(width).expect("jpeg width"),
                u16::try_from(height).expect("jpeg height"),
                jpeg_encoder::ColorType::Rgb,
            )
            .expect("jpeg encode");
        out
    }

    /// An 8-bit RGB PNG, stored (deflate's uncompressed blocks), written
    /// here because no PNG encoder is a dependency.
    pub(crate) fn png(width: u32, height: u32, seed: u8) -> Vec<u8> {
        let img = rgb(width, height, seed);
        let mut raw = Vec::new();
        for row in img.pixels.chunks_exact(width as usize * 3) {
            raw.push(0);
            raw.extend_from_slice(row);
        }
        let mut z = vec![0x78, 0x01];
        let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
        for (i, block) in blocks.iter().enumerate() {
            z.push(u8::from(i + 1 == blocks.len()));
            let len = block.len() as u16;
            z.extend_from_slice(&len.to_le_bytes());
            z.extend_from_slice(&(!len).to_le_bytes());
            z.extend_from_slice(block);
        }
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in &raw {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        z.extend_from_slice(&(b << 16 | a).to_be_bytes());
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        for (name, body) in [(&b"IHDR"[..], &ihdr[..]), (b"IDAT", &z), (b"IEND", &[])] {
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            let start = out.len();
            out.extend_from_slice(name);
            out.extend_from_slice(body);
            let crc = crc32(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        }
        out
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::TooLarge;

    use crate::decode::sniff;
    use crate::testimg;

    fn rng() -> SampleRng {
        SampleRng::for_sample(1, 2, "s", 3)
    }

    #[test]
    fn presets_make_the_output_size() {
        let mut a = Augmenter::new();
        for data in [testimg::jpeg(61, 40, 1), testimg::png(33, 70, 2)] {
            let kind = sniff(&data).unwrap();
            for spec in [TransformSpec::train(24), TransformSpec::eval(24)] {
                let out = decode_and_transform(&mut a, kind, &data, &spec, &rng(), 1 << 20).unwrap();
                assert_eq!((out.width, out.height), (24, 24));
            }
        }
    }

    #[test]
    fn a_resize_bomb_is_refused_before_decoding() {
        let eval = TransformSpec::eval(224);
        let mut a = Augmenter::new();
        for (w, h) in [(4000, 1), (1, 4000)] {
            let jpeg = testimg::jpeg(w, h, 3);
            let err = decode_and_transform(&mut a, ImageKind::Jpeg, &jpeg, &eval, &rng(), 1 << 20).unwrap_err();
            assert!(matches!(err, ImageError::TooLarge(TooLarge { index: 0, .. })), "{err}");
        }
    }

    /// Regression: the worker measured the footprint from the header of the
    /// kind the sample's name gave, so a PNG named `.jpg` (whose JPEG
    /// header does not parse) went unmeasured, and decode, which trusts
    /// the bytes, handed a resize bomb to the transform.
    #[test]
    fn a_misnamed_resize_bomb_is_refused_from_its_header() {
        let eval = TransformSpec::eval(224);
        let png = testimg::png(4000, 1, 4);
        let plan = |kind, data: &[u8]| SamplePlan::new(kind, data, &eval, &[], &rng(), 1 << 20);
        let err = plan(ImageKind::Jpeg, &png).unwrap_err().into_image();
        assert!(
            matches!(err, ImageError::TooLarge(TooLarge { index: 0, width, height: 256, .. }) if width == 4000 * 256),
            "{err}"
        );
        let jpeg = testimg::jpeg(1, 4000, 5);
        assert!(matches!(
            plan(ImageKind::Png, &jpeg),
            Err(PlanError::Image(ImageError::TooLarge(_)))
        ));
        let mut a = Augmenter::new();
        let err = decode_and_transform(&mut a, ImageKind::Jpeg, &png, &eval, &rng(), 1 << 20).unwrap_err();
        assert!(matches!(err, ImageError::TooLarge(_)), "{err}");
        // An ordinary misnamed image still decodes and transforms.
        let png = testimg::png(40, 30, 6);
        let out = decode_and_transform(&mut a, ImageKind::Jpeg, &png, &eval, &rng(), 1 << 20).unwrap();
        assert_eq!((out.width, out.height), (224, 224));
        assert!(matches!(
            plan(ImageKind::Jpeg, b"neither"),
            Err(PlanError::Image(ImageError::Decode(_)))
        ));
    }

    /// The `train` and `eval` presets' pixels, pinned: a change to any op,
    /// draw or executor that moves an existing pipeline's output fails
    /// here (then it needs a new spec version, not a silent change).
    /// Synthetic images decoded from PNG, so no JPEG decoder is involved.
    #[test]
    fn golden_hashes_of_the_presets() {
        let mut augmenter = Augmenter::new();
        let hash = |spec: &TransformSpec, augmenter: &mut Augmenter| {
            let mut bytes = Vec::new();
            for (i, (w, h)) in [(500, 375), (375, 500), (97, 61), (224, 224)].into_iter().enumerate() {
                let png = testimg::png(w, h, i as u8);
                for position in 0..4 {
                    let rng = SampleRng::for_sample(7, 1, "golden", position);
                    let out = decode_and_transform(augmenter, ImageKind::Png, &png, spec, &rng, 1 << 30).unwrap();
                    bytes.extend_from_slice(&out.pixels);
                }
            }
            format!("{:016x}", stoker_core::rng::fnv1a(&bytes))
        };
        let train = hash(&TransformSpec::train(224), &mut augmenter);
        let eval = hash(&TransformSpec::eval(224), &mut augmenter);
        assert_eq!(
            (train.as_str(), eval.as_str()),
            ("ca52c7d3d89e88bb", "69313a55f577d155"),
            "train {train}, eval {eval}"
        );
    }
}
