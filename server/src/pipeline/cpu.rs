//! One sample on the CPU: decode (only the crop's box where libjpeg-turbo
//! can) and augment it, on a pool thread; what fails becomes a [`Skipped`]
//! with its reason, and so does a panic in the decoder or the transform
//! ([`SkipKind::Internal`]).

use bytes::Bytes;
use stoker_core::{
    FieldSpec, FieldValue, ItemSeed, NpyArray, Rect, SampleRng, Step, TransformSpec, ViewSpec, resolve_steps,
};
use tracing::debug;

use super::{Processed, SkipKind, Skipped};
use crate::libjpeg;
use crate::metrics::{Stage, WorkerMetrics};
use crate::pool::catch_panic;
use stoker_formats::image::ImageKind;
use stoker_formats::sample::{RawSample, RawValue};
use stoker_image::ImageError;
use stoker_image::augment::Augmenter;
use stoker_image::decode::{RgbImage, check_jpeg, decode, decode_mask, header_dimensions, sniff};

thread_local! {
    static AUGMENTER: std::cell::RefCell<Augmenter> = std::cell::RefCell::new(Augmenter::new());
}

/// Decodes and augments one sample (runs on the CPU pool). Failures become
/// a [`Skipped`] with the reason; a panic in decode or transform is caught
/// here and becomes an [`SkipKind::Internal`] skip naming the key, the
/// stage and the panic's message, so the thread and the worker live on.
pub fn process_sample(
    raw: RawSample,
    spec: &TransformSpec,
    seed: ItemSeed,
    max_pixels: u64,
    metrics: &WorkerMetrics,
) -> Result<Processed, Skipped> {
    process_sample_with(raw, spec, seed, max_pixels, metrics, &[], &[])
}

/// [`process_sample`], with the request's fields `extra` and `views`: each
/// mask left in `raw.fields` (by [`super::fields::read_fields`]) follows
/// the image's geometric steps, and lands at its index of the result's
/// fields; each view is its own pipeline over the same decoded image,
/// with its own draws, after them (`FieldValue::Image`).
pub(crate) fn process_sample_with(
    mut raw: RawSample,
    spec: &TransformSpec,
    seed: ItemSeed,
    max_pixels: u64,
    metrics: &WorkerMetrics,
    extra: &[FieldSpec],
    views: &[ViewSpec],
) -> Result<Processed, Skipped> {
    let masks = std::mem::take(&mut raw.fields);
    let position = raw.position;
    let skip = |key: &str, kind: SkipKind, reason: String| Skipped {
        key: key.to_owned(),
        position,
        reason,
        kind,
    };
    let (kind, data) = match raw.image {
        Ok(img) => img,
        Err(problem) => return Err(skip(&raw.key, SkipKind::from(&problem), problem.to_string())),
    };
    let label = raw.label.map_err(|reason| skip(&raw.key, SkipKind::Label, reason))?;
    // A transform that would make an image over the pixel limit is refused
    // from the header (of the kind the bytes are), before anything is
    // decoded. (An image whose header does not parse fails in the decoder,
    // which reads the same header.)
    stoker_image::check_footprint(kind, &data, spec, max_pixels)
        .map_err(|e| skip(&raw.key, SkipKind::TooLarge, e.to_string()))?;
    for v in views {
        stoker_image::check_footprint(kind, &data, &v.transform, max_pixels)
            .map_err(|e| skip(&raw.key, SkipKind::TooLarge, format!("view {:?}: {e}", v.name)))?;
    }
    // Views need the whole image: no region decode then.
    let region = views.is_empty();
    let (img, steps) = metrics
        .time(Stage::Decode, || {
            catch_panic(|| {
                inject_decode_fault(&raw.key);
                decode_for(kind, &data, spec, &seed.sample(position), &raw.key, max_pixels, region)
            })
        })
        .map_err(|message| Skipped::panicked(&raw.key, position, "decode", &message))?
        .map_err(|e| skip(&raw.key, SkipKind::from(&e), e.to_string()))?;
    let source = (!views.is_empty()).then(|| img.clone());
    let out = metrics
        .time(Stage::Transform, || {
            catch_panic(|| AUGMENTER.with(|a| a.borrow_mut().run(img, &steps)))
        })
        .map_err(|message| {
            // Its scratch may be half-written: the next sample gets a new one.
            AUGMENTER.with(|a| *a.borrow_mut() = Augmenter::new());
            Skipped::panicked(&raw.key, position, "transform", &message)
        })?
        .map_err(|e| skip(&raw.key, SkipKind::Transform, e.to_string()))?;
    if (out.width, out.height) != (spec.size, spec.size) {
        return Err(skip(
            &raw.key,
            SkipKind::Transform,
            format!(
                "transform produced {}x{}, expected {s}x{s}",
                out.width,
                out.height,
                s = spec.size
            ),
        ));
    }
    let mut fields = Vec::new();
    let mut image_size = None;
    for (i, mask) in masks.into_iter().enumerate() {
        let Ok(Some(RawValue::Bytes(bytes))) = mask else {
            fields.push(None);
            continue;
        };
        let name = extra.get(i).map_or("mask", |f| f.name.as_str());
        let image_size = match image_size {
            Some(dims) => dims,
            None => *image_size.insert(
                header_dimensions(sniff(&data).unwrap_or(kind), &data)
                    .map_err(|e| skip(&raw.key, SkipKind::Decode, e.to_string()))?,
            ),
        };
        let mask = metrics
            .time(Stage::Transform, || {
                catch_panic(|| follow_image(&bytes, image_size, spec, &seed.sample(position), max_pixels))
            })
            .map_err(|message| Skipped::panicked(&raw.key, position, "mask transform", &message))?
            .map_err(|why| skip(&raw.key, SkipKind::BadField, format!("mask {name:?}: {why}")))?;
        fields.push(Some(FieldValue::Mask(mask)));
    }
    if let Some(source) = source {
        fields.resize(extra.len(), None);
        for (j, v) in views.iter().enumerate() {
            let pixels = metrics
                .time(Stage::Transform, || {
                    catch_panic(|| view_of(&source, &v.transform, &seed.sample(position).view(j)))
                })
                .map_err(|message| Skipped::panicked(&raw.key, position, "view transform", &message))?
                .map_err(|why| skip(&raw.key, SkipKind::Transform, format!("view {:?}: {why}", v.name)))?;
            fields.push(Some(FieldValue::Image(pixels)));
        }
    }
    Ok(Processed {
        key: raw.key,
        position: raw.position,
        label,
        width: out.width,
        height: out.height,
        pixels: Bytes::from(out.pixels),
        fields,
        device: None,
    })
}

/// One view: `transform` over a copy of the decoded `source`, with the
/// view's own draws `rng`; its pixels, checked to be its size.
fn view_of(source: &RgbImage, transform: &TransformSpec, rng: &SampleRng) -> Result<Bytes, String> {
    let steps = resolve_steps(transform, rng, source.width, source.height).map_err(|e| e.to_string())?;
    let out = AUGMENTER
        .with(|a| a.borrow_mut().run(source.clone(), &steps))
        .map_err(|e| e.to_string())?;
    let s = transform.size;
    if (out.width, out.height) != (s, s) {
        return Err(format!("produced {}x{}, expected {s}x{s}", out.width, out.height));
    }
    Ok(Bytes::from(out.pixels))
}

/// A segmentation mask through the image's geometric steps: decoded
/// ([`decode_mask`]: an 8-bit image of the image's `(width, height)`; of
/// RGB its first channel), then the steps the image resolved to from the
/// same draws, with nearest sampling and 0 fill ([`Step::for_mask`]);
/// `|u1` `[1, H, W]`.
fn follow_image(
    data: &[u8],
    (width, height): (u32, u32),
    spec: &TransformSpec,
    rng: &SampleRng,
    max_pixels: u64,
) -> Result<NpyArray, String> {
    let img = decode_mask(data, (width, height), max_pixels)?;
    let steps: Vec<Step> = resolve_steps(spec, rng, width, height)
        .map_err(|e| e.to_string())?
        .iter()
        .filter_map(Step::for_mask)
        .collect();
    let out = Augmenter::new().run(img, &steps).map_err(|e| e.to_string())?;
    let data: Vec<u8> = out.pixels.chunks_exact(3).map(|p| p[0]).collect();
    Ok(NpyArray::mask(out.width, out.height, Bytes::from(data)))
}

/// Unit tests make a sample's decode panic by ending its key with this.
#[cfg(test)]
pub(crate) const TEST_PANIC_SUFFIX: &str = "__panics_in_decode";

/// Fault injection, in test builds only: decoding the chosen key panics
/// (the `failpoints` feature's `stoker-decode-panic`, or in unit tests a
/// key ending in [`TEST_PANIC_SUFFIX`]).
#[cfg_attr(not(any(test, feature = "failpoints")), allow(unused_variables))]
fn inject_decode_fault(key: &str) {
    #[cfg(feature = "failpoints")]
    crate::failpoint::panic_if_chosen(crate::failpoint::DECODE_PANIC, key);
    #[cfg(test)]
    if key.ends_with(TEST_PANIC_SUFFIX) {
        panic!("test: injected panic decoding {key}");
    }
}

/// Decodes `data` and resolves the sample's steps. When the first step
/// crops a box out of a JPEG and the build has libjpeg-turbo, only that box
/// is decoded (the step then applies to the box); otherwise the whole image
/// is decoded with zune-jpeg / zune-png.
fn decode_for(
    kind: ImageKind,
    data: &[u8],
    spec: &TransformSpec,
    rng: &SampleRng,
    key: &str,
    max_pixels: u64,
    region: bool,
) -> Result<(RgbImage, Vec<Step>), ImageError> {
    if region && libjpeg::enabled() && kind == ImageKind::Jpeg && sniff(data) == Some(ImageKind::Jpeg) {
        let (w, h) = check_jpeg(data, max_pixels)?;
        let mut steps = resolve_steps(spec, rng, w, h)?;
        if let Some(Step::CropResize { crop, .. }) = steps.first_mut()
            && crop.inside(w, h)
        {
            match libjpeg::decode_region(data, crop.left as u32, crop.top as u32, crop.width, crop.height) {
                Ok(img) => {
                    *crop = Rect::whole(crop.width, crop.height);
                    return Ok((img, steps));
                }
                // CMYK and other inputs libjpeg will not turn into RGB.
                Err(reason) => debug!(key, reason, "region decode failed, decoding whole image"),
            }
        }
    }
    let img = decode(kind, data, max_pixels)?;
    let steps = resolve_steps(spec, rng, img.width, img.height)?;
    Ok((img, steps))
}
