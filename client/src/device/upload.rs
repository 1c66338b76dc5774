//! [`Uploader`]: pinned batch -> side stream copy -> conversion kernel ->
//! [`DeviceBatch`], with the events that order it against the pool and the
//! consumer.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, sys};
use stoker_cuda::{
    Conversion, ConvertKernels, DType, ForeignStream, Layout, Normalize, POOL_KEEP_BYTES, PoolKeep, catch_cuda_panic,
    check_nvrtc, open_context, trim_pool,
};

use super::{DeviceError, DeviceUnavailable, PinnedBuf, PinnedPool, driver};
use stoker_cuda::handoff::{CopyError, DevicePixels};

/// What a batch becomes on the device: layout, element type and
/// normalisation `(x / 255 - mean[c]) / std[c]` (mean 0, std 1: plain
/// scaling to [0, 1]). uint8 output is not normalised, only laid out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UploadSpec {
    pub layout: Layout,
    pub dtype: DType,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl Default for UploadSpec {
    /// float32 NCHW scaled to [0, 1].
    fn default() -> Self {
        Self::new(Layout::Nchw, DType::F32)
    }
}

impl UploadSpec {
    /// `layout` and `dtype`, mean 0 and std 1.
    pub fn new(layout: Layout, dtype: DType) -> Self {
        Self {
            layout,
            dtype,
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    }

    /// The same with mean and std (on the [0, 1] scale, as torchvision's
    /// `Normalize` takes them).
    pub fn with_mean_std(self, mean: [f32; 3], std: [f32; 3]) -> Self {
        Self { mean, std, ..self }
    }

    /// The kernel-side form of this spec, checked: finite means, finite
    /// non-zero stds, and no normalisation asked of uint8 output.
    pub fn conversion(&self) -> Result<Conversion, String> {
        let norm = Normalize::from_mean_std(self.mean, self.std)?;
        if self.dtype == DType::U8 && (self.mean != [0.0; 3] || self.std != [1.0; 3]) {
            return Err(format!(
                "uint8 output is not normalised: mean {:?} and std {:?} need a float dtype",
                self.mean, self.std
            ));
        }
        Ok(Conversion {
            layout: self.layout,
            dtype: self.dtype,
            norm,
        })
    }
}

/// Uploads batches from pinned host buffers to one device and converts
/// them there, on a side stream of its own on the device's primary context.
/// Safe to share between threads; uploads are queued in call order.
#[derive(Debug)]
pub struct Uploader {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: ConvertKernels,
    spec: UploadSpec,
    conversion: Conversion,
    /// Where the copy lands before the kernel converts it: reused, grown
    /// when a batch needs more. Held while an upload is queued, so one
    /// upload's copy into it follows the previous upload's kernel on the
    /// stream.
    staging: Mutex<Option<CudaSlice<u8>>>,
    /// The pool memory kept for the next batches ([`PoolKeep`]), while the
    /// uploader lives.
    keep: Option<PoolKeep>,
}

impl Uploader {
    /// Opens device `ordinal`'s primary context (the one the CUDA runtime
    /// and PyTorch use), creates the side stream and compiles (or takes
    /// from the process cache) the conversion kernels — only those.
    pub fn new(ordinal: usize, spec: UploadSpec) -> Result<Self, DeviceError> {
        let conversion = spec
            .conversion()
            .map_err(|reason| DeviceError::Invalid { ordinal, reason })?;
        catch_cuda_panic(|| {
            let ctx = open_context(ordinal)?;
            check_nvrtc()?;
            let kernels = ConvertKernels::load(&ctx).map_err(|e| DeviceUnavailable::Kernels {
                ordinal,
                reason: e.to_string(),
            })?;
            // The priority of the lanes' streams (`STOKER_GPU_PRIORITY`).
            let priority = stoker_cuda::feed_priority(&ctx).map_err(driver("cuCtxGetStreamPriorityRange", ordinal))?;
            let stream = ctx
                .new_stream_with_priority(priority)
                .map_err(driver("cuStreamCreate of the side stream", ordinal))?;
            let keep = match ctx.has_async_alloc() {
                true => Some(
                    PoolKeep::claim(&ctx, POOL_KEEP_BYTES)
                        .map_err(driver("the release threshold of the default memory pool", ordinal))?,
                ),
                false => None,
            };
            Ok(Self {
                ordinal,
                ctx,
                stream,
                kernels,
                spec,
                conversion,
                staging: Mutex::new(None),
                keep,
            })
        })
    }

    /// The device uploads go to.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// What uploads become.
    pub fn spec(&self) -> &UploadSpec {
        &self.spec
    }

    /// The side stream copies and conversions run on.
    pub fn side_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A ring of `count` pinned buffers of `bytes` each on this uploader's
    /// context: `bytes` = images x height x width x 3 of the largest batch.
    pub fn pinned_pool(&self, count: usize, bytes: usize) -> Result<PinnedPool, DeviceError> {
        PinnedPool::with_context(&self.ctx, count, bytes)
    }

    /// Queues the upload of the batch at the front of `buf`: `images` uint8
    /// HWC RGB images of `height` x `width`, back to back. The copy runs on
    /// the side stream, then the conversion into a new device allocation;
    /// `buf` goes back to its pool, to be handed out again once the copy has
    /// completed. Nothing is waited for: the returned batch's ready event
    /// says when it is done ([`DeviceBatch::wait_on`],
    /// [`DeviceBatch::synchronize`]).
    ///
    /// The images `on_device` (row, pixels) were left on this device by a
    /// GPU worker in this process: their rows of `buf` are not copied, and
    /// each is copied in on the device instead, after the side stream has
    /// waited on the event that says it was written; the event recorded
    /// after those copies orders the free of their memory
    /// ([`DevicePixels::used_until`]). Pixels equal the host path's: the
    /// same bytes go through the same conversion.
    ///
    /// Sizes are checked against the buffer; an error leaves the buffer
    /// back in its pool.
    pub fn upload(
        &self,
        buf: PinnedBuf,
        images: usize,
        height: u32,
        width: u32,
        on_device: &[(usize, DevicePixels)],
    ) -> Result<DeviceBatch, DeviceError> {
        let ordinal = self.ordinal;
        let invalid = |reason: String| DeviceError::Invalid { ordinal, reason };
        if buf.context() != &self.ctx {
            return Err(invalid(format!(
                "a pinned buffer of cuda device {} given to the uploader of another device or context",
                buf.ordinal()
            )));
        }
        let hw = u64::from(width) * u64::from(height);
        if images == 0 || hw == 0 || hw > u64::from(u32::MAX / 3) {
            return Err(invalid(format!(
                "an upload of {images} images of {width}x{height} is out of range"
            )));
        }
        let dtype = self.spec.dtype;
        let sizes = images
            .checked_mul(hw as usize * 3)
            .and_then(|input| Some((input, input.checked_mul(dtype.size())?)));
        let Some((in_bytes, out_bytes)) = sizes else {
            return Err(invalid(format!(
                "{images} images of {width}x{height} as {dtype} overflow the address space"
            )));
        };
        if in_bytes > buf.len() {
            return Err(invalid(format!(
                "{images} images of {width}x{height} need {in_bytes} bytes, pinned buffer {} holds {}",
                buf.index(),
                buf.len()
            )));
        }

        // The copy (uint8 NHWC) or the kernel writes every one of its bytes
        // before anything reads them: both are queued on this stream right
        // below, ahead of the ready event that every reader waits for.
        let mut out = stoker_cuda::alloc_bytes(&self.stream, out_bytes)
            .map_err(driver("cuMemAllocAsync of a batch's output", ordinal))?;
        let image_bytes = in_bytes / images;
        for (row, pixels) in on_device {
            if *row >= images || pixels.len() != image_bytes || pixels.ordinal() != ordinal {
                return Err(invalid(format!(
                    "image {row} left on cuda device {} has {} bytes; the batch holds {images} images of {image_bytes} bytes on device {ordinal}",
                    pixels.ordinal(),
                    pixels.len()
                )));
            }
        }
        if self.conversion.kernel().is_none() {
            // uint8 NHWC: the bytes as they came are the batch.
            self.land(buf, &mut out, in_bytes, image_bytes, on_device)?;
        } else {
            let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
            let staging = match &mut *staging {
                Some(s) if s.len() >= in_bytes => s,
                slot => {
                    // The old buffer is freed in stream order, after the
                    // kernel that last read it.
                    *slot = None;
                    // Each upload's copy writes the bytes its kernel then
                    // reads.
                    let grown = stoker_cuda::alloc_bytes(&self.stream, in_bytes)
                        .map_err(driver("cuMemAllocAsync of the staging buffer", ordinal))?;
                    slot.insert(grown)
                }
            };
            self.land(buf, staging, in_bytes, image_bytes, on_device)?;
            self.kernels
                .convert(
                    &self.stream,
                    staging,
                    &mut out,
                    images,
                    (width, height),
                    &self.conversion,
                )
                .map_err(|source| DeviceError::Kernel { ordinal, source })?;
        }
        // Blocking sync: a host that waits for the batch sleeps, not spins.
        let ready = self
            .stream
            .record_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC))
            .map_err(driver("cuEventRecord of a batch's ready event", ordinal))?;
        let ptr = {
            let (ptr, _record) = out.device_ptr(&self.stream);
            ptr
        };
        Ok(DeviceBatch {
            ptr,
            byte_len: out_bytes,
            shape: self.spec.layout.shape(images, height, width),
            layout: self.spec.layout,
            dtype,
            ordinal,
            stream: Arc::clone(&self.stream),
            ready,
            consumers: Mutex::new(Vec::new()),
            data: Some(out),
        })
    }
}

impl Uploader {
    /// Lands a batch's `in_bytes` uint8 HWC bytes at the front of `dst`:
    /// the host rows from `buf` (one copy, or none when every row is on
    /// the device), then each row of `on_device` copied on the device.
    fn land(
        &self,
        buf: PinnedBuf,
        dst: &mut CudaSlice<u8>,
        in_bytes: usize,
        image_bytes: usize,
        on_device: &[(usize, DevicePixels)],
    ) -> Result<(), DeviceError> {
        let ordinal = self.ordinal;
        if in_bytes > dst.len() {
            return Err(DeviceError::Invalid {
                ordinal,
                reason: format!(
                    "a batch of {in_bytes} bytes landing in a device buffer of {}",
                    dst.len()
                ),
            });
        }
        if on_device.len() * image_bytes < in_bytes {
            buf.copy_to_device(&self.stream, dst, in_bytes)?;
        }
        if on_device.is_empty() {
            return Ok(());
        }
        let rows: Vec<(usize, &DevicePixels)> = on_device
            .iter()
            .map(|(row, pixels)| (row * image_bytes, pixels))
            .collect();
        stoker_cuda::handoff::copy_pixels(&self.stream, &rows, dst).map_err(|e| match e {
            CopyError::Driver { what, source } => driver(what, ordinal)(source),
            refused @ (CopyError::OutOfRange { .. } | CopyError::Device { .. }) => DeviceError::Invalid {
                ordinal,
                reason: refused.to_string(),
            },
        })
    }
}

impl Drop for Uploader {
    /// Waits for the uploads still queued, so that the conversion module is
    /// not unloaded under a running kernel (batches keep the stream, not the
    /// module). Blocks briefly: drop an uploader off the async runtime, or
    /// after its last batch is ready.
    fn drop(&mut self) {
        // The staging buffer is freed on the side stream first (fields drop
        // only after this), so that the wait below covers its free too.
        drop(self.staging.get_mut().unwrap_or_else(|p| p.into_inner()).take());
        if let Err(e) = self.stream.synchronize() {
            tracing::warn!(device = self.ordinal, error = %e, "waiting for the side stream before dropping an uploader failed");
        }
        // The pool's memory kept for the next batches goes back to the
        // driver (batches still held keep theirs).
        if self.ctx.has_async_alloc()
            && let Err(e) = trim_pool(&self.ctx)
        {
            tracing::warn!(device = self.ordinal, error = %e, "handing the uploader's unused pool memory back to the driver failed");
        }
        // Its claim on the pool: the last claim on the device puts the
        // release threshold back, so batches the trainer frees later are
        // not kept either.
        drop(self.keep.take());
    }
}

/// A converted batch in device memory: `shape` elements of `dtype` in
/// `layout`, little-endian, contiguous, at [`DeviceBatch::device_ptr`] on the
/// device's primary context.
///
/// # Using it on another stream
///
/// The batch is written on the uploader's side stream. Before a consumer
/// stream (PyTorch's current stream, say) reads it, make that stream wait
/// with [`DeviceBatch::wait_on`] / [`DeviceBatch::wait_on_stream`]; or wait
/// on the host with [`DeviceBatch::synchronize`].
///
/// # Freeing
///
/// Dropping the batch frees the memory stream-ordered on the side stream,
/// after making the side stream wait for everything queued *so far* on each
/// stream passed to `wait_on`: the consumer's uses of the batch, if it used
/// the batch on those streams only and queued them before the drop. So:
/// use the batch only on streams it was waited on (those must still exist
/// when it is dropped), and drop it only after queuing the last use. A
/// pointer used elsewhere must have its work finished before the drop.
#[derive(Debug)]
pub struct DeviceBatch {
    ptr: u64,
    byte_len: usize,
    shape: [usize; 4],
    layout: Layout,
    dtype: DType,
    ordinal: usize,
    /// The side stream the batch was written on, and is freed on.
    stream: Arc<CudaStream>,
    /// Recorded after the conversion.
    ready: CudaEvent,
    /// Streams made to wait on `ready`: the free waits for them.
    consumers: Mutex<Vec<Arc<CudaStream>>>,
    /// `Some` until dropped.
    data: Option<CudaSlice<u8>>,
}

impl DeviceBatch {
    /// The device address of the first element.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes of the batch: the product of the shape times the element size.
    pub fn byte_len(&self) -> usize {
        self.byte_len
    }

    /// `[B, 3, H, W]` (NCHW) or `[B, H, W, 3]` (NHWC).
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The device the batch is on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Images in the batch.
    pub fn images(&self) -> usize {
        self.shape[0]
    }

    /// Whether the copy and conversion have completed (no waiting).
    pub fn is_ready(&self) -> Result<bool, DeviceError> {
        self.ready
            .try_is_complete()
            .map_err(driver("cuEventQuery of a batch's ready event", self.ordinal))
    }

    /// Blocks the calling thread until the batch is on the device,
    /// converted. Not for an async runtime's threads.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        self.ready
            .synchronize()
            .map_err(driver("cuEventSynchronize of a batch's ready event", self.ordinal))
    }

    /// Makes `stream` (a CUDA stream handle, as PyTorch's
    /// `torch.cuda.current_stream().cuda_stream` gives it, or the legacy
    /// default stream) wait for the batch without blocking the host, and
    /// holds the batch's memory until the work queued on `stream` before
    /// the batch is dropped has run.
    pub fn wait_on(&self, stream: &ForeignStream) -> Result<(), DeviceError> {
        self.wait_on_stream(&stream.borrow(self.stream.context()))
    }

    /// As [`DeviceBatch::wait_on`], for a cudarc stream (kept alive by the
    /// batch until it is dropped).
    pub fn wait_on_stream(&self, stream: &Arc<CudaStream>) -> Result<(), DeviceError> {
        if stream.context() != self.stream.context() {
            return Err(DeviceError::Invalid {
                ordinal: self.ordinal,
                reason: format!(
                    "a batch cannot be waited on by a stream of cuda device {}'s other context",
                    stream.context().ordinal()
                ),
            });
        }
        stream
            .wait(&self.ready)
            .map_err(driver("cuStreamWaitEvent on a batch's ready event", self.ordinal))?;
        let mut consumers = self.consumers.lock().unwrap_or_else(|e| e.into_inner());
        if !consumers.iter().any(|c| c.cu_stream() == stream.cu_stream()) {
            consumers.push(Arc::clone(stream));
        }
        Ok(())
    }

    /// The batch's bytes, copied to the host after the conversion (on the
    /// side stream; writes a consumer stream made to the batch are not
    /// ordered before it). Waits for the copy. For tests and debugging.
    pub fn to_host(&self) -> Result<Vec<u8>, DeviceError> {
        let Some(data) = &self.data else {
            return Ok(Vec::new());
        };
        let host = self
            .stream
            .clone_dtoh(data)
            .map_err(driver("cuMemcpyDtoHAsync of a batch", self.ordinal))?;
        self.stream.synchronize().map_err(driver(
            "cuStreamSynchronize after copying a batch to the host",
            self.ordinal,
        ))?;
        Ok(host)
    }
}

impl Drop for DeviceBatch {
    fn drop(&mut self) {
        let consumers = std::mem::take(self.consumers.get_mut().unwrap_or_else(|e| e.into_inner()));
        let mut ordered = true;
        for consumer in &consumers {
            // Everything queued on the consumer stream so far, its uses of
            // the batch included, comes before this event; the side stream
            // waits for it before the free below.
            let waited = consumer.record_event(None).and_then(|done| self.stream.wait(&done));
            if let Err(e) = waited {
                tracing::warn!(device = self.ordinal, error = %e, "ordering a batch's free after its consumer failed; synchronising the device");
                ordered = false;
            }
        }
        if !ordered && let Err(e) = self.stream.context().synchronize() {
            tracing::warn!(device = self.ordinal, error = %e, "synchronising the device before freeing a batch failed");
        }
        // cudarc frees the allocation stream-ordered on the side stream.
        drop(self.data.take());
        // A batch kept past its loader: its memory goes back now.
        stoker_cuda::give_back_if_unclaimed(&self.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Uploader>();
        assert_send_sync::<DeviceBatch>();
    }

    #[test]
    fn upload_specs_are_checked() {
        let plain = UploadSpec::default().conversion().expect("the default is valid");
        assert_eq!((plain.layout, plain.dtype), (Layout::Nchw, DType::F32));
        assert_eq!(plain.norm, Normalize::scale_only());
        let imagenet =
            UploadSpec::new(Layout::Nhwc, DType::Bf16).with_mean_std([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
        assert!(imagenet.conversion().is_ok());
        let zero = imagenet.with_mean_std([0.5; 3], [0.2, 0.2, 0.0]).conversion();
        assert!(zero.is_err_and(|e| e.contains("std of channel 2")));
        let u8_norm = UploadSpec::new(Layout::Nchw, DType::U8).with_mean_std([0.5; 3], [0.5; 3]);
        assert!(
            u8_norm
                .conversion()
                .is_err_and(|e| e.contains("uint8 output is not normalised"))
        );
        assert!(UploadSpec::new(Layout::Nhwc, DType::U8).conversion().is_ok());
    }

    #[test]
    fn an_uploader_without_a_device_says_why() {
        let bad = UploadSpec::default().with_mean_std([0.0; 3], [0.0; 3]);
        let e = Uploader::new(0, bad).expect_err("std 0 is refused before any cuda call");
        assert!(e.to_string().starts_with("cuda device 0: std of channel 0"), "{e}");
        match Uploader::new(0, UploadSpec::new(Layout::Nchw, DType::Bf16)) {
            Ok(up) => println!("uploader on cuda device {}", up.ordinal()),
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with("no ") || text.contains("fail"), "{text}");
                println!("skipped: an_uploader_without_a_device_says_why: {text}");
            }
        }
    }
}
