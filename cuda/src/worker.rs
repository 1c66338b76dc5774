//! The worker's launch wrappers: [`Kernels`] holds the functions of
//! [`WORKER_MODULES`] loaded into one context and launches them (the fused
//! crop + resize + flip of a batch, the bilinear and bicubic warps of a
//! batch, and blur of one image; chains in `chain.rs`, colour steps in
//! `color.rs`);
//! [`RrcParams`] and [`WarpParams`] are the batch kernels' per-image
//! parameter blocks.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};

use crate::error::launch_err;
use crate::launch::{THREADS, batch_grid, batch_rows, check_image, per_pixel};
use crate::registry::{arch_of, function};
use crate::{COLOR, KernelError, RESIZE, STEPS, WORKER_MODULES, kernel, load_modules};

/// The worker's modules ([`WORKER_MODULES`]), loaded into one context.
#[derive(Clone, Debug)]
pub struct Kernels {
    // Each function holds its module, which stays loaded while it lives.
    rrc_flip: CudaFunction,
    pub(crate) chain_batch: CudaFunction,
    affine_filter_batch: CudaFunction,
    pub(crate) resample_batch: CudaFunction,
    blur_rows: CudaFunction,
    blur_cols: CudaFunction,
    /// `color.cu`'s functions (launched by the wrappers in `color.rs`).
    pub(crate) color: ColorFunctions,
    /// The architecture the modules were compiled for.
    pub arch: (i32, i32),
}

impl Kernels {
    /// Compiles (or takes from the cache) the worker's modules for the
    /// context's device and loads them.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let (major, minor) = arch_of(ctx)?;
        let modules = load_modules(ctx, WORKER_MODULES)?;
        Ok(Self {
            rrc_flip: function(&modules, &RESIZE, kernel::RRC_FLIP_U8_HWC)?,
            chain_batch: function(&modules, &RESIZE, kernel::CHAIN_BATCH_U8_HWC)?,
            affine_filter_batch: function(&modules, &STEPS, kernel::AFFINE_FILTER_BATCH_U8_HWC)?,
            resample_batch: function(&modules, &STEPS, kernel::RESAMPLE_BATCH_U8_HWC)?,
            blur_rows: function(&modules, &STEPS, kernel::BLUR_ROWS_U8_HWC)?,
            blur_cols: function(&modules, &STEPS, kernel::BLUR_COLS_U8_HWC)?,
            color: ColorFunctions::load(&modules)?,
            arch: (major, minor),
        })
    }

    /// One bilinear or bicubic affine warp per image of a batch, in one
    /// launch: image `i` reads `params[i].src` and writes `params[i].dst`.
    ///
    /// # Safety
    ///
    /// Each `src` must be a live device allocation of this context of at
    /// least `in_w * in_h * 3` bytes, and each `dst` one of at least
    /// `out_w * out_h * 3` bytes that no other image of the batch reads or
    /// writes, both alive and otherwise unused until the launch has
    /// finished on `stream`. The fields are checked ([`WarpParams::check`]);
    /// the addresses cannot be.
    pub(crate) unsafe fn affine_filter_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[WarpParams],
    ) -> Result<(), KernelError> {
        let name = kernel::AFFINE_FILTER_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let mut most = 0u32;
        for (i, p) in params.iter().enumerate() {
            p.check().map_err(|e| launch_err(name, format!("image {i}: {e}")))?;
            most = most.max(p.out_w * p.out_h);
        }
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        // Each block strides over its image: a few blocks per image are
        // plenty for images of a few hundred thousand pixels.
        let config = batch_grid(name, params.len(), most)?;
        let mut launch = stream.launch_builder(&self.affine_filter_batch);
        launch.arg(&params_dev);
        // SAFETY: the argument list matches the kernel's signature (one
        // params pointer, `batch` entries); every read is bounds-checked
        // against its image's in_w x in_h and every write is one of its
        // out_w x out_h pixels, within the allocations the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// Blurs the `w` x `h` image `src` into `dst` with the normalised
    /// weights `kernel` (odd length), reflecting at the borders.
    pub fn blur_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        (w, h): (u32, u32),
        kernel: &[f32],
    ) -> Result<(), KernelError> {
        let name = kernel::BLUR_ROWS_U8_HWC;
        check_image(name, "source", w, h, src.len(), 3)?;
        check_image(name, "destination", w, h, dst.len(), 3)?;
        let k = u32::try_from(kernel.len())
            .ok()
            .filter(|k| k % 2 == 1)
            .ok_or_else(|| launch_err(name, format!("blur kernel of {} weights is not odd", kernel.len())))?;
        let weights = stream.clone_htod(kernel).map_err(|e| launch_err(name, e))?;
        let mut tmp = stream
            .alloc_zeros::<f32>(w as usize * h as usize * 3)
            .map_err(|e| launch_err(name, e))?;
        let mut launch = stream.launch_builder(&self.blur_rows);
        launch.arg(src).arg(&mut tmp).arg(&w).arg(&h).arg(&weights).arg(&k);
        // SAFETY: matches the kernel's signature; reads are reflected into
        // the w x h source, writes are the w x h x 3 floats of `tmp`, and the
        // k weights are those of `weights`.
        unsafe { launch.launch(per_pixel(w, h)) }.map_err(|e| launch_err(name, e))?;
        let mut launch = stream.launch_builder(&self.blur_cols);
        launch.arg(&tmp).arg(dst).arg(&w).arg(&h).arg(&weights).arg(&k);
        // SAFETY: as the rows pass, from `tmp` into the w x h image `dst`.
        unsafe { launch.launch(per_pixel(w, h)) }.map_err(|e| launch_err(kernel::BLUR_COLS_U8_HWC, e))?;
        Ok(())
    }

    /// Crops, resizes and optionally flips `params.len()` images in one
    /// launch on `stream`. Image `i` is written, `out_w * out_h * 3` bytes
    /// of uint8 HWC, at `params[i].dst_offset` of `dst`.
    ///
    /// # Safety
    ///
    /// Every `params[i].src` must be the device address of an allocation
    /// in `stream`'s context of at least `src_pitch` bytes times `src_h`
    /// rows, that stays alive and unwritten until the launch has finished
    /// on `stream`. The boxes ([`RrcParams::check`]: inside the source, or
    /// padded) and the pitches are checked.
    pub(crate) unsafe fn rrc_flip_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[RrcParams],
        dst: &mut CudaSlice<u8>,
        out_w: u32,
        out_h: u32,
    ) -> Result<(), KernelError> {
        let fail = |reason: String| KernelError::Launch {
            function: kernel::RRC_FLIP_U8_HWC,
            reason,
        };
        if params.is_empty() {
            return Ok(());
        }
        let image_bytes = u64::from(out_w) * u64::from(out_h) * 3;
        if image_bytes == 0 || out_w.checked_mul(out_h).is_none_or(|p| p > u32::MAX / 3) {
            return Err(fail(format!("output size {out_w}x{out_h} is out of range")));
        }
        let batch = batch_rows(kernel::RRC_FLIP_U8_HWC, params.len())?;
        for (i, p) in params.iter().enumerate() {
            let end = p.dst_offset.checked_add(image_bytes);
            if end.is_none_or(|end| end > dst.len() as u64) {
                return Err(fail(format!(
                    "image {i} writes past the output buffer of {} bytes",
                    dst.len()
                )));
            }
            p.check().map_err(|e| fail(format!("image {i}: {e}")))?;
        }
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| fail(format!("copying parameters: {e}")))?;
        let config = LaunchConfig {
            grid_dim: ((out_w * out_h).div_ceil(THREADS), batch, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.rrc_flip);
        launch.arg(&params_dev).arg(dst).arg(&out_w).arg(&out_h);
        // SAFETY: the argument list matches the kernel's signature
        // (params, dst, two unsigned ints); every write is within `dst`
        // (checked above), and every pixel read within the source images
        // (the boxes checked above), as the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| fail(e.to_string()))?;
        Ok(())
    }
}

/// The functions of [`COLOR`], loaded; `color.rs` launches them.
#[derive(Clone, Debug)]
pub(crate) struct ColorFunctions {
    pub(crate) stats: CudaFunction,
    pub(crate) luts: CudaFunction,
    pub(crate) smooth: CudaFunction,
    pub(crate) color: CudaFunction,
    pub(crate) erase: CudaFunction,
}

impl ColorFunctions {
    fn load(modules: &HashMap<&'static str, Arc<CudaModule>>) -> Result<Self, KernelError> {
        Ok(Self {
            stats: function(modules, &COLOR, kernel::COLOR_STATS_BATCH_U8_HWC)?,
            luts: function(modules, &COLOR, kernel::COLOR_LUTS_BATCH)?,
            smooth: function(modules, &COLOR, kernel::SMOOTH_BATCH_U8_HWC)?,
            color: function(modules, &COLOR, kernel::COLOR_BATCH_U8_HWC)?,
            erase: function(modules, &COLOR, kernel::ERASE_BATCH_U8_HWC)?,
        })
    }
}

/// Per-image parameters of [`Kernels::affine_filter_batch_u8_hwc`]; the
/// layout of `StokerWarpParams` in `steps.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WarpParams {
    /// Device address of the source image (uint8 HWC, packed rows).
    pub src: u64,
    /// Device address of the output image (uint8 HWC, packed rows).
    pub dst: u64,
    pub in_w: u32,
    pub in_h: u32,
    pub out_w: u32,
    pub out_h: u32,
    /// The fill colour, R | G << 8 | B << 16.
    pub fill: u32,
    /// 0 bilinear, 1 bicubic.
    pub filter: u32,
    /// The matrix of PIL's `Image.transform(AFFINE)`: output (x, y) samples
    /// the input at it applied to (x + 0.5, y + 0.5).
    pub a: [f64; 6],
}

// SAFETY: `WarpParams` is `repr(C)`, made only of integers and doubles with
// no padding (88 bytes: the doubles start at offset 40), and matches the
// kernel's struct field for field.
unsafe impl DeviceRepr for WarpParams {}

impl WarpParams {
    /// Checks what the kernel relies on, apart from the addresses.
    pub fn check(&self) -> Result<(), String> {
        if self.src == 0 || self.dst == 0 {
            return Err("null image address".into());
        }
        if self.in_w == 0 || self.in_h == 0 || self.out_w == 0 || self.out_h == 0 {
            return Err(format!(
                "empty image: {}x{} to {}x{}",
                self.in_w, self.in_h, self.out_w, self.out_h
            ));
        }
        if self.out_w.checked_mul(self.out_h).is_none_or(|p| p > u32::MAX / 3) {
            return Err(format!("output size {}x{} is out of range", self.out_w, self.out_h));
        }
        if self.filter > 1 {
            return Err(format!("filter {} is not bilinear (0) or bicubic (1)", self.filter));
        }
        if self.a.iter().any(|v| !v.is_finite()) {
            return Err(format!("matrix {:?} is not finite", self.a));
        }
        Ok(())
    }
}

/// Per-image parameters of [`Kernels::rrc_flip_u8_hwc`]; the layout of
/// `StokerRrcParams` in `resize.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RrcParams {
    /// Device address of the source pixels (uint8 HWC): a decoded image,
    /// or a box of a chain's output that a chain launch rendered.
    pub src: u64,
    /// Byte offset of this image's output in the destination buffer.
    pub dst_offset: u64,
    pub src_w: u32,
    pub src_h: u32,
    /// Bytes per source row.
    pub src_pitch: u32,
    /// 1 mirrors the output horizontally, 0 does not.
    pub flip: u32,
    pub crop_x: f32,
    pub crop_y: f32,
    pub crop_w: f32,
    pub crop_h: f32,
    /// 1 when the box may reach past the source: its pixels outside the
    /// source count as zeros. Either way the box is integral and the filter
    /// window stays inside it (the CPU path crops, then resizes).
    pub pad: u32,
    /// Where the source's pixel (0, 0) lies in the crop's coordinates:
    /// (0, 0) for an image, the box's corner for a rendered box. The
    /// weights are computed in the crop's coordinates either way, so a
    /// rendered box gives the same bytes as the image it was cut from.
    pub origin_x: i32,
    pub origin_y: i32,
    pub reserved: u32,
}

// SAFETY: `RrcParams` is `repr(C)`, made only of integers and floats with no
// padding (64 bytes), and matches the kernel's struct field for field.
unsafe impl DeviceRepr for RrcParams {}

impl RrcParams {
    /// Checks what the kernel relies on, apart from the source address.
    pub fn check(&self) -> Result<(), String> {
        if self.src == 0 {
            return Err("null source address".into());
        }
        if self.src_w == 0 || self.src_h == 0 {
            return Err(format!("empty source image {}x{}", self.src_w, self.src_h));
        }
        if u64::from(self.src_pitch) < 3 * u64::from(self.src_w) {
            return Err(format!(
                "row pitch {} is under 3 x width {}",
                self.src_pitch, self.src_w
            ));
        }
        let fits = |start: f32, len: f32, size: u32, origin: i32| {
            let start = start - origin as f32;
            let integral =
                start.is_finite() && len.is_finite() && len > 0.0 && start.fract() == 0.0 && len.fract() == 0.0;
            if self.pad != 0 {
                // Any box not absurdly far out.
                integral && start.abs() + len <= 4.0 * 65536.0
            } else {
                integral && start >= 0.0 && start + len <= size as f32
            }
        };
        if !fits(self.crop_x, self.crop_w, self.src_w, self.origin_x)
            || !fits(self.crop_y, self.crop_h, self.src_h, self.origin_y)
        {
            return Err(format!(
                "crop box ({}, {}, {}x{}) is not integral and inside the {}x{} source at ({}, {})",
                self.crop_x,
                self.crop_y,
                self.crop_w,
                self.crop_h,
                self.src_w,
                self.src_h,
                self.origin_x,
                self.origin_y
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_cuda_struct() {
        assert_eq!(std::mem::size_of::<RrcParams>(), 64);
        assert_eq!(std::mem::align_of::<RrcParams>(), 8);
        let fields = [
            "unsigned long long src;",
            "unsigned long long dst_offset;",
            "unsigned int src_w;",
            "unsigned int src_h;",
            "unsigned int src_pitch;",
            "unsigned int flip;",
            "float crop_x;",
            "float crop_y;",
            "float crop_w;",
            "float crop_h;",
            "unsigned int pad;",
            "int origin_x;",
            "int origin_y;",
            "unsigned int reserved;",
        ];
        let mut at = 0;
        for f in fields {
            let pos = RESIZE.source[at..]
                .find(f)
                .unwrap_or_else(|| panic!("resize.cu: field {f} missing or out of order"));
            at += pos + f.len();
        }
    }

    #[test]
    fn params_check_refuses_boxes_outside_the_image() {
        let good = RrcParams {
            src: 0x1000,
            dst_offset: 0,
            src_w: 500,
            src_h: 375,
            src_pitch: 1500,
            flip: 1,
            crop_x: 10.0,
            crop_y: 20.0,
            crop_w: 300.0,
            crop_h: 200.0,
            pad: 0,
            origin_x: 0,
            origin_y: 0,
            reserved: 0,
        };
        assert!(good.check().is_ok());
        // A rendered box: the crop is all of it, wherever it lies.
        let boxed = RrcParams {
            src_w: 300,
            src_h: 200,
            src_pitch: 900,
            origin_x: 10,
            origin_y: 20,
            ..good
        };
        assert!(boxed.check().is_ok());
        assert!(
            RrcParams { origin_x: 11, ..boxed }.check().is_err(),
            "the box starts past the crop"
        );
        assert!(
            RrcParams { src_h: 199, ..boxed }.check().is_err(),
            "the box ends before the crop"
        );
        let padded = RrcParams {
            crop_x: -4.0,
            crop_w: 600.0,
            pad: 1,
            ..good
        };
        assert!(padded.check().is_ok());
        assert!(RrcParams { crop_x: -4.5, ..padded }.check().is_err());
        assert!(RrcParams { crop_x: 10.5, ..good }.check().is_err(), "a box is integral");
        assert!(RrcParams { crop_x: 250.0, ..good }.check().is_err());
        assert!(RrcParams { crop_w: 0.0, ..good }.check().is_err());
        assert!(RrcParams { src_pitch: 10, ..good }.check().is_err());
        assert!(RrcParams { src: 0, ..good }.check().is_err());
        assert!(
            RrcParams {
                crop_y: f32::NAN,
                ..good
            }
            .check()
            .is_err()
        );
    }
}
