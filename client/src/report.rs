//! What an epoch did: the live counters lanes update ([`EpochCounters`])
//! and the reports made from them ([`EpochReport`], [`WorkerReport`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::budget::{ErrorBudget, ReasonTally};
use crate::error::ClientError;

/// Live counters of one epoch, shared with the lanes.
#[derive(Debug)]
pub(crate) struct EpochCounters {
    pub samples: AtomicU64,
    pub bytes: AtomicU64,
    pub skipped: AtomicU64,
    pub retries: AtomicU64,
    per_worker: Vec<AtomicU64>,
    skip_reasons: Mutex<Vec<(String, String)>>,
    tally: Mutex<ReasonTally>,
    shard_errors: Mutex<Vec<String>>,
    /// Samples the epoch holds, when the dataset's index says.
    planned: Option<u64>,
}

/// Skip reasons kept for the report (the log has all of them).
const KEPT_REASONS: usize = 100;

impl EpochCounters {
    pub fn new(workers: usize, planned: Option<u64>) -> Self {
        Self {
            planned,
            tally: Mutex::new(ReasonTally::default()),
            samples: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            per_worker: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            skip_reasons: Mutex::new(Vec::new()),
            shard_errors: Mutex::new(Vec::new()),
        }
    }

    pub fn add_sample(&self, worker: usize, bytes: usize) {
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.per_worker[worker].fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_skip(&self, key: &str, reason: &str) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
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

    pub fn record_shard_error(&self, error: &str) {
        self.shard_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(error.to_owned());
    }

    /// The report of an epoch of `shards` plan items, `elapsed` after it
    /// started; `workers` are the addresses, in the lanes' numbering.
    pub fn report(&self, workers: &[String], shards: usize, elapsed: Duration) -> EpochReport {
        EpochReport {
            samples: self.samples.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            shards,
            elapsed,
            workers: workers
                .iter()
                .zip(&self.per_worker)
                .map(|(addr, n)| WorkerReport {
                    addr: addr.clone(),
                    samples: n.load(Ordering::Relaxed),
                })
                .collect(),
            skip_reasons: self.skip_reasons.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            shard_errors: self.shard_errors.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// Samples delivered by one worker.
#[derive(Debug, Clone)]
pub struct WorkerReport {
    pub addr: String,
    pub samples: u64,
}

/// What happened in an epoch so far.
#[derive(Debug, Clone)]
pub struct EpochReport {
    pub samples: u64,
    pub bytes: u64,
    pub skipped: u64,
    /// Work items reassigned after a failure or stall.
    pub retries: u64,
    pub shards: usize,
    pub elapsed: Duration,
    pub workers: Vec<WorkerReport>,
    /// (key, reason) of the first skipped samples.
    pub skip_reasons: Vec<(String, String)>,
    /// Shards whose data ended early or was corrupt.
    pub shard_errors: Vec<String>,
}
