//! The kernel registry: which `.cu` source defines which kernel function
//! ([`kernel`], [`ModuleSpec`], [`MODULES`]), and how a module becomes code
//! on a device: NVRTC compiles it for the device's architecture, once per
//! process ([`ptx_for`]'s cache), and [`load_modules`] loads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::KernelError;

/// Kernel function names, as the `.cu` sources declare them.
pub mod kernel {
    /// [`crate::RrcParams`]-driven crop + resize + flip, uint8 HWC.
    pub const RRC_FLIP_U8_HWC: &str = "stoker_rrc_flip_u8_hwc";
    /// [`crate::ChainParams`]-driven chains of nearest geometric steps.
    pub const CHAIN_BATCH_U8_HWC: &str = "stoker_chain_batch_u8_hwc";
    /// [`crate::WarpParams`]-driven bilinear and bicubic affine warps of a
    /// batch.
    pub const AFFINE_FILTER_BATCH_U8_HWC: &str = "stoker_affine_filter_batch_u8_hwc";
    /// [`crate::ResampleParams`]-driven Pillow resampling (bicubic,
    /// lanczos, box, hamming), one axis per launch, of a batch.
    pub const RESAMPLE_BATCH_U8_HWC: &str = "stoker_resample_batch_u8_hwc";
    pub const BLUR_ROWS_U8_HWC: &str = "stoker_blur_rows_u8_hwc";
    pub const BLUR_COLS_U8_HWC: &str = "stoker_blur_cols_u8_hwc";
    /// [`crate::ColorParams`]-driven histograms and luma sums of a batch.
    pub const COLOR_STATS_BATCH_U8_HWC: &str = "stoker_color_stats_batch_u8_hwc";
    /// Equalize / autocontrast lookup tables built from the histograms.
    pub const COLOR_LUTS_BATCH: &str = "stoker_color_luts_batch";
    /// Pillow's `SMOOTH` filter of a batch (sharpness's degenerate images).
    pub const SMOOTH_BATCH_U8_HWC: &str = "stoker_smooth_batch_u8_hwc";
    /// The per-pixel colour steps of a batch, in place.
    pub const COLOR_BATCH_U8_HWC: &str = "stoker_color_batch_u8_hwc";
    /// [`crate::EraseParams`]-driven RandomErasing of a batch, in place.
    pub const ERASE_BATCH_U8_HWC: &str = "stoker_erase_batch_u8_hwc";
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

/// The geometry: chains of nearest steps, the fused crop / resize / flip.
pub const RESIZE: ModuleSpec = ModuleSpec {
    name: "resize",
    source: include_str!("resize.cu"),
    kernels: &[kernel::RRC_FLIP_U8_HWC, kernel::CHAIN_BATCH_U8_HWC],
};

/// Bilinear and bicubic warps and Pillow's resampling of a batch; blur,
/// one image per launch.
pub const STEPS: ModuleSpec = ModuleSpec {
    name: "steps",
    source: include_str!("steps.cu"),
    kernels: &[
        kernel::AFFINE_FILTER_BATCH_U8_HWC,
        kernel::RESAMPLE_BATCH_U8_HWC,
        kernel::BLUR_ROWS_U8_HWC,
        kernel::BLUR_COLS_U8_HWC,
    ],
};

/// The colour steps of a batch, each image with its own parameters, one
/// launch per kind of work ([`crate::ColorParams`], [`crate::EraseParams`]).
pub const COLOR: ModuleSpec = ModuleSpec {
    name: "color",
    source: include_str!("color.cu"),
    kernels: &[
        kernel::COLOR_STATS_BATCH_U8_HWC,
        kernel::COLOR_LUTS_BATCH,
        kernel::SMOOTH_BATCH_U8_HWC,
        kernel::COLOR_BATCH_U8_HWC,
        kernel::ERASE_BATCH_U8_HWC,
    ],
};

/// The client's conversion of a uint8 HWC batch to the training layout and
/// dtype, normalised ([`ConvertKernels`](crate::ConvertKernels)).
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
pub const MODULES: &[ModuleSpec] = &[RESIZE, STEPS, COLOR, CONVERT];

/// The modules a worker runs, compiled together at its start by
/// [`Kernels::load`](crate::Kernels::load).
pub const WORKER_MODULES: &[ModuleSpec] = &[RESIZE, STEPS, COLOR];

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
pub(crate) fn arch_of(ctx: &CudaContext) -> Result<(i32, i32), KernelError> {
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

/// The function `name` of the loaded module `spec`.
pub(crate) fn function(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check_nvrtc;

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
}
