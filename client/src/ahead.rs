//! The next epoch, started before the training loop asks for it.
//!
//! A loader starts an epoch when the loop iterates it, and the epoch's
//! first batches then wait for the workers' items, the lanes' batches and
//! the prefetch to fill from nothing: about 270 ms on one H200 with
//! `workers="local"` (docs/benchmarks.md, "Confining the lanes"), which
//! with short epochs is a large share of the time. [`Ahead`] starts epoch
//! N + 1 once every item of epoch N is in (its ledger is finished), while
//! the loop still takes N's last batches: nothing of N needs the workers,
//! the shared-memory ring or more batch buffers by then, so the two
//! cannot hold up each other. `Loader::epoch(N + 1)` then takes that
//! stream; asking for any other epoch, or resuming one, stops it.
//!
//! On by default; `STOKER_EPOCH_AHEAD=0` turns it off.

use std::sync::Mutex;

use crate::loader::EpochStream;

/// The variable that turns starting epochs ahead off (`0`).
pub const EPOCH_AHEAD_ENV: &str = "STOKER_EPOCH_AHEAD";

/// Whether epochs start ahead, given `STOKER_EPOCH_AHEAD`'s value: every
/// value but `0`, `false`, `no` and `off` (and none) means yes.
pub(crate) fn enabled(value: Option<&str>) -> bool {
    !matches!(
        value.map(|v| v.trim().to_ascii_lowercase()).as_deref(),
        Some("0" | "false" | "no" | "off")
    )
}

/// The epoch started ahead, if any.
#[derive(Debug)]
pub(crate) struct Ahead {
    on: bool,
    next: Mutex<Option<EpochStream>>,
}

impl Ahead {
    pub(crate) fn from_env() -> Self {
        Self {
            on: enabled(std::env::var(EPOCH_AHEAD_ENV).ok().as_deref()),
            next: Mutex::new(None),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<EpochStream>> {
        self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The stream started ahead when it is of `epoch`; one of another
    /// epoch is dropped, which stops it.
    pub(crate) fn take(&self, epoch: Option<u64>) -> Option<EpochStream> {
        let held = self.slot().take()?;
        (Some(held.epoch()) == epoch).then_some(held)
    }

    /// The epoch to start ahead now, after `current`'s batch: the next one,
    /// once all of `current`'s items are in and none is held yet.
    pub(crate) fn wanted(&self, current: &EpochStream) -> Option<u64> {
        (self.on && self.slot().is_none() && current.items_finished()).then(|| current.epoch() + 1)
    }

    pub(crate) fn hold(&self, stream: EpochStream) {
        *self.slot() = Some(stream);
    }

    /// The epoch held, if any.
    pub(crate) fn held(&self) -> Option<u64> {
        self.slot().as_ref().map(EpochStream::epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::enabled;

    #[test]
    fn only_an_explicit_no_turns_it_off() {
        for on in [None, Some("1"), Some("yes"), Some("")] {
            assert!(enabled(on), "{on:?}");
        }
        for off in ["0", "false", "No", " off "] {
            assert!(!enabled(Some(off)), "{off}");
        }
    }
}
