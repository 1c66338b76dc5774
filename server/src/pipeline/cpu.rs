//! One sample on the CPU: decode (only the crop's box where libjpeg-turbo
//! can) and augment it, on a pool thread; what fails becomes a [`Skipped`]
//! with its reason.

use bytes::Bytes;
use stoker_core::{Step, TransformSpec, resolve_steps};
use tracing::debug;

use super::{Processed, Skipped};
use crate::augment::Augmenter;
use crate::decode::{DecodeError, RgbImage, check_jpeg, decode, sniff};
use crate::libjpeg;
use crate::wds::{ImageKind, RawSample};

thread_local! {
    static AUGMENTER: std::cell::RefCell<Augmenter> = std::cell::RefCell::new(Augmenter::new());
}

/// Decodes and augments one sample (runs on the CPU pool). Failures become
/// a [`Skipped`] with the reason.
pub fn process_sample(
    raw: RawSample,
    spec: &TransformSpec,
    seed: u64,
    epoch: u64,
    max_pixels: u64,
) -> Result<Processed, Skipped> {
    let skip = |key: &str, reason: String| Skipped {
        key: key.to_owned(),
        reason,
    };
    let (kind, data) = match raw.image {
        Ok(img) => img,
        Err(reason) => return Err(skip(&raw.key, reason)),
    };
    let label = raw.label.map_err(|reason| skip(&raw.key, reason))?;
    let (img, steps) =
        decode_for(kind, &data, spec, seed, epoch, &raw.key, max_pixels).map_err(|e| skip(&raw.key, e.to_string()))?;
    let out = AUGMENTER
        .with(|a| a.borrow_mut().run(img, &steps))
        .map_err(|e| skip(&raw.key, e.to_string()))?;
    if (out.width, out.height) != (spec.size, spec.size) {
        return Err(skip(
            &raw.key,
            format!(
                "transform produced {}x{}, expected {s}x{s}",
                out.width,
                out.height,
                s = spec.size
            ),
        ));
    }
    Ok(Processed {
        key: raw.key,
        position: raw.position,
        label,
        width: out.width,
        height: out.height,
        pixels: Bytes::from(out.pixels),
    })
}

/// Decodes `data` and resolves the sample's steps. When the first step
/// crops a box out of a JPEG and the build has libjpeg-turbo, only that box
/// is decoded (the step then applies to the box); otherwise the whole image
/// is decoded with zune-jpeg / zune-png.
fn decode_for(
    kind: ImageKind,
    data: &[u8],
    spec: &TransformSpec,
    seed: u64,
    epoch: u64,
    key: &str,
    max_pixels: u64,
) -> Result<(RgbImage, Vec<Step>), DecodeError> {
    if libjpeg::enabled() && kind == ImageKind::Jpeg && sniff(data) == Some(ImageKind::Jpeg) {
        let (w, h) = check_jpeg(data, max_pixels)?;
        let mut steps = resolve_steps(spec, seed, epoch, key, w, h);
        if let Some(Step::CropResize {
            left,
            top,
            width,
            height,
            ..
        }) = steps.first_mut()
            && *left >= 0
            && *top >= 0
            && *left + i64::from(*width) <= i64::from(w)
            && *top + i64::from(*height) <= i64::from(h)
        {
            match libjpeg::decode_region(data, *left as u32, *top as u32, *width, *height) {
                Ok(img) => {
                    (*left, *top) = (0, 0);
                    return Ok((img, steps));
                }
                // CMYK and other inputs libjpeg will not turn into RGB.
                Err(reason) => debug!(key, reason, "region decode failed, decoding whole image"),
            }
        }
    }
    let img = decode(kind, data, max_pixels)?;
    let steps = resolve_steps(spec, seed, epoch, key, img.width, img.height);
    Ok((img, steps))
}
