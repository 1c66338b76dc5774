//! The one object that carries a `stoker.Loader`'s settings into Rust:
//! [`LoaderOptions`], a dict of plain values whose keys are
//! [`LoaderConfig`]'s fields, extracted by one derived `FromPyObject` and
//! turned into a `LoaderConfig` by [`LoaderOptions::into_config`], the
//! only place that parses and checks them.
//!
//! Why a dict and not a `#[pyclass]` or a PyO3 signature: the Loader's
//! keywords are the user's API and keep their defaults and their Python
//! checks (torch dtypes and devices, transform objects, `views`, `fields`)
//! in `loader.py`, which hands over only what those became: strings,
//! numbers, lists. A dict of them needs no second set of defaults here
//! (a `#[pyclass]` would, and a keyword it forgot would silently keep
//! one), and a key the Loader does not give fails every construction,
//! naming it. The dict's keys mirror `LoaderConfig`'s fields (a nested
//! dict for `record`, `device`, `local` and each entry of `fields`
//! and `views`), so a new Loader option is a field here, its line in
//! `into_config`, its key in `_stoker.pyi`'s `_LoaderOptions` (a
//! `TypedDict`, as `_EpochState` is for `start_epoch`) and the Python
//! keyword; `tests/python/options_check.py` checks that the stub, the
//! Loader's dict and this struct name the same keys. `LoaderConfig`'s
//! `inflight_per_worker`, `chunk_bytes`, `worker_patience`,
//! `max_attempts` and `tls` keep the library's defaults.

use std::time::Duration;

use pyo3::prelude::*;
use stoker_client::device::{DType, Layout, UploadSpec};
use stoker_client::{
    DeviceTarget, ErrorBudget, FieldKind, FieldSpec, FormatChoice, LastBatch, LoaderConfig, LocalWorkers, RecordFields,
    Secret, TransformSpec, ViewSpec,
};

use crate::{config_err, err, inprocess};

/// A `LoaderConfig` in plain values (`_LoaderOptions` in the stub); the
/// transform is its text (`train`, `eval` or JSON) and `image_size`.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct LoaderOptions {
    workers: Vec<String>,
    dataset: String,
    /// `auto`, `wds`, `tfrecord`, `recordio` or `parquet`.
    format: String,
    record: RecordFieldsOptions,
    fields: Vec<FieldOptions>,
    views: Vec<ViewOptions>,
    batch_size: usize,
    transform: String,
    image_size: Option<u32>,
    seed: u64,
    rank: u32,
    world_size: u32,
    prefetch: usize,
    /// `partial`, `drop` or `pad`.
    last_batch: String,
    deterministic: bool,
    aspect_ratio_grouping: bool,
    /// Seconds.
    progress_timeout: f64,
    /// Seconds.
    connect_timeout: f64,
    /// A count, a fraction or a percentage (`ErrorBudget`).
    max_errors: Option<String>,
    token: Option<String>,
    device: Option<DeviceOptions>,
    /// `PORT` or `HOST:PORT`.
    metrics_listen: Option<String>,
    /// Seconds.
    resolve_interval: f64,
    /// `IP:PORT`.
    dns_server: Option<String>,
    shared_memory: usize,
    local: Option<LocalOptions>,
}

/// `RecordFields`: the image and label fields of a record format.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct RecordFieldsOptions {
    image: Option<String>,
    label: Option<String>,
    label_offset: i64,
}

/// A `FieldSpec`, its kind by name.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct FieldOptions {
    name: String,
    source: String,
    kind: String,
    optional: bool,
}

/// A `ViewSpec`, its pipeline as canonical JSON.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct ViewOptions {
    name: String,
    transform: String,
}

/// A `DeviceTarget`: the CUDA device, and the upload's dtype and layout
/// by name, with the mean and std it normalises by.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct DeviceOptions {
    ordinal: usize,
    dtype: String,
    layout: String,
    mean: Option<[f32; 3]>,
    std: Option<[f32; 3]>,
}

/// `LocalWorkers`: the command that is `stoker` (`[python, -m, stoker]`),
/// the CPU worker's threads and the GPU worker's device.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct LocalOptions {
    command: Vec<String>,
    threads: Option<usize>,
    gpu: Option<usize>,
}

impl LoaderOptions {
    /// The `LoaderConfig`, or the `ConfigError` of the first setting that
    /// cannot work, named as the Loader's keyword.
    pub(crate) fn into_config(self) -> PyResult<LoaderConfig> {
        let spec = TransformSpec::parse(&self.transform, self.image_size).map_err(config_err)?;
        let mut config = LoaderConfig::new(self.workers, self.dataset, self.batch_size, spec);
        config.seed = self.seed;
        config.shared_memory = self.shared_memory;
        config.connect_timeout = seconds(
            self.connect_timeout,
            |t| t > 0.0,
            |t| format!("connect_timeout must be a positive number of seconds, got {t}"),
        )?;
        config.rank = self.rank;
        config.world_size = self.world_size;
        config.prefetch = self.prefetch;
        config.last_batch = self.last_batch.parse::<LastBatch>().map_err(config_err)?;
        config.deterministic = self.deterministic;
        config.aspect_ratio_grouping = self.aspect_ratio_grouping;
        config.format = self.format.parse::<FormatChoice>().map_err(config_err)?;
        if let Some(local) = self.local {
            if local.threads == Some(0) {
                return Err(config_err("local_threads must be at least 1"));
            }
            let mut how = LocalWorkers::new(local.command.into_iter().map(Into::into).collect());
            how.threads = local.threads;
            how.gpu = local.gpu;
            // The GPU worker in this process: its lanes share the trainer's
            // CUDA context instead of taking turns with it.
            how.in_process = Some(inprocess::local_start());
            config.local = Some(how);
        }
        config.record = RecordFields {
            image: self.record.image,
            label: self.record.label,
            label_offset: self.record.label_offset,
        };
        config.fields = self
            .fields
            .into_iter()
            .map(|f| {
                let kind = FieldKind::parse(&f.kind).map_err(config_err)?;
                Ok(FieldSpec {
                    optional: f.optional,
                    ..FieldSpec::new(&f.name, &f.source, kind)
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        stoker_client::validate_fields(&config.fields, None).map_err(config_err)?;
        config.views = self
            .views
            .into_iter()
            .map(|v| {
                let transform = TransformSpec::parse(&v.transform, None)
                    .map_err(|e| config_err(format!("view {:?}: {e}", v.name)))?;
                Ok(ViewSpec {
                    name: v.name,
                    transform,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        stoker_client::validate_views(&config.views, &config.fields).map_err(config_err)?;
        if let Some(device) = self.device {
            let dtype = device.dtype.parse::<DType>().map_err(config_err)?;
            let layout = device.layout.parse::<Layout>().map_err(config_err)?;
            let mut spec = UploadSpec::new(layout, dtype);
            if let (Some(mean), Some(std)) = (device.mean, device.std) {
                spec = spec.with_mean_std(mean, std);
            }
            spec.conversion().map_err(err)?;
            config.device = Some(DeviceTarget {
                ordinal: device.ordinal,
                spec,
            });
        }
        config.max_errors = self
            .max_errors
            .map(|m| m.parse::<ErrorBudget>())
            .transpose()
            .map_err(|e| config_err(format!("max_errors: {e}")))?;
        config.token = self.token.map(Secret::new);
        config.dns_server = self
            .dns_server
            .map(|s| s.parse())
            .transpose()
            .map_err(|e| config_err(format!("dns_server must be IP:PORT: {e}")))?;
        config.resolve_interval = seconds(
            self.resolve_interval,
            |t| t >= 0.1,
            |t| format!("resolve_interval must be at least 0.1 seconds, got {t}"),
        )?;
        config.metrics_listen = self
            .metrics_listen
            .as_deref()
            .map(stoker_client::metrics::listen_addr)
            .transpose()
            .map_err(|e| config_err(format!("metrics_port: {e}")))?;
        config.progress_timeout = seconds(
            self.progress_timeout,
            |t| t > 0.0,
            |t| format!("progress_timeout must be positive, got {t}"),
        )?;
        Ok(config)
    }
}

/// Seconds as a `Duration` when `valid` and finite, else the
/// `ConfigError` that `refusal` words. One too large for a `Duration` is
/// refused too, rather than panicking in `Duration::from_secs_f64`.
fn seconds(value: f64, valid: impl FnOnce(f64) -> bool, refusal: impl FnOnce(f64) -> String) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(value) {
        Ok(d) if value.is_finite() && valid(value) => Ok(d),
        _ => Err(config_err(refusal(value))),
    }
}
