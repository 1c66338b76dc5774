//! The GPU's transform kernels over decoded images: the fused crop +
//! resize + flip over a batch ([`Gpu::resized_crop_flip`], driven by
//! [`GpuCrop`], reading through a chain where [`fused`] made one), and
//! any other step lists in rounds over the batch ([`Gpu::run_steps_batch`];
//! one image's with [`Gpu::run_steps`]), for the steps [`gpu_runs`].
//!
//! [`GpuCrop`] is a crop, padded or not, plus at most a horizontal flip;
//! [`fused`] makes a sample's steps a chain then such a crop. A sample
//! whose steps are a chain then a bilinear crop-resize to the output (and
//! a flip), as `train`'s are, runs in the fused batch kernel, after one
//! chain launch renders each crop box. Other step lists run a round per
//! segment over the batch: each image's next chain (one launch for the
//! round), chain + crop-resize (one launch per output size), a resize
//! with Pillow's other filters (a launch per pass), colour steps
//! ([`Gpu::color_round`]), filtered warps (one launch), or a blur on its
//! own.

use cudarc::driver::CudaSlice;
use stoker_core::{Interpolation, Rect, Step, Warp};
use stoker_cuda::{DeviceImage, RrcParams, WarpParams, pack_rgb};
use stoker_image::augment::Chain;

use super::color::color_runs;
use super::device::{Gpu, GpuError, driver};
use super::resample::{Resize, push_crop, resampled};

impl Gpu {
    /// Runs the fused crop + resize + flip kernel over `images`, each with
    /// its crop, in one launch. The result is `crops.len()` images of
    /// `size`x`size`x3 bytes, back to back, on the device.
    pub fn resized_crop_flip(
        &self,
        images: &[&DeviceImage],
        crops: &[GpuCrop],
        size: u32,
    ) -> Result<CudaSlice<u8>, GpuError> {
        let image_bytes = size as usize * size as usize * 3;
        // The kernel writes every byte of each image's slot.
        let mut dst = stoker_cuda::alloc_bytes(&self.stream, (image_bytes * images.len()).max(1))
            .map_err(driver("allocation of the batch output"))?;
        self.resized_crop_flip_into(images, crops, &[], (size, size), &mut dst)?;
        Ok(dst)
    }

    /// As [`Gpu::resized_crop_flip`], into the first `images.len()` slots
    /// of `out_w`x`out_h`x3 bytes of `dst`. With `chains` (one per image,
    /// or none), each crop box is of its chain's output: one launch renders
    /// every box through its chain (each pixel walks its chain once, not
    /// once per filter tap), then the resize reads the boxes.
    pub fn resized_crop_flip_into(
        &self,
        images: &[&DeviceImage],
        crops: &[GpuCrop],
        chains: &[&Chain],
        out: (u32, u32),
        dst: &mut CudaSlice<u8>,
    ) -> Result<(), GpuError> {
        self.resized_crop_flip_at(images, crops, chains, out, dst, 0)
    }

    /// As [`Gpu::resized_crop_flip_into`], into the `images.len()` slots
    /// of `dst` from byte `base` on.
    pub(super) fn resized_crop_flip_at(
        &self,
        images: &[&DeviceImage],
        crops: &[GpuCrop],
        chains: &[&Chain],
        (out_w, out_h): (u32, u32),
        dst: &mut CudaSlice<u8>,
        base: usize,
    ) -> Result<(), GpuError> {
        if images.len() != crops.len() || !(chains.is_empty() || chains.len() == images.len()) {
            return Err(GpuError::Invalid(format!(
                "{} images but {} crops and {} chains",
                images.len(),
                crops.len(),
                chains.len()
            )));
        }
        // Each chained image's crop box, rendered through its chain.
        let boxed: Vec<(usize, Chain)> = chains
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.links.is_empty())
            .map(|(i, chain)| {
                if (chain.src_w, chain.src_h) != (images[i].width, images[i].height) {
                    return Err(GpuError::Invalid(format!(
                        "image {i} is {}x{}, its chain was made for {}x{}",
                        images[i].width, images[i].height, chain.src_w, chain.src_h
                    )));
                }
                let rect = crops[i].rect;
                if !(crops[i].pad || rect.inside(chain.out_w, chain.out_h)) {
                    return Err(GpuError::Invalid(format!(
                        "image {i}: crop box {rect:?} is outside its chain's {}x{} output",
                        chain.out_w, chain.out_h
                    )));
                }
                let boxed = chain.cropped(rect).ok_or_else(|| {
                    GpuError::Invalid(format!(
                        "image {i}: its chain's {}x{} output has no crop box {rect:?}",
                        chain.out_w, chain.out_h
                    ))
                })?;
                Ok((i, boxed))
            })
            .collect::<Result<_, _>>()?;
        let jobs: Vec<(&DeviceImage, &Chain)> = boxed.iter().map(|(i, c)| (images[*i], c)).collect();
        let rendered = self.render_chains(&jobs)?;
        let mut rendered_of: Vec<Option<&DeviceImage>> = vec![None; images.len()];
        for ((i, _), img) in boxed.iter().zip(&rendered) {
            rendered_of[*i] = Some(img);
        }

        let mut jobs = Vec::with_capacity(images.len());
        for (i, (img, crop)) in images.iter().zip(crops).enumerate() {
            let rect = crop.rect;
            // A rendered box is all of the crop, its corner the origin; its
            // pixels past the chain's output are zeros already.
            let (src_img, origin, pad) = match rendered_of[i] {
                Some(b) => {
                    let corner = i32::try_from(rect.left).and_then(|x| Ok((x, i32::try_from(rect.top)?)));
                    let corner = corner
                        .map_err(|_| GpuError::Invalid(format!("image {i}: crop box {rect:?} is out of range")))?;
                    (b, corner, false)
                }
                None => (*img, (0, 0), crop.pad),
            };
            jobs.push((
                src_img,
                RrcParams {
                    flip: u32::from(crop.flip),
                    crop_x: rect.left as f32,
                    crop_y: rect.top as f32,
                    crop_w: rect.width as f32,
                    crop_h: rect.height as f32,
                    pad: u32::from(pad),
                    origin_x: origin.0,
                    origin_y: origin.1,
                    ..RrcParams::default()
                },
            ));
        }
        // The launch checks each source against its buffer, the boxes
        // against the sources, and the outputs against `dst`.
        self.kernels.rrc_flip(&self.stream, &jobs, dst, base, (out_w, out_h))?;
        Ok(())
    }

    /// An uninitialised `w`x`h` RGB image on this stream, for a kernel that
    /// writes all of it.
    pub(super) fn new_image(&self, w: u32, h: u32) -> Result<DeviceImage, GpuError> {
        DeviceImage::alloc(&self.stream, w, h).map_err(driver("allocation of an image"))
    }

    /// A copy of `img` on this stream, for a part that changes it while
    /// others read the original.
    pub(super) fn copy_image(&self, img: &DeviceImage) -> Result<DeviceImage, GpuError> {
        img.copy(&self.stream).map_err(driver("copying an image"))
    }

    /// Runs `steps` (each one [`gpu_runs`]) on one decoded image, a
    /// launch (or two) per step, as the CPU path's augmenter runs them: a
    /// nearest geometric step is a chain of one ([`Gpu::render_chains`]).
    /// [`Gpu::run_steps_batch`] runs a batch's steps, each run of nearest
    /// geometric steps as one chain.
    pub fn run_steps(&self, mut img: DeviceImage, steps: &[Step]) -> Result<DeviceImage, GpuError> {
        for step in steps {
            let dims = (img.width, img.height);
            let mut chain = Chain::new(img.width, img.height);
            if chain.push(step) {
                img = self
                    .render_chains(&[(&img, &chain)])?
                    .pop()
                    .ok_or_else(|| GpuError::Invalid("the chain made no image".into()))?;
                continue;
            }
            if let Some((rect, out, filter)) = resampled(step) {
                let mut chain = Chain::new(img.width, img.height);
                if !push_crop(&mut chain, rect, filter) {
                    return Err(GpuError::Invalid(format!(
                        "crop box {},{} {}x{} does not chain",
                        rect.left, rect.top, rect.width, rect.height
                    )));
                }
                img = self
                    .resample_round(&[Ok(img)], &[(0, chain, out, filter)])?
                    .pop()
                    .ok_or_else(|| GpuError::Invalid("the resize made no image".into()))?;
                continue;
            }
            if filter_warp(step).is_some() {
                img = self
                    .warp_round(&[Ok(img)], &[(0, step)])?
                    .pop()
                    .ok_or_else(|| GpuError::Invalid("the warp made no image".into()))?;
                continue;
            }
            if color_runs(step) {
                let mut slot = [Ok(img)];
                self.color_round(&mut slot, &[(0, step)])?;
                let [done] = slot;
                img = done?;
                continue;
            }
            if img.pitch != img.width * 3 {
                return Err(GpuError::Invalid(format!(
                    "image rows of {} bytes are not packed for {} pixels",
                    img.pitch, img.width
                )));
            }
            img = match *step {
                Step::CropResize {
                    crop,
                    out_w,
                    out_h,
                    filter: Interpolation::Bilinear,
                } => {
                    let crop = GpuCrop::new(crop, img.width, img.height, false).ok_or_else(|| {
                        GpuError::Invalid(format!(
                            "crop box {},{} {}x{} is out of range",
                            crop.left, crop.top, crop.width, crop.height
                        ))
                    })?;
                    let mut out = self.new_image(out_w, out_h)?;
                    self.resized_crop_flip_into(&[&img], &[crop], &[], (out_w, out_h), &mut out.buf)?;
                    out
                }
                Step::Blur {
                    kernel: (kx, ky),
                    sigma,
                } if kx == ky => {
                    let mut out = self.new_image(img.width, img.height)?;
                    let weights = stoker_image::augment::gaussian_kernel(kx, sigma);
                    self.kernels
                        .blur_u8_hwc(&self.stream, &img.buf, &mut out.buf, dims, &weights)?;
                    out
                }
                ref other => {
                    return Err(GpuError::Invalid(format!(
                        "step {} has no gpu kernel for this image (the cpu runs it)",
                        other.name()
                    )));
                }
            };
        }
        Ok(img)
    }

    /// Runs each image's `steps` (each one [`gpu_runs`]) over a batch, a
    /// round per segment: each image's next run of nearest geometric steps
    /// is one chain, and a bilinear crop-resize after it reads through it
    /// (with a horizontal flip after the crop in the same launch), and so
    /// does the crop of a resize with Pillow's other filters;
    /// the round's chains are one launch ([`Gpu::render_chains`]), its
    /// crop-resizes one per output size ([`Gpu::crop_round`]), its other
    /// resizes a launch per pass ([`Gpu::resample_round`]), its colour
    /// steps and filtered warps a launch per kind; any other step runs on
    /// its own ([`Gpu::run_steps`]). An image whose step fails gets its
    /// error; the others go on.
    pub fn run_steps_batch(&self, images: Vec<DeviceImage>, steps: &[&[Step]]) -> Vec<Result<DeviceImage, GpuError>> {
        let mut slots: Vec<Result<DeviceImage, GpuError>> = images.into_iter().map(Ok).collect();
        let mut rest: Vec<&[Step]> = steps.to_vec();
        rest.resize(slots.len(), &[]);
        loop {
            let mut chained: Vec<(usize, Chain)> = Vec::new();
            let mut cropped: Vec<(usize, Chain, GpuCrop, (u32, u32))> = Vec::new();
            let mut resized: Vec<Resize> = Vec::new();
            let mut singles: Vec<(usize, &Step)> = Vec::new();
            for (i, slot) in slots.iter().enumerate() {
                let Ok(img) = slot else { continue };
                let Some(first) = rest[i].first() else { continue };
                let (mut chain, taken) = Chain::leading(rest[i], img.width, img.height);
                // A resize with Pillow's other filters reads its crop
                // through the chain.
                if let Some((rect, out, filter)) = rest[i].get(taken).and_then(resampled)
                    && push_crop(&mut chain, rect, filter)
                {
                    resized.push((i, chain, out, filter));
                    rest[i] = &rest[i][taken + 1..];
                    continue;
                }
                // A horizontal flip after the crop joins its launch.
                let flip = matches!(rest[i].get(taken + 1), Some(Step::FlipHorizontal));
                let crop = match rest[i].get(taken) {
                    Some(&Step::CropResize {
                        crop,
                        out_w,
                        out_h,
                        filter: Interpolation::Bilinear,
                    }) => GpuCrop::new(crop, chain.out_w, chain.out_h, flip).map(|c| (c, (out_w, out_h))),
                    _ => None,
                };
                if let Some((crop, out)) = crop {
                    cropped.push((i, chain, crop, out));
                    rest[i] = &rest[i][taken + 1 + usize::from(flip)..];
                } else if taken > 0 {
                    chained.push((i, chain));
                    rest[i] = &rest[i][taken..];
                } else {
                    singles.push((i, first));
                    rest[i] = &rest[i][1..];
                }
            }
            if chained.is_empty() && cropped.is_empty() && resized.is_empty() && singles.is_empty() {
                return slots;
            }
            if !resized.is_empty() {
                let at: Vec<usize> = resized.iter().map(|r| r.0).collect();
                let done = self.resample_round(&slots, &resized);
                place(&mut slots, &at, done, "batched resizes");
            }
            if !chained.is_empty() {
                let jobs: Vec<(&DeviceImage, &Chain)> = chained
                    .iter()
                    .filter_map(|(i, chain)| slots[*i].as_ref().ok().map(|img| (img, chain)))
                    .collect();
                let rendered = self.render_chains(&jobs);
                drop(jobs);
                let at: Vec<usize> = chained.iter().map(|(i, _)| *i).collect();
                place(&mut slots, &at, rendered, "batched chains");
            }
            let mut sizes: Vec<(u32, u32)> = cropped.iter().map(|c| c.3).collect();
            sizes.sort_unstable();
            sizes.dedup();
            for size in sizes {
                let group: Vec<&(usize, Chain, GpuCrop, (u32, u32))> = cropped.iter().filter(|c| c.3 == size).collect();
                let at: Vec<usize> = group.iter().map(|c| c.0).collect();
                let done = self.crop_round(&slots, &group, size);
                place(&mut slots, &at, done, "batched crops");
            }
            let (colors, others): (Vec<Single<'_>>, Vec<Single<'_>>) =
                singles.into_iter().partition(|(_, step)| color_runs(step));
            let (warps, others): (Vec<Single<'_>>, Vec<Single<'_>>) =
                others.into_iter().partition(|(_, step)| filter_warp(step).is_some());
            if !warps.is_empty() {
                let at: Vec<usize> = warps.iter().map(|(i, _)| *i).collect();
                let done = self.warp_round(&slots, &warps);
                place(&mut slots, &at, done, "batched warps");
            }
            if !colors.is_empty()
                && let Err(e) = self.color_round(&mut slots, &colors)
            {
                for (i, _) in &colors {
                    if slots[*i].is_ok() {
                        slots[*i] = Err(GpuError::Invalid(format!("batched colour steps failed: {e}")));
                    }
                }
            }
            for (i, step) in others {
                let taken = std::mem::replace(&mut slots[i], Err(GpuError::Invalid("in flight".into())));
                slots[i] = taken.and_then(|img| self.run_steps(img, std::slice::from_ref(step)));
            }
        }
    }

    /// One crop-resize launch for `group` (slot, chain, crop, out size),
    /// all of output `size`, each reading through its chain; each result
    /// copied out of the launch's arena into an image of its own.
    fn crop_round(
        &self,
        slots: &[Result<DeviceImage, GpuError>],
        group: &[&(usize, Chain, GpuCrop, (u32, u32))],
        (w, h): (u32, u32),
    ) -> Result<Vec<DeviceImage>, GpuError> {
        let mut images = Vec::with_capacity(group.len());
        for (i, ..) in group {
            let img = slots[*i]
                .as_ref()
                .map_err(|_| GpuError::Invalid(format!("image {i} has no result to crop")))?;
            images.push(img);
        }
        let crops: Vec<GpuCrop> = group.iter().map(|c| c.2).collect();
        let chains: Vec<&Chain> = group.iter().map(|c| &c.1).collect();
        let bytes = w as usize * h as usize * 3;
        // The kernel writes every byte of each image's slot before the
        // copies below read it.
        let mut arena = stoker_cuda::alloc_bytes(&self.stream, (bytes * group.len()).max(1))
            .map_err(driver("allocation of a crop arena"))?;
        self.resized_crop_flip_into(&images, &crops, &chains, (w, h), &mut arena)?;
        let mut outs = Vec::with_capacity(group.len());
        for k in 0..group.len() {
            let mut out = self.new_image(w, h)?;
            self.stream
                .memcpy_dtod(&arena.slice(k * bytes..(k + 1) * bytes), &mut out.buf)
                .map_err(driver("copying a cropped image out of its arena"))?;
            outs.push(out);
        }
        Ok(outs)
    }
}

impl Gpu {
    /// One launch warping, for each `(slot, step)` (each a bilinear or
    /// bicubic affine warp), `slots[slot]` into an image of its own.
    fn warp_round(
        &self,
        slots: &[Result<DeviceImage, GpuError>],
        warps: &[(usize, &Step)],
    ) -> Result<Vec<DeviceImage>, GpuError> {
        let mut outs = Vec::with_capacity(warps.len());
        let mut jobs = Vec::with_capacity(warps.len());
        for (i, step) in warps {
            let Some((a, (out_w, out_h), filter, fill)) = filter_warp(step) else {
                return Err(GpuError::Invalid(format!(
                    "step {} is not a filtered warp",
                    step.name()
                )));
            };
            outs.push(self.new_image(out_w, out_h)?);
            let img = slots[*i]
                .as_ref()
                .map_err(|_| GpuError::Invalid(format!("image {i} has no result to warp")))?;
            jobs.push((
                img,
                WarpParams {
                    fill: pack_rgb(fill),
                    filter,
                    a,
                    ..WarpParams::default()
                },
            ));
        }
        // The launch checks that each source is packed and in its buffer.
        let mut targets: Vec<&mut DeviceImage> = outs.iter_mut().collect();
        self.kernels.warp(&self.stream, &jobs, &mut targets)?;
        Ok(outs)
    }
}

/// One image's step of a round: its slot, and the step.
type Single<'a> = (usize, &'a Step);

/// A filtered warp: its matrix, output size, filter (0 bilinear, 1
/// bicubic) and fill.
type FilterWarp = ([f64; 6], (u32, u32), u32, [u8; 3]);

/// A bilinear or bicubic affine warp as the kernel takes it; `None` for
/// any other step.
fn filter_warp(step: &Step) -> Option<FilterWarp> {
    match *step {
        Step::Affine {
            matrix,
            out_w,
            out_h,
            warp: warp @ (Warp::Bilinear | Warp::Bicubic),
            fill,
        } => Some((matrix, (out_w, out_h), u32::from(warp == Warp::Bicubic), fill)),
        _ => None,
    }
}

/// Puts a batched launch's images into their slots `at`, or its error
/// into each of them.
fn place(
    slots: &mut [Result<DeviceImage, GpuError>],
    at: &[usize],
    done: Result<Vec<DeviceImage>, GpuError>,
    what: &str,
) {
    match done {
        Ok(outs) => {
            for (&i, out) in at.iter().zip(outs) {
                slots[i] = Ok(out);
            }
        }
        Err(e) => {
            for &i in at {
                slots[i] = Err(GpuError::Invalid(format!("{what} failed: {e}")));
            }
        }
    }
}

/// A crop box and flip for [`Gpu::resized_crop_flip`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuCrop {
    pub rect: Rect,
    pub flip: bool,
    /// The box reaches past the image and is resized as if zero-padded
    /// (the CPU path's semantics for such boxes).
    pub pad: bool,
}

impl GpuCrop {
    /// The box `rect` of a `img_w` x `img_h` image; `None` for an empty or
    /// absurd box.
    pub fn new(rect: Rect, img_w: u32, img_h: u32, flip: bool) -> Option<Self> {
        let sane = |start: i64, len: u32| start.abs() + i64::from(len) <= 4 * 65536;
        let usable = rect.width > 0 && rect.height > 0 && sane(rect.left, rect.width) && sane(rect.top, rect.height);
        usable.then_some(Self {
            rect,
            flip,
            pad: !rect.inside(img_w, img_h),
        })
    }

    /// The crop and flip of `steps` when the fused kernel does all of
    /// them: one `CropResize` to `size`x`size` of a `width`x`height` image,
    /// then at most a horizontal flip (`train`, and any crop-only spec).
    /// Other step lists return `None`: [`Gpu::run_steps`] runs them.
    pub fn from_steps(steps: &[Step], width: u32, height: u32, size: u32) -> Option<Self> {
        let (first, rest) = steps.split_first()?;
        let Step::CropResize {
            crop,
            out_w,
            out_h,
            filter: Interpolation::Bilinear,
        } = *first
        else {
            return None;
        };
        if (out_w, out_h) != (size, size) {
            return None;
        }
        let flip = match rest {
            [] => false,
            [Step::FlipHorizontal] => true,
            _ => return None,
        };
        Self::new(crop, width, height, flip)
    }
}

/// The fused kernel's work for a whole step list: its leading nearest
/// geometric steps as a chain, then the crop (and flip) of
/// [`GpuCrop::from_steps`] on the chain's output; or, when the chain is
/// every step and makes `size` x `size`, the whole of its output.
pub fn fused(steps: &[Step], width: u32, height: u32, size: u32) -> Option<(Chain, GpuCrop)> {
    let (chain, taken) = Chain::leading(steps, width, height);
    let (w, h) = (chain.out_w, chain.out_h);
    let crop = match &steps[taken..] {
        [] if (w, h) == (size, size) && taken > 0 => GpuCrop::new(Rect::whole(w, h), w, h, false)?,
        rest => GpuCrop::from_steps(rest, w, h, size)?,
    };
    Some((chain, crop))
}

/// The one chain a mask of a `width` x `height` image follows on the
/// lanes: the image's `steps` that move pixels, with nearest sampling and
/// 0 fill ([`Step::for_mask`], as the CPU path runs them). `None` when one
/// of them does not chain (coordinates past Pillow's fixed-point range):
/// the CPU runs that sample.
pub fn mask_chain(steps: &[Step], width: u32, height: u32) -> Option<Chain> {
    let steps: Vec<Step> = steps.iter().filter_map(Step::for_mask).collect();
    let (chain, taken) = Chain::leading(&steps, width, height);
    (taken == steps.len()).then_some(chain)
}

/// Whether the GPU lanes run `step`: crops resized with any filter
/// (bilinear in the fused kernel; bicubic, lanczos, box and hamming as
/// Pillow resamples; nearest as a chain) or plainly cut, the nearest
/// geometric steps as chains (flips, nearest warps:
/// rotations, RandomAffine, the policies' shears and translations; pads of
/// every mode; nearest resizes), bilinear and bicubic warps, the colour
/// steps ([`color_runs`]: the
/// enhance blends, hue, lookup tables, channel permutations, equalize,
/// autocontrast, erasing), and square Gaussian blurs. A sample with any
/// other step (a non-square blur) goes to the CPU pool before it is queued.
pub fn gpu_runs(step: &Step) -> bool {
    match step {
        Step::CropResize { .. } => true,
        Step::FlipHorizontal | Step::FlipVertical | Step::Pad { .. } => true,
        Step::Affine { .. } => true,
        Step::Blur { kernel: (kx, ky), .. } => kx == ky,
        Step::Enhance { .. }
        | Step::Hue { .. }
        | Step::Lut { .. }
        | Step::Equalize
        | Step::Autocontrast
        | Step::Permute { .. }
        | Step::Erase { .. } => color_runs(step),
    }
}
