//! Stoker's CUDA side, in the three layers cudarc uses: raw bindings,
//! checked calls, and safe types. Every `unsafe` block of the worker's and
//! the client's GPU work is here (they forbid `unsafe`), and none of them
//! handles a device address.
//!
//! - [`nvjpeg`]: nvJPEG, loaded at run time (`sys`, `result`, `safe`); its
//!   decodes write [`DeviceImage`]s checked against each JPEG's header.
//! - The kernels: CUDA C (`src/*.cu`) embedded in the binary and compiled
//!   at run time by NVRTC for the GPU found, so nothing CUDA is needed to
//!   build. For the worker, the geometry of a batch (`resize.cu`: chains
//!   of nearest geometric steps, and the fused crop + resize + flip, which
//!   can read through a chain), the bilinear and bicubic affine warps,
//!   Pillow's resampling and the blur of one image (`steps.cu`), and the
//!   colour steps of a batch (`color.cu`); for the client, the conversion
//!   of a uint8 HWC batch to the layout and dtype a training step takes,
//!   normalised (`convert.cu`).
//! - Their launches, two layers: the raw wrappers (`worker.rs`,
//!   `chain.rs`, `resample.rs`, `color.rs`, crate-private `unsafe fn`s over
//!   parameter blocks that carry device addresses, every field but the
//!   addresses checked), and the safe batch launches over typed buffers
//!   that the worker calls (`batch.rs`: [`Kernels::rrc_flip`],
//!   [`Kernels::warp`], [`Kernels::render_chains`],
//!   [`Kernels::render_planes`], [`Kernels::resample`], the colour
//!   launches), which check every buffer and fill in the addresses.
//! - `image`: [`DeviceImage`], [`alloc_bytes`] and [`PinnedBuffer`], the
//!   typed buffers.
//!
//! The worker's kernels follow `stoker-image`'s `augment` operation for
//! operation, for the CPU's bytes: chains in its integer arithmetic, the
//! warps and colour steps with each multiply and add rounded on its own
//! (no fused multiply-add); only the fused bilinear resize keeps in float
//! the intermediate the CPU rounds to 8 bits (a grey level at most).
//!
//! [`MODULES`] is the registry: a module's name, its source and the kernel
//! functions it defines. Kernel names are spelled once, in [`kernel`]; a
//! test checks that each one is an `extern "C" __global__` function of its
//! module's source, so the two sides cannot drift apart. Compiled PTX is
//! cached per process, keyed by module and architecture ([`ptx_for`]);
//! [`load_modules`] compiles (or reuses) the modules asked for and loads
//! them into a CUDA context. [`Kernels::load`] loads the worker's modules
//! ([`WORKER_MODULES`]), [`ConvertKernels::load`] only the client's
//! ([`CONVERT`]), so neither compiles what it does not run.
//!
//! [`runtime`] finds CUDA at run time (libcuda, the device, libnvrtc) for
//! both, and holds the device-wide pieces (the memory pool's claims,
//! stream priorities, [`ForeignStream`], [`order_by_streams`]); [`green`]
//! confines a worker's lanes to part of the SMs (a green context), so that
//! a training step on the same GPU keeps the rest; [`host`] is the
//! conversion kernels' arithmetic on the host; [`handoff`] the samples a
//! worker's lanes leave on the device for a loader in the same process.
//!
//! One job per module: `registry` holds the sources, kernel names, NVRTC
//! compilation and the PTX cache; `worker` the worker's functions and raw
//! wrappers ([`Kernels`], [`RrcParams`], [`WarpParams`]); `links` a
//! batch's chains ([`Chains`], [`ChainLink`]); `chain` the chain kernel's
//! raw launch ([`ChainParams`]); `resample` the resampling passes'
//! ([`ResampleParams`], [`ResampleCoeffs`]); `color` the colour kernels'
//! ([`ColorParams`], [`EraseParams`]); `convert` the client's conversion
//! ([`ConvertKernels`] and its types); `launch` what the wrappers share;
//! `error` [`KernelError`]. Everything else public is re-exported here.

mod batch;
mod chain;
mod color;
mod convert;
mod error;
pub mod green;
pub mod handoff;
pub mod host;
mod image;
mod launch;
mod links;
pub mod nvjpeg;
mod registry;
mod resample;
pub mod runtime;
mod worker;

pub use batch::PlaneJob;
pub use chain::ChainParams;
pub use color::{ColorOp, ColorParams, EraseParams, TABLE_BYTES};
pub use convert::{Conversion, ConvertKernels, DType, Layout, Normalize};
pub use error::KernelError;
pub use green::{Confinement, GreenUnavailable, SmPartition, SmResource, SmShare};
pub use image::{DeviceImage, PinnedBuffer, alloc_bytes};
pub use links::{ChainLink, ChainSpan, Chains, pack_rgb};
pub use registry::{COLOR, CONVERT, MODULES, ModuleSpec, RESIZE, STEPS, WORKER_MODULES, kernel, load_modules, ptx_for};
pub use resample::{ResampleCoeffs, ResampleParams};
pub use runtime::{
    CudaUnavailable, DeviceInfo, ForeignStream, GPU_PRIORITY_ENV, POOL_KEEP_BYTES, PoolKeep, PoolMemory,
    catch_cuda_panic, check_nvrtc, feed_priority, give_back_if_unclaimed, keeping_current_context, open_context,
    order_by_streams, pool_memory, pool_release_threshold, set_pool_release_threshold, stream_priorities, trim_pool,
};
pub use worker::{Kernels, RrcParams, WarpParams};
