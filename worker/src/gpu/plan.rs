//! What a lane makes of each sample of a batch, decided on the host before
//! anything is decoded ([`plan`]): the sample's parts, each an output of
//! its own: the image; each view (another pipeline, with its own draws,
//! over the same device decode); each mask (decoded here, following the
//! image's geometric steps as one chain, nearest with 0 fill). What the
//! lanes do not take goes back to the CPU path with the reason.

use bytes::Bytes;
use stoker_core::Step;
use stoker_formats::sample::RawValue;
use stoker_image::augment::Chain;

use super::queue::{GpuResult, GpuSample, Recipe, mask_pixels};
use super::steps::{GpuCrop, fused, gpu_runs, mask_chain};

/// Which output of its sample a part makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// The sample's image.
    Image,
    /// Its view of this index.
    View(usize),
    /// Its mask at this index of the request's fields.
    Mask(usize),
}

/// How a lane makes one part.
pub(super) enum Work {
    /// The fused kernel, with the batch's other fused parts: the crop of
    /// the chain's output (its box rendered through the chain in one
    /// launch for the batch) to `size` x `size`.
    Fused(Chain, GpuCrop, u32),
    /// A round of kernels per step over the batch
    /// ([`super::Gpu::run_steps_batch`]), to `size` x `size`.
    Steps(Vec<Step>, u32),
    /// A mask decoded on the host (a byte a pixel, the image's size)
    /// through its chain, in the batch's one mask launch.
    Mask(Bytes, Chain),
}

/// One output of a sample, and how it is made.
pub(super) struct Part {
    pub(super) role: Role,
    pub(super) work: Work,
}

/// A sample whose parts are known, ready for a batch.
pub(super) struct PlannedSample {
    pub(super) sample: GpuSample,
    /// The image first, then its views, then its masks.
    pub(super) parts: Vec<Part>,
    /// The size the header gives; the decoded image must have it.
    pub(super) dims: (u32, u32),
    /// Device bytes it needs: decoded image, intermediates, outputs.
    pub(super) bytes: u64,
}

/// What a lane takes: images of at most `max_image_pixels`, samples of at
/// most `batch_memory` device bytes (the lanes' `GpuRunnerConfig`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) max_image_pixels: u64,
    pub(super) batch_memory: u64,
}

/// The parts of the sample's plan (made where it was routed: its size and
/// steps are taken as they are, never resolved again), with its masks
/// decoded; or why the lanes do not take it after all (the CPU path then
/// runs the same plan, or skips it with its own reason).
#[allow(
    clippy::result_large_err,
    reason = "the Err is the sample itself, handed back whole to the CPU path once; boxing would allocate for each"
)]
pub(super) fn plan(sample: GpuSample, recipe: &Recipe, config: Limits) -> Result<PlannedSample, GpuResult> {
    #[cfg(feature = "failpoints")]
    {
        crate::failpoint::pause();
        crate::failpoint::panic_if_chosen(crate::failpoint::GPU_PLAN_PANIC, &sample.key);
    }
    match parts(&sample, recipe, config) {
        Ok((parts, dims, bytes)) => Ok(PlannedSample {
            sample,
            parts,
            dims,
            bytes,
        }),
        Err(reason) => Err(GpuResult::Cpu { sample, reason }),
    }
}

type Parts = (Vec<Part>, (u32, u32), u64);

fn parts(sample: &GpuSample, recipe: &Recipe, config: Limits) -> Result<Parts, String> {
    let plan = &sample.plan;
    let (w, h) = plan.dims;
    let steps = &plan.image;
    let mut bytes = 3 * u64::from(w) * u64::from(h);
    let mut parts = Vec::with_capacity(1 + recipe.views.len());
    // The router sends the lanes a spec of one square size only.
    let side = recipe
        .spec
        .size
        .side()
        .ok_or("the transform keeps each image's own size")?;
    let (work, need) = image_work(steps, w, h, side)?;
    parts.push(Part {
        role: Role::Image,
        work,
    });
    bytes += need;
    for (j, view) in recipe.views.iter().enumerate() {
        let why = |e: String| format!("view {:?}: {e}", view.name);
        let steps = plan
            .views
            .get(j)
            .ok_or_else(|| why("not in the sample's plan".into()))?;
        let side = view
            .transform
            .size
            .side()
            .ok_or("its transform keeps each image's own size");
        let (work, need) = image_work(steps, w, h, side.map_err(|e| why(e.into()))?).map_err(why)?;
        parts.push(Part {
            role: Role::View(j),
            work,
        });
        bytes += need;
    }
    let has_masks = sample.masks.iter().any(|f| matches!(f, Ok(Some(_))));
    let chain = match has_masks {
        true => Some(mask_chain(steps, w, h).ok_or("the image's steps do not chain for its masks")?),
        false => None,
    };
    for (i, field) in sample.masks.iter().enumerate() {
        let (Ok(Some(RawValue::Bytes(data))), Some(chain)) = (field, &chain) else {
            continue;
        };
        let name = recipe.fields.get(i).map_or("mask", |f| f.name.as_str());
        // Decoded by a pool thread ahead of the batch, or here.
        let pixels = match sample.mask_pixels.iter().find(|(at, _)| *at == i) {
            Some((_, decoded)) => decoded.clone(),
            None => mask_pixels(data, (w, h), config.max_image_pixels),
        }
        .map_err(|why| format!("mask {name:?}: {why}"))?;
        bytes += pixels.len() as u64 + u64::from(chain.out_w) * u64::from(chain.out_h);
        parts.push(Part {
            role: Role::Mask(i),
            work: Work::Mask(pixels, chain.clone()),
        });
    }
    if bytes > config.batch_memory {
        return Err(format!(
            "{w}x{h} needs {} MiB of device memory, over the batch limit of {} MiB",
            bytes >> 20,
            config.batch_memory >> 20
        ));
    }
    Ok((parts, (w, h), bytes))
}

/// How the lanes make a `size` x `size` image of a `w` x `h` decode by
/// `steps`, and the device bytes that takes besides the decode; or why
/// they do not (a step without a kernel: known before decoding, so nothing
/// is decoded twice).
fn image_work(steps: &[Step], w: u32, h: u32, size: u32) -> Result<(Work, u64), String> {
    if let Some(step) = steps.iter().find(|s| !gpu_runs(s)) {
        return Err(format!("step {} runs on the cpu", step.name()));
    }
    let out = 3 * u64::from(size) * u64::from(size);
    if let Some((chain, crop)) = fused(steps, w, h, size) {
        return Ok((Work::Fused(chain, crop, size), out));
    }
    // The largest image the steps make, held twice while a step runs (a
    // blur's float intermediate counts four times).
    let largest = steps
        .iter()
        .filter_map(|s| match *s {
            Step::CropResize { out_w, out_h, .. } | Step::Affine { out_w, out_h, .. } => {
                Some(u64::from(out_w) * u64::from(out_h) * 3)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let working = 6 * largest.max(u64::from(w) * u64::from(h) * 3);
    Ok((Work::Steps(steps.to_vec(), size), out + working))
}

/// How many of `steps`' last steps the fused kernel can run: a bilinear
/// crop-resize to `size` x `size`, alone or followed by a horizontal flip.
pub(super) fn fusable_tail(steps: &[Step], size: u32) -> usize {
    let is_crop = |s: &Step| {
        matches!(
            s,
            Step::CropResize {
                out_w,
                out_h,
                filter: stoker_core::Interpolation::Bilinear,
                ..
            } if (*out_w, *out_h) == (size, size)
        )
    };
    match steps {
        [.., crop, Step::FlipHorizontal] if is_crop(crop) => 2,
        [.., crop] if is_crop(crop) => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use stoker_core::{FieldKind, FieldSpec, ItemSeed, TransformSpec, ViewSpec};
    use stoker_formats::image::ImageKind;
    use stoker_image::SamplePlan;

    use super::*;

    /// An RGB PNG of 16x8: a mask of a 16x8 image (its first channel).
    const MASK: &[u8] = include_bytes!("../../formats/testdata/tiny.png");

    const LIMITS: Limits = Limits {
        max_image_pixels: 1 << 24,
        batch_memory: 512 << 20,
    };

    /// A `w` x `h` JPEG planned with `r`, as the router plans it.
    fn sample(w: u32, h: u32, mask: Option<&[u8]>, r: &Recipe) -> GpuSample {
        let img = stoker_synth::procedural(w, h, 3);
        let data = Bytes::from(stoker_synth::encode_jpeg(&img, 90).unwrap());
        let rng = ItemSeed::new(3, 1, "shard").sample(5);
        let plan = SamplePlan::new(ImageKind::Jpeg, &data, &r.spec, &r.views, &rng, LIMITS.max_image_pixels).unwrap();
        GpuSample {
            key: "s".to_owned(),
            position: 5,
            label: 1,
            data,
            plan: Arc::new(plan),
            // The caption at index 0, the mask at index 1.
            masks: match mask {
                Some(m) => vec![Ok(None), Ok(Some(RawValue::Bytes(Bytes::copy_from_slice(m))))],
                None => Vec::new(),
            },
            mask_pixels: Vec::new(),
        }
    }

    fn recipe(views: &[(&str, &str)]) -> Recipe {
        let spec = |json: &str| TransformSpec::from_json(json).unwrap();
        Recipe {
            spec: Arc::new(spec(
                r#"{"ops": [{"op": "RandomRotation", "degrees": 20}, {"op": "RandomResizedCrop", "size": 8}]}"#,
            )),
            fields: Arc::new([
                FieldSpec::new("caption", "txt", FieldKind::Text),
                FieldSpec::new("seg", "seg.png", FieldKind::Mask),
            ]),
            views: views
                .iter()
                .map(|(name, json)| ViewSpec {
                    name: (*name).to_owned(),
                    transform: spec(json),
                })
                .collect(),
            on_device: false,
        }
    }

    fn reason(result: Result<PlannedSample, GpuResult>) -> String {
        match result {
            Err(GpuResult::Cpu { reason, .. }) => reason,
            Err(other) => panic!("not handed back: {other:?}"),
            Ok(p) => panic!("planned {} parts", p.parts.len()),
        }
    }

    #[test]
    fn a_sample_plans_its_image_views_and_masks() {
        let views = [
            ("crop", r#"{"ops": [{"op": "RandomResizedCrop", "size": 4}]}"#),
            (
                "warped",
                r#"{"ops": [{"op": "RandomRotation", "degrees": 20, "interpolation": "bilinear"}, {"op": "CenterCrop", "size": 6}]}"#,
            ),
        ];
        let r = recipe(&views);
        let p = plan(sample(16, 8, Some(MASK), &r), &r, LIMITS).unwrap();
        assert_eq!(p.dims, (16, 8));
        let roles: Vec<Role> = p.parts.iter().map(|part| part.role).collect();
        assert_eq!(roles, [Role::Image, Role::View(0), Role::View(1), Role::Mask(1)]);
        assert!(matches!(p.parts[0].work, Work::Fused(_, _, 8)));
        assert!(matches!(p.parts[1].work, Work::Fused(_, _, 4)));
        assert!(matches!(p.parts[2].work, Work::Steps(_, 6)));
        let Work::Mask(pixels, chain) = &p.parts[3].work else {
            panic!("not a mask")
        };
        // The mask's first channel, through the image's rotation and crop.
        assert_eq!(pixels.len(), 16 * 8);
        assert_eq!((chain.src_w, chain.src_h, chain.out_w, chain.out_h), (16, 8, 8, 8));
        assert!(p.bytes > 3 * 16 * 8);
    }

    /// What the lanes do not take goes back to the CPU path, which skips it
    /// with its own reason: the same words.
    #[test]
    fn what_the_lanes_do_not_take_goes_back_with_the_reason() {
        let plain = recipe(&[]);
        let r = reason(plan(sample(20, 10, Some(MASK), &plain), &plain, LIMITS));
        assert_eq!(r, "mask \"seg\": mask is 16x8, its image 20x10");
        let mut palette = MASK.to_vec();
        palette[25] = 3;
        let r = reason(plan(sample(16, 8, Some(&palette), &plain), &plain, LIMITS));
        assert!(r.starts_with("mask \"seg\": a palette PNG"), "{r}");
        let blur = [(
            "blurred",
            r#"{"ops": [{"op": "GaussianBlur", "kernel_size": [3, 5]}, {"op": "CenterCrop", "size": 4}]}"#,
        )];
        let blurred = recipe(&blur);
        let r = reason(plan(sample(16, 8, None, &blurred), &blurred, LIMITS));
        assert!(
            r.starts_with("view \"blurred\": step") && r.ends_with("runs on the cpu"),
            "{r}"
        );
        let tight = Limits {
            batch_memory: 100,
            ..LIMITS
        };
        let r = reason(plan(sample(16, 8, None, &plain), &plain, tight));
        assert!(r.contains("over the batch limit"), "{r}");
        // Masks a pool thread decoded ahead of the batch are taken as they
        // are; the same ones decoded here are the same bytes.
        let mut ahead = sample(16, 8, Some(MASK), &plain);
        ahead.decode_masks(LIMITS.max_image_pixels);
        assert!(matches!(&ahead.mask_pixels[..], [(1, Ok(p))] if p.len() == 16 * 8));
        let (here, there) = (
            plan(sample(16, 8, Some(MASK), &plain), &plain, LIMITS).unwrap(),
            plan(ahead.clone(), &plain, LIMITS).unwrap(),
        );
        let pixels = |p: &PlannedSample| match &p.parts[1].work {
            Work::Mask(pixels, _) => pixels.clone(),
            _ => panic!("not a mask"),
        };
        assert_eq!(pixels(&here), pixels(&there));
        ahead.mask_pixels = vec![(1, Err("decoded ahead: not a PNG".into()))];
        assert_eq!(
            reason(plan(ahead, &plain, LIMITS)),
            "mask \"seg\": decoded ahead: not a PNG"
        );
    }
}
