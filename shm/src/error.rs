//! [`ShmError`], the one error of every layer of the ring (the libc
//! calls, the layout checks, the owning types), below them all.

/// Why a ring could not be made, mapped or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShmError {
    #[error("{call} failed: {reason}")]
    Call { call: &'static str, reason: String },
    #[error("shared ring {path}: {reason}")]
    Refused { path: String, reason: String },
    #[error("slot {slot} of the shared ring: {reason}")]
    Slot { slot: u32, reason: String },
    #[error("a shared ring of {slots} slots of {slot_bytes} bytes is out of bounds: {reason}")]
    Size {
        slots: u32,
        slot_bytes: usize,
        reason: String,
    },
}
