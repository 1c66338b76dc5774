//! `stoker._stoker`: the Rust client (`stoker-client`) behind a small
//! Python class. The Python package (`python/stoker/__init__.py`) builds
//! the user-facing `stoker.Loader` on it: epochs, last-batch policy,
//! rank and world size, numpy or torch output. The Loader's settings
//! cross as one dict, `options.rs`'s `LoaderOptions`, which becomes the
//! client's `LoaderConfig` there.
//!
//! The client runs on its own tokio runtime; Python threads wait for a
//! batch with the GIL released and check for signals (Ctrl-C) every
//! 100 ms.

mod dlpack;
mod inprocess;
mod logs;
mod options;
mod state;
mod targets;

use std::sync::Mutex;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use stoker_client::{EpochState, EpochStream, EpochWatch, Loader, TransformSpec};

use crate::dlpack::DeviceTensor;
use crate::inprocess::InProcessWorker;
use crate::options::LoaderOptions;
use crate::state::{state_from_py, state_to_py};

create_exception!(
    stoker,
    StokerError,
    PyException,
    "A worker, dataset or configuration error, with its cause."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    StokerError::new_err(e.to_string())
}

/// `stoker.ConfigError` (a `StokerError` and a `ValueError`, defined in
/// Python): a setting that can never work, refused before any work.
fn config_err(e: impl std::fmt::Display) -> PyErr {
    let message = e.to_string();
    Python::attach(|py| {
        match py
            .import("stoker.errors")
            .and_then(|m| m.getattr("ConfigError"))
            .and_then(|cls| cls.call1((message.clone(),)))
        {
            Ok(value) => PyErr::from_value(value),
            Err(_) => PyValueError::new_err(message),
        }
    })
}

/// A client error as Python sees it: a configuration the workers or the
/// dataset refused is a `ConfigError`, the rest `StokerError`.
fn client_err(e: stoker_client::ClientError) -> PyErr {
    match e {
        stoker_client::ClientError::Config(_) => config_err(e),
        other => err(other),
    }
}

/// Runs `f`, a call into the client, turning a panic in it into a
/// `StokerError` that names `what` and the panic's message: no Rust panic
/// reaches Python as pyo3's `PanicException`, which `except Exception`
/// does not catch. (The client's own tasks catch theirs; this is the last
/// line, at the boundary.)
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".into());
        err(format!(
            "stoker failed while {what}: {message} (a bug in stoker; please report it)"
        ))
    })
}

/// How often a Python thread waiting on the client checks for signals
/// (Ctrl-C) and hands the client's log to `logging`.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Says, once per wait, at debug level, that the calling thread is now
/// waiting inside the client (where Ctrl-C is checked every
/// [`SIGNAL_CHECK`]), and hands it to `logging` at once: a wait that
/// looks like a hang can be told apart from one, and a test can tell when
/// its Ctrl-C will land in the wait.
fn say_waiting(py: Python<'_>, said: &mut bool, what: &str) {
    if !std::mem::replace(said, true) {
        tracing::debug!(target: "stoker::wait", "waiting for {what}; Ctrl-C interrupts the wait");
        logs::flush(py);
    }
}

/// One batch as Python receives it: uint8 NHWC pixels (bytes) or, when the
/// client uploads, a `DeviceTensor` for `torch.from_dlpack`; the images'
/// block (height, width) and each image's own (height, width) in it;
/// labels, keys, the batch's index in its epoch, how many of its last
/// samples are padding, each requested field's values (a list per field,
/// in the request's order; `None` where an optional field is absent), and
/// each view's (name, side, pixels).
type PyBatch = (
    Py<PyAny>,
    (u32, u32, Vec<(u32, u32)>),
    Vec<i64>,
    Vec<String>,
    u64,
    usize,
    Vec<Vec<Py<PyAny>>>,
    Vec<(String, u32, Py<PyAny>)>,
);

/// An epoch's report: samples, skipped, reassigned items, (key, reason) of
/// the first skips, batches, seconds waited, seconds elapsed, recommended
/// workers and (address, samples, samples left on the device) per worker.
type PyReport = (
    u64,
    u64,
    u64,
    Vec<(String, String)>,
    u64,
    f64,
    f64,
    Option<u32>,
    Vec<(String, u64, u64)>,
);

/// A connected client: `start_epoch`, then `next_batch` until `None`.
/// Every method takes `&self`, so that another thread may ask for `state`
/// or `report` while one waits in `next_batch` (a checkpoint thread, say).
#[pyclass(module = "stoker._stoker", frozen)]
struct Client {
    runtime: tokio::runtime::Runtime,
    loader: Loader,
    epoch: Mutex<EpochSlot>,
}

/// The epoch in progress. `next_batch` takes the stream out while it
/// waits; `watch` stays for `state` and `report`.
#[derive(Default)]
struct EpochSlot {
    stream: Option<EpochStream>,
    watch: Option<EpochWatch>,
    /// A `next_batch` holds the stream.
    waiting: bool,
    /// The state of an epoch stopped part-way, for `state()`.
    stopped: Option<EpochState>,
    /// Counts `start_epoch` calls, so that a stale iterator cannot stop a
    /// newer epoch, nor a stopped one come back.
    generation: u64,
}

impl Client {
    fn slot(&self) -> std::sync::MutexGuard<'_, EpochSlot> {
        self.epoch.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Client {
    /// Connects a loader configured by `options` (the Loader's settings,
    /// checked in `options.rs`), waiting for the workers in slices that
    /// Ctrl-C interrupts.
    #[new]
    fn new(py: Python<'_>, options: LoaderOptions) -> PyResult<Self> {
        logs::install();
        let config = options.into_config()?;
        // Receiving, checking and assembling take about 0.7 s of CPU per GB
        // (docs/benchmarks.md): 3 GB/s needs more than two cores. Four threads by
        // default (fewer on smaller hosts); STOKER_CLIENT_THREADS sets it.
        let threads = std::env::var("STOKER_CLIENT_THREADS")
            .ok()
            .map(|t| t.parse::<usize>().ok().filter(|&t| t > 0).ok_or(t))
            .transpose()
            .map_err(|t| config_err(format!("STOKER_CLIENT_THREADS must be a positive integer, not {t:?}")))?
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4)));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("stoker-client")
            .enable_all()
            .build()
            .map_err(|e| err(format!("cannot start the client runtime: {e}")))?;
        // Opening the upload makes the GPU's context current on this
        // thread: keep the caller's (torch's current device).
        // Polled on this thread in slices, so that Ctrl-C interrupts it
        // (dropping it stops any local workers it started) and the log
        // reaches Python while it waits.
        let uploading = config.device.is_some();
        let mut connecting = Box::pin(Loader::connect(config));
        let mut said = false;
        let loader = loop {
            let mut slice = || runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut connecting).await });
            let waited = py.detach(|| {
                no_panic("starting the loader", || {
                    if uploading {
                        stoker_client::device::keeping_current_context(slice)
                    } else {
                        slice()
                    }
                })
            });
            logs::flush(py);
            let waited = waited?;
            match waited {
                Ok(connected) => break connected.map_err(client_err)?,
                Err(_) => {
                    say_waiting(py, &mut said, "the workers to answer");
                    py.check_signals()?
                }
            }
        };
        Ok(Self {
            runtime,
            loader,
            epoch: Mutex::new(EpochSlot::default()),
        })
    }

    /// The local workers this client started (`"local"`): a dict each,
    /// with `address`, `role` (`cpu` or `gpu`), `pid` (this process's for
    /// the GPU worker, which runs in it; None while one is started again),
    /// `in_process` and `restarts`.
    fn local_workers<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.loader
            .local_workers()
            .into_iter()
            .map(|w| {
                let d = PyDict::new(py);
                d.set_item("address", w.addr)?;
                d.set_item("role", w.role)?;
                d.set_item("pid", w.pid)?;
                d.set_item("in_process", w.in_process)?;
                d.set_item("restarts", w.restarts)?;
                Ok(d)
            })
            .collect()
    }

    /// Whether batches arrive on the GPU (as `DeviceTensor`s): an upload
    /// was asked for and a usable GPU was found.
    fn uploads(&self) -> bool {
        self.loader.uploads()
    }

    /// Why an upload that was asked for is not used, if it is not.
    fn upload_error(&self) -> Option<String> {
        self.loader.upload_error().map(str::to_owned)
    }

    /// Batches per epoch, the same on every rank, when the dataset's index
    /// gives every shard's count; `None` otherwise.
    fn batches_per_epoch(&self) -> Option<u64> {
        self.loader.batches_per_epoch()
    }

    /// Starts streaming `epoch`, dropping an epoch still in progress; with
    /// `state` (from `state()`), resumes that epoch where it stopped.
    /// Returns the epoch's generation, for `stop_epoch`.
    #[pyo3(signature = (epoch, state=None))]
    fn start_epoch(&self, epoch: u64, state: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
        {
            let mut slot = self.slot();
            slot.stream = None;
            // An old epoch's `next_batch` still waiting drops its stream
            // when it sees the generation moved on.
            slot.generation += 1;
        }
        let _guard = self.runtime.enter();
        let stream = match state {
            None => self.loader.epoch(epoch),
            Some(d) => {
                let state = state_from_py(d)?;
                if state.epoch != epoch {
                    return Err(err(format!("the saved state is of epoch {}, not {epoch}", state.epoch)));
                }
                self.loader.resume(&state)
            }
        };
        let stream = stream.map_err(err)?;
        let mut slot = self.slot();
        slot.watch = Some(stream.watch());
        slot.stream = Some(stream);
        slot.waiting = false;
        slot.stopped = None;
        Ok(slot.generation)
    }

    /// Where the consumer is in the current (or stopped) epoch, as a dict
    /// of plain values; `None` when no epoch was started.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let state = {
            let slot = self.slot();
            match (&slot.stopped, &slot.watch) {
                (Some(stopped), _) => Some(stopped.clone()),
                (None, Some(watch)) => Some(watch.state()),
                (None, None) => None,
            }
        };
        state.map(|s| state_to_py(py, &s)).transpose()
    }

    /// Stops the epoch of `generation` if it is still the one in
    /// progress; `state()` keeps its position.
    fn stop_epoch(&self, generation: u64) {
        let mut slot = self.slot();
        if generation != slot.generation || slot.stopped.is_some() {
            return;
        }
        slot.stopped = slot.watch.as_ref().map(EpochWatch::state);
        // A `next_batch` waiting now drops the stream when it returns.
        slot.stream = None;
    }

    /// The next batch of the epoch, or `None` once it is complete.
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        let (mut stream, generation) = {
            let mut slot = self.slot();
            if slot.waiting {
                return Err(err("another thread is already waiting for a batch of this epoch"));
            }
            let Some(stream) = slot.stream.take() else {
                return Err(err("no epoch in progress: call start_epoch first"));
            };
            slot.waiting = true;
            (stream, slot.generation)
        };
        let runtime = &self.runtime;
        let mut said = false;
        let next = loop {
            let waited = py.detach(|| {
                no_panic("waiting for a batch", || {
                    runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, stream.next_batch()).await })
                })
            });
            logs::flush(py);
            match waited {
                Err(e) => break Err(e),
                Ok(Ok(next)) => break Ok(next),
                // Lets Ctrl-C raise KeyboardInterrupt while waiting.
                Ok(Err(_)) => {
                    say_waiting(py, &mut said, "the next batch");
                    if let Err(e) = py.check_signals() {
                        break Err(e);
                    }
                }
            }
        };
        if matches!(next, Ok(Some(Ok(_)))) {
            let _guard = runtime.enter();
            self.loader.start_ahead(&stream);
        }
        {
            // The stream goes back unless the epoch was stopped or replaced
            // meanwhile. The finished stream stays too, yielding nothing.
            let mut slot = self.slot();
            if slot.generation == generation {
                slot.waiting = false;
                if slot.stopped.is_none() {
                    slot.stream = Some(stream);
                }
            }
        }
        let next = next?;
        // The finished stream stays, for `report`; it yields nothing more.
        match next {
            None => Ok(None),
            Some(Err(e)) => Err(err(e)),
            Some(Ok(mut batch)) => {
                let fields = fields_to_py(py, &batch.fields, self.loader.config().fields.len())?;
                let views = std::mem::take(&mut batch.views)
                    .into_iter()
                    .map(|v| (v.name, v.size, PyBytes::new(py, &v.pixels).into_any().unbind()))
                    .collect();
                Ok(Some((
                    match batch.device.take() {
                        Some(device) => Py::new(py, DeviceTensor::new(device))?.into_any(),
                        None => PyBytes::new(py, &batch.pixels).into_any().unbind(),
                    },
                    (batch.height, batch.width, std::mem::take(&mut batch.image_sizes)),
                    batch.labels,
                    batch.keys,
                    batch.index,
                    batch.padded,
                    fields,
                    views,
                )))
            }
        }
    }

    /// The epoch started ahead of the loop's next iteration, if any.
    fn epoch_ahead(&self) -> Option<u64> {
        self.loader.epoch_ahead()
    }

    /// The current (or last) epoch so far: (samples, skipped, reassigned
    /// items, [(key, reason)] of the first skips).
    fn report(&self) -> Option<PyReport> {
        self.slot().watch.as_ref().map(|w| {
            let r = w.report();
            (
                r.samples,
                r.skipped,
                r.retries,
                r.skip_reasons,
                r.batches,
                r.wait.as_secs_f64(),
                r.elapsed.as_secs_f64(),
                r.recommended_workers,
                r.workers
                    .into_iter()
                    .map(|w| (w.addr, w.samples, w.device_samples))
                    .collect(),
            )
        })
    }

    /// `stoker doctor`'s measurements (`Loader::doctor`) as a dict:
    /// `stages` (a dict per stage: `stage`, `worker`, `samples`, `bytes`,
    /// `seconds`, `images_per_sec`), `bottleneck`, `summary`,
    /// `target_rate`, `workers`, `workers_for_target`.
    #[pyo3(signature = (samples, seconds, target_rate=None))]
    fn doctor<'py>(
        &self,
        py: Python<'py>,
        samples: u64,
        seconds: f64,
        target_rate: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(err(format!("seconds must be a non-negative number, got {seconds}")));
        }
        // Polled in slices, as the constructor is: Ctrl-C interrupts it.
        let mut measuring = Box::pin(self.loader.doctor(samples.max(1), seconds, target_rate));
        let d = loop {
            let waited = py.detach(|| {
                self.runtime
                    .block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut measuring).await })
            });
            logs::flush(py);
            match waited {
                Ok(done) => break done.map_err(err)?,
                Err(_) => py.check_signals()?,
            }
        };
        let stages = PyList::empty(py);
        for s in &d.stages {
            let stage = PyDict::new(py);
            stage.set_item("stage", s.stage.as_str())?;
            stage.set_item("worker", s.worker.clone())?;
            stage.set_item("samples", s.samples)?;
            stage.set_item("bytes", s.bytes)?;
            stage.set_item("seconds", s.seconds)?;
            stage.set_item("images_per_sec", s.images_per_sec())?;
            stages.append(stage)?;
        }
        let out = PyDict::new(py);
        out.set_item("stages", stages)?;
        out.set_item("bottleneck", d.bottleneck.as_str())?;
        out.set_item("summary", d.summary)?;
        out.set_item("target_rate", d.target_rate)?;
        out.set_item("workers", d.workers)?;
        out.set_item("workers_for_target", d.workers_for_target)?;
        Ok(out)
    }
}

/// A batch's field values as Python lists, one per field: int, float,
/// lists of them, str, the JSON text (parsed in Python), bytes, and an
/// array as `(dtype, shape, bytes)`.
fn fields_to_py(py: Python<'_>, rows: &[stoker_client::Fields], fields: usize) -> PyResult<Vec<Vec<Py<PyAny>>>> {
    use stoker_client::FieldValue as V;
    let mut out: Vec<Vec<Py<PyAny>>> = (0..fields).map(|_| Vec::with_capacity(rows.len())).collect();
    for row in rows {
        for (j, column) in out.iter_mut().enumerate() {
            let value = match row.get(j).and_then(Option::as_ref) {
                None => py.None(),
                Some(V::Int(i)) => i.into_pyobject(py)?.into_any().unbind(),
                Some(V::Float(f)) => f.into_pyobject(py)?.into_any().unbind(),
                Some(V::IntList(v)) => PyList::new(py, v)?.into_any().unbind(),
                Some(V::FloatList(v)) => PyList::new(py, v)?.into_any().unbind(),
                Some(V::Text(s) | V::Json(s)) => s.into_pyobject(py)?.into_any().unbind(),
                Some(V::Bytes(b) | V::Image(b)) => PyBytes::new(py, b).into_any().unbind(),
                Some(V::Array(a)) => (a.dtype.as_str(), a.shape.clone(), PyBytes::new(py, &a.data))
                    .into_pyobject(py)?
                    .into_any()
                    .unbind(),
                Some(V::Targets(t)) => targets::targets_to_py(py, t)?.into_any().unbind(),
            };
            column.push(value);
        }
    }
    Ok(out)
}

/// Validates a transform spec (`train`, `eval` or JSON) as a worker would:
/// returns its output side (`None` when it keeps each image's own size)
/// and its canonical JSON, or raises `ValueError` naming the op and the
/// argument.
#[pyfunction]
#[pyo3(signature = (transform, image_size=None))]
fn check_transform(transform: &str, image_size: Option<u32>) -> PyResult<(Option<u32>, String)> {
    let spec = TransformSpec::parse(transform, image_size).map_err(config_err)?;
    Ok((spec.size.side(), spec.to_json()))
}

/// The `stoker` command line, in this process: `argv` with the program's
/// name first; returns the exit code. The GIL is released while it runs.
/// `self_command` runs the command line again in a new process (`[python,
/// -m, stoker]`), for the local workers of `stream --workers local`.
#[pyfunction]
#[pyo3(signature = (argv, self_command=None))]
fn main(py: Python<'_>, argv: Vec<String>, self_command: Option<Vec<String>>) -> i32 {
    if let Some(c) = self_command {
        stoker_cli::set_self_command(c.into_iter().map(Into::into).collect());
    }
    py.detach(|| stoker_cli::main_with(argv))
}

/// A field's `SOURCE[:KIND]`, with `?` after the source or at the end for
/// an optional one (`"txt?"`, `"txt?:bytes"`, `"txt:bytes?"`), as the
/// command line's `--field NAME=...` reads it: (source, kind, optional).
#[pyfunction]
fn parse_field(name: &str, text: &str) -> PyResult<(String, String, bool)> {
    let f = stoker_client::FieldSpec::parse(&format!("{name}={text}")).map_err(config_err)?;
    Ok((f.source, f.kind.to_string(), f.optional))
}

/// Every transform op's schema, from the ops' own declarations: a list of
/// `{"name", "doc", "origin", "role", "args": [{"name", "kind",
/// "python_type", "python_value", "required", "default", "doc"}]}`, in the
/// registry's order. `stoker.transforms` builds its classes from it, and
/// stubgen.py their stubs.
#[pyfunction]
fn op_schema(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let text = stoker_core::transform::catalog::schema_json().to_string();
    py.import("json")?.call_method1("loads", (text,))
}

/// Every argument kind of the op schema, from core's one table of them
/// (`ArgKind`): a list of `{"name", "accepts", "python_type",
/// "python_value"}`. The tests check that `stoker/_kinds.py` has exactly
/// one converter for each and none for a kind that is gone.
#[pyfunction]
fn arg_kinds(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let text = stoker_core::transform::catalog::kinds_json().to_string();
    py.import("json")?.call_method1("loads", (text,))
}

/// The field kinds, from the workers' field-kind table: `[(name,
/// [aliases])]` in wire order. `stoker.Field.KINDS` is built from it.
#[pyfunction]
fn field_kinds() -> Vec<(&'static str, Vec<&'static str>)> {
    stoker_client::FieldKind::ALL
        .iter()
        .map(|k| (k.as_str(), k.aliases().to_vec()))
        .collect()
}

#[pymodule]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_class::<Client>()?;
    m.add_class::<InProcessWorker>()?;
    m.add_function(wrap_pyfunction!(check_transform, m)?)?;
    m.add_function(wrap_pyfunction!(parse_field, m)?)?;
    m.add_function(wrap_pyfunction!(op_schema, m)?)?;
    m.add_function(wrap_pyfunction!(arg_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(field_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(targets::follow_targets, m)?)?;
    m.add_function(wrap_pyfunction!(targets::draw_outline, m)?)?;
    m.add_class::<DeviceTensor>()?;
    m.add("StokerError", m.py().get_type::<StokerError>())?;
    Ok(())
}
