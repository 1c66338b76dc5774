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

/// What [`Ahead`] holds: an epoch's stream (`loader::EpochStream`).
pub(crate) trait Started {
    /// The epoch it delivers.
    fn epoch(&self) -> u64;
    /// Whether every item of the epoch is in.
    fn items_finished(&self) -> bool;
}

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
pub(crate) struct Ahead<S> {
    on: bool,
    next: Mutex<Option<S>>,
}

impl<S: Started> Ahead<S> {
    pub(crate) fn from_env() -> Self {
        Self {
            on: enabled(std::env::var(EPOCH_AHEAD_ENV).ok().as_deref()),
            next: Mutex::new(None),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<S>> {
        self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The stream started ahead when it is of `epoch`; one of another
    /// epoch is dropped, which stops it.
    pub(crate) fn take(&self, epoch: Option<u64>) -> Option<S> {
        let held = self.slot().take()?;
        (Some(held.epoch()) == epoch).then_some(held)
    }

    /// The epoch to start ahead now, after `current`'s batch: the next one,
    /// once all of `current`'s items are in and none is held yet.
    pub(crate) fn wanted(&self, current: &S) -> Option<u64> {
        (self.on && self.slot().is_none() && current.items_finished()).then(|| current.epoch() + 1)
    }

    pub(crate) fn hold(&self, stream: S) {
        *self.slot() = Some(stream);
    }

    /// The epoch held, if any.
    pub(crate) fn held(&self) -> Option<u64> {
        self.slot().as_ref().map(S::epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An epoch as `Ahead` sees it.
    struct Epoch(u64, bool);

    impl Started for Epoch {
        fn epoch(&self) -> u64 {
            self.0
        }
        fn items_finished(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn the_next_epoch_is_wanted_once_the_current_one_s_items_are_in() {
        let ahead = Ahead {
            on: true,
            next: Mutex::new(None),
        };
        assert_eq!(ahead.wanted(&Epoch(3, false)), None);
        assert_eq!(ahead.wanted(&Epoch(3, true)), Some(4));
        ahead.hold(Epoch(4, false));
        // One at a time.
        assert_eq!(ahead.wanted(&Epoch(3, true)), None);
        assert_eq!(ahead.held(), Some(4));
        // Asking for another epoch drops it; asking for it takes it.
        assert!(ahead.take(Some(7)).is_none());
        assert_eq!(ahead.held(), None);
        ahead.hold(Epoch(4, false));
        assert_eq!(ahead.take(Some(4)).map(|e| e.0), Some(4));
        assert_eq!(ahead.held(), None);
        let off = Ahead::<Epoch> {
            on: false,
            next: Mutex::new(None),
        };
        assert_eq!(off.wanted(&Epoch(3, true)), None);
    }

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
