//! The client's log, in Python's `logging`: the `tracing` events the Rust
//! code emits (skipped samples with their reasons, failed or set-aside
//! workers, reassigned items, local workers that died) go to the `stoker`
//! logger, so that nothing reaches a Python user only as silence.
//!
//! Events happen on the client's threads, which must never wait for the
//! GIL (the thread holding it may be waiting for them). They go into a
//! bounded queue instead, and the Python thread that waits on the loader
//! (for a batch, for the constructor) hands them to `logging` between its
//! waits. `STOKER_LOG` filters them as it does the command line's log
//! (WARNING and above by default, less an in-process worker's skip
//! summaries). Installed ([`install`]) when a client or an in-process
//! worker is made, never by `python -m stoker`, which logs to stderr as
//! the binary does.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Records held for Python at most; older ones are counted and dropped.
const CAPACITY: usize = 4096;

/// (Python level, logger suffix, message) waiting for a Python thread.
static QUEUE: Mutex<VecDeque<(u8, String)>> = Mutex::new(VecDeque::new());
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Sends the process's `tracing` events to the queue. Called when a
/// client or an in-process worker is made (not on import: `python -m
/// stoker` logs to stderr as the binary does); later calls do nothing,
/// and neither does one where another subscriber is already installed.
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Not a worker's skip summaries (`stoker_skips`) by default: a
        // worker in this process serves this process's loader, which
        // reports each skip it receives once, as local worker processes
        // are told (`local.rs`).
        let filter = EnvFilter::try_from_env("STOKER_LOG").unwrap_or_else(|_| EnvFilter::new("warn,stoker_skips=off"));
        let _ = tracing_subscriber::registry()
            .with(ToPython.with_filter(filter))
            .try_init();
    });
}

/// Hands the queued records to the `stoker` logger. Needs the GIL; a
/// failing `logging` call is [`report`]ed.
pub fn flush(py: Python<'_>) {
    let records: Vec<(u8, String)> = {
        let mut q = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_empty() && DROPPED.load(Ordering::Relaxed) == 0 {
            return;
        }
        q.drain(..).collect()
    };
    let logger = match py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("stoker",)))
    {
        Ok(l) => l,
        Err(e) => return report(py, e),
    };
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        let message = format!("{dropped} log records were dropped: the client logged faster than they were read");
        if let Err(e) = logger.call_method1("log", (30u8, message)) {
            report(py, e);
        }
    }
    for (level, message) in records {
        if let Err(e) = logger.call_method1("log", (level, message)) {
            report(py, e);
        }
    }
}

/// A failed `logging` call. Ctrl-C that lands while a handler runs raises
/// KeyboardInterrupt there, and reporting it as unraisable would lose it
/// (the wait would go on to its timeout): it is armed again
/// (`_thread.interrupt_main`), so the wait's next signal check raises it.
/// Anything else is reported as Python reports unraisable errors.
fn report(py: Python<'_>, e: PyErr) {
    if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
        if let Err(e) = py.import("_thread").and_then(|t| t.call_method0("interrupt_main")) {
            e.write_unraisable(py, None);
        }
    } else {
        e.write_unraisable(py, None);
    }
}

struct ToPython;

impl<S: tracing::Subscriber> Layer<S> for ToPython {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => 40,
            tracing::Level::WARN => 30,
            tracing::Level::INFO => 20,
            tracing::Level::DEBUG => 10,
            tracing::Level::TRACE => 5,
        };
        let mut text = Message::default();
        event.record(&mut text);
        let mut q = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == CAPACITY {
            q.pop_front();
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back((level, text.finish()));
    }
}

/// An event as one line: its message, then `field=value` pairs.
#[derive(Default)]
struct Message {
    message: String,
    fields: String,
}

impl Message {
    fn finish(self) -> String {
        if self.fields.is_empty() {
            self.message
        } else {
            format!("{} ({})", self.message, self.fields.trim_start())
        }
    }
}

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}
