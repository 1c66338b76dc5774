//! The CPU executor for resolved transform steps.
//!
//! Steps come from [`stoker_core::resolve_steps`]; this module only carries
//! them out on an 8-bit RGB image, with the arithmetic of torchvision's
//! PIL path (Pillow's C code: `Image.transform`, `ImageEnhance`'s blends,
//! `ImageOps`, the HSV conversion), so that results match what users
//! compare against. Each submodule cites what it reproduces.
//!
//! [`Augmenter::run`] renders runs of nearest geometric steps as one
//! `chain` and reads a crop-resize's box through one;
//! [`Augmenter::run_stepwise`] runs the steps one by one, the reference
//! the chains are checked against. `geometry`'s bilinear resize uses
//! fast_image_resize (what the GPU kernel reproduces); `resample` ports
//! Pillow's other filters.

mod chain;
mod color;
mod error;
mod filter;
mod geometry;
mod resample;

use stoker_core::{Rect, Step};

use crate::decode::RgbImage;

pub use chain::{Chain, Link};
pub use error::AugmentError;
pub use filter::gaussian_kernel;
pub use geometry::fixed_matrix;
pub use resample::{Coeffs, ResamplePlan, resample_plan};

/// Reusable per-thread state: the bilinear resizer keeps its scratch
/// buffers.
#[derive(Debug, Default)]
pub struct Augmenter {
    resizer: fast_image_resize::Resizer,
}

impl Augmenter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `steps` on `img` and returns the result. Each run of nearest
    /// geometric steps is one [`Chain`] pass, with the crop-resize after it
    /// reading its box through the chain: the same bytes as running the
    /// steps one by one ([`Augmenter::run_stepwise`]), without the
    /// full-size intermediates.
    pub fn run(&mut self, mut img: RgbImage, steps: &[Step]) -> Result<RgbImage, AugmentError> {
        let mut rest = steps;
        while !rest.is_empty() {
            let (chain, taken) = Chain::leading(rest, img.width, img.height);
            match rest.get(taken) {
                Some(&Step::CropResize {
                    crop,
                    out_w,
                    out_h,
                    filter,
                }) if taken > 0 => {
                    let boxed = chain.render_box(&img, crop);
                    let whole = Rect::whole(crop.width, crop.height);
                    img = geometry::crop_resize(&mut self.resizer, &boxed, whole, out_w, out_h, filter)?;
                    rest = &rest[taken + 1..];
                }
                _ if taken >= 2 => {
                    img = chain.render(&img);
                    rest = &rest[taken..];
                }
                _ => {
                    img = self.step(img, &rest[0])?;
                    rest = &rest[1..];
                }
            }
        }
        Ok(img)
    }

    /// Runs `steps` one at a time, each on the whole of the previous
    /// step's output: what [`Augmenter::run`] must equal.
    pub fn run_stepwise(&mut self, mut img: RgbImage, steps: &[Step]) -> Result<RgbImage, AugmentError> {
        for step in steps {
            img = self.step(img, step)?;
        }
        Ok(img)
    }

    fn step(&mut self, img: RgbImage, step: &Step) -> Result<RgbImage, AugmentError> {
        Ok(match step {
            Step::CropResize {
                crop,
                out_w,
                out_h,
                filter,
            } => geometry::crop_resize(&mut self.resizer, &img, *crop, *out_w, *out_h, *filter)?,
            Step::Pad { ltrb, mode, fill } => geometry::pad(&img, *ltrb, *mode, *fill),
            Step::FlipHorizontal => geometry::flip_horizontal(img),
            Step::FlipVertical => geometry::flip_vertical(img),
            Step::Affine {
                matrix,
                out_w,
                out_h,
                warp,
                fill,
            } => geometry::affine(&img, matrix, *out_w, *out_h, *warp, *fill),
            Step::Enhance { what, factor } => color::enhance(img, *what, *factor),
            Step::Hue { factor } => color::hue(img, *factor),
            Step::Lut { table } => color::lut(img, table),
            Step::Equalize => color::equalize(img),
            Step::Autocontrast => color::autocontrast(img),
            Step::Permute { order } => color::permute(img, *order),
            Step::Blur { kernel, sigma } => filter::blur(&img, *kernel, *sigma),
            Step::Erase { rect, fill } => color::erase(img, *rect, fill),
        })
    }
}

#[cfg(test)]
pub(crate) fn ramp(w: u32, h: u32) -> RgbImage {
    let mut img = RgbImage::new(w, h);
    for (i, p) in img.pixels.chunks_exact_mut(3).enumerate() {
        let (x, y) = (i as u32 % w, i as u32 / w);
        p.copy_from_slice(&[(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8]);
    }
    img
}
