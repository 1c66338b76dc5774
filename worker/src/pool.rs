//! The CPU pool: decode and augmentation run here, never on the async
//! runtime's threads. [`CpuPool::spawn`] counts the pool's load
//! ([`CpuPool::has_idle_thread`]) and does not run a job whose requester
//! has gone. A GPU worker's pool is [`CpuPool::background`]: its threads
//! run at niceness 10, so what they decode uses the cycles the GPU lanes
//! and the network leave.
//!
//! A job that panics never takes the process down (rayon aborts the
//! process when a spawned job panics): [`CpuPool::spawn`] catches the
//! panic and returns it as [`PoolError::Panicked`], [`CpuPool::execute`]
//! logs it. The pipeline's own jobs catch their panics closer still, per
//! sample (`pipeline::process_sample`), so a panic costs one skipped sample.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::oneshot;

/// A dedicated pool of threads for CPU-heavy work.
#[derive(Clone, Debug)]
pub struct CpuPool {
    pool: Arc<rayon::ThreadPool>,
    threads: usize,
    /// Jobs queued or running.
    load: Arc<AtomicUsize>,
}

/// A CPU job that did not complete. (A GPU runner that is gone is
/// `RunnerGone`, an error of its own.)
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The pool is shutting down: the job was dropped unrun.
    #[error("cpu job did not complete: the pool shut down")]
    Gone,
    /// The job panicked; the pool thread caught it and lives on.
    #[error("cpu job panicked: {0}")]
    Panicked(String),
}

/// The message a panic carries (`panic!`'s formatted text), or a stand-in
/// when its payload is not a string.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// Runs `f`, returning its panic's message if it panics.
///
/// `f` is asserted unwind-safe: what a job shares with the rest of the
/// worker is atomics, channels and `Arc`s of immutable data, and the
/// thread-local scratch it may leave half-written (the augmenter's) is
/// overwritten before it is next read.
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| panic_message(&*payload))
}

/// Takes a job off the pool's load when dropped, also when the job panics.
struct LoadGuard(Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The niceness of a background pool's threads: under contention Linux
/// gives a thread of niceness 10 about a tenth of the CPU time of one of
/// niceness 0.
const BACKGROUND_NICENESS: i32 = 10;

impl CpuPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> std::io::Result<Self> {
        Self::build(threads, false)
    }

    /// A pool whose threads run at a lower priority than the rest of the
    /// process: on a GPU worker they decode with the cycles the GPU lanes
    /// and the network leave, instead of slowing the GPU down by taking
    /// cores its lanes need (and a trainer on the same host keeps its
    /// share too).
    pub fn background(threads: usize) -> std::io::Result<Self> {
        Self::build(threads, true)
    }

    fn build(threads: usize, background: bool) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let mut builder = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stoker-cpu-{i}"));
        if background {
            builder = builder.start_handler(|_| lower_this_thread_priority());
        }
        let pool = builder.build().map_err(std::io::Error::other)?;
        Ok(Self {
            pool: Arc::new(pool),
            threads,
            load: Arc::new(AtomicUsize::new(0)),
        })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether a thread is free: fewer jobs queued or running than threads.
    /// A GPU worker gives the pool JPEGs only then (see
    /// `pipeline::route`), so they never queue behind each other here.
    pub fn has_idle_thread(&self) -> bool {
        self.load.load(Ordering::Acquire) < self.threads
    }

    /// Queues `f` on the pool, to run whoever waits for it (nobody does).
    /// A panic in `f` is logged; the thread lives on.
    pub fn execute(&self, f: impl FnOnce() + Send + 'static) {
        self.load.fetch_add(1, Ordering::AcqRel);
        let guard = LoadGuard(Arc::clone(&self.load));
        self.pool.spawn(move || {
            let _guard = guard;
            if let Err(message) = catch_panic(f) {
                tracing::error!(panic = %message, "cpu pool job panicked");
            }
        });
    }

    /// Queues `f` on the pool at once; the returned future yields its
    /// result without blocking the runtime. Dropping the future does not
    /// cancel a job already running, but a job whose future was dropped
    /// before it started is not run (the requester has gone). A panic in
    /// `f` is caught on the pool thread and yields
    /// [`PoolError::Panicked`] with its message.
    pub fn spawn<T, F>(&self, f: F) -> impl Future<Output = Result<T, PoolError>> + Send + 'static
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.load.fetch_add(1, Ordering::AcqRel);
        let guard = LoadGuard(Arc::clone(&self.load));
        self.pool.spawn(move || {
            let _guard = guard;
            if tx.is_closed() {
                return;
            }
            // The receiver may be gone meanwhile (client left): nothing to do then.
            let _ = tx.send(catch_panic(f));
        });
        async move {
            match rx.await {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(message)) => Err(PoolError::Panicked(message)),
                Err(_) => Err(PoolError::Gone),
            }
        }
    }
}

/// Lowers the calling thread's priority to [`BACKGROUND_NICENESS`] (on
/// Linux a niceness is per thread); elsewhere, or if refused, it keeps its
/// priority.
fn lower_this_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        if let Err(e) = rustix::process::setpriority_process(Some(tid), BACKGROUND_NICENESS) {
            tracing::debug!(error = %e, "cpu pool thread keeps its priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_background_pool_runs_at_a_lower_priority() {
        let pool = CpuPool::background(1).unwrap();
        let niceness = || rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let nice = pool.spawn(niceness);
        assert_eq!(nice.await.unwrap(), (niceness() + BACKGROUND_NICENESS).min(19));
    }

    #[tokio::test]
    async fn load_counts_jobs_until_they_finish() {
        let pool = CpuPool::new(1).unwrap();
        assert!(pool.has_idle_thread());
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let running = pool.spawn(move || wait.recv().is_ok());
        assert!(!pool.has_idle_thread(), "one job on one thread");
        // Dropped before it runs: the job is not run, and its load goes.
        let dropped = pool.spawn(|| panic!("a job whose requester left must not run"));
        drop(dropped);
        release.send(()).unwrap();
        assert!(running.await.unwrap());
        assert!(
            becomes_idle(&pool).await,
            "the pool's load did not drop back after its jobs ended"
        );
    }

    #[tokio::test]
    async fn a_job_whose_requester_left_before_it_started_is_not_run() {
        let pool = CpuPool::new(1).unwrap();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // Keeps the only thread busy while the next job's requester leaves.
        let busy = pool.spawn(move || wait.recv().is_ok());
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let left = pool.spawn(move || flag.store(true, Ordering::SeqCst));
        drop(left);
        release.send(()).unwrap();
        assert!(busy.await.unwrap());
        // Idle again: every job queued has been taken off the pool.
        assert!(becomes_idle(&pool).await, "the pool's load did not drop back");
        assert!(!ran.load(Ordering::SeqCst), "the job ran with nobody waiting for it");
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_pool_keeps_working() {
        // One thread: if the panic killed it (or the process), nothing
        // after it would run.
        let pool = CpuPool::new(1).unwrap();
        let err = pool
            .spawn(|| -> u32 { panic!("decoder blew up on k007") })
            .await
            .unwrap_err();
        assert!(
            matches!(&err, PoolError::Panicked(m) if m == "decoder blew up on k007"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "cpu job panicked: decoder blew up on k007");
        let formatted = pool
            .spawn(|| -> u32 { panic!("{} at {}", "bad", 3) })
            .await
            .unwrap_err();
        assert!(
            matches!(&formatted, PoolError::Panicked(m) if m == "bad at 3"),
            "{formatted:?}"
        );
        // A fire-and-forget job that panics is logged, not fatal either.
        pool.execute(|| panic!("stolen job panicked"));
        assert_eq!(pool.spawn(|| 41 + 1).await.unwrap(), 42);
        assert!(becomes_idle(&pool).await, "a panicked job's load did not drop");
    }

    /// Whether the pool's load drops below its threads within a second.
    async fn becomes_idle(pool: &CpuPool) -> bool {
        for _ in 0..100 {
            if pool.has_idle_thread() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        false
    }
}
