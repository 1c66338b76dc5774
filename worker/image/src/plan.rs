//! One sample's plan ([`SamplePlan`]), made once where the worker routes
//! the sample: the size its header declares, the steps its draws resolve
//! to for the image and for each view (a mask follows the image's), and
//! where it runs and why. The executors take it as it is: the CPU path
//! ([`SamplePlan::decode`], [`SamplePlan::run`], [`SamplePlan::run_view`],
//! [`SamplePlan::run_mask`], and the worker's region decode) and the GPU
//! lanes. This is the only place the worker resolves a sample's draws into
//! steps (checked by `tests/integration/architecture.rs`), so a hand-back
//! from the lanes to the CPU cannot draw differently.

use stoker_core::targets::{Outline, TargetStep, Targets};
use stoker_core::{SampleRng, Step, TooLarge, TransformSpec, ViewSpec, footprint, resolve_steps, resolve_with_targets};

use crate::augment::{AugmentError, Augmenter};
use crate::decode::{self, DecodeError, ImageKind, RgbImage, check_jpeg, decode_mask, header_dimensions, sniff};
use crate::error::ImageError;

/// Where a planned sample runs, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunsOn {
    /// The worker's CPU pool, for this reason.
    Cpu(&'static str),
    /// The GPU lanes, in a batch (they hand it back to the CPU pool, with
    /// this plan, when their host work finds what they cannot do).
    Gpu,
}

/// A sample's plan: everything decided about it before a byte is decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplePlan {
    /// The kind the bytes are (a PNG named `.jpg` is a PNG here).
    pub kind: ImageKind,
    /// The size the header declares, within the pixel limit; the decoded
    /// image must have it ([`SamplePlan::decode`] checks).
    pub dims: (u32, u32),
    /// The image's steps, from the sample's draws.
    pub image: Vec<Step>,
    /// Each view's steps, from the view's own draws, in the request's order.
    pub views: Vec<Vec<Step>>,
    /// The most bytes the image's and the views' transforms hold at once
    /// ([`footprint`]), summed: what the worker's memory budget reserves.
    pub working_bytes: u64,
    /// Where it runs. [`SamplePlan::new`] says the CPU; the worker's router
    /// sends it to the GPU lanes when they run every step.
    pub runs_on: RunsOn,
    /// How its detection targets move, from the image's draws
    /// (`stoker_core::targets`): planned only for a request with a
    /// targets field ([`SamplePlan::with_targets`]), empty otherwise.
    pub targets: Vec<TargetStep>,
}

/// Why a sample cannot be planned: the sample is skipped with it.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The image's header, its size, or its transform.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A view's transform, named by the view.
    #[error("view {name:?}: {source}")]
    View { name: String, source: ImageError },
}

impl PlanError {
    /// The image's error, or the view's without its name (for callers
    /// that plan no views).
    pub fn into_image(self) -> ImageError {
        match self {
            PlanError::Image(e) | PlanError::View { source: e, .. } => e,
        }
    }
}

impl SamplePlan {
    /// Plans a `kind` image (or the other kind, if its bytes say so) from
    /// its header: the pixel limit, the footprint of the transform and of
    /// each view (refused over `max_pixels` before anything is decoded),
    /// and the steps `rng`'s draws resolve to (a view draws from
    /// `rng.view(index)`). The header is read as the decoder that will
    /// decode `data` reads it first, so its errors are the decoder's.
    pub fn new(
        kind: ImageKind,
        data: &[u8],
        spec: &TransformSpec,
        views: &[ViewSpec],
        rng: &SampleRng,
        max_pixels: u64,
    ) -> Result<Self, PlanError> {
        Self::from_header(kind, data, spec, views, rng, max_pixels, None)
    }

    /// [`SamplePlan::new`], with the steps its detection targets take
    /// through the image's geometry (`targets`), from the same draws;
    /// `boxes` (the request's first targets field, as read) are what ops
    /// that choose by the boxes see (`RandomIoUCrop`).
    pub fn with_targets(
        kind: ImageKind,
        data: &[u8],
        spec: &TransformSpec,
        views: &[ViewSpec],
        rng: &SampleRng,
        max_pixels: u64,
        boxes: Option<&Targets>,
    ) -> Result<Self, PlanError> {
        Self::from_header(kind, data, spec, views, rng, max_pixels, Some(boxes))
    }

    fn from_header(
        kind: ImageKind,
        data: &[u8],
        spec: &TransformSpec,
        views: &[ViewSpec],
        rng: &SampleRng,
        max_pixels: u64,
        targets: Option<Option<&Targets>>,
    ) -> Result<Self, PlanError> {
        let kind = sniff(data).unwrap_or(kind);
        let dims = match kind {
            ImageKind::Jpeg => check_jpeg(data, max_pixels).map_err(ImageError::from)?,
            ImageKind::Png => {
                let (w, h) = header_dimensions(ImageKind::Png, data).map_err(ImageError::from)?;
                stoker_formats::image::check_size(u64::from(w), u64::from(h), max_pixels).map_err(ImageError::from)?;
                (w, h)
            }
        };
        Self::for_size_inner(kind, dims, spec, views, rng, max_pixels, targets)
    }

    /// Plans an image already known to be `dims` (decoded, or its header
    /// read): the footprints, then the steps.
    pub fn for_size(
        kind: ImageKind,
        dims: (u32, u32),
        spec: &TransformSpec,
        views: &[ViewSpec],
        rng: &SampleRng,
        max_pixels: u64,
    ) -> Result<Self, PlanError> {
        Self::for_size_inner(kind, dims, spec, views, rng, max_pixels, None)
    }

    fn for_size_inner(
        kind: ImageKind,
        (w, h): (u32, u32),
        spec: &TransformSpec,
        views: &[ViewSpec],
        rng: &SampleRng,
        max_pixels: u64,
        targets: Option<Option<&Targets>>,
    ) -> Result<Self, PlanError> {
        let view_err = |v: &ViewSpec, source: ImageError| PlanError::View {
            name: v.name.clone(),
            source,
        };
        let mut working_bytes = footprint(spec, w, h, max_pixels).map_err(ImageError::from)?;
        for v in views {
            let too_large = |e: TooLarge| view_err(v, e.into());
            working_bytes += footprint(&v.transform, w, h, max_pixels).map_err(too_large)?;
        }
        let (image, targets) = match targets {
            Some(boxes) => resolve_with_targets(spec, rng, w, h, boxes).map_err(ImageError::from)?,
            None => (resolve_steps(spec, rng, w, h).map_err(ImageError::from)?, Vec::new()),
        };
        let views = views
            .iter()
            .enumerate()
            .map(|(j, v)| resolve_steps(&v.transform, &rng.view(j), w, h).map_err(|e| view_err(v, e.into())))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            kind,
            dims: (w, h),
            image,
            views,
            working_bytes,
            runs_on: RunsOn::Cpu("planned for the cpu"),
            targets,
        })
    }

    /// The size the image comes out at: the header's, through its steps
    /// (the spec's square, or, for a spec that keeps each image's size,
    /// this sample's own).
    pub fn out_dims(&self) -> (u32, u32) {
        self.image.iter().fold(self.dims, |(w, h), s| s.output_size(w, h))
    }

    /// The image's steps as a mask follows them: those that move pixels,
    /// with nearest sampling and 0 fill ([`Step::for_mask`]).
    pub fn mask_steps(&self) -> Vec<Step> {
        self.image.iter().filter_map(Step::for_mask).collect()
    }

    /// Decodes the whole of `data`, which must come out the planned size.
    pub fn decode(&self, data: &[u8], max_pixels: u64) -> Result<RgbImage, ImageError> {
        let img = decode::decode(self.kind, data, max_pixels)?;
        self.check_decoded(&img)?;
        Ok(img)
    }

    /// Whether `img` is the planned size (a decoder that disagrees with the
    /// header it was planned from is refused, not run with wrong steps).
    pub fn check_decoded(&self, img: &RgbImage) -> Result<(), DecodeError> {
        match (img.width, img.height) == self.dims {
            true => Ok(()),
            false => Err(DecodeError::invalid(
                match self.kind {
                    ImageKind::Jpeg => "jpeg",
                    ImageKind::Png => "png",
                },
                format!(
                    "decoded {}x{}, its header says {}x{}",
                    img.width, img.height, self.dims.0, self.dims.1
                ),
            )),
        }
    }

    /// Runs the image's steps on its decode.
    pub fn run(&self, augmenter: &mut Augmenter, img: RgbImage) -> Result<RgbImage, ImageError> {
        Ok(augmenter.run(img, &self.image)?)
    }

    /// Runs view `index`'s steps on a copy of the decoded `source` (an
    /// index past the plan's views runs none: the caller's size check
    /// then refuses the result).
    pub fn run_view(
        &self,
        augmenter: &mut Augmenter,
        index: usize,
        source: &RgbImage,
    ) -> Result<RgbImage, AugmentError> {
        let steps = self.views.get(index).map(Vec::as_slice).unwrap_or_default();
        augmenter.run(source.clone(), steps)
    }

    /// A segmentation mask of the image ([`decode_mask`]: an 8-bit image
    /// of the planned size; of RGB its first channel) through
    /// [`SamplePlan::mask_steps`]: its class per pixel, a byte each, and
    /// its size. `Err` is the reason, for the sample's skip.
    pub fn run_mask(&self, data: &[u8], max_pixels: u64) -> Result<(Vec<u8>, u32, u32), String> {
        let img = decode_mask(data, self.dims, max_pixels)?;
        let out = Augmenter::new()
            .run(img, &self.mask_steps())
            .map_err(|e| e.to_string())?;
        let pixels = out.pixels.chunks_exact(3).map(|p| p[0]).collect();
        Ok((pixels, out.width, out.height))
    }

    /// Each instance's mask: its outline drawn on the image's canvas (the
    /// planned size), then through [`SamplePlan::mask_steps`] as a
    /// segmentation mask goes, three instances a pass (one a channel).
    /// One plane per outline, row-major, 1 inside and 0 outside, and
    /// their size. `Err` names the instance that cannot be drawn.
    pub fn draw_outlines(&self, outlines: &[Outline]) -> Result<(Vec<u8>, u32, u32), String> {
        let (w, h) = self.dims;
        let steps = self.mask_steps();
        let (ow, oh) = steps.iter().fold(self.dims, |(w, h), s| s.output_size(w, h));
        let plane = ow as usize * oh as usize;
        let mut planes = vec![0u8; plane * outlines.len()];
        let mut augmenter = Augmenter::new();
        for (group, three) in outlines.chunks(3).enumerate() {
            let mut canvas = vec![0u8; w as usize * h as usize * 3];
            for (c, o) in three.iter().enumerate() {
                o.draw((w, h), &mut canvas[c..], 3, 1)
                    .map_err(|why| format!("segmentation of instance {}: {why}", group * 3 + c))?;
            }
            let image = RgbImage {
                width: w,
                height: h,
                pixels: canvas,
            };
            let out = augmenter.run(image, &steps).map_err(|e| e.to_string())?;
            if (out.width, out.height) != (ow, oh) {
                return Err(format!(
                    "masks came out {}x{}, planned {ow}x{oh}",
                    out.width, out.height
                ));
            }
            for c in 0..three.len() {
                let at = (group * 3 + c) * plane;
                for (dst, px) in planes[at..at + plane].iter_mut().zip(out.pixels.chunks_exact(3)) {
                    *dst = px[c];
                }
            }
        }
        Ok((planes, ow, oh))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testimg;

    fn rng() -> SampleRng {
        SampleRng::for_sample(1, 2, "s", 3)
    }

    fn views() -> Vec<ViewSpec> {
        vec![ViewSpec {
            name: "small".into(),
            transform: TransformSpec::train(8),
        }]
    }

    #[test]
    fn a_plan_holds_the_steps_the_draws_resolve_to() {
        let data = testimg::jpeg(61, 40, 1);
        let spec = TransformSpec::train(24);
        let plan = SamplePlan::new(ImageKind::Png, &data, &spec, &views(), &rng(), 1 << 20).unwrap();
        assert_eq!((plan.kind, plan.dims), (ImageKind::Jpeg, (61, 40)));
        assert_eq!(plan.image, resolve_steps(&spec, &rng(), 61, 40).unwrap());
        let view = resolve_steps(&TransformSpec::train(8), &rng().view(0), 61, 40).unwrap();
        assert_eq!(plan.views, [view]);
        assert_eq!(plan.runs_on, RunsOn::Cpu("planned for the cpu"));
        let mut a = Augmenter::new();
        let img = plan.decode(&data, 1 << 20).unwrap();
        assert_eq!(plan.run_view(&mut a, 0, &img).unwrap().width, 8);
        assert_eq!(plan.run(&mut a, img).unwrap().width, 24);
    }

    #[test]
    fn what_cannot_be_planned_says_why_as_the_decoder_would() {
        let (spec, max) = (TransformSpec::eval(24), 1 << 20);
        let jpeg = testimg::jpeg(64, 48, 2);
        for cut in [0, 2, 20] {
            let planned = SamplePlan::new(ImageKind::Jpeg, &jpeg[..cut], &spec, &[], &rng(), max).unwrap_err();
            let decoded = decode::decode(ImageKind::Jpeg, &jpeg[..cut], max).unwrap_err();
            assert_eq!(planned.to_string(), decoded.to_string());
        }
        let png = testimg::png(64, 48, 2);
        let over = SamplePlan::new(ImageKind::Png, &png, &spec, &[], &rng(), 1000).unwrap_err();
        assert_eq!(
            over.to_string(),
            decode::decode(ImageKind::Png, &png, 1000).unwrap_err().to_string()
        );
        let big = vec![ViewSpec {
            name: "huge".into(),
            transform: TransformSpec::eval(4096),
        }];
        let view = SamplePlan::new(ImageKind::Png, &png, &spec, &big, &rng(), max).unwrap_err();
        assert!(
            matches!(&view, PlanError::View { name, source: ImageError::TooLarge(_) } if name == "huge"),
            "{view}"
        );
        assert!(view.to_string().starts_with("view \"huge\": "), "{view}");
    }
}
