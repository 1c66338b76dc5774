//! A worker inside another process: the Python package's in-process
//! worker, which shares the training process's CUDA context.
//!
//! Two processes on one GPU are time-sliced: a worker process on the
//! training GPU gets the SMs only between the trainer's slices, whatever
//! the transport. A worker in the trainer's own process uses the same
//! (primary) context, so its kernels and JPEG engine work overlap the
//! training step's as another stream's do, as DALI's do.
//!
//! The worker runs on a thread of its own with its own runtime and
//! installs no signal handler (`worker::run` is `run_until` with the
//! process's signals; this runs `run_until` until its handle says stop):
//! the host process keeps its Ctrl-C. It is started from `stoker worker`'s
//! arguments, and stops, draining in-flight items for its grace period,
//! when its handle is stopped or dropped.

use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::Context;
use clap::Parser;
use tokio::sync::oneshot;

use crate::{Cli, Command, worker};

/// A running in-process worker.
#[derive(Debug)]
pub struct EmbeddedWorker {
    addr: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl EmbeddedWorker {
    /// Starts a worker with `stoker worker`'s arguments (`--device cuda`,
    /// `--listen 127.0.0.1:0`...) in this process; returns once it
    /// listens, or with its start-up error.
    pub fn start<I, S>(args: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv = ["stoker".to_owned(), "worker".to_owned()]
            .into_iter()
            .chain(args.into_iter().map(Into::into));
        let cli = Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.render().to_string().trim_end()))?;
        let Command::Worker(args) = cli.command else {
            anyhow::bail!("not worker arguments");
        };
        let (ready_tx, ready_rx) = mpsc::channel::<String>();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("stoker-worker".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("stoker-worker-io")
                    .build()
                    .context("cannot start the worker's runtime")?;
                runtime.block_on(worker::run_until(
                    args,
                    move |addr| {
                        let _ = ready_tx.send(addr.to_string());
                    },
                    async {
                        let _ = stopped.await;
                    },
                ))
            })
            .context("cannot start the worker's thread")?;
        match ready_rx.recv() {
            Ok(addr) => Ok(Self {
                addr,
                stop: Some(stop),
                thread: Some(thread),
            }),
            // It ended before it listened: its error says why.
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                Ok(Ok(())) => Err(anyhow::anyhow!("the worker stopped before it listened")),
                Err(_) => Err(anyhow::anyhow!("the worker panicked while starting")),
            },
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stops it and waits for it: items in flight drain for its grace
    /// period (`--grace-period`). Returns how it ended.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.halt()
    }

    /// Asks it to stop without waiting: it drains for its grace period,
    /// then [`is_finished`](Self::is_finished) says so. A caller that must
    /// stay interruptible polls that, then calls [`stop`](Self::stop).
    pub fn request_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether its thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Asks it to stop and lets it drain on its own thread, unwaited: for
    /// an owner that must not block (a Python object being collected).
    pub fn detach(mut self) {
        self.request_stop();
        self.thread = None;
    }

    fn halt(&mut self) -> anyhow::Result<()> {
        self.request_stop();
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(anyhow::anyhow!("the in-process worker panicked")),
        }
    }
}

impl Drop for EmbeddedWorker {
    fn drop(&mut self) {
        if let Err(e) = self.halt() {
            tracing::warn!(addr = %self.addr, error = %e, "in-process worker failed");
        }
    }
}
