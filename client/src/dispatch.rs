//! Dispatch: work items to workers, exactly once.
//!
//! Every worker gets lanes; a lane takes the next pending item, streams it,
//! and takes another. Fast workers therefore take more items than slow
//! ones. How many items a worker has at once is its credit ([`Credit`]):
//! by default counted in samples, up to what the worker says it needs in
//! flight (`Info.inflight_samples`), so that a GPU worker gets enough work
//! to fill its batches whatever the shard size; or a fixed number of items. The shared [`Ledger`] records, per item, which samples
//! have been handed to the assembler and which attempt owns the item. When
//! an attempt fails or makes no progress for `progress_timeout`, the item
//! goes back to the queue with its received samples as the skip list, and
//! whatever the abandoned attempt still sends is discarded.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stoker_core::PlanItem;
use stoker_proto::pb;
use tokio::sync::{Notify, mpsc};
use tracing::{debug, warn};

use crate::error::{ClientError, describe_status, is_permanent};
use crate::loader::{EpochCounters, LoaderConfig};
use crate::wire::{Client, HealthClient, Sample, WORKER_SERVICE, sample_from_pb};
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

/// `d` scaled by a random factor in [0.5, 1.5), so that lanes retrying
/// the same worker spread out.
fn jittered(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded per process and per instance: enough entropy
    // for spreading retries, with no extra dependency.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    d.mul_f64(0.5 + unit)
}

#[derive(Debug)]
struct ItemState {
    item: PlanItem,
    /// Keys handed to the assembler or reported skipped.
    received: HashSet<String>,
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

/// Items a worker whose needs are unknown (unreachable at the start, or
/// too old to say) gets at once.
pub(crate) const DEFAULT_INFLIGHT_ITEMS: usize = 2;

/// The fewest items a worker limited in samples gets at once.
const MIN_ITEMS: usize = 2;

/// The most lanes, and so items in flight, one worker gets.
pub(crate) const MAX_LANES_PER_WORKER: usize = 64;

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
    /// Per worker: its credit went from used up to available.
    credit_freed: Vec<Notify>,
}

/// An item handed to a lane.
struct Lease {
    worker: usize,
    index: usize,
    attempt: u64,
    shard: String,
    start: u64,
    end: Option<u64>,
    skip: Vec<String>,
}

/// What lanes send the assembler, in the order they received it.
#[derive(Debug)]
pub(crate) enum Event {
    Sample(Sample),
    /// Plan item `item` is complete: `samples` of its samples were
    /// accepted in this run (some may still be on their way).
    ItemDone {
        item: u32,
        samples: u64,
    },
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
                        received: HashSet::new(),
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
                    .map(|(addr, limit)| WorkerHealth {
                        addr: addr.clone(),
                        failing_since: None,
                        last_error: String::new(),
                        credit: Credit {
                            limit: *limit,
                            items: 0,
                            outstanding: 0,
                        },
                    })
                    .collect(),
            }),
            changed: Notify::new(),
            credit_freed: workers.iter().map(|_| Notify::new()).collect(),
        }
    }

    /// Sets worker `w`'s limit (learnt from its `Info` once it answered).
    pub fn set_limit(&self, w: usize, limit: CreditLimit) {
        let mut st = self.lock();
        st.workers[w].credit.limit = limit;
        drop(st);
        self.credit_freed[w].notify_waiters();
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
            self.credit_freed[lease.worker].notify_waiters();
        }
    }

    /// Resumes an epoch: items in `done` were delivered whole, and the
    /// keys of `partial` items were delivered already.
    pub fn resume(&self, done: &[u32], partial: &[(u32, Vec<String>)]) {
        let mut st = self.lock();
        for &i in done {
            if let Some(item) = st.items.get_mut(i as usize)
                && !item.done
            {
                item.done = true;
                st.remaining -= 1;
            }
        }
        for (i, keys) in partial {
            if let Some(item) = st.items.get_mut(*i as usize) {
                item.received.extend(keys.iter().cloned());
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

    fn finished(st: &LedgerState) -> bool {
        st.fatal.is_some() || st.remaining == 0
    }

    /// The next pending item for `worker`: the first one that has not
    /// failed on it, unless it has failed on every worker.
    fn take(&self, worker: usize) -> Option<Lease> {
        let mut st = self.lock();
        if !st.workers[worker].credit.allows_another() {
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
            Some(n) => n.saturating_sub(st.items[index].received.len() as u64),
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
            skip: item.received.iter().cloned().collect(),
        })
    }

    /// Records new samples of an attempt. Returns those to deliver, or
    /// `None` if the attempt no longer owns the item.
    fn accept(&self, lease: &Lease, samples: Vec<Sample>, skipped: &[pb::SkippedSample]) -> Option<Vec<Sample>> {
        let mut st = self.lock();
        let item = &mut st.items[lease.index];
        if item.owner != Some(lease.attempt) {
            return None;
        }
        for s in skipped {
            item.received.insert(s.key.clone());
        }
        let fresh: Vec<Sample> = samples
            .into_iter()
            .filter(|s| item.received.insert(s.key.clone()))
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
    fn complete(&self, lease: &Lease) -> Option<u64> {
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
    fn requeue(&self, lease: &Lease, worker: Option<usize>, addr: &str, message: &str, max_attempts: u32) {
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
    fn release(&self, lease: &Lease) {
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

    fn worker_ok(&self, w: usize) {
        self.lock().workers[w].failing_since = None;
    }

    fn is_failing(&self, w: usize) -> bool {
        self.lock().workers[w].failing_since.is_some()
    }

    /// Marks worker `w` as failing; ends the epoch when every worker has
    /// been failing for longer than `patience`.
    fn worker_failed(&self, w: usize, message: &str, patience: Duration) {
        let mut st = self.lock();
        let now = Instant::now();
        let h = &mut st.workers[w];
        h.failing_since.get_or_insert(now);
        h.last_error = message.to_owned();
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

/// What a lane needs.
pub(crate) struct Lane {
    pub worker: usize,
    pub addr: String,
    pub client: Client,
    pub health: HealthClient,
    pub ledger: Arc<Ledger>,
    pub config: Arc<LoaderConfig>,
    pub transform: pb::TransformSpec,
    pub epoch: u64,
    pub events: mpsc::Sender<Event>,
    pub counters: Arc<EpochCounters>,
}

enum Outcome {
    Done,
    /// The assembler is gone (the consumer dropped the epoch).
    Closed,
    /// The worker did not take the item (unreachable, draining, no answer):
    /// nothing was delivered and the item is not to blame.
    Refused(String),
    /// The attempt failed or stalled part-way.
    Failed(String),
}

/// Longest wait between two probes of a failing worker.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// The credit a worker asks for in its `Info` (samples in flight), or
/// `None` when it does not answer in time or is too old to say.
pub(crate) async fn worker_limit(client: &mut Client, timeout: Duration) -> Option<CreditLimit> {
    let info = tokio::time::timeout(timeout, client.info(pb::InfoRequest::default()))
        .await
        .ok()?
        .ok()?
        .into_inner();
    (info.inflight_samples > 0).then_some(CreditLimit::Samples(info.inflight_samples))
}

impl Lane {
    /// Takes items until the epoch is complete or has failed.
    ///
    /// A worker that failed is not given another item until a health probe
    /// says it is serving again: a worker that is down, draining or not yet
    /// started costs the items nothing, and one that comes (back) up
    /// mid-epoch gets work as soon as a probe reaches it.
    pub async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        let ledger = Arc::clone(&self.ledger);
        loop {
            let notified = ledger.changed.notified();
            let credit_freed = ledger.credit_freed[self.worker].notified();
            if Ledger::finished(&ledger.lock()) {
                return;
            }
            if ledger.is_failing(self.worker) {
                tokio::time::sleep(jittered(backoff)).await;
                backoff = (backoff * 2).min(MAX_PROBE_INTERVAL);
                match self.probe().await {
                    Ok(()) => {
                        debug!(worker = %self.addr, "worker serving again");
                        ledger.worker_ok(self.worker);
                        // A worker first reached now says what it needs.
                        if self.config.inflight_per_worker.is_none()
                            && ledger.limit(self.worker) == CreditLimit::Items(DEFAULT_INFLIGHT_ITEMS)
                            && let Some(limit) = worker_limit(&mut self.client, self.config.connect_timeout).await
                        {
                            ledger.set_limit(self.worker, limit);
                        }
                    }
                    Err(message) => {
                        ledger.worker_failed(self.worker, &message, self.config.worker_patience);
                        continue;
                    }
                }
            }
            let Some(lease) = ledger.take(self.worker) else {
                // Nothing queued (items in flight elsewhere may come back),
                // or the worker's credit is used up: wait for a change.
                let _ = tokio::time::timeout(Duration::from_millis(500), async {
                    tokio::select! {
                        () = notified => {}
                        () = credit_freed => {}
                    }
                })
                .await;
                continue;
            };
            match self.stream(&lease).await {
                Outcome::Done => {
                    ledger.worker_ok(self.worker);
                    backoff = Duration::from_millis(100);
                }
                Outcome::Closed => {
                    ledger.requeue(&lease, None, &self.addr, "client closed", u32::MAX);
                    return;
                }
                Outcome::Refused(message) => {
                    debug!(worker = %self.addr, shard = %lease.shard, error = %message, "item refused, returned to the queue");
                    ledger.release(&lease);
                    ledger.worker_failed(self.worker, &message, self.config.worker_patience);
                }
                Outcome::Failed(message) => {
                    warn!(worker = %self.addr, shard = %lease.shard, error = %message, "work item failed, reassigning");
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    ledger.requeue(
                        &lease,
                        Some(self.worker),
                        &self.addr,
                        &message,
                        self.config.max_attempts,
                    );
                    ledger.worker_failed(self.worker, &message, self.config.worker_patience);
                }
            }
        }
    }

    /// Asks the worker's grpc.health.v1 service whether it serves work.
    async fn probe(&mut self) -> Result<(), String> {
        let request = HealthCheckRequest {
            service: WORKER_SERVICE.to_owned(),
        };
        let timeout = self.config.connect_timeout.max(Duration::from_secs(1));
        match tokio::time::timeout(timeout, self.health.check(request)).await {
            Err(_) => Err(format!("no health answer within {}s", timeout.as_secs())),
            Ok(Err(status)) => Err(describe_status(&status)),
            Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32 => Ok(()),
            Ok(Ok(_)) => Err("not serving (shutting down)".to_owned()),
        }
    }

    async fn stream(&mut self, lease: &Lease) -> Outcome {
        let request = pb::WorkItem {
            dataset: self.config.dataset.clone(),
            shard: lease.shard.clone(),
            seed: self.config.seed,
            epoch: self.epoch,
            transform: Some(self.transform.clone()),
            skip_keys: lease.skip.clone(),
            chunk_bytes: self.config.chunk_bytes,
            start: lease.start,
            end: lease.end.unwrap_or(0),
        };
        debug!(worker = %self.addr, shard = %lease.shard, skip = lease.skip.len(), "item sent");
        let timeout = self.config.progress_timeout;
        let started = tokio::time::timeout(timeout, self.client.process_shard(request)).await;
        let mut stream = match started {
            Err(_) => return Outcome::Refused(format!("no answer within {}s", timeout.as_secs())),
            Ok(Err(status)) => {
                return match self.status_outcome(&status) {
                    Outcome::Failed(message) => Outcome::Refused(message),
                    other => other,
                };
            }
            Ok(Ok(response)) => response.into_inner(),
        };
        loop {
            let chunk = match tokio::time::timeout(timeout, stream.message()).await {
                Err(_) => return Outcome::Failed(format!("no progress for {}s", timeout.as_secs())),
                Ok(Err(status)) => return self.status_outcome(&status),
                Ok(Ok(None)) => return Outcome::Failed("stream ended before the item was done".to_owned()),
                Ok(Ok(Some(chunk))) => chunk,
            };
            self.ledger.worker_ok(self.worker);
            let done = chunk.done;
            let mut samples = Vec::with_capacity(chunk.samples.len());
            for s in chunk.samples {
                let checked = sample_from_pb(s, self.config.transform.size).and_then(|s| {
                    let in_range = s.position >= lease.start && lease.end.is_none_or(|end| s.position < end);
                    if in_range {
                        Ok(s)
                    } else {
                        Err(format!(
                            "sample {} at position {} of shard {} is outside the item's range {}..{}",
                            s.key,
                            s.position,
                            lease.shard,
                            lease.start,
                            lease.end.map_or_else(|| "end".to_owned(), |e| e.to_string())
                        ))
                    }
                });
                match checked {
                    Ok(s) => samples.push(s),
                    Err(message) => {
                        self.ledger.fail(ClientError::Protocol {
                            addr: self.addr.clone(),
                            message,
                        });
                        return Outcome::Closed;
                    }
                }
            }
            let Some(fresh) = self.ledger.accept(lease, samples, &chunk.skipped) else {
                // Given up on (stalled, then reassigned): discard the rest.
                debug!(worker = %self.addr, shard = %lease.shard, "late chunk discarded");
                return Outcome::Done;
            };
            for s in &chunk.skipped {
                warn!(worker = %self.addr, shard = %lease.shard, key = %s.key, reason = %s.reason, "sample skipped");
                self.counters.record_skip(&s.key, &s.reason);
            }
            if !chunk.shard_error.is_empty() {
                warn!(worker = %self.addr, error = %chunk.shard_error, "shard ended early");
                self.counters.record_shard_error(&chunk.shard_error);
            }
            for s in fresh {
                self.counters.add_sample(self.worker, s.pixels.len());
                if self.events.send(Event::Sample(s)).await.is_err() {
                    return Outcome::Closed;
                }
            }
            if let Some(err) = self.counters.over_budget(self.config.max_errors, false) {
                self.ledger.fail(err);
                return Outcome::Closed;
            }
            if done {
                if let Some(samples) = self.ledger.complete(lease) {
                    let event = Event::ItemDone {
                        item: lease.index as u32,
                        samples,
                    };
                    if self.events.send(event).await.is_err() {
                        return Outcome::Closed;
                    }
                }
                return Outcome::Done;
            }
        }
    }

    fn status_outcome(&self, status: &tonic::Status) -> Outcome {
        let message = describe_status(status);
        if is_permanent(status) {
            self.ledger.fail(ClientError::Worker {
                addr: self.addr.clone(),
                message,
            });
            Outcome::Closed
        } else {
            Outcome::Failed(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn ledger(items: usize, workers: usize) -> Ledger {
        let shards = (0..items)
            .map(|i| PlanItem {
                shard: stoker_core::ShardRef {
                    name: format!("s{i}.tar"),
                    size_bytes: 1,
                    samples: None,
                },
                start: 0,
                end: None,
            })
            .collect();
        let addrs: Vec<(String, CreditLimit)> = (0..workers)
            .map(|w| (format!("w{w}"), CreditLimit::Items(MAX_LANES_PER_WORKER)))
            .collect();
        Ledger::new(shards, &addrs)
    }

    /// `items` items of `samples` samples each (an index), one worker.
    fn indexed_ledger(items: usize, samples: u64, limit: CreditLimit) -> Ledger {
        let shards = (0..items)
            .map(|i| PlanItem {
                shard: stoker_core::ShardRef {
                    name: format!("s{i}.tar"),
                    size_bytes: 1,
                    samples: Some(samples),
                },
                start: 0,
                end: None,
            })
            .collect();
        Ledger::new(shards, &[("w0".to_owned(), limit)])
    }

    fn named(keys: std::ops::Range<usize>) -> Vec<Sample> {
        let names: Vec<String> = keys.map(|k| format!("k{k}")).collect();
        samples(&names.iter().map(String::as_str).collect::<Vec<_>>())
    }

    #[test]
    fn credit_in_samples_takes_items_until_their_samples_reach_the_worker_s_need() {
        // The worker needs 100 samples in flight; items hold 40 each.
        let l = indexed_ledger(10, 40, CreditLimit::Samples(100));
        let a = l.take(0).unwrap();
        let b = l.take(0).unwrap();
        let _c = l.take(0).unwrap();
        assert!(l.take(0).is_none(), "120 samples expected: over the 100 needed");
        // 30 of a's samples arrive (or are skipped): 90 outstanding, room again.
        let skipped = [pb::SkippedSample {
            key: "k29".into(),
            reason: "corrupt".into(),
        }];
        l.accept(&a, named(0..29), &skipped).unwrap();
        let d = l.take(0).unwrap();
        assert!(l.take(0).is_none());
        // A duplicate key brings no credit back; a completed item all it held.
        l.accept(&d, named(0..1), &[]).unwrap();
        l.accept(&d, named(0..1), &[]).unwrap();
        assert!(l.take(0).is_none());
        l.accept(&a, named(30..40), &[]).unwrap();
        assert_eq!(l.complete(&a), Some(39));
        // b, c and d: 40 + 40 + 39 expected.
        assert!(l.take(0).is_none());
        l.accept(&b, named(100..120), &[]).unwrap();
        assert!(l.take(0).is_some(), "99 expected: room for one more");
    }

    #[test]
    fn a_failed_or_refused_attempt_gives_its_credit_back_and_a_retry_expects_only_the_rest() {
        let l = indexed_ledger(3, 40, CreditLimit::Samples(50));
        let a = l.take(0).unwrap();
        let b = l.take(0).unwrap();
        assert!(l.take(0).is_none());
        l.accept(&a, named(0..35), &[]).unwrap();
        l.requeue(&a, Some(0), "w0", "reset", 5);
        l.release(&b);
        // Nothing is held now. The retry of `a` expects its 5 missing
        // samples and `b` all 40: 45, under 50, so the third item goes too
        // (had the retry expected 40 again, 80 would have stopped it).
        let mut again = [l.take(0).unwrap(), l.take(0).unwrap()];
        again.sort_by_key(|lease| lease.index);
        assert_eq!((again[0].skip.len(), again[1].skip.len()), (35, 0));
        assert_eq!(l.take(0).map(|c| c.index), Some(2));
    }

    #[test]
    fn a_fixed_limit_counts_items_and_unknown_sizes_learn_from_completed_items() {
        let l = ledger(5, 1);
        l.set_limit(0, CreditLimit::Items(2));
        let a = l.take(0).unwrap();
        let _b = l.take(0).unwrap();
        assert!(l.take(0).is_none(), "two items at most");
        l.accept(&a, named(0..10), &[]).unwrap();
        assert!(l.take(0).is_none(), "samples do not matter with an item limit");
        assert_eq!(l.complete(&a), Some(10));
        let c = l.take(0).unwrap();
        // No index: items are expected to be as large as those done (10),
        // so a need of 15 samples admits a second item, not a third.
        l.set_limit(0, CreditLimit::Samples(15));
        l.release(&c);
        let _c = l.take(0).unwrap();
        let _d = l.take(0).unwrap();
        assert!(l.take(0).is_none());
    }

    fn samples(keys: &[&str]) -> Vec<Sample> {
        keys.iter()
            .map(|k| Sample {
                key: (*k).to_owned(),
                label: 0,
                pixels: Bytes::new(),
                position: 0,
                item: 0,
            })
            .collect()
    }

    fn keys(v: &[Sample]) -> Vec<&str> {
        v.iter().map(|s| s.key.as_str()).collect()
    }

    #[test]
    fn a_reassigned_item_skips_what_arrived_and_the_old_attempt_is_ignored() {
        let l = ledger(1, 2);
        let first = l.take(0).unwrap();
        let got = l.accept(&first, samples(&["a", "b"]), &[]).unwrap();
        assert_eq!(keys(&got), ["a", "b"]);
        l.requeue(&first, Some(0), "w0", "stalled", 5);

        // Worker 0 failed it: it goes to worker 1, with a and b to skip.
        assert!(l.take(0).is_none());
        let second = l.take(1).unwrap();
        let mut skip = second.skip.clone();
        skip.sort();
        assert_eq!(skip, ["a", "b"]);

        // The stalled attempt wakes up: everything it sends is discarded.
        assert!(l.accept(&first, samples(&["c"]), &[]).is_none());
        assert!(l.complete(&first).is_none());

        // The new attempt delivers only new keys, then completes the epoch.
        let got = l.accept(&second, samples(&["b", "c"]), &[]).unwrap();
        assert_eq!(keys(&got), ["c"]);
        // a, b and c were accepted for delivery, over both attempts.
        assert_eq!(l.complete(&second), Some(3));
        assert_eq!(l.remaining(), 0);
        assert!(l.fatal().is_none());
    }

    #[test]
    fn an_item_failing_too_often_ends_the_epoch_with_its_name() {
        let l = ledger(1, 1);
        for _ in 0..3 {
            // One worker: it gets the item again after failing it.
            let lease = l.take(0).unwrap();
            l.requeue(&lease, Some(0), "w0", "connection reset", 3);
        }
        let err = l.fatal().unwrap().to_string();
        assert!(err.contains("s0.tar") && err.contains("3 times"), "{err}");
    }

    #[test]
    fn an_item_goes_back_to_a_worker_it_failed_on_when_the_others_are_down() {
        let l = ledger(1, 2);
        let first = l.take(0).unwrap();
        l.requeue(&first, Some(0), "w0", "reset", 5);
        // Worker 1 has not failed the item, and is healthy: it waits for it.
        assert!(l.take(0).is_none());
        // Worker 1 is down: worker 0 gets the item again.
        l.worker_failed(1, "connection refused", Duration::from_secs(60));
        assert!(l.take(0).is_some());
    }

    #[test]
    fn a_window_holds_lanes_back_until_the_frontier_moves() {
        let l = ledger(5, 1);
        l.resume(&[0], &[(1, vec!["a".into()])]);
        assert_eq!(l.remaining(), 4);
        l.set_window(2);
        l.advance(1);
        let a = l.take(0).unwrap();
        assert_eq!((a.index, a.skip.clone()), (1, vec!["a".to_owned()]));
        assert_eq!(l.take(0).unwrap().index, 2);
        assert!(l.take(0).is_none(), "item 3 is past the window");
        l.advance(2);
        assert_eq!(l.take(0).unwrap().index, 3);
    }

    #[test]
    fn skipped_samples_are_not_reported_twice() {
        let l = ledger(1, 2);
        let first = l.take(0).unwrap();
        let bad = pb::SkippedSample {
            key: "x".into(),
            reason: "corrupt".into(),
        };
        l.accept(&first, Vec::new(), std::slice::from_ref(&bad)).unwrap();
        l.requeue(&first, Some(0), "w0", "reset", 5);
        let second = l.take(1).unwrap();
        assert_eq!(second.skip, ["x"]);
    }
}
