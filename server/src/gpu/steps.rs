//! The GPU's transform kernels over decoded images: the fused crop +
//! resize + flip over a batch ([`Gpu::resized_crop_flip`], driven by
//! [`GpuCrop`]) and any other step list a kernel per step
//! ([`Gpu::run_steps`]), for the steps [`gpu_runs`].

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use stoker_core::{Enhance, Interpolation, Rect, Step, Warp};
use stoker_kernels::{RrcParams, WarpParams};

use super::decode::DeviceImage;
use super::device::{Gpu, GpuError, driver};

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
        // SAFETY: u8 has no invalid values, and the kernel writes every
        // byte of each image's slot.
        let mut dst = unsafe { self.stream.alloc::<u8>((image_bytes * images.len()).max(1)) }
            .map_err(driver("allocation of the batch output"))?;
        self.resized_crop_flip_into(images, crops, (size, size), &mut dst)?;
        Ok(dst)
    }

    /// As [`Gpu::resized_crop_flip`], into the first `images.len()` slots
    /// of `out_w`x`out_h`x3 bytes of `dst`.
    pub fn resized_crop_flip_into(
        &self,
        images: &[&DeviceImage],
        crops: &[GpuCrop],
        (out_w, out_h): (u32, u32),
        dst: &mut CudaSlice<u8>,
    ) -> Result<(), GpuError> {
        if images.len() != crops.len() {
            return Err(GpuError::Invalid(format!(
                "{} images but {} crops",
                images.len(),
                crops.len()
            )));
        }
        let image_bytes = out_w as usize * out_h as usize * 3;
        let mut params = Vec::with_capacity(images.len());
        // The guards keep cudarc's view of each source until after the
        // launch is queued.
        let mut guards = Vec::with_capacity(images.len());
        for (i, (img, crop)) in images.iter().zip(crops).enumerate() {
            if u64::from(img.pitch) * u64::from(img.height) > img.buf.len() as u64 {
                return Err(GpuError::Invalid(format!(
                    "image {i}: buffer of {} bytes is under {} rows of {}",
                    img.buf.len(),
                    img.height,
                    img.pitch
                )));
            }
            let (src, guard) = img.buf.device_ptr(&self.stream);
            guards.push(guard);
            params.push(RrcParams {
                src,
                dst_offset: (i * image_bytes) as u64,
                src_w: img.width,
                src_h: img.height,
                src_pitch: img.pitch,
                flip: u32::from(crop.flip),
                crop_x: crop.rect.left as f32,
                crop_y: crop.rect.top as f32,
                crop_w: crop.rect.width as f32,
                crop_h: crop.rect.height as f32,
                pad: u32::from(crop.pad),
                reserved: 0,
            });
        }
        // SAFETY: each `src` is the live allocation of a `DeviceImage` on
        // this context, at least pitch x height bytes (checked above), with
        // pitch >= 3 x width (a `DeviceImage` invariant); the images are
        // borrowed for this call and the kernel runs on `self.stream`, the
        // stream every later use of the images and the output is ordered
        // on. `rrc_flip_u8_hwc` checks the crop boxes and the output's size.
        unsafe { self.kernels.rrc_flip_u8_hwc(&self.stream, &params, dst, out_w, out_h) }?;
        drop(guards);
        Ok(())
    }

    /// An uninitialised `w`x`h` RGB image on this stream, for a kernel that
    /// writes all of it.
    fn new_image(&self, w: u32, h: u32) -> Result<DeviceImage, GpuError> {
        let len = w as usize * h as usize * 3;
        // SAFETY: u8 has no invalid values; every caller hands the image to
        // a kernel that writes each of its bytes before anything reads it.
        let buf = unsafe { self.stream.alloc::<u8>(len.max(1)) }.map_err(driver("allocation of an image"))?;
        Ok(DeviceImage {
            width: w,
            height: h,
            pitch: w * 3,
            buf,
        })
    }

    /// Runs `steps` (each one [`gpu_runs`]) on one decoded image, a kernel
    /// (or two) per step, as
    /// the CPU path's augmenter runs them: any transform spec, at the cost
    /// of a launch per step and image. The fused [`Gpu::resized_crop_flip`]
    /// is the fast path for the common `train` steps.
    pub fn run_steps(&self, mut img: DeviceImage, steps: &[Step]) -> Result<DeviceImage, GpuError> {
        for step in steps {
            let dims = (img.width, img.height);
            if img.pitch != img.width * 3 {
                return Err(GpuError::Invalid(format!(
                    "image rows of {} bytes are not packed for {} pixels",
                    img.pitch, img.width
                )));
            }
            img = match *step {
                Step::CropResize { crop, out_w, out_h, .. } => {
                    let crop = GpuCrop::new(crop, img.width, img.height, false).ok_or_else(|| {
                        GpuError::Invalid(format!(
                            "crop box {},{} {}x{} is out of range",
                            crop.left, crop.top, crop.width, crop.height
                        ))
                    })?;
                    let mut out = self.new_image(out_w, out_h)?;
                    self.resized_crop_flip_into(&[&img], &[crop], (out_w, out_h), &mut out.buf)?;
                    out
                }
                // Flips and nearest warps: the batched warp kernel, for one.
                Step::FlipHorizontal
                | Step::FlipVertical
                | Step::Affine {
                    warp: Warp::Nearest, ..
                } => {
                    let Some(warp) = as_warp(step, img.width, img.height) else {
                        return Err(GpuError::Invalid(format!("step {} is not a warp", step.name())));
                    };
                    let mut slots = [Ok(img)];
                    self.warp_batch(&mut slots, &[(0, warp)])?
                        .pop()
                        .ok_or_else(|| GpuError::Invalid("the warp made no image".into()))?
                }
                Step::Enhance { what, factor } if what != Enhance::Sharpness => {
                    self.kernels
                        .enhance_u8_hwc(&self.stream, &mut img.buf, dims, what.index(), factor)?;
                    img
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
                        "step {} has no gpu kernel (the planner sends it to the cpu)",
                        other.name()
                    )));
                }
            };
        }
        Ok(img)
    }

    /// Runs each image's `steps` (each one [`gpu_runs`]) over a batch.
    /// Each image's leading geometric steps (flips and nearest warps, a
    /// flip being the exact warp `x -> w - 1 - x`) run in two arenas, a
    /// launch per step index for the whole batch ([`Gpu::warp_arena`]);
    /// the rest run a round per step index, geometric ones batched, others
    /// per image ([`Gpu::run_steps`]). An image whose step fails gets its
    /// error; the others go on.
    pub fn run_steps_batch(&self, images: Vec<DeviceImage>, steps: &[&[Step]]) -> Vec<Result<DeviceImage, GpuError>> {
        let lead: Vec<usize> = steps
            .iter()
            .map(|s| s.iter().take_while(|st| as_warp(st, 1, 1).is_some()).count())
            .collect();
        let n = images.len();
        let mut slots: Vec<Result<DeviceImage, GpuError>> = if lead.iter().any(|&k| k > 0) {
            match self.warp_arena(images, steps, &lead) {
                Ok(images) => images.into_iter().map(Ok).collect(),
                Err(e) => {
                    let reason = e.to_string();
                    return (0..n)
                        .map(|_| Err(GpuError::Invalid(format!("batched warps failed: {reason}"))))
                        .collect();
                }
            }
        } else {
            images.into_iter().map(Ok).collect()
        };
        let rest: Vec<&[Step]> = steps.iter().zip(&lead).map(|(s, &k)| &s[k..]).collect();
        let rounds = rest.iter().map(|s| s.len()).max().unwrap_or(0);
        for round in 0..rounds {
            let mut warps: Vec<(usize, NearestWarp)> = Vec::new();
            for (i, slot) in slots.iter_mut().enumerate() {
                let Some(step) = rest.get(i).and_then(|s| s.get(round)) else {
                    continue;
                };
                let Ok(img) = slot else { continue };
                match as_warp(step, img.width, img.height) {
                    Some(warp) => warps.push((i, warp)),
                    None => {
                        let taken = std::mem::replace(slot, Err(GpuError::Invalid("in flight".into())));
                        *slot = taken.and_then(|img| self.run_steps(img, std::slice::from_ref(step)));
                    }
                }
            }
            if warps.is_empty() {
                continue;
            }
            match self.warp_batch(&mut slots, &warps) {
                Ok(outs) => {
                    for ((i, ..), out) in warps.iter().zip(outs) {
                        slots[*i] = Ok(out);
                    }
                }
                Err(e) => {
                    for (i, ..) in &warps {
                        slots[*i] = Err(GpuError::Invalid(format!("batched warp failed: {e}")));
                    }
                }
            }
        }
        slots
    }

    /// Runs the first `lead[i]` steps of each image's `steps` (all
    /// warps) between two arenas, each image in its own slot of both: step
    /// `k` of every image is one launch, reading arena `(k - 1) % 2` (the
    /// decoded image for `k = 0`) and writing arena `k % 2`, with no
    /// allocation per image and step. The results are copied out into
    /// images of their own.
    fn warp_arena(
        &self,
        images: Vec<DeviceImage>,
        steps: &[&[Step]],
        lead: &[usize],
    ) -> Result<Vec<DeviceImage>, GpuError> {
        // Each image's sizes through its leading warps, and its slot.
        let mut plans = Vec::with_capacity(images.len());
        let mut offsets = Vec::with_capacity(images.len());
        let mut total = 0usize;
        for (i, img) in images.iter().enumerate() {
            if img.pitch != img.width * 3 {
                return Err(GpuError::Invalid(format!(
                    "image {i}: rows of {} bytes are not packed for {} pixels",
                    img.pitch, img.width
                )));
            }
            let (mut w, mut h) = (img.width, img.height);
            let mut plan = Vec::with_capacity(lead[i]);
            let mut most = 0usize;
            for step in &steps[i][..lead[i]] {
                let (matrix, (ow, oh), fill) =
                    as_warp(step, w, h).ok_or_else(|| GpuError::Invalid("not a warp".into()))?;
                plan.push(((w, h), matrix, (ow, oh), fill));
                most = most.max(ow as usize * oh as usize * 3);
                (w, h) = (ow, oh);
            }
            offsets.push(total);
            // 256-byte aligned slots.
            total += most.div_ceil(256) * 256;
            plans.push(plan);
        }
        // SAFETY: u8 has no invalid values; every byte a later step or the
        // copy-out reads was written by a warp before (each output covers
        // its whole out_w x out_h).
        let mut a0 = unsafe { self.stream.alloc::<u8>(total.max(1)) }.map_err(driver("allocation of a warp arena"))?;
        // SAFETY: as above.
        let mut a1 = unsafe { self.stream.alloc::<u8>(total.max(1)) }.map_err(driver("allocation of a warp arena"))?;
        let rounds = lead.iter().copied().max().unwrap_or(0);
        {
            let (p0, _g0) = a0.device_ptr_mut(&self.stream);
            let (p1, _g1) = a1.device_ptr_mut(&self.stream);
            let arena = |k: usize| if k.is_multiple_of(2) { p0 } else { p1 };
            let mut src_guards = Vec::with_capacity(images.len());
            let mut srcs = Vec::with_capacity(images.len());
            for img in &images {
                let (p, g) = img.buf.device_ptr(&self.stream);
                srcs.push(p);
                src_guards.push(g);
            }
            for k in 0..rounds {
                let params: Vec<WarpParams> = plans
                    .iter()
                    .enumerate()
                    .filter_map(|(i, plan)| {
                        let ((in_w, in_h), matrix, (out_w, out_h), fill) = *plan.get(k)?;
                        let src = if k == 0 {
                            srcs[i]
                        } else {
                            arena(k - 1) + offsets[i] as u64
                        };
                        Some(WarpParams {
                            src,
                            dst: arena(k) + offsets[i] as u64,
                            in_w,
                            in_h,
                            out_w,
                            out_h,
                            fill: u32::from(fill[0]) | u32::from(fill[1]) << 8 | u32::from(fill[2]) << 16,
                            reserved: 0,
                            a: stoker_image::augment::fixed_matrix(&matrix),
                        })
                    })
                    .collect();
                // SAFETY: each `src` is a decoded image of in_w x in_h
                // (packed, checked above) or this image's slot of the other
                // arena, written by the previous launch with that size; each
                // `dst` is this image's slot, at least out_w x out_h x 3
                // bytes (the slot holds the largest of its outputs) and no
                // other image's. Both arenas and the images live until after
                // the copies below, which are ordered after the launches on
                // `self.stream`.
                unsafe { self.kernels.affine_nearest_batch_u8_hwc(&self.stream, &params) }?;
            }
        }
        let mut out = Vec::with_capacity(images.len());
        for (i, img) in images.into_iter().enumerate() {
            let Some(&(_, _, (w, h), _)) = plans[i].last() else {
                out.push(img);
                continue;
            };
            let len = w as usize * h as usize * 3;
            let arena = if (lead[i] - 1).is_multiple_of(2) { &a0 } else { &a1 };
            let mut dst = self.new_image(w, h)?;
            self.stream
                .memcpy_dtod(&arena.slice(offsets[i]..offsets[i] + len), &mut dst.buf)
                .map_err(driver("copying a warped image out of its arena"))?;
            out.push(dst);
        }
        Ok(out)
    }

    /// One launch warping `slots[i]` for each `(i, matrix, out size, fill)`.
    fn warp_batch(
        &self,
        slots: &mut [Result<DeviceImage, GpuError>],
        warps: &[(usize, NearestWarp)],
    ) -> Result<Vec<DeviceImage>, GpuError> {
        let mut outs = Vec::with_capacity(warps.len());
        for (_, (_, (w, h), _)) in warps {
            outs.push(self.new_image(*w, *h)?);
        }
        let mut params = Vec::with_capacity(warps.len());
        // The guards keep cudarc's view of each image until the launch is
        // queued.
        let mut guards = Vec::with_capacity(warps.len() * 2);
        for ((i, (matrix, (out_w, out_h), fill)), out) in warps.iter().zip(&mut outs) {
            let Ok(img) = &slots[*i] else {
                return Err(GpuError::Invalid(format!("image {i} has no result to warp")));
            };
            if img.pitch != img.width * 3 {
                return Err(GpuError::Invalid(format!(
                    "image {i}: rows of {} bytes are not packed for {} pixels",
                    img.pitch, img.width
                )));
            }
            let (src, g1) = img.buf.device_ptr(&self.stream);
            let (dst, g2) = out.buf.device_ptr_mut(&self.stream);
            guards.push(g1);
            guards.push(g2);
            params.push(WarpParams {
                src,
                dst,
                in_w: img.width,
                in_h: img.height,
                out_w: *out_w,
                out_h: *out_h,
                fill: u32::from(fill[0]) | u32::from(fill[1]) << 8 | u32::from(fill[2]) << 16,
                reserved: 0,
                a: stoker_image::augment::fixed_matrix(matrix),
            });
        }
        // SAFETY: each `src` is a live, packed `DeviceImage` of in_w x in_h
        // (checked above) and each `dst` a fresh allocation of out_w x out_h
        // x 3 bytes made above for this image alone; all stay alive until
        // this function returns, after the launch is queued on
        // `self.stream`, the stream every later use is ordered on.
        unsafe { self.kernels.affine_nearest_batch_u8_hwc(&self.stream, &params) }?;
        drop(guards);
        Ok(outs)
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

/// A nearest warp: its matrix, output size and fill colour.
type NearestWarp = ([f64; 6], (u32, u32), [u8; 3]);

/// The nearest warp a geometric step is on a `w` x `h` image: its matrix,
/// output size and fill (a flip is the exact warp `x -> w - 1 - x`).
fn as_warp(step: &Step, w: u32, h: u32) -> Option<NearestWarp> {
    let (fw, fh) = (f64::from(w), f64::from(h));
    match *step {
        Step::FlipHorizontal => Some(([-1.0, 0.0, fw, 0.0, 1.0, 0.0], (w, h), [0; 3])),
        Step::FlipVertical => Some(([1.0, 0.0, 0.0, 0.0, -1.0, fh], (w, h), [0; 3])),
        Step::Affine {
            matrix,
            out_w,
            out_h,
            warp: Warp::Nearest,
            fill,
        } => Some((matrix, (out_w, out_h), fill)),
        _ => None,
    }
}

/// Whether the GPU lanes run `step`: crops resized bilinearly, flips,
/// nearest-neighbour affine warps (rotations, RandomAffine, the policies'
/// shears and translations), brightness / contrast / saturation (and so
/// greyscale), and square Gaussian blurs. A sample with any other step is
/// handed to the CPU pool before it is decoded.
pub fn gpu_runs(step: &Step) -> bool {
    match step {
        Step::CropResize { filter, .. } => *filter == Interpolation::Bilinear,
        Step::FlipHorizontal | Step::FlipVertical => true,
        Step::Affine { warp, .. } => *warp == Warp::Nearest,
        Step::Enhance { what, .. } => *what != Enhance::Sharpness,
        Step::Blur { kernel: (kx, ky), .. } => kx == ky,
        Step::Pad { .. }
        | Step::Hue { .. }
        | Step::Lut { .. }
        | Step::Equalize
        | Step::Autocontrast
        | Step::Permute { .. }
        | Step::Erase { .. } => false,
    }
}
