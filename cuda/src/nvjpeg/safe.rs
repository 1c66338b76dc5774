//! Owning nvJPEG objects: each frees what it holds on drop, and keeps the
//! objects it was made from alive.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtrMut};

use super::result::{self, ImageInfo, NvjpegError};
use super::sys::{self, Nvjpeg, nvjpegImage_t};
use crate::DeviceImage;

/// libnvjpeg, loaded once per process (`libnvjpeg.so.13`, then `.so.12`,
/// then `.so`).
#[derive(Clone, Copy, Debug)]
pub struct Library(&'static Nvjpeg);

impl Library {
    /// Loads the library and resolves every function, or says why not
    /// (each file name tried, and its error).
    pub fn open() -> Result<Self, String> {
        sys::lib().map(Self)
    }

    /// The file name that was opened.
    pub fn soname(&self) -> &'static str {
        self.0.soname
    }

    /// The library's (major, minor, patch) version.
    pub fn version(&self) -> Result<(i32, i32, i32), NvjpegError> {
        result::version(self.0)
    }
}

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
pub struct Handle {
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
    pub fn new(lib: Library, backend: Backend) -> Result<Arc<Self>, NvjpegError> {
        let lib = lib.0;
        let raw = result::create_ex(lib, backend.raw())?;
        Ok(Arc::new(Self { lib, raw, backend }))
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Components, subsampling and size from the JPEG's header.
    pub fn image_info(&self, data: &[u8]) -> Result<ImageInfo, NvjpegError> {
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
struct JpegState {
    handle: Arc<Handle>,
    raw: sys::nvjpegJpegState_t,
}

// SAFETY: a state may move between threads; `&mut self` on every use keeps
// it to one thread at a time.
unsafe impl Send for JpegState {}

impl JpegState {
    fn new(handle: &Arc<Handle>) -> Result<Self, NvjpegError> {
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
pub struct JpegStream {
    handle: Arc<Handle>,
    raw: sys::nvjpegJpegStream_t,
}

// SAFETY: as for `JpegState`: moved between threads, used through `&mut`.
unsafe impl Send for JpegStream {}

impl JpegStream {
    pub fn new(handle: &Arc<Handle>) -> Result<Self, NvjpegError> {
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
    pub fn batched_supported(&mut self, data: &[u8]) -> Result<bool, NvjpegError> {
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
pub struct Decoder {
    handle: Arc<Handle>,
    state: JpegState,
    batch_size: Option<usize>,
}

impl Decoder {
    pub fn new(handle: &Arc<Handle>) -> Result<Self, NvjpegError> {
        Ok(Self {
            handle: handle.clone(),
            state: JpegState::new(handle)?,
            batch_size: None,
        })
    }

    pub fn handle(&self) -> &Arc<Handle> {
        &self.handle
    }

    /// Decodes `data[i]` into `out[i]` as interleaved RGB, in one batch
    /// queued on `stream`; each output is checked against its JPEG's
    /// header first (its size, and a buffer that holds its rows), and
    /// must be of `stream`'s context, which is bound to this thread.
    pub fn decode_batched_rgbi(
        &mut self,
        data: &[&[u8]],
        out: &mut [&mut DeviceImage],
        stream: &Arc<CudaStream>,
    ) -> Result<(), NvjpegError> {
        let call = "nvjpegDecodeBatched";
        if data.len() != out.len() {
            return Err(invalid(call));
        }
        for (jpeg, img) in data.iter().zip(out.iter()) {
            self.check_output(call, jpeg, img, stream)?;
        }
        bind(call, stream)?;
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
        let mut guards = Vec::with_capacity(out.len());
        let mut images = Vec::with_capacity(out.len());
        for img in out.iter_mut() {
            let pitch = img.pitch as usize;
            let (ptr, guard) = img.buf.device_ptr_mut(stream);
            guards.push(guard);
            let mut raw = nvjpegImage_t::default();
            raw.channel[0] = ptr as *mut u8;
            raw.pitch[0] = pitch;
            images.push(raw);
        }
        // SAFETY: initialised for this batch size above; each output is a
        // device allocation of the context bound to this thread (checked
        // above) holding the rows of the size its JPEG's header gives,
        // borrowed mutably until this returns, after the decode is queued on
        // `stream`, which orders every later use of it.
        let r = unsafe {
            result::decode_batched(
                lib,
                self.handle.raw,
                self.state.raw,
                data,
                &mut images,
                cu_stream(stream),
            )
        };
        drop(guards);
        r
    }

    /// Decodes one JPEG into `out` as interleaved RGB, queued on `stream`,
    /// with the checks of [`Decoder::decode_batched_rgbi`].
    pub fn decode_rgbi(
        &mut self,
        data: &[u8],
        out: &mut DeviceImage,
        stream: &Arc<CudaStream>,
    ) -> Result<(), NvjpegError> {
        let call = "nvjpegDecode";
        self.check_output(call, data, out, stream)?;
        bind(call, stream)?;
        let pitch = out.pitch as usize;
        let (ptr, guard) = out.buf.device_ptr_mut(stream);
        let mut raw = nvjpegImage_t::default();
        raw.channel[0] = ptr as *mut u8;
        raw.pitch[0] = pitch;
        // SAFETY: handle and state are live and belong together; the output
        // is as in `decode_batched_rgbi`, checked above.
        let r = unsafe {
            result::decode(
                self.handle.lib,
                self.handle.raw,
                self.state.raw,
                data,
                sys::NVJPEG_OUTPUT_RGBI,
                &mut raw,
                cu_stream(stream),
            )
        };
        drop(guard);
        r
    }

    /// That `img` holds the interleaved RGB decode of `jpeg` (the size
    /// its header gives, rows of at least 3 x width bytes in its buffer)
    /// and is of `stream`'s context (and of `stream` where the context
    /// tracks no events). The header is read here, from the bytes the
    /// decode gets, rather than taken from the caller: a size the caller
    /// could get wrong would let nvJPEG write past the buffer.
    fn check_output(
        &self,
        call: &'static str,
        jpeg: &[u8],
        img: &DeviceImage,
        stream: &Arc<CudaStream>,
    ) -> Result<(), NvjpegError> {
        let info = self.handle.image_info(jpeg)?;
        if (info.width, info.height) != (img.width, img.height)
            || img.check_rows().is_err()
            || crate::batch::same_context(call, &"the output", &img.buf, stream).is_err()
        {
            return Err(invalid(call));
        }
        Ok(())
    }
}

/// Binds `stream`'s context to this thread, once per call: nvJPEG writes
/// through the current one.
fn bind(call: &'static str, stream: &CudaStream) -> Result<(), NvjpegError> {
    stream.context().bind_to_thread().map_err(|_| invalid(call))
}

/// A call refused before it was made: its arguments would not do.
fn invalid(call: &'static str) -> NvjpegError {
    NvjpegError {
        call,
        status: sys::NVJPEG_STATUS_INVALID_PARAMETER,
    }
}

fn cu_stream(stream: &CudaStream) -> sys::cudaStream_t {
    stream.cu_stream() as sys::cudaStream_t
}
