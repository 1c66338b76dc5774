//! What an epoch did: the live counters lanes update ([`EpochCounters`])
//! and the reports made from them ([`EpochReport`], [`WorkerReport`]). The
//! counters are updated by lanes and by the consumer's waits; workers
//! found mid-epoch are added; the clock stops at the epoch's end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

use crate::budget::{ErrorBudget, ReasonTally};
use crate::error::ClientError;
use crate::metrics::{ClientMetrics, LiveEpoch, recommended_workers};

/// Live counters of one epoch, shared with the lanes.
#[derive(Debug)]
pub(crate) struct EpochCounters {
    pub samples: AtomicU64,
    pub bytes: AtomicU64,
    pub skipped: AtomicU64,
    pub retries: AtomicU64,
    /// Samples in the batches handed to the consumer (padding excluded).
    pub consumed: AtomicU64,
    pub batches: AtomicU64,
    /// Nanoseconds the consumer waited for a batch.
    pub wait_ns: AtomicU64,
    /// Per worker, in the lanes' numbering (workers found during the epoch
    /// are added).
    workers: RwLock<Vec<WorkerTally>>,
    /// The loader's lifetime totals, updated beside these.
    metrics: ClientMetrics,
    started: Instant,
    /// Set when the consumer saw the epoch end: the report's clock stops.
    ended: OnceLock<Instant>,
    skip_reasons: Mutex<Vec<(String, String)>>,
    tally: Mutex<ReasonTally>,
    shard_errors: Mutex<Vec<String>>,
    /// Samples the epoch holds, when the dataset's index says.
    planned: Option<u64>,
}

/// Samples from one worker: this epoch's count and the lifetime metric.
#[derive(Debug)]
struct WorkerTally {
    addr: String,
    samples: AtomicU64,
    ring_samples: AtomicU64,
    device_samples: AtomicU64,
    metric: Counter,
    /// Why the worker was set aside for the rest of the epoch, if it was.
    set_aside: OnceLock<String>,
}

impl WorkerTally {
    fn new(addr: &str, metrics: &ClientMetrics) -> Self {
        Self {
            addr: addr.to_owned(),
            samples: AtomicU64::new(0),
            ring_samples: AtomicU64::new(0),
            device_samples: AtomicU64::new(0),
            metric: metrics.worker(addr),
            set_aside: OnceLock::new(),
        }
    }
}

/// Skip reasons kept for the report (the log has all of them).
const KEPT_REASONS: usize = 100;

impl EpochCounters {
    /// The counters of an epoch served by `workers` (addresses, in the
    /// lanes' numbering).
    pub fn new(workers: &[String], planned: Option<u64>, metrics: &ClientMetrics) -> Self {
        Self {
            consumed: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            metrics: metrics.clone(),
            started: Instant::now(),
            ended: OnceLock::new(),
            planned,
            tally: Mutex::new(ReasonTally::default()),
            samples: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            workers: RwLock::new(workers.iter().map(|addr| WorkerTally::new(addr, metrics)).collect()),
            skip_reasons: Mutex::new(Vec::new()),
            shard_errors: Mutex::new(Vec::new()),
        }
    }

    pub fn add_sample(&self, worker: usize, bytes: usize) {
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.metrics.samples.inc();
        self.metrics.bytes.inc_by(bytes as u64);
        let workers = self.workers.read().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = workers.get(worker) {
            w.samples.fetch_add(1, Ordering::Relaxed);
            w.metric.inc();
        }
    }

    /// Of worker `worker`'s samples in a chunk, `ring` came through the
    /// shared ring and `device` were left on the loader's device by a GPU
    /// worker in this process.
    pub fn add_routed_samples(&self, worker: usize, ring: usize, device: usize) {
        if ring == 0 && device == 0 {
            return;
        }
        let workers = self.workers.read().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = workers.get(worker) {
            w.ring_samples.fetch_add(ring as u64, Ordering::Relaxed);
            w.device_samples.fetch_add(device as u64, Ordering::Relaxed);
        }
    }

    /// A worker found during the epoch, numbered next (as in the ledger).
    pub fn add_worker(&self, addr: &str) -> usize {
        let mut workers = self.workers.write().unwrap_or_else(|p| p.into_inner());
        workers.push(WorkerTally::new(addr, &self.metrics));
        workers.len() - 1
    }

    /// Worker `worker` broke the protocol and takes no more work this
    /// epoch, because `why` (the first reason is kept).
    pub fn set_aside(&self, worker: usize, why: &str) {
        let workers = self.workers.read().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = workers.get(worker) {
            let _ = w.set_aside.set(why.to_owned());
        }
    }

    /// The epoch is over for the consumer (its last batch, or an error).
    pub fn finish(&self) {
        let _ = self.ended.set(Instant::now());
    }

    /// Time since the epoch started, up to its end.
    pub fn elapsed(&self) -> Duration {
        self.ended.get().copied().unwrap_or_else(Instant::now) - self.started
    }

    /// A work item handed to another worker.
    pub fn add_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
        self.metrics.reassigned.inc();
    }

    /// A batch of `samples` real samples handed to the consumer.
    pub fn add_batch(&self, samples: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.consumed.fetch_add(samples as u64, Ordering::Relaxed);
        self.metrics.batches.inc();
    }

    /// Time the consumer spent waiting for a batch.
    pub fn add_wait(&self, wait: Duration) {
        let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.wait_ns.fetch_add(ns, Ordering::Relaxed);
        self.metrics.wait_seconds.inc_by(wait.as_secs_f64());
    }

    pub fn record_skip(&self, key: &str, reason: &str) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
        self.metrics.skipped.inc();
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).add(key, reason);
        let mut r = self.skip_reasons.lock().unwrap_or_else(|p| p.into_inner());
        if r.len() < KEPT_REASONS {
            r.push((key.to_owned(), reason.to_owned()));
        }
    }

    /// The budget error if the skips so far exceed `budget`. With a
    /// fraction, the epoch's size comes from the index when it has one;
    /// otherwise only the end of the epoch (`finished`) can tell.
    pub fn over_budget(&self, budget: Option<ErrorBudget>, finished: bool) -> Option<ClientError> {
        let budget = budget?;
        let skipped = self.skipped.load(Ordering::Relaxed);
        let total = match (budget, self.planned) {
            (ErrorBudget::Count(_), _) => 0,
            (ErrorBudget::Fraction(_), Some(planned)) => planned,
            (ErrorBudget::Fraction(_), None) if finished => self.samples.load(Ordering::Relaxed) + skipped,
            (ErrorBudget::Fraction(_), None) => return None,
        };
        (skipped > budget.limit(total)).then(|| ClientError::ErrorBudget {
            skipped,
            budget: budget.to_string(),
            reasons: self.tally.lock().unwrap_or_else(|p| p.into_inner()).summary(),
        })
    }

    /// The error of an epoch that ended having skipped every sample it
    /// read and delivered none: never a silent empty epoch.
    pub fn nothing_delivered(&self) -> Option<ClientError> {
        let skipped = self.skipped.load(Ordering::Relaxed);
        (skipped > 0 && self.samples.load(Ordering::Relaxed) == 0).then(|| ClientError::NothingDelivered {
            skipped,
            reasons: self.tally.lock().unwrap_or_else(|p| p.into_inner()).summary(),
        })
    }

    pub fn record_shard_error(&self, error: &str) {
        self.shard_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(error.to_owned());
    }

    /// The report of an epoch of `shards` plan items, so far (or to its
    /// end).
    pub fn report(&self, shards: usize) -> EpochReport {
        let elapsed = self.elapsed();
        let wait = Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed));
        let consumed = self.consumed.load(Ordering::Relaxed);
        let workers: Vec<WorkerReport> = self
            .workers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|w| WorkerReport {
                addr: w.addr.clone(),
                samples: w.samples.load(Ordering::Relaxed),
                ring_samples: w.ring_samples.load(Ordering::Relaxed),
                device_samples: w.device_samples.load(Ordering::Relaxed),
                set_aside: w.set_aside.get().cloned(),
            })
            .collect();
        let per_worker: Vec<u64> = workers.iter().map(|w| w.samples).collect();
        EpochReport {
            consumed,
            batches: self.batches.load(Ordering::Relaxed),
            wait,
            recommended_workers: recommended_workers(consumed, elapsed, wait, &per_worker),
            samples: self.samples.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            shards,
            elapsed,
            workers,
            skip_reasons: self.skip_reasons.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            shard_errors: self.shard_errors.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

impl LiveEpoch for EpochCounters {
    fn recommended_workers(&self) -> Option<u32> {
        self.report(0).recommended_workers
    }
}

/// Samples delivered by one worker.
#[derive(Debug, Clone)]
pub struct WorkerReport {
    pub addr: String,
    pub samples: u64,
    /// Of the samples it sent, those whose pixels came through the
    /// shared-memory ring (a worker on this host), not the network.
    pub ring_samples: u64,
    /// Of the samples it sent, those whose pixels it left on the loader's
    /// device (a GPU worker in this process: no copy to the host).
    pub device_samples: u64,
    /// Why the worker was set aside for the rest of the epoch (it broke
    /// the protocol: a sample outside its item's range...); its items went
    /// to other workers.
    pub set_aside: Option<String>,
}

/// What happened in an epoch so far.
#[derive(Debug, Clone)]
pub struct EpochReport {
    pub samples: u64,
    pub bytes: u64,
    pub skipped: u64,
    /// Work items reassigned after a failure or stall.
    pub retries: u64,
    /// Batches handed to the consumer, and the real samples in them.
    pub batches: u64,
    pub consumed: u64,
    /// Time the consumer spent waiting for a batch.
    pub wait: Duration,
    /// Workers of the measured kind that would keep the consumer from
    /// waiting: its rate when not waiting over the mean worker's rate
    /// (`None` until both are known).
    pub recommended_workers: Option<u32>,
    pub shards: usize,
    pub elapsed: Duration,
    pub workers: Vec<WorkerReport>,
    /// (key, reason) of the first skipped samples.
    pub skip_reasons: Vec<(String, String)>,
    /// Shards whose data ended early or was corrupt.
    pub shard_errors: Vec<String>,
}

impl EpochReport {
    /// Samples per second the consumer took while it was not waiting.
    pub fn consumer_rate(&self) -> Option<f64> {
        let busy = self.elapsed.saturating_sub(self.wait).as_secs_f64();
        (busy > 0.0).then(|| self.consumed as f64 / busy)
    }
}
