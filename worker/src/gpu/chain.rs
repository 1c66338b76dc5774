//! Chains of nearest geometric steps on the lanes: the CPU's
//! [`Chain`] (stoker-image) as the kernels' links ([`add_chain`]), and
//! [`Gpu::render_chains`], which renders a batch's chains in one launch,
//! and [`Gpu::render_masks_at`], which does the same for its masks (a byte
//! a pixel) into the batch's output.
//! The fused crop-resize renders its crop box through the same links
//! first ([`Gpu::resized_crop_flip_into`]).

use cudarc::driver::CudaSlice;
use stoker_cuda::{ChainParams, ChainSpan, Chains, DeviceImage, PlaneJob};
use stoker_image::augment::{Chain, Link};

use super::device::{Gpu, GpuError, driver};

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
        let mut launch = Vec::with_capacity(jobs.len());
        for (i, (img, chain)) in jobs.iter().enumerate() {
            if (img.width, img.height) != (chain.src_w, chain.src_h) {
                return Err(GpuError::Invalid(format!(
                    "image {i} is {}x{}, its chain was made for {}x{}",
                    img.width, img.height, chain.src_w, chain.src_h
                )));
            }
            let span = add_chain(&mut chains, chain);
            outs.push(self.new_image(chain.out_w, chain.out_h)?);
            launch.push((*img, span_params(span, 3)));
        }
        // The launch checks each image against its buffer and the links.
        let mut targets: Vec<&mut DeviceImage> = outs.iter_mut().collect();
        self.kernels
            .render_chains(&self.stream, &launch, &mut targets, &chains)?;
        Ok(outs)
    }

    /// Uploads each mask (`pixels`, a byte each, `w` x `h` rows) in one
    /// copy and renders it through its chain (made for its size) into
    /// `dst` from its byte `offset` on, all in one launch.
    pub(super) fn render_masks_at(&self, masks: &[MaskRender<'_>], dst: &mut CudaSlice<u8>) -> Result<(), GpuError> {
        if masks.is_empty() {
            return Ok(());
        }
        let mut chains = Chains::default();
        let mut host = Vec::new();
        let mut places = Vec::with_capacity(masks.len());
        for (i, m) in masks.iter().enumerate() {
            let (chain, (w, h)) = (m.chain, m.dims);
            if (w, h) != (chain.src_w, chain.src_h) || m.pixels.len() as u64 != u64::from(w) * u64::from(h) {
                return Err(GpuError::Invalid(format!(
                    "mask {i}: {} bytes for {w}x{h}, its chain made for {}x{}",
                    m.pixels.len(),
                    chain.src_w,
                    chain.src_h
                )));
            }
            places.push((host.len(), add_chain(&mut chains, chain)));
            host.extend_from_slice(m.pixels);
        }
        let src = self
            .stream
            .clone_htod(&host)
            .map_err(driver("copying masks to the device"))?;
        let launch: Vec<PlaneJob> = masks
            .iter()
            .zip(places)
            .map(|(m, (at, span))| PlaneJob {
                params: span_params(span, 1),
                src_at: at,
                dst_at: m.offset,
            })
            .collect();
        // The launch checks that each mask's source and output lie in their
        // buffers and that no two outputs share a byte.
        self.kernels.render_planes(&self.stream, &src, dst, &launch, &chains)?;
        Ok(())
    }
}

/// A chain's launch parameters: its span, with packed source rows of
/// `channels` bytes a pixel (the launch fills in the addresses).
fn span_params(span: ChainSpan, channels: u32) -> ChainParams {
    ChainParams {
        src_w: span.src.0,
        src_h: span.src.1,
        out_w: span.out.0,
        out_h: span.out.1,
        first: span.first,
        count: span.count,
        src_pitch: span.src.0 * channels,
        channels,
        ..ChainParams::default()
    }
}

/// One mask of [`Gpu::render_masks_at`].
pub(super) struct MaskRender<'a> {
    /// A byte a pixel, rows of `dims.0`.
    pub(super) pixels: &'a [u8],
    pub(super) dims: (u32, u32),
    pub(super) chain: &'a Chain,
    /// Where its output starts in the destination.
    pub(super) offset: usize,
}
