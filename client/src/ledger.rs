//! The ledger: the exactly-once bookkeeping of one epoch's dispatch, with
//! no I/O (the lanes in `dispatch` do the network).
//!
//! It records, per plan item, which samples have been handed to the
//! assembler and which attempt owns the item; the queue of items waiting
//! for a lane; each worker's health; and each worker's credit
//! ([`CreditLimit`]): how many items it may hold at once, by default counted
//! in samples, up to what the worker says it needs in flight
//! (`Info.inflight_samples`), so that a GPU worker gets enough work to fill
//! its batches whatever the shard size; or a fixed number of items. When an
//! attempt fails or stalls, its item goes back to the queue with its
//! received samples as the skip list, and whatever the abandoned attempt
//! still sends is discarded.
//!
//! A failed item goes to a worker it has not failed on, if any. An item a
//! worker refused before starting (unreachable, draining) goes back to the
//! queue uncharged. Workers can be added mid-epoch (`add_worker`) and
//! retired (`retire` / `restore`): a retired worker takes nothing new and
//! counts as gone for the patience, even after finishing what it held.
//! The window (`set_window` / `advance`) bounds how far ahead of the
//! sequencer's head lanes take items in deterministic order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stoker_core::{PlanItem, PositionSet};
use tokio::sync::Notify;
use tokio::sync::futures::{Notified, OwnedNotified};

use crate::config::DEFAULT_INFLIGHT_ITEMS;
use crate::error::ClientError;
use crate::sample::{Sample, Skipped};

#[derive(Debug)]
struct ItemState {
    item: PlanItem,
    /// Positions of the samples handed to the assembler or reported
    /// skipped: a range or a few per item, whatever its size.
    received: PositionSet,
    /// Samples accepted for delivery, over every attempt of this run.
    accepted: u64,
    /// The attempt allowed to deliver samples; `None` while queued.
    owner: Option<u64>,
    attempts: u32,
    /// Workers an attempt at this item failed on; the item goes to them
    /// again only once every worker has failed it.
    failed_on: Vec<usize>,
    done: bool,
    /// Samples the owning attempt is still expected to send or skip: its
    /// share of its worker's outstanding credit.
    expected_left: u64,
}

#[derive(Debug)]
struct WorkerHealth {
    addr: String,
    /// When the worker started failing; `None` while healthy.
    failing_since: Option<Instant>,
    last_error: String,
    credit: Credit,
    /// No longer among the addresses its DNS name resolves to: takes no
    /// new item (those it holds finish or come back as from any worker),
    /// and counts as failing until it is back.
    retired: bool,
    /// Its credit went from used up to available.
    credit_freed: Arc<Notify>,
    /// It broke the protocol: retired for the rest of the epoch, whatever
    /// its DNS name says.
    set_aside: bool,
}

impl WorkerHealth {
    fn new(addr: &str, limit: CreditLimit) -> Self {
        Self {
            addr: addr.to_owned(),
            failing_since: None,
            last_error: String::new(),
            credit: Credit {
                limit,
                items: 0,
                outstanding: 0,
            },
            retired: false,
            credit_freed: Arc::new(Notify::new()),
            set_aside: false,
        }
    }
}

/// How much work a worker may have at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CreditLimit {
    /// A fixed number of items (`LoaderConfig::inflight_per_worker`).
    Items(usize),
    /// Items until the samples they are expected to send reach this many
    /// (the worker's `Info.inflight_samples`); always at least two items.
    Samples(u64),
}

/// The fewest items a worker limited in samples gets at once.
const MIN_ITEMS: usize = 2;

/// A worker's credit: its limit, and what it holds now.
#[derive(Debug)]
struct Credit {
    limit: CreditLimit,
    /// Items leased to the worker now.
    items: usize,
    /// Samples those items are still expected to send.
    outstanding: u64,
}

impl Credit {
    fn allows_another(&self) -> bool {
        match self.limit {
            CreditLimit::Items(n) => self.items < n,
            // Two items at least, so that the next one starts while the
            // last one's tail streams in.
            CreditLimit::Samples(want) => self.items < MIN_ITEMS || self.outstanding < want,
        }
    }
}

#[derive(Debug)]
struct LedgerState {
    items: Vec<ItemState>,
    pending: VecDeque<usize>,
    remaining: usize,
    next_attempt: u64,
    fatal: Option<ClientError>,
    workers: Vec<WorkerHealth>,
    /// With `Some(w)`, only items below `frontier + w` are handed out: the
    /// deterministic order buffers items until those before them are done,
    /// and this bounds how many it holds.
    window: Option<usize>,
    frontier: usize,
    /// Samples of the items completed so far, and how many: an item whose
    /// count the index does not give is expected to be of average size.
    completed_samples: u64,
    completed_items: u64,
}

/// Shared dispatch state of one epoch.
#[derive(Debug)]
pub(crate) struct Ledger {
    state: Mutex<LedgerState>,
    changed: Notify,
}

/// An item handed to a lane.
pub(crate) struct Lease {
    worker: usize,
    /// The item's place in the plan.
    pub index: usize,
    attempt: u64,
    pub shard: String,
    /// The item's samples: positions `start..end` in the shard, to its end
    /// with `end: None`.
    pub start: u64,
    pub end: Option<u64>,
    /// Positions delivered (or reported skipped) by earlier attempts.
    pub skip: PositionSet,
}

impl Lease {
    /// Whether `position` is one of the item's samples. A whole shard's
    /// item holds any position from its start: the index's count is no
    /// bound, since readers number every record (those skipped as bad
    /// too), which an index need not count.
    pub fn holds(&self, position: u64) -> bool {
        position >= self.start && self.end.is_none_or(|end| position < end) && position < u64::MAX
    }

    /// The item's range, for messages.
    pub fn range(&self) -> String {
        match self.end {
            Some(end) => format!("{}..{end}", self.start),
            None => format!("{}..(the shard's end)", self.start),
        }
    }
}

impl Ledger {
    /// A ledger for `items`, handed to `workers` each within its limit.
    pub fn new(items: Vec<PlanItem>, workers: &[(String, CreditLimit)]) -> Self {
        let n = items.len();
        Self {
            state: Mutex::new(LedgerState {
                items: items
                    .into_iter()
                    .map(|item| ItemState {
                        item,
                        received: PositionSet::new(),
                        accepted: 0,
                        owner: None,
                        attempts: 0,
                        failed_on: Vec::new(),
                        done: false,
                        expected_left: 0,
                    })
                    .collect(),
                pending: (0..n).collect(),
                remaining: n,
                next_attempt: 1,
                fatal: None,
                window: None,
                frontier: 0,
                completed_samples: 0,
                completed_items: 0,
                workers: workers
                    .iter()
                    .map(|(addr, limit)| WorkerHealth::new(addr, *limit))
                    .collect(),
            }),
            changed: Notify::new(),
        }
    }

    /// A worker found during the epoch; its number, the next one.
    pub fn add_worker(&self, addr: &str, limit: CreditLimit) -> usize {
        let mut st = self.lock();
        st.workers.push(WorkerHealth::new(addr, limit));
        st.workers.len() - 1
    }

    /// Worker `w` left the set its DNS name resolves to, because `why`.
    pub fn retire(&self, w: usize, why: &str) {
        let mut st = self.lock();
        let h = &mut st.workers[w];
        h.retired = true;
        h.failing_since.get_or_insert_with(Instant::now);
        h.last_error = why.to_owned();
        drop(st);
        self.changed.notify_waiters();
    }

    /// Worker `w` broke the protocol, as `why` says: like a retired worker
    /// it takes no new item (those it holds come back as from any failed
    /// worker), and unlike one it stays so for the rest of the epoch.
    pub fn set_aside(&self, w: usize, why: &str, patience: Duration) {
        let mut st = self.lock();
        let h = &mut st.workers[w];
        h.set_aside = true;
        h.retired = true;
        h.failing_since.get_or_insert_with(Instant::now);
        h.last_error = why.to_owned();
        self.check_patience(st, patience);
        self.changed.notify_waiters();
    }

    /// Worker `w` is back in its name's set (unless it was set aside).
    pub fn restore(&self, w: usize) {
        let mut st = self.lock();
        let h = &mut st.workers[w];
        if h.set_aside {
            return;
        }
        h.retired = false;
        h.failing_since = None;
        drop(st);
        self.changed.notify_waiters();
    }

    pub fn is_retired(&self, w: usize) -> bool {
        self.lock().workers[w].retired
    }

    /// Sets worker `w`'s limit (learnt from its `Info` once it answered).
    pub fn set_limit(&self, w: usize, limit: CreditLimit) {
        let mut st = self.lock();
        st.workers[w].credit.limit = limit;
        let freed = Arc::clone(&st.workers[w].credit_freed);
        drop(st);
        freed.notify_waiters();
    }

    /// Worker `w`'s limit.
    pub fn limit(&self, w: usize) -> CreditLimit {
        self.lock().workers[w].credit.limit
    }

    /// Takes `samples` off the credit the lease's item holds on its worker
    /// (all that is left with `None`), and wakes the worker's lanes when
    /// that makes room for another item.
    fn return_credit(&self, st: &mut LedgerState, lease: &Lease, samples: Option<u64>) {
        let item = &mut st.items[lease.index];
        let back = samples.map_or(item.expected_left, |n| n.min(item.expected_left));
        item.expected_left -= back;
        let credit = &mut st.workers[lease.worker].credit;
        let before = credit.allows_another();
        credit.outstanding = credit.outstanding.saturating_sub(back);
        if samples.is_none() {
            credit.items = credit.items.saturating_sub(1);
        }
        if !before && credit.allows_another() {
            st.workers[lease.worker].credit_freed.notify_waiters();
        }
    }

    /// Resumes an epoch: items in `done` were delivered whole, and the
    /// positions of `partial` items were delivered already.
    pub fn resume(&self, done: &[u32], partial: &[(u32, PositionSet)]) {
        let mut st = self.lock();
        for &i in done {
            if let Some(item) = st.items.get_mut(i as usize)
                && !item.done
            {
                item.done = true;
                st.remaining -= 1;
            }
        }
        for (i, positions) in partial {
            if let Some(item) = st.items.get_mut(*i as usize) {
                item.received.union_with(positions);
            }
        }
        let LedgerState { items, pending, .. } = &mut *st;
        pending.retain(|&i| !items[i].done);
    }

    /// Hands out items only up to `window` past the first item not yet
    /// delivered in order (see [`Ledger::advance`]).
    pub fn set_window(&self, window: usize) {
        self.lock().window = Some(window.max(1));
    }

    /// Items before `frontier` have been delivered in order.
    pub fn advance(&self, frontier: usize) {
        let mut st = self.lock();
        if frontier > st.frontier {
            st.frontier = frontier;
            drop(st);
            self.changed.notify_waiters();
        }
    }

    fn lock(&self) -> MutexGuard<'_, LedgerState> {
        // A panic while holding the lock is a bug; the state stays usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Heap bytes the items' received positions hold (O(items), however
    /// many samples: see `stoker_core::positions`).
    #[cfg(test)]
    pub fn received_heap_bytes(&self) -> usize {
        self.lock().items.iter().map(|i| i.received.heap_bytes()).sum()
    }

    /// The error that ended the epoch, if any.
    pub fn fatal(&self) -> Option<ClientError> {
        self.lock().fatal.clone()
    }

    /// Items not yet complete.
    pub fn remaining(&self) -> usize {
        self.lock().remaining
    }

    pub fn fail(&self, err: ClientError) {
        let mut st = self.lock();
        if st.fatal.is_none() {
            st.fatal = Some(err);
        }
        drop(st);
        self.changed.notify_waiters();
    }

    /// Whether the epoch is over: every item complete, or a fatal error.
    pub fn is_finished(&self) -> bool {
        let st = self.lock();
        st.fatal.is_some() || st.remaining == 0
    }

    /// Futures that complete at the ledger's next change and when worker
    /// `w`'s credit next frees up. Taken before looking at the ledger, they
    /// also catch a change made after the look.
    pub fn changes(&self, w: usize) -> (Notified<'_>, OwnedNotified) {
        let freed = Arc::clone(&self.lock().workers[w].credit_freed);
        (self.changed.notified(), freed.notified_owned())
    }

    /// The next pending item for `worker`: the first one that has not
    /// failed on it, unless it has failed on every worker.
    pub fn take(&self, worker: usize) -> Option<Lease> {
        let mut st = self.lock();
        if st.workers[worker].retired || !st.workers[worker].credit.allows_another() {
            return None;
        }
        let workers = st.workers.len();
        let limit = st.window.map_or(usize::MAX, |w| st.frontier.saturating_add(w));
        let pos = st.pending.iter().position(|&i| {
            let failed = &st.items[i].failed_on;
            // Back to a worker it failed on only when every other worker
            // has failed it too or is down: an item must not wait forever
            // for a worker that never comes back.
            let nowhere_else = (0..workers)
                .filter(|w| !failed.contains(w))
                .all(|w| st.workers[w].failing_since.is_some());
            i < limit && (!failed.contains(&worker) || nowhere_else)
        })?;
        let index = st.pending.remove(pos)?;
        let attempt = st.next_attempt;
        st.next_attempt += 1;
        // Samples the item should bring: the index's count, less what
        // earlier attempts delivered; else the average of items done so
        // far, or, before any, a share of the limit.
        let expected = match st.items[index].item.samples() {
            Some(n) => n.saturating_sub(st.items[index].received.len()),
            None if st.completed_items > 0 => st.completed_samples / st.completed_items,
            None => match st.workers[worker].credit.limit {
                CreditLimit::Samples(want) => want / DEFAULT_INFLIGHT_ITEMS as u64,
                CreditLimit::Items(_) => 0,
            },
        };
        let credit = &mut st.workers[worker].credit;
        credit.items += 1;
        credit.outstanding += expected;
        let item = &mut st.items[index];
        item.owner = Some(attempt);
        item.attempts += 1;
        item.expected_left = expected;
        Some(Lease {
            worker,
            index,
            attempt,
            shard: item.item.shard.name.clone(),
            start: item.item.start,
            end: item.item.end,
            skip: item.received.clone(),
        })
    }

    /// Records new samples of an attempt. Returns those to deliver, or
    /// `None` if the attempt no longer owns the item.
    pub fn accept(&self, lease: &Lease, samples: Vec<Sample>, skipped: &[Skipped]) -> Option<Vec<Sample>> {
        let mut st = self.lock();
        let item = &mut st.items[lease.index];
        if item.owner != Some(lease.attempt) {
            return None;
        }
        for s in skipped {
            item.received.insert(s.position);
        }
        let fresh: Vec<Sample> = samples
            .into_iter()
            .filter(|s| item.received.insert(s.position))
            .map(|mut s| {
                s.item = lease.index as u32;
                s
            })
            .collect();
        item.accepted += fresh.len() as u64;
        let progress = (fresh.len() + skipped.len()) as u64;
        self.return_credit(&mut st, lease, Some(progress));
        Some(fresh)
    }

    /// Marks the lease's item complete; returns the samples accepted for
    /// it, or `None` if the attempt no longer owns the item.
    pub fn complete(&self, lease: &Lease) -> Option<u64> {
        let mut st = self.lock();
        let item = &mut st.items[lease.index];
        if item.owner != Some(lease.attempt) || item.done {
            return None;
        }
        item.done = true;
        item.owner = None;
        let accepted = item.accepted;
        st.remaining -= 1;
        st.completed_items += 1;
        st.completed_samples += accepted;
        self.return_credit(&mut st, lease, None);
        drop(st);
        self.changed.notify_waiters();
        Some(accepted)
    }

    /// Puts a failed attempt's item back in the queue, or ends the epoch
    /// when it failed too often.
    pub fn requeue(&self, lease: &Lease, worker: Option<usize>, addr: &str, message: &str, max_attempts: u32) {
        let mut st = self.lock();
        let item = &mut st.items[lease.index];
        if item.owner != Some(lease.attempt) {
            return;
        }
        item.owner = None;
        self.return_credit(&mut st, lease, None);
        let item = &mut st.items[lease.index];
        if let Some(w) = worker
            && !item.failed_on.contains(&w)
        {
            item.failed_on.push(w);
        }
        if item.attempts >= max_attempts {
            let err = ClientError::ItemFailed {
                shard: item.item.shard.name.clone(),
                attempts: item.attempts,
                addr: addr.to_owned(),
                message: message.to_owned(),
            };
            st.fatal.get_or_insert(err);
        } else {
            // To the front: the epoch's tail should not wait on it.
            st.pending.push_front(lease.index);
        }
        drop(st);
        self.changed.notify_waiters();
    }

    /// Returns an item whose attempt never started (the worker refused or
    /// could not be reached): the item is not to blame, so the attempt is
    /// not counted against it and it may go to the same worker again.
    pub fn release(&self, lease: &Lease) {
        let mut st = self.lock();
        let item = &mut st.items[lease.index];
        if item.owner != Some(lease.attempt) {
            return;
        }
        item.owner = None;
        item.attempts = item.attempts.saturating_sub(1);
        self.return_credit(&mut st, lease, None);
        st.pending.push_front(lease.index);
        drop(st);
        self.changed.notify_waiters();
    }

    /// Worker `w` served an item or answered a probe. A retired worker
    /// stays counted as gone (it finishes its items but takes no more).
    pub fn worker_ok(&self, w: usize) {
        let mut st = self.lock();
        let h = &mut st.workers[w];
        if !h.retired {
            h.failing_since = None;
        }
    }

    pub fn is_failing(&self, w: usize) -> bool {
        self.lock().workers[w].failing_since.is_some()
    }

    /// Marks worker `w` as failing; ends the epoch when every worker has
    /// been failing for longer than `patience`.
    pub fn worker_failed(&self, w: usize, message: &str, patience: Duration) {
        let mut st = self.lock();
        let h = &mut st.workers[w];
        h.failing_since.get_or_insert_with(Instant::now);
        h.last_error = message.to_owned();
        self.check_patience(st, patience);
    }

    /// Ends the epoch if every worker (retired ones included) has been
    /// failing for longer than `patience`: what a retired worker's idle
    /// lanes call now and then, since they report no failures.
    pub fn check_gone(&self, patience: Duration) {
        self.check_patience(self.lock(), patience);
    }

    fn check_patience(&self, mut st: MutexGuard<'_, LedgerState>, patience: Duration) {
        let now = Instant::now();
        let all_gone = st
            .workers
            .iter()
            .all(|h| h.failing_since.is_some_and(|t| now.duration_since(t) >= patience));
        if all_gone && st.fatal.is_none() {
            let detail = st
                .workers
                .iter()
                .map(|h| format!("{} ({})", h.addr, h.last_error))
                .collect::<Vec<_>>()
                .join("; ");
            st.fatal = Some(ClientError::AllWorkersGone {
                seconds: patience.as_secs(),
                detail,
            });
            drop(st);
            self.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests;
