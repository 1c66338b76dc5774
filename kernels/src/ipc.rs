//! CUDA IPC: device memory and events that one process shares with another
//! on the same GPU, for the device handoff between a worker and a client
//! on one host (the worker writes a ring of device buffers, the client's
//! kernels read them).
//!
//! Three layers, as the rest of the crate's CUDA use: cudarc's `sys` (the
//! driver's functions, loaded at run time), [`call`] (a driver call as a
//! `Result` naming the call), and owning types freed on drop:
//!
//! - [`SharedBuffer`]: device memory from `cuMemAlloc` (IPC cannot export
//!   the stream-ordered pool's memory) with the handle that names it; it
//!   must outlive every other process's mapping of it (CUDA keeps no
//!   count), which the protocol that shares it has to ensure;
//! - [`MappedBuffer`]: another process's buffer opened here, its length
//!   checked against the allocation the driver maps, so a message cannot
//!   make the reader run past it;
//! - [`SharedEvent`] and [`MappedEvent`]: an interprocess event recorded
//!   by the writer after its writes, and waited on by the reader's stream
//!   (the reader never blocks its thread).
//!
//! Handles are [`HANDLE_BYTES`] opaque bytes, sent over gRPC. A forged or
//! stale one is refused by the driver when opened, as an error naming the
//! call.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, sys};

/// Bytes of a CUDA IPC memory or event handle (`CU_IPC_HANDLE_SIZE`).
pub const HANDLE_BYTES: usize = 64;

/// Why an IPC step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpcError {
    #[error("cuda {call} failed: {reason}")]
    Call { call: &'static str, reason: String },
    #[error("a cuda ipc handle is {HANDLE_BYTES} bytes, got {0}")]
    HandleLength(usize),
    #[error("the shared buffer holds {mapped} bytes, {asked} were asked for")]
    TooShort { mapped: usize, asked: usize },
}

/// One driver call, its status as a `Result` naming it.
fn call(name: &'static str, status: sys::CUresult) -> Result<(), IpcError> {
    status.result().map_err(|e| IpcError::Call {
        call: name,
        reason: e.to_string(),
    })
}

fn bind(ctx: &CudaContext) -> Result<(), IpcError> {
    ctx.bind_to_thread().map_err(|e| IpcError::Call {
        call: "cuCtxSetCurrent",
        reason: e.to_string(),
    })
}

fn handle_bytes(reserved: &[std::ffi::c_char; HANDLE_BYTES]) -> [u8; HANDLE_BYTES] {
    reserved.map(|b| b as u8)
}

fn handle_from(bytes: &[u8]) -> Result<[std::ffi::c_char; HANDLE_BYTES], IpcError> {
    let bytes: &[u8; HANDLE_BYTES] = bytes.try_into().map_err(|_| IpcError::HandleLength(bytes.len()))?;
    Ok(bytes.map(|b| b as std::ffi::c_char))
}

/// Device memory another process on this GPU can map.
#[derive(Debug)]
pub struct SharedBuffer {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    len: usize,
    handle: [u8; HANDLE_BYTES],
}

// SAFETY: the buffer is a device address owned by this value; driver calls
// on it are thread-safe once the context is bound, which every method does.
unsafe impl Send for SharedBuffer {}
// SAFETY: as for Send: `&self` methods only read the address and handle.
unsafe impl Sync for SharedBuffer {}

impl SharedBuffer {
    /// `len` bytes of device memory (uninitialised) in `ctx`, exported.
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, IpcError> {
        bind(ctx)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the context is current.
        call("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) })?;
        let mut handle = sys::CUipcMemHandle {
            reserved: [0; HANDLE_BYTES],
        };
        // SAFETY: `ptr` is the base of an allocation just made by
        // cuMemAlloc; `handle` is a valid out-pointer.
        if let Err(e) = call("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) }) {
            // SAFETY: `ptr` was allocated above and is not used again.
            let _ = unsafe { sys::cuMemFree_v2(ptr) };
            return Err(e);
        }
        Ok(Self {
            ctx: Arc::clone(ctx),
            ptr,
            len,
            handle: handle_bytes(&handle.reserved),
        })
    }

    /// What another process opens it by ([`MappedBuffer::open`]).
    pub fn handle(&self) -> [u8; HANDLE_BYTES] {
        self.handle
    }

    /// The buffer's device address in this process.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is
            // freed once. Freeing it while another process still maps it
            // is undefined for that process (CUDA keeps no count): whoever
            // shares a buffer must free it only after the peer has closed
            // its mapping or is gone (the ring's protocol, not this type).
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Another process's [`SharedBuffer`], mapped into this one.
#[derive(Debug)]
pub struct MappedBuffer {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: as for SharedBuffer: an address this value owns the mapping of.
unsafe impl Send for MappedBuffer {}
// SAFETY: `&self` methods only read the address.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// Opens the buffer `handle` names, of which `len` bytes will be read:
    /// refused if the driver refuses the handle (forged, stale, another
    /// device, no shared IPC namespace) or if the allocation is shorter.
    pub fn open(ctx: &Arc<CudaContext>, handle: &[u8], len: usize) -> Result<Self, IpcError> {
        let reserved = handle_from(handle)?;
        bind(ctx)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the handle is plain bytes
        // the driver validates; the context is current.
        call("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                sys::CUipcMemHandle { reserved },
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        })?;
        let mapped = Self {
            ctx: Arc::clone(ctx),
            ptr,
            len,
        };
        let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid out-pointers; `ptr` is a mapped address.
        call("cuMemGetAddressRange", unsafe {
            sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr)
        })?;
        let offset = ptr.checked_sub(base).ok_or(IpcError::Call {
            call: "cuMemGetAddressRange",
            reason: "the mapping lies before its allocation's base".to_owned(),
        })?;
        let available = size.saturating_sub(offset as usize);
        if available < len {
            return Err(IpcError::TooShort {
                mapped: available,
                asked: len,
            });
        }
        Ok(mapped)
    }

    /// The buffer's device address in this process.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The bytes that may be read from it.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: `ptr` came from cuIpcOpenMemHandle and is closed once.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}

/// An event another process can wait on: recorded after the writes it
/// should see.
#[derive(Debug)]
pub struct SharedEvent {
    ctx: Arc<CudaContext>,
    event: sys::CUevent,
    handle: [u8; HANDLE_BYTES],
}

// SAFETY: a CUevent may be recorded and destroyed from any thread with its
// context bound, which every method does.
unsafe impl Send for SharedEvent {}
// SAFETY: recording takes `&self`; the driver orders concurrent records.
unsafe impl Sync for SharedEvent {}

impl SharedEvent {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self, IpcError> {
        bind(ctx)?;
        let mut event: sys::CUevent = std::ptr::null_mut();
        let flags =
            sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32 | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: valid out-pointer; interprocess events must not time,
        // which the flags say.
        call("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
        let mut handle = sys::CUipcEventHandle {
            reserved: [0; HANDLE_BYTES],
        };
        // SAFETY: `event` was just created with CU_EVENT_INTERPROCESS.
        if let Err(e) = call("cuIpcGetEventHandle", unsafe {
            sys::cuIpcGetEventHandle(&mut handle, event)
        }) {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(event) };
            return Err(e);
        }
        Ok(Self {
            ctx: Arc::clone(ctx),
            event,
            handle: handle_bytes(&handle.reserved),
        })
    }

    /// What another process opens it by ([`MappedEvent::open`]).
    pub fn handle(&self) -> [u8; HANDLE_BYTES] {
        self.handle
    }

    /// Records the event on `stream`: a reader waiting on it sees
    /// everything queued on `stream` before.
    pub fn record(&self, stream: &CudaStream) -> Result<(), IpcError> {
        bind(&self.ctx)?;
        // SAFETY: the event and the stream belong to this context and are
        // alive for the call.
        call("cuEventRecord", unsafe {
            sys::cuEventRecord(self.event, stream.cu_stream())
        })
    }
}

impl Drop for SharedEvent {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: created in `new`, destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
        }
    }
}

/// Another process's [`SharedEvent`], opened here.
#[derive(Debug)]
pub struct MappedEvent {
    ctx: Arc<CudaContext>,
    event: sys::CUevent,
}

// SAFETY: as for SharedEvent.
unsafe impl Send for MappedEvent {}
// SAFETY: waiting takes `&self`.
unsafe impl Sync for MappedEvent {}

impl MappedEvent {
    /// Opens the event `handle` names; refused like [`MappedBuffer::open`].
    pub fn open(ctx: &Arc<CudaContext>, handle: &[u8]) -> Result<Self, IpcError> {
        let reserved = handle_from(handle)?;
        bind(ctx)?;
        let mut event: sys::CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the driver validates the handle.
        call("cuIpcOpenEventHandle", unsafe {
            sys::cuIpcOpenEventHandle(&mut event, sys::CUipcEventHandle { reserved })
        })?;
        Ok(Self {
            ctx: Arc::clone(ctx),
            event,
        })
    }

    /// Makes `stream` wait for the writer's last record of the event
    /// before it runs what is queued on it next; the thread does not wait.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<(), IpcError> {
        bind(&self.ctx)?;
        // SAFETY: the event was opened in this context and the stream
        // belongs to it; both outlive the call.
        call("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(stream.cu_stream(), self.event, 0)
        })
    }
}

impl Drop for MappedEvent {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: opened in `open`, destroyed once (an opened
            // interprocess event is released with cuEventDestroy).
            let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
        }
    }
}

/// The device's UUID (`cuDeviceGetUuid_v2`: a MIG instance's own under
/// MIG), written as `nvidia-smi -L` writes a GPU's: `GPU-` then 32 hex
/// digits in 8-4-4-4-12 groups. Two processes use the same device when
/// theirs are equal.
pub fn device_uuid(ctx: &CudaContext) -> Result<String, IpcError> {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: valid out-pointer and a device handle from a live context.
    call("cuDeviceGetUuid", unsafe {
        sys::cuDeviceGetUuid_v2(&mut uuid, ctx.cu_device())
    })?;
    Ok(format_uuid(&uuid.bytes.map(|b| b as u8)))
}

fn format_uuid(b: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let b: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(format_uuid(&b), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    }

    #[test]
    fn a_handle_of_the_wrong_length_is_refused_before_the_driver() {
        assert_eq!(handle_from(&[0u8; 63]), Err(IpcError::HandleLength(63)));
        assert!(handle_from(&[7u8; HANDLE_BYTES]).is_ok());
    }
}
