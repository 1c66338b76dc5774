//! Stoker's CUDA C kernels and their Rust launch wrappers: for the worker,
//! the geometry of a batch (`resize.cu`: chains of nearest geometric steps,
//! and the fused crop + resize + flip, which can read through a chain),
//! the bilinear and bicubic affine warps, Pillow's resampling (bicubic,
//! lanczos, box, hamming resizes) of a batch and the blur of one image
//! (`steps.cu`), and the colour steps of a batch (`color.cu`: lookup
//! tables, equalize, autocontrast, channel permutations, hue, the enhance
//! blends, erasing): the steps the worker's GPU lanes run
//! (`stoker_server::gpu::gpu_runs`); for the client, the conversion of a
//! uint8 HWC batch to the layout and dtype a training step takes,
//! normalised (`convert.cu`).
//!
//! The worker's kernels follow `stoker-image`'s `augment` operation for
//! operation, for the CPU's bytes: chains in its integer arithmetic, the
//! warps and colour steps with each multiply and add rounded on its own
//! (no fused multiply-add); only the fused bilinear resize keeps in float
//! the intermediate the CPU rounds to 8 bits (a grey level at most).
//! Wrappers check bounds before launching; those whose kernels read only
//! the `CudaSlice`s they are given are safe functions.
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
//! both; [`green`] confines a worker's lanes to part of the SMs (a green
//! context), so that a training step on the same GPU keeps the rest; [`host`] is the conversion kernels' arithmetic on the host.
//!
//! One job per module: `registry` holds the
//! sources, kernel names, NVRTC compilation and the PTX cache; `worker`
//! the worker's launch wrappers ([`Kernels`], [`RrcParams`],
//! [`WarpParams`]); `links` a batch's chains ([`Chains`], [`ChainLink`]);
//! `chain` the chain kernel's launch ([`ChainParams`]); `resample` the
//! resampling passes' ([`ResampleParams`], [`ResampleCoeffs`]); `color` the
//! colour kernels' wrappers ([`ColorParams`], [`EraseParams`]); `convert`
//! the client's conversion ([`ConvertKernels`] and its types); `launch`
//! what the wrappers share; `error` [`KernelError`]; `handoff` the samples
//! a worker's lanes leave on the device for a loader in the same process
//! ([`handoff::Sink`], [`handoff::DevicePixels`]). Everything else public
//! is re-exported here.

mod chain;
mod color;
mod convert;
mod error;
pub mod green;
pub mod handoff;
pub mod host;
mod launch;
mod links;
mod registry;
mod resample;
pub mod runtime;
mod worker;

pub use chain::ChainParams;
pub use color::{ColorOp, ColorParams, EraseParams, TABLE_BYTES};
pub use convert::{Conversion, ConvertKernels, DType, Layout, Normalize};
pub use error::KernelError;
pub use green::{Confinement, GreenUnavailable, SmPartition, SmResource, SmShare};
pub use links::{ChainLink, ChainSpan, Chains, pack_rgb};
pub use registry::{COLOR, CONVERT, MODULES, ModuleSpec, RESIZE, STEPS, WORKER_MODULES, kernel, load_modules, ptx_for};
pub use resample::{ResampleCoeffs, ResampleParams};
pub use runtime::{
    CudaUnavailable, DeviceInfo, GPU_PRIORITY_ENV, POOL_KEEP_BYTES, PoolKeep, catch_cuda_panic, check_nvrtc,
    feed_priority, give_back_if_unclaimed, open_context, pool_release_threshold, set_pool_release_threshold,
    stream_priorities, trim_pool,
};
pub use worker::{Kernels, RrcParams, WarpParams};
