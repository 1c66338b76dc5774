//! The worker's Prometheus metrics, served by `stoker worker
//! --metrics-listen` (see `stoker-metrics` for the endpoint).
//!
//! Two kinds of source, one home each:
//! - what the worker already counts for `Info` and its logs (samples, bytes,
//!   items, the GPU/CPU split, the memory budget, storage retries and
//!   resumes, GPU memory) is read at scrape time by [`Snapshot`], so no
//!   figure is counted twice;
//! - what only metrics need (stage latency histograms, skips by kind) lives
//!   in [`WorkerMetrics`], which the pipeline updates in place: latency of
//!   the stages `read`, `decode`, `transform`, `gpu_batch` and `send`.
//!
//! The collector and the registry a worker serves are `scrape.rs`, above
//! both this module and `pipeline`.
//!
//! Names follow Prometheus conventions: the `stoker_worker_` prefix, base
//! units, `_total` on counters (added by the encoder), and labels with a
//! few fixed values (never a key or a shard).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use stoker_metrics::STAGE_SECONDS_BUCKETS;

use crate::outcome::SkipKind;

/// The prefix of every worker metric.
pub const PREFIX: &str = "stoker_worker";

/// A stage of the worker's pipeline, the `stage` label of
/// `stoker_worker_stage_seconds`. The discriminants index `Stage::ALL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Reading one sample's bytes from the shard (waiting on storage).
    Read,
    /// Decoding one image on the CPU.
    Decode,
    /// Running one image's transform on the CPU.
    Transform,
    /// One GPU batch, from queueing it to the lanes to its results (decode
    /// and transform of every image in it).
    GpuBatch,
    /// Handing one chunk to the gRPC stream (waits while the client or the
    /// network is slower than the worker).
    Send,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Read,
        Stage::Decode,
        Stage::Transform,
        Stage::GpuBatch,
        Stage::Send,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Decode => "decode",
            Stage::Transform => "transform",
            Stage::GpuBatch => "gpu_batch",
            Stage::Send => "send",
        }
    }
}

type Label = [(&'static str, &'static str); 1];

fn stage_histogram() -> Histogram {
    Histogram::new(STAGE_SECONDS_BUCKETS)
}

/// The metrics the pipeline updates in place. Cheap to clone (the
/// metrics are shared).
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    pub(crate) stage_seconds: Family<Label, Histogram, fn() -> Histogram>,
    /// The family's histograms, in `Stage::ALL` order: the pipeline
    /// observes every sample, so it skips the family's lookup.
    stages: [Histogram; Stage::ALL.len()],
    pub(crate) skipped: Family<Label, Counter>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        let stage_seconds: Family<Label, Histogram, fn() -> Histogram> = Family::new_with_constructor(stage_histogram);
        // Every label value exists from the start, at zero, so that rates
        // and alerts see a series before the first event.
        let stages = Stage::ALL.map(|stage| stage_seconds.get_or_create(&[("stage", stage.as_str())]).clone());
        let metrics = Self {
            stage_seconds,
            stages,
            skipped: Family::default(),
        };
        for kind in SkipKind::ALL {
            let _ = metrics.skipped.get_or_create(&[("reason", kind.as_str())]);
        }
        metrics
    }
}

impl WorkerMetrics {
    pub fn observe(&self, stage: Stage, elapsed: Duration) {
        self.stages[stage as usize].observe(elapsed.as_secs_f64());
    }

    /// Runs `f`, recording how long it took under `stage`.
    pub fn time<T>(&self, stage: Stage, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.observe(stage, start.elapsed());
        out
    }

    pub fn skipped(&self, kind: SkipKind) {
        self.skipped.get_or_create(&[("reason", kind.as_str())]).inc();
    }

    /// Skips of `kind` counted so far.
    #[cfg(test)]
    pub(crate) fn skips(&self, kind: SkipKind) -> u64 {
        self.skipped.get_or_create(&[("reason", kind.as_str())]).get()
    }
}

/// Clients with work items in progress, by address.
#[derive(Debug, Default)]
pub struct Clients {
    active: Mutex<std::collections::HashMap<Option<IpAddr>, usize>>,
}

/// One work item in progress for a client, until dropped.
#[derive(Debug)]
pub struct ClientItem {
    clients: Arc<Clients>,
    addr: Option<IpAddr>,
}

impl Clients {
    /// Counts an item of the client at `addr` until the guard is dropped.
    pub fn enter(self: &Arc<Self>, addr: Option<IpAddr>) -> ClientItem {
        *self.lock().entry(addr).or_default() += 1;
        ClientItem {
            clients: Arc::clone(self),
            addr,
        }
    }

    /// (distinct clients, items) in progress.
    pub fn counts(&self) -> (usize, usize) {
        let active = self.lock();
        (active.len(), active.values().sum())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Option<IpAddr>, usize>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ClientItem {
    fn drop(&mut self) {
        let mut active = self.clients.lock();
        if let Some(n) = active.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                active.remove(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_index_their_place_in_all() {
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            assert_eq!(stage as usize, i, "{stage:?}");
        }
    }

    #[test]
    fn clients_are_counted_while_they_have_items() {
        let clients = Arc::new(Clients::default());
        let a = Some("10.0.0.1".parse().unwrap());
        let b = Some("10.0.0.2".parse().unwrap());
        let first = clients.enter(a);
        let second = clients.enter(a);
        let other = clients.enter(b);
        assert_eq!(clients.counts(), (2, 3));
        drop(first);
        drop(other);
        assert_eq!(clients.counts(), (1, 1));
        drop(second);
        assert_eq!(clients.counts(), (0, 0));
    }

    #[test]
    fn every_stage_and_skip_kind_is_exposed_from_the_start() {
        let metrics = WorkerMetrics::default();
        metrics.observe(Stage::Decode, Duration::from_millis(3));
        metrics.skipped(SkipKind::Decode);
        let mut registry = stoker_metrics::Registry::with_prefix(PREFIX);
        registry.register("stage_seconds", "stages", metrics.stage_seconds.clone());
        registry.register("skipped", "skips", metrics.skipped.clone());
        let text = stoker_metrics::render(&registry);
        for stage in Stage::ALL {
            let line = format!("stoker_worker_stage_seconds_count{{stage=\"{}\"}}", stage.as_str());
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        assert!(
            text.contains("stoker_worker_stage_seconds_count{stage=\"decode\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("stoker_worker_skipped_total{reason=\"decode\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("stoker_worker_skipped_total{reason=\"memory\"} 0"),
            "{text}"
        );
    }
}
