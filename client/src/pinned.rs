//! A ring of page-locked host buffers that the assembler writes batches
//! into and the device upload ([`crate::device::Uploader::upload`]) copies
//! to the GPU from.
//!
//! The buffers are host memory, even though CUDA allocates them and the
//! copy out of them runs on a CUDA stream: so they belong to the host side,
//! next to the assembler's other buffers (`buffers.rs`), which then need
//! nothing from the device module; the device module re-exports them and
//! builds its upload on them.
//!
//! The rule that makes reuse safe: a buffer handed to an upload comes back
//! to the pool with the event recorded on the side stream right after its
//! host-to-device copy, and is handed out again only once that event has
//! completed. Until then the DMA engine may still be reading it.
//!
//! A buffer dropped without an upload is free again at once. [`PinnedPool::get`]
//! waits on tokio's blocking pool, [`PinnedPool::get_blocking`] on the
//! caller's thread.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys};
use stoker_cuda::{PinnedBuffer, catch_cuda_panic, open_context};
use tokio::sync::Notify;

use crate::cuda::{DeviceError, driver};

/// One page-locked buffer of the ring and the event of its last copy.
struct Slot {
    index: usize,
    /// Recorded on the uploader's stream after the copy out of this buffer.
    copied: Arc<CudaEvent>,
    /// The memory (reached with no driver call per access), freed after
    /// `Drop for Slot` has waited for the last copy.
    buf: PinnedBuffer,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The memory is freed after this (the `buf` field's drop): let a
        // copy still reading it finish first.
        if let Err(e) = self.copied.synchronize() {
            tracing::warn!(buffer = self.index, error = %e, "waiting for a pinned buffer's last copy before freeing it failed");
        }
    }
}

/// What a look into the pool found.
enum Found {
    /// A buffer that may be written now.
    Ready(Slot),
    /// None ready; the oldest copy still reading a buffer.
    Copying(Arc<CudaEvent>),
    /// Every buffer is lent out, none in a copy.
    AllLent,
}

struct State {
    /// Never uploaded since they came back.
    free: Vec<Slot>,
    /// Handed to an upload, in upload order; free once `copied` completes.
    copying: Vec<Slot>,
}

struct Shared {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    bytes: usize,
    count: usize,
    state: Mutex<State>,
    /// Woken when a buffer comes back or goes into a copy.
    returned: Notify,
    returned_blocking: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a free buffer, or one whose copy has completed.
    fn find(&self, state: &mut State) -> Result<Found, DeviceError> {
        if let Some(slot) = state.free.pop() {
            return Ok(Found::Ready(slot));
        }
        if state.copying.is_empty() {
            return Ok(Found::AllLent);
        }
        self.ctx.bind_to_thread().map_err(driver(
            "binding the context to query a pinned buffer's copy",
            self.ordinal,
        ))?;
        for i in 0..state.copying.len() {
            let done = state.copying[i]
                .copied
                .try_is_complete()
                .map_err(driver("cuEventQuery of a pinned buffer's copy", self.ordinal))?;
            if done {
                return Ok(Found::Ready(state.copying.remove(i)));
            }
        }
        Ok(Found::Copying(Arc::clone(&state.copying[0].copied)))
    }

    fn wake(&self) {
        self.returned.notify_waiters();
        self.returned_blocking.notify_all();
    }

    /// A buffer that was not uploaded: free at once.
    fn give_back(&self, slot: Slot) {
        self.lock().free.push(slot);
        self.wake();
    }

    /// A buffer whose copy was queued and `copied` recorded after it.
    fn give_back_copying(&self, slot: Slot) {
        self.lock().copying.push(slot);
        self.wake();
    }
}

/// A ring of `count` page-locked host buffers of `bytes` each, on one
/// device's primary context. Cloning gives another handle on the same ring.
#[derive(Clone)]
pub struct PinnedPool {
    shared: Arc<Shared>,
}

impl fmt::Debug for PinnedPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedPool")
            .field("ordinal", &self.shared.ordinal)
            .field("count", &self.shared.count)
            .field("bytes", &self.shared.bytes)
            .finish()
    }
}

impl PinnedPool {
    /// Allocates `count` page-locked buffers of `bytes` each for device
    /// `ordinal` (zeroed once, here).
    pub fn new(ordinal: usize, count: usize, bytes: usize) -> Result<Self, DeviceError> {
        let ctx = open_context(ordinal)?;
        Self::with_context(&ctx, count, bytes)
    }

    /// As [`PinnedPool::new`], on a context already open.
    pub fn with_context(ctx: &Arc<CudaContext>, count: usize, bytes: usize) -> Result<Self, DeviceError> {
        let ordinal = ctx.ordinal();
        if count == 0 || bytes == 0 || bytes > isize::MAX as usize {
            return Err(DeviceError::Invalid {
                ordinal,
                reason: format!(
                    "a pinned pool needs at least one buffer of at least one byte, not {count} buffers of {bytes} bytes"
                ),
            });
        }
        catch_cuda_panic(|| {
            let mut free = Vec::with_capacity(count);
            for index in 0..count {
                // Zeroed: the host may read it back.
                let buf =
                    PinnedBuffer::alloc(ctx, bytes).map_err(driver("cuMemHostAlloc of a pinned buffer", ordinal))?;
                let copied = ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC))
                    .map_err(driver("cuEventCreate for a pinned buffer", ordinal))?;
                free.push(Slot {
                    index,
                    copied: Arc::new(copied),
                    buf,
                });
            }
            // Hand out the lowest index first.
            free.reverse();
            Ok(Self {
                shared: Arc::new(Shared {
                    ctx: Arc::clone(ctx),
                    ordinal,
                    bytes,
                    count,
                    state: Mutex::new(State {
                        free,
                        copying: Vec::with_capacity(count),
                    }),
                    returned: Notify::new(),
                    returned_blocking: Condvar::new(),
                }),
            })
        })
    }

    /// The device the buffers are page-locked for.
    pub fn ordinal(&self) -> usize {
        self.shared.ordinal
    }

    /// Buffers in the ring.
    pub fn count(&self) -> usize {
        self.shared.count
    }

    fn lend(&self, slot: Slot) -> PinnedBuf {
        PinnedBuf {
            slot: Some(slot),
            pool: Arc::clone(&self.shared),
        }
    }

    /// A free buffer now, or `None` when every buffer is lent out or still
    /// being copied.
    pub fn try_get(&self) -> Result<Option<PinnedBuf>, DeviceError> {
        let mut state = self.shared.lock();
        match self.shared.find(&mut state)? {
            Found::Ready(slot) => Ok(Some(self.lend(slot))),
            Found::Copying(_) | Found::AllLent => Ok(None),
        }
    }

    /// A free buffer, waiting for one to come back or for a copy to
    /// complete. The wait for a copy runs on tokio's blocking pool (an event
    /// synchronisation, which sleeps rather than spins), never on the
    /// runtime's threads; call it within a tokio runtime.
    pub async fn get(&self) -> Result<PinnedBuf, DeviceError> {
        loop {
            // Registered before looking, so a buffer coming back after the
            // look wakes this task.
            let notified = self.shared.returned.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let found = {
                let mut state = self.shared.lock();
                self.shared.find(&mut state)?
            };
            match found {
                Found::Ready(slot) => return Ok(self.lend(slot)),
                Found::AllLent => notified.as_mut().await,
                Found::Copying(event) => {
                    let ordinal = self.shared.ordinal;
                    let wait = tokio::task::spawn_blocking(move || event.synchronize());
                    tokio::select! {
                        joined = wait => match joined {
                            Ok(result) => result.map_err(driver("cuEventSynchronize of a pinned buffer's copy", ordinal))?,
                            Err(e) => {
                                return Err(DeviceError::Invalid {
                                    ordinal,
                                    reason: format!("the wait for a pinned buffer's copy failed: {e}"),
                                });
                            }
                        },
                        () = notified.as_mut() => {}
                    }
                }
            }
        }
    }

    /// As [`PinnedPool::get`], blocking the calling thread: for threads of
    /// their own, never on an async runtime.
    pub fn get_blocking(&self) -> Result<PinnedBuf, DeviceError> {
        let mut state = self.shared.lock();
        loop {
            match self.shared.find(&mut state)? {
                Found::Ready(slot) => return Ok(self.lend(slot)),
                Found::AllLent => {
                    state = self
                        .shared
                        .returned_blocking
                        .wait(state)
                        .unwrap_or_else(|e| e.into_inner());
                }
                Found::Copying(event) => {
                    drop(state);
                    event.synchronize().map_err(driver(
                        "cuEventSynchronize of a pinned buffer's copy",
                        self.shared.ordinal,
                    ))?;
                    state = self.shared.lock();
                }
            }
        }
    }
}

/// One buffer of a [`PinnedPool`], lent out: its full capacity as a
/// mutable byte slice, for the assembler to write samples into. Dropped, it
/// goes back to the pool free; given to [`crate::device::Uploader::upload`], it goes
/// back once its copy to the device has completed.
pub struct PinnedBuf {
    /// Always `Some` until the buffer is dropped or uploaded.
    slot: Option<Slot>,
    pool: Arc<Shared>,
}

impl fmt::Debug for PinnedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuf")
            .field("ordinal", &self.pool.ordinal)
            .field("index", &self.slot.as_ref().map(|s| s.index))
            .field("len", &self.len())
            .finish()
    }
}

impl PinnedBuf {
    /// The device of the pool this buffer came from.
    pub fn ordinal(&self) -> usize {
        self.pool.ordinal
    }

    /// The buffer's place in its ring (0..count).
    pub fn index(&self) -> usize {
        self.slot.as_ref().map_or(0, |s| s.index)
    }

    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.pool.ctx
    }

    /// Queues the copy of the first `len` bytes (checked by the caller to
    /// be at most the capacity) into `dst` on `stream`, records the
    /// buffer's copy event after it and returns the buffer to its pool,
    /// reusable once the copy has completed. On an error the buffer goes
    /// back free, after waiting for the stream if a copy may have been
    /// queued.
    pub(crate) fn copy_to_device(
        mut self,
        stream: &Arc<CudaStream>,
        dst: &mut cudarc::driver::CudaSlice<u8>,
        len: usize,
    ) -> Result<(), DeviceError> {
        let ordinal = self.pool.ordinal;
        let Some(slot) = self.slot.take() else {
            return Err(DeviceError::Invalid {
                ordinal,
                reason: "a pinned buffer that was already uploaded".into(),
            });
        };
        let pool = Arc::clone(&self.pool);
        if len > slot.buf.len() || len > dst.len() {
            let reason = format!(
                "a copy of {len} bytes from a pinned buffer of {} bytes into a device buffer of {}",
                slot.buf.len(),
                dst.len()
            );
            pool.give_back(slot);
            return Err(DeviceError::Invalid { ordinal, reason });
        }
        // The copy outlives this borrow: the copy event recorded below keeps
        // the pool from handing the memory out, or freeing it, before the
        // copy has read it.
        let src = &slot.buf.as_slice()[..len];
        let queued = stream
            .memcpy_htod(src, dst)
            .map_err(driver("cuMemcpyHtoDAsync of a batch", ordinal))
            .and_then(|()| {
                slot.copied
                    .record(stream)
                    .map_err(driver("cuEventRecord after a batch's copy", ordinal))
            });
        match queued {
            Ok(()) => {
                pool.give_back_copying(slot);
                Ok(())
            }
            Err(e) => {
                // The copy may be queued without an event after it: wait
                // for the stream before the buffer can be written again.
                if let Err(sync) = stream.synchronize() {
                    tracing::warn!(error = %sync, "waiting for the side stream after a failed upload failed");
                }
                pool.give_back(slot);
                Err(e)
            }
        }
    }
}

impl Deref for PinnedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.slot {
            // The pool hands a slot to one `PinnedBuf` at a time, and only
            // after its last copy has completed.
            Some(slot) => slot.buf.as_slice(),
            None => &[],
        }
    }
}

impl DerefMut for PinnedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.slot {
            Some(slot) => slot.buf.as_mut_slice(),
            None => &mut [],
        }
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.give_back(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_buffers_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PinnedBuf>();
        assert_send_sync::<PinnedPool>();
    }

    #[test]
    fn a_pool_without_a_device_says_why() {
        match PinnedPool::new(0, 2, 1024) {
            Ok(pool) => {
                // A GPU is here: the ring hands out each buffer once.
                let a = pool.try_get().expect("query").expect("a free buffer");
                let b = pool.try_get().expect("query").expect("a second free buffer");
                assert!(
                    pool.try_get().expect("query").is_none(),
                    "a third buffer from a ring of 2"
                );
                assert_ne!(a.index(), b.index());
                assert_eq!(a.len(), 1024);
                assert!(a.iter().all(|&x| x == 0));
                drop(a);
                assert!(
                    pool.try_get().expect("query").is_some(),
                    "a dropped buffer is free again"
                );
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with("no ") || text.contains("fail"), "{text}");
                println!("skipped: a_pool_without_a_device_says_why: {text}");
            }
        }
    }

    #[test]
    fn an_empty_pool_is_refused() {
        match open_context(0) {
            Ok(ctx) => {
                let e = PinnedPool::with_context(&ctx, 0, 16).expect_err("no buffers");
                assert!(e.to_string().contains("0 buffers"), "{e}");
            }
            Err(reason) => println!("skipped: an_empty_pool_is_refused: {reason}"),
        }
    }
}
