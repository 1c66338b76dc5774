//! What a scrape of the worker's `/metrics` reads: the registry of its
//! [`WorkerMetrics`](crate::metrics::WorkerMetrics) and a snapshot of the
//! pipeline's counters, budget and storage at that moment. Above both
//! `metrics` (what the pipeline updates) and `pipeline` (whose context it
//! reads), so that neither imports the other.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use stoker_metrics::Registry;

use crate::metrics::PREFIX;
use crate::pipeline::WorkerContext;

/// The registry a worker serves: its [`WorkerMetrics`] and a [`Snapshot`]
/// of its counters.
pub fn registry(ctx: &Arc<WorkerContext>) -> Registry {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register(
        "stage_seconds",
        "Seconds one sample spent in a stage of the worker (a batch for gpu_batch, a chunk for send)",
        ctx.metrics.stage_seconds.clone(),
    );
    registry.register(
        "skipped",
        "Samples skipped, by kind of problem",
        ctx.metrics.skipped.clone(),
    );
    registry.register_collector(Box::new(Snapshot(Arc::clone(ctx))));
    registry
}

/// The worker's own counters and gauges, read at each scrape.
#[derive(Debug)]
struct Snapshot(Arc<WorkerContext>);

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// A metric with one label of a few values.
fn labelled<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    label: &'static str,
    values: impl IntoIterator<Item = (&'static str, M)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (value, metric) in values {
        metric.encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

fn as_gauge(v: u64) -> ConstGauge {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let ctx = &self.0;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let gpu = ctx.gpu.as_ref();
        let gpu_samples = gpu.map_or(0, |g| load(&g.counters.images));
        labelled(
            &mut encoder,
            "samples",
            "Samples decoded and transformed, by where: the CPU pool or the GPU lanes",
            MetricType::Counter,
            "path",
            [
                ("cpu", ConstCounter::new(load(&ctx.counters.cpu_samples))),
                ("gpu", ConstCounter::new(gpu_samples)),
            ],
        )?;
        counter(
            &mut encoder,
            "samples_sent",
            "Samples sent to clients",
            load(&ctx.counters.samples),
        )?;
        counter(
            &mut encoder,
            "bytes_sent",
            "Pixel bytes sent to clients",
            load(&ctx.counters.bytes),
        )?;
        counter(&mut encoder, "items", "Work items finished", load(&ctx.counters.items))?;
        let (clients, items) = ctx.clients.counts();
        gauge(
            &mut encoder,
            "items_in_flight",
            "Work items in progress",
            i64::try_from(items).unwrap_or(i64::MAX),
        )?;
        gauge(
            &mut encoder,
            "clients",
            "Client hosts with work items in progress",
            i64::try_from(clients).unwrap_or(i64::MAX),
        )?;
        labelled(
            &mut encoder,
            "memory_budget_bytes",
            "The worker's budget for sample data: used now, and its limit",
            MetricType::Gauge,
            "state",
            [
                ("used", as_gauge(ctx.budget.used())),
                ("limit", as_gauge(ctx.budget.capacity())),
            ],
        )?;
        let storage = ctx.storage.stats();
        counter(
            &mut encoder,
            "storage_retries",
            "S3 requests tried again after a failed attempt",
            load(&storage.retries),
        )?;
        counter(
            &mut encoder,
            "storage_read_bytes",
            "Bytes read from storage: shard bodies (whole, or the byte ranges of indexed sample ranges) and indexes",
            load(&storage.read_bytes),
        )?;
        counter(
            &mut encoder,
            "storage_resumes",
            "Shard bodies resumed with a ranged read after a cut or stall",
            load(&storage.resumes),
        )?;
        if let Some(gpu) = gpu {
            counter(
                &mut encoder,
                "cpu_jpegs",
                "JPEGs the CPU pool took from the GPU lanes' backlog",
                load(&ctx.counters.cpu_jpegs),
            )?;
            counter(
                &mut encoder,
                "gpu_handed_to_cpu",
                "Samples the GPU lanes handed to the CPU path (PNG, grey or CMYK JPEG, or a failed decode)",
                load(&gpu.counters.to_cpu),
            )?;
            labelled(
                &mut encoder,
                "gpu_decodes",
                "Images the GPU lanes decoded, by how: in a batch (the hardware JPEG engine, when the GPU has one) or alone on nvJPEG's CUDA backend (progressive JPEGs)",
                MetricType::Counter,
                "path",
                [
                    ("batched", ConstCounter::new(load(&gpu.counters.decoded_batched))),
                    ("single", ConstCounter::new(load(&gpu.counters.decoded_single))),
                ],
            )?;
            counter(
                &mut encoder,
                "gpu_batches",
                "Batches the GPU lanes ran",
                load(&gpu.counters.batches),
            )?;
            // A failed read leaves the series out of this scrape rather
            // than reporting a false zero.
            if let Ok(memory) = gpu.memory() {
                labelled(
                    &mut encoder,
                    "gpu_memory_bytes",
                    "Device memory the worker's pool holds, and the part in use",
                    MetricType::Gauge,
                    "state",
                    [
                        ("reserved", as_gauge(memory.reserved)),
                        ("in_use", as_gauge(memory.used)),
                    ],
                )?;
            }
        }
        Ok(())
    }
}
