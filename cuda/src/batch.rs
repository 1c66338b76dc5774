//! The worker's batch launches over typed buffers, all safe functions.
//! Each takes the images it reads as `&DeviceImage` and those it writes as
//! `&mut DeviceImage` (or regions of one `&mut CudaSlice<u8>`, checked to
//! be inside it and apart), checks every image against its buffer and the
//! sizes its parameters give, and against the stream's context, fills in
//! the parameter blocks' device addresses itself, and only then calls the
//! `unsafe` wrapper of `worker.rs`, `chain.rs`, `resample.rs` or
//! `color.rs`, whose contract those checks meet. A caller never handles a
//! device address: the parameter blocks' address fields it passes are
//! overwritten.
//!
//! The borrows carry what the checks cannot: a `&DeviceImage` is alive and
//! unwritten, a `&mut` one (or region) is nobody else's, until the call
//! returns with the launch queued on `stream`. Every later use of the
//! buffers (and their release, by the stream-ordered pool) is ordered
//! after it on the same stream, or after an event recorded on it.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::error::launch_err;
use crate::{
    ChainParams, Chains, ColorParams, DeviceImage, EraseParams, KernelError, Kernels, ResampleCoeffs, ResampleParams,
    RrcParams, WarpParams, kernel,
};

/// One chain of [`Kernels::render_planes`]: its parameters (sizes, links,
/// pitch, channels), where its source starts in the source buffer, and
/// where its output starts in the destination.
#[derive(Clone, Copy, Debug)]
pub struct PlaneJob {
    pub params: ChainParams,
    pub src_at: usize,
    pub dst_at: usize,
}

/// That `buf` is of `stream`'s context, and of `stream` itself where
/// the context tracks no events ([`crate::order_by_streams`]): a kernel on
/// `stream` reads and writes it, after the work queued on it before.
pub(crate) fn same_context<T>(
    name: &'static str,
    what: &dyn std::fmt::Display,
    buf: &CudaSlice<T>,
    stream: &CudaStream,
) -> Result<(), KernelError> {
    if !Arc::ptr_eq(buf.context(), stream.context()) {
        return Err(launch_err(name, format!("{what} belongs to another cuda context")));
    }
    if !stream.context().is_event_tracking() && !std::ptr::eq(buf.stream().as_ref(), stream) {
        return Err(launch_err(
            name,
            format!("{what} was allocated on another stream, and the context orders buffers by their streams"),
        ));
    }
    Ok(())
}

/// [`DeviceImage::check_rows`], the context, and packed rows where
/// `packed`, for image `i`. Nothing is formatted unless a check fails.
fn check_image(
    name: &'static str,
    i: usize,
    what: &str,
    img: &DeviceImage,
    stream: &CudaStream,
    packed: bool,
) -> Result<(), KernelError> {
    img.check_rows()
        .map_err(|e| launch_err(name, format!("{what} {i}: {e}")))?;
    if packed && !img.is_packed() {
        return Err(launch_err(
            name,
            format!(
                "{what} {i}: rows of {} bytes are not packed for {} pixels",
                img.pitch, img.width
            ),
        ));
    }
    // The name is formatted only on an error: this runs for every image
    // of every launch.
    same_context(name, &format_args!("{what} {i}"), &img.buf, stream)
}

/// That output `i` is a packed `w`x`h` image.
fn check_out(
    name: &'static str,
    i: usize,
    out: &DeviceImage,
    (w, h): (u32, u32),
    stream: &CudaStream,
) -> Result<(), KernelError> {
    check_image(name, i, "output", out, stream, true)?;
    if (out.width, out.height) != (w, h) {
        return Err(launch_err(
            name,
            format!("output {i} is {}x{}, the launch writes {w}x{h}", out.width, out.height),
        ));
    }
    Ok(())
}

/// That a launch has as many outputs as `what` (its images or passes).
fn same_count(name: &'static str, what: &str, jobs: usize, outs: usize) -> Result<(), KernelError> {
    if jobs != outs {
        return Err(launch_err(name, format!("{jobs} {what} into {outs} outputs")));
    }
    Ok(())
}

/// That the `(start, len)` regions lie inside `len` bytes and, with
/// `apart`, that no two share a byte.
fn check_regions(
    name: &'static str,
    what: &str,
    regions: &mut [(usize, usize)],
    len: usize,
    apart: bool,
) -> Result<(), KernelError> {
    for &(start, n) in regions.iter() {
        if start.checked_add(n).is_none_or(|end| end > len) {
            return Err(launch_err(
                name,
                format!("{what} of {n} bytes at {start} is past the buffer of {len} bytes"),
            ));
        }
    }
    if apart {
        regions.sort_unstable();
        if regions.windows(2).any(|p| p[0].0 + p[0].1 > p[1].0) {
            return Err(launch_err(name, format!("two {what}s share bytes of the buffer")));
        }
    }
    Ok(())
}

/// Image `i`, which a launch reads, and output `i`, a packed image of
/// `dims` it writes: both checked, and their device addresses, with the
/// guards that keep cudarc's view of the two until the launch is queued.
fn read_write<'a>(
    name: &'static str,
    i: usize,
    (img, packed): (&'a DeviceImage, bool),
    out: &'a mut DeviceImage,
    dims: (u32, u32),
    stream: &'a CudaStream,
    guards: &mut Vec<SyncOnDrop<'a>>,
) -> Result<(u64, u64), KernelError> {
    check_image(name, i, "image", img, stream, packed)?;
    check_out(name, i, out, dims, stream)?;
    let (src, g1) = img.buf.device_ptr(stream);
    let (dst, g2) = out.buf.device_ptr_mut(stream);
    guards.extend([g1, g2]);
    Ok((src, dst))
}

/// Bytes of a `w`x`h` image of `channels` bytes a pixel.
fn image_bytes(w: u32, h: u32, channels: u32) -> usize {
    w as usize * h as usize * channels as usize
}

impl Kernels {
    /// Crops, resizes and optionally flips each `(image, params)` in one
    /// launch, image `i` into the `out_w`x`out_h`x3 bytes of `dst` from
    /// byte `base + i * out_w * out_h * 3` on. The source's size and
    /// pitch come from the image, the box and flip from `params`.
    pub fn rrc_flip(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &[(&DeviceImage, RrcParams)],
        dst: &mut CudaSlice<u8>,
        base: usize,
        (out_w, out_h): (u32, u32),
    ) -> Result<(), KernelError> {
        let name = kernel::RRC_FLIP_U8_HWC;
        same_context(name, &"the output", dst, stream)?;
        let bytes = image_bytes(out_w, out_h, 3);
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len());
        for (i, (img, p)) in jobs.iter().enumerate() {
            check_image(name, i, "image", img, stream, false)?;
            let at = i.checked_mul(bytes).and_then(|o| o.checked_add(base));
            let at = at.ok_or_else(|| launch_err(name, format!("image {i}'s output offset overflows")))?;
            let (src, guard) = img.buf.device_ptr(stream);
            guards.push(guard);
            params.push(RrcParams {
                src,
                dst_offset: at as u64,
                src_w: img.width,
                src_h: img.height,
                src_pitch: img.pitch,
                ..*p
            });
        }
        // SAFETY: each `src` is the buffer of a borrowed `DeviceImage` of
        // this context holding src_h rows of src_pitch bytes (checked above),
        // alive and unwritten until this returns, after the launch is queued
        // on `stream`; the wrapper checks the boxes and that each output
        // lies inside `dst`, which is borrowed mutably.
        unsafe { self.rrc_flip_u8_hwc(stream, &params, dst, out_w, out_h) }?;
        drop(guards);
        Ok(())
    }

    /// One bilinear or bicubic affine warp per `(image, params)`, in one
    /// launch, image `i` into `outs[i]` (packed, of the size it has).
    pub fn warp(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &[(&DeviceImage, WarpParams)],
        outs: &mut [&mut DeviceImage],
    ) -> Result<(), KernelError> {
        let name = kernel::AFFINE_FILTER_BATCH_U8_HWC;
        same_count(name, "images", jobs.len(), outs.len())?;
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len() * 2);
        for (i, ((img, p), out)) in jobs.iter().zip(outs.iter_mut()).enumerate() {
            let (out_w, out_h) = (out.width, out.height);
            let (src, dst) = read_write(name, i, (img, true), out, (out_w, out_h), stream, &mut guards)?;
            params.push(WarpParams {
                src,
                dst,
                in_w: img.width,
                in_h: img.height,
                out_w,
                out_h,
                ..*p
            });
        }
        // SAFETY: each `src` is a borrowed, packed `DeviceImage` of in_w x
        // in_h of this context, each `dst` an output of out_w x out_h x 3
        // bytes borrowed mutably (so no other image's), all checked above and
        // alive until this returns, after the launch is queued on `stream`.
        unsafe { self.affine_filter_batch_u8_hwc(stream, &params) }?;
        drop(guards);
        Ok(())
    }

    /// Renders each `(image, params)`'s chain (links in `chains`) in one
    /// launch, image `i` into `outs[i]`, a packed RGB image of the chain's
    /// output size. The source's size and pitch come from the image.
    pub fn render_chains(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &[(&DeviceImage, ChainParams)],
        outs: &mut [&mut DeviceImage],
        chains: &Chains,
    ) -> Result<(), KernelError> {
        let name = kernel::CHAIN_BATCH_U8_HWC;
        same_count(name, "images", jobs.len(), outs.len())?;
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len() * 2);
        for (i, ((img, p), out)) in jobs.iter().zip(outs.iter_mut()).enumerate() {
            let (src, dst) = read_write(name, i, (img, false), out, (p.out_w, p.out_h), stream, &mut guards)?;
            params.push(ChainParams {
                src,
                dst,
                src_w: img.width,
                src_h: img.height,
                src_pitch: img.pitch,
                channels: 3,
                ..*p
            });
        }
        // SAFETY: each `src` is a borrowed `DeviceImage` of this context
        // holding src_h rows of src_pitch bytes, each `dst` an output of
        // out_w x out_h x 3 bytes borrowed mutably, all checked above and
        // alive until this returns, after the launch is queued on `stream`;
        // the wrapper checks the links and sizes.
        unsafe { self.chain_batch_u8_hwc(stream, &params, chains) }?;
        drop(guards);
        Ok(())
    }

    /// Renders chains between regions of two buffers in one launch: job
    /// `i` reads its source (`src_h` rows of `src_pitch` bytes) from byte
    /// `src_at` of `src` and writes its `out_w`x`out_h` pixels of
    /// `channels` bytes from byte `dst_at` of `dst`. The outputs must not
    /// share a byte.
    pub fn render_planes(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        jobs: &[PlaneJob],
        chains: &Chains,
    ) -> Result<(), KernelError> {
        let name = kernel::CHAIN_BATCH_U8_HWC;
        if jobs.is_empty() {
            return Ok(());
        }
        same_context(name, &"the source buffer", src, stream)?;
        same_context(name, &"the output", dst, stream)?;
        let mut reads = Vec::with_capacity(jobs.len());
        let mut writes = Vec::with_capacity(jobs.len());
        for j in jobs {
            let p = &j.params;
            if u64::from(p.src_pitch) < u64::from(p.channels) * u64::from(p.src_w) {
                return Err(launch_err(
                    name,
                    format!("row pitch {} is under {} x width {}", p.src_pitch, p.channels, p.src_w),
                ));
            }
            reads.push((j.src_at, p.src_pitch as usize * p.src_h as usize));
            writes.push((j.dst_at, image_bytes(p.out_w, p.out_h, p.channels)));
        }
        check_regions(name, "source", &mut reads, src.len(), false)?;
        check_regions(name, "output", &mut writes, dst.len(), true)?;
        let (src_base, g1) = src.device_ptr(stream);
        let (dst_base, g2) = dst.device_ptr_mut(stream);
        let params: Vec<ChainParams> = jobs
            .iter()
            .map(|j| ChainParams {
                src: src_base + j.src_at as u64,
                dst: dst_base + j.dst_at as u64,
                ..j.params
            })
            .collect();
        // SAFETY: each source region lies inside `src` and each output
        // region inside `dst`, apart from every other output (checked
        // above); `src` is borrowed and `dst` borrowed mutably, both of this
        // context, until this returns, after the launch is queued on
        // `stream`; the wrapper checks the links, sizes and channels.
        unsafe { self.chain_batch_u8_hwc(stream, &params, chains) }?;
        drop((g1, g2));
        Ok(())
    }

    /// One resampling pass per `(image, params)`, in one launch, image `i`
    /// into `outs[i]` (packed, `out_w`x`out_h`). The source's pitch and
    /// size come from the image; the runs and weights from `coeffs`.
    pub fn resample(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &[(&DeviceImage, ResampleParams)],
        outs: &mut [&mut DeviceImage],
        coeffs: &ResampleCoeffs,
    ) -> Result<(), KernelError> {
        let name = kernel::RESAMPLE_BATCH_U8_HWC;
        same_count(name, "passes", jobs.len(), outs.len())?;
        let mut params = Vec::with_capacity(jobs.len());
        let mut sizes = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len() * 2);
        for (i, ((img, p), out)) in jobs.iter().zip(outs.iter_mut()).enumerate() {
            let (src, dst) = read_write(name, i, (img, false), out, (p.out_w, p.out_h), stream, &mut guards)?;
            params.push(ResampleParams {
                src,
                dst,
                src_pitch: img.pitch,
                ..*p
            });
            sizes.push((img.width, img.height));
        }
        // SAFETY: each `src` is a borrowed `DeviceImage` of this context
        // holding its rows of `src_pitch` bytes, each `dst` an output of
        // out_w x out_h x 3 bytes borrowed mutably, all checked above and
        // alive until this returns, after the launch is queued on `stream`;
        // the wrapper checks each pass's reads against its source's size
        // and `coeffs`.
        unsafe { self.resample_batch_u8_hwc(stream, &params, &sizes, coeffs) }?;
        drop(guards);
        Ok(())
    }

    /// [`Kernels::color_stats_batch_u8_hwc`] over borrowed, packed images:
    /// each image's size comes from the image.
    pub fn color_stats(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &[(&DeviceImage, ColorParams)],
        hist: &mut CudaSlice<u32>,
        sums: &mut CudaSlice<u64>,
    ) -> Result<(), KernelError> {
        let name = kernel::COLOR_STATS_BATCH_U8_HWC;
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len());
        for (i, (img, p)) in jobs.iter().enumerate() {
            check_image(name, i, "image", img, stream, true)?;
            let (ptr, guard) = img.buf.device_ptr(stream);
            guards.push(guard);
            params.push(ColorParams {
                img: ptr,
                aux: 0,
                w: img.width,
                h: img.height,
                ..*p
            });
        }
        // SAFETY: each `img` is a borrowed, packed `DeviceImage` of this
        // context of w x h x 3 bytes (checked above), alive and unwritten
        // until this returns, after the launch is queued on `stream`.
        unsafe { self.color_stats_batch_u8_hwc(stream, &params, hist, sums) }?;
        drop(guards);
        Ok(())
    }

    /// [`Kernels::smooth_batch_u8_hwc`]: each `(image, params, at)`'s
    /// `SMOOTH` copy into the image's bytes of `aux` from byte `at` on.
    pub fn smooth(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &[(&DeviceImage, ColorParams, usize)],
        aux: &mut CudaSlice<u8>,
    ) -> Result<(), KernelError> {
        let name = kernel::SMOOTH_BATCH_U8_HWC;
        if jobs.is_empty() {
            return Ok(());
        }
        same_context(name, &"the smoothing buffer", aux, stream)?;
        let mut regions: Vec<(usize, usize)> = jobs
            .iter()
            .map(|(img, _, at)| (*at, image_bytes(img.width, img.height, 3)))
            .collect();
        check_regions(name, "smoothed copy", &mut regions, aux.len(), true)?;
        let (aux_base, aux_guard) = aux.device_ptr_mut(stream);
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len());
        for (i, (img, p, at)) in jobs.iter().enumerate() {
            check_image(name, i, "image", img, stream, true)?;
            let (ptr, guard) = img.buf.device_ptr(stream);
            guards.push(guard);
            params.push(ColorParams {
                img: ptr,
                aux: aux_base + *at as u64,
                w: img.width,
                h: img.height,
                ..*p
            });
        }
        // SAFETY: each `img` is a borrowed, packed `DeviceImage` of this
        // context of w x h x 3 bytes, each `aux` a region of as many bytes
        // inside `aux` (borrowed mutably) apart from every other, all
        // checked above and alive until this returns, after the launch is
        // queued on `stream`.
        unsafe { self.smooth_batch_u8_hwc(stream, &params) }?;
        drop((guards, aux_guard));
        Ok(())
    }

    /// [`Kernels::color_batch_u8_hwc`] in place over images borrowed
    /// mutably; a sharpness image's `SMOOTH` copy is read from `aux` at
    /// its `Some(at)` ([`Kernels::smooth`] wrote it there).
    pub fn color(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &mut [(&mut DeviceImage, ColorParams, Option<usize>)],
        aux: &CudaSlice<u8>,
        tables: &CudaSlice<u8>,
        sums: &CudaSlice<u64>,
    ) -> Result<(), KernelError> {
        let name = kernel::COLOR_BATCH_U8_HWC;
        if jobs.is_empty() {
            return Ok(());
        }
        same_context(name, &"the smoothing buffer", aux, stream)?;
        let mut reads: Vec<(usize, usize)> = jobs
            .iter()
            .filter_map(|(img, _, at)| at.map(|at| (at, image_bytes(img.width, img.height, 3))))
            .collect();
        check_regions(name, "smoothed copy", &mut reads, aux.len(), false)?;
        let (aux_base, aux_guard) = aux.device_ptr(stream);
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len());
        for (i, (img, p, at)) in jobs.iter_mut().enumerate() {
            check_image(name, i, "image", img, stream, true)?;
            let (w, h) = (img.width, img.height);
            let (ptr, guard) = img.buf.device_ptr_mut(stream);
            guards.push(guard);
            params.push(ColorParams {
                img: ptr,
                aux: at.map_or(0, |at| aux_base + at as u64),
                w,
                h,
                ..*p
            });
        }
        // SAFETY: each `img` is a packed `DeviceImage` of this context of w x
        // h x 3 bytes borrowed mutably (so no other image's), each sharpness
        // `aux` a region of as many bytes inside `aux`, all checked above and
        // alive until this returns, after the launch is queued on `stream`;
        // the wrapper checks the ops, tables and sums.
        unsafe { self.color_batch_u8_hwc(stream, &params, tables, sums) }?;
        drop((guards, aux_guard));
        Ok(())
    }

    /// [`Kernels::erase_batch_u8_hwc`] in place over images borrowed
    /// mutably: each image's size comes from the image, its box from
    /// `params`.
    pub fn erase(
        &self,
        stream: &Arc<CudaStream>,
        jobs: &mut [(&mut DeviceImage, EraseParams)],
    ) -> Result<(), KernelError> {
        let name = kernel::ERASE_BATCH_U8_HWC;
        let mut params = Vec::with_capacity(jobs.len());
        let mut guards = Vec::with_capacity(jobs.len());
        for (i, (img, p)) in jobs.iter_mut().enumerate() {
            check_image(name, i, "image", img, stream, true)?;
            let (w, h) = (img.width, img.height);
            let (ptr, guard) = img.buf.device_ptr_mut(stream);
            guards.push(guard);
            params.push(EraseParams { img: ptr, w, h, ..*p });
        }
        // SAFETY: each `img` is a packed `DeviceImage` of this context of w x
        // h x 3 bytes borrowed mutably, checked above and alive until this
        // returns, after the launch is queued on `stream`; the wrapper checks
        // each box against its image.
        unsafe { self.erase_batch_u8_hwc(stream, &params) }?;
        drop(guards);
        Ok(())
    }
}
