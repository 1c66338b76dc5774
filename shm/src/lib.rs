//! The shared-memory ring between a client and the workers on its host.
//!
//! A worker on the same host as its client need not send pixels through
//! protobuf, HTTP/2 and two socket copies: the client owns a ring of
//! fixed-size slots in a sealed memfd ([`Ring`]), names it in each work
//! item (its `/proc/<pid>/fd/<n>` path and a random nonce), and the
//! worker maps it ([`Attached`]), writes each sample's pixels into a free
//! slot and sends only the slot's number. The client reads the slot in
//! place and frees it when the sample's bytes are dropped.
//!
//! The memory is the client's: it goes away with the client and the last
//! worker mapping, whoever dies first. A worker never waits for a slot:
//! when the ring is full, or a sample does not fit, it sends the pixels
//! inline as before, so a slow consumer cannot deadlock a worker.
//!
//! Three layers, as elsewhere in Stoker's FFI: [`sys`] (the libc calls as
//! `Result`s naming the call), [`layout`] (the header and the slot words,
//! checked), and the owning types [`Ring`] and [`Attached`]; [`ShmError`]
//! (`error.rs`) sits below all three. [`host_identity`] (boot id and PID
//! namespace) is what a worker's `Info.host` carries, for the client to
//! tell whether the ring can be shared.

mod attach;
mod error;
pub mod layout;
mod ring;
mod sys;

pub use attach::Attached;
pub use error::ShmError;
pub use ring::{Lent, Ring, StreamTag};

/// This host as a worker and its client must share it for the ring: the
/// running kernel (its boot id) and the PID namespace, in which the
/// client's `/proc/<pid>/fd` path names its memfd. Empty when either
/// cannot be read (then no ring is offered).
pub fn host_identity() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let pid_ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let boot = boot.trim();
    if boot.is_empty() || pid_ns.is_empty() {
        return String::new();
    }
    format!("{boot}/{pid_ns}")
}

#[cfg(test)]
mod tests;
