//! The client's Prometheus metrics (`LoaderConfig::metrics_listen`, `stoker
//! stream --metrics-listen`, the Python loader's `metrics_port=`), and the
//! worker count that would keep the consumer fed.
//!
//! The counters are the loader's lifetime totals, updated in place beside
//! each epoch's own counters (`EpochCounters`), so a scrape between epochs
//! still sees every sample; the `recommended_workers` gauge is computed at
//! scrape time from the current epoch.
//!
//! One way only: `report` counts into [`ClientMetrics`] and takes
//! [`recommended_workers`] from here; this module reads the epoch in
//! progress through [`LiveEpoch`], which the epoch's counters implement,
//! and never imports `report`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use stoker_metrics::Registry;

/// Where a metrics address (`HOST:PORT`, or a port alone for loopback)
/// listens.
pub use stoker_metrics::listen_addr;

/// The prefix of every client metric.
pub const PREFIX: &str = "stoker_client";

type WorkerLabel = [(&'static str, String); 1];

/// What the scrape-time gauges read from the epoch in progress.
pub(crate) trait LiveEpoch: std::fmt::Debug + Send + Sync {
    /// Workers of the measured kind that would keep the consumer fed, from
    /// the epoch's rates so far ([`recommended_workers`]).
    fn recommended_workers(&self) -> Option<u32>;
}

/// The epoch in progress.
type CurrentEpoch = Option<Arc<dyn LiveEpoch>>;

/// The loader's lifetime counters. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientMetrics {
    pub wait_seconds: Counter<f64, AtomicU64>,
    pub samples: Counter,
    pub bytes: Counter,
    pub batches: Counter,
    pub reassigned: Counter,
    pub skipped: Counter,
    worker_samples: Family<WorkerLabel, Counter>,
    /// The epoch in progress (the last one started), for the gauge.
    current: Arc<Mutex<CurrentEpoch>>,
}

impl ClientMetrics {
    /// The per-sample counter of the worker at `addr`.
    pub fn worker(&self, addr: &str) -> Counter {
        self.worker_samples
            .get_or_create(&[("worker", addr.to_owned())])
            .clone()
    }

    /// Makes `epoch` the epoch the gauge describes.
    pub fn set_current<E: LiveEpoch + 'static>(&self, epoch: &Arc<E>) {
        let epoch: Arc<dyn LiveEpoch> = epoch.clone();
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(epoch);
    }

    /// The registry a loader serves.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix(PREFIX);
        r.register(
            "wait_seconds",
            "Seconds the consumer was blocked waiting for a batch",
            self.wait_seconds.clone(),
        );
        r.register("samples", "Samples received from workers", self.samples.clone());
        r.register("bytes", "Pixel bytes received from workers", self.bytes.clone());
        r.register("batches", "Batches handed to the consumer", self.batches.clone());
        r.register(
            "reassigned_items",
            "Work items given to another worker after a failure or a stall",
            self.reassigned.clone(),
        );
        r.register("skipped", "Samples the workers skipped", self.skipped.clone());
        r.register(
            "worker_samples",
            "Samples received, by worker address",
            self.worker_samples.clone(),
        );
        r.register_collector(Box::new(Recommended(self.clone())));
        r
    }
}

/// Scrape-time gauges of the current epoch.
#[derive(Debug)]
struct Recommended(ClientMetrics);

impl Collector for Recommended {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let current = self.0.current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(epoch) = current else {
            return Ok(());
        };
        if let Some(n) = epoch.recommended_workers() {
            let gauge = ConstGauge::new(i64::from(n));
            gauge.encode(encoder.encode_descriptor(
                "recommended_workers",
                "Workers of the measured kind that would keep the consumer fed, from this epoch's consumer and worker rates",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Slack under which a fraction of a worker is not asked for (measured
/// rates are noisy).
const SLACK: f64 = 0.05;

/// The number of workers, each as fast as the mean of the measured ones,
/// that would deliver what the consumer takes when it never waits. `None`
/// until there is something to go on.
///
/// The consumer's demand is what it took divided by the time it was not
/// waiting; a worker's rate is what it delivered over the epoch.
pub(crate) fn recommended_workers(consumed: u64, elapsed: Duration, wait: Duration, per_worker: &[u64]) -> Option<u32> {
    let busy = elapsed.saturating_sub(wait).as_secs_f64();
    let elapsed = elapsed.as_secs_f64();
    let delivering: Vec<f64> = per_worker.iter().filter(|&&n| n > 0).map(|&n| n as f64).collect();
    if consumed == 0 || busy <= 0.0 || elapsed <= 0.0 || delivering.is_empty() {
        return None;
    }
    let demand = consumed as f64 / busy;
    let per_worker_rate = delivering.iter().sum::<f64>() / delivering.len() as f64 / elapsed;
    let n = (demand / per_worker_rate - SLACK).ceil().max(1.0);
    Some(n.min(f64::from(u32::MAX)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_consumer_that_never_waits_needs_no_more_workers() {
        // Two workers of 500/s, a consumer taking 1,000/s without waiting.
        assert_eq!(
            recommended_workers(10_000, 10 * S, Duration::ZERO, &[5_000, 5_000]),
            Some(2)
        );
    }

    #[test]
    fn a_consumer_waiting_half_the_time_needs_twice_the_workers() {
        assert_eq!(recommended_workers(10_000, 10 * S, 5 * S, &[5_000, 5_000]), Some(4));
        // A worker that delivered nothing (it joined late) does not count.
        assert_eq!(recommended_workers(10_000, 10 * S, 5 * S, &[5_000, 5_000, 0]), Some(4));
    }

    #[test]
    fn nothing_to_go_on_is_none() {
        assert_eq!(recommended_workers(0, 10 * S, Duration::ZERO, &[5_000]), None);
        assert_eq!(recommended_workers(100, 10 * S, 10 * S, &[5_000]), None);
        assert_eq!(recommended_workers(100, 10 * S, Duration::ZERO, &[0, 0]), None);
        assert_eq!(recommended_workers(100, Duration::ZERO, Duration::ZERO, &[1]), None);
    }
}
