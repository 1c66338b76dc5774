//! The typed buffers the safe launches ([`crate::Kernels`]' methods in
//! `batch.rs`) and the nvJPEG decoder take, and the allocations the worker
//! makes without a memset:
//!
//! - [`DeviceImage`]: an RGB image's rows in a device allocation of its
//!   own. Its fields are public (tests and the decoder build one from
//!   parts), so every launch checks them against the buffer
//!   ([`DeviceImage::check_rows`]) before it reads or writes a byte.
//! - [`alloc_bytes`]: device bytes a kernel or a copy fills before
//!   anything reads them.
//! - [`PinnedBuffer`]: a page-locked host buffer reached as plain bytes.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice};

/// A decoded image in device memory: `height` rows of `pitch` bytes, RGB
/// interleaved, `pitch >= 3 * width`.
#[derive(Debug)]
pub struct DeviceImage {
    pub width: u32,
    pub height: u32,
    pub pitch: u32,
    pub buf: CudaSlice<u8>,
}

impl DeviceImage {
    /// A packed `w`x`h` image on `stream`, its bytes unspecified until a
    /// kernel or a copy writes them.
    pub fn alloc(stream: &Arc<CudaStream>, w: u32, h: u32) -> Result<Self, DriverError> {
        let pitch = w.saturating_mul(3);
        Ok(Self {
            width: w,
            height: h,
            pitch,
            buf: alloc_bytes(stream, (pitch as usize * h as usize).max(1))?,
        })
    }

    /// A copy of this image on `stream` (same size and pitch).
    pub fn copy(&self, stream: &Arc<CudaStream>) -> Result<Self, DriverError> {
        Ok(Self {
            width: self.width,
            height: self.height,
            pitch: self.pitch,
            buf: stream.clone_dtod(&self.buf)?,
        })
    }

    /// Whether the rows are packed (`pitch == 3 * width`), as every kernel
    /// but the crop-resize and the chains (which take a pitch) needs.
    pub fn is_packed(&self) -> bool {
        u64::from(self.pitch) == 3 * u64::from(self.width)
    }

    /// That the image is not empty, its rows hold its pixels and its buffer
    /// holds its rows: what a launch relies on before reading or writing it.
    pub fn check_rows(&self) -> Result<(), String> {
        if self.width == 0 || self.height == 0 {
            return Err(format!("image size {}x{} is empty", self.width, self.height));
        }
        if u64::from(self.pitch) < 3 * u64::from(self.width)
            || u64::from(self.pitch) * u64::from(self.height) > self.buf.len() as u64
        {
            return Err(format!(
                "a {}x{} image's buffer of {} bytes does not hold {} rows of {}",
                self.width,
                self.height,
                self.buf.len(),
                self.height,
                self.pitch
            ));
        }
        Ok(())
    }
}

/// `len` device bytes on `stream`, not zeroed: for a buffer a kernel or a
/// copy writes in full before anything reads it (a memset per image is
/// measurable on the lanes).
pub fn alloc_bytes(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<u8>, DriverError> {
    // SAFETY: every bit pattern is a valid u8, so the uninitialised device
    // bytes are plain values to any reader; the host sees them only
    // through a copy, which makes initialised host bytes of them.
    unsafe { stream.alloc::<u8>(len) }
}

/// A page-locked host buffer, reached as plain bytes (`&[u8]` through
/// `&self`, `&mut [u8]` through `&mut self`) with no driver call per
/// access: the worker's copy-back buffers, lent to the gRPC edge as
/// `Bytes`, and the client's upload ring. Copies into it and out of it go
/// through those slices (cudarc's `memcpy_dtoh` and `memcpy_htod`), and
/// the owner waits for a copy before the bytes mean anything: a copy out
/// of it may still be reading when `as_mut_slice` writes, which gives the
/// device torn bytes but nothing unsound on the host (as cudarc's copies
/// from plain slices).
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
    /// The allocation, freed when the buffer drops.
    _host: PinnedHostSlice<u8>,
}

// SAFETY: `ptr` points into `_host`, page-locked memory the buffer owns
// (PinnedHostSlice is Send), reached only through `as_slice` (`&self`) and
// `as_mut_slice` (`&mut self`), which follow the borrow rules.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only reads (`as_slice`).
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// A zeroed page-locked buffer of `len` bytes (at least one) of `ctx`.
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, DriverError> {
        let len = len.max(1);
        // SAFETY: plain page-locked memory (flags 0: no write-combining, the
        // host reads it back); zeroed below before any reference to it.
        let mut host = unsafe { ctx.alloc_pinned_with_flags::<u8>(len, 0) }?;
        // A new allocation: no copy is in flight, the event wait is at once.
        let ptr = host.as_mut_ptr()?;
        // SAFETY: `ptr` is the start of the `len` bytes just allocated,
        // which nothing else references yet.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(Self { ptr, len, _host: host })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes (zeroed at allocation)
        // owned by `self`; no `&mut` to them exists while `&self` is held.
        unsafe { std::slice::from_raw_parts(self.ptr.cast_const(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only
        // reference to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
