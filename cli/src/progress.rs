//! A progress line on stderr (rate, samples done, ETA), shown only when
//! stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Progress {
    label: String,
    total: Option<u64>,
    started: Instant,
    last: Instant,
    enabled: bool,
    drawn: bool,
}

impl Progress {
    pub fn new(label: impl Into<String>, total: Option<u64>) -> Self {
        let now = Instant::now();
        Self {
            label: label.into(),
            total,
            started: now,
            last: now,
            enabled: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    /// Redraws at most five times a second; `extra` (appended to the line)
    /// is only computed when the line is drawn.
    pub fn update(&mut self, done: u64, extra: impl FnOnce() -> String) {
        if !self.enabled || self.last.elapsed() < Duration::from_millis(200) {
            return;
        }
        let extra = extra();
        self.last = Instant::now();
        let secs = self.started.elapsed().as_secs_f64().max(1e-6);
        let rate = done as f64 / secs;
        let (of, eta) = match self.total {
            Some(t) if rate > 0.0 && t >= done => (format!("/{t}"), format!("  ETA {:.0}s", (t - done) as f64 / rate)),
            Some(t) => (format!("/{t}"), String::new()),
            None => (String::new(), String::new()),
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K{}: {done}{of} samples  {rate:.0}/s{extra}{eta}",
            self.label
        );
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clears the line so the summary starts clean.
    pub fn finish(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.drawn = false;
        }
    }
}
