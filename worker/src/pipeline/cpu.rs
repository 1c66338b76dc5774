//! One sample on the CPU: decode (only the crop's box where libjpeg-turbo
//! can) and augment it, on a pool thread; what fails becomes a [`Skipped`]
//! with its reason, and so does a panic in the decoder or the transform
//! ([`SkipKind::Internal`]).
//!
//! The sample's plan, made where it was routed, is run as it is: no step
//! is resolved here. A mask (`process_sample_with`) follows the plan's
//! geometric steps ([`SamplePlan::run_mask`], [`SamplePlan::mask_steps`]:
//! nearest, fill 0). Views (`Item::views`) need the whole image decoded
//! once: each view runs its planned steps (drawn with `SampleRng::view`)
//! over a copy of it ([`SamplePlan::run_view`]), and its pixels are
//! appended to the result's fields as `FieldValue::Image`, after the
//! requested fields; the client splits them off into `Batch::views`. A
//! caught panic's skip names the key, the stage and the message; one
//! elsewhere in the pool job becomes the sample's skip in `route::on_pool`.
//! Detection targets that ask for masks come with the sample
//! ([`Instances`]): each instance's outline is drawn on the image's canvas
//! and follows the same geometric steps ([`SamplePlan::draw_outlines`]).

use std::borrow::Cow;

use bytes::Bytes;
use stoker_core::targets::Targets;
use stoker_core::{FieldSpec, FieldValue, ImageSize, ItemSeed, NpyArray, Rect, Step, TransformSpec, ViewSpec};
use tracing::debug;

use super::{Processed, SkipKind, Skipped};
use crate::libjpeg;
use crate::metrics::{Stage, WorkerMetrics};
use crate::pool::catch_panic;
use stoker_formats::image::ImageKind;
use stoker_formats::sample::{RawSample, RawValue};
use stoker_image::augment::Augmenter;
use stoker_image::decode::{RgbImage, sniff};
use stoker_image::{ImageError, PlanError, SamplePlan};

thread_local! {
    static AUGMENTER: std::cell::RefCell<Augmenter> = std::cell::RefCell::new(Augmenter::new());
}

/// Plans, decodes and augments one sample (runs on the CPU pool), as a CPU
/// worker routes and runs it. Failures become a [`Skipped`] with the
/// reason; a panic in planning, decode or transform is caught here and
/// becomes an [`SkipKind::Internal`] skip naming the key, the stage and the
/// panic's message, so the thread and the worker live on.
pub fn process_sample(
    raw: RawSample,
    spec: &TransformSpec,
    seed: ItemSeed,
    max_pixels: u64,
    metrics: &WorkerMetrics,
) -> Result<Processed, Skipped> {
    let plan = plan_sample(&raw, spec, &[], seed, max_pixels, None)?;
    process_sample_with(raw, &plan, max_pixels, metrics, &[], &[], Vec::new())
}

/// Detection targets whose masks the pool draws, each at its field's index
/// (taken out of the item's fields by `fields::take_instances`; they come
/// back in the result's fields, masks drawn).
pub(crate) type Instances = Vec<(usize, Box<Targets>)>;

/// `raw`'s plan ([`SamplePlan::new`], with the draws of `seed` at its
/// position): made once, where the sample is routed. `Err` is the sample's
/// skip, with the reason the CPU path gives (an image member or label
/// that is not one, a header that does not parse, a transform or a view
/// over the pixel limit, draws that cannot be carried out). `targets` is
/// `None` for a request without a targets field; otherwise the plan
/// records how targets move, and ops that choose by the boxes see these
/// (the request's first targets field, as read).
pub(crate) fn plan_sample(
    raw: &RawSample,
    spec: &TransformSpec,
    views: &[ViewSpec],
    seed: ItemSeed,
    max_pixels: u64,
    targets: Option<Option<&Targets>>,
) -> Result<SamplePlan, Skipped> {
    let skip = |kind: SkipKind, reason: String| Skipped {
        key: raw.key.clone(),
        position: raw.position,
        reason,
        kind,
    };
    let (kind, data) = match &raw.image {
        Ok(img) => img,
        Err(problem) => return Err(skip(SkipKind::from(problem), problem.to_string())),
    };
    if let Err(reason) = &raw.label {
        return Err(skip(SkipKind::Label, reason.clone()));
    }
    let rng = seed.sample(raw.position);
    catch_panic(|| match targets {
        Some(boxes) => SamplePlan::with_targets(*kind, data, spec, views, &rng, max_pixels, boxes),
        None => SamplePlan::new(*kind, data, spec, views, &rng, max_pixels),
    })
    .map_err(|message| Skipped::panicked(&raw.key, raw.position, "plan", &message))?
    .map_err(|e| match e {
        PlanError::Image(e) => skip(SkipKind::from(&e), e.to_string()),
        PlanError::View { name, source } => {
            let kind = match source {
                ImageError::TooLarge(_) => SkipKind::TooLarge,
                _ => SkipKind::Transform,
            };
            skip(kind, format!("view {name:?}: {source}"))
        }
    })
}

/// Decodes and augments one sample by its `plan` (made where it was
/// routed: never resolved again here; it says the output size), with the
/// request's fields `extra` and `views`: each mask left in
/// `raw.fields` (by [`super::fields::read_fields`]) follows the image's
/// geometric steps, and lands at its index of the result's fields; each
/// view is its own pipeline over the same decoded image, with its own
/// planned steps, after them (`FieldValue::Image`). Each of `instances`
/// gets its masks drawn and lands at its index too.
pub(crate) fn process_sample_with(
    mut raw: RawSample,
    plan: &SamplePlan,
    max_pixels: u64,
    metrics: &WorkerMetrics,
    extra: &[FieldSpec],
    views: &[ViewSpec],
    instances: Instances,
) -> Result<Processed, Skipped> {
    let masks = std::mem::take(&mut raw.fields);
    let position = raw.position;
    let skip = |key: &str, kind: SkipKind, reason: String| Skipped {
        key: key.to_owned(),
        position,
        reason,
        kind,
    };
    let (named, data) = match raw.image {
        Ok(img) => img,
        Err(problem) => return Err(skip(&raw.key, SkipKind::from(&problem), problem.to_string())),
    };
    let label = raw.label.map_err(|reason| skip(&raw.key, SkipKind::Label, reason))?;
    // Views need the whole image: no region decode then.
    let region = views.is_empty();
    let (img, steps) = metrics
        .time(Stage::Decode, || {
            catch_panic(|| {
                inject_decode_fault(&raw.key);
                decode_for(plan, (named, &data), &raw.key, max_pixels, region)
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
    let (w, h) = plan.out_dims();
    if (out.width, out.height) != (w, h) {
        return Err(skip(
            &raw.key,
            SkipKind::Transform,
            format!("transform produced {}x{}, planned {w}x{h}", out.width, out.height),
        ));
    }
    let mut fields = Vec::new();
    for (i, mask) in masks.into_iter().enumerate() {
        let Ok(Some(RawValue::Bytes(bytes))) = mask else {
            fields.push(None);
            continue;
        };
        let name = extra.get(i).map_or("mask", |f| f.name.as_str());
        let (pixels, w, h) = metrics
            .time(Stage::Transform, || catch_panic(|| plan.run_mask(&bytes, max_pixels)))
            .map_err(|message| Skipped::panicked(&raw.key, position, "mask transform", &message))?
            .map_err(|why| skip(&raw.key, SkipKind::BadField, format!("mask {name:?}: {why}")))?;
        fields.push(Some(FieldValue::Array(NpyArray::mask(w, h, Bytes::from(pixels)))));
    }
    for (i, mut targets) in instances {
        let name = extra.get(i).map_or("targets", |f| f.name.as_str());
        let (planes, w, h) = metrics
            .time(Stage::Transform, || {
                catch_panic(|| plan.draw_outlines(&targets.outlines))
            })
            .map_err(|message| Skipped::panicked(&raw.key, position, "instance masks", &message))?
            .map_err(|why| skip(&raw.key, SkipKind::BadField, format!("field {name:?}: {why}")))?;
        if (w, h) != targets.canvas {
            return Err(skip(
                &raw.key,
                SkipKind::Transform,
                format!(
                    "field {name:?}: masks came out {w}x{h}, its boxes' canvas is {}x{}",
                    targets.canvas.0, targets.canvas.1
                ),
            ));
        }
        targets.outlines = Vec::new();
        targets.masks = Some(Bytes::from(planes));
        if fields.len() <= i {
            fields.resize(i + 1, None);
        }
        fields[i] = Some(FieldValue::Targets(targets));
    }
    if let Some(source) = source {
        fields.resize(extra.len(), None);
        for (j, v) in views.iter().enumerate() {
            let pixels = metrics
                .time(Stage::Transform, || {
                    catch_panic(|| view_of(plan, j, &source, v.transform.size))
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

/// View `index` of the plan over a copy of the decoded `source`; its
/// pixels, checked to be `size` x `size`.
fn view_of(plan: &SamplePlan, index: usize, source: &RgbImage, size: ImageSize) -> Result<Bytes, String> {
    let out = AUGMENTER
        .with(|a| plan.run_view(&mut a.borrow_mut(), index, source))
        .map_err(|e| e.to_string())?;
    // A view's spec ends at a fixed square (`validate_views`).
    if Some((out.width, out.height)) != size.side().map(|s| (s, s)) {
        return Err(format!("produced {}x{}, expected {size}", out.width, out.height));
    }
    Ok(Bytes::from(out.pixels))
}

/// Unit tests make a sample's decode panic by ending its key with this.
#[cfg(test)]
pub(crate) const TEST_PANIC_SUFFIX: &str = "__panics_in_decode";

/// Fault injection, in test builds only: decoding the chosen key panics
/// (the `failpoints` feature's `stoker-decode-panic`, or in unit tests a
/// key ending in [`TEST_PANIC_SUFFIX`]), and every decode waits while
/// `stoker-sample-pause` is set.
#[cfg_attr(not(any(test, feature = "failpoints")), allow(unused_variables))]
fn inject_decode_fault(key: &str) {
    #[cfg(feature = "failpoints")]
    {
        crate::failpoint::pause();
        crate::failpoint::panic_if_chosen(crate::failpoint::DECODE_PANIC, key);
    }
    #[cfg(test)]
    if key.ends_with(TEST_PANIC_SUFFIX) {
        panic!("test: injected panic decoding {key}");
    }
}

/// Decodes `data` for its `plan`, with the steps to run on the result.
/// When the first step crops a box out of a JPEG and the build has
/// libjpeg-turbo, only that box is decoded (the step then applies to the
/// box); otherwise the whole image is decoded with zune-jpeg / zune-png,
/// and must come out the planned size.
fn decode_for<'p>(
    plan: &'p SamplePlan,
    (named, data): (ImageKind, &[u8]),
    key: &str,
    max_pixels: u64,
    region: bool,
) -> Result<(RgbImage, Cow<'p, [Step]>), ImageError> {
    if region
        && libjpeg::enabled()
        && named == ImageKind::Jpeg
        && sniff(data) == Some(ImageKind::Jpeg)
        && let Some(Step::CropResize { crop, .. }) = plan.image.first()
        && crop.inside(plan.dims.0, plan.dims.1)
    {
        match libjpeg::decode_region(data, crop.left as u32, crop.top as u32, crop.width, crop.height) {
            Ok(img) => {
                let mut steps = plan.image.clone();
                if let Some(Step::CropResize { crop, .. }) = steps.first_mut() {
                    *crop = Rect::whole(crop.width, crop.height);
                }
                return Ok((img, Cow::Owned(steps)));
            }
            // CMYK and other inputs libjpeg will not turn into RGB.
            Err(reason) => debug!(key, reason, "region decode failed, decoding whole image"),
        }
    }
    Ok((plan.decode(data, max_pixels)?, Cow::Borrowed(&plan.image)))
}
