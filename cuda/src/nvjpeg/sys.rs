//! Raw nvJPEG: the types, constants and the function table, loaded at run
//! time with `libloading`. Declarations follow NVIDIA's nvJPEG
//! documentation (`nvjpeg.h`, CUDA 12/13); only the calls Stoker makes are
//! listed.

#![allow(non_camel_case_types, non_snake_case, reason = "names as nvjpeg.h spells them")]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

/// `nvjpegStatus_t`.
pub(crate) type nvjpegStatus_t = c_int;
pub(crate) const NVJPEG_STATUS_SUCCESS: nvjpegStatus_t = 0;
pub(crate) const NVJPEG_STATUS_NOT_INITIALIZED: nvjpegStatus_t = 1;
pub(crate) const NVJPEG_STATUS_INVALID_PARAMETER: nvjpegStatus_t = 2;
pub(crate) const NVJPEG_STATUS_BAD_JPEG: nvjpegStatus_t = 3;
pub(crate) const NVJPEG_STATUS_JPEG_NOT_SUPPORTED: nvjpegStatus_t = 4;
pub(crate) const NVJPEG_STATUS_ALLOCATOR_FAILURE: nvjpegStatus_t = 5;
pub(crate) const NVJPEG_STATUS_EXECUTION_FAILED: nvjpegStatus_t = 6;
pub(crate) const NVJPEG_STATUS_ARCH_MISMATCH: nvjpegStatus_t = 7;
pub(crate) const NVJPEG_STATUS_INTERNAL_ERROR: nvjpegStatus_t = 8;
pub(crate) const NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: nvjpegStatus_t = 9;
pub(crate) const NVJPEG_STATUS_INCOMPLETE_BITSTREAM: nvjpegStatus_t = 10;

/// `nvjpegBackend_t`.
pub(crate) type nvjpegBackend_t = c_int;
pub(crate) const NVJPEG_BACKEND_DEFAULT: nvjpegBackend_t = 0;
#[allow(
    dead_code,
    reason = "the C enum in full; the worker uses the default and hardware backends"
)]
pub(crate) const NVJPEG_BACKEND_HYBRID: nvjpegBackend_t = 1;
#[allow(
    dead_code,
    reason = "the C enum in full; the worker uses the default and hardware backends"
)]
pub(crate) const NVJPEG_BACKEND_GPU_HYBRID: nvjpegBackend_t = 2;
pub(crate) const NVJPEG_BACKEND_HARDWARE: nvjpegBackend_t = 3;

/// `nvjpegOutputFormat_t`.
pub(crate) type nvjpegOutputFormat_t = c_int;
/// Interleaved RGB in `channel[0]`.
pub(crate) const NVJPEG_OUTPUT_RGBI: nvjpegOutputFormat_t = 5;

/// `nvjpegChromaSubsampling_t`.
pub(crate) type nvjpegChromaSubsampling_t = c_int;

/// `libraryPropertyType` (from CUDA's library_types.h).
pub(crate) type libraryPropertyType = c_int;
pub(crate) const MAJOR_VERSION: libraryPropertyType = 0;
pub(crate) const MINOR_VERSION: libraryPropertyType = 1;
pub(crate) const PATCH_LEVEL: libraryPropertyType = 2;

/// `NVJPEG_MAX_COMPONENT`.
pub(crate) const NVJPEG_MAX_COMPONENT: usize = 4;

/// `nvjpegImage_t`: one plane pointer and row pitch per component.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct nvjpegImage_t {
    pub channel: [*mut u8; NVJPEG_MAX_COMPONENT],
    pub pitch: [usize; NVJPEG_MAX_COMPONENT],
}

impl Default for nvjpegImage_t {
    fn default() -> Self {
        Self {
            channel: [std::ptr::null_mut(); NVJPEG_MAX_COMPONENT],
            pitch: [0; NVJPEG_MAX_COMPONENT],
        }
    }
}

/// Opaque handles.
pub(crate) type nvjpegHandle_t = *mut c_void;
pub(crate) type nvjpegJpegState_t = *mut c_void;
pub(crate) type nvjpegJpegStream_t = *mut c_void;
/// `cudaStream_t`, the same object as the driver's `CUstream`.
pub(crate) type cudaStream_t = *mut c_void;

/// The functions Stoker calls, resolved from the loaded library.
#[derive(Debug)]
pub(crate) struct Nvjpeg {
    /// The file name that was opened (`libnvjpeg.so.13`...).
    pub soname: &'static str,
    pub nvjpegGetProperty: unsafe extern "C" fn(libraryPropertyType, *mut c_int) -> nvjpegStatus_t,
    pub nvjpegCreateEx:
        unsafe extern "C" fn(nvjpegBackend_t, *mut c_void, *mut c_void, c_uint, *mut nvjpegHandle_t) -> nvjpegStatus_t,
    pub nvjpegDestroy: unsafe extern "C" fn(nvjpegHandle_t) -> nvjpegStatus_t,
    pub nvjpegJpegStateCreate: unsafe extern "C" fn(nvjpegHandle_t, *mut nvjpegJpegState_t) -> nvjpegStatus_t,
    pub nvjpegJpegStateDestroy: unsafe extern "C" fn(nvjpegJpegState_t) -> nvjpegStatus_t,
    pub nvjpegGetImageInfo: unsafe extern "C" fn(
        nvjpegHandle_t,
        *const u8,
        usize,
        *mut c_int,
        *mut nvjpegChromaSubsampling_t,
        *mut c_int,
        *mut c_int,
    ) -> nvjpegStatus_t,
    pub nvjpegDecode: unsafe extern "C" fn(
        nvjpegHandle_t,
        nvjpegJpegState_t,
        *const u8,
        usize,
        nvjpegOutputFormat_t,
        *mut nvjpegImage_t,
        cudaStream_t,
    ) -> nvjpegStatus_t,
    pub nvjpegDecodeBatchedInitialize:
        unsafe extern "C" fn(nvjpegHandle_t, nvjpegJpegState_t, c_int, c_int, nvjpegOutputFormat_t) -> nvjpegStatus_t,
    pub nvjpegDecodeBatched: unsafe extern "C" fn(
        nvjpegHandle_t,
        nvjpegJpegState_t,
        *const *const u8,
        *const usize,
        *mut nvjpegImage_t,
        cudaStream_t,
    ) -> nvjpegStatus_t,
    pub nvjpegJpegStreamCreate: unsafe extern "C" fn(nvjpegHandle_t, *mut nvjpegJpegStream_t) -> nvjpegStatus_t,
    pub nvjpegJpegStreamDestroy: unsafe extern "C" fn(nvjpegJpegStream_t) -> nvjpegStatus_t,
    pub nvjpegDecodeBatchedSupported:
        unsafe extern "C" fn(nvjpegHandle_t, nvjpegJpegStream_t, *mut c_int) -> nvjpegStatus_t,
    pub nvjpegJpegStreamParseHeader:
        unsafe extern "C" fn(nvjpegHandle_t, *const u8, usize, nvjpegJpegStream_t) -> nvjpegStatus_t,
    /// Keeps the function pointers above valid.
    _library: libloading::Library,
}

/// Library names tried, in order.
pub(crate) const SONAMES: &[&str] = &["libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"];

/// Opens libnvjpeg and resolves every function, once per process.
pub(crate) fn lib() -> Result<&'static Nvjpeg, String> {
    static LIB: OnceLock<Result<Nvjpeg, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Nvjpeg, String> {
    let mut tried = Vec::new();
    for &soname in SONAMES {
        // SAFETY: loading libnvjpeg runs its initialisers, which only set up
        // the library's own state; it is a CUDA library meant to be loaded
        // into any process that uses CUDA.
        match unsafe { libloading::Library::new(soname) } {
            Ok(library) => return resolve(soname, library),
            Err(e) => tried.push(format!("{soname}: {e}")),
        }
    }
    Err(format!("libnvjpeg not found (tried {})", tried.join("; ")))
}

fn resolve(soname: &'static str, library: libloading::Library) -> Result<Nvjpeg, String> {
    macro_rules! get {
        ($name:ident) => {{
            let symbol = concat!(stringify!($name), "\0");
            // SAFETY: the field's type is the function's C signature as
            // nvjpeg.h declares it; the pointer stays valid while `library`
            // lives, and it lives in the same struct.
            match unsafe { library.get(symbol.as_bytes()) } {
                Ok(f) => *f,
                Err(e) => return Err(format!("{soname} has no {}: {e}", stringify!($name))),
            }
        }};
    }
    Ok(Nvjpeg {
        soname,
        nvjpegGetProperty: get!(nvjpegGetProperty),
        nvjpegCreateEx: get!(nvjpegCreateEx),
        nvjpegDestroy: get!(nvjpegDestroy),
        nvjpegJpegStateCreate: get!(nvjpegJpegStateCreate),
        nvjpegJpegStateDestroy: get!(nvjpegJpegStateDestroy),
        nvjpegGetImageInfo: get!(nvjpegGetImageInfo),
        nvjpegDecode: get!(nvjpegDecode),
        nvjpegDecodeBatchedInitialize: get!(nvjpegDecodeBatchedInitialize),
        nvjpegDecodeBatched: get!(nvjpegDecodeBatched),
        nvjpegJpegStreamCreate: get!(nvjpegJpegStreamCreate),
        nvjpegJpegStreamDestroy: get!(nvjpegJpegStreamDestroy),
        nvjpegDecodeBatchedSupported: get!(nvjpegDecodeBatchedSupported),
        nvjpegJpegStreamParseHeader: get!(nvjpegJpegStreamParseHeader),
        _library: library,
    })
}
