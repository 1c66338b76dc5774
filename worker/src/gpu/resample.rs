//! Resizes with Pillow's other filters (bicubic, lanczos, box, hamming:
//! torchvision's `Resize` and `RandomResizedCrop` on PIL images, always
//! antialiased) on the lanes, exactly as the CPU runs them: the crop as a
//! link of the image's chain, then the passes of `stoker-image`'s
//! [`resample_plan`] with its weights, a launch per pass for a round's
//! images ([`Gpu::resample_round`]).

use stoker_core::{Interpolation, Rect, Step};
use stoker_cuda::{DeviceImage, ResampleCoeffs, ResampleParams};
use stoker_image::augment::{Chain, resample_plan};

use super::device::{Gpu, GpuError};

/// A crop resized with one of Pillow's convolution filters: the crop, the
/// output size and the filter; `None` for any other step (a bilinear
/// crop-resize is the fused kernel's, a nearest one a chain's, a plain crop
/// a chain link).
pub(super) fn resampled(step: &Step) -> Option<(Rect, (u32, u32), Interpolation)> {
    match *step {
        Step::CropResize {
            crop,
            out_w,
            out_h,
            filter:
                filter @ (Interpolation::Bicubic | Interpolation::Lanczos | Interpolation::Box | Interpolation::Hamming),
        } if (crop.width, crop.height) != (out_w, out_h) => Some((crop, (out_w, out_h), filter)),
        _ => None,
    }
}

/// `chain` with the crop `rect` of its output appended (nothing for the
/// whole output); false when the crop does not chain.
pub(super) fn push_crop(chain: &mut Chain, rect: Rect, filter: Interpolation) -> bool {
    rect == Rect::whole(chain.out_w, chain.out_h)
        || chain.push(&Step::CropResize {
            crop: rect,
            out_w: rect.width,
            out_h: rect.height,
            filter,
        })
}

/// One resize of a round: the image's slot, the chain to read it through
/// (its crop included), the output size and the filter.
pub(super) type Resize = (usize, Chain, (u32, u32), Interpolation);

impl Gpu {
    /// For each resize of `jobs`, `slots[slot]` read through its chain and
    /// resampled to its size, each into an image of its own: the chains in
    /// one launch, then each pass (horizontal, vertical) in one launch.
    pub(super) fn resample_round(
        &self,
        slots: &[Result<DeviceImage, GpuError>],
        jobs: &[Resize],
    ) -> Result<Vec<DeviceImage>, GpuError> {
        let mut inputs = Vec::with_capacity(jobs.len());
        for (i, ..) in jobs {
            inputs.push(
                slots[*i]
                    .as_ref()
                    .map_err(|_| GpuError::Invalid(format!("image {i} has no result to resize")))?,
            );
        }
        // The crops (and any chain before them), in one launch.
        let chained: Vec<(&DeviceImage, &Chain)> = inputs
            .iter()
            .zip(jobs)
            .filter(|(_, (_, chain, ..))| !chain.links.is_empty())
            .map(|(img, (_, chain, ..))| (*img, chain))
            .collect();
        let mut rendered = self.render_chains(&chained)?.into_iter();
        drop(chained);
        let mut owned: Vec<Option<DeviceImage>> = Vec::with_capacity(jobs.len());
        for (_, chain, ..) in jobs {
            owned.push(if chain.links.is_empty() { None } else { rendered.next() });
        }
        let sources: Vec<&DeviceImage> = owned
            .iter()
            .zip(&inputs)
            .map(|(o, i)| o.as_ref().unwrap_or(i))
            .collect();
        let plans: Vec<_> = sources
            .iter()
            .zip(jobs)
            .map(|(src, (_, _, (w, h), filter))| resample_plan(src.width, src.height, *w, *h, *filter))
            .collect();

        // The horizontal passes: rows `rows` of each source to its width.
        let mut coeffs = ResampleCoeffs::default();
        let mut temps: Vec<Option<DeviceImage>> = Vec::with_capacity(jobs.len());
        let mut passes = Vec::new();
        for ((src, plan), (_, _, (w, _), _)) in sources.iter().zip(&plans).zip(jobs) {
            let Some(horiz) = &plan.horizontal else {
                temps.push(None);
                continue;
            };
            let rows = (plan.rows.1 - plan.rows.0) as u32;
            let at = coeffs.add(&horiz.bounds, &horiz.weights);
            passes.push((*src, *w, rows, 0, horiz.ksize, at, plan.rows.0));
            temps.push(Some(self.new_image(*w, rows)?));
        }
        let outs: Vec<&mut DeviceImage> = temps.iter_mut().flatten().collect();
        self.resample_pass(&passes, outs, &coeffs)?;

        // The vertical passes: each horizontal result (or the source) to
        // its height.
        let mut coeffs = ResampleCoeffs::default();
        let mut passes = Vec::new();
        let mut finals: Vec<Option<DeviceImage>> = Vec::with_capacity(jobs.len());
        for (((src, plan), temp), (_, _, (_, h), _)) in sources.iter().zip(&plans).zip(&temps).zip(jobs) {
            let Some(vert) = &plan.vertical else {
                finals.push(None);
                continue;
            };
            let (input, row0) = match temp {
                Some(t) => (t, plan.rows.0),
                None => (*src, 0),
            };
            let at = coeffs.add(&vert.bounds, &vert.weights);
            passes.push((input, input.width, *h, 1, vert.ksize, at, row0));
            finals.push(Some(self.new_image(input.width, *h)?));
        }
        let outs: Vec<&mut DeviceImage> = finals.iter_mut().flatten().collect();
        self.resample_pass(&passes, outs, &coeffs)?;
        drop(sources);

        let mut done = Vec::with_capacity(jobs.len());
        for (((out, temp), own), input) in finals.into_iter().zip(temps).zip(owned).zip(&inputs) {
            done.push(match (out, temp, own) {
                (Some(out), ..) | (None, Some(out), _) | (None, None, Some(out)) => out,
                // A resize to the input's own size: a copy.
                (None, None, None) => self.copy_image(input)?,
            });
        }
        Ok(done)
    }

    /// One launch of resampling passes: each `(source, out_w, out_h,
    /// vertical, ksize, coefficients, row0)` into its image of `outs`.
    fn resample_pass(
        &self,
        passes: &[Pass<'_>],
        mut outs: Vec<&mut DeviceImage>,
        coeffs: &ResampleCoeffs,
    ) -> Result<(), GpuError> {
        let jobs: Vec<(&DeviceImage, ResampleParams)> = passes
            .iter()
            .map(|&(src, out_w, out_h, vertical, ksize, at, row0)| {
                (
                    src,
                    ResampleParams {
                        out_w,
                        out_h,
                        vertical,
                        ksize: ksize as u32,
                        coeffs: at,
                        row0: row0 as u32,
                        ..ResampleParams::default()
                    },
                )
            })
            .collect();
        // The launch checks each source and output against its buffer, and
        // each pass's reads against its source and `coeffs`.
        self.kernels.resample(&self.stream, &jobs, &mut outs, coeffs)?;
        Ok(())
    }
}

/// One image's pass of [`Gpu::resample_pass`]: its source, output size,
/// axis (1 vertical), weights per output, where its coefficients start,
/// and its first source row.
type Pass<'a> = (&'a DeviceImage, u32, u32, u32, usize, u32, usize);
