//! The colour steps of a batch on the GPU ([`Gpu::color_round`]): lookup
//! tables (solarize, posterize, invert), equalize, autocontrast, channel
//! permutations, hue, the four `ImageEnhance` blends and RandomErasing,
//! every image with its own parameters, each kind of work one launch of
//! `stoker-cuda`' `color.cu` for the whole batch. [`color_runs`] says
//! which steps the round runs.
//!
//! Every step here keeps the image's size, and every one runs in place:
//! each image keeps its `DeviceImage` (no allocation per image). The only
//! buffers are per wave (see [`Gpu::color_round`]) and shared by the
//! batch: the parameters, the tables (one upload), the histograms and
//! luma sums, and one arena holding the `SMOOTH` copies of the images
//! whose step is sharpness, which the blend reads while it rewrites the
//! image in place (Pillow's filter reads the neighbours, so the copy must
//! be whole before the blend starts: two launches, one arena).

use cudarc::driver::CudaSlice;
use stoker_core::{Enhance, EraseFill, Step};
use stoker_cuda::{ColorOp, ColorParams, DeviceImage, EraseParams, TABLE_BYTES};

use super::device::{Gpu, GpuError, driver};

/// Whether [`Gpu::color_round`] runs `step`: the four enhance blends
/// (brightness, contrast, saturation, sharpness), hue, lookup tables,
/// channel permutations, equalize, autocontrast and erasing. Each keeps
/// the image's size and runs in place.
pub(crate) fn color_runs(step: &Step) -> bool {
    match step {
        Step::Enhance { .. }
        | Step::Hue { .. }
        | Step::Lut { .. }
        | Step::Permute { .. }
        | Step::Equalize
        | Step::Autocontrast
        | Step::Erase { .. } => true,
        Step::CropResize { .. }
        | Step::Pad { .. }
        | Step::FlipHorizontal
        | Step::FlipVertical
        | Step::Affine { .. }
        | Step::Blur { .. } => false,
    }
}

/// What one image's step launches.
enum Plan<'a> {
    /// The per-pixel kernel with this op, argument and factor; `table` is
    /// a `Step::Lut`'s table (its slot is assigned later).
    Color {
        op: ColorOp,
        arg: u32,
        factor: f32,
        table: Option<&'a [u8; 256]>,
    },
    /// The erase kernel, its parameters but the image's address.
    Erase(EraseParams),
}

/// The launches of `step` on the `w` x `h` image `img`, or why it cannot
/// run.
fn plan<'a>(step: &'a Step, img: &DeviceImage) -> Result<Plan<'a>, String> {
    let (w, h) = (img.width, img.height);
    if img.pitch != w * 3 {
        return Err(format!("rows of {} bytes are not packed for {w} pixels", img.pitch));
    }
    if w == 0 || h == 0 || (img.buf.len() as u64) < u64::from(w) * u64::from(h) * 3 {
        return Err(format!(
            "buffer of {} bytes does not hold {w}x{h} pixels",
            img.buf.len()
        ));
    }
    let color = |op, arg, factor| Plan::Color {
        op,
        arg,
        factor,
        table: None,
    };
    Ok(match step {
        Step::Enhance { what, factor } => {
            if !factor.is_finite() {
                return Err(format!("factor {factor} is not finite"));
            }
            let op = match what {
                Enhance::Brightness => ColorOp::Brightness,
                Enhance::Contrast => ColorOp::Contrast,
                Enhance::Saturation => ColorOp::Saturation,
                Enhance::Sharpness => ColorOp::Sharpness,
            };
            color(op, 0, *factor)
        }
        // The CPU's shift, computed alike: int32(factor * 255) as uint8.
        Step::Hue { factor } => color(ColorOp::Hue, u32::from((f64::from(*factor) * 255.0) as i32 as u8), 0.0),
        Step::Lut { table } => Plan::Color {
            op: ColorOp::Lut,
            arg: 0,
            factor: 0.0,
            table: Some(table),
        },
        Step::Permute { order } => {
            let [a, b, c] = order.map(|c| u32::from(c.min(2)));
            color(ColorOp::Permute, a | b << 8 | c << 16, 0.0)
        }
        Step::Equalize => color(ColorOp::Equalize, 0, 0.0),
        Step::Autocontrast => color(ColorOp::Autocontrast, 0, 0.0),
        Step::Erase { rect, fill } => {
            if !rect.inside(w, h) {
                return Err(format!(
                    "box ({}, {}, {}x{}) is not inside the {w}x{h} image",
                    rect.left, rect.top, rect.width, rect.height
                ));
            }
            let mut params = EraseParams {
                img: 0,
                w,
                h,
                // Inside the image: both fit in u32.
                left: rect.left as u32,
                top: rect.top as u32,
                bw: rect.width,
                bh: rect.height,
                ..EraseParams::default()
            };
            match fill {
                EraseFill::Color([r, g, b]) => {
                    params.fill = u32::from(*r) | u32::from(*g) << 8 | u32::from(*b) << 16;
                }
                EraseFill::Noise { seed, scale, offset } => {
                    params.noise = 1;
                    params.seed = *seed;
                    params.scale = *scale;
                    params.offset = *offset;
                }
            }
            Plan::Erase(params)
        }
        other => return Err(format!("step {} is not a colour step", other.name())),
    })
}

/// 256-byte aligned size of `len` bytes, for slots of an arena.
fn aligned(len: usize) -> usize {
    len.div_ceil(256) * 256
}

impl Gpu {
    /// Runs, for each `(image index, step)` of `steps` (each one
    /// [`color_runs`]), that step on `slots[index]`, in place, as the CPU
    /// path's augmenter would: each kind of work is one launch for the
    /// whole batch (statistics, equalize / autocontrast tables, sharpness's
    /// smoothing, the per-pixel kernel, erasing: at most five launches).
    /// An index listed twice runs its steps in the order given, one wave
    /// of launches per repetition.
    ///
    /// An image whose slot is `Err` is skipped; one whose step cannot run
    /// (rows not packed, an erase box outside it, a factor that is not
    /// finite) gets its own `Err` and the others go on. An index out of
    /// range or a step that is not a colour step fails the whole call
    /// before anything runs. When a launch fails, every image of its wave
    /// gets an `Err` and the error is returned (earlier waves are done,
    /// later ones not run).
    pub fn color_round(
        &self,
        slots: &mut [Result<DeviceImage, GpuError>],
        steps: &[(usize, &Step)],
    ) -> Result<(), GpuError> {
        let mut waves: Vec<Vec<Option<&Step>>> = Vec::new();
        let mut seen = vec![0usize; slots.len()];
        for &(i, step) in steps {
            if i >= slots.len() {
                return Err(GpuError::Invalid(format!(
                    "colour step {} for image {i} of a batch of {}",
                    step.name(),
                    slots.len()
                )));
            }
            if !color_runs(step) {
                return Err(GpuError::Invalid(format!(
                    "step {} of image {i} is not a colour step",
                    step.name()
                )));
            }
            let k = seen[i];
            seen[i] += 1;
            if waves.len() <= k {
                waves.push(vec![None; slots.len()]);
            }
            waves[k][i] = Some(step);
        }
        for wave in &waves {
            let mut plans: Vec<Option<Plan<'_>>> = Vec::with_capacity(slots.len());
            for (i, (slot, step)) in slots.iter_mut().zip(wave).enumerate() {
                let (Some(step), Ok(img)) = (step, &*slot) else {
                    plans.push(None);
                    continue;
                };
                match plan(step, img) {
                    Ok(p) => plans.push(Some(p)),
                    Err(reason) => {
                        *slot = Err(GpuError::Invalid(format!("{} on image {i}: {reason}", step.name())));
                        plans.push(None);
                    }
                }
            }
            if let Err(e) = self.color_wave(slots, &plans) {
                let reason = e.to_string();
                for (i, slot) in slots.iter_mut().enumerate() {
                    if plans[i].is_some() {
                        *slot = Err(GpuError::Invalid(format!("colour steps of image {i} failed: {reason}")));
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// One wave of [`Gpu::color_round`]: `plans[i]` for the image of
    /// `slots[i]` (each image at most once).
    fn color_wave(
        &self,
        slots: &mut [Result<DeviceImage, GpuError>],
        plans: &[Option<Plan<'_>>],
    ) -> Result<(), GpuError> {
        // Slots of the shared buffers: a table (and histogram) per table
        // op, a sum per contrast, an arena slot per sharpness.
        let (mut tables, mut sums, mut arena_len) = (0u32, 0u32, 0usize);
        let mut slot_of = vec![0u32; plans.len()];
        let mut arena_at = vec![0usize; plans.len()];
        let mut host_tables = Vec::new();
        let mut any_stats = false;
        for (i, (plan, slot)) in plans.iter().zip(slots.iter()).enumerate() {
            let (Some(Plan::Color { op, table, .. }), Ok(img)) = (plan, slot) else {
                continue;
            };
            match op {
                ColorOp::Lut | ColorOp::Equalize | ColorOp::Autocontrast => {
                    slot_of[i] = tables;
                    tables += 1;
                    any_stats |= *op != ColorOp::Lut;
                    match table {
                        // One table for the three channels.
                        Some(t) => (0..3).for_each(|_| host_tables.extend_from_slice(&t[..])),
                        // Built on the device from the histogram.
                        None => host_tables.resize(host_tables.len() + TABLE_BYTES, 0),
                    }
                }
                ColorOp::Contrast => {
                    slot_of[i] = sums;
                    sums += 1;
                    any_stats = true;
                }
                ColorOp::Sharpness => {
                    arena_at[i] = arena_len;
                    arena_len += aligned(img.width as usize * img.height as usize * 3);
                }
                _ => {}
            }
        }
        if host_tables.is_empty() {
            host_tables.resize(TABLE_BYTES, 0);
        }
        let mut table_dev = self
            .stream
            .clone_htod(&host_tables)
            .map_err(driver("copying lookup tables"))?;
        let hist_len = if any_stats { host_tables.len() } else { TABLE_BYTES };
        let mut hist: CudaSlice<u32> = self
            .stream
            .alloc_zeros(hist_len)
            .map_err(driver("allocation of histograms"))?;
        let mut sum_dev: CudaSlice<u64> = self
            .stream
            .alloc_zeros(sums.max(1) as usize)
            .map_err(driver("allocation of luma sums"))?;
        // The smoothing kernel writes every byte of each sharpness image's
        // slot before the blend reads it.
        let mut arena = stoker_cuda::alloc_bytes(&self.stream, arena_len.max(1))
            .map_err(driver("allocation of the sharpness arena"))?;
        // Each op's parameters, its slot of the shared buffers in `arg`.
        let params = |i: usize, op: ColorOp, arg: u32, factor: f32, img: &DeviceImage| {
            let arg = match op {
                ColorOp::Lut | ColorOp::Equalize | ColorOp::Autocontrast | ColorOp::Contrast => slot_of[i],
                _ => arg,
            };
            ColorParams::new(op, 0, (img.width, img.height), arg, factor)
        };

        // What reads the images: the statistics, the tables built from
        // them, the smoothed copies.
        let (mut stats, mut luts, mut smooth) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (plan, slot)) in plans.iter().zip(slots.iter()).enumerate() {
            let (Some(Plan::Color { op, arg, factor, .. }), Ok(img)) = (plan, slot) else {
                continue;
            };
            let p = params(i, *op, *arg, *factor, img);
            match op {
                ColorOp::Equalize | ColorOp::Autocontrast => {
                    stats.push((img, p));
                    luts.push(p);
                }
                ColorOp::Contrast => stats.push((img, p)),
                ColorOp::Sharpness => smooth.push((img, p, arena_at[i])),
                _ => {}
            }
        }
        // Each launch takes the images borrowed and checks them (packed,
        // in their buffers), the slots and the arena's regions; the
        // per-pixel kernel reads the tables the uploads and the tables
        // kernel wrote before it on the stream.
        self.kernels
            .color_stats(&self.stream, &stats, &mut hist, &mut sum_dev)?;
        self.kernels
            .color_luts_batch(&self.stream, &luts, &hist, &mut table_dev)?;
        self.kernels.smooth(&self.stream, &smooth, &mut arena)?;
        drop((stats, smooth));

        // What changes the images, in place (each image is in a wave at
        // most once).
        let (mut color, mut erase) = (Vec::new(), Vec::new());
        for (i, (plan, slot)) in plans.iter().zip(slots.iter_mut()).enumerate() {
            let (Some(plan), Ok(img)) = (plan, slot) else {
                continue;
            };
            match *plan {
                Plan::Erase(p) => erase.push((img, p)),
                Plan::Color { op, arg, factor, .. } => {
                    let p = params(i, op, arg, factor, img);
                    let aux = (op == ColorOp::Sharpness).then_some(arena_at[i]);
                    color.push((img, p, aux));
                }
            }
        }
        self.kernels
            .color(&self.stream, &mut color, &arena, &table_dev, &sum_dev)?;
        self.kernels.erase(&self.stream, &mut erase)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use stoker_core::{Interpolation, Rect, SampleRng, TransformSpec, Warp, resolve_steps};

    use super::*;

    #[test]
    fn colour_steps_are_taken_and_geometric_ones_are_not() {
        let taken = [
            Step::Enhance {
                what: Enhance::Sharpness,
                factor: 2.0,
            },
            Step::Hue { factor: 0.1 },
            Step::Lut {
                table: Box::new([0; 256]),
            },
            Step::Permute { order: [2, 1, 0] },
            Step::Equalize,
            Step::Autocontrast,
            Step::Erase {
                rect: Rect::new(0, 0, 1, 1),
                fill: EraseFill::Color([1, 2, 3]),
            },
        ];
        assert!(taken.iter().all(color_runs));
        let left = [
            Step::FlipHorizontal,
            Step::Affine {
                matrix: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
                out_w: 4,
                out_h: 4,
                warp: Warp::Bilinear,
                fill: [0; 3],
            },
            Step::Blur {
                kernel: (3, 3),
                sigma: 1.0,
            },
            Step::CropResize {
                crop: Rect::new(0, 0, 4, 4),
                out_w: 2,
                out_h: 2,
                filter: Interpolation::Bicubic,
            },
        ];
        assert!(!left.iter().any(color_runs));
        // Every colour op of the registry resolves to steps taken here.
        let spec = TransformSpec::from_json(
            r#"{"ops": [{"op": "ColorJitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": [0.2, 0.2]},
                {"op": "RandomEqualize", "p": 1.0}, {"op": "RandomAutocontrast", "p": 1.0},
                {"op": "RandomInvert", "p": 1.0}, {"op": "RandomAdjustSharpness", "sharpness_factor": 2, "p": 1.0},
                {"op": "CenterCrop", "size": 32}]}"#,
        )
        .unwrap();
        let steps = resolve_steps(&spec, &SampleRng::for_sample(3, 1, "s", 0), 64, 48).unwrap();
        let colour: Vec<&Step> = steps.iter().filter(|s| !matches!(s, Step::CropResize { .. })).collect();
        assert!(colour.len() >= 5 && colour.iter().all(|s| color_runs(s)), "{steps:?}");
    }

    #[test]
    fn arena_slots_are_aligned() {
        assert_eq!(aligned(1), 256);
        assert_eq!(aligned(256), 256);
        assert_eq!(aligned(257), 512);
    }
}
