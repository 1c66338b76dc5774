//! `stoker._stoker`: the Rust client (`stoker-client`) behind a small
//! Python class. The Python package (`python/stoker/__init__.py`) builds
//! the user-facing `stoker.Loader` on it: epochs, last-batch policy,
//! rank and world size, numpy or torch output.
//!
//! The client runs on its own tokio runtime; Python threads wait for a
//! batch with the GIL released and check for signals (Ctrl-C) every
//! 200 ms.

use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use stoker_client::{EpochStream, ErrorBudget, Loader, LoaderConfig, Secret, TransformSpec};

create_exception!(
    stoker,
    StokerError,
    PyException,
    "A worker, dataset or configuration error, with its cause."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    StokerError::new_err(e.to_string())
}

/// One batch as Python receives it: uint8 NHWC pixels (bytes), the side
/// length, labels, keys, and the batch's index in its epoch.
type PyBatch = (Py<PyBytes>, u32, Vec<i64>, Vec<String>, u64);

/// An epoch's report: samples, skipped, reassigned items, and (key, reason)
/// of the first skips.
type PyReport = (u64, u64, u64, Vec<(String, String)>);

/// A connected client: `start_epoch`, then `next_batch` until `None`.
#[pyclass(module = "stoker._stoker")]
struct Client {
    runtime: tokio::runtime::Runtime,
    loader: Loader,
    stream: Option<EpochStream>,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (
        workers, dataset, batch_size, image_size, transform, seed, rank, world_size,
        prefetch, drop_last, max_errors=None, token=None, progress_timeout=60.0
    ))]
    #[allow(clippy::too_many_arguments, reason = "mirrors the Python constructor's keywords")]
    fn new(
        py: Python<'_>,
        workers: Vec<String>,
        dataset: String,
        batch_size: usize,
        image_size: u32,
        transform: &str,
        seed: u64,
        rank: u32,
        world_size: u32,
        prefetch: usize,
        drop_last: bool,
        max_errors: Option<&str>,
        token: Option<String>,
        progress_timeout: f64,
    ) -> PyResult<Self> {
        let spec = TransformSpec::preset(transform, image_size).map_err(err)?;
        let mut config = LoaderConfig::new(workers, dataset, batch_size, spec);
        config.seed = seed;
        config.rank = rank;
        config.world_size = world_size;
        config.prefetch = prefetch;
        config.drop_last = drop_last;
        config.max_errors = max_errors
            .map(|m| m.parse::<ErrorBudget>())
            .transpose()
            .map_err(|e| err(format!("max_errors: {e}")))?;
        config.token = token.map(Secret::new);
        if !(progress_timeout.is_finite() && progress_timeout > 0.0) {
            return Err(err(format!(
                "progress_timeout must be positive, got {progress_timeout}"
            )));
        }
        config.progress_timeout = Duration::from_secs_f64(progress_timeout);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stoker-client")
            .enable_all()
            .build()
            .map_err(|e| err(format!("cannot start the client runtime: {e}")))?;
        let loader = py.detach(|| runtime.block_on(Loader::connect(config))).map_err(err)?;
        Ok(Self {
            runtime,
            loader,
            stream: None,
        })
    }

    /// Samples in this rank's share of `epoch`, when the dataset's index
    /// gives every shard's count; `None` otherwise.
    fn epoch_samples(&self, epoch: u64) -> PyResult<Option<u64>> {
        let plan = self.loader.plan(epoch).map_err(err)?;
        Ok(plan.shards.iter().map(|s| s.samples).sum())
    }

    /// Starts streaming `epoch`, dropping an epoch still in progress.
    fn start_epoch(&mut self, epoch: u64) -> PyResult<()> {
        self.stream = None;
        let _guard = self.runtime.enter();
        self.stream = Some(self.loader.epoch(epoch).map_err(err)?);
        Ok(())
    }

    /// Stops the epoch in progress, if any.
    fn stop_epoch(&mut self) {
        self.stream = None;
    }

    /// The next batch of the epoch, or `None` once it is complete.
    fn next_batch(&mut self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        let runtime = &self.runtime;
        let Some(stream) = self.stream.as_mut() else {
            return Err(err("no epoch in progress: call start_epoch first"));
        };
        let next = loop {
            let waited = py.detach(|| {
                runtime.block_on(async { tokio::time::timeout(Duration::from_millis(200), stream.next_batch()).await })
            });
            match waited {
                Ok(next) => break next,
                // Lets Ctrl-C raise KeyboardInterrupt while waiting.
                Err(_) => py.check_signals()?,
            }
        };
        // The finished stream stays, for `report`; it yields nothing more.
        match next {
            None => Ok(None),
            Some(Err(e)) => Err(err(e)),
            Some(Ok(batch)) => Ok(Some((
                PyBytes::new(py, &batch.pixels).unbind(),
                batch.size,
                batch.labels,
                batch.keys,
                batch.index,
            ))),
        }
    }

    /// The current (or last) epoch so far: (samples, skipped, reassigned
    /// items, [(key, reason)] of the first skips).
    fn report(&self) -> Option<PyReport> {
        self.stream.as_ref().map(|s| {
            let r = s.report();
            (r.samples, r.skipped, r.retries, r.skip_reasons)
        })
    }
}

#[pymodule]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add("StokerError", m.py().get_type::<StokerError>())?;
    Ok(())
}
