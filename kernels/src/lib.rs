//! Stoker's CUDA C kernels and their Rust launch wrappers: for the worker,
//! the fused crop + resize + flip of a batch (`resize.cu`), and flips,
//! rotation, colour jitter and blur of one image (`steps.cu`), for the whole
//! transform set; for the client, the conversion of a uint8 HWC batch to the
//! layout and dtype a training step takes, normalised (`convert.cu`).
//!
//! The sources (`src/*.cu`) are embedded in the binary and compiled at run
//! time by NVRTC for the GPU found, so nothing CUDA is needed to build.
//! [`MODULES`] is the registry: a module's name, its source and the kernel
//! functions it defines. Kernel names are spelled once, in [`kernel`]; a
//! test checks that each one is an `extern "C" __global__` function of its
//! module's source, so the two sides cannot drift apart.
//!
//! Compiled PTX is cached per process, keyed by module and architecture
//! ([`ptx_for`]); [`load_modules`] compiles (or reuses) the modules asked
//! for and loads them into a CUDA context. [`Kernels::load`] loads the
//! worker's modules ([`WORKER_MODULES`]), [`ConvertKernels::load`] only the
//! client's ([`CONVERT`]), so neither compiles what it does not run.
//!
//! [`runtime`] finds CUDA at run time (libcuda, the device, libnvrtc) for
//! both; [`host`] is the conversion kernels' arithmetic on the host.

pub mod host;
pub mod runtime;

pub use runtime::{
    CudaUnavailable, catch_cuda_panic, check_nvrtc, open_context, pool_release_threshold, set_pool_release_threshold,
};

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig,
    PushKernelArg,
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
    /// uint8 HWC -> float32 NCHW, normalised.
    pub const CONVERT_NCHW_F32: &str = "stoker_convert_nchw_f32";
    /// uint8 HWC -> float16 NCHW, normalised.
    pub const CONVERT_NCHW_F16: &str = "stoker_convert_nchw_f16";
    /// uint8 HWC -> bfloat16 NCHW, normalised.
    pub const CONVERT_NCHW_BF16: &str = "stoker_convert_nchw_bf16";
    /// uint8 HWC -> uint8 NCHW (a permutation).
    pub const CONVERT_NCHW_U8: &str = "stoker_convert_nchw_u8";
    /// uint8 HWC -> float32 NHWC, normalised.
    pub const CONVERT_NHWC_F32: &str = "stoker_convert_nhwc_f32";
    /// uint8 HWC -> float16 NHWC, normalised.
    pub const CONVERT_NHWC_F16: &str = "stoker_convert_nhwc_f16";
    /// uint8 HWC -> bfloat16 NHWC, normalised.
    pub const CONVERT_NHWC_BF16: &str = "stoker_convert_nhwc_bf16";
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

/// The client's conversion of a uint8 HWC batch to the training layout and
/// dtype, normalised ([`ConvertKernels`]).
pub const CONVERT: ModuleSpec = ModuleSpec {
    name: "convert",
    source: include_str!("convert.cu"),
    kernels: &[
        kernel::CONVERT_NCHW_F32,
        kernel::CONVERT_NCHW_F16,
        kernel::CONVERT_NCHW_BF16,
        kernel::CONVERT_NCHW_U8,
        kernel::CONVERT_NHWC_F32,
        kernel::CONVERT_NHWC_F16,
        kernel::CONVERT_NHWC_BF16,
    ],
};

/// Every module of the registry.
pub const MODULES: &[ModuleSpec] = &[RESIZE, STEPS, CONVERT];

/// The modules a worker runs, compiled together at its start by
/// [`Kernels::load`].
pub const WORKER_MODULES: &[ModuleSpec] = &[RESIZE, STEPS];

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

/// The compute capability of `ctx`'s device, which the modules are
/// compiled for.
fn arch_of(ctx: &CudaContext) -> Result<(i32, i32), KernelError> {
    ctx.compute_capability().map_err(|e| KernelError::Device {
        ordinal: ctx.ordinal(),
        reason: e.to_string(),
    })
}

/// Compiles (or takes from the cache) each module of `specs` for the
/// context's device and loads it, by module name.
pub fn load_modules(
    ctx: &Arc<CudaContext>,
    specs: &[ModuleSpec],
) -> Result<HashMap<&'static str, Arc<CudaModule>>, KernelError> {
    let (major, minor) = arch_of(ctx)?;
    let mut modules = HashMap::new();
    for spec in specs {
        let ptx = ptx_for(spec, major, minor)?;
        let module = ctx.load_module(ptx).map_err(|e| KernelError::Load {
            module: spec.name,
            reason: e.to_string(),
        })?;
        modules.insert(spec.name, module);
    }
    Ok(modules)
}

/// The worker's modules ([`WORKER_MODULES`]), loaded into one context.
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
    /// Compiles (or takes from the cache) the worker's modules for the
    /// context's device and loads them.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let (major, minor) = arch_of(ctx)?;
        let modules = load_modules(ctx, WORKER_MODULES)?;
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

/// Memory layout of a batch of images: `[B, 3, H, W]` or `[B, H, W, 3]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Nchw,
    Nhwc,
}

impl Layout {
    /// `"nchw"` or `"nhwc"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nchw => "nchw",
            Self::Nhwc => "nhwc",
        }
    }

    /// The shape of `images` images of `height` x `width` RGB pixels.
    pub fn shape(self, images: usize, height: u32, width: u32) -> [usize; 4] {
        let (h, w) = (height as usize, width as usize);
        match self {
            Self::Nchw => [images, 3, h, w],
            Self::Nhwc => [images, h, w, 3],
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = String;

    /// `nchw` / `nhwc`, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "nchw" => Ok(Self::Nchw),
            "nhwc" => Ok(Self::Nhwc),
            _ => Err(format!("unknown layout {s:?}: expected nchw or nhwc")),
        }
    }
}

/// Element type of a converted batch. float16 and bfloat16 elements are
/// 16-bit patterns (IEEE binary16, bfloat16), rounded to nearest even.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    F32,
    F16,
    Bf16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    /// The name PyTorch and NumPy use: `uint8`, `float32`, `float16`,
    /// `bfloat16`.
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "uint8",
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::Bf16 => "bfloat16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;

    /// `uint8`, `float32`, `float16`, `bfloat16`, or `u8`, `f32`, `f16`,
    /// `bf16`, `half`, `float`, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "uint8" | "u8" => Ok(Self::U8),
            "float32" | "f32" | "float" => Ok(Self::F32),
            "float16" | "f16" | "half" => Ok(Self::F16),
            "bfloat16" | "bf16" => Ok(Self::Bf16),
            _ => Err(format!(
                "unknown dtype {s:?}: expected uint8, float32, float16 or bfloat16"
            )),
        }
    }
}

/// The per-channel affine map of the float conversions:
/// `out = x * scale[c] + bias[c]` for a byte `x` of channel `c`, one fused
/// multiply-add in float32 on the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    pub scale: [f32; 3],
    pub bias: [f32; 3],
}

impl Normalize {
    /// `(x / 255 - mean[c]) / std[c]`, folded (in f64, then rounded) into
    /// `scale = 1 / (255 std)`, `bias = -mean / std`. Refuses a mean or std
    /// that is not finite, and a std of zero.
    pub fn from_mean_std(mean: [f32; 3], std: [f32; 3]) -> Result<Self, String> {
        for c in 0..3 {
            if !mean[c].is_finite() {
                return Err(format!("mean of channel {c} is {}: not a finite number", mean[c]));
            }
            if !std[c].is_finite() || std[c] == 0.0 {
                return Err(format!(
                    "std of channel {c} is {}: not a finite non-zero number",
                    std[c]
                ));
            }
        }
        let mut norm = Self {
            scale: [0.0; 3],
            bias: [0.0; 3],
        };
        for c in 0..3 {
            let (m, s) = (f64::from(mean[c]), f64::from(std[c]));
            norm.scale[c] = (1.0 / (255.0 * s)) as f32;
            norm.bias[c] = (-m / s) as f32;
        }
        Ok(norm)
    }

    /// Plain scaling to [0, 1]: `x / 255` (mean 0, std 1).
    pub fn scale_only() -> Self {
        Self {
            scale: [(1.0f64 / 255.0) as f32; 3],
            bias: [0.0; 3],
        }
    }
}

/// What [`ConvertKernels::convert`] makes of a uint8 HWC batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conversion {
    pub layout: Layout,
    pub dtype: DType,
    /// Ignored for [`DType::U8`], which is only permuted.
    pub norm: Normalize,
}

impl Conversion {
    /// The kernel that runs this conversion; `None` for uint8 NHWC, which
    /// is a plain copy.
    pub fn kernel(&self) -> Option<&'static str> {
        Some(match (self.layout, self.dtype) {
            (Layout::Nchw, DType::F32) => kernel::CONVERT_NCHW_F32,
            (Layout::Nchw, DType::F16) => kernel::CONVERT_NCHW_F16,
            (Layout::Nchw, DType::Bf16) => kernel::CONVERT_NCHW_BF16,
            (Layout::Nchw, DType::U8) => kernel::CONVERT_NCHW_U8,
            (Layout::Nhwc, DType::F32) => kernel::CONVERT_NHWC_F32,
            (Layout::Nhwc, DType::F16) => kernel::CONVERT_NHWC_F16,
            (Layout::Nhwc, DType::Bf16) => kernel::CONVERT_NHWC_BF16,
            (Layout::Nhwc, DType::U8) => return None,
        })
    }

    /// The name of this conversion in errors: its kernel, or the copy.
    fn what(&self) -> &'static str {
        self.kernel().unwrap_or("uint8 nhwc copy")
    }
}

/// Input and output sizes of a conversion of `images` images of `w` x `h`,
/// checked: `(H x W, input bytes, output bytes)`.
fn convert_sizes(
    what: &'static str,
    images: usize,
    (w, h): (u32, u32),
    dtype: DType,
) -> Result<(u32, usize, usize), KernelError> {
    let hw = w
        .checked_mul(h)
        .filter(|&p| p > 0 && p <= u32::MAX / 3)
        .ok_or_else(|| launch_err(what, format!("image size {w}x{h} is out of range")))?;
    if u32::try_from(images).is_err() {
        return Err(launch_err(what, format!("batch of {images} images is out of range")));
    }
    let input = images
        .checked_mul(hw as usize * 3)
        .ok_or_else(|| launch_err(what, format!("{images} images of {w}x{h} overflow the address space")))?;
    let output = input.checked_mul(dtype.size()).ok_or_else(|| {
        launch_err(
            what,
            format!("{images} images of {w}x{h} as {dtype} overflow the address space"),
        )
    })?;
    Ok((hw, input, output))
}

/// Images per launch: the grid's y dimension.
const MAX_GRID_Y: usize = 65_535;

/// The conversion kernels ([`CONVERT`]), loaded into one context: all a
/// client needs on its training GPU.
#[derive(Clone, Debug)]
pub struct ConvertKernels {
    functions: HashMap<&'static str, CudaFunction>,
    /// The architecture the module was compiled for.
    pub arch: (i32, i32),
}

impl ConvertKernels {
    /// Compiles (or takes from the cache) the conversion module for the
    /// context's device and loads it; no other module is compiled.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let arch = arch_of(ctx)?;
        let modules = load_modules(ctx, &[CONVERT])?;
        let mut functions = HashMap::new();
        for name in CONVERT.kernels {
            functions.insert(*name, function(&modules, &CONVERT, name)?);
        }
        Ok(Self { functions, arch })
    }

    /// Converts `images` uint8 HWC RGB images of `w` x `h` at the front of
    /// `src` into the front of `dst` as `conv` says, on `stream`: elements
    /// of `conv.dtype` (little-endian bytes) in `conv.layout`. Nothing is
    /// waited for. Sizes are checked; zero images do nothing.
    pub fn convert(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        images: usize,
        (w, h): (u32, u32),
        conv: &Conversion,
    ) -> Result<(), KernelError> {
        let what = conv.what();
        let (hw, in_bytes, out_bytes) = convert_sizes(what, images, (w, h), conv.dtype)?;
        if src.len() < in_bytes {
            return Err(launch_err(
                what,
                format!(
                    "source of {} bytes is too small for {images} images of {w}x{h}",
                    src.len()
                ),
            ));
        }
        if dst.len() < out_bytes {
            return Err(launch_err(
                what,
                format!(
                    "destination of {} bytes is too small for {images} images of {w}x{h} as {}",
                    dst.len(),
                    conv.dtype
                ),
            ));
        }
        if images == 0 {
            return Ok(());
        }
        let Some(name) = conv.kernel() else {
            // uint8 NHWC: the input is the output.
            return stream
                .memcpy_dtod(&src.slice(..in_bytes), &mut dst.slice_mut(..in_bytes))
                .map_err(|e| launch_err(what, e));
        };
        let func = self
            .functions
            .get(name)
            .ok_or_else(|| launch_err(name, "kernel not loaded"))?;
        let (src_ptr, src_guard) = src.device_ptr(stream);
        let (dst_ptr, dst_guard) = dst.device_ptr_mut(stream);
        // Four pixels (NCHW) or elements (NHWC) per thread when every
        // image's start stays aligned for word loads and vector stores.
        let size = conv.dtype.size() as u64;
        let vec4 = hw % 4 == 0 && src_ptr % 4 == 0 && dst_ptr % (4 * size) == 0;
        let per_image = match conv.layout {
            Layout::Nchw => hw,
            Layout::Nhwc => hw * 3,
        };
        let threads = if vec4 { per_image / 4 } else { per_image };
        let vec4 = u32::from(vec4);
        let [s0, s1, s2] = conv.norm.scale;
        let [b0, b1, b2] = conv.norm.bias;
        for first in (0..images).step_by(MAX_GRID_Y) {
            let count = (images - first).min(MAX_GRID_Y) as u32;
            // Both fit: `images` fits in u32 (checked above).
            let first = first as u32;
            let config = LaunchConfig {
                grid_dim: (threads.div_ceil(THREADS), count, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(func);
            launch
                .arg(&src_ptr)
                .arg(&dst_ptr)
                .arg(&hw)
                .arg(&first)
                .arg(&vec4)
                .arg(&s0)
                .arg(&s1)
                .arg(&s2)
                .arg(&b0)
                .arg(&b1)
                .arg(&b2);
            // SAFETY: the arguments match the kernel's signature (two
            // pointers, three unsigned ints, six floats). Images first ..
            // first + count of hw pixels are read from `src` and written to
            // `dst`, both checked above to hold all `images`; with vec4 the
            // pointers are aligned as the kernel's word loads and vector
            // stores need (checked above). The guards order the launch
            // after earlier writes to both buffers and record it for later
            // users.
            unsafe { launch.launch(config) }.map_err(|e| launch_err(name, e))?;
        }
        drop(src_guard);
        drop(dst_guard);
        Ok(())
    }
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
    fn every_conversion_has_a_registered_kernel_or_is_a_copy() {
        let norm = Normalize::scale_only();
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for dtype in [DType::U8, DType::F32, DType::F16, DType::Bf16] {
                let conv = Conversion { layout, dtype, norm };
                match conv.kernel() {
                    Some(name) => assert!(CONVERT.kernels.contains(&name), "{name} is not registered"),
                    None => assert_eq!((layout, dtype), (Layout::Nhwc, DType::U8)),
                }
                assert_eq!(layout.to_string().parse::<Layout>(), Ok(layout));
                assert_eq!(dtype.to_string().parse::<DType>(), Ok(dtype));
            }
        }
        assert_eq!("BF16".parse::<DType>(), Ok(DType::Bf16));
        assert!("float64".parse::<DType>().is_err_and(|e| e.contains("float64")));
        assert!("chw".parse::<Layout>().is_err());
        assert_eq!(Layout::Nchw.shape(2, 5, 7), [2, 3, 5, 7]);
        assert_eq!(Layout::Nhwc.shape(2, 5, 7), [2, 5, 7, 3]);
    }

    #[test]
    fn convert_kernels_take_the_arguments_the_wrapper_passes() {
        // ConvertKernels::convert pushes: src, dst, hw, first, vec4, s0..s2, b0..b2.
        let params = "const unsigned char* __restrict__ src, OUT_T* __restrict__ dst,";
        assert!(CONVERT.source.contains(params));
        let at = CONVERT.source.find(params).unwrap_or(0);
        let rest = &CONVERT.source[at..];
        let scalars = [
            "unsigned int hw, unsigned int first, unsigned int vec4,",
            "float s0, float s1, float s2, float b0, float b1, float b2",
        ];
        let mut pos = 0;
        for s in scalars {
            let found = rest[pos..]
                .find(s)
                .unwrap_or_else(|| panic!("convert.cu: parameters {s} missing or out of order"));
            pos += found + s.len();
        }
        for name in CONVERT.kernels {
            assert!(
                CONVERT.source.contains(&format!("{name}(STOKER_CONVERT_ARGS(")),
                "{name} does not take the common parameters"
            );
        }
    }

    #[test]
    fn normalize_folds_mean_and_std_and_refuses_bad_ones() {
        let n = Normalize::from_mean_std([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]).expect("imagenet values");
        for c in 0..3 {
            let want = (1.0 / 255.0 - [0.485f64, 0.456, 0.406][c]) / [0.229f64, 0.224, 0.225][c];
            let got = f64::from(1f32.mul_add(n.scale[c], n.bias[c]));
            assert!((got - want).abs() < 1e-6, "channel {c}: {got} vs {want}");
        }
        assert_eq!(
            Normalize::from_mean_std([0.0; 3], [1.0; 3]),
            Ok(Normalize::scale_only())
        );
        let zero = Normalize::from_mean_std([0.5; 3], [0.2, 0.0, 0.2]).expect_err("std 0");
        assert!(zero.contains("std of channel 1"), "{zero}");
        let nan = Normalize::from_mean_std([0.5, 0.5, f32::NAN], [0.2; 3]).expect_err("mean NaN");
        assert!(nan.contains("mean of channel 2"), "{nan}");
        assert!(Normalize::from_mean_std([0.5; 3], [f32::INFINITY; 3]).is_err());
    }

    #[test]
    fn convert_sizes_refuse_what_does_not_fit() {
        let what = kernel::CONVERT_NCHW_F32;
        assert_eq!(convert_sizes(what, 2, (4, 3), DType::F32).ok(), Some((12, 72, 288)));
        assert_eq!(convert_sizes(what, 0, (4, 3), DType::F16).ok(), Some((12, 0, 0)));
        for (images, dims) in [(1, (0, 3)), (1, (3, 0)), (1, (65_536, 65_536)), (1, (u32::MAX, 1))] {
            let e = convert_sizes(what, images, dims, DType::F32).expect_err("out of range");
            assert!(e.to_string().contains("out of range"), "{e}");
        }
        assert!(convert_sizes(what, usize::MAX / 2, (1024, 1024), DType::F32).is_err());
    }

    #[test]
    fn every_module_compiles_with_nvrtc() {
        // NVRTC needs no GPU: where libnvrtc loads, compile every module
        // for the GPUs we run on (A100, H100).
        if let Err(reason) = check_nvrtc() {
            println!("skipped: every_module_compiles_with_nvrtc: {reason}");
            return;
        }
        for (major, minor) in [(8, 0), (9, 0)] {
            for spec in MODULES {
                let ptx = ptx_for(spec, major, minor).unwrap_or_else(|e| panic!("{e}"));
                let text = ptx.to_src();
                for name in spec.kernels {
                    assert!(
                        text.contains(&format!(".entry {name}(")),
                        "{}.cu compiled for sm_{major}{minor} lacks {name}",
                        spec.name
                    );
                }
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
