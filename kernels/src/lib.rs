//! Stoker's CUDA C kernels and their Rust launch wrappers: the fused crop +
//! resize + flip of a batch (`resize.cu`), and flips, rotation, colour
//! jitter and blur of one image (`steps.cu`), for the whole transform set.
//!
//! The sources (`src/*.cu`) are embedded in the binary and compiled at run
//! time by NVRTC for the GPU found, so nothing CUDA is needed to build.
//! [`MODULES`] is the registry: a module's name, its source and the kernel
//! functions it defines. Kernel names are spelled once, in [`kernel`]; a
//! test checks that each one is an `extern "C" __global__` function of its
//! module's source, so the two sides cannot drift apart.
//!
//! Compiled PTX is cached per process, keyed by module and architecture
//! ([`ptx_for`]); [`Kernels::load`] compiles (or reuses) every module and
//! loads it into a CUDA context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, Ptx};

/// Kernel function names, as the `.cu` sources declare them.
pub mod kernel {
    /// [`crate::RrcParams`]-driven crop + resize + flip, uint8 HWC.
    pub const RRC_FLIP_U8_HWC: &str = "stoker_rrc_flip_u8_hwc";
    pub const FLIP_U8_HWC: &str = "stoker_flip_u8_hwc";
    pub const ROTATE_U8_HWC: &str = "stoker_rotate_u8_hwc";
    pub const LUMA_SUM_U8_HWC: &str = "stoker_luma_sum_u8_hwc";
    pub const JITTER_U8_HWC: &str = "stoker_jitter_u8_hwc";
    pub const BLUR_ROWS_U8_HWC: &str = "stoker_blur_rows_u8_hwc";
    pub const BLUR_COLS_U8_HWC: &str = "stoker_blur_cols_u8_hwc";
}

/// One CUDA C source file and the kernels it defines.
#[derive(Clone, Copy, Debug)]
pub struct ModuleSpec {
    pub name: &'static str,
    pub source: &'static str,
    pub kernels: &'static [&'static str],
}

/// The fused crop / resize / flip kernels.
pub const RESIZE: ModuleSpec = ModuleSpec {
    name: "resize",
    source: include_str!("resize.cu"),
    kernels: &[kernel::RRC_FLIP_U8_HWC],
};

/// Flips, rotation, colour jitter and blur, one image per launch.
pub const STEPS: ModuleSpec = ModuleSpec {
    name: "steps",
    source: include_str!("steps.cu"),
    kernels: &[
        kernel::FLIP_U8_HWC,
        kernel::ROTATE_U8_HWC,
        kernel::LUMA_SUM_U8_HWC,
        kernel::JITTER_U8_HWC,
        kernel::BLUR_ROWS_U8_HWC,
        kernel::BLUR_COLS_U8_HWC,
    ],
};

/// Every module, compiled together at start.
pub const MODULES: &[ModuleSpec] = &[RESIZE, STEPS];

/// Why a kernel could not be compiled, loaded or launched.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("nvrtc could not compile kernel module {module} for sm_{major}{minor}: {reason}")]
    Compile {
        module: &'static str,
        major: i32,
        minor: i32,
        reason: String,
    },
    #[error("cuda could not load kernel module {module}: {reason}")]
    Load { module: &'static str, reason: String },
    #[error("kernel module {module} has no function {function}: {reason}")]
    Function {
        module: &'static str,
        function: &'static str,
        reason: String,
    },
    #[error("cannot read the compute capability of cuda device {ordinal}: {reason}")]
    Device { ordinal: usize, reason: String },
    #[error("kernel {function}: {reason}")]
    Launch { function: &'static str, reason: String },
}

type PtxCache = Mutex<HashMap<(&'static str, i32, i32), Ptx>>;

fn ptx_cache() -> &'static PtxCache {
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The PTX of `spec` for compute capability `major.minor`: compiled by
/// NVRTC on first use, then taken from the per-process cache.
pub fn ptx_for(spec: &ModuleSpec, major: i32, minor: i32) -> Result<Ptx, KernelError> {
    let key = (spec.name, major, minor);
    if let Some(ptx) = ptx_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(ptx.clone());
    }
    let options = CompileOptions {
        options: vec![format!("--gpu-architecture=sm_{major}{minor}")],
        name: Some(format!("{}.cu", spec.name)),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(spec.source, options).map_err(|e| KernelError::Compile {
        module: spec.name,
        major,
        minor,
        reason: e.to_string(),
    })?;
    ptx_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, ptx.clone());
    Ok(ptx)
}

/// Every module of [`MODULES`], loaded into one context.
#[derive(Clone, Debug)]
pub struct Kernels {
    modules: HashMap<&'static str, Arc<CudaModule>>,
    rrc_flip: CudaFunction,
    flip: CudaFunction,
    rotate: CudaFunction,
    luma_sum: CudaFunction,
    jitter: CudaFunction,
    blur_rows: CudaFunction,
    blur_cols: CudaFunction,
    /// The architecture the modules were compiled for.
    pub arch: (i32, i32),
}

/// Threads per block of every kernel: one thread per output pixel.
const THREADS: u32 = 256;

/// A launch of one thread per pixel of a `w` x `h` image.
fn per_pixel(w: u32, h: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((w * h).div_ceil(THREADS), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Checks a `w` x `h` image's size against a buffer of `len` elements of
/// `per_pixel` each.
fn check_image(
    function: &'static str,
    what: &str,
    w: u32,
    h: u32,
    len: usize,
    per_pixel: u64,
) -> Result<(), KernelError> {
    let pixels = u64::from(w) * u64::from(h);
    if pixels == 0 || pixels > u64::from(u32::MAX / 3) {
        return Err(KernelError::Launch {
            function,
            reason: format!("image size {w}x{h} is out of range"),
        });
    }
    if (len as u64) < pixels * per_pixel {
        return Err(KernelError::Launch {
            function,
            reason: format!("{what} of {len} elements is too small for {w}x{h}"),
        });
    }
    Ok(())
}

impl Kernels {
    /// Compiles (or takes from the cache) every module for the context's
    /// device and loads it.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let (major, minor) = ctx.compute_capability().map_err(|e| KernelError::Device {
            ordinal: ctx.ordinal(),
            reason: e.to_string(),
        })?;
        let mut modules = HashMap::new();
        for spec in MODULES {
            let ptx = ptx_for(spec, major, minor)?;
            let module = ctx.load_module(ptx).map_err(|e| KernelError::Load {
                module: spec.name,
                reason: e.to_string(),
            })?;
            modules.insert(spec.name, module);
        }
        Ok(Self {
            rrc_flip: function(&modules, &RESIZE, kernel::RRC_FLIP_U8_HWC)?,
            flip: function(&modules, &STEPS, kernel::FLIP_U8_HWC)?,
            rotate: function(&modules, &STEPS, kernel::ROTATE_U8_HWC)?,
            luma_sum: function(&modules, &STEPS, kernel::LUMA_SUM_U8_HWC)?,
            jitter: function(&modules, &STEPS, kernel::JITTER_U8_HWC)?,
            blur_rows: function(&modules, &STEPS, kernel::BLUR_ROWS_U8_HWC)?,
            blur_cols: function(&modules, &STEPS, kernel::BLUR_COLS_U8_HWC)?,
            modules,
            arch: (major, minor),
        })
    }

    /// Mirrors the `w` x `h` image `src` into `dst`, left-right and/or
    /// top-bottom.
    pub fn flip_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        (w, h): (u32, u32),
        horizontal: bool,
        vertical: bool,
    ) -> Result<(), KernelError> {
        let name = kernel::FLIP_U8_HWC;
        check_image(name, "source", w, h, src.len(), 3)?;
        check_image(name, "destination", w, h, dst.len(), 3)?;
        let (hz, vt) = (u32::from(horizontal), u32::from(vertical));
        let mut launch = stream.launch_builder(&self.flip);
        launch.arg(src).arg(dst).arg(&w).arg(&h).arg(&hz).arg(&vt);
        // SAFETY: the arguments match the kernel's signature; it reads and
        // writes w x h x 3 bytes, within both buffers (checked above).
        unsafe { launch.launch(per_pixel(w, h)) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// Rotates the `w` x `h` image `src` by `degrees` counter-clockwise
    /// about its centre into `dst` (nearest neighbour, zeros outside).
    pub fn rotate_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        (w, h): (u32, u32),
        degrees: f32,
    ) -> Result<(), KernelError> {
        let name = kernel::ROTATE_U8_HWC;
        check_image(name, "source", w, h, src.len(), 3)?;
        check_image(name, "destination", w, h, dst.len(), 3)?;
        let (sin, cos) = f64::from(degrees).to_radians().sin_cos();
        let mut launch = stream.launch_builder(&self.rotate);
        launch.arg(src).arg(dst).arg(&w).arg(&h).arg(&sin).arg(&cos);
        // SAFETY: the arguments match the kernel's signature; every read is
        // bounds-checked against w x h and every write is one of the w x h
        // pixels of `dst` (sizes checked above).
        unsafe { launch.launch(per_pixel(w, h)) }.map_err(|e| launch_err(name, e))?;
        Ok(())
    }

    /// Applies colour-jitter factors in place, in `order` (0 brightness,
    /// 1 contrast, 2 saturation); a factor of 1 is skipped.
    pub fn jitter_u8_hwc(
        &self,
        stream: &Arc<CudaStream>,
        img: &mut CudaSlice<u8>,
        (w, h): (u32, u32),
        factors: [f32; 3],
        order: [u8; 3],
    ) -> Result<(), KernelError> {
        let name = kernel::JITTER_U8_HWC;
        check_image(name, "image", w, h, img.len(), 3)?;
        let n = w * h;
        for which in order {
            let Some(&factor) = factors.get(usize::from(which)) else {
                return Err(launch_err(name, format!("jitter order names factor {which}")));
            };
            if factor == 1.0 {
                continue;
            }
            let mut sum = stream.alloc_zeros::<u64>(1).map_err(|e| launch_err(name, e))?;
            if which == 1 {
                let mut launch = stream.launch_builder(&self.luma_sum);
                launch.arg(&*img).arg(&n).arg(&mut sum);
                // SAFETY: matches the kernel's signature; it reads n pixels
                // of `img` (checked above) and adds into the one u64 of `sum`.
                unsafe { launch.launch(per_pixel(w, h)) }.map_err(|e| launch_err(kernel::LUMA_SUM_U8_HWC, e))?;
            }
            let which = u32::from(which);
            let mut launch = stream.launch_builder(&self.jitter);
            launch.arg(&mut *img).arg(&n).arg(&which).arg(&factor).arg(&sum);
            // SAFETY: matches the kernel's signature; it reads and writes the
            // n pixels of `img` (checked above) and reads the one u64 of `sum`.
            unsafe { launch.launch(per_pixel(w, h)) }.map_err(|e| launch_err(name, e))?;
        }
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

    /// The loaded module called `name`, if any.
    pub fn module(&self, name: &str) -> Option<&Arc<CudaModule>> {
        self.modules.get(name)
    }

    /// Crops, resizes and optionally flips `params.len()` images in one
    /// launch on `stream`. Image `i` is written, `out_w * out_h * 3` bytes
    /// of uint8 HWC, at `params[i].dst_offset` of `dst`.
    ///
    /// # Safety
    ///
    /// Every `params[i].src` must be the device address of an allocation
    /// of at least `src_pitch * src_h` bytes in `stream`'s context, with
    /// `src_pitch >= 3 * src_w`, that stays alive and unwritten until the
    /// launch has finished on `stream`. The boxes are checked
    /// ([`RrcParams::check`]): inside the image, or padded.
    pub unsafe fn rrc_flip_u8_hwc(
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
        let batch = u32::try_from(params.len())
            .ok()
            .filter(|&n| n <= 65_535)
            .ok_or_else(|| fail(format!("batch of {} images is over 65535", params.len())))?;
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
        // (params pointer, dst pointer, two unsigned ints); every write is
        // within `dst` (checked above) and every read within the source
        // images, as the caller promises.
        unsafe { launch.launch(config) }.map_err(|e| fail(e.to_string()))?;
        Ok(())
    }
}

fn launch_err(function: &'static str, reason: impl ToString) -> KernelError {
    KernelError::Launch {
        function,
        reason: reason.to_string(),
    }
}

fn function(
    modules: &HashMap<&'static str, Arc<CudaModule>>,
    spec: &ModuleSpec,
    name: &'static str,
) -> Result<CudaFunction, KernelError> {
    let module = modules.get(spec.name).ok_or_else(|| KernelError::Function {
        module: spec.name,
        function: name,
        reason: "module not loaded".into(),
    })?;
    module.load_function(name).map_err(|e| KernelError::Function {
        module: spec.name,
        function: name,
        reason: e.to_string(),
    })
}

/// Per-image parameters of [`Kernels::rrc_flip_u8_hwc`]; the layout of
/// `StokerRrcParams` in `resize.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RrcParams {
    /// Device address of the decoded image (uint8 HWC).
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
    /// 1 when the box may reach past the image: the filter window stays
    /// inside the box and pixels outside the image count as zeros (the
    /// box's corner is then integral).
    pub pad: u32,
    pub reserved: u32,
}

// SAFETY: `RrcParams` is `repr(C)`, made only of integers and floats with no
// padding (56 bytes), and matches the kernel's struct field for field.
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
        let fits = |start: f32, len: f32, size: u32| {
            let finite = start.is_finite() && len.is_finite() && len > 0.0;
            if self.pad != 0 {
                // Any box, integral and not absurdly far out.
                finite && start.fract() == 0.0 && len.fract() == 0.0 && start.abs() + len <= 4.0 * 65536.0
            } else {
                finite && start >= 0.0 && start + len <= size as f32
            }
        };
        if !fits(self.crop_x, self.crop_w, self.src_w) || !fits(self.crop_y, self.crop_h, self.src_h) {
            return Err(format!(
                "crop box ({}, {}, {}x{}) is not inside the {}x{} image",
                self.crop_x, self.crop_y, self.crop_w, self.crop_h, self.src_w, self.src_h
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_kernel_is_defined_in_its_source() {
        for spec in MODULES {
            assert!(!spec.kernels.is_empty(), "module {} lists no kernels", spec.name);
            for name in spec.kernels {
                let decl = format!("extern \"C\" __global__ void {name}(");
                assert!(spec.source.contains(&decl), "{}.cu does not define {name}", spec.name);
            }
        }
    }

    #[test]
    fn params_layout_matches_the_cuda_struct() {
        assert_eq!(std::mem::size_of::<RrcParams>(), 56);
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
            reserved: 0,
        };
        assert!(good.check().is_ok());
        let padded = RrcParams {
            crop_x: -4.0,
            crop_w: 600.0,
            pad: 1,
            ..good
        };
        assert!(padded.check().is_ok());
        assert!(RrcParams { crop_x: -4.5, ..padded }.check().is_err());
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
