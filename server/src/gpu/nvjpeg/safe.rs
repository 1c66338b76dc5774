//! Owning nvJPEG objects: each frees what it holds on drop, and keeps the
//! objects it was made from alive.

use std::sync::Arc;

use super::result::{self, ImageInfo, NvjpegError};
use super::sys::{self, Nvjpeg, nvjpegImage_t};

/// Which decoding engine a handle drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The hardware JPEG engine (A100, H100, H200...).
    Hardware,
    /// nvJPEG's default choice: CUDA, with Huffman decoding on the CPU or
    /// the GPU.
    Default,
}

impl Backend {
    fn raw(self) -> sys::nvjpegBackend_t {
        match self {
            Backend::Hardware => sys::NVJPEG_BACKEND_HARDWARE,
            Backend::Default => sys::NVJPEG_BACKEND_DEFAULT,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Hardware => "hardware",
            Backend::Default => "cuda",
        }
    }
}

/// An `nvjpegHandle_t`.
#[derive(Debug)]
pub(crate) struct Handle {
    lib: &'static Nvjpeg,
    raw: sys::nvjpegHandle_t,
    backend: Backend,
}

// SAFETY: nvJPEG documents the library handle as thread safe; Stoker never
// shares a jpeg state (which is not) between threads at once.
unsafe impl Send for Handle {}
// SAFETY: as above: calls on one handle from several threads are allowed.
unsafe impl Sync for Handle {}

impl Handle {
    /// A handle for `backend` with nvJPEG's default allocators. The current
    /// thread must have the CUDA context to decode into bound.
    pub(crate) fn new(lib: &'static Nvjpeg, backend: Backend) -> Result<Arc<Self>, NvjpegError> {
        let raw = result::create_ex(lib, backend.raw())?;
        Ok(Arc::new(Self { lib, raw, backend }))
    }

    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// Components, subsampling and size from the JPEG's header.
    pub(crate) fn image_info(&self, data: &[u8]) -> Result<ImageInfo, NvjpegError> {
        // SAFETY: `self.raw` is live for as long as `self`.
        unsafe { result::get_image_info(self.lib, self.raw, data) }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: states and streams hold an `Arc<Handle>`, so none is left
        // when the handle drops; the raw handle is not used again.
        let _ = unsafe { result::destroy(self.lib, self.raw) };
    }
}

/// An `nvjpegJpegState_t`: per-decoder scratch, not to be shared.
#[derive(Debug)]
pub(crate) struct JpegState {
    handle: Arc<Handle>,
    raw: sys::nvjpegJpegState_t,
}

// SAFETY: a state may move between threads; `&mut self` on every use keeps
// it to one thread at a time.
unsafe impl Send for JpegState {}

impl JpegState {
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<Self, NvjpegError> {
        // SAFETY: the handle is live while the Arc is held.
        let raw = unsafe { result::state_create(handle.lib, handle.raw) }?;
        Ok(Self {
            handle: handle.clone(),
            raw,
        })
    }
}

impl Drop for JpegState {
    fn drop(&mut self) {
        // SAFETY: the state is live, nothing else holds it, and its handle
        // outlives it (we hold an Arc).
        let _ = unsafe { result::state_destroy(self.handle.lib, self.raw) };
    }
}

/// An `nvjpegJpegStream_t`, used to ask whether a backend takes a JPEG.
#[derive(Debug)]
pub(crate) struct JpegStream {
    handle: Arc<Handle>,
    raw: sys::nvjpegJpegStream_t,
}

// SAFETY: as for `JpegState`: moved between threads, used through `&mut`.
unsafe impl Send for JpegStream {}

impl JpegStream {
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<Self, NvjpegError> {
        // SAFETY: the handle is live while the Arc is held.
        let raw = unsafe { result::jpeg_stream_create(handle.lib, handle.raw) }?;
        Ok(Self {
            handle: handle.clone(),
            raw,
        })
    }

    /// Parses `data`'s headers and says whether the handle's backend can
    /// decode it in a batch. A JPEG whose headers do not parse is an error.
    /// Only the headers are read (the batched decode reads the rest).
    pub(crate) fn batched_supported(&mut self, data: &[u8]) -> Result<bool, NvjpegError> {
        // SAFETY: handle and stream are live and belong together.
        unsafe { result::jpeg_stream_parse_header(self.handle.lib, self.handle.raw, data, self.raw) }?;
        // SAFETY: as above; the stream now holds a parsed JPEG.
        unsafe { result::decode_batched_supported(self.handle.lib, self.handle.raw, self.raw) }
    }
}

impl Drop for JpegStream {
    fn drop(&mut self) {
        // SAFETY: the stream is live, nothing else holds it, and its handle
        // outlives it.
        let _ = unsafe { result::jpeg_stream_destroy(self.handle.lib, self.raw) };
    }
}

/// A handle's decoder: its own state, batched and single-image decode to
/// interleaved RGB.
#[derive(Debug)]
pub(crate) struct Decoder {
    handle: Arc<Handle>,
    state: JpegState,
    batch_size: Option<usize>,
}

impl Decoder {
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<Self, NvjpegError> {
        Ok(Self {
            handle: handle.clone(),
            state: JpegState::new(handle)?,
            batch_size: None,
        })
    }

    pub(crate) fn handle(&self) -> &Arc<Handle> {
        &self.handle
    }

    /// Decodes `data[i]` into `out[i]` as interleaved RGB, in one batch.
    ///
    /// # Safety
    ///
    /// `out.len() == data.len()`; each `out[i].channel[0]` points to device
    /// memory of the CUDA context current on this thread, of at least
    /// `pitch[0] * height` bytes with `pitch[0] >= 3 * width` for image
    /// `i`'s size, that stays alive until the work on `stream` finishes;
    /// `stream` is a stream of that context.
    pub(crate) unsafe fn decode_batched_rgbi(
        &mut self,
        data: &[&[u8]],
        out: &mut [nvjpegImage_t],
        stream: sys::cudaStream_t,
    ) -> Result<(), NvjpegError> {
        let lib = self.handle.lib;
        if self.batch_size != Some(data.len()) {
            self.batch_size = None;
            // SAFETY: handle and state are live and belong together.
            unsafe {
                result::decode_batched_initialize(
                    lib,
                    self.handle.raw,
                    self.state.raw,
                    data.len(),
                    1,
                    sys::NVJPEG_OUTPUT_RGBI,
                )
            }?;
            self.batch_size = Some(data.len());
        }
        // SAFETY: initialised for this batch size above; the caller vouches
        // for the outputs and the stream.
        unsafe { result::decode_batched(lib, self.handle.raw, self.state.raw, data, out, stream) }
    }

    /// Decodes one JPEG into `out` as interleaved RGB.
    ///
    /// # Safety
    ///
    /// As [`Decoder::decode_batched_rgbi`], for one image.
    pub(crate) unsafe fn decode_rgbi(
        &mut self,
        data: &[u8],
        out: &mut nvjpegImage_t,
        stream: sys::cudaStream_t,
    ) -> Result<(), NvjpegError> {
        // SAFETY: handle and state are live and belong together; the caller
        // vouches for the output and the stream.
        unsafe {
            result::decode(
                self.handle.lib,
                self.handle.raw,
                self.state.raw,
                data,
                sys::NVJPEG_OUTPUT_RGBI,
                out,
                stream,
            )
        }
    }
}
