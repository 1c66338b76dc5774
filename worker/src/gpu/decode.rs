//! Batched JPEG decode on the GPU with nvJPEG, to interleaved RGB in
//! device memory.
//!
//! The batch goes to the hardware JPEG engine when the GPU has one; JPEGs
//! the engine does not take (progressive...) go to the CUDA backend one by
//! one ([`Singles`]). A JPEG the GPU path cannot decode at all (not a JPEG,
//! corrupt, CMYK or greyscale, over the pixel limit) gets its own error, so
//! the caller can hand it to the CPU path, which decodes it or skips it
//! with the CPU worker's reason.
//!
//! An nvJPEG jpeg state is used by one lane's thread, and again only after
//! the device work of its previous decode has finished: the batched
//! decode's state once per batch (each batch ends with the lane waiting
//! for its stream), the single-image decodes' states in turns, each
//! waiting for the event recorded after its previous decode ([`Singles`]
//! says what went wrong without that wait). The hardware engine's batched
//! decode writes its outputs from a stream of nvJPEG's own, not ordered
//! after the lane's allocation of them, so the lane waits for its stream
//! (the allocations, and the frees of other streams the pool handed over)
//! before queueing it (compute-sanitizer's `--track-stream-ordered-races`
//! flagged those writes).

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use stoker_cuda::DeviceImage;
use stoker_cuda::nvjpeg::{Backend, Decoder, Handle, JpegStream, Library, NvjpegError};

use super::device::{Gpu, GpuError, driver};

/// Which of the decoder's paths an image of a batch took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodePath {
    /// In the batched decode (the hardware engine, when the GPU has one).
    Batched,
    /// Alone, on the CUDA backend: a JPEG the engine does not take
    /// (progressive...), or the retry of a batch that failed.
    Single,
    /// Not decoded: its header was refused, or its decode failed.
    Refused,
}

impl DecodePath {
    pub fn name(self) -> &'static str {
        match self {
            DecodePath::Batched => "batched",
            DecodePath::Single => "cuda-single",
            DecodePath::Refused => "refused",
        }
    }
}

/// Why one image of a batch did not decode on the GPU. The CPU path may
/// still decode it.
#[derive(Debug, thiserror::Error)]
pub enum GpuDecodeError {
    /// The checks every JPEG passes on the CPU path too (header, pixel
    /// limit, truncation) refused it.
    #[error("{0}")]
    Check(stoker_image::decode::DecodeError),
    #[error("nvjpeg cannot read the jpeg header: {0}")]
    Header(NvjpegError),
    #[error("jpeg has {0} colour components; the gpu path decodes 3")]
    Components(u32),
    #[error("jpeg of {width}x{height} is over the limit of {limit} pixels")]
    TooLarge { width: u32, height: u32, limit: u64 },
    #[error("jpeg header gives an empty image")]
    Empty,
    #[error("nvjpeg could not decode the jpeg: {0}")]
    Decode(NvjpegError),
    #[error("{0}")]
    Gpu(#[from] GpuError),
}

impl GpuDecodeError {
    /// Whether the CPU path should try the image (always, today: it either
    /// decodes it or gives the CPU worker's own reason for skipping it).
    pub fn route_to_cpu(&self) -> bool {
        true
    }
}

/// Decodes batches of JPEGs on one device and stream.
#[derive(Debug)]
pub struct GpuDecoder {
    ctx: Arc<cudarc::driver::CudaContext>,
    stream: Arc<CudaStream>,
    /// Batched decode: the hardware engine when there is one.
    batched: Decoder,
    /// The CUDA backend's handle: headers, and the single-image decodes.
    default: Arc<Handle>,
    /// Single-image decode on the CUDA backend: JPEGs the engine does not
    /// take, and the retry when a whole batch fails.
    singles: Singles,
    /// Asks the hardware engine whether it takes a JPEG.
    support: Option<JpegStream>,
    max_pixels: u64,
}

/// A JPEG whose header was read and whose output is allocated, waiting
/// for its decode.
struct PendingDecode<'a> {
    index: usize,
    data: &'a [u8],
    image: DeviceImage,
}

impl GpuDecoder {
    /// A decoder whose batches go to the backend [`super::probe`] chose.
    pub fn new(gpu: &Gpu, max_pixels: u64) -> Result<Self, GpuError> {
        Self::with_backend(gpu, gpu.info.jpeg_backend, max_pixels)
    }

    /// A decoder whose batches go to `backend` (asking for the hardware
    /// engine on a GPU without one is an error).
    pub fn with_backend(gpu: &Gpu, backend: Backend, max_pixels: u64) -> Result<Self, GpuError> {
        let lib = Library::open().map_err(GpuError::Invalid)?;
        gpu.ctx.bind_to_thread().map_err(driver("binding the context"))?;
        let default = Handle::new(lib, Backend::Default)?;
        let hardware = match backend {
            Backend::Hardware => Some(Handle::new(lib, Backend::Hardware)?),
            Backend::Default => None,
        };
        let (batched, support) = match &hardware {
            Some(hw) => (Decoder::new(hw)?, Some(JpegStream::new(hw)?)),
            None => (Decoder::new(&default)?, None),
        };
        Ok(Self {
            ctx: gpu.ctx.clone(),
            stream: gpu.stream.clone(),
            batched,
            singles: Singles::new(&default, &gpu.ctx)?,
            default,
            support,
            max_pixels,
        })
    }

    /// The backend of batched decodes.
    pub fn backend(&self) -> Backend {
        self.batched.handle().backend()
    }

    /// The stream the decodes are queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Decodes `jpegs` to device RGB, one result per input, in order. The
    /// work is queued on the decoder's stream; later work on that stream
    /// sees the pixels.
    pub fn decode_batch(&mut self, jpegs: &[&[u8]]) -> Vec<Result<DeviceImage, GpuDecodeError>> {
        self.decode_routed(jpegs).into_iter().map(|(r, _)| r).collect()
    }

    /// [`GpuDecoder::decode_batch`], with the path each image took.
    pub fn decode_routed(&mut self, jpegs: &[&[u8]]) -> Vec<(Result<DeviceImage, GpuDecodeError>, DecodePath)> {
        let mut results: Vec<Option<Result<DeviceImage, GpuDecodeError>>> = (0..jpegs.len()).map(|_| None).collect();
        let mut paths = vec![DecodePath::Refused; jpegs.len()];
        if let Err(e) = self.ctx.bind_to_thread() {
            let e = GpuError::Driver {
                what: "binding the context",
                reason: e.to_string(),
            };
            return jpegs
                .iter()
                .map(|_| {
                    (
                        Err(GpuDecodeError::Gpu(GpuError::Invalid(e.to_string()))),
                        DecodePath::Refused,
                    )
                })
                .collect();
        }
        let mut batch = Vec::new();
        let mut singles = Vec::new();
        for (index, &data) in jpegs.iter().enumerate() {
            match self.plan(data) {
                Ok((image, engine_takes_it)) => {
                    let planned = PendingDecode { index, data, image };
                    if engine_takes_it {
                        batch.push(planned);
                    } else {
                        singles.push(planned);
                    }
                }
                Err(e) => results[index] = Some(Err(e)),
            }
        }
        if !batch.is_empty() && self.backend() == Backend::Hardware {
            // The engine's batched decode writes its outputs from a stream of
            // nvJPEG's own (its RGB conversion kernel runs there), which is
            // not ordered after this stream's allocation of them
            // (compute-sanitizer's stream-ordered race tracking flagged every
            // such write): the allocations, and the frees of other streams
            // that the pool may have handed over, complete first.
            if let Err(e) = self.stream.synchronize() {
                let reason = format!("waiting for the batch's allocations: {e}");
                for p in batch.drain(..) {
                    results[p.index] = Some(Err(GpuDecodeError::Gpu(GpuError::Invalid(reason.clone()))));
                }
            }
        }
        if !batch.is_empty() {
            match self.decode_batched(&mut batch) {
                Ok(()) => {
                    for p in batch {
                        paths[p.index] = DecodePath::Batched;
                        results[p.index] = Some(Ok(p.image));
                    }
                }
                // One bad JPEG fails the whole batch: retry one by one so
                // only the bad ones fail.
                Err(_) => singles.extend(batch),
            }
        }
        for mut p in singles {
            let r = self
                .singles
                .decode(&self.stream, p.data, &mut p.image)
                .map(|()| p.image);
            if r.is_ok() {
                paths[p.index] = DecodePath::Single;
            }
            results[p.index] = Some(r);
        }
        results
            .into_iter()
            .zip(paths)
            .map(|(r, path)| {
                (
                    r.unwrap_or_else(|| Err(GpuDecodeError::Gpu(GpuError::Invalid("image was not decoded".into())))),
                    path,
                )
            })
            .collect()
    }

    /// Reads the header, checks it, allocates the output and says whether
    /// the batched backend takes the JPEG.
    fn plan(&mut self, data: &[u8]) -> Result<(DeviceImage, bool), GpuDecodeError> {
        stoker_image::decode::check_jpeg(data, self.max_pixels).map_err(GpuDecodeError::Check)?;
        let info = self.default.image_info(data).map_err(GpuDecodeError::Header)?;
        if info.components != 3 {
            return Err(GpuDecodeError::Components(info.components));
        }
        let (width, height) = (info.width, info.height);
        if width == 0 || height == 0 {
            return Err(GpuDecodeError::Empty);
        }
        if u64::from(width) * u64::from(height) > self.max_pixels {
            return Err(GpuDecodeError::TooLarge {
                width,
                height,
                limit: self.max_pixels,
            });
        }
        let engine_takes_it = match &mut self.support {
            Some(stream) => stream.batched_supported(data).map_err(GpuDecodeError::Header)?,
            None => true,
        };
        let pitch = width.checked_mul(3).ok_or(GpuDecodeError::TooLarge {
            width,
            height,
            limit: self.max_pixels,
        })?;
        // The buffer is only read after a decode reported success, and a
        // successful decode writes every pixel of its pitch x height output
        // (saving a memset per image).
        let buf = stoker_cuda::alloc_bytes(&self.stream, pitch as usize * height as usize)
            .map_err(driver("allocation of a decoded image"))?;
        Ok((
            DeviceImage {
                width,
                height,
                pitch,
                buf,
            },
            engine_takes_it,
        ))
    }

    fn decode_batched(&mut self, batch: &mut [PendingDecode<'_>]) -> Result<(), NvjpegError> {
        let data: Vec<&[u8]> = batch.iter().map(|p| p.data).collect();
        let mut out: Vec<&mut DeviceImage> = batch.iter_mut().map(|p| &mut p.image).collect();
        self.batched.decode_batched_rgbi(&data, &mut out, &self.stream)
    }
}

/// How many jpeg states the single-image decodes take turns with: while
/// the GPU still works on one state's decode, the CPU may parse the next
/// JPEG into the other's staging.
const SINGLE_STATES: usize = 2;

/// The CUDA backend's single-image decodes, in turns over
/// [`SINGLE_STATES`] jpeg states.
///
/// `nvjpegDecode` is asynchronous with respect to the host: it returns
/// once its host phase (the Huffman decode of a progressive JPEG, on the
/// CPU) is done and its device work is queued on the stream. What the
/// state holds between the two phases (its page-locked staging: nvJPEG's
/// decoupled API says the same of an attached pinned buffer) must not be
/// rewritten until that device work has run, and the state's next decode
/// rewrites it. So a state is used again only once its previous decode has
/// finished on the stream: each state's `done` event is recorded after its
/// decode and waited for before the state's next one.
///
/// Without the wait, when other lanes kept the GPU busy so that a lane's
/// stream ran behind its thread, 23 and 6 of 4,720 single decodes (two
/// runs) came out as a different image
/// (`gpu_parity::gpu_single_decodes_on_busy_lanes_match_each_decoded_alone`);
/// with it, none. A global lock around the host calls did not stop it (a
/// host-side race between lanes), nor did turning off the pool's reuse of
/// memory across streams (device memory); a wait for the stream after each
/// decode did.
#[derive(Debug)]
struct Singles {
    states: Vec<SingleState>,
    next: usize,
}

#[derive(Debug)]
struct SingleState {
    decoder: Decoder,
    /// Recorded on the stream after the state's last decode (waiting for
    /// one never recorded returns at once).
    done: CudaEvent,
}

impl Singles {
    fn new(handle: &Arc<Handle>, ctx: &Arc<CudaContext>) -> Result<Self, GpuError> {
        let states = (0..SINGLE_STATES)
            .map(|_| {
                Ok(SingleState {
                    decoder: Decoder::new(handle)?,
                    done: ctx
                        .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                        .map_err(driver("creating a jpeg state's event"))?,
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Self { states, next: 0 })
    }

    /// Decodes `data` into `image` on `stream`, with the next state once
    /// the decode it last queued has finished.
    fn decode(&mut self, stream: &Arc<CudaStream>, data: &[u8], image: &mut DeviceImage) -> Result<(), GpuDecodeError> {
        let turn = self.next;
        self.next = (turn + 1) % self.states.len();
        let state = &mut self.states[turn];
        state
            .done
            .synchronize()
            .map_err(driver("waiting for a jpeg state's last decode"))?;
        // The state's previous decode has finished (waited for above), so
        // its staging buffer is free to overwrite.
        let r = state.decoder.decode_rgbi(data, image, stream);
        // Recorded whether or not the decode succeeded: a failed one may
        // still have queued work that reads the staging.
        state
            .done
            .record(stream)
            .map_err(driver("recording a jpeg state's decode"))?;
        r.map_err(GpuDecodeError::Decode)
    }
}

impl Gpu {
    /// A batched JPEG decoder on this device's stream. Images above
    /// `max_pixels` are refused from their header.
    pub fn decoder(&self, max_pixels: u64) -> Result<GpuDecoder, GpuError> {
        GpuDecoder::new(self, max_pixels)
    }
}
