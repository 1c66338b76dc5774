//! The CPU pool: decode and augmentation run here, never on the async
//! runtime's threads.

use std::sync::Arc;

use tokio::sync::oneshot;

/// A dedicated pool of threads for CPU-heavy work.
#[derive(Clone, Debug)]
pub struct CpuPool {
    pool: Arc<rayon::ThreadPool>,
    threads: usize,
}

/// The pool or the GPU runner is gone (shutting down) or the job panicked.
#[derive(Debug, thiserror::Error)]
#[error("decode job did not complete (worker shutting down or job panicked)")]
pub struct PoolError;

impl CpuPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stoker-cpu-{i}"))
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            pool: Arc::new(pool),
            threads,
        })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Queues `f` on the pool at once; the returned future yields its
    /// result without blocking the runtime. Dropping the future does not
    /// cancel the job, it only discards the result.
    pub fn spawn<T, F>(&self, f: F) -> impl Future<Output = Result<T, PoolError>> + Send + 'static
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.pool.spawn(move || {
            // The receiver may be gone (client left): nothing to do then.
            let _ = tx.send(f());
        });
        async move { rx.await.map_err(|_| PoolError) }
    }
}
