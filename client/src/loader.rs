//! The loader: connection to workers, and epochs. `Loader::connect`
//! reaches the workers and describes the dataset; `Loader::epoch` /
//! `Loader::resume` plan an epoch, spawn its lanes (`dispatch`) and its
//! supervisor (`supervisor`), and return the [`EpochStream`] the consumer
//! takes batches from.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use stoker_core::ShardRef;
use stoker_core::plan::EpochPlan;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::assemble::{Assembler, batches_per_rank};
use crate::batch::{Batch, open_upload};
use crate::buffers::{BatchBuffers, HostPool};
use crate::config::{DEFAULT_INFLIGHT_ITEMS, LoaderConfig, MAX_LANES_PER_WORKER};
use crate::device::Uploader;
use crate::dispatch::{WorkerLane, worker_limit};
use crate::error::{ClientError, describe_status, is_permanent};
use crate::ledger::{CreditLimit, Ledger};
use crate::metrics::ClientMetrics;
use crate::order::Sequencer;
use crate::report::{EpochCounters, EpochReport};
use crate::state::{EpochState, Fingerprint, Progress};
use crate::supervisor::Supervisor;
use crate::tls::TlsOptions;
use crate::wire;

struct WorkerConn {
    addr: String,
    client: wire::Client,
    /// More connections to the same worker, for the lanes: one HTTP/2
    /// connection is served by one task at each end, which caps it below
    /// what a GPU worker sends (about 2.6 GB/s on loopback, measured).
    lane_clients: Vec<wire::Client>,
    health: wire::HealthClient,
    /// What the worker may have in flight, from the configuration or its
    /// `Info` at connection time.
    limit: CreditLimit,
}

/// A connection to a set of workers for one dataset.
pub struct Loader {
    config: Arc<LoaderConfig>,
    workers: Vec<WorkerConn>,
    shards: Vec<ShardRef>,
    /// Batch buffers, shared by the epochs: heap, or the pinned ring.
    buffers: BatchBuffers,
    uploader: Option<Arc<Uploader>>,
    /// Why an upload that was asked for is not used.
    upload_error: Option<String>,
    /// Lifetime counters, served at `/metrics` when configured.
    metrics: ClientMetrics,
    /// Stops the metrics endpoint when the loader is dropped.
    _metrics_stop: Option<oneshot::Sender<()>>,
    /// Where the metrics endpoint listens.
    metrics_addr: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("workers", &self.config.workers)
            .field("dataset", &self.config.dataset)
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl Loader {
    /// Checks the configuration, reaches the workers and lists the dataset
    /// through the first worker that answers.
    pub async fn connect(config: LoaderConfig) -> Result<Self, ClientError> {
        config.validate()?;
        // Bound first: a port in use fails the start, before any work.
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                stoker_metrics::bind(addr)
                    .await
                    .map_err(|e| ClientError::Config(e.to_string()))?,
            ),
            None => None,
        };
        let mut workers = Vec::with_capacity(config.workers.len());
        for addr in &config.workers {
            // `https://` addresses get TLS with the system roots unless the
            // configuration says how to verify them.
            let default_tls = TlsOptions::default();
            let tls = config
                .tls
                .as_ref()
                .or_else(|| addr.starts_with("https://").then_some(&default_tls));
            let channel = wire::channel(addr, config.connect_timeout, tls).map_err(ClientError::Config)?;
            let mut lane_clients =
                vec![wire::client(channel.clone(), config.token.as_ref()).map_err(ClientError::Config)?];
            for _ in 1..wire::CONNECTIONS_PER_WORKER {
                let more = wire::channel(addr, config.connect_timeout, tls).map_err(ClientError::Config)?;
                lane_clients.push(wire::client(more, config.token.as_ref()).map_err(ClientError::Config)?);
            }
            workers.push(WorkerConn {
                addr: addr.clone(),
                lane_clients,
                client: wire::client(channel.clone(), config.token.as_ref()).map_err(ClientError::Config)?,
                health: wire::health_client(channel, config.token.as_ref()).map_err(ClientError::Config)?,
                limit: CreditLimit::Items(config.inflight_per_worker.unwrap_or(DEFAULT_INFLIGHT_ITEMS)),
            });
        }
        let mut unreachable = Vec::new();
        let mut described = None;
        for w in &mut workers {
            match w.client.describe_dataset(&config.dataset).await {
                Ok(dataset) => {
                    described = Some(dataset);
                    break;
                }
                Err(status) if is_permanent(&status) => {
                    return Err(ClientError::Worker {
                        addr: w.addr.clone(),
                        message: describe_status(&status),
                    });
                }
                Err(status) => {
                    unreachable.push(format!("{} ({})", w.addr, describe_status(&status)));
                }
            }
        }
        let Some(described) = described else {
            return Err(ClientError::Unreachable(unreachable.join("; ")));
        };
        for u in &unreachable {
            // The epoch keeps trying these; they may come up later.
            warn!(worker = %u, "worker unreachable at start");
        }
        if config.inflight_per_worker.is_none() {
            // Asked at once of every worker; one that does not answer keeps
            // the default and asks again when it comes up.
            let asks = workers
                .iter()
                .map(|w| {
                    let mut client = w.client.clone();
                    async move { worker_limit(&mut client, config.connect_timeout).await }
                })
                .collect::<Vec<_>>();
            for (w, limit) in workers.iter_mut().zip(futures::future::join_all(asks).await) {
                if let Some(limit) = limit {
                    debug!(worker = %w.addr, ?limit, "worker credit");
                    w.limit = limit;
                }
            }
        }
        let shards = described.shards;
        if shards.is_empty() {
            return Err(ClientError::Config(format!("dataset {} has no shards", config.dataset)));
        }
        info!(dataset = %config.dataset, shards = shards.len(), indexed = described.indexed, "dataset described");
        let batch_bytes = config.batch_size * (config.transform.size as usize).pow(2) * 3;
        let mut buffers = BatchBuffers::Host(HostPool::new(batch_bytes, config.prefetch + 2));
        let mut uploader = None;
        let mut upload_error = None;
        if let Some(target) = config.device {
            match open_upload(target, batch_bytes) {
                Ok((up, pool)) => {
                    info!(device = target.ordinal, spec = ?target.spec, "batches are uploaded to the gpu through a pinned ring");
                    buffers = BatchBuffers::Pinned(Arc::new(pool));
                    uploader = Some(Arc::new(up));
                }
                Err(reason) => {
                    warn!(device = target.ordinal, %reason, "no usable gpu: batches stay in host memory");
                    upload_error = Some(format!("cuda device {}: {reason}", target.ordinal));
                }
            }
        }
        let metrics = ClientMetrics::default();
        let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
        let metrics_stop = metrics_listener.map(|listener| {
            let (stop, stopped) = oneshot::channel::<()>();
            let registry = Arc::new(metrics.registry());
            let addr = listener.local_addr().ok();
            info!(addr = ?addr, "serving client metrics at /metrics");
            tokio::spawn(async move {
                let shutdown = async {
                    let _ = stopped.await;
                };
                if let Err(e) = stoker_metrics::serve(listener, registry, shutdown).await {
                    warn!(addr = ?addr, error = %e, "client metrics endpoint stopped");
                }
            });
            stop
        });
        Ok(Self {
            config: Arc::new(config),
            workers,
            shards,
            buffers,
            uploader,
            upload_error,
            metrics,
            _metrics_stop: metrics_stop,
            metrics_addr,
        })
    }

    /// Where the loader serves its metrics (`LoaderConfig::metrics_listen`,
    /// with the port the system chose for port 0).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics_addr
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// Whether batches arrive on a GPU (`Batch::device`), which the
    /// configuration asked for and a usable GPU allowed.
    pub fn uploads(&self) -> bool {
        self.uploader.is_some()
    }

    /// Why batches stay on the host although an upload was asked for.
    pub fn upload_error(&self) -> Option<&str> {
        self.upload_error.as_deref()
    }

    /// The dataset's shards, sorted by name.
    pub fn shards(&self) -> &[ShardRef] {
        &self.shards
    }

    /// This rank's plan for `epoch`.
    pub fn plan(&self, epoch: u64) -> Result<EpochPlan, ClientError> {
        EpochPlan::new(
            &self.shards,
            self.config.seed,
            epoch,
            self.config.rank,
            self.config.world_size,
        )
        .map_err(|e| ClientError::Config(e.to_string()))
    }

    /// Batches this rank yields per epoch, the same on every rank, when the
    /// dataset's index gives every shard's sample count; `None` otherwise.
    pub fn batches_per_epoch(&self) -> Option<u64> {
        let samples = stoker_core::indexed_samples(&self.shards)?;
        Some(batches_per_rank(
            samples,
            self.config.world_size,
            self.config.batch_size,
            self.config.last_batch,
        ))
    }

    fn fingerprint(&self, plan: &EpochPlan) -> Fingerprint {
        Fingerprint {
            seed: self.config.seed,
            rank: self.config.rank,
            world_size: self.config.world_size,
            batch_size: self.config.batch_size as u64,
            image_size: u64::from(self.config.transform.size),
            last_batch: self.config.last_batch,
            items: plan.items.len() as u64,
            shards: self.shards.len() as u64,
            deterministic: self.config.deterministic,
        }
    }

    /// Starts streaming `epoch`. Batches arrive through the returned stream;
    /// dropping it stops the epoch.
    pub fn epoch(&self, epoch: u64) -> Result<EpochStream, ClientError> {
        self.start(epoch, None)
    }

    /// Resumes an epoch from a state saved with [`EpochStream::state`]: the
    /// batches not yet delivered then, numbered from where it stopped.
    pub fn resume(&self, state: &EpochState) -> Result<EpochStream, ClientError> {
        self.start(state.epoch, Some(state))
    }

    fn start(&self, epoch: u64, resumed: Option<&EpochState>) -> Result<EpochStream, ClientError> {
        let plan = self.plan(epoch)?;
        let fingerprint = self.fingerprint(&plan);
        if let Some(state) = resumed
            && let Some(detail) = state.fingerprint.mismatch(&fingerprint)
        {
            return Err(ClientError::Resume { epoch, detail });
        }
        let target = self.batches_per_epoch();
        if target.is_none() && self.config.world_size > 1 {
            warn!(
                dataset = %self.config.dataset,
                "the dataset has no index with sample counts: ranks split it by shard and may yield different numbers of batches"
            );
        }
        let addrs: Vec<String> = self.workers.iter().map(|w| w.addr.clone()).collect();
        let items = plan.items.len();
        let limits: Vec<(String, CreditLimit)> = self.workers.iter().map(|w| (w.addr.clone(), w.limit)).collect();
        let ledger = Arc::new(Ledger::new(plan.items.clone(), &limits));
        let (done, partial): (&[u32], &[(u32, Vec<String>)]) = match resumed {
            Some(s) => (&s.done_items, &s.partial),
            None => (&[], &[]),
        };
        ledger.resume(done, partial);
        // Lanes per worker: as many as the items its credit may allow at
        // once (a worker that may ask for more once reached gets the most);
        // the items expected in flight bound deterministic mode's window.
        let item_samples = plan.samples().map(|n| n / plan.items.len().max(1) as u64);
        let expected_items = |limit| match limit {
            CreditLimit::Items(n) => n,
            CreditLimit::Samples(want) => item_samples.map_or(DEFAULT_INFLIGHT_ITEMS + 1, |per_item| {
                (want.div_ceil(per_item.max(1)) as usize + 1).min(MAX_LANES_PER_WORKER)
            }),
        };
        let lanes_per_worker: Vec<usize> = self
            .workers
            .iter()
            .map(|w| match (w.limit, self.config.inflight_per_worker) {
                (_, Some(n)) => n,
                (CreditLimit::Samples(_), None) if item_samples.is_some() => expected_items(w.limit),
                _ => MAX_LANES_PER_WORKER,
            })
            .collect();
        let lanes_total: usize = self.workers.iter().map(|w| expected_items(w.limit)).sum();
        let sequencer = Sequencer::new(items, self.config.deterministic, done);
        if self.config.deterministic {
            ledger.set_window(2 * lanes_total);
            // A resumed epoch starts past the items delivered whole.
            ledger.advance(sequencer.head());
        }
        let planned = plan.samples();
        let counters = Arc::new(EpochCounters::new(&addrs, planned, &self.metrics));
        let (event_tx, event_rx) = mpsc::channel(self.config.batch_size.max(64));
        let (batch_tx, batch_rx) = mpsc::channel(self.config.prefetch.max(1));
        let template = Arc::new(wire::ItemTemplate::new(
            &self.config.dataset,
            self.config.seed,
            epoch,
            &self.config.transform,
            self.config.chunk_bytes,
        ));
        let mut lanes = JoinSet::new();
        for (i, w) in self.workers.iter().enumerate() {
            for lane in 0..lanes_per_worker[i] {
                lanes.spawn(
                    WorkerLane {
                        worker: i,
                        addr: w.addr.clone(),
                        client: w.lane_clients[lane % w.lane_clients.len()].clone(),
                        health: w.health.clone(),
                        ledger: Arc::clone(&ledger),
                        config: Arc::clone(&self.config),
                        template: Arc::clone(&template),
                        events: event_tx.clone(),
                        counters: Arc::clone(&counters),
                    }
                    .run(),
                );
            }
        }
        drop(event_tx);
        let assembler = Assembler::new(
            epoch,
            self.config.transform.size,
            self.config.batch_size,
            self.config.last_batch,
            target,
            resumed.map_or(0, |s| s.batches),
            self.buffers.clone(),
        );
        tokio::spawn(
            Supervisor {
                epoch,
                config: Arc::clone(&self.config),
                ledger,
                counters: Arc::clone(&counters),
                lanes,
                events: event_rx,
                batches: batch_tx,
                sequencer,
                assembler,
                uploader: self.uploader.clone(),
            }
            .run(),
        );
        let workers = Arc::new(addrs);
        self.metrics.set_current(&counters, &workers);
        Ok(EpochStream {
            rx: batch_rx,
            watch: EpochWatch {
                counters,
                progress: Arc::new(Mutex::new(Progress::new(epoch, fingerprint, resumed))),
                workers,
                shards: items,
            },
        })
    }
}

/// The batches of one epoch, in arrival order.
#[derive(Debug)]
pub struct EpochStream {
    rx: mpsc::Receiver<Result<Batch, ClientError>>,
    watch: EpochWatch,
}

/// A view of an epoch's progress that other threads can hold while the
/// stream waits for a batch: its state and its report.
#[derive(Debug, Clone)]
pub struct EpochWatch {
    counters: Arc<EpochCounters>,
    progress: Arc<Mutex<Progress>>,
    workers: Arc<Vec<String>>,
    shards: usize,
}

/// Adds the time since its start to the consumer's wait when dropped.
struct WaitClock<'a>(&'a EpochCounters, Instant);

impl Drop for WaitClock<'_> {
    fn drop(&mut self) {
        self.0.add_wait(self.1.elapsed());
    }
}

impl EpochStream {
    /// The next batch; `None` once the epoch is complete. After an error
    /// the epoch is over.
    pub async fn next_batch(&mut self) -> Option<Result<Batch, ClientError>> {
        // Counted when the wait ends, also when the caller gives up on
        // this future (the Python client polls with a timeout).
        let waiting = WaitClock(&self.watch.counters, Instant::now());
        let next = self.rx.recv().await;
        drop(waiting);
        match &next {
            Some(Ok(batch)) => {
                self.watch.progress().delivered(batch);
                self.watch.counters.add_batch(batch.real());
            }
            _ => self.watch.counters.finish(),
        }
        next
    }

    /// Where the consumer is in this epoch: what a checkpoint saves, for
    /// [`Loader::resume`].
    pub fn state(&self) -> EpochState {
        self.watch.state()
    }

    /// Pixel bytes received so far (cheap, for progress lines).
    pub fn bytes(&self) -> u64 {
        self.watch.counters.bytes.load(Ordering::Relaxed)
    }

    pub fn report(&self) -> EpochReport {
        self.watch.report()
    }

    /// A handle on this epoch's state and report, usable while the stream
    /// is busy.
    pub fn watch(&self) -> EpochWatch {
        self.watch.clone()
    }
}

impl EpochWatch {
    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// As [`EpochStream::state`].
    pub fn state(&self) -> EpochState {
        self.progress().state()
    }

    pub fn report(&self) -> EpochReport {
        self.counters.report(&self.workers, self.shards)
    }
}
