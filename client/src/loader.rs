//! The loader: configuration, connection to workers, and epochs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stoker_core::plan::EpochPlan;
use stoker_core::{Secret, ShardRef, TransformSpec};
use stoker_proto::pb;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::assemble::{Assembler, Batch, LastBatch, batches_per_rank};
use crate::budget::{ErrorBudget, ReasonTally};
use crate::buffers::{BatchBuffers, HostPool};
use crate::device::{PinnedPool, UploadSpec, Uploader};
use crate::dispatch::{CreditLimit, DEFAULT_INFLIGHT_ITEMS, Lane, Ledger, MAX_LANES_PER_WORKER, worker_limit};
use crate::error::{ClientError, describe_status, is_permanent};
use crate::order::{Ordered, Sequencer};
use crate::state::{EpochState, Fingerprint, Progress};
use crate::tls::TlsOptions;
use crate::wire;

/// Everything a loader needs to know.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Worker addresses, `host:port` (or `http://host:port`).
    pub workers: Vec<String>,
    /// `s3://bucket/prefix/`, `file:///abs/dir/` or a path, as the workers
    /// see it.
    pub dataset: String,
    pub batch_size: usize,
    pub transform: TransformSpec,
    pub seed: u64,
    pub rank: u32,
    pub world_size: u32,
    /// Batches assembled ahead of the consumer.
    pub prefetch: usize,
    /// Work items streamed from each worker at once; `None` (the default)
    /// sizes each worker's share in samples, from what the worker says it
    /// needs in flight (`Info.inflight_samples`) and the items' sample
    /// counts, so a GPU worker's batches fill whatever the shard size.
    pub inflight_per_worker: Option<usize>,
    /// What happens to an epoch's last, incomplete batch. When the
    /// dataset has an index, every rank yields the same number of batches
    /// (see [`batches_per_rank`](crate::batches_per_rank)).
    pub last_batch: LastBatch,
    /// Batch `k` of an epoch is a function of (seed, epoch, rank, `k`)
    /// alone: samples go into batches in plan order (each item's samples by
    /// position in the shard), not in arrival order. Costs memory: up to
    /// twice the items in flight (`workers × inflight_per_worker`) are held,
    /// decoded, until those before them finish.
    pub deterministic: bool,
    /// Target chunk size asked of workers (0: the worker's default).
    pub chunk_bytes: u32,
    /// An attempt that sends nothing for this long is reassigned.
    pub progress_timeout: Duration,
    /// How long every worker may be failing before the epoch fails.
    pub worker_patience: Duration,
    pub connect_timeout: Duration,
    /// Attempts per work item before the epoch fails.
    pub max_attempts: u32,
    /// Skipped samples tolerated per epoch; `None` for no limit.
    pub max_errors: Option<ErrorBudget>,
    /// Bearer token for workers that require one.
    pub token: Option<Secret>,
    /// TLS towards the workers; plain HTTP/2 when `None`.
    pub tls: Option<TlsOptions>,
    /// Upload each batch to this CUDA device and convert it there; `None`
    /// keeps batches in host memory. Without a usable GPU the loader logs
    /// why and yields host batches.
    pub device: Option<DeviceTarget>,
}

/// Where and how batches are uploaded.
#[derive(Debug, Clone, Copy)]
pub struct DeviceTarget {
    /// The CUDA device (its primary context, the one PyTorch uses).
    pub ordinal: usize,
    /// Layout, dtype, mean and std of the batches on the device.
    pub spec: UploadSpec,
}

impl LoaderConfig {
    /// A configuration with the usual defaults.
    pub fn new(workers: Vec<String>, dataset: impl Into<String>, batch_size: usize, transform: TransformSpec) -> Self {
        Self {
            workers,
            dataset: dataset.into(),
            batch_size,
            transform,
            seed: 0,
            rank: 0,
            world_size: 1,
            prefetch: 4,
            inflight_per_worker: None,
            last_batch: LastBatch::Partial,
            deterministic: false,
            chunk_bytes: 0,
            progress_timeout: Duration::from_secs(60),
            worker_patience: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_attempts: 5,
            max_errors: None,
            token: None,
            tls: None,
            device: None,
        }
    }

    fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: String| Err(ClientError::Config(m));
        if self.workers.is_empty() {
            return bad("no workers given".into());
        }
        if self.batch_size == 0 {
            return bad("batch size must be at least 1".into());
        }
        if self.world_size == 0 || self.rank >= self.world_size {
            return bad(format!(
                "rank {} must be below world size {}",
                self.rank, self.world_size
            ));
        }
        if let Some(n) = self.inflight_per_worker
            && !(1..=MAX_LANES_PER_WORKER).contains(&n)
        {
            return bad(format!(
                "items in flight per worker must be between 1 and {MAX_LANES_PER_WORKER}, got {n}"
            ));
        }
        if self.max_attempts == 0 {
            return bad("max attempts must be at least 1".into());
        }
        self.transform
            .validate()
            .map_err(|e| ClientError::Config(e.to_string()))
    }
}

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
    transform: pb::TransformSpec,
    /// Batch buffers, shared by the epochs: heap, or the pinned ring.
    buffers: BatchBuffers,
    uploader: Option<Arc<Uploader>>,
    /// Why an upload that was asked for is not used.
    upload_error: Option<String>,
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
        let request = pb::DescribeDatasetRequest {
            dataset: config.dataset.clone(),
        };
        let mut unreachable = Vec::new();
        let mut described = None;
        for w in &mut workers {
            match w.client.describe_dataset(request.clone()).await {
                Ok(r) => {
                    described = Some(r.into_inner());
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
        let shards: Vec<ShardRef> = described.shards.into_iter().map(ShardRef::from).collect();
        if shards.is_empty() {
            return Err(ClientError::Config(format!("dataset {} has no shards", config.dataset)));
        }
        info!(dataset = %config.dataset, shards = shards.len(), indexed = described.indexed, "dataset described");
        let transform = stoker_proto::spec_to_pb(&config.transform);
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
        Ok(Self {
            config: Arc::new(config),
            workers,
            shards,
            transform,
            buffers,
            uploader,
            upload_error,
        })
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
            last_batch: self.config.last_batch.to_string(),
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
        let mut sequencer = Sequencer::new(items, self.config.deterministic, done);
        if self.config.deterministic {
            ledger.set_window(2 * lanes_total);
            // A resumed epoch starts past the items delivered whole.
            ledger.advance(sequencer.head());
        }
        let planned = plan.samples();
        let counters = Arc::new(EpochCounters::new(addrs.len(), planned));
        let (event_tx, mut event_rx) = mpsc::channel(self.config.batch_size.max(64));
        let (batch_tx, batch_rx) = mpsc::channel(self.config.prefetch.max(1));
        let mut lanes = JoinSet::new();
        for (i, w) in self.workers.iter().enumerate() {
            for lane in 0..lanes_per_worker[i] {
                lanes.spawn(
                    Lane {
                        worker: i,
                        addr: w.addr.clone(),
                        client: w.lane_clients[lane % w.lane_clients.len()].clone(),
                        health: w.health.clone(),
                        ledger: Arc::clone(&ledger),
                        config: Arc::clone(&self.config),
                        transform: self.transform.clone(),
                        epoch,
                        events: event_tx.clone(),
                        counters: Arc::clone(&counters),
                    }
                    .run(),
                );
            }
        }
        drop(event_tx);
        let config = Arc::clone(&self.config);
        let supervisor_ledger = Arc::clone(&ledger);
        let supervisor_counters = Arc::clone(&counters);
        let mut assembler = Assembler::new(
            epoch,
            config.transform.size,
            config.batch_size,
            config.last_batch,
            target,
            resumed.map_or(0, |s| s.batches),
            self.buffers.clone(),
        );
        let uploader = self.uploader.clone();
        tokio::spawn(async move {
            let mut ordered = Vec::new();
            loop {
                let event = tokio::select! {
                    event = event_rx.recv() => event,
                    // The consumer dropped the epoch: stop the lanes now,
                    // not when the next batch finds nobody to take it.
                    () = batch_tx.closed() => {
                        supervisor_ledger.fail(ClientError::Config("epoch dropped".into()));
                        lanes.shutdown().await;
                        return;
                    }
                };
                let Some(event) = event else {
                    break;
                };
                sequencer.push(event, &mut ordered);
                if config.deterministic {
                    supervisor_ledger.advance(sequencer.head());
                }
                for o in ordered.drain(..) {
                    let batch = match o {
                        Ordered::Sample(s) => assembler.push(s).await,
                        Ordered::ItemComplete(item) => {
                            assembler.complete(item);
                            Ok(None)
                        }
                    };
                    let batch = match batch.and_then(|b| b.map(|b| upload(uploader.as_deref(), b)).transpose()) {
                        Ok(b) => b,
                        Err(err) => {
                            supervisor_ledger.fail(err.clone());
                            let _ = batch_tx.send(Err(err)).await;
                            lanes.shutdown().await;
                            return;
                        }
                    };
                    if let Some(batch) = batch
                        && batch_tx.send(Ok(batch)).await.is_err()
                    {
                        // The consumer left: stop the lanes.
                        supervisor_ledger.fail(ClientError::Config("epoch dropped".into()));
                        lanes.shutdown().await;
                        return;
                    }
                }
            }
            while lanes.join_next().await.is_some() {}
            if let Some(err) = supervisor_ledger.fatal() {
                let _ = batch_tx.send(Err(err)).await;
                return;
            }
            if let Some(err) = supervisor_counters.over_budget(config.max_errors, true) {
                let _ = batch_tx.send(Err(err)).await;
                return;
            }
            let left = supervisor_ledger.remaining();
            if left > 0 {
                let _ = batch_tx
                    .send(Err(ClientError::Config(format!("{left} work items never completed"))))
                    .await;
                return;
            }
            if assembler.dropped > 0 && config.last_batch != LastBatch::Drop {
                warn!(
                    epoch,
                    dropped = assembler.dropped,
                    "more samples arrived than the dataset's index counts; the surplus was left out"
                );
            }
            loop {
                let batch = match assembler.finish_next().await {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    Err(err) => {
                        let _ = batch_tx.send(Err(err)).await;
                        return;
                    }
                };
                if batch.padded > 0 {
                    debug!(epoch, index = batch.index, padded = batch.padded, "batch padded");
                }
                let batch = match upload(uploader.as_deref(), batch) {
                    Ok(b) => b,
                    Err(err) => {
                        let _ = batch_tx.send(Err(err)).await;
                        return;
                    }
                };
                if batch_tx.send(Ok(batch)).await.is_err() {
                    return;
                }
            }
        });
        Ok(EpochStream {
            rx: batch_rx,
            watch: EpochWatch {
                counters,
                progress: Arc::new(Mutex::new(Progress::new(epoch, fingerprint, resumed))),
                workers: Arc::new(addrs),
                started: Instant::now(),
                shards: items,
            },
        })
    }
}

/// The uploader for `target` and its ring of pinned batch buffers: four
/// are enough, since a buffer returns as soon as its copy has completed
/// (one being filled, the others' copies in flight).
fn open_upload(target: DeviceTarget, batch_bytes: usize) -> Result<(Uploader, PinnedPool), String> {
    let up = Uploader::new(target.ordinal, target.spec).map_err(|e| e.to_string())?;
    let pool = up.pinned_pool(4, batch_bytes).map_err(|e| e.to_string())?;
    Ok((up, pool))
}

/// Queues a full batch's copy to the GPU and its conversion there, when
/// the loader uploads.
fn upload(uploader: Option<&Uploader>, mut batch: Batch) -> Result<Batch, ClientError> {
    let Some(up) = uploader else {
        return Ok(batch);
    };
    let Some(buf) = batch.pixels.take_pinned() else {
        return Ok(batch);
    };
    let device = up
        .upload(buf, batch.len(), batch.size, batch.size)
        .map_err(|e| ClientError::Device(format!("batch {} of epoch {}: {e}", batch.index, batch.epoch)))?;
    batch.device = Some(device);
    Ok(batch)
}

/// Live counters of one epoch, shared with the lanes.
#[derive(Debug)]
pub(crate) struct EpochCounters {
    pub samples: AtomicU64,
    pub bytes: AtomicU64,
    pub skipped: AtomicU64,
    pub retries: AtomicU64,
    per_worker: Vec<AtomicU64>,
    skip_reasons: Mutex<Vec<(String, String)>>,
    tally: Mutex<ReasonTally>,
    shard_errors: Mutex<Vec<String>>,
    /// Samples the epoch holds, when the dataset's index says.
    planned: Option<u64>,
}

/// Skip reasons kept for the report (the log has all of them).
const KEPT_REASONS: usize = 100;

impl EpochCounters {
    fn new(workers: usize, planned: Option<u64>) -> Self {
        Self {
            planned,
            tally: Mutex::new(ReasonTally::default()),
            samples: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            per_worker: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            skip_reasons: Mutex::new(Vec::new()),
            shard_errors: Mutex::new(Vec::new()),
        }
    }

    pub fn add_sample(&self, worker: usize, bytes: usize) {
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.per_worker[worker].fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_skip(&self, key: &str, reason: &str) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).add(key, reason);
        let mut r = self.skip_reasons.lock().unwrap_or_else(|p| p.into_inner());
        if r.len() < KEPT_REASONS {
            r.push((key.to_owned(), reason.to_owned()));
        }
    }

    /// The budget error if the skips so far exceed `budget`. With a
    /// fraction, the epoch's size comes from the index when it has one;
    /// otherwise only the end of the epoch (`finished`) can tell.
    pub fn over_budget(&self, budget: Option<ErrorBudget>, finished: bool) -> Option<ClientError> {
        let budget = budget?;
        let skipped = self.skipped.load(Ordering::Relaxed);
        let total = match (budget, self.planned) {
            (ErrorBudget::Count(_), _) => 0,
            (ErrorBudget::Fraction(_), Some(planned)) => planned,
            (ErrorBudget::Fraction(_), None) if finished => self.samples.load(Ordering::Relaxed) + skipped,
            (ErrorBudget::Fraction(_), None) => return None,
        };
        (skipped > budget.limit(total)).then(|| ClientError::ErrorBudget {
            skipped,
            budget: budget.to_string(),
            reasons: self.tally.lock().unwrap_or_else(|p| p.into_inner()).summary(),
        })
    }

    pub fn record_shard_error(&self, error: &str) {
        self.shard_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(error.to_owned());
    }
}

/// Samples delivered by one worker.
#[derive(Debug, Clone)]
pub struct WorkerReport {
    pub addr: String,
    pub samples: u64,
}

/// What happened in an epoch so far.
#[derive(Debug, Clone)]
pub struct EpochReport {
    pub samples: u64,
    pub bytes: u64,
    pub skipped: u64,
    /// Work items reassigned after a failure or stall.
    pub retries: u64,
    pub shards: usize,
    pub elapsed: Duration,
    pub workers: Vec<WorkerReport>,
    /// (key, reason) of the first skipped samples.
    pub skip_reasons: Vec<(String, String)>,
    /// Shards whose data ended early or was corrupt.
    pub shard_errors: Vec<String>,
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
    started: Instant,
    shards: usize,
}

impl EpochStream {
    /// The next batch; `None` once the epoch is complete. After an error
    /// the epoch is over.
    pub async fn next_batch(&mut self) -> Option<Result<Batch, ClientError>> {
        let next = self.rx.recv().await;
        if let Some(Ok(batch)) = &next {
            self.watch.progress().delivered(batch);
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
        let c = &self.counters;
        EpochReport {
            samples: c.samples.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            shards: self.shards,
            elapsed: self.started.elapsed(),
            workers: self
                .workers
                .iter()
                .zip(&c.per_worker)
                .map(|(addr, n)| WorkerReport {
                    addr: addr.clone(),
                    samples: n.load(Ordering::Relaxed),
                })
                .collect(),
            skip_reasons: c.skip_reasons.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            shard_errors: c.shard_errors.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}
