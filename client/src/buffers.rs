//! Where batches are assembled: buffers that are reused, so that a batch
//! (38 MiB for 256 images of 224x224) costs no fresh allocation and no page
//! faults. The received sample bytes are copied once, straight into them.
//!
//! - [`HostPool`]: recycled heap buffers, for host batches.
//! - [`PinnedPool`]: the device path's ring of page-locked buffers, which
//!   go back to the ring once their copy to the GPU has completed. They are
//!   host memory and live on the host side (`pinned`), so these buffers
//!   need nothing from the device module.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use crate::error::ClientError;
use crate::pinned::{PinnedBuf, PinnedPool};

/// A batch's pixel bytes: the first `len` bytes of a reused buffer.
#[derive(Debug)]
pub struct Pixels {
    storage: Storage,
    len: usize,
}

#[derive(Debug)]
enum Storage {
    Host(HostBuf),
    Pinned(PinnedBuf),
    /// Handed to the device: the batch's pixels are in `Batch::device`.
    Uploaded,
    /// No buffer yet: a batch of each image's size takes one once it is
    /// complete (`assemble`).
    Unset,
}

impl Pixels {
    /// Pixels without a buffer yet.
    pub(crate) fn unset() -> Self {
        Self {
            storage: Storage::Unset,
            len: 0,
        }
    }

    pub(crate) fn is_unset(&self) -> bool {
        matches!(self.storage, Storage::Unset)
    }

    fn capacity(&self) -> usize {
        match &self.storage {
            Storage::Host(b) => b.buf.len(),
            Storage::Pinned(b) => b.len(),
            Storage::Uploaded | Storage::Unset => 0,
        }
    }

    /// Appends `bytes`; false when they do not fit.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> bool {
        let end = self.len + bytes.len();
        if end > self.capacity() {
            return false;
        }
        let Some(dst) = self.tail(end) else {
            return false;
        };
        dst.copy_from_slice(bytes);
        self.len = end;
        true
    }

    /// Appends `n` zero bytes; false when they do not fit.
    pub(crate) fn push_zeros(&mut self, n: usize) -> bool {
        let end = self.len + n;
        let Some(dst) = self.tail(end) else {
            return false;
        };
        dst.fill(0);
        self.len = end;
        true
    }

    /// The bytes from the end of the pixels up to `end`, if the buffer
    /// holds them.
    fn tail(&mut self, end: usize) -> Option<&mut [u8]> {
        if end > self.capacity() {
            return None;
        }
        match &mut self.storage {
            Storage::Host(b) => Some(&mut b.buf[self.len..end]),
            Storage::Pinned(b) => Some(&mut b[self.len..end]),
            Storage::Uploaded | Storage::Unset => None,
        }
    }

    /// Appends `len` bytes left as they are (a row the device fills);
    /// false when they do not fit.
    pub(crate) fn reserve(&mut self, len: usize) -> bool {
        let end = self.len + len;
        if end > self.capacity() {
            return false;
        }
        self.len = end;
        true
    }

    /// Whether the bytes are in a page-locked buffer (on their way to a
    /// device).
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self.storage, Storage::Pinned(_))
    }

    /// The pinned buffer, for an upload; the pixels are then empty.
    pub(crate) fn take_pinned(&mut self) -> Option<PinnedBuf> {
        match std::mem::replace(&mut self.storage, Storage::Uploaded) {
            Storage::Pinned(b) => {
                self.len = 0;
                Some(b)
            }
            other => {
                self.storage = other;
                None
            }
        }
    }
}

impl Deref for Pixels {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.storage {
            Storage::Host(b) => &b.buf[..self.len],
            Storage::Pinned(b) => &b[..self.len],
            Storage::Uploaded | Storage::Unset => &[],
        }
    }
}

impl DerefMut for Pixels {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        match &mut self.storage {
            Storage::Host(b) => &mut b.buf[..len],
            Storage::Pinned(b) => &mut b[..len],
            Storage::Uploaded | Storage::Unset => &mut [],
        }
    }
}

/// A heap buffer that returns to its pool when dropped.
#[derive(Debug)]
pub(crate) struct HostBuf {
    buf: Vec<u8>,
    pool: Arc<Mutex<Vec<Vec<u8>>>>,
    keep: usize,
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        let mut free = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < self.keep {
            free.push(std::mem::take(&mut self.buf));
        }
    }
}

/// Heap buffers of one size, kept for reuse (up to `keep` of them idle).
#[derive(Debug, Clone)]
pub(crate) struct HostPool {
    bytes: usize,
    keep: usize,
    free: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl HostPool {
    pub fn new(bytes: usize, keep: usize) -> Self {
        Self {
            bytes,
            keep,
            free: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn get(&self) -> HostBuf {
        self.get_at_least(self.bytes)
    }

    /// A buffer of at least `bytes`: a kept one, grown if it is smaller
    /// (a batch of each image's size needs what its largest image makes).
    fn get_at_least(&self, bytes: usize) -> HostBuf {
        let mut buf = self
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        if buf.len() < bytes {
            buf.resize(bytes, 0);
        }
        HostBuf {
            buf,
            pool: Arc::clone(&self.free),
            keep: self.keep,
        }
    }
}

/// Where the assembler takes its next batch buffer.
#[derive(Debug, Clone)]
pub(crate) enum BatchBuffers {
    Host(HostPool),
    /// Waits for a free buffer of the ring: backpressure from the device.
    Pinned(Arc<PinnedPool>),
}

impl BatchBuffers {
    pub async fn get(&self) -> Result<Pixels, ClientError> {
        let storage = match self {
            Self::Host(pool) => Storage::Host(pool.get()),
            Self::Pinned(pool) => Storage::Pinned(
                pool.get()
                    .await
                    .map_err(|e| ClientError::Device(format!("no pinned batch buffer: {e}")))?,
            ),
        };
        Ok(Pixels { storage, len: 0 })
    }

    /// A host buffer of at least `bytes`, now: where a batch of each
    /// image's size is packed (the loader gives those host buffers only).
    pub fn host(&self, bytes: usize) -> Result<Pixels, ClientError> {
        match self {
            Self::Host(pool) => Ok(Pixels {
                storage: Storage::Host(pool.get_at_least(bytes)),
                len: 0,
            }),
            Self::Pinned(_) => Err(ClientError::Batches(
                "a batch of each image's size is packed in host memory, and this loader's buffers are pinned"
                    .to_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn host_buffers_are_reused_and_bounded() {
        let buffers = BatchBuffers::Host(HostPool::new(8, 1));
        let mut a = buffers.get().await.unwrap();
        assert!(a.push(&[1, 2, 3]));
        assert!(a.push(&[4, 5, 6, 7, 8]));
        assert!(!a.push(&[9]), "past the capacity");
        assert_eq!(&a[..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let ptr = a.as_ptr();
        drop(a);
        let b = buffers.get().await.unwrap();
        assert_eq!(b.as_ptr(), ptr, "the dropped buffer is handed out again");
        assert!(b.is_empty());
        let c = buffers.get().await.unwrap();
        assert_ne!(c.as_ptr(), ptr);
        drop((b, c));
        let BatchBuffers::Host(pool) = &buffers else {
            unreachable!()
        };
        assert_eq!(pool.free.lock().unwrap().len(), 1, "only `keep` idle buffers are kept");
    }
}
