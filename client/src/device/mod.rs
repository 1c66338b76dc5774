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
//!   device has completed. It is host memory and lives on the host side
//!   (`pinned`), which this module builds on, never the other way round.
//! - [`Uploader`]: a side stream on the device's primary context (the one
//!   PyTorch uses, so device pointers are valid there), a staging buffer and
//!   the conversion kernels of `stoker-cuda` ([`UploadSpec`]: layout,
//!   dtype, mean, std).
//! - [`DeviceBatch`]: the converted batch on the device, with its ready
//!   event; a consumer stream waits on it with [`DeviceBatch::wait_on`].
//!   Its drop frees the memory on the side stream, after everything queued
//!   so far on those consumer streams.
//!
//! The uploader also copies, on the device, the rows a GPU worker in this
//! process left there (`Batch::on_device`, taken from the loader's
//! `stoker_cuda::handoff` sink by `wire/chunks.rs`).
//!
//! CUDA is loaded at run time, as in the worker: nothing CUDA is needed to
//! build or run the client, and without a GPU [`probe`] says why, so the
//! loader can yield host batches instead. How CUDA calls fail
//! ([`DeviceError`], [`DeviceUnavailable`]) is shared with the pinned ring
//! (`cuda`).

mod upload;

pub use crate::cuda::{DeviceError, DeviceUnavailable};
pub use crate::pinned::{PinnedBuf, PinnedPool};
pub use cudarc::driver::sys::CUstream;
pub use stoker_cuda::{CudaUnavailable, DType, DeviceInfo, ForeignStream, Layout, POOL_KEEP_BYTES};
pub use upload::{DeviceBatch, UploadSpec, Uploader};

use crate::cuda::driver;
use stoker_cuda::{CONVERT, catch_cuda_panic, check_nvrtc, open_context, ptx_for};

/// Whether CUDA device `ordinal` can take uploads: loads libcuda and
/// libnvrtc, opens the device's primary context and compiles the
/// conversion kernels for it (the PTX is cached for [`Uploader::new`]).
/// Without a usable device the error says what is missing; a panic inside
/// cudarc's loader is caught and reported the same way.
pub fn probe(ordinal: usize) -> Result<DeviceInfo, DeviceUnavailable> {
    catch_cuda_panic(|| {
        let ctx = open_context(ordinal)?;
        let info = DeviceInfo::of(&ctx)?;
        check_nvrtc()?;
        let (major, minor) = info.compute_capability;
        ptx_for(&CONVERT, major, minor).map_err(|e| DeviceUnavailable::Kernels {
            ordinal,
            reason: e.to_string(),
        })?;
        Ok(info)
    })
}

pub use stoker_cuda::keeping_current_context;

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
}
