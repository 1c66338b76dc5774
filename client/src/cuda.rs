//! How the client's CUDA calls fail: the errors shared by the pinned ring
//! (`pinned`, host memory allocated through CUDA) and the device upload
//! (`device`, which re-exports them), so that neither side depends on the
//! other for them.

use stoker_cuda::{CudaUnavailable, KernelError};

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

#[cfg(test)]
mod tests {
    use super::*;

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
