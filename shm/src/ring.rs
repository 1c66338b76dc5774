//! The client's side: the ring it owns, the tags of its streams, and the
//! slots it reads in place. [`Ring`] is a memfd sealed against resizing,
//! named by its `/proc/<pid>/fd/<n>` path and a random nonce; a
//! [`StreamTag`] (one per work item) frees, when dropped, the slots its
//! worker wrote but never named; a [`Lent`] slot is read in place and
//! freed on drop.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ShmError;
use crate::layout::{self, HEADER_BYTES, Layout};
use crate::sys::{self, Mapping};

/// A ring of slots in a sealed memfd, owned by the client.
#[derive(Debug, Clone)]
pub struct Ring {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    map: Mapping,
    layout: Layout,
    nonce: [u8; 16],
    path: String,
    tags: Mutex<Tags>,
    // Declared last: the mapping goes before the descriptor (either order
    // is sound; this is the natural one).
    _fd: OwnedFd,
}

#[derive(Debug, Default)]
struct Tags {
    last: u32,
    live: HashSet<u32>,
}

impl Shared {
    fn word(&self, slot: u32) -> &std::sync::atomic::AtomicU64 {
        debug_assert!(slot < self.layout.slots);
        // SAFETY: the mapping is live for `self`'s lifetime, page-aligned,
        // `layout.total` bytes long, and `slot` is in range (checked by
        // every caller).
        unsafe { layout::slot_word(self.map.ptr(), slot) }
    }

    fn tags(&self) -> MutexGuard<'_, Tags> {
        self.tags.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frees the written slots of streams that ended before their message
    /// came; returns how many.
    fn sweep(&self, tags: &Tags) -> usize {
        let mut freed = 0;
        for slot in 0..self.layout.slots {
            let word = self.word(slot);
            let w = word.load(Ordering::Acquire);
            if layout::state(w) == layout::WRITTEN
                && !tags.live.contains(&layout::tag(w))
                && word
                    .compare_exchange(w, layout::FREE, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                freed += 1;
            }
        }
        freed
    }
}

impl Ring {
    /// A ring of `slots` slots of at least `slot_bytes` each. Its pages
    /// are allocated as the workers first write them.
    pub fn create(slots: u32, slot_bytes: usize) -> Result<Self, ShmError> {
        let layout = Layout::new(slots, slot_bytes)?;
        let fd = sys::sealed_memfd("stoker-ring", layout.total)?;
        let map = Mapping::shared(&fd, layout.total)?;
        let nonce = sys::random_nonce()?;
        let header = layout.header(&nonce);
        // SAFETY: the mapping is fresh, writable and longer than the
        // header; no other process knows of it yet.
        unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), map.ptr(), HEADER_BYTES) };
        let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
        Ok(Self {
            shared: Arc::new(Shared {
                map,
                layout,
                nonce,
                path,
                tags: Mutex::new(Tags::default()),
                _fd: fd,
            }),
        })
    }

    /// Where a worker on this host opens the ring.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// The secret a worker must present with the path: it proves the ring
    /// is the one the client meant, not a file that happens to lie there.
    pub fn nonce(&self) -> [u8; 16] {
        self.shared.nonce
    }

    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// A tag for one stream's slots. When it is dropped, slots the stream
    /// wrote but never named are freed.
    pub fn stream(&self) -> StreamTag {
        let mut tags = self.shared.tags();
        let mut tag = tags.last;
        loop {
            tag = tag.wrapping_add(1);
            if tag != 0 && !tags.live.contains(&tag) {
                break;
            }
        }
        tags.last = tag;
        tags.live.insert(tag);
        StreamTag {
            shared: Arc::clone(&self.shared),
            tag,
        }
    }

    /// Slots free now (for tests and metrics).
    pub fn free_slots(&self) -> usize {
        (0..self.shared.layout.slots)
            .filter(|&s| layout::state(self.shared.word(s).load(Ordering::Acquire)) == layout::FREE)
            .count()
    }
}

/// One stream's tag on a [`Ring`].
#[derive(Debug)]
pub struct StreamTag {
    shared: Arc<Shared>,
    tag: u32,
}

impl StreamTag {
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// Takes `slot`, which this stream's worker says holds `len` bytes of
    /// a sample: refused unless the slot exists, is written, by this
    /// stream, and `len` fits it.
    pub fn take(&self, slot: u32, len: usize) -> Result<Lent, ShmError> {
        let layout = self.shared.layout;
        let refuse = |reason: String| Err(ShmError::Slot { slot, reason });
        if slot >= layout.slots {
            return refuse(format!("out of range: the ring has {} slots", layout.slots));
        }
        if len > layout.slot_bytes {
            return refuse(format!("{len} bytes named, a slot holds {}", layout.slot_bytes));
        }
        let written = layout::word(self.tag, layout::WRITTEN);
        let held = layout::word(self.tag, layout::HELD);
        match self
            .shared
            .word(slot)
            .compare_exchange(written, held, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(Lent {
                shared: Arc::clone(&self.shared),
                slot,
                len,
            }),
            Err(w) => refuse(format!(
                "not written by this stream (state {}, stream {}; expected stream {})",
                layout::state(w),
                layout::tag(w),
                self.tag
            )),
        }
    }
}

impl Drop for StreamTag {
    fn drop(&mut self) {
        let mut tags = self.shared.tags();
        tags.live.remove(&self.tag);
        self.shared.sweep(&tags);
    }
}

/// A slot's bytes, held by the client until dropped, then free for the
/// workers again. `bytes::Bytes::from_owner` makes a sample's pixels of it.
#[derive(Debug)]
pub struct Lent {
    shared: Arc<Shared>,
    slot: u32,
    len: usize,
}

impl Lent {
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        let offset = self.shared.layout.slot_offset(self.slot);
        // SAFETY: the slot lies in the mapping (`slot < slots`, `len <=
        // slot_bytes`, checked by `take`), and it is HELD: by the protocol
        // no worker writes it until this value frees it. A worker that
        // broke the protocol could change the bytes' values, never their
        // validity (plain u8) or the mapping's extent.
        unsafe { std::slice::from_raw_parts(self.shared.map.ptr().add(offset), self.len) }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.shared.word(self.slot).store(layout::FREE, Ordering::Release);
    }
}
