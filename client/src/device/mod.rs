//! The client's device upload: batches land in page-locked host memory,
//! go to the training GPU on a side stream, and are converted there to the
//! layout and dtype a training step takes.
//!
//! ```text
//! assembler ──writes samples──► PinnedBuf (from a PinnedPool ring)
//!     │
//!     └─► Uploader::upload(buf, images, h, w)        side stream:
//!            H2D copy ─► [copy event] ─► convert kernel ─► [ready event]
//!              │                                             │
//!              └─ buf goes back to the pool, reusable       └─ DeviceBatch::wait_on(consumer stream)
//!                 once the copy event has completed
//! ```
//!
//! - [`probe`]: whether device `ordinal` can be used (libcuda, the device,
//!   libnvrtc, the conversion kernels compile) and, if not, why.
//! - [`PinnedPool`] / [`PinnedBuf`]: a ring of page-locked buffers. A buffer
//!   handed to an upload is handed out again only after its copy to the
//!   device has completed.
//! - [`Uploader`]: a side stream on the device's primary context (the one
//!   PyTorch uses, so device pointers are valid there), a staging buffer and
//!   the conversion kernels of `stoker-kernels` ([`UploadSpec`]: layout,
//!   dtype, mean, std).
//! - [`DeviceBatch`]: the converted batch on the device, with its ready
//!   event; a consumer stream waits on it with [`DeviceBatch::wait_on`].
//!
//! CUDA is loaded at run time, as in the worker: nothing CUDA is needed to
//! build or run the client, and without a GPU [`probe`] says why, so the
//! loader can yield host batches instead.

mod pool;
mod upload;

use std::fmt;

pub use cudarc::driver::sys::CUstream;
pub use pool::{PinnedBuf, PinnedPool};
pub use stoker_kernels::{CudaUnavailable, DType, Layout};
pub use upload::{DeviceBatch, POOL_KEEP_BYTES, UploadSpec, Uploader};

use stoker_kernels::{CONVERT, KernelError, catch_cuda_panic, check_nvrtc, open_context, ptx_for};

/// Why the client cannot use a CUDA device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceUnavailable {
    /// libcuda, the device or libnvrtc is missing, or the driver failed.
    #[error(transparent)]
    Cuda(#[from] CudaUnavailable),
    /// NVRTC is there but did not compile the conversion kernels.
    #[error("nvrtc could not build the conversion kernels for cuda device {ordinal}: {reason}")]
    Kernels { ordinal: usize, reason: String },
}

/// What [`probe`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub memory_bytes: usize,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        write!(
            f,
            "cuda device {} {}, sm_{major}{minor}, {:.1} GiB",
            self.ordinal,
            self.name,
            self.memory_bytes as f64 / f64::from(1u32 << 30),
        )
    }
}

/// A failure on a device that was found usable, or a request it refuses.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(transparent)]
    Unavailable(#[from] DeviceUnavailable),
    /// A CUDA driver call failed.
    #[error("{call} failed on cuda device {ordinal}: {reason}")]
    Driver {
        call: &'static str,
        ordinal: usize,
        reason: String,
    },
    /// The conversion kernel refused its arguments or did not launch.
    #[error("cuda device {ordinal}: {source}")]
    Kernel { ordinal: usize, source: KernelError },
    /// A request that does not fit: sizes, buffers of another device, a
    /// bad normalisation.
    #[error("cuda device {ordinal}: {reason}")]
    Invalid { ordinal: usize, reason: String },
}

impl From<CudaUnavailable> for DeviceError {
    fn from(e: CudaUnavailable) -> Self {
        Self::Unavailable(DeviceUnavailable::Cuda(e))
    }
}

/// A mapper of a driver error to [`DeviceError::Driver`] naming `call`.
pub(crate) fn driver(call: &'static str, ordinal: usize) -> impl Fn(cudarc::driver::DriverError) -> DeviceError {
    move |e| DeviceError::Driver {
        call,
        ordinal,
        reason: e.to_string(),
    }
}

/// Whether CUDA device `ordinal` can take uploads: loads libcuda and
/// libnvrtc, opens the device's primary context and compiles the
/// conversion kernels for it (the PTX is cached for [`Uploader::new`]).
/// Without a usable device the error says what is missing; a panic inside
/// cudarc's loader is caught and reported the same way.
pub fn probe(ordinal: usize) -> Result<DeviceInfo, DeviceUnavailable> {
    catch_cuda_panic(|| {
        let ctx = open_context(ordinal)?;
        let drv = |e: cudarc::driver::DriverError| CudaUnavailable::Driver {
            ordinal,
            reason: e.to_string(),
        };
        let name = ctx.name().map_err(drv)?;
        let compute_capability = ctx.compute_capability().map_err(drv)?;
        let memory_bytes = ctx.total_mem().map_err(drv)?;
        check_nvrtc()?;
        let (major, minor) = compute_capability;
        ptx_for(&CONVERT, major, minor).map_err(|e| DeviceUnavailable::Kernels {
            ordinal,
            reason: e.to_string(),
        })?;
        Ok(DeviceInfo {
            ordinal,
            name,
            compute_capability,
            memory_bytes,
        })
    })
}

/// Runs `f`, then makes the thread's current CUDA context what it was
/// before. cudarc binds a batch's context to the calling thread; a
/// consumer (PyTorch on another device, say) keeps its own current device.
/// Only call this on a thread where CUDA is already loaded (a batch exists).
pub fn keeping_current_context<T>(f: impl FnOnce() -> T) -> T {
    let before = cudarc::driver::result::ctx::get_current();
    let out = f();
    if let Ok(ctx) = before {
        // SAFETY: `ctx` was current on this thread a moment ago (or null,
        // which unbinds): a live context, since `f` cannot destroy a
        // primary context the caller still uses.
        if let Err(e) = unsafe { cudarc::driver::result::ctx::set_current(ctx.unwrap_or(std::ptr::null_mut())) } {
            tracing::warn!(error = %e, "restoring the thread's current cuda context failed");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_names_what_is_missing_or_describes_the_device() {
        match probe(0) {
            Ok(info) => {
                let line = info.to_string();
                assert!(line.starts_with("cuda device 0 ") && line.contains("sm_"), "{line}");
                println!("device found: {line}");
            }
            Err(reason) => {
                let text = reason.to_string();
                assert!(text.starts_with("no ") || text.contains("fail"), "{text}");
                println!("skipped: probe_names_what_is_missing_or_describes_the_device: {text}");
            }
        }
    }

    #[test]
    fn errors_name_the_call_and_the_device() {
        // (A DriverError's text comes from libcuda, so none is formatted here.)
        let e = DeviceError::Driver {
            call: "cuMemcpyHtoDAsync of a batch",
            ordinal: 3,
            reason: "CUDA_ERROR_INVALID_VALUE".into(),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "cuMemcpyHtoDAsync of a batch failed on cuda device 3: CUDA_ERROR_INVALID_VALUE"
        );
        let e = DeviceError::from(CudaUnavailable::NoLibcuda);
        assert!(e.to_string().starts_with("no libcuda"), "{e}");
    }
}
