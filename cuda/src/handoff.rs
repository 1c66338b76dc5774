//! Samples a GPU lane leaves on the device for a consumer in the same
//! process: where the worker's lanes and the client's uploader meet when
//! both run in one process on one device (the GPU worker of
//! `workers="local"`, which runs in the trainer's process).
//!
//! ```text
//! loader (device batches on GPU n) ── Sink::open(n) ──► registry: id -> Weak<Sink>
//!      │ each work item attempt: Sink::offer ─► (id, tag) in the request
//!      ▼
//! worker in this process: Sink::find(id) on GPU n
//!      lane: kernels ─► DeviceOutput (ready event) ─► DevicePixels per sample
//!      service: Sink::put(tag, pixels) ─► ticket, sent instead of the pixels
//!      ▼
//! client: SinkOffer::take(ticket) ─► its batch's row, copied on the device
//!         after waiting on `ready`; the copy's event added to the output's
//!         uses, which its free (on the lane's stream) waits for
//! ```
//!
//! A worker in another process finds no sink of that id and sends pixels
//! as before; so does one whose lanes run on another device. What an
//! attempt left and the client did not take (a stream that broke or was
//! abandoned with samples in flight) is freed when the attempt's offer is
//! dropped, and a ticket takes only what its own attempt left.

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
        let stream = Arc::clone(slice.stream());
        drop(slice);
        crate::give_back_if_unclaimed(&stream);
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

/// Why [`copy_pixels`] could not queue its copies.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("row {row} of {len} bytes at byte {at} is past the device buffer of {buffer} bytes")]
    OutOfRange {
        row: usize,
        at: usize,
        len: usize,
        buffer: usize,
    },
    #[error("pixels on cuda device {pixels} cannot be copied into a buffer on device {buffer}")]
    Device { pixels: usize, buffer: usize },
    #[error("{what} failed: {source}")]
    Driver {
        what: &'static str,
        source: cudarc::driver::DriverError,
    },
}

/// Copies each `(at, pixels)` into `dst` from byte `at` on, on `stream`:
/// `stream` first waits for each pixels' output to be ready, and each
/// output's free then waits for an event recorded after the copies (on
/// the lane's stream, stream-ordered: no host wait). Every row is checked
/// to lie inside `dst`. When a copy cannot be queued, the stream is waited
/// for before the error returns, so no copy queued without its event can
/// outlive its source.
pub fn copy_pixels(
    stream: &Arc<CudaStream>,
    rows: &[(usize, &DevicePixels)],
    dst: &mut CudaSlice<u8>,
) -> Result<(), CopyError> {
    if rows.is_empty() {
        return Ok(());
    }
    let ordinal = stream.context().ordinal();
    for (row, (at, pixels)) in rows.iter().enumerate() {
        if pixels.ordinal() != ordinal || dst.context().ordinal() != ordinal {
            return Err(CopyError::Device {
                pixels: pixels.ordinal(),
                buffer: dst.context().ordinal(),
            });
        }
        if at.checked_add(pixels.len()).is_none_or(|end| end > dst.len()) {
            return Err(CopyError::OutOfRange {
                row,
                at: *at,
                len: pixels.len(),
                buffer: dst.len(),
            });
        }
    }
    let driver = |what| move |source| CopyError::Driver { what, source };
    // The outputs the rows lie in: a batch's images come from a few.
    let mut outputs: Vec<&DevicePixels> = Vec::new();
    for (_, pixels) in rows {
        if !outputs.iter().any(|o| o.same_output(pixels)) {
            outputs.push(pixels);
        }
    }
    for output in &outputs {
        stream
            .wait(output.ready())
            .map_err(driver("cuStreamWaitEvent on an image left on the device"))?;
    }
    let queued = (|| {
        let (base, _record) = dst.device_ptr(stream);
        for (at, pixels) in rows {
            // SAFETY: both ranges are live device memory of this device: the
            // destination lies inside `dst` (checked above), borrowed mutably
            // until this returns; the source is the `len` bytes of a live
            // output (`DevicePixels::new` checked them), which `stream` waited
            // to be written and whose free waits for the events recorded
            // below (or, when this fails, for the stream).
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    base + *at as u64,
                    pixels.device_ptr(),
                    pixels.len(),
                    stream.cu_stream(),
                )
            }
            .map_err(driver("cuMemcpyDtoDAsync of an image left on the device"))?;
        }
        for output in &outputs {
            let copied = stream
                .record_event(None)
                .map_err(driver("cuEventRecord after the copies of images left on the device"))?;
            output.used_until(copied);
        }
        Ok(())
    })();
    if queued.is_err()
        && let Err(e) = stream.synchronize()
    {
        tracing::warn!(device = ordinal, error = %e, "waiting for the stream after a failed copy failed");
    }
    queued
}

/// Where one loader takes the samples left on its device, by ticket.
///
/// Each work item attempt gets a tag ([`Sink::offer`]); the worker leaves
/// the attempt's samples under it ([`Sink::put`]) and the client takes
/// them by ticket, from that attempt only ([`Sink::take`]). When the
/// attempt ends, however it ends (done, failed, abandoned, the epoch
/// dropped), its offer is dropped: the samples it left and the client did
/// not take are freed, and the worker's later puts under it are refused.
#[derive(Debug)]
pub struct Sink {
    id: u64,
    ordinal: usize,
    tickets: Tickets<DevicePixels>,
}

/// The samples of a sink's open attempts, by ticket: what [`Sink`] keeps,
/// apart from the device (so that it is tested without one).
#[derive(Debug)]
struct Tickets<T> {
    state: Mutex<TicketState<T>>,
}

#[derive(Debug)]
struct TicketState<T> {
    next_ticket: u64,
    next_tag: u32,
    /// The attempts offered and not yet ended.
    open: std::collections::HashSet<u32>,
    /// Ticket -> (its attempt's tag, the sample).
    waiting: HashMap<u64, (u32, T)>,
}

impl<T> Tickets<T> {
    fn new() -> Self {
        Self {
            state: Mutex::new(TicketState {
                next_ticket: 1,
                next_tag: 1,
                open: Default::default(),
                waiting: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TicketState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh, nonzero tag, open until [`Tickets::close`].
    fn open(&self) -> u32 {
        let mut st = self.lock();
        loop {
            let tag = st.next_tag;
            st.next_tag = st.next_tag.wrapping_add(1).max(1);
            if st.open.insert(tag) {
                return tag;
            }
        }
    }

    /// Leaves `value` under `tag`: its ticket, or `None` (and `value`
    /// dropped) when the attempt has ended or was never offered.
    fn put(&self, tag: u32, value: T) -> Option<u64> {
        let mut st = self.lock();
        if !st.open.contains(&tag) {
            return None;
        }
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.waiting.insert(ticket, (tag, value));
        Some(ticket)
    }

    /// The value under `ticket`, once, if `tag`'s attempt left it.
    fn take(&self, tag: u32, ticket: u64) -> Option<T> {
        let mut st = self.lock();
        match st.waiting.get(&ticket) {
            Some((left_by, _)) if *left_by == tag => st.waiting.remove(&ticket).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Ends `tag`'s attempt: what it left and nobody took is returned (to
    /// be dropped outside the lock), and later puts under it are refused.
    fn close(&self, tag: u32) -> Vec<T> {
        let mut st = self.lock();
        st.open.remove(&tag);
        let left: Vec<u64> = st
            .waiting
            .iter()
            .filter(|(_, (t, _))| *t == tag)
            .map(|(ticket, _)| *ticket)
            .collect();
        left.into_iter()
            .filter_map(|t| st.waiting.remove(&t))
            .map(|(_, v)| v)
            .collect()
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
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
            tickets: Tickets::new(),
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

    /// A new attempt's use of the sink, under a tag of its own, until the
    /// offer is dropped.
    pub fn offer(self: &Arc<Self>) -> SinkOffer {
        SinkOffer {
            tag: self.tickets.open(),
            sink: Arc::clone(self),
        }
    }

    /// Leaves `pixels` for the client under the attempt `tag`: the ticket
    /// that takes them, or `None` once that attempt has ended (nobody
    /// would take them; they are freed).
    pub fn put(&self, tag: u32, pixels: DevicePixels) -> Option<u64> {
        self.tickets.put(tag, pixels)
    }
}

/// One work item attempt's use of a [`Sink`]: its tag goes in the request;
/// dropping it frees what the attempt left and the client did not take.
#[derive(Debug)]
pub struct SinkOffer {
    sink: Arc<Sink>,
    tag: u32,
}

impl SinkOffer {
    pub fn sink_id(&self) -> u64 {
        self.sink.id
    }

    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// The pixels this attempt left under `ticket`, once; `None` for a
    /// ticket another attempt (or nobody) left.
    pub fn take(&self, ticket: u64) -> Option<DevicePixels> {
        self.sink.tickets.take(self.tag, ticket)
    }
}

impl Drop for SinkOffer {
    fn drop(&mut self) {
        // Dropped here, outside the sink's lock.
        drop(self.sink.tickets.close(self.tag));
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
    fn an_attempt_takes_only_what_it_left_once_and_its_end_frees_the_rest() {
        let t: Tickets<String> = Tickets::new();
        let (a, b) = (t.open(), t.open());
        assert_ne!(a, b);
        assert!(a != 0 && b != 0);
        let ta = t.put(a, "a1".into()).unwrap();
        let ta2 = t.put(a, "a2".into()).unwrap();
        let tb = t.put(b, "b1".into()).unwrap();
        assert_eq!(t.waiting(), 3);
        // Another attempt's ticket takes nothing, and leaves it there.
        assert_eq!(t.take(b, ta), None);
        assert_eq!(t.take(a, ta).as_deref(), Some("a1"));
        assert_eq!(t.take(a, ta), None, "a ticket takes once");
        assert_eq!(t.take(a, 999), None);
        // The end of an attempt frees what it left untaken, and only that.
        assert_eq!(t.close(a), vec!["a2".to_owned()]);
        assert_eq!(t.take(a, ta2), None);
        assert_eq!(t.waiting(), 1);
        // A put after the end (the worker still sending) is refused.
        assert_eq!(t.put(a, "late".into()), None);
        assert_eq!(t.waiting(), 1);
        assert_eq!(t.take(b, tb).as_deref(), Some("b1"));
        assert!(t.close(b).is_empty());
        // Never offered: refused.
        assert_eq!(t.put(12345, "x".into()), None);
    }

    #[test]
    fn offers_of_a_sink_have_distinct_tags_and_close_when_dropped() {
        let s = Sink::open(0);
        let (a, b) = (s.offer(), s.offer());
        assert_ne!(a.tag(), b.tag());
        assert_eq!(a.sink_id(), s.id());
        assert!(a.take(1).is_none());
        let tag = a.tag();
        drop(a);
        assert!(!s.tickets.lock().open.contains(&tag));
        assert!(s.tickets.lock().open.contains(&b.tag()));
        assert_eq!(s.tickets.waiting(), 0);
    }
}
