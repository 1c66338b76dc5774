//! The worker's memory budget: sample data held at once (shard bytes read
//! ahead, decoded images, results waiting to be sent), across all items:
//! `--memory-limit` minus a fixed reserve ([`RESERVE`]).
//!
//! Bytes are reserved before they are read: a WebDataset image member
//! before the tar reader reads it (the reservation travels with its
//! sample), a Parquet row group before it is fetched (until its last row is
//! read; one larger than the whole budget is the shard's error). Each
//! sample then reserves the rest of an estimate of what it will hold
//! before it goes to the CPU pool. When it is done, only the result's share
//! stays reserved, until its chunk is handed to the network. A sample that
//! could never fit is skipped with the reason; one that does not fit *now*
//! waits until others finish, after its item has sent what it held (and let
//! go of the sample's own bytes, so that two waiting items never wait for
//! each other).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget granularity: permits are KiB so that terabytes fit in a `u32`.
const UNIT: u64 = 1024;

/// Memory the worker process uses besides the budget: code, the async
/// runtime, thread stacks, per-thread resize scratch, socket buffers.
pub const RESERVE: u64 = 48 << 20;

/// Smallest `--memory-limit` accepted.
pub const MIN_LIMIT: u64 = RESERVE + (32 << 20);

/// A share of the budget for sample data.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    sem: Arc<Semaphore>,
    units: u64,
}

/// Reserved bytes, released when dropped.
#[derive(Debug, Default)]
pub struct Reservation(Option<OwnedSemaphorePermit>);

fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT).max(1)
}

impl MemoryBudget {
    /// The budget of a worker whose whole process should stay under
    /// `limit` bytes.
    pub fn for_limit(limit: u64) -> Self {
        let units = units(limit.saturating_sub(RESERVE)).min(u64::from(u32::MAX));
        Self {
            sem: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }

    /// Bytes the budget holds in all.
    pub fn capacity(&self) -> u64 {
        self.units * UNIT
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        let free = self.sem.available_permits() as u64;
        self.units.saturating_sub(free) * UNIT
    }

    /// True if `bytes` could ever be reserved.
    pub fn fits(&self, bytes: u64) -> bool {
        units(bytes) <= self.units
    }

    /// Reserves `bytes` if they are free now.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let n = u32::try_from(units(bytes)).ok()?;
        Arc::clone(&self.sem)
            .try_acquire_many_owned(n)
            .ok()
            .map(|p| Reservation(Some(p)))
    }

    /// Waits until `bytes` are free. The caller checked [`Self::fits`].
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let n = u32::try_from(units(bytes).min(self.units)).unwrap_or(u32::MAX);
        // The semaphore is never closed, so acquiring cannot fail.
        Reservation(Arc::clone(&self.sem).acquire_many_owned(n).await.ok())
    }
}

impl Reservation {
    /// Keeps `bytes` of this reservation (as a new one) and releases the
    /// rest when `self` drops.
    pub fn keep(&mut self, bytes: u64) -> Reservation {
        let n = units(bytes) as usize;
        Reservation(self.0.as_mut().and_then(|p| p.split(n.min(p.num_permits()))))
    }

    /// Bytes this reservation holds (whole budget units).
    pub fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |p| p.num_permits() as u64 * UNIT)
    }

    /// Adds `other` to this reservation.
    pub fn absorb(&mut self, other: Reservation) {
        match (&mut self.0, other.0) {
            (Some(p), Some(o)) => p.merge(o),
            (slot @ None, o) => *slot = o,
            (Some(_), None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_come_back_when_dropped_and_in_part_when_kept() {
        let b = MemoryBudget::for_limit(RESERVE + (10 << 20));
        assert_eq!(b.capacity(), 10 << 20);
        assert!(b.fits(10 << 20) && !b.fits((10 << 20) + 1));
        let mut r = b.try_reserve(8 << 20).unwrap();
        assert!(b.try_reserve(4 << 20).is_none());
        let kept = r.keep(1 << 20);
        drop(r);
        // 1 MiB still held by `kept`.
        assert!(b.try_reserve(9 << 20).is_some());
        assert!(b.try_reserve((9 << 20) + UNIT).is_none());
        assert_eq!(kept.bytes(), 1 << 20);
        let mut all = Reservation::default();
        assert_eq!(all.bytes(), 0);
        all.absorb(kept);
        assert_eq!(all.bytes(), 1 << 20);
        drop(all);
        let _ten = b.reserve(10 << 20).await;
    }
}
