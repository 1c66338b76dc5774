//! Page-locked buffers lent out as [`Bytes`]: a lane copies a batch's
//! output from the device into one, and its samples' pixels are slices of
//! it all the way to the socket, with no copy to the heap. The buffer goes
//! back on its lane's shelf when the last slice drops (after the gRPC edge
//! has written it), and is reused for a later batch.
//!
//! A lane lends at most [`MAX_LENT`] buffers at once, so page-locked memory
//! stays bounded when a slow client holds samples in its stream's window;
//! past that, the lane copies the batch to the heap as before (`None` from
//! [`Shelf::take`]).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use stoker_cuda::PinnedBuffer;

use super::device::GpuError;

/// Buffers one lane lends at most at once.
pub(super) const MAX_LENT: usize = 16;

/// A lane's page-locked buffers: those free to fill, and a count of those
/// lent out.
#[derive(Debug, Default)]
pub(super) struct Shelf {
    inner: Arc<Mutex<Stock>>,
}

#[derive(Debug, Default)]
struct Stock {
    free: Vec<PinnedBuffer>,
    lent: usize,
    /// The lane has stopped (its runner dropped, the worker exiting).
    closed: bool,
}

impl Shelf {
    /// A free buffer of at least `len` bytes (another free one when none
    /// is that large, for the caller to replace), or `None` when
    /// [`MAX_LENT`] are out. The caller fills it and lends it with [`Shelf::lend`].
    pub(super) fn take(&self, len: usize) -> Option<Option<PinnedBuffer>> {
        let mut stock = lock(&self.inner);
        if stock.lent >= MAX_LENT {
            return None;
        }
        let fits = stock.free.iter().position(|b| b.len() >= len);
        Some(fits.map(|i| stock.free.swap_remove(i)).or_else(|| stock.free.pop()))
    }

    /// Lends the first `len` bytes of `buf` (filled, with no copy in
    /// flight into it) as one `Bytes`; `buf` comes back to this shelf when
    /// the last slice of it drops.
    pub(super) fn lend(&self, buf: PinnedBuffer, len: usize) -> Result<Bytes, GpuError> {
        if len > buf.len() {
            return Err(GpuError::Invalid(format!(
                "lending {len} bytes of a {}-byte buffer",
                buf.len()
            )));
        }
        lock(&self.inner).lent += 1;
        Ok(Bytes::from_owner(Lent {
            buf: Some(buf),
            len,
            shelf: Arc::clone(&self.inner),
        }))
    }
}

/// The lane frees its free buffers itself, on its own thread, as it stops
/// (the runner joins the lanes before the process exits, so no CUDA memory
/// is freed while the libraries tear down); a buffer still lent then is
/// let go of when its last slice drops, without freeing it: the process is
/// ending.
impl Drop for Shelf {
    fn drop(&mut self) {
        let free = {
            let mut stock = lock(&self.inner);
            stock.closed = true;
            std::mem::take(&mut stock.free)
        };
        drop(free);
    }
}

fn lock(m: &Mutex<Stock>) -> std::sync::MutexGuard<'_, Stock> {
    // The stock is two plain fields, consistent after any panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A filled buffer lent out (its first `len` bytes); back on its shelf on
/// drop.
struct Lent {
    buf: Option<PinnedBuffer>,
    len: usize,
    shelf: Arc<Mutex<Stock>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], |b| &b.as_slice()[..self.len])
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut stock = lock(&self.shelf);
        stock.lent -= 1;
        if let Some(buf) = self.buf.take() {
            if stock.closed {
                std::mem::forget(buf);
            } else {
                stock.free.push(buf);
            }
        }
    }
}
