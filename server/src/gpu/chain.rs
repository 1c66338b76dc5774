//! Chains of nearest geometric steps on the lanes: the CPU's
//! [`Chain`] (stoker-image) as the kernels' links ([`add_chain`]), and
//! [`Gpu::render_chains`], which renders a batch's chains in one launch.
//! The fused crop-resize reads through the same links
//! ([`Gpu::resized_crop_flip_into`]).

use cudarc::driver::{DevicePtr, DevicePtrMut};
use stoker_image::augment::{Chain, Link};
use stoker_kernels::{ChainParams, ChainSpan, Chains};

use super::decode::DeviceImage;
use super::device::{Gpu, GpuError};

/// Appends `chain`'s links to `chains`; its span there.
pub(super) fn add_chain(chains: &mut Chains, chain: &Chain) -> ChainSpan {
    let first = chains.links.len() as u32;
    for link in &chain.links {
        match link {
            Link::Fixed { a, in_w, in_h, fill } => chains.fixed(*a, (*in_w, *in_h), *fill),
            Link::Table {
                cols,
                rows,
                in_w,
                in_h,
                fill,
            } => chains.table(cols, rows, (*in_w, *in_h), *fill),
        }
    }
    ChainSpan {
        first,
        count: chain.links.len() as u32,
        src: (chain.src_w, chain.src_h),
        out: (chain.out_w, chain.out_h),
    }
}

impl Gpu {
    /// Renders each image's chain (made for its size) in one launch, each
    /// into an image of its own.
    pub fn render_chains(&self, jobs: &[(&DeviceImage, &Chain)]) -> Result<Vec<DeviceImage>, GpuError> {
        let mut chains = Chains::default();
        let mut outs = Vec::with_capacity(jobs.len());
        let mut params = Vec::with_capacity(jobs.len());
        // The guards keep cudarc's view of each image until the launch is
        // queued.
        let mut guards = Vec::with_capacity(jobs.len() * 2);
        for (i, (img, chain)) in jobs.iter().enumerate() {
            if (img.width, img.height) != (chain.src_w, chain.src_h) {
                return Err(GpuError::Invalid(format!(
                    "image {i} is {}x{}, its chain was made for {}x{}",
                    img.width, img.height, chain.src_w, chain.src_h
                )));
            }
            if u64::from(img.pitch) * u64::from(img.height) > img.buf.len() as u64 {
                return Err(GpuError::Invalid(format!(
                    "image {i}: buffer of {} bytes is under {} rows of {}",
                    img.buf.len(),
                    img.height,
                    img.pitch
                )));
            }
            let span = add_chain(&mut chains, chain);
            outs.push(self.new_image(chain.out_w, chain.out_h)?);
            params.push((span, img.pitch));
        }
        let mut launch = Vec::with_capacity(jobs.len());
        for (((img, _), out), (span, pitch)) in jobs.iter().zip(&mut outs).zip(params) {
            let (src, g1) = img.buf.device_ptr(&self.stream);
            let (dst, g2) = out.buf.device_ptr_mut(&self.stream);
            guards.push(g1);
            guards.push(g2);
            launch.push(ChainParams {
                src,
                dst,
                src_w: span.src.0,
                src_h: span.src.1,
                out_w: span.out.0,
                out_h: span.out.1,
                first: span.first,
                count: span.count,
                src_pitch: pitch,
                reserved: 0,
            });
        }
        // SAFETY: each `src` is a live `DeviceImage` of src_w x src_h with
        // rows of `src_pitch` bytes (its buffer holds them: checked above),
        // each `dst` a fresh allocation of out_w x out_h x 3 bytes made above
        // for this image alone; all stay alive until this function returns,
        // after the launch is queued on `self.stream`, the stream every
        // later use is ordered on.
        unsafe { self.kernels.chain_batch_u8_hwc(&self.stream, &launch, &chains) }?;
        drop(guards);
        Ok(outs)
    }
}
