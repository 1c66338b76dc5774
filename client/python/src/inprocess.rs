//! `InProcessWorker`: a worker inside the training process. On the
//! training GPU it shares the trainer's primary CUDA context, where
//! separate processes would be time-sliced. The loader's `"local"` workers
//! start their GPU worker the same way ([`local_start`]).

use std::sync::Mutex;

use pyo3::prelude::*;

use crate::{SIGNAL_CHECK, err, logs};

/// A worker inside this process, started with `stoker worker`'s arguments.
/// On the training GPU it shares the trainer's CUDA context, so its work
/// overlaps the training step's instead of taking turns with it.
#[pyclass(module = "stoker._stoker", frozen)]
pub(crate) struct InProcessWorker {
    addr: String,
    worker: Mutex<Option<stoker_cli::embedded::EmbeddedWorker>>,
}

#[pymethods]
impl InProcessWorker {
    #[new]
    fn new(py: Python<'_>, args: Vec<String>) -> PyResult<Self> {
        logs::install();
        // Started on a thread of its own so that Ctrl-C interrupts the
        // wait; a worker that starts after the caller gave up is stopped.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("stoker-worker-start".to_owned())
            .spawn(move || {
                if let Err(std::sync::mpsc::SendError(Ok(abandoned))) =
                    tx.send(stoker_cli::embedded::EmbeddedWorker::start(args))
                {
                    abandoned.detach();
                }
            })
            .map_err(|e| err(format!("in-process worker: cannot start a thread: {e}")))?;
        let mut rx = rx;
        let started = loop {
            let (back, waited) = py.detach(move || {
                let waited = rx.recv_timeout(SIGNAL_CHECK);
                (rx, waited)
            });
            rx = back;
            logs::flush(py);
            match waited {
                Ok(started) => break started,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(err("in-process worker: its start-up thread ended without an answer"));
                }
            }
        };
        let worker = started.map_err(|e| err(format!("in-process worker: {e:#}")))?;
        Ok(Self {
            addr: worker.addr().to_string(),
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Where it listens (`HOST:PORT`).
    #[getter]
    fn address(&self) -> String {
        self.addr.clone()
    }

    /// Stops it, draining items in flight for its grace period. Ctrl-C
    /// interrupts the wait (within 200 ms); the worker then drains on, and
    /// another `stop()` waits for it again.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let mut slot = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        let Some(worker) = slot.as_mut() else {
            return Ok(());
        };
        worker.request_stop();
        while !worker.is_finished() {
            py.detach(|| std::thread::sleep(SIGNAL_CHECK));
            logs::flush(py);
            py.check_signals()?;
        }
        match slot.take() {
            Some(w) => py
                .detach(|| w.stop())
                .map_err(|e| err(format!("in-process worker {}: {e:#}", self.addr))),
            None => Ok(()),
        }
    }
}

/// How the loader's `"local"` workers start their GPU worker in this
/// process: `stoker_cli`'s embedded worker, whose start-up error or panic
/// comes back as the loader's error.
pub(crate) fn local_start() -> stoker_client::InProcessStart {
    stoker_client::InProcessStart(std::sync::Arc::new(|args: Vec<String>| {
        let started = std::panic::catch_unwind(|| stoker_cli::embedded::EmbeddedWorker::start(args))
            .map_err(|_| "the worker panicked while starting".to_owned())?;
        let worker = started.map_err(|e| format!("{e:#}"))?;
        Ok(Box::new(Local(worker)) as Box<dyn stoker_client::InProcessWorker>)
    }))
}

/// A local GPU worker in this process; dropped with its loader's fleet,
/// which stops it and waits for it (it has no grace period).
struct Local(stoker_cli::embedded::EmbeddedWorker);

impl stoker_client::InProcessWorker for Local {
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for InProcessWorker {
    /// Collected without `stop()`: asked to stop, left to drain on its own
    /// thread, never waited for with the GIL held.
    fn drop(&mut self) {
        if let Some(w) = self.worker.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            w.detach();
        }
    }
}
