//! Dispatch: the lanes that hand work items to workers over gRPC.
//!
//! Every worker gets lanes ([`WorkerLane`]); a lane takes the next pending
//! item from the [`Ledger`], streams it from its worker, and takes another.
//! Fast workers therefore take more items than slow ones. What may be taken
//! when, and what a received sample counts for, is the ledger's business;
//! a lane reports to it what the worker did: samples, skips, completion,
//! a failure, a stall (no progress for `progress_timeout`), or a refusal.
//!
//! A lane checks that each sample lies in its item's range; a worker that
//! breaks that is set aside for the epoch. A lane whose worker is failing
//! takes no item until a grpc.health.v1 probe says it serves; that is also
//! how a worker that starts mid-epoch on a listed address joins. A retired
//! worker's lanes idle. [`EpochLanes`] holds an epoch's lanes and gives a
//! worker found later its lanes (`join`); it keeps only a weak sender of
//! the events channel, so the epoch ends when its last lane does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use crate::budget::ReasonTally;
use crate::config::{DEFAULT_INFLIGHT_ITEMS, LoaderConfig, MAX_LANES_PER_WORKER};
use crate::conn::{WorkerConn, ask_info};
use crate::error::{ClientError, describe_status, is_permanent};
use crate::event::Event;
use crate::ledger::{CreditLimit, Lease, Ledger};
use crate::report::EpochCounters;
use crate::ring::RingRoute;
use crate::wire::{Client, HealthClient, ItemTemplate};

/// The lanes of one epoch, and what it takes to give a worker lanes: the
/// epoch's start does so for the workers known then, discovery for those
/// found later ([`EpochLanes::join`]).
///
/// The epoch's events channel closes when the last lane ends: this holds
/// only a weak sender, so it never keeps an epoch open, and a worker found
/// after the epoch ended gets no lanes.
pub(crate) struct EpochLanes {
    pub ledger: Arc<Ledger>,
    pub counters: Arc<EpochCounters>,
    config: Arc<LoaderConfig>,
    template: Arc<ItemTemplate>,
    events: mpsc::WeakSender<Event>,
    /// Samples per plan item, when the index says.
    item_samples: Option<u64>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl EpochLanes {
    pub fn new(
        ledger: Arc<Ledger>,
        counters: Arc<EpochCounters>,
        config: Arc<LoaderConfig>,
        template: Arc<ItemTemplate>,
        events: &mpsc::Sender<Event>,
        item_samples: Option<u64>,
    ) -> Self {
        Self {
            ledger,
            counters,
            config,
            template,
            events: events.downgrade(),
            item_samples,
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Items a worker of credit `limit` is expected to hold at once.
    pub fn expected_items(&self, limit: CreditLimit) -> usize {
        match limit {
            CreditLimit::Items(n) => n,
            CreditLimit::Samples(want) => self.item_samples.map_or(DEFAULT_INFLIGHT_ITEMS + 1, |per_item| {
                (want.div_ceil(per_item.max(1)) as usize + 1).min(MAX_LANES_PER_WORKER)
            }),
        }
    }

    /// Lanes for a worker of credit `limit`: as many as the items its
    /// credit may allow at once (a worker that may ask for more once
    /// reached gets the most).
    fn lanes_for(&self, limit: CreditLimit) -> usize {
        match (limit, self.config.inflight_per_worker) {
            (_, Some(n)) => n,
            (CreditLimit::Samples(_), None) if self.item_samples.is_some() => self.expected_items(limit),
            _ => MAX_LANES_PER_WORKER,
        }
    }

    /// Spawns the lanes of `conn`, worker `w` of the ledger and counters.
    pub fn spawn(&self, w: usize, conn: &WorkerConn, events: &mpsc::Sender<Event>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for lane in 0..self.lanes_for(conn.limit) {
            let task = tokio::spawn(
                WorkerLane {
                    worker: w,
                    addr: conn.addr.clone(),
                    client: conn.lane_clients[lane % conn.lane_clients.len()].clone(),
                    health: conn.health.clone(),
                    ledger: Arc::clone(&self.ledger),
                    config: Arc::clone(&self.config),
                    template: Arc::clone(&self.template),
                    events: events.clone(),
                    counters: Arc::clone(&self.counters),
                    ring: Arc::clone(&conn.ring),
                }
                .run(),
            );
            tasks.push(task.abort_handle());
        }
    }

    /// A worker found during the epoch: numbered next, counted, given
    /// lanes. False once the epoch is over.
    pub fn join(&self, conn: &WorkerConn) -> bool {
        let Some(events) = self.events.upgrade() else {
            return false;
        };
        if self.ledger.is_finished() {
            return false;
        }
        let w = self.ledger.add_worker(&conn.addr, conn.limit);
        let counted = self.counters.add_worker(&conn.addr);
        debug_assert_eq!(w, counted, "the ledger and the counters number workers alike");
        self.spawn(w, conn, &events);
        true
    }

    /// Stops every lane now.
    pub fn abort(&self) {
        for task in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
    }
}

/// One of a worker's lanes: what it needs to take items for the worker.
pub(crate) struct WorkerLane {
    pub worker: usize,
    pub addr: String,
    pub client: Client,
    pub health: HealthClient,
    pub ledger: Arc<Ledger>,
    pub config: Arc<LoaderConfig>,
    /// The epoch's part of every request.
    pub template: Arc<ItemTemplate>,
    pub events: mpsc::Sender<Event>,
    pub counters: Arc<EpochCounters>,
    /// Whether the worker writes into the loader's shared ring.
    pub ring: Arc<RingRoute>,
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
    /// The worker broke the protocol (a sample outside the item's range):
    /// it is set aside for the rest of the epoch, and the item goes to
    /// another worker, its attempt not counted against it.
    Violation(String),
}

/// One item's skips, logged once when its stream ends: the count and the
/// reasons by kind with the first key of each. Each sample's reason is at
/// DEBUG, and in the epoch's report.
struct ItemSkips {
    addr: String,
    shard: String,
    count: u64,
    tally: ReasonTally,
}

impl Drop for ItemSkips {
    fn drop(&mut self) {
        if self.count > 0 {
            warn!(worker = %self.addr, shard = %self.shard, skipped = self.count, reasons = %self.tally.summary(), "samples skipped");
        }
    }
}

/// How often the idle lanes of a retired worker look at the ledger.
const RETIRED_POLL: Duration = Duration::from_secs(1);

/// Longest wait between two probes of a failing worker.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(2);

impl WorkerLane {
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
            let (notified, credit_freed) = ledger.changes(self.worker);
            if ledger.is_finished() {
                return;
            }
            if ledger.is_retired(self.worker) {
                // Gone from its DNS name: idle until it is back, and end
                // the epoch if no worker is left for long enough.
                ledger.check_gone(self.config.worker_patience);
                let _ = tokio::time::timeout(RETIRED_POLL, notified).await;
                continue;
            }
            if ledger.is_failing(self.worker) {
                // Spread out: lanes retrying the same worker should not retry in step.
                tokio::time::sleep(stoker_core::jitter::around(backoff)).await;
                backoff = (backoff * 2).min(MAX_PROBE_INTERVAL);
                match self.probe().await {
                    Ok(()) => {
                        debug!(worker = %self.addr, "worker serving again");
                        ledger.worker_ok(self.worker);
                        // A worker first reached now says what it needs,
                        // and where it runs.
                        if self.config.inflight_per_worker.is_none()
                            && ledger.limit(self.worker) == CreditLimit::Items(DEFAULT_INFLIGHT_ITEMS)
                            && let Some(limit) = ask_info(&mut self.client, &self.config, &self.ring).await
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
                Outcome::Violation(message) => {
                    warn!(worker = %self.addr, shard = %lease.shard, error = %message, "worker broke the protocol: set aside for the rest of the epoch, its item reassigned");
                    self.counters.add_retry();
                    self.counters.set_aside(self.worker, &message);
                    ledger.release(&lease);
                    ledger.set_aside(self.worker, &message, self.config.worker_patience);
                }
                Outcome::Failed(message) => {
                    warn!(worker = %self.addr, shard = %lease.shard, error = %message, "work item failed, reassigning");
                    self.counters.add_retry();
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
        let timeout = self.config.connect_timeout.max(Duration::from_secs(1));
        match tokio::time::timeout(timeout, self.health.serving()).await {
            Err(_) => Err(format!("no health answer within {}s", timeout.as_secs())),
            Ok(Err(status)) => Err(describe_status(&status)),
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err("not serving (shutting down)".to_owned()),
        }
    }

    async fn stream(&mut self, lease: &Lease) -> Outcome {
        // The item's slots in the shared ring, if the worker takes it: any
        // it wrote but never named are freed when this returns.
        let ring = self.ring.offer();
        // Likewise the images left on the device: what this attempt left
        // and did not deliver is freed when it returns.
        let sink = self.template.sink_offer();
        let request = self
            .template
            .request(&lease.shard, &lease.skip, lease.start, lease.end)
            .with_ring(ring.as_ref())
            .with_device_sink(sink.as_ref());
        debug!(worker = %self.addr, shard = %lease.shard, skip = lease.skip.len(), "item sent");
        let timeout = self.config.progress_timeout;
        let started = tokio::time::timeout(timeout, self.client.process_shard(request)).await;
        let mut chunks = match started {
            Err(_) => return Outcome::Refused(format!("no answer within {}s", timeout.as_secs())),
            Ok(Err(status)) => {
                return match self.status_outcome(&status) {
                    Outcome::Failed(message) => Outcome::Refused(message),
                    other => other,
                };
            }
            Ok(Ok(chunks)) => chunks,
        };
        let mut skips = ItemSkips {
            addr: self.addr.clone(),
            shard: lease.shard.clone(),
            count: 0,
            tally: ReasonTally::default(),
        };
        loop {
            let mut chunk = match tokio::time::timeout(timeout, chunks.next()).await {
                Err(_) => return Outcome::Failed(format!("no progress for {}s", timeout.as_secs())),
                Ok(Err(status)) => return self.status_outcome(&status),
                Ok(Ok(None)) => return Outcome::Failed("stream ended before the item was done".to_owned()),
                Ok(Ok(Some(chunk))) => chunk,
            };
            self.ledger.worker_ok(self.worker);
            let done = chunk.done;
            if !chunk.ring_refused.is_empty() {
                self.ring.refused(&chunk.ring_refused);
            }
            let ring_samples = chunk.ring_samples();
            let device_samples = chunk.device_samples();
            let received = chunk.take_samples(
                self.config.transform.size,
                &self.config.fields,
                &self.config.views,
                ring.as_ref(),
                sink.as_ref(),
            );
            let mut samples = Vec::with_capacity(received.len());
            for s in received {
                let checked = s.and_then(|s| {
                    if lease.holds(s.position) {
                        Ok(s)
                    } else {
                        Err(format!(
                            "sample {} at position {} of shard {} is outside the item's range {}",
                            s.key,
                            s.position,
                            lease.shard,
                            lease.range()
                        ))
                    }
                });
                match checked {
                    Ok(s) => samples.push(s),
                    Err(message) => return Outcome::Violation(message),
                }
            }
            if let Some(s) = chunk.skipped.iter().find(|s| !lease.holds(s.position)) {
                return Outcome::Violation(format!(
                    "skipped sample {} at position {} of shard {} is outside the item's range {}",
                    s.key,
                    s.position,
                    lease.shard,
                    lease.range()
                ));
            }
            let Some(fresh) = self.ledger.accept(lease, samples, &chunk.skipped) else {
                // Given up on (stalled, then reassigned): discard the rest.
                debug!(worker = %self.addr, shard = %lease.shard, "late chunk discarded");
                return Outcome::Done;
            };
            self.counters
                .add_routed_samples(self.worker, ring_samples, device_samples);
            for s in &chunk.skipped {
                debug!(worker = %self.addr, shard = %lease.shard, key = %s.key, position = s.position, reason = %s.reason, "sample skipped");
                skips.count += 1;
                skips.tally.add(&s.key, &s.reason);
                self.counters.record_skip(&s.key, &s.reason);
            }
            if !chunk.shard_error.is_empty() {
                warn!(worker = %self.addr, error = %chunk.shard_error, "shard ended early");
                self.counters.record_shard_error(&chunk.shard_error);
            }
            for s in fresh {
                let bytes = s.pixels.len() + s.device.as_ref().map_or(0, |d| d.len());
                self.counters.add_sample(self.worker, bytes);
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
