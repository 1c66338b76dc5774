//! Chains of nearest geometric steps on the lanes: the CPU's
//! [`Chain`] (stoker-image) as the kernels' links ([`add_chain`]), and
//! [`Gpu::render_chains`], which renders a batch's chains in one launch,
//! and [`Gpu::render_masks_at`], which does the same for its masks (a byte
//! a pixel) into the batch's output.
//! The fused crop-resize renders its crop box through the same links
//! first ([`Gpu::resized_crop_flip_into`]).

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use stoker_image::augment::{Chain, Link};
use stoker_kernels::{ChainParams, ChainSpan, Chains};

use super::decode::DeviceImage;
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
            img.check_rows()
                .map_err(|e| GpuError::Invalid(format!("image {i}: {e}")))?;
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
                channels: 3,
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
        let mut writes = Vec::with_capacity(masks.len());
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
            let len = chain.out_w as usize * chain.out_h as usize;
            if m.offset.checked_add(len).is_none_or(|end| end > dst.len()) {
                return Err(GpuError::Invalid(format!(
                    "mask {i} writes past the output of {} bytes",
                    dst.len()
                )));
            }
            writes.push((m.offset, len));
            places.push((host.len(), add_chain(&mut chains, chain)));
            host.extend_from_slice(m.pixels);
        }
        writes.sort_unstable();
        if writes.windows(2).any(|p| p[0].0 + p[0].1 > p[1].0) {
            return Err(GpuError::Invalid("two masks write the same bytes of the output".into()));
        }
        let src = self
            .stream
            .clone_htod(&host)
            .map_err(driver("copying masks to the device"))?;
        let (src_base, g1) = src.device_ptr(&self.stream);
        let (dst_base, g2) = dst.device_ptr_mut(&self.stream);
        let launch: Vec<ChainParams> = masks
            .iter()
            .zip(places)
            .map(|(m, (at, span))| ChainParams {
                src: src_base + at as u64,
                dst: dst_base + m.offset as u64,
                src_w: span.src.0,
                src_h: span.src.1,
                out_w: span.out.0,
                out_h: span.out.1,
                first: span.first,
                count: span.count,
                src_pitch: span.src.0,
                channels: 1,
            })
            .collect();
        // SAFETY: each `src` is the start of its mask's w x h bytes (rows of
        // w) in `src`, the upload made above (its length checked against its
        // size); each `dst` the start of out_w x out_h bytes inside `dst`
        // (checked above) that no other mask writes (checked above); `src`
        // and `dst` stay alive until this function returns, after the launch
        // is queued on `self.stream`, the stream every later use is ordered on.
        unsafe { self.kernels.chain_batch_u8_hwc(&self.stream, &launch, &chains) }?;
        drop((g1, g2));
        Ok(())
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
