//! The launch wrappers of `color.cu`: the colour steps of a batch, each
//! image with its own parameters, one launch per kind of work for the whole
//! batch. [`ColorParams`] drives the per-pixel kernel
//! ([`Kernels::color_batch_u8_hwc`]: lookup tables, channel permutations,
//! hue, the `ImageEnhance` blends), the statistics it needs first
//! ([`Kernels::color_stats_batch_u8_hwc`]: histograms, luma sums), the
//! tables of equalize and autocontrast built from the histograms
//! ([`Kernels::color_luts_batch`]) and the `SMOOTH` copy of sharpness
//! ([`Kernels::smooth_batch_u8_hwc`]); [`EraseParams`] drives
//! [`Kernels::erase_batch_u8_hwc`].

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, PushKernelArg};

use crate::error::launch_err;
use crate::launch::batch_grid;
use crate::{KernelError, Kernels, kernel};

/// Bytes of one image's lookup tables: 256 per channel.
pub const TABLE_BYTES: usize = 768;

/// What a [`ColorParams`] does to its image: the `STOKER_OP_*` codes of
/// `color.cu`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColorOp {
    /// Each channel through its table (`arg`: the table slot).
    Lut = 0,
    /// Output channel `c` is input channel `(arg >> 8c) & 0xff`.
    Permute = 1,
    /// Pillow's HSV round trip with the hue shifted by `arg` (0..=255).
    Hue = 2,
    /// Blend with black by `factor`.
    Brightness = 3,
    /// Blend with the mean luma of sum slot `arg` by `factor`.
    Contrast = 4,
    /// Blend with each pixel's luma by `factor`.
    Saturation = 5,
    /// Blend with the `SMOOTH` copy at `aux` by `factor`.
    Sharpness = 6,
    /// `ImageOps.equalize` (histogram and table slot `arg`).
    Equalize = 7,
    /// `ImageOps.autocontrast` (histogram and table slot `arg`).
    Autocontrast = 8,
}

impl ColorOp {
    const ALL: [ColorOp; 9] = [
        Self::Lut,
        Self::Permute,
        Self::Hue,
        Self::Brightness,
        Self::Contrast,
        Self::Saturation,
        Self::Sharpness,
        Self::Equalize,
        Self::Autocontrast,
    ];

    /// The op of a kernel code.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }

    /// Whether the op reads a table slot.
    fn uses_table(self) -> bool {
        matches!(self, Self::Lut | Self::Equalize | Self::Autocontrast)
    }
}

/// One image's colour step, for every kernel of `color.cu`; the layout of
/// `StokerColorParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ColorParams {
    /// Device address of the image (uint8 HWC, packed rows), changed in
    /// place (read only by the statistics and `SMOOTH` kernels).
    pub img: u64,
    /// [`ColorOp::Sharpness`]: device address of the image's `SMOOTH` copy
    /// (written by [`Kernels::smooth_batch_u8_hwc`], read by the blend);
    /// 0 otherwise.
    pub aux: u64,
    pub w: u32,
    pub h: u32,
    /// A [`ColorOp`] code.
    pub op: u32,
    /// The table or sum slot, the packed channel order or the hue shift
    /// (see [`ColorOp`]); 0 for the other ops.
    pub arg: u32,
    /// The blend factor of the enhance ops; 0 for the others.
    pub factor: f32,
    pub reserved: u32,
}

// SAFETY: `ColorParams` is `repr(C)`, made only of integers and a float with
// no padding (40 bytes: two u64s, then six 4-byte fields), and matches the
// kernel's struct field for field.
unsafe impl DeviceRepr for ColorParams {}

impl ColorParams {
    /// Parameters of `op` on the `w` x `h` image at `img`.
    pub fn new(op: ColorOp, img: u64, (w, h): (u32, u32), arg: u32, factor: f32) -> Self {
        Self {
            img,
            aux: 0,
            w,
            h,
            op: op as u32,
            arg,
            factor,
            reserved: 0,
        }
    }

    /// The op, once [`ColorParams::check`] passed.
    pub fn color_op(&self) -> Option<ColorOp> {
        ColorOp::from_code(self.op)
    }

    /// Checks every field the kernels rely on, apart from what the
    /// addresses point to (and the slots, which the wrappers check
    /// against their buffers).
    pub fn check(&self) -> Result<(), String> {
        if self.img == 0 {
            return Err("null image address".into());
        }
        self.check_fields()?;
        if self.color_op() == Some(ColorOp::Sharpness) {
            if self.aux == 0 || self.aux == self.img {
                return Err("sharpness needs a smoothed copy apart from the image".into());
            }
        } else if self.aux != 0 {
            return Err(format!("{:?} takes no second image", self.color_op()));
        }
        Ok(())
    }

    /// [`ColorParams::check`] without the addresses: for the tables
    /// kernel, which reads no image.
    fn check_fields(&self) -> Result<(), String> {
        if self.w == 0 || self.h == 0 || self.w.checked_mul(self.h).is_none_or(|p| p > u32::MAX / 3) {
            return Err(format!("image size {}x{} is out of range", self.w, self.h));
        }
        let op = ColorOp::from_code(self.op).ok_or_else(|| format!("colour op {} is unknown", self.op))?;
        if self.reserved != 0 {
            return Err(format!("reserved field is {}, not 0", self.reserved));
        }
        if !self.factor.is_finite() {
            return Err(format!("factor {} is not finite", self.factor));
        }
        match op {
            ColorOp::Permute => {
                let order = [self.arg & 0xff, (self.arg >> 8) & 0xff, (self.arg >> 16) & 0xff];
                if self.arg >> 24 != 0 || order.iter().any(|&c| c > 2) {
                    return Err(format!("channel order {:#08x} is not three channels of 0..3", self.arg));
                }
            }
            ColorOp::Hue if self.arg > 255 => return Err(format!("hue shift {} is over 255", self.arg)),
            _ => {}
        }
        Ok(())
    }
}

/// One image's RandomErasing for [`Kernels::erase_batch_u8_hwc`]; the
/// layout of `StokerEraseParams` in `color.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EraseParams {
    /// Device address of the image (uint8 HWC, packed rows), changed in
    /// place.
    pub img: u64,
    pub w: u32,
    pub h: u32,
    /// The box: its top-left corner and size, inside the image.
    pub left: u32,
    pub top: u32,
    pub bw: u32,
    pub bh: u32,
    /// 0 writes `fill`, 1 the noise of `seed` (`stoker_core::erase_noise`).
    pub noise: u32,
    /// The colour, R | G << 8 | B << 16.
    pub fill: u32,
    pub seed: u64,
    /// The noise `n` is written as `round(n * scale[c] + offset[c])`,
    /// clipped to 0..=255.
    pub scale: [f32; 3],
    pub offset: [f32; 3],
}

// SAFETY: `EraseParams` is `repr(C)`, made only of integers and floats with
// no padding (72 bytes: a u64, eight u32s, a u64 at offset 40, six f32s),
// and matches the kernel's struct field for field.
unsafe impl DeviceRepr for EraseParams {}

impl EraseParams {
    /// Checks every field the kernel relies on, apart from the address.
    pub fn check(&self) -> Result<(), String> {
        if self.img == 0 {
            return Err("null image address".into());
        }
        if self.w == 0 || self.h == 0 || self.w.checked_mul(self.h).is_none_or(|p| p > u32::MAX / 3) {
            return Err(format!("image size {}x{} is out of range", self.w, self.h));
        }
        let right = u64::from(self.left) + u64::from(self.bw);
        let bottom = u64::from(self.top) + u64::from(self.bh);
        if right > u64::from(self.w) || bottom > u64::from(self.h) {
            return Err(format!(
                "box ({}, {}, {}x{}) is not inside the {}x{} image",
                self.left, self.top, self.bw, self.bh, self.w, self.h
            ));
        }
        if self.noise > 1 {
            return Err(format!("fill kind {} is neither colour (0) nor noise (1)", self.noise));
        }
        if self.fill > 0xff_ffff {
            return Err(format!("fill colour {:#x} is over 24 bits", self.fill));
        }
        if self.scale.iter().chain(&self.offset).any(|v| !v.is_finite()) {
            return Err(format!(
                "noise scale {:?} or offset {:?} is not finite",
                self.scale, self.offset
            ));
        }
        Ok(())
    }
}

/// Checks each image's parameters (apart from the addresses where not
/// `addresses`: a launch that reads no image) and that its op is one of
/// `ops`; returns the most pixels of an image.
fn check_all(name: &'static str, params: &[ColorParams], ops: &[ColorOp], addresses: bool) -> Result<u32, KernelError> {
    let mut most = 0;
    for (i, p) in params.iter().enumerate() {
        let checked = if addresses { p.check() } else { p.check_fields() };
        checked.map_err(|e| launch_err(name, format!("image {i}: {e}")))?;
        if !p.color_op().is_some_and(|op| ops.contains(&op)) {
            return Err(launch_err(
                name,
                format!("image {i}: colour op {} is not one of {ops:?}", p.op),
            ));
        }
        most = u32::max(most, p.w * p.h);
    }
    Ok(most)
}

/// Checks that `arg` is a slot under `slots` and, where `seen` is given,
/// that no other image of the launch has it.
fn check_slot(
    name: &'static str,
    i: usize,
    what: &str,
    arg: u32,
    slots: usize,
    seen: Option<&mut Vec<bool>>,
) -> Result<(), KernelError> {
    let at = arg as usize;
    if at >= slots {
        return Err(launch_err(
            name,
            format!("image {i}: {what} slot {arg} is past the {slots} slots of its buffer"),
        ));
    }
    if let Some(seen) = seen {
        if seen[at] {
            return Err(launch_err(
                name,
                format!("image {i}: {what} slot {arg} is another image's"),
            ));
        }
        seen[at] = true;
    }
    Ok(())
}

impl Kernels {
    /// The statistics the per-pixel kernel needs, for a batch in one
    /// launch: [`ColorOp::Equalize`] and [`ColorOp::Autocontrast`] count
    /// each channel's histogram into `hist[arg * 768..][..768]`,
    /// [`ColorOp::Contrast`] sums the luma into `sums[arg]`. Both buffers
    /// are zeroed first.
    ///
    /// # Safety
    ///
    /// Each `img` must be a live device allocation of this context of at
    /// least `w * h * 3` bytes, alive and unwritten until the launch has
    /// finished on `stream`. The fields and slots are checked; the
    /// addresses cannot be.
    pub(crate) unsafe fn color_stats_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ColorParams],
        hist: &mut CudaSlice<u32>,
        sums: &mut CudaSlice<u64>,
    ) -> Result<(), KernelError> {
        let name = kernel::COLOR_STATS_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let most = check_all(
            name,
            params,
            &[ColorOp::Contrast, ColorOp::Equalize, ColorOp::Autocontrast],
            true,
        )?;
        let (mut hist_seen, mut sums_seen) = (vec![false; hist.len() / TABLE_BYTES], vec![false; sums.len()]);
        for (i, p) in params.iter().enumerate() {
            if p.op == ColorOp::Contrast as u32 {
                check_slot(name, i, "sum", p.arg, sums.len(), Some(&mut sums_seen))?;
            } else {
                check_slot(name, i, "histogram", p.arg, hist_seen.len(), Some(&mut hist_seen))?;
            }
        }
        let config = batch_grid(name, params.len(), most)?;
        stream.memset_zeros(hist).map_err(|e| launch_err(name, e))?;
        stream.memset_zeros(sums).map_err(|e| launch_err(name, e))?;
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let mut launch = stream.launch_builder(&self.color.stats);
        launch.arg(&params_dev).arg(hist).arg(sums);
        // SAFETY: the arguments match the kernel's signature (params, hist,
        // sums); each image is read within its w x h x 3 bytes (the caller's
        // promise) and each write is an atomic add into its own slot of
        // `hist` (768 counts) or `sums` (one u64), checked above.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// Builds the three lookup tables of each [`ColorOp::Equalize`] or
    /// [`ColorOp::Autocontrast`] image (its address not read: it may be 0)
    /// from its histogram (slot `arg` of
    /// `hist`, counted by [`Kernels::color_stats_batch_u8_hwc`]) into slot
    /// `arg` of `tables`, in one launch. The images are not touched.
    pub fn color_luts_batch(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ColorParams],
        hist: &CudaSlice<u32>,
        tables: &mut CudaSlice<u8>,
    ) -> Result<(), KernelError> {
        let name = kernel::COLOR_LUTS_BATCH;
        if params.is_empty() {
            return Ok(());
        }
        check_all(name, params, &[ColorOp::Equalize, ColorOp::Autocontrast], false)?;
        let slots = (hist.len() / TABLE_BYTES).min(tables.len() / TABLE_BYTES);
        let mut seen = vec![false; slots];
        for (i, p) in params.iter().enumerate() {
            check_slot(name, i, "table", p.arg, slots, Some(&mut seen))?;
        }
        let mut config = batch_grid(name, params.len(), 1)?;
        config.grid_dim.0 = 1;
        config.block_dim.0 = 32;
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let mut launch = stream.launch_builder(&self.color.luts);
        launch.arg(&params_dev).arg(hist).arg(tables);
        // SAFETY: the arguments match the kernel's signature (params, hist,
        // tables); image i reads the 768 counts of its slot of `hist` and
        // writes the 768 bytes of the same slot of `tables`, both checked
        // above to lie inside their buffers and to be no other image's.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// Writes Pillow's `SMOOTH` filter of each [`ColorOp::Sharpness`]
    /// image `img` into its `aux`, in one launch: the degenerate images of
    /// the sharpness blend.
    ///
    /// # Safety
    ///
    /// Each `img` must be a live device allocation of this context of at
    /// least `w * h * 3` bytes, unwritten until the launch has finished on
    /// `stream`, and each `aux` one of as many bytes that nothing else
    /// reads or writes until then (no other image's `img` or `aux`). The
    /// fields are checked; the addresses cannot be.
    pub(crate) unsafe fn smooth_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ColorParams],
    ) -> Result<(), KernelError> {
        let name = kernel::SMOOTH_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let most = check_all(name, params, &[ColorOp::Sharpness], true)?;
        let config = batch_grid(name, params.len(), most)?;
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let mut launch = stream.launch_builder(&self.color.smooth);
        launch.arg(&params_dev);
        // SAFETY: the argument list matches the kernel's signature (one
        // params pointer); each image reads its w x h x 3 bytes of `img`
        // (neighbours only for interior pixels) and writes the same pixels
        // of `aux`, both as large as the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// The per-pixel colour steps of a batch, in place, in one launch:
    /// each image's [`ColorOp`] with its parameters. Table ops read slot
    /// `arg` of `tables` (768 bytes: 256 per channel), contrast the luma
    /// sum `sums[arg]` ([`Kernels::color_stats_batch_u8_hwc`]), sharpness
    /// its `SMOOTH` copy at `aux` ([`Kernels::smooth_batch_u8_hwc`]).
    ///
    /// # Safety
    ///
    /// Each `img` must be a live device allocation of this context of at
    /// least `w * h * 3` bytes that no other image of the batch reads or
    /// writes, and each sharpness `aux` one of as many bytes, all alive
    /// and otherwise unused until the launch has finished on `stream`. The
    /// fields and slots are checked; the addresses cannot be.
    pub(crate) unsafe fn color_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[ColorParams],
        tables: &CudaSlice<u8>,
        sums: &CudaSlice<u64>,
    ) -> Result<(), KernelError> {
        let name = kernel::COLOR_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let most = check_all(name, params, &ColorOp::ALL, true)?;
        for (i, p) in params.iter().enumerate() {
            match p.color_op() {
                Some(op) if op.uses_table() => {
                    check_slot(name, i, "table", p.arg, tables.len() / TABLE_BYTES, None)?;
                }
                Some(ColorOp::Contrast) => check_slot(name, i, "sum", p.arg, sums.len(), None)?,
                _ => {}
            }
        }
        let config = batch_grid(name, params.len(), most)?;
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let mut launch = stream.launch_builder(&self.color.color);
        launch.arg(&params_dev).arg(tables).arg(sums);
        // SAFETY: the arguments match the kernel's signature (params,
        // tables, sums); each image reads and writes its own w x h x 3 bytes
        // (and reads as many of `aux` for sharpness), as the caller
        // promises; table and sum reads are in the slots checked above.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// RandomErasing of a batch, in place, in one launch: each image's box
    /// overwritten with its colour or its noise.
    ///
    /// # Safety
    ///
    /// Each `img` must be a live device allocation of this context of at
    /// least `w * h * 3` bytes that no other image of the batch reads or
    /// writes, alive and otherwise unused until the launch has finished on
    /// `stream`. The fields are checked ([`EraseParams::check`]: the box
    /// inside the image); the addresses cannot be.
    pub(crate) unsafe fn erase_batch_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        params: &[EraseParams],
    ) -> Result<(), KernelError> {
        let name = kernel::ERASE_BATCH_U8_HWC;
        if params.is_empty() {
            return Ok(());
        }
        let mut most = 0;
        for (i, p) in params.iter().enumerate() {
            p.check().map_err(|e| launch_err(name, format!("image {i}: {e}")))?;
            most = u32::max(most, p.bw * p.bh);
        }
        let config = batch_grid(name, params.len(), most)?;
        let params_dev = stream
            .clone_htod(params)
            .map_err(|e| launch_err(name, format!("copying parameters: {e}")))?;
        let mut launch = stream.launch_builder(&self.color.erase);
        launch.arg(&params_dev);
        // SAFETY: the argument list matches the kernel's signature (one
        // params pointer); each image writes only the pixels of its box,
        // checked above to lie inside its w x h image, within the
        // allocation the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::COLOR;

    fn fields_in_order(source: &str, fields: &[&str]) {
        let mut at = 0;
        for f in fields {
            let pos = source[at..]
                .find(f)
                .unwrap_or_else(|| panic!("color.cu: field {f} missing or out of order"));
            at += pos + f.len();
        }
    }

    #[test]
    fn params_layouts_match_the_cuda_structs() {
        assert_eq!(std::mem::size_of::<ColorParams>(), 40);
        assert_eq!(std::mem::align_of::<ColorParams>(), 8);
        assert_eq!(std::mem::size_of::<EraseParams>(), 72);
        assert_eq!(std::mem::align_of::<EraseParams>(), 8);
        let color = COLOR.source.find("struct StokerColorParams {").unwrap();
        fields_in_order(
            &COLOR.source[color..],
            &[
                "unsigned long long img;",
                "unsigned long long aux;",
                "unsigned int w;",
                "unsigned int h;",
                "unsigned int op;",
                "unsigned int arg;",
                "float factor;",
                "unsigned int reserved;",
            ],
        );
        let erase = COLOR.source.find("struct StokerEraseParams {").unwrap();
        fields_in_order(
            &COLOR.source[erase..],
            &[
                "unsigned long long img;",
                "unsigned int w;",
                "unsigned int h;",
                "unsigned int left;",
                "unsigned int top;",
                "unsigned int bw;",
                "unsigned int bh;",
                "unsigned int noise;",
                "unsigned int fill;",
                "unsigned long long seed;",
                "float scale[3];",
                "float offset[3];",
            ],
        );
    }

    #[test]
    fn op_codes_match_the_cuda_defines() {
        for op in ColorOp::ALL {
            let name = format!("{op:?}").to_uppercase();
            let define = format!("#define STOKER_OP_{name} {}u", op as u32);
            assert!(COLOR.source.contains(&define), "color.cu lacks {define}");
            assert_eq!(ColorOp::from_code(op as u32), Some(op));
        }
        assert_eq!(ColorOp::from_code(9), None);
    }

    #[test]
    fn params_checks_refuse_what_the_kernels_cannot_take() {
        let good = ColorParams::new(ColorOp::Permute, 0x1000, (64, 48), 2 | 1 << 8, 0.0);
        assert!(good.check().is_ok());
        assert!(ColorParams { arg: 3, ..good }.check().is_err());
        assert!(ColorParams { arg: 1 << 24, ..good }.check().is_err());
        assert!(ColorParams { img: 0, ..good }.check().is_err());
        assert!(ColorParams { w: 0, ..good }.check().is_err());
        assert!(ColorParams { op: 9, ..good }.check().is_err());
        assert!(ColorParams { reserved: 1, ..good }.check().is_err());
        assert!(ColorParams { aux: 0x2000, ..good }.check().is_err());
        let hue = ColorParams::new(ColorOp::Hue, 0x1000, (4, 4), 255, 0.0);
        assert!(hue.check().is_ok());
        assert!(ColorParams { arg: 256, ..hue }.check().is_err());
        let sharp = ColorParams::new(ColorOp::Sharpness, 0x1000, (4, 4), 0, 1.5);
        assert!(sharp.check().is_err(), "no smoothed copy");
        assert!(ColorParams { aux: 0x1000, ..sharp }.check().is_err());
        assert!(ColorParams { aux: 0x2000, ..sharp }.check().is_ok());
        assert!(
            ColorParams {
                aux: 0x2000,
                factor: f32::NAN,
                ..sharp
            }
            .check()
            .is_err()
        );

        let erase = EraseParams {
            img: 0x1000,
            w: 100,
            h: 50,
            left: 10,
            top: 20,
            bw: 90,
            bh: 30,
            noise: 1,
            fill: 0,
            seed: 7,
            scale: [1.0; 3],
            offset: [0.5; 3],
        };
        assert!(erase.check().is_ok());
        assert!(EraseParams { bw: 91, ..erase }.check().is_err());
        assert!(EraseParams { bh: 31, ..erase }.check().is_err());
        assert!(EraseParams { noise: 2, ..erase }.check().is_err());
        assert!(EraseParams { fill: 1 << 24, ..erase }.check().is_err());
        assert!(
            EraseParams {
                scale: [1.0, f32::INFINITY, 1.0],
                ..erase
            }
            .check()
            .is_err()
        );
        assert!(EraseParams { img: 0, ..erase }.check().is_err());
    }
}
