//! The worker's side: a client's ring, mapped after checking what it is,
//! and the slots written into it. [`Attached`] opens only a
//! `/proc/<pid>/fd/<n>` path, and maps only a sealed memfd with a
//! consistent header and the nonce the client named. [`Attached::write`]
//! claims a free slot by compare-and-swap and never waits: it returns
//! `None` when the ring is full or the sample too large, and the pixels go
//! inline.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::ShmError;
use crate::layout::{self, HEADER_BYTES, Layout, MAX_RING_BYTES};
use crate::sys::{self, Mapping};

/// A client's ring, mapped by a worker.
#[derive(Debug)]
pub struct Attached {
    map: Mapping,
    layout: Layout,
    /// Where the next search for a free slot starts.
    cursor: AtomicU32,
}

/// Whether `path` is `/proc/<pid>/fd/<n>`: the only paths a worker opens
/// for a client, so a work item cannot make it write into a file.
fn is_proc_fd(path: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    path.strip_prefix("/proc/")
        .and_then(|rest| rest.split_once("/fd/"))
        .is_some_and(|(pid, fd)| digits(pid) && digits(fd))
}

impl Attached {
    /// Maps the ring a client names by `path` and `nonce`. Refused, naming
    /// the path and the reason, unless it is a `/proc/<pid>/fd/<n>` path
    /// this process may open, a memfd sealed against resizing, with a
    /// consistent ring header and the same nonce.
    pub fn open(path: &str, nonce: &[u8]) -> Result<Self, ShmError> {
        let refuse = |reason: String| ShmError::Refused {
            path: path.to_owned(),
            reason,
        };
        if !is_proc_fd(path) {
            return Err(refuse("not a /proc/<pid>/fd/<n> path".to_owned()));
        }
        let fd = sys::open_rw(path).map_err(|e| refuse(e.to_string()))?;
        let len = sys::regular_file_len(&fd).map_err(refuse)?;
        if !sys::size_sealed(&fd) {
            return Err(refuse("not a memfd sealed against resizing".to_owned()));
        }
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| (HEADER_BYTES..=MAX_RING_BYTES).contains(&l))
            .ok_or_else(|| refuse(format!("{len} bytes is not a ring's size")))?;
        let map = Mapping::shared(&fd, len).map_err(|e| refuse(e.to_string()))?;
        let mut header = [0u8; HEADER_BYTES];
        // SAFETY: the mapping holds at least HEADER_BYTES; the copy reads
        // plain bytes, whatever the client writes meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(map.ptr(), header.as_mut_ptr(), HEADER_BYTES) };
        let (layout, theirs) = Layout::parse(&header, map.len()).map_err(refuse)?;
        if theirs.as_slice() != nonce {
            return Err(refuse("the nonce does not match the work item's".to_owned()));
        }
        Ok(Self {
            map,
            layout,
            cursor: AtomicU32::new(0),
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Writes `data` into a free slot for the stream `tag` and returns its
    /// number, or `None` when it does not fit a slot or no slot is free:
    /// the caller then sends the bytes inline. Never waits.
    pub fn write(&self, tag: u32, data: &[u8]) -> Option<u32> {
        if data.len() > self.layout.slot_bytes || tag == 0 {
            return None;
        }
        let slots = self.layout.slots;
        let start = self.cursor.load(Ordering::Relaxed) % slots;
        let claimed = layout::word(tag, layout::CLAIMED);
        let slot = (0..slots).map(|i| (start + i) % slots).find(|&slot| {
            // SAFETY: the mapping is live and `slot < slots`; `parse`
            // checked that the words lie within it.
            let word = unsafe { layout::slot_word(self.map.ptr(), slot) };
            let w = word.load(Ordering::Relaxed);
            layout::state(w) == layout::FREE
                && word
                    .compare_exchange(w, claimed, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        })?;
        self.cursor.store(slot.wrapping_add(1), Ordering::Relaxed);
        // SAFETY: the slot lies in the mapping (checked layout) and this
        // worker claimed it: the client does not touch a CLAIMED slot.
        unsafe {
            let dst = self.map.ptr().add(self.layout.slot_offset(slot));
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
            layout::slot_word(self.map.ptr(), slot).store(layout::word(tag, layout::WRITTEN), Ordering::Release);
        }
        Some(slot)
    }
}
