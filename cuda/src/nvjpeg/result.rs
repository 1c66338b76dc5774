//! Checked nvJPEG calls: each wraps one raw function of [`super::sys`] and
//! turns its status into a `Result` whose error names the call and the
//! status.

use std::ffi::c_int;
use std::fmt;

use super::sys::{self, Nvjpeg, nvjpegHandle_t, nvjpegImage_t, nvjpegJpegState_t, nvjpegJpegStream_t};

/// A failed nvJPEG call: which one, and the status it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {}", status_name(*.status))]
pub struct NvjpegError {
    pub call: &'static str,
    pub status: sys::nvjpegStatus_t,
}

/// The `nvjpegStatus_t` constant's name.
pub(crate) fn status_name(status: sys::nvjpegStatus_t) -> StatusName {
    StatusName(status)
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct StatusName(sys::nvjpegStatus_t);

impl fmt::Display for StatusName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            sys::NVJPEG_STATUS_SUCCESS => "NVJPEG_STATUS_SUCCESS",
            sys::NVJPEG_STATUS_NOT_INITIALIZED => "NVJPEG_STATUS_NOT_INITIALIZED",
            sys::NVJPEG_STATUS_INVALID_PARAMETER => "NVJPEG_STATUS_INVALID_PARAMETER",
            sys::NVJPEG_STATUS_BAD_JPEG => "NVJPEG_STATUS_BAD_JPEG",
            sys::NVJPEG_STATUS_JPEG_NOT_SUPPORTED => "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
            sys::NVJPEG_STATUS_ALLOCATOR_FAILURE => "NVJPEG_STATUS_ALLOCATOR_FAILURE",
            sys::NVJPEG_STATUS_EXECUTION_FAILED => "NVJPEG_STATUS_EXECUTION_FAILED",
            sys::NVJPEG_STATUS_ARCH_MISMATCH => "NVJPEG_STATUS_ARCH_MISMATCH",
            sys::NVJPEG_STATUS_INTERNAL_ERROR => "NVJPEG_STATUS_INTERNAL_ERROR",
            sys::NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED => "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
            sys::NVJPEG_STATUS_INCOMPLETE_BITSTREAM => "NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
            other => return write!(f, "nvjpeg status {other}"),
        };
        f.write_str(name)
    }
}

fn check(call: &'static str, status: sys::nvjpegStatus_t) -> Result<(), NvjpegError> {
    if status == sys::NVJPEG_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(NvjpegError { call, status })
    }
}

/// The library's (major, minor, patch) version.
pub(crate) fn version(lib: &Nvjpeg) -> Result<(i32, i32, i32), NvjpegError> {
    let mut v = [0 as c_int; 3];
    for (slot, property) in v
        .iter_mut()
        .zip([sys::MAJOR_VERSION, sys::MINOR_VERSION, sys::PATCH_LEVEL])
    {
        // SAFETY: `slot` is a valid place for one int; the call only writes it.
        check("nvjpegGetProperty", unsafe { (lib.nvjpegGetProperty)(property, slot) })?;
    }
    Ok((v[0], v[1], v[2]))
}

/// `nvjpegCreateEx(backend, NULL, NULL, 0, &handle)`: default allocators.
pub(crate) fn create_ex(lib: &Nvjpeg, backend: sys::nvjpegBackend_t) -> Result<nvjpegHandle_t, NvjpegError> {
    let mut handle: nvjpegHandle_t = std::ptr::null_mut();
    // SAFETY: null allocators select nvJPEG's defaults; `handle` is a valid
    // out-pointer.
    check("nvjpegCreateEx", unsafe {
        (lib.nvjpegCreateEx)(backend, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut handle)
    })?;
    Ok(handle)
}

/// # Safety
///
/// `handle` came from [`create_ex`], is not used again, and every state and
/// stream made from it is destroyed already.
pub(crate) unsafe fn destroy(lib: &Nvjpeg, handle: nvjpegHandle_t) -> Result<(), NvjpegError> {
    // SAFETY: the caller hands over a live handle with nothing left using it.
    check("nvjpegDestroy", unsafe { (lib.nvjpegDestroy)(handle) })
}

/// # Safety
///
/// `handle` is a live handle from [`create_ex`].
pub(crate) unsafe fn state_create(lib: &Nvjpeg, handle: nvjpegHandle_t) -> Result<nvjpegJpegState_t, NvjpegError> {
    let mut state: nvjpegJpegState_t = std::ptr::null_mut();
    // SAFETY: `handle` is live (caller); `state` is a valid out-pointer.
    check("nvjpegJpegStateCreate", unsafe {
        (lib.nvjpegJpegStateCreate)(handle, &mut state)
    })?;
    Ok(state)
}

/// # Safety
///
/// `state` came from [`state_create`] and is not used again.
pub(crate) unsafe fn state_destroy(lib: &Nvjpeg, state: nvjpegJpegState_t) -> Result<(), NvjpegError> {
    // SAFETY: the caller hands over a live state that nothing uses again.
    check("nvjpegJpegStateDestroy", unsafe { (lib.nvjpegJpegStateDestroy)(state) })
}

/// What `nvjpegGetImageInfo` reads from a JPEG's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    pub components: u32,
    pub subsampling: sys::nvjpegChromaSubsampling_t,
    /// Width and height of the first component (the full image).
    pub width: u32,
    pub height: u32,
}

/// # Safety
///
/// `handle` is a live handle from [`create_ex`].
pub(crate) unsafe fn get_image_info(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
    data: &[u8],
) -> Result<ImageInfo, NvjpegError> {
    let mut components: c_int = 0;
    let mut subsampling: sys::nvjpegChromaSubsampling_t = 0;
    let mut widths = [0 as c_int; sys::NVJPEG_MAX_COMPONENT];
    let mut heights = [0 as c_int; sys::NVJPEG_MAX_COMPONENT];
    // SAFETY: `data` is readable for its length; the out-arrays hold
    // NVJPEG_MAX_COMPONENT ints as the call requires.
    check("nvjpegGetImageInfo", unsafe {
        (lib.nvjpegGetImageInfo)(
            handle,
            data.as_ptr(),
            data.len(),
            &mut components,
            &mut subsampling,
            widths.as_mut_ptr(),
            heights.as_mut_ptr(),
        )
    })?;
    Ok(ImageInfo {
        components: components.max(0) as u32,
        subsampling,
        width: widths[0].max(0) as u32,
        height: heights[0].max(0) as u32,
    })
}

/// Single-image decode.
///
/// # Safety
///
/// `handle` and `state` are live and belong together; `out` describes
/// device memory in the current CUDA context large enough for the image in
/// the requested format; `stream` is a stream of that context (or null).
/// The decode may still run on `stream` when this returns.
pub(crate) unsafe fn decode(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
    state: nvjpegJpegState_t,
    data: &[u8],
    format: sys::nvjpegOutputFormat_t,
    out: &mut nvjpegImage_t,
    stream: sys::cudaStream_t,
) -> Result<(), NvjpegError> {
    // SAFETY: the caller's promises above, and `data` is readable.
    check("nvjpegDecode", unsafe {
        (lib.nvjpegDecode)(handle, state, data.as_ptr(), data.len(), format, out, stream)
    })
}

/// # Safety
///
/// `handle` and `state` are live and belong together.
pub(crate) unsafe fn decode_batched_initialize(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
    state: nvjpegJpegState_t,
    batch_size: usize,
    max_cpu_threads: usize,
    format: sys::nvjpegOutputFormat_t,
) -> Result<(), NvjpegError> {
    let batch = c_int::try_from(batch_size).map_err(|_| NvjpegError {
        call: "nvjpegDecodeBatchedInitialize",
        status: sys::NVJPEG_STATUS_INVALID_PARAMETER,
    })?;
    let threads = c_int::try_from(max_cpu_threads).unwrap_or(c_int::MAX);
    // SAFETY: live handle and state (caller); plain integers.
    check("nvjpegDecodeBatchedInitialize", unsafe {
        (lib.nvjpegDecodeBatchedInitialize)(handle, state, batch, threads, format)
    })
}

/// Batched decode of `data.len()` images into `out`.
///
/// # Safety
///
/// As [`decode`], for every image; the batch was initialised with
/// [`decode_batched_initialize`] for `data.len()` images, and
/// `out.len() == data.len()`.
pub(crate) unsafe fn decode_batched(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
    state: nvjpegJpegState_t,
    data: &[&[u8]],
    out: &mut [nvjpegImage_t],
    stream: sys::cudaStream_t,
) -> Result<(), NvjpegError> {
    if data.len() != out.len() {
        return Err(NvjpegError {
            call: "nvjpegDecodeBatched",
            status: sys::NVJPEG_STATUS_INVALID_PARAMETER,
        });
    }
    let ptrs: Vec<*const u8> = data.iter().map(|d| d.as_ptr()).collect();
    let lengths: Vec<usize> = data.iter().map(|d| d.len()).collect();
    // SAFETY: the pointer and length arrays have one entry per image and
    // live across the call; the caller vouches for handle, state, outputs
    // and stream.
    check("nvjpegDecodeBatched", unsafe {
        (lib.nvjpegDecodeBatched)(handle, state, ptrs.as_ptr(), lengths.as_ptr(), out.as_mut_ptr(), stream)
    })
}

/// # Safety
///
/// `handle` is a live handle from [`create_ex`].
pub(crate) unsafe fn jpeg_stream_create(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
) -> Result<nvjpegJpegStream_t, NvjpegError> {
    let mut stream: nvjpegJpegStream_t = std::ptr::null_mut();
    // SAFETY: live handle (caller); valid out-pointer.
    check("nvjpegJpegStreamCreate", unsafe {
        (lib.nvjpegJpegStreamCreate)(handle, &mut stream)
    })?;
    Ok(stream)
}

/// # Safety
///
/// `stream` came from [`jpeg_stream_create`] and is not used again.
pub(crate) unsafe fn jpeg_stream_destroy(lib: &Nvjpeg, stream: nvjpegJpegStream_t) -> Result<(), NvjpegError> {
    // SAFETY: the caller hands over a live stream that nothing uses again.
    check("nvjpegJpegStreamDestroy", unsafe {
        (lib.nvjpegJpegStreamDestroy)(stream)
    })
}

/// Parses only the headers of `data` into `stream` (up to the first scan,
/// not the entropy-coded data): enough to ask
/// [`decode_batched_supported`].
///
/// # Safety
///
/// `handle` and `stream` are live and belong together.
pub(crate) unsafe fn jpeg_stream_parse_header(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
    data: &[u8],
    stream: nvjpegJpegStream_t,
) -> Result<(), NvjpegError> {
    // SAFETY: `data` is readable for its length; the caller vouches for the
    // handle and stream.
    check("nvjpegJpegStreamParseHeader", unsafe {
        (lib.nvjpegJpegStreamParseHeader)(handle, data.as_ptr(), data.len(), stream)
    })
}

/// Whether the handle's backend can take the parsed JPEG in a batched
/// decode.
///
/// # Safety
///
/// `handle` and `stream` are live and belong together; `stream` holds a
/// parsed JPEG.
pub(crate) unsafe fn decode_batched_supported(
    lib: &Nvjpeg,
    handle: nvjpegHandle_t,
    stream: nvjpegJpegStream_t,
) -> Result<bool, NvjpegError> {
    let mut unsupported: c_int = 1;
    // SAFETY: the caller's promises; valid out-pointer.
    check("nvjpegDecodeBatchedSupported", unsafe {
        (lib.nvjpegDecodeBatchedSupported)(handle, stream, &mut unsupported)
    })?;
    // nvJPEG reports 0 for "supported".
    Ok(unsupported == 0)
}
