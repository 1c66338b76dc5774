//! The loader: connection to workers, and epochs. `Loader::connect`
//! reaches the workers and describes the dataset; `Loader::epoch` /
//! `Loader::resume` plan an epoch, spawn its lanes (`dispatch`) and its
//! supervisor (`supervisor`), and return the [`EpochStream`] the consumer
//! takes batches from.
//!
//! `connect` validates the configuration, resolves `dns://` entries,
//! describes the dataset through the first worker that answers, opens the
//! GPU upload when asked and possible, and serves metrics when asked.
//! `Loader::epoch` takes the epoch started ahead ([`Loader::start_ahead`])
//! when it is the one asked for. The `EpochStream` times the consumer's
//! waits and keeps the resumable state from the batches it hands over.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use stoker_core::plan::EpochPlan;
use stoker_core::{PositionSet, ShardFormat, ShardRef};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::ahead::{Ahead, Started};
use crate::assemble::{Assembler, batches_per_rank};
use crate::batch::{Batch, open_upload};
use crate::buffers::{BatchBuffers, HostPool};
use crate::config::LoaderConfig;
use crate::conn::WorkerConn;
use crate::device::Uploader;
use crate::discovery::{Discovery, WorkerSource};
use crate::dispatch::EpochLanes;
use crate::error::{ClientError, describe_status, is_permanent, not_http2};
use crate::ledger::{CreditLimit, Ledger};
use crate::local::{LOCAL, LocalFleet, LocalWorker};
use crate::metrics::ClientMetrics;
use crate::order::Sequencer;
use crate::report::{EpochCounters, EpochReport};
use crate::ring::SharedRing;
use crate::state::{EpochState, Fingerprint, Progress};
use crate::supervisor::Supervisor;
use crate::wire;
use crate::workers::{WorkerSet, rediscover, resolve_at_start};
use stoker_cuda::handoff::Sink;

/// A connection to a set of workers for one dataset.
pub struct Loader {
    /// The next epoch, started ahead ([`Loader::start_ahead`]); dropped
    /// (stopped) first.
    ahead: Ahead<EpochStream>,
    config: Arc<LoaderConfig>,
    /// The workers, shared with the discovery task.
    pub(crate) workers: Arc<WorkerSet>,
    /// Re-resolves `dns://` entries while the loader lives.
    discovery: Option<tokio::task::JoinHandle<()>>,
    shards: Vec<ShardRef>,
    /// The shards' format, as the workers listed them.
    format: ShardFormat,
    /// Batch buffers, shared by the epochs: heap, or the pinned ring.
    pub(crate) buffers: BatchBuffers,
    pub(crate) uploader: Option<Arc<Uploader>>,
    /// Where a GPU worker in this process, on the upload's device, leaves
    /// its images (`stoker_cuda::handoff`): offered with every item.
    sink: Option<Arc<Sink>>,
    /// Why an upload that was asked for is not used.
    upload_error: Option<String>,
    /// Lifetime counters, served at `/metrics` when configured.
    metrics: ClientMetrics,
    /// Stops the metrics endpoint when the loader is dropped.
    _metrics_stop: Option<oneshot::Sender<()>>,
    /// Where the metrics endpoint listens.
    metrics_addr: Option<std::net::SocketAddr>,
    /// The local workers this loader started (`"local"`), stopped with it.
    local: Option<LocalFleet>,
    /// What `stoker pack` reported of the dataset (its index), a line per
    /// kind.
    pack_report: Vec<String>,
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
    pub async fn connect(mut config: LoaderConfig) -> Result<Self, ClientError> {
        config.validate()?;
        config.dataset = absolute_dataset(&config.dataset, &config.workers)?;
        // `"local"` entries become the local workers' sockets.
        let local = match (config.workers.iter().any(|w| w == LOCAL), &config.local) {
            (false, _) => None,
            (true, None) => {
                return Err(ClientError::Config(format!(
                    "workers {LOCAL:?}: no way to start `stoker worker` was configured (LoaderConfig::local)"
                )));
            }
            (true, Some(how)) => Some(LocalFleet::start(how).await?),
        };
        if let Some(fleet) = &local {
            let addrs = fleet.addrs();
            config.workers = std::mem::take(&mut config.workers)
                .into_iter()
                .flat_map(|w| if w == LOCAL { addrs.clone() } else { vec![w] })
                .collect();
        }
        // Bound first: a port in use fails the start, before any work.
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                stoker_metrics::bind(addr)
                    .await
                    .map_err(|e| ClientError::Config(e.to_string()))?,
            ),
            None => None,
        };
        let sources = config
            .workers
            .iter()
            .map(|w| WorkerSource::parse(w))
            .collect::<Result<Vec<_>, _>>()?;
        let uses_dns = sources.iter().any(|s| matches!(s, WorkerSource::Dns { .. }));
        let discovery = if uses_dns {
            Some(Discovery::new(config.dns_server, config.connect_timeout)?)
        } else {
            None
        };
        let ring = SharedRing::for_config(&config);
        let mut workers = Vec::new();
        for (addr, source) in resolve_at_start(&sources, discovery.as_ref()).await? {
            if workers.iter().any(|w: &WorkerConn| w.addr == addr) {
                continue;
            }
            workers.push(WorkerConn::open(&addr, &config, source, ring.as_ref())?);
        }
        let mut unreachable = Vec::new();
        let mut described = None;
        for w in &mut workers {
            // Bounded: a worker that accepts the connection and never
            // answers (stopped, hung) must not hold the start up.
            let answer = tokio::time::timeout(
                config.connect_timeout,
                w.client.describe_dataset(&config.dataset, config.format),
            )
            .await;
            let Ok(answer) = answer else {
                unreachable.push(format!(
                    "{} (no answer within {:.1}s)",
                    w.addr,
                    config.connect_timeout.as_secs_f64()
                ));
                continue;
            };
            match answer {
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
                // A gRPC server without the worker service.
                Err(status) if status.code() == tonic::Code::Unimplemented => {
                    unreachable.push(format!(
                        "{} (not a Stoker worker: it answered, but not as a gRPC server of {}: {})",
                        w.addr,
                        stoker_proto::transport::WORKER_SERVICE,
                        describe_status(&status)
                    ));
                }
                Err(status) => {
                    // Transport errors hide a peer that answered in another
                    // protocol: ask it directly.
                    let detail = describe_status(&status);
                    let probe = match &config.tls {
                        None => not_http2(&w.addr, config.connect_timeout).await,
                        Some(_) => None,
                    };
                    match probe {
                        Some(why) => unreachable.push(format!(
                            "{} (not a Stoker worker: {why}, not as a gRPC server of {}; the call said: {detail})",
                            w.addr,
                            stoker_proto::transport::WORKER_SERVICE,
                        )),
                        None => unreachable.push(format!("{} ({detail})", w.addr)),
                    }
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
        // Asked at once of every worker; one that does not answer keeps
        // the default and asks again when it comes up.
        futures::future::join_all(workers.iter_mut().map(|w| w.ask_info(&config))).await;
        let shards = described.shards;
        if shards.is_empty() {
            return Err(ClientError::Config(format!("dataset {} has no shards", config.dataset)));
        }
        let format = described.format;
        // Each field's kind for this format (a WebDataset extension without
        // a decoder), before any work.
        stoker_core::validate_fields(&config.fields, Some(format)).map_err(|e| ClientError::Config(e.to_string()))?;
        info!(
            dataset = %config.dataset,
            shards = shards.len(),
            indexed = described.indexed,
            format = %format,
            "dataset described"
        );
        // Said once, where the user looks: the dataset is missing files of
        // its input, or holds images every worker will skip.
        for line in &described.pack_report {
            warn!(dataset = %config.dataset, "{line}");
        }
        // A transform that keeps each image's size has no one batch size in
        // bytes: its batches are packed in host buffers that grow to the
        // largest batch, and the caller copies them to the device.
        let image_bytes = config.transform.image_bytes();
        let batch_bytes = config.batch_size * image_bytes.unwrap_or(0);
        let mut buffers = BatchBuffers::Host(HostPool::new(batch_bytes, config.prefetch + 2));
        let mut uploader = None;
        let mut sink = None;
        let mut upload_error = None;
        if let Some(target) = config.device.filter(|_| image_bytes.is_none()) {
            info!(
                device = target.ordinal,
                "the transform keeps each image's size: batches are packed in host memory, not uploaded through the pinned ring"
            );
            upload_error =
                Some("the transform keeps each image's own size: batches are packed in host memory".to_owned());
        } else if let Some(target) = config.device {
            match open_upload(target, batch_bytes) {
                Ok((up, pool)) => {
                    info!(device = target.ordinal, spec = ?target.spec, "batches are uploaded to the gpu through a pinned ring");
                    buffers = BatchBuffers::Pinned(Arc::new(pool));
                    uploader = Some(Arc::new(up));
                    sink = Some(Sink::open(target.ordinal));
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
        let config = Arc::new(config);
        let workers = Arc::new(WorkerSet::new(workers));
        let discovery = discovery.map(|d| {
            tokio::spawn(rediscover(
                Arc::downgrade(&workers),
                sources,
                d,
                Arc::clone(&config),
                ring,
            ))
        });
        Ok(Self {
            ahead: Ahead::from_env(),
            config,
            workers,
            discovery,
            shards,
            format,
            buffers,
            uploader,
            sink,
            upload_error,
            metrics,
            _metrics_stop: metrics_stop,
            metrics_addr,
            local,
            pack_report: described.pack_report,
        })
    }

    /// What `stoker pack` left out of the dataset's input or packed
    /// knowing workers will skip it, a line per kind (from its index;
    /// empty when there is nothing to say or no index).
    pub fn pack_report(&self) -> &[String] {
        &self.pack_report
    }

    /// The local workers this loader started and supervises (the
    /// `"local"` entry of the worker list), as they are now.
    pub fn local_workers(&self) -> Vec<LocalWorker> {
        self.local.as_ref().map_or_else(Vec::new, LocalFleet::workers)
    }

    /// Where the loader serves its metrics (`LoaderConfig::metrics_listen`,
    /// with the port the system chose for port 0).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics_addr
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The format of the dataset's shards: `config.format`, or the one
    /// their extensions said.
    pub fn format(&self) -> ShardFormat {
        self.format
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
            image_size: self.config.transform.size.side().map_or(0, u64::from),
            last_batch: self.config.last_batch,
            items: plan.items.len() as u64,
            shards: self.shards.len() as u64,
            deterministic: self.config.deterministic,
        }
    }

    /// Starts streaming `epoch`. Batches arrive through the returned stream;
    /// dropping it stops the epoch.
    pub fn epoch(&self, epoch: u64) -> Result<EpochStream, ClientError> {
        let stream = match self.ahead.take(Some(epoch)) {
            Some(started) => started,
            None => self.start(epoch, None)?,
        };
        self.metrics.set_current(&stream.watch.counters);
        Ok(stream)
    }

    /// Starts the epoch after `current` now, when all of `current`'s items
    /// are in, so that its first batches are ready when the loop asks for
    /// it ([`crate::ahead`]); call it after each batch. [`Loader::epoch`]
    /// takes the stream. A start that fails is left to that call to report.
    pub fn start_ahead(&self, current: &EpochStream) {
        if let Some(next) = self.ahead.wanted(current) {
            match self.start(next, None) {
                Ok(stream) => {
                    debug!(epoch = next, "next epoch started ahead");
                    self.ahead.hold(stream);
                }
                Err(e) => debug!(epoch = next, error = %e, "next epoch not started ahead"),
            }
        }
    }

    /// The epoch [`Loader::start_ahead`] started, until it is taken.
    pub fn epoch_ahead(&self) -> Option<u64> {
        self.ahead.held()
    }

    /// Resumes an epoch from a state saved with [`EpochStream::state`]: the
    /// batches not yet delivered then, numbered from where it stopped.
    pub fn resume(&self, state: &EpochState) -> Result<EpochStream, ClientError> {
        // An epoch started ahead would deliver what the state says is done.
        drop(self.ahead.take(None));
        let stream = self.start(state.epoch, Some(state))?;
        self.metrics.set_current(&stream.watch.counters);
        Ok(stream)
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
        let items = plan.items.len();
        let item_samples = plan.samples().map(|n| n / plan.items.len().max(1) as u64);
        let planned = plan.samples();
        let sequencer = Sequencer::new(
            items,
            self.config.deterministic,
            resumed.map_or(&[][..], |s| &s.done_items),
        );
        let (event_tx, event_rx) = mpsc::channel(self.config.batch_size.max(64));
        let template = Arc::new(
            wire::ItemTemplate::new(
                &self.config.dataset,
                self.config.seed,
                epoch,
                &self.config.transform,
                self.config.chunk_bytes,
            )
            .with_format(self.format, &self.config.record)
            .with_fields(&self.config.fields)
            .with_views(&self.config.views)
            .with_device_sink(self.sink.clone()),
        );
        let lanes = self.workers.start_epoch(|workers| {
            let limits: Vec<(String, CreditLimit)> = workers.iter().map(|w| (w.addr.clone(), w.limit)).collect();
            let ledger = Arc::new(Ledger::new(plan.items.clone(), &limits));
            let (done, partial): (&[u32], &[(u32, PositionSet)]) = match resumed {
                Some(s) => (&s.done_items, &s.partial),
                None => (&[], &[]),
            };
            ledger.resume(done, partial);
            let addrs: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
            let counters = Arc::new(EpochCounters::new(&addrs, planned, &self.metrics));
            let lanes = Arc::new(EpochLanes::new(
                ledger,
                counters,
                Arc::clone(&self.config),
                template,
                &event_tx,
                item_samples,
            ));
            if self.config.deterministic {
                // The items expected in flight bound the window.
                let in_flight: usize = workers.iter().map(|w| lanes.expected_items(w.limit)).sum();
                lanes.ledger.set_window(2 * in_flight);
                // A resumed epoch starts past the items delivered whole.
                lanes.ledger.advance(sequencer.head());
            }
            for (i, w) in workers.iter().enumerate() {
                if !w.active {
                    let source = w.source.as_deref().unwrap_or("its dns name");
                    lanes.ledger.retire(i, &format!("no longer an address of {source}"));
                }
                lanes.spawn(i, w, &event_tx);
            }
            lanes
        });
        drop(event_tx);
        let counters = Arc::clone(&lanes.counters);
        let ledger = Arc::clone(&lanes.ledger);
        let ledger_view = Arc::clone(&ledger);
        let (batch_tx, batch_rx) = mpsc::channel(self.config.prefetch.max(1));
        let assembler = Assembler::new(
            epoch,
            self.config.transform.size,
            self.config.batch_size,
            self.config.last_batch,
            target,
            resumed.map_or(0, |s| s.batches),
            self.buffers.clone(),
        )
        .with_views(
            self.config
                .views
                .iter()
                .map(|v| (v.name.clone(), v.transform.size.side().unwrap_or(0)))
                .collect(),
        )
        .grouped_by_aspect(self.config.aspect_ratio_grouping);
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
        Ok(EpochStream {
            rx: batch_rx,
            epoch,
            items: ledger_view,
            watch: EpochWatch {
                counters,
                progress: Arc::new(Mutex::new(Progress::new(epoch, fingerprint, resumed))),
                shards: items,
            },
        })
    }
}

/// The batches of one epoch, in arrival order.
#[derive(Debug)]
pub struct EpochStream {
    rx: mpsc::Receiver<Result<Batch, ClientError>>,
    epoch: u64,
    /// The epoch's items: whether all are in.
    items: Arc<Ledger>,
    watch: EpochWatch,
}

/// A view of an epoch's progress that other threads can hold while the
/// stream waits for a batch: its state and its report.
#[derive(Debug, Clone)]
pub struct EpochWatch {
    counters: Arc<EpochCounters>,
    progress: Arc<Mutex<Progress>>,
    shards: usize,
}

/// Adds the time since its start to the consumer's wait when dropped.
struct WaitClock<'a>(&'a EpochCounters, Instant);

impl Drop for WaitClock<'_> {
    fn drop(&mut self) {
        self.0.add_wait(self.1.elapsed());
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if let Some(task) = &self.discovery {
            task.abort();
        }
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

/// What starting the next epoch ahead asks of a stream: its epoch, and
/// whether every item of it is in (or it failed), so that what remains is
/// delivering batches already made.
impl Started for EpochStream {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn items_finished(&self) -> bool {
        self.items.is_finished()
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
        self.counters.report(self.shards)
    }
}

/// `dataset` as workers must read it: a relative local path names a folder
/// under the client's working directory (where the user gave it), never
/// the worker's, so it is made absolute here when every worker is on this
/// host, and refused otherwise; URIs and absolute paths are kept as given.
fn absolute_dataset(dataset: &str, workers: &[String]) -> Result<String, ClientError> {
    match stoker_core::DatasetUri::parse(dataset) {
        Ok(stoker_core::DatasetUri::Local(path)) if path.is_relative() => {
            if let Some(remote) = workers.iter().find(|w| !on_this_host(w)) {
                return Err(ClientError::Config(format!(
                    "dataset {dataset:?} is a relative path, which only workers on this host could read as this \
                     process means it, but worker {remote} may be elsewhere: give an absolute path as the workers \
                     see it, or an s3:// URI"
                )));
            }
            std::path::absolute(&path)
                .map(|p| p.display().to_string())
                .map_err(|e| ClientError::Config(format!("cannot make the dataset path {dataset} absolute: {e}")))
        }
        _ => Ok(dataset.to_owned()),
    }
}

/// Whether a worker entry is surely on this host: the local workers, a
/// Unix socket, a loopback address.
fn on_this_host(entry: &str) -> bool {
    if entry == LOCAL || entry.starts_with(stoker_proto::transport::UNIX_SCHEME) {
        return true;
    }
    let hostport = entry.split_once("://").map_or(entry, |(_, rest)| rest);
    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::absolute_dataset;

    #[test]
    fn a_relative_dataset_path_is_the_clients() {
        let cwd = std::env::current_dir().unwrap();
        let here = [
            "local",
            "unix:/run/w.sock",
            "127.0.0.1:50051",
            "http://[::1]:1",
            "localhost:9",
        ]
        .map(String::from);
        assert_eq!(
            absolute_dataset("ds/wds", &here).unwrap(),
            cwd.join("ds/wds").display().to_string()
        );
        for kept in ["/data/shards", "s3://bucket/train/", "file:///data/x", "s3://b"] {
            assert_eq!(absolute_dataset(kept, &here).unwrap(), kept);
            assert_eq!(absolute_dataset(kept, &["10.0.0.5:50051".into()]).unwrap(), kept);
        }
        for elsewhere in ["10.0.0.5:50051", "dns://pool:50051", "https://w.example:443"] {
            let workers = [here[0].clone(), elsewhere.to_owned()];
            let err = absolute_dataset("ds/wds", &workers).unwrap_err().to_string();
            assert!(err.contains("relative path") && err.contains(elsewhere), "{err}");
        }
    }
}
