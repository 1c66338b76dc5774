//! Finding CUDA at run time, shared by the worker's GPU path and the
//! client's device upload: whether libcuda and libnvrtc can be loaded,
//! whether the device exists, its primary context, what a probe reports of
//! it ([`DeviceInfo`]), and how much memory its default pool keeps
//! ([`POOL_KEEP_BYTES`], held by each holder's [`PoolKeep`] claim, the
//! last of which puts the pool back as it found it; memory freed after
//! that goes back through [`give_back_if_unclaimed`]). Also
//! [`open_context`] (libcuda, the device, its primary context),
//! [`check_nvrtc`], [`trim_pool`] (also called by the GPU runner once its
//! lanes stopped, and by the client's uploader when it drops) and
//! [`feed_priority`] (the lanes' and the uploader's stream priority,
//! `STOKER_GPU_PRIORITY`).
//!
//! cudarc loads the libraries on first use and panics when one is missing
//! or lacks a symbol it expects; [`catch_cuda_panic`] turns such a panic
//! into [`CudaUnavailable::Panicked`], so a host without CUDA gets a reason,
//! never a crash.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaContext, CudaStream, DriverError, sys};

/// Why the CUDA driver or NVRTC cannot be used on this host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaUnavailable {
    #[error("no libcuda: the cuda driver library (libcuda.so.1) is not installed or not on the loader path")]
    NoLibcuda,
    #[error("no cuda device: {0}")]
    NoDevice(String),
    #[error("cuda driver failed on device {ordinal}: {reason}")]
    Driver { ordinal: usize, reason: String },
    #[error("no libnvrtc: the cuda run-time compiler (libnvrtc.so) is not installed or not on the loader path")]
    NoLibnvrtc,
    #[error("a cuda library call panicked: {0}")]
    Panicked(String),
}

/// Runs `f`, turning a panic inside it (cudarc's loader panics when a
/// library it found lacks a symbol) into [`CudaUnavailable::Panicked`].
pub fn catch_cuda_panic<T, E: From<CudaUnavailable>>(f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    // AssertUnwindSafe: on a panic nothing `f` touched is used again; the
    // caller only gets the message.
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(CudaUnavailable::Panicked(msg).into())
    })
}

/// The primary context of device `ordinal` (the context the CUDA runtime,
/// and so PyTorch, uses), after checking that libcuda loads and that the
/// driver sees the device. Panics inside cudarc are caught.
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, CudaUnavailable> {
    catch_cuda_panic(|| {
        // SAFETY: only tries to dlopen the driver library by its names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaUnavailable::NoLibcuda);
        }
        let count =
            CudaContext::device_count().map_err(|e| CudaUnavailable::NoDevice(format!("cuInit failed: {e}")))?;
        if count <= 0 {
            return Err(CudaUnavailable::NoDevice("the driver sees 0 devices".into()));
        }
        if ordinal >= count as usize {
            return Err(CudaUnavailable::NoDevice(format!(
                "device {ordinal} asked for, the driver sees {count}"
            )));
        }
        CudaContext::new(ordinal).map_err(|e| CudaUnavailable::Driver {
            ordinal,
            reason: e.to_string(),
        })
    })
}

/// What a GPU probe reports of a device, the worker's and the client's
/// alike: read from the driver by [`DeviceInfo::of`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub memory_bytes: usize,
}

impl DeviceInfo {
    /// The name, compute capability and total memory of `ctx`'s device; a
    /// failing driver call is [`CudaUnavailable::Driver`].
    pub fn of(ctx: &CudaContext) -> Result<Self, CudaUnavailable> {
        let ordinal = ctx.ordinal();
        let drv = |e: DriverError| CudaUnavailable::Driver {
            ordinal,
            reason: e.to_string(),
        };
        let name = ctx.name().map_err(drv)?;
        let compute_capability = ctx.compute_capability().map_err(drv)?;
        let memory_bytes = ctx.total_mem().map_err(drv)?;
        Ok(Self {
            ordinal,
            name,
            compute_capability,
            memory_bytes,
        })
    }
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

/// Whether libnvrtc can be loaded (nothing is compiled).
pub fn check_nvrtc() -> Result<(), CudaUnavailable> {
    // SAFETY: only tries to dlopen libnvrtc by its names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaUnavailable::NoLibnvrtc)
    }
}

/// Device memory the stream-ordered allocator should keep for reuse after
/// a synchronisation ([`set_pool_release_threshold`]), instead of handing
/// it back to the driver, which then has to map it again for the next
/// batch. Allocations beyond it still succeed; the excess is returned at
/// the next synchronisation. The worker sets it; the client raises a lower
/// threshold to it and leaves a higher one alone.
///
/// Why 1 GiB: it holds the buffers of a few batches in flight (256 images
/// of 224 x 224 as float32 NCHW are 154 MB), so steady-state batches map
/// nothing new, while it is a small share of the 40 to 141 GiB of the GPUs
/// we run on, so a training job hardly notices what is kept.
pub const POOL_KEEP_BYTES: u64 = 1 << 30;

/// The default memory pool of `ctx`'s device: the one stream-ordered
/// allocations (`cuMemAllocAsync`, cudarc's `CudaStream::alloc`) draw from.
fn default_pool(ctx: &CudaContext) -> Result<sys::CUmemoryPool, DriverError> {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer and the device handle comes
    // from a live context.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }.result()?;
    Ok(pool)
}

/// A u64 attribute of `pool`.
fn pool_attribute(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> Result<u64, DriverError> {
    let mut value = 0u64;
    // SAFETY: the caller passes an attribute whose value is a u64 (the
    // release threshold, the reserved and used counts), which `value` is,
    // of a pool returned for a live context.
    unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut value as *mut u64).cast()) }.result()?;
    Ok(value)
}

/// Device memory of a device's default (stream-ordered) pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolMemory {
    /// Bytes the pool has reserved from the device now.
    pub reserved: u64,
    /// The most it has reserved at once.
    pub reserved_high: u64,
    /// Bytes allocated from it now.
    pub used: u64,
}

/// What the device's default pool holds now ([`PoolMemory`]).
pub fn pool_memory(ctx: &CudaContext) -> Result<PoolMemory, DriverError> {
    use sys::CUmemPool_attribute as A;
    let pool = default_pool(ctx)?;
    Ok(PoolMemory {
        reserved: pool_attribute(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        reserved_high: pool_attribute(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        used: pool_attribute(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
    })
}

/// Turns off cudarc's per-buffer events on `ctx`: each buffer's uses are
/// then ordered by the stream it was allocated on, as a worker's lanes
/// use them (a lane allocates, uses and frees each buffer on its own
/// stream; its output reaches the host through a copy the lane waits for,
/// or a loader in the same process through the events
/// [`crate::handoff::DeviceOutput`] records and waits on; the
/// stream-ordered pool orders a free on one stream before another stream
/// reuses the memory). Every launch and decode of this crate then refuses
/// a buffer of another stream than its own. With the events each buffer
/// cost two event creations and each use a record and a wait, on the
/// lanes' threads: the lanes ran at half the rate on the recipe
/// (docs/gpu.md).
pub fn order_by_streams(ctx: &CudaContext) {
    // SAFETY: with tracking off, cudarc no longer orders a buffer's uses
    // across streams; this crate's launches and decodes check that each
    // buffer is of the launch's stream (`batch::same_context`), and the
    // worker's copies run on the stream of the buffers they copy.
    unsafe { ctx.disable_event_tracking() };
}

/// How many bytes the device's default memory pool keeps for reuse when a
/// stream, event or context synchronises, instead of handing them back to
/// the driver (which then has to map them again for the next allocation).
pub fn pool_release_threshold(ctx: &CudaContext) -> Result<u64, DriverError> {
    pool_attribute(
        default_pool(ctx)?,
        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
    )
}

/// Sets [`pool_release_threshold`]. Allocations beyond it still succeed;
/// the excess is returned at the next synchronisation.
pub fn set_pool_release_threshold(ctx: &CudaContext, bytes: u64) -> Result<(), DriverError> {
    let pool = default_pool(ctx)?;
    let mut value = bytes;
    // SAFETY: the release threshold attribute takes a pointer to a u64,
    // which `value` is, on the pool just returned.
    unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut value as *mut u64).cast(),
        )
    }
    .result()
}

/// Hands the device's default memory pool's unused memory back to the
/// driver: what [`POOL_KEEP_BYTES`] kept for reuse, once its user (a
/// worker's lanes, a loader's uploader) is gone. Memory still allocated,
/// and frees not yet reached on their streams, stay.
pub fn trim_pool(ctx: &CudaContext) -> Result<(), DriverError> {
    let pool = default_pool(ctx)?;
    // SAFETY: the pool was just returned for a live context; trimming
    // releases only memory no allocation holds.
    unsafe { sys::cuMemPoolTrimTo(pool, 0) }.result()
}

/// A holder's claim that the device's default pool keep at least `bytes`
/// for reuse ([`POOL_KEEP_BYTES`]): a worker's device, its lanes, a
/// loader's uploader. A claim raises the pool's release threshold (never
/// lowers it); when the last claim on the device is dropped, the threshold
/// found before the first goes back and the unused memory goes to the
/// driver ([`trim_pool`]). Memory freed after that (a batch the trainer
/// still held) is released at the next synchronisation, as with CUDA's
/// default threshold of 0: a loader dropped in a trainer's process leaves
/// nothing kept for it.
#[derive(Debug)]
pub struct PoolKeep {
    ctx: Arc<CudaContext>,
}

/// Per device: the claims alive, and the threshold before the first.
static CLAIMS: Mutex<BTreeMap<usize, (usize, u64)>> = Mutex::new(BTreeMap::new());

impl PoolKeep {
    /// Claims `bytes` of `ctx`'s device's default pool.
    pub fn claim(ctx: &Arc<CudaContext>, bytes: u64) -> Result<Self, DriverError> {
        let mut claims = CLAIMS.lock().unwrap_or_else(PoisonError::into_inner);
        let now = pool_release_threshold(ctx)?;
        if now < bytes {
            set_pool_release_threshold(ctx, bytes)?;
        }
        claims
            .entry(ctx.ordinal())
            .and_modify(|(holders, _)| *holders += 1)
            .or_insert((1, now));
        Ok(Self { ctx: Arc::clone(ctx) })
    }
}

impl Drop for PoolKeep {
    fn drop(&mut self) {
        let mut claims = CLAIMS.lock().unwrap_or_else(PoisonError::into_inner);
        let ordinal = self.ctx.ordinal();
        let Some((holders, before)) = claims.get_mut(&ordinal) else {
            return;
        };
        *holders -= 1;
        if *holders > 0 {
            return;
        }
        let before = *before;
        claims.remove(&ordinal);
        // The device's queued work first (stream-ordered frees included),
        // or the trim would keep what they free.
        let given_back = set_pool_release_threshold(&self.ctx, before)
            .and_then(|()| self.ctx.synchronize())
            .and_then(|()| trim_pool(&self.ctx));
        if let Err(e) = given_back {
            tracing::warn!(device = ordinal, error = %e, "handing the memory pool's kept memory back to the driver failed");
        }
    }
}

/// After a free on `stream` by something that outlived every claim on its
/// device (a batch the trainer held past its loader): waits for the stream
/// and trims the pool, so that memory goes back to the driver now. The
/// driver did not release it at the next synchronisation on its own: with
/// the threshold back at 0, 416 MiB stayed reserved after a dropped
/// loader's last batch was freed (H200, CUDA 13.0). With a claim alive it
/// does nothing.
pub fn give_back_if_unclaimed(stream: &CudaStream) {
    let ctx = stream.context();
    let claimed = CLAIMS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains_key(&ctx.ordinal());
    if claimed || !ctx.has_async_alloc() {
        return;
    }
    if let Err(e) = stream.synchronize().and_then(|()| trim_pool(ctx)) {
        tracing::warn!(device = ctx.ordinal(), error = %e, "handing freed memory back to the driver failed");
    }
}

/// The device's stream priorities, (least, greatest): the least is the
/// largest number (0 on the GPUs we run on, which is also a new stream's
/// default). Binds `ctx` to the calling thread.
pub fn stream_priorities(ctx: &CudaContext) -> Result<(i32, i32), DriverError> {
    ctx.bind_to_thread()?;
    let (mut least, mut greatest) = (0i32, 0i32);
    // SAFETY: two valid out-pointers; `ctx` is current on this thread.
    unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }.result()?;
    Ok((least, greatest))
}

/// The variable [`feed_priority`] reads.
pub const GPU_PRIORITY_ENV: &str = "STOKER_GPU_PRIORITY";

/// Which end of the device's stream priorities the streams that feed
/// training take (a worker's lanes, a loader's uploader): `low` (the
/// default; the least, which is also a new stream's) or `high` (the
/// greatest: their kernels and copies are scheduled before the training
/// step's waiting blocks), from `STOKER_GPU_PRIORITY`. Anything else is
/// `low`, with a warning.
pub fn feed_priority(ctx: &CudaContext) -> Result<i32, DriverError> {
    let (least, greatest) = stream_priorities(ctx)?;
    Ok(match std::env::var(GPU_PRIORITY_ENV).as_deref() {
        Ok("high") => greatest,
        Ok("low") | Err(_) => least,
        Ok(other) => {
            tracing::warn!(value = other, "{GPU_PRIORITY_ENV} is `low` or `high`: taking low");
            least
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_reason() {
        let r: Result<(), CudaUnavailable> = catch_cuda_panic(|| panic!("symbol cuFoo not found"));
        assert_eq!(r, Err(CudaUnavailable::Panicked("symbol cuFoo not found".into())));
        let r: Result<u8, CudaUnavailable> = catch_cuda_panic(|| Ok(3));
        assert_eq!(r, Ok(3));
    }

    #[test]
    fn device_info_reads_like_a_probe_line() {
        let info = DeviceInfo {
            ordinal: 1,
            name: "NVIDIA H100".into(),
            compute_capability: (9, 0),
            memory_bytes: 3 << 29,
        };
        assert_eq!(info.to_string(), "cuda device 1 NVIDIA H100, sm_90, 1.5 GiB");
        if let Ok(ctx) = open_context(0) {
            let found = DeviceInfo::of(&ctx).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(found.ordinal, 0);
            println!("cuda device 0 read: {found}");
        }
    }

    #[test]
    fn open_context_names_what_is_missing_or_opens_the_device() {
        match open_context(0) {
            Ok(ctx) => println!("cuda device 0 opened: {:?}", ctx.name()),
            Err(reason) => {
                let text = reason.to_string();
                assert!(text.starts_with("no ") || text.contains("fail"), "{text}");
                println!("skipped: open_context_names_what_is_missing_or_opens_the_device: {text}");
            }
        }
        // A device past any the driver could see is refused with a reason.
        if let Err(reason) = open_context(4096) {
            assert!(reason.to_string().starts_with("no "), "{reason}");
        }
    }
}

/// A CUDA stream handle another library gave: PyTorch's
/// `torch.cuda.current_stream().cuda_stream`, DLPack's `stream`, or the
/// legacy default stream (null), which is always valid.
#[derive(Clone, Copy, Debug)]
pub struct ForeignStream(sys::CUstream);

// SAFETY: a stream handle is an opaque value the driver accepts from any
// thread.
unsafe impl Send for ForeignStream {}
// SAFETY: as above; it is only copied.
unsafe impl Sync for ForeignStream {}

impl ForeignStream {
    /// The legacy default stream (the null handle).
    pub fn legacy_default() -> Self {
        Self(std::ptr::null_mut())
    }

    /// A handle from another library.
    ///
    /// # Safety
    ///
    /// `raw` must be null (the legacy default stream),
    /// `CU_STREAM_PER_THREAD` (2), or a stream of the primary context of
    /// the device it is used on ([`ForeignStream::borrow`]), kept alive by
    /// its owner while anything holds the borrowed stream (a batch holds it
    /// until it is dropped, and records an event on it then).
    pub unsafe fn from_raw(raw: sys::CUstream) -> Self {
        Self(raw)
    }

    /// The handle as a cudarc stream of `ctx` (a device's primary
    /// context), for event waits and records; dropping it leaves the
    /// stream to its owner.
    pub fn borrow(&self, ctx: &Arc<CudaContext>) -> Arc<CudaStream> {
        // SAFETY: `from_raw`'s contract (or the null handle): a valid stream
        // of this context, alive while the wrapper is used. Work submitted
        // through it is ordered by events only.
        unsafe { ctx.wrap_borrowed_stream(self.0) }
    }
}

/// Runs `f`, then makes the thread's current CUDA context what it was
/// before: cudarc binds a context to the calling thread, and a consumer
/// (PyTorch on another device, say) keeps its own current device. Only
/// for a thread where CUDA is already loaded.
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
