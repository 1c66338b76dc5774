//! The ring's bytes, as both processes read them: a 64-byte header, one
//! 64-bit word per slot, then the slots. `Layout::parse` checks a header
//! against the mapped length.
//!
//! ```text
//! 0   magic "STKRING1"      8   version (u32 LE)   12  slots (u32 LE)
//! 16  slot bytes (u64 LE)   24  data offset (u64 LE)
//! 32  nonce (16 bytes)      48  reserved
//! 64  slot words, 8 bytes each
//! data offset (page-aligned): slot 0, slot 1, ... each `slot bytes` long
//! ```
//!
//! A slot word is `tag << 32 | state`. The tag names the stream (one work
//! item) that claimed the slot; the states go round one way:
//!
//! - [`FREE`] → [`CLAIMED`]: a worker, by compare-and-swap, to write it;
//! - [`CLAIMED`] → [`WRITTEN`]: the same worker, after its write
//!   (release), before it sends the slot's number;
//! - [`WRITTEN`] → [`HELD`]: the client, by compare-and-swap with the tag
//!   of the stream the message came on (acquire): a slot the stream did
//!   not write is refused;
//! - [`HELD`] → [`FREE`]: the client, when the sample's bytes are dropped;
//! - [`WRITTEN`] → [`FREE`]: the client, for slots whose stream ended
//!   before their message came (a failed or abandoned item).
//!
//! Neither side ever touches a slot in a state the other moves it out of,
//! so a slot has one writer at a time.

use std::sync::atomic::AtomicU64;

use crate::ShmError;

pub const MAGIC: [u8; 8] = *b"STKRING1";
pub const VERSION: u32 = 1;
/// The header, before the slot words.
pub const HEADER_BYTES: usize = 64;
/// Bounds a worker checks before it maps a ring a client names.
pub const MAX_SLOTS: u32 = 1 << 16;
pub const MAX_SLOT_BYTES: usize = 256 << 20;
pub const MAX_RING_BYTES: usize = 64 << 30;
const PAGE: usize = 4096;
/// Slots start on cache lines, so two never share one.
const SLOT_ALIGN: usize = 64;

pub const FREE: u64 = 0;
pub const CLAIMED: u64 = 1;
pub const WRITTEN: u64 = 2;
pub const HELD: u64 = 3;
const STATE_MASK: u64 = 3;

/// A slot word: `tag` and `state`.
pub fn word(tag: u32, state: u64) -> u64 {
    (u64::from(tag) << 32) | state
}

/// A slot word's state.
pub fn state(word: u64) -> u64 {
    word & STATE_MASK
}

/// A slot word's tag.
pub fn tag(word: u64) -> u32 {
    (word >> 32) as u32
}

/// Where everything lies in a ring of `slots` slots of `slot_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub slots: u32,
    pub slot_bytes: usize,
    pub data_offset: usize,
    pub total: usize,
}

impl Layout {
    /// The layout of a ring, or why it is out of bounds.
    pub fn new(slots: u32, slot_bytes: usize) -> Result<Self, ShmError> {
        let size = |reason: &str| ShmError::Size {
            slots,
            slot_bytes,
            reason: reason.to_owned(),
        };
        if slots == 0 || slots > MAX_SLOTS {
            return Err(size(&format!("slots must be 1 to {MAX_SLOTS}")));
        }
        if slot_bytes == 0 || slot_bytes > MAX_SLOT_BYTES {
            return Err(size(&format!("slot bytes must be 1 to {MAX_SLOT_BYTES}")));
        }
        let slot_bytes = slot_bytes.next_multiple_of(SLOT_ALIGN);
        let data_offset = (HEADER_BYTES + 8 * slots as usize).next_multiple_of(PAGE);
        let total = (slots as usize)
            .checked_mul(slot_bytes)
            .and_then(|d| d.checked_add(data_offset))
            .filter(|&t| t <= MAX_RING_BYTES)
            .ok_or_else(|| size(&format!("more than {MAX_RING_BYTES} bytes in all")))?;
        Ok(Self {
            slots,
            slot_bytes,
            data_offset,
            total,
        })
    }

    /// Byte offset of `slot`'s data (`slot < slots`).
    pub fn slot_offset(&self, slot: u32) -> usize {
        self.data_offset + slot as usize * self.slot_bytes
    }

    /// The header bytes of this layout with `nonce`.
    pub fn header(&self, nonce: &[u8; 16]) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.slots.to_le_bytes());
        h[16..24].copy_from_slice(&(self.slot_bytes as u64).to_le_bytes());
        h[24..32].copy_from_slice(&(self.data_offset as u64).to_le_bytes());
        h[32..48].copy_from_slice(nonce);
        h
    }

    /// The layout and nonce a header states, checked against the mapped
    /// length `len`: a header that points past the mapping is refused.
    pub fn parse(h: &[u8; HEADER_BYTES], len: usize) -> Result<(Self, [u8; 16]), String> {
        if h[0..8] != MAGIC {
            return Err("no stoker ring header".to_owned());
        }
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!("ring version {version}, this build reads {VERSION}"));
        }
        let slot_bytes = usize::try_from(u64_at(16)).map_err(|_| "slot size out of range".to_owned())?;
        let layout = Self::new(u32_at(12), slot_bytes).map_err(|e| e.to_string())?;
        if layout.slot_bytes != slot_bytes || layout.data_offset as u64 != u64_at(24) {
            return Err("header's layout is inconsistent".to_owned());
        }
        if layout.total != len {
            return Err(format!(
                "the header describes {} bytes, the file holds {len}",
                layout.total
            ));
        }
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&h[32..48]);
        Ok((layout, nonce))
    }
}

/// The slot word of `slot` in a ring mapped at `base`.
///
/// # Safety
///
/// `base` must be a live, page-aligned mapping of at least
/// `layout.data_offset` bytes, and `slot < layout.slots`.
pub(crate) unsafe fn slot_word<'a>(base: *mut u8, slot: u32) -> &'a AtomicU64 {
    // SAFETY: the caller guarantees the word lies in the mapping; it is
    // 8-aligned (64-byte header, page-aligned base) and only ever accessed
    // atomically by both processes.
    unsafe { AtomicU64::from_ptr(base.add(HEADER_BYTES + 8 * slot as usize).cast()) }
}
