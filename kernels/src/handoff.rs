//! Samples a GPU lane leaves on the device for a consumer in the same
//! process: where the worker's lanes and the client's uploader meet when
//! both run in one process on one device (the GPU worker of
//! `workers="local"`, which runs in the trainer's process).
//!
//! ```text
//! loader (device batches on GPU n) ── Sink::open(n) ──► registry: id -> Weak<Sink>
//!      │ work item names the sink's id
//!      ▼
//! worker in this process: Sink::find(id) on GPU n
//!      lane: kernels ─► DeviceOutput (ready event) ─► DevicePixels per sample
//!      service: Sink::put(pixels) ─► ticket, sent instead of the pixels
//!      ▼
//! client: Sink::take(ticket) ─► its batch's row, copied on the device
//!         after waiting on `ready`; the copy's event added to the output's
//!         uses, which its free (on the lane's stream) waits for
//! ```
//!
//! A worker in another process finds no sink of that id and sends pixels
//! as before; so does one whose lanes run on another device. Entries not
//! taken (a stream that broke with samples in flight) are freed with the
//! sink, when the loader is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};

/// One lane batch's output in device memory, shared by its samples'
/// [`DevicePixels`]: freed on the lane's stream once its last sample is
/// dropped, after every use recorded with [`DevicePixels::used_until`].
#[derive(Debug)]
pub struct DeviceOutput {
    /// `Some` until dropped.
    slice: Option<CudaSlice<u8>>,
    ptr: u64,
    ordinal: usize,
    /// Recorded on the lane's stream after the kernels that wrote it.
    ready: CudaEvent,
    /// Events recorded after each consumer's last use (its copy), on the
    /// consumers' streams.
    uses: Mutex<Vec<CudaEvent>>,
}

impl DeviceOutput {
    /// `slice`, written by work queued on `stream` (its own stream, as
    /// lanes allocate it): records the ready event there now.
    pub fn new(slice: CudaSlice<u8>, stream: &CudaStream) -> Result<Arc<Self>, cudarc::driver::DriverError> {
        let ready = stream.record_event(None)?;
        let ptr = {
            let (ptr, _record) = slice.device_ptr(stream);
            ptr
        };
        Ok(Arc::new(Self {
            ordinal: slice.ordinal(),
            ptr,
            slice: Some(slice),
            ready,
            uses: Mutex::new(Vec::new()),
        }))
    }

    pub fn len(&self) -> usize {
        self.slice.as_ref().map_or(0, CudaSlice::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for DeviceOutput {
    /// Frees the memory on the stream that allocated it, after making that
    /// stream wait for every recorded use: no host wait, and no reuse of
    /// the memory before the last consumer's copy has run.
    fn drop(&mut self) {
        let Some(slice) = self.slice.take() else { return };
        let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|p| p.into_inner()));
        for used in &uses {
            if let Err(e) = slice.stream().wait(used) {
                // The stream cannot be ordered after the use: wait here
                // rather than free memory a copy may still read.
                tracing::warn!(device = self.ordinal, error = %e, "ordering a sample's free after its use failed; waiting on the host");
                if let Err(e) = used.synchronize() {
                    tracing::warn!(device = self.ordinal, error = %e, "waiting for a sample's use before its free failed");
                }
            }
        }
        drop(slice);
    }
}

/// One sample's pixels in a [`DeviceOutput`]: `len` bytes from `offset`,
/// uint8 HWC RGB.
#[derive(Clone, Debug)]
pub struct DevicePixels {
    output: Arc<DeviceOutput>,
    offset: usize,
    len: usize,
}

impl DevicePixels {
    /// Bytes `offset..offset + len` of `output`; `None` when out of range.
    pub fn new(output: &Arc<DeviceOutput>, offset: usize, len: usize) -> Option<Self> {
        (offset.checked_add(len)? <= output.len()).then(|| Self {
            output: Arc::clone(output),
            offset,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the pixels are on.
    pub fn ordinal(&self) -> usize {
        self.output.ordinal
    }

    /// The device address of the first byte. Valid on `stream` once it has
    /// waited on [`DevicePixels::ready`], and until the use it queues is
    /// recorded with [`DevicePixels::used_until`].
    pub fn device_ptr(&self) -> u64 {
        self.output.ptr + self.offset as u64
    }

    /// Recorded once the pixels were written.
    pub fn ready(&self) -> &CudaEvent {
        &self.output.ready
    }

    /// Whether `self` and `other` lie in one output (one wait serves both).
    pub fn same_output(&self, other: &DevicePixels) -> bool {
        Arc::ptr_eq(&self.output, &other.output)
    }

    /// Records that every use of the pixels queued so far ends at `event`:
    /// their memory is freed only after it.
    pub fn used_until(&self, event: CudaEvent) {
        self.output.uses.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }
}

/// Where one loader takes the samples left on its device, by ticket.
#[derive(Debug)]
pub struct Sink {
    id: u64,
    ordinal: usize,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, DevicePixels>>,
}

/// The open sinks of this process, by id.
fn registry() -> &'static Mutex<HashMap<u64, Weak<Sink>>> {
    static SINKS: OnceLock<Mutex<HashMap<u64, Weak<Sink>>>> = OnceLock::new();
    SINKS.get_or_init(Default::default)
}

impl Sink {
    /// A sink for samples on device `ordinal`, findable by its id until it
    /// is dropped.
    pub fn open(ordinal: usize) -> Arc<Self> {
        let mut sinks = registry().lock().unwrap_or_else(|p| p.into_inner());
        sinks.retain(|_, s| s.strong_count() > 0);
        let id = loop {
            let id = random_id();
            if id != 0 && !sinks.contains_key(&id) {
                break id;
            }
        };
        let sink = Arc::new(Self {
            id,
            ordinal,
            next: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
        });
        sinks.insert(id, Arc::downgrade(&sink));
        sink
    }

    /// The sink with `id` in this process, if one is open.
    pub fn find(id: u64) -> Option<Arc<Self>> {
        let sinks = registry().lock().unwrap_or_else(|p| p.into_inner());
        sinks.get(&id).and_then(Weak::upgrade)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The device whose samples it takes.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Leaves `pixels` for the client; the ticket that takes them.
    pub fn put(&self, pixels: DevicePixels) -> u64 {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ticket, pixels);
        ticket
    }

    /// The pixels left under `ticket`, once.
    pub fn take(&self, ticket: u64) -> Option<DevicePixels> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&ticket)
    }

    /// Samples left and not yet taken.
    pub fn waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let mut sinks = registry().lock().unwrap_or_else(|p| p.into_inner());
        sinks.remove(&self.id);
    }
}

/// A process-unique, hard-to-guess id: the clock, the address of a fresh
/// allocation and a counter, mixed (splitmix64).
fn random_id() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let here = Box::new(0u8);
    let mut z =
        nanos ^ ((&*here as *const u8 as u64) << 17) ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_is_found_by_its_id_while_open_and_not_after() {
        let a = Sink::open(0);
        let b = Sink::open(1);
        assert_ne!(a.id(), b.id());
        assert_eq!(Sink::find(a.id()).map(|s| s.ordinal()), Some(0));
        assert_eq!(Sink::find(b.id()).map(|s| s.ordinal()), Some(1));
        let id = a.id();
        drop(a);
        assert!(Sink::find(id).is_none(), "a dropped sink is not found");
        assert!(Sink::find(b.id()).is_some());
    }

    #[test]
    fn tickets_are_distinct_and_a_missing_ticket_takes_nothing() {
        let s = Sink::open(0);
        assert!(s.take(1).is_none());
        assert_eq!(s.waiting(), 0);
    }
}
