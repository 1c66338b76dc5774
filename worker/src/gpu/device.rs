//! Finding and opening a GPU: [`probe`] (what is missing, or what was
//! found), [`Gpu`] (a device's context, stream and compiled kernels), its
//! errors, and the page-locked copies back to the host. [`probe`] names
//! what is missing: libcuda, a device, libnvrtc, libnvjpeg. The host reads
//! a lane's page-locked copy-back buffer only after the lane waited for
//! the copy into it ([`Gpu::copy_to_pinned`]).

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use stoker_cuda::nvjpeg::{self, Backend, Handle, Library};
use stoker_cuda::{Confinement, CudaUnavailable, DeviceInfo, Kernels, PinnedBuffer, PoolKeep, SmPartition, SmShare};

/// Why this host cannot use a GPU.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuUnavailable {
    /// libcuda, the device or libnvrtc is missing, or the driver failed
    /// (found the same way as the client finds them).
    #[error(transparent)]
    Cuda(#[from] CudaUnavailable),
    #[error("nvrtc failure: {0}")]
    Nvrtc(String),
    #[error("no libnvjpeg: {0}")]
    NoLibnvjpeg(String),
    #[error("nvjpeg failure: {0}")]
    Nvjpeg(String),
}

/// What [`probe`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// The device, as the client's probe describes it too.
    pub device: DeviceInfo,
    /// The nvJPEG library opened, and its version.
    pub nvjpeg_soname: &'static str,
    pub nvjpeg_version: (i32, i32, i32),
    /// The backend batched decode uses.
    pub jpeg_backend: Backend,
    /// Why the hardware JPEG engine is not used, when it is not.
    pub hardware_unavailable: Option<String>,
}

impl fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = self.nvjpeg_version;
        write!(
            f,
            "{}; {} {a}.{b}.{c}, {} jpeg decoder",
            self.device,
            self.nvjpeg_soname,
            self.jpeg_backend.name(),
        )?;
        if let Some(why) = &self.hardware_unavailable {
            write!(f, " (no hardware engine: {why})")?;
        }
        Ok(())
    }
}

/// A failure on a GPU that was found usable.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("cuda {what} failed: {reason}")]
    Driver { what: &'static str, reason: String },
    #[error(transparent)]
    Kernel(#[from] stoker_cuda::KernelError),
    #[error(transparent)]
    Nvjpeg(#[from] nvjpeg::NvjpegError),
    #[error("{0}")]
    Invalid(String),
}

pub(super) fn driver(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Driver {
        what,
        reason: e.to_string(),
    }
}

pub use stoker_cuda::POOL_KEEP_BYTES;

/// A claim on `bytes` of the device's pool kept for reuse (see
/// [`PoolKeep`]): given back once every claim is dropped.
pub(super) fn keep_pool_memory(ctx: &Arc<CudaContext>, bytes: u64) -> Result<PoolKeep, cudarc::driver::DriverError> {
    PoolKeep::claim(ctx, bytes)
}

/// Whether device 0 and the CUDA, NVRTC and nvJPEG libraries are usable:
/// opens the device, compiles and loads every kernel, creates an nvJPEG
/// handle (the hardware engine when it has one), then lets them go.
pub fn probe() -> Result<GpuInfo, GpuUnavailable> {
    Gpu::open(0).map(|gpu| gpu.info.clone())
}

/// One device, ready to decode and transform: its context, a stream, the
/// compiled kernels and what [`probe`] reports; after [`Gpu::confine`],
/// the share of the SMs new streams run on.
#[derive(Debug)]
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub kernels: Kernels,
    pub info: GpuInfo,
    partition: Option<Arc<SmPartition>>,
    /// The pool memory kept for this device's work, while any copy of
    /// this `Gpu` lives.
    keep: Option<Arc<PoolKeep>>,
}

impl Gpu {
    /// Opens device `ordinal`: loads the libraries, compiles the kernels
    /// for it (NVRTC, cached per process) and checks nvJPEG.
    pub fn open(ordinal: usize) -> Result<Self, GpuUnavailable> {
        // cudarc panics when a symbol it expects is missing from a library
        // it found; report that as a reason like any other.
        stoker_cuda::catch_cuda_panic(|| Self::open_inner(ordinal))
    }

    fn open_inner(ordinal: usize) -> Result<Self, GpuUnavailable> {
        let ctx = stoker_cuda::open_context(ordinal)?;
        let drv = |e: cudarc::driver::DriverError| {
            GpuUnavailable::Cuda(CudaUnavailable::Driver {
                ordinal,
                reason: e.to_string(),
            })
        };
        let device = DeviceInfo::of(&ctx)?;
        let stream = ctx.new_stream().map_err(drv)?;
        let keep = match ctx.has_async_alloc() {
            true => Some(Arc::new(keep_pool_memory(&ctx, POOL_KEEP_BYTES).map_err(drv)?)),
            false => None,
        };

        stoker_cuda::check_nvrtc()?;
        let kernels = Kernels::load(&ctx).map_err(|e| GpuUnavailable::Nvrtc(e.to_string()))?;

        let lib = Library::open().map_err(GpuUnavailable::NoLibnvjpeg)?;
        let nvjpeg_version = lib.version().map_err(|e| GpuUnavailable::Nvjpeg(e.to_string()))?;
        ctx.bind_to_thread().map_err(drv)?;
        let (jpeg_backend, hardware_unavailable) = match Handle::new(lib, Backend::Hardware) {
            Ok(_) => (Backend::Hardware, None),
            Err(e) => {
                Handle::new(lib, Backend::Default).map_err(|e| GpuUnavailable::Nvjpeg(e.to_string()))?;
                (Backend::Default, Some(e.to_string()))
            }
        };
        let info = GpuInfo {
            device,
            nvjpeg_soname: lib.soname(),
            nvjpeg_version,
            jpeg_backend,
            hardware_unavailable,
        };
        Ok(Self {
            ctx,
            stream,
            kernels,
            info,
            partition: None,
            keep,
        })
    }

    /// Runs the streams made from now on ([`Gpu::with_new_stream`], so the
    /// lanes') on the share of the SMs `share` asks for
    /// ([`stoker_cuda::green`]), and says what was decided: the
    /// partition's SMs, or the whole device and why. An explicit count the
    /// device cannot honour is an error; `auto` falls back to the whole
    /// device.
    pub fn confine(&mut self, share: SmShare) -> Result<Confinement, GpuError> {
        let decided = stoker_cuda::green::confinement(&self.ctx, share).map_err(|e| GpuError::Driver {
            what: "confining the lanes to part of the sms",
            reason: e.to_string(),
        })?;
        self.partition = match &decided {
            Confinement::Partition(p) => Some(Arc::clone(p)),
            Confinement::Whole { .. } => None,
        };
        Ok(decided)
    }

    /// The same device and kernels with a stream of its own, for work that
    /// should overlap with this one's: of the priority
    /// [`stoker_cuda::feed_priority`] gives (the lowest by default), on
    /// the SMs [`Gpu::confine`] gave.
    pub fn with_new_stream(&self) -> Result<Self, GpuError> {
        let priority = stoker_cuda::feed_priority(&self.ctx).map_err(driver("reading the stream priorities"))?;
        let stream = match &self.partition {
            Some(p) => p.stream(priority).map_err(|e| GpuError::Driver {
                what: "creating a stream on the lanes' sms",
                reason: e.to_string(),
            })?,
            None => self
                .ctx
                .new_stream_with_priority(priority)
                .map_err(driver("creating a stream"))?,
        };
        Ok(Self {
            ctx: Arc::clone(&self.ctx),
            stream,
            kernels: self.kernels.clone(),
            info: self.info.clone(),
            partition: self.partition.clone(),
            keep: self.keep.clone(),
        })
    }

    /// A page-locked host buffer of `len` bytes (zeroed) for copies back
    /// from the device: reuse it, allocating one per copy is slow.
    pub fn pinned(&self, len: usize) -> Result<PinnedBuffer, GpuError> {
        PinnedBuffer::alloc(&self.ctx, len).map_err(driver("page-locked host allocation"))
    }

    /// Copies `buf` into the front of `host` and waits for the copy.
    pub fn copy_to_pinned(&self, buf: &CudaSlice<u8>, host: &mut PinnedBuffer) -> Result<(), GpuError> {
        if host.len() < buf.len() {
            return Err(GpuError::Invalid(format!(
                "page-locked buffer of {} bytes is too small for {} bytes",
                host.len(),
                buf.len()
            )));
        }
        // The driver copies as many bytes as the destination holds, so the
        // destination is cut to the source's length; the copy is waited for
        // here.
        let front = &mut host.as_mut_slice()[..buf.len()];
        self.stream
            .memcpy_dtoh(buf, front)
            .map_err(driver("copy to page-locked memory"))?;
        self.stream
            .synchronize()
            .map_err(driver("waiting for the copy to the host"))
    }

    /// Copies a device buffer to a host vector, waiting for the stream.
    pub fn to_host(&self, buf: &CudaSlice<u8>) -> Result<Vec<u8>, GpuError> {
        self.stream.clone_dtoh(buf).map_err(driver("copy to host"))
    }
}
