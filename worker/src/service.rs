//! The gRPC edge of the worker: requests become domain items, chunks become
//! protobuf messages, errors become status codes. Nothing past this module
//! (and `chained`) sees a protobuf type.
//!
//! Here: request validation, status codes, HTTP/2 tuning, grpc.health.v1,
//! [`TokenCheck`] (the interceptor that requires the bearer token,
//! constant-time, on the worker service but not on health), the
//! `--allow-dataset` check of every request that names a dataset before
//! storage is touched (`allow`), and the drain: [`serve`] turns health
//! NOT_SERVING on shutdown, `Drain` refuses new items and counts those in
//! progress, and past the grace period ends them with UNAVAILABLE.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use stoker_core::{
    DatasetUri, FieldSpec, FormatChoice, ItemMode, PositionSet, Secret, ShardFormat, ViewSpec, validate_fields,
    validate_views,
};
use stoker_proto::pb::worker_server::{Worker, WorkerServer};
use stoker_proto::{pb, spec_from_pb};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use crate::allow::{AllowList, Denied};
use crate::catalog;
use crate::chained::Chained;
use crate::listen::Listener;
use crate::pipeline::{Chunk, Item, ItemError, WorkerContext, run_item};
use crate::rings::{RingWriter, Rings};
use crate::tls::ServerTls;
use stoker_cuda::handoff::Sink;
use stoker_proto::transport::{self, MAX_CHUNK_BYTES, MAX_REQUEST_BYTES};
use stoker_storage::StorageError;

/// The `stoker.v1.Worker` service.
#[derive(Debug, Clone)]
pub struct WorkerService {
    ctx: Arc<WorkerContext>,
    drain: Arc<Drain>,
    /// The datasets this worker may read.
    allow: Arc<AllowList>,
    /// Clients' shared-memory rings on this host, and the identity a
    /// client compares with its own to offer one.
    rings: Arc<Rings>,
    host: Arc<str>,
}

impl WorkerService {
    pub fn new(ctx: Arc<WorkerContext>, allow: AllowList) -> Self {
        Self {
            ctx,
            drain: Arc::new(Drain::new()),
            allow: Arc::new(allow),
            rings: Arc::new(Rings::default()),
            host: stoker_shm::host_identity().into(),
        }
    }

    /// The dataset to read for a request naming `uri` (and `shard` of it,
    /// for a work item), or PERMISSION_DENIED naming it when it lies
    /// outside `--allow-dataset`: checked before storage is touched.
    async fn allowed(
        &self,
        uri: &DatasetUri,
        shard: Option<&str>,
        peer: Option<SocketAddr>,
    ) -> Result<DatasetUri, Status> {
        let checked = match shard {
            Some(name) => self.allow.check_shard(uri, name).await,
            None => self.allow.check_dataset(uri).await,
        };
        checked.map_err(|e: Denied| {
            warn!(dataset = %e.dataset, peer = ?peer, "dataset refused: outside --allow-dataset");
            Status::permission_denied(e.to_string())
        })
    }

    /// The device sink a work item offers, and the attempt's tag, when
    /// this worker can fill it: the sink is open in this process, on the
    /// device the GPU lanes run on, and the item processes its samples
    /// (not a doctor's measuring mode, nor a `--replay` worker, which keeps
    /// results for later). Otherwise pixels go as usual.
    fn device_sink(&self, offered: Option<pb::DeviceSink>, mode: ItemMode, shard: &str) -> Option<(Arc<Sink>, u32)> {
        let offered = offered.filter(|o| o.id != 0 && o.tag != 0)?;
        if mode != ItemMode::Process || self.ctx.config.replay {
            return None;
        }
        let sink = Sink::find(offered.id)?;
        let lanes = self.ctx.gpu.as_ref()?.info().device.ordinal;
        if sink.ordinal() != lanes {
            debug!(
                shard,
                sink = sink.ordinal(),
                lanes,
                "device sink on another device: pixels to the host"
            );
            return None;
        }
        Some((sink, offered.tag))
    }
}

/// Work in progress and the shutdown state of a worker.
///
/// Shutting down is two steps: [`Drain::begin`] refuses new items while
/// those in progress go on; [`Drain::abort`] ends the ones still running
/// with UNAVAILABLE, so the client hands their rest to another worker.
#[derive(Debug)]
struct Drain {
    draining: AtomicBool,
    active: AtomicUsize,
    idle: Notify,
    abort: watch::Sender<bool>,
}

/// Counts one item in progress until dropped.
struct ActiveItem(Arc<Drain>);

impl Drop for ActiveItem {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    fn new() -> Self {
        Self {
            draining: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            abort: watch::Sender::new(false),
        }
    }

    /// Registers a new item, or `None` while shutting down.
    fn start(self: &Arc<Self>) -> Option<ActiveItem> {
        self.active.fetch_add(1, Ordering::AcqRel);
        let guard = ActiveItem(Arc::clone(self));
        // Checked after counting, so `begin` then `wait_idle` cannot miss an
        // item that slipped in between.
        (!self.draining.load(Ordering::Acquire)).then_some(guard)
    }

    fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    fn begin(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Waits until no item is in progress; false if `limit` passed first.
    async fn wait_idle(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let notified = self.idle.notified();
                if self.active() == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await
        .is_ok()
    }

    fn abort(&self) {
        self.abort.send_replace(true);
    }
}

fn storage_status(err: &StorageError) -> Status {
    let msg = err.to_string();
    match err {
        StorageError::NotFound(_) | StorageError::Empty { .. } => Status::not_found(msg),
        StorageError::MixedFormats { .. } => Status::invalid_argument(msg),
        StorageError::Denied { .. } => Status::permission_denied(msg),
        // The worker's own set-up: another worker like it would fail alike.
        StorageError::BadIndex { .. }
        | StorageError::BadRecordIndex { .. }
        | StorageError::Certificate { .. }
        | StorageError::Ca(_) => Status::failed_precondition(msg),
        StorageError::Transient { .. } | StorageError::Io { .. } => Status::unavailable(msg),
    }
}

fn item_status(err: &ItemError) -> Status {
    match err {
        ItemError::Storage(e) => storage_status(e),
        ItemError::Read { .. } | ItemError::Pool(_) | ItemError::Gpu(_) | ItemError::ShutDown { .. } => {
            Status::unavailable(err.to_string())
        }
    }
}

/// A work item's use of its client's shared ring.
#[derive(Debug)]
enum ItemRing {
    /// None offered (or the item sends no pixels).
    Inline,
    Writer(RingWriter),
    /// Offered, and refused for this reason: said on the first chunk.
    Refused(Option<String>),
}

impl ItemRing {
    /// The ring a work item offers, mapped, or why not.
    fn offered(rings: &Rings, ring: Option<pb::SharedRing>, mode: ItemMode, shard: &str) -> Self {
        match ring {
            Some(r) if mode == ItemMode::Process => match rings.attach(&r.path, &r.nonce, r.tag) {
                Ok(writer) => Self::Writer(writer),
                Err(reason) => {
                    debug!(shard, reason = %reason, "shared ring refused: pixels inline");
                    Self::Refused(Some(reason))
                }
            },
            _ => Self::Inline,
        }
    }
}

fn chunk_to_pb(
    mut chunk: Chunk,
    mode: ItemMode,
    ring: &mut ItemRing,
    sink: Option<&(Arc<Sink>, u32)>,
) -> pb::SampleChunk {
    if mode == ItemMode::Decode {
        // Processed, then counted instead of sent: the doctor's decode
        // stage, without the transport.
        chunk.read_samples = chunk.samples.len() as u64;
        chunk.read_bytes = chunk.payload_bytes as u64;
        chunk.samples.clear();
    }
    pb::SampleChunk {
        samples: chunk
            .samples
            .into_iter()
            .map(|s| {
                // Left on the device for a client in this process: only
                // the ticket goes (`on_device` is set only with a sink,
                // which the stream holds).
                // A put after the client ended the attempt is refused (and
                // the pixels freed): nobody reads this stream any more.
                let device_ticket = match (s.device, sink) {
                    (Some(pixels), Some((sink, tag))) => sink.put(*tag, pixels),
                    (Some(_), None) => {
                        warn!(key = %s.key, "a sample left on the device has no sink: sent without pixels");
                        None
                    }
                    (None, _) => None,
                };
                // Into the client's ring when it has a free slot: the copy
                // replaces the encode and both socket copies.
                let ring_slot = match ring {
                    ItemRing::Writer(writer) if device_ticket.is_none() => writer.write(&s.pixels),
                    _ => None,
                };
                pb::Sample {
                    key: s.key,
                    label: s.label,
                    height: s.height,
                    width: s.width,
                    channels: 3,
                    pixels: if ring_slot.is_some() { Bytes::new() } else { s.pixels },
                    position: s.position,
                    fields: s.fields.into_iter().map(stoker_proto::value_to_pb).collect(),
                    ring_slot,
                    device_ticket,
                }
            })
            .collect(),
        skipped: chunk
            .skipped
            .into_iter()
            .map(|s| pb::SkippedSample {
                key: s.key,
                reason: s.reason,
                position: s.position,
            })
            .collect(),
        done: chunk.done,
        shard_error: chunk.shard_error.take().unwrap_or_default(),
        read_samples: chunk.read_samples,
        read_bytes: chunk.read_bytes,
        ring_refused: match ring {
            ItemRing::Refused(reason) => reason.take().unwrap_or_default(),
            _ => String::new(),
        },
    }
}

/// A work item's fields, checked (names, kinds, sources for `format`)
/// before any work, with each `auto` kind of a WebDataset field resolved
/// from its extension.
fn item_fields(extra: Vec<pb::FieldRequest>, format: ShardFormat) -> Result<Vec<FieldSpec>, Status> {
    let fields = extra
        .into_iter()
        .map(stoker_proto::field_from_pb)
        .collect::<Result<Vec<_>, String>>()
        .map_err(Status::invalid_argument)?;
    validate_fields(&fields, Some(format)).map_err(|e| Status::invalid_argument(e.to_string()))?;
    fields
        .into_iter()
        .map(|f| {
            let kind = f
                .resolved(format)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            Ok(FieldSpec { kind, ..f })
        })
        .collect()
}

fn parse_dataset(s: &str) -> Result<DatasetUri, Status> {
    DatasetUri::parse(s).map_err(|e| Status::invalid_argument(e.to_string()))
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::SampleChunk, Status>> + Send>>;

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn describe_dataset(
        &self,
        request: Request<pb::DescribeDatasetRequest>,
    ) -> Result<Response<pb::DescribeDatasetResponse>, Status> {
        let peer = request.remote_addr();
        let req = request.get_ref();
        let uri = parse_dataset(&req.dataset)?;
        let choice = stoker_proto::format_from_pb(req.format)
            .ok_or_else(|| Status::invalid_argument(format!("unknown shard format {}", req.format)))?;
        let uri = self.allowed(&uri, None, peer).await?;
        let listing = catalog::list_shards(&self.ctx.storage, &uri, choice)
            .await
            .map_err(|e| storage_status(&e))?;
        info!(
            dataset = %uri,
            shards = listing.shards.len(),
            indexed = listing.indexed,
            format = %listing.format,
            "described dataset"
        );
        Ok(Response::new(pb::DescribeDatasetResponse {
            shards: listing.shards.iter().map(pb::ShardInfo::from).collect(),
            indexed: listing.indexed,
            format: pb::ShardFormat::from(listing.format) as i32,
            pack_report: listing.pack_report.lines(),
        }))
    }

    type ProcessShardStream = ChunkStream;

    async fn process_shard(
        &self,
        request: Request<pb::WorkItem>,
    ) -> Result<Response<Self::ProcessShardStream>, Status> {
        let peer = request.remote_addr();
        let Some(active) = self.drain.start() else {
            return Err(Status::unavailable("worker is shutting down and takes no new work"));
        };
        let req = request.into_inner();
        let dataset = parse_dataset(&req.dataset)?;
        let spec = spec_from_pb(req.transform.as_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if req.shard.is_empty() {
            return Err(Status::invalid_argument("work item names no shard"));
        }
        let dataset = self.allowed(&dataset, Some(&req.shard), peer).await?;
        if req.chunk_bytes > MAX_CHUNK_BYTES {
            return Err(Status::invalid_argument(format!(
                "chunk_bytes {} exceeds the limit of {MAX_CHUNK_BYTES}",
                req.chunk_bytes
            )));
        }
        if req.end != 0 && req.end <= req.start {
            return Err(Status::invalid_argument(format!(
                "work item for shard {} has an empty sample range: start {} is not below end {}",
                req.shard, req.start, req.end
            )));
        }
        let mode = stoker_proto::mode_from_pb(req.mode)
            .ok_or_else(|| Status::invalid_argument(format!("unknown work item mode {}", req.mode)))?;
        if mode == ItemMode::Synthetic && req.end == 0 {
            return Err(Status::invalid_argument(format!(
                "synthetic work item for shard {} has no sample range",
                req.shard
            )));
        }
        if mode == ItemMode::Synthetic && spec.size.side().is_none() {
            return Err(Status::invalid_argument(format!(
                "synthetic work item for shard {}: its samples are of one square size, and the transform keeps each image's own",
                req.shard
            )));
        }
        let chunk_bytes = match req.chunk_bytes {
            0 => self.ctx.config.chunk_bytes,
            n => n as usize,
        };
        // AUTO in a work item is what clients before the field sent.
        let format = match stoker_proto::format_from_pb(req.format) {
            Some(FormatChoice::Given(format)) => format,
            Some(FormatChoice::Auto) => ShardFormat::WebDataset,
            None => {
                return Err(Status::invalid_argument(format!(
                    "unknown shard format {} for shard {}",
                    req.format, req.shard
                )));
            }
        };
        let mut ring = ItemRing::offered(&self.rings, req.ring, mode, &req.shard);
        let sink = self.device_sink(req.device_sink, mode, &req.shard);
        let extra = item_fields(req.extra, format)?;
        let views = req
            .views
            .into_iter()
            .map(stoker_proto::view_from_pb)
            .collect::<Result<Vec<ViewSpec>, String>>()
            .map_err(Status::invalid_argument)?;
        validate_views(&views, &extra).map_err(|e| Status::invalid_argument(e.to_string()))?;
        stoker_core::validate_targets(&extra, &spec).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let item = Item {
            dataset,
            shard: req.shard,
            seed: req.seed,
            epoch: req.epoch,
            spec: Arc::new(spec),
            skip: PositionSet::from_ranges(req.skip.iter().map(|r| r.start..r.end)),
            chunk_bytes,
            start: req.start,
            end: (req.end != 0).then_some(req.end),
            mode,
            format,
            record: stoker_proto::fields_from_pb(req.fields),
            fields: extra.into(),
            views: views.into(),
            on_device: sink.is_some(),
        };
        info!(
            shard = %item.dataset.join(&item.shard),
            epoch = item.epoch,
            skip = item.skip.len(),
            start = item.start,
            end = ?item.end,
            peer = ?peer,
            "work item started"
        );
        let (tx, rx) = mpsc::channel::<Result<Chunk, ItemError>>(2);
        let mut abort = self.drain.abort.subscribe();
        let ctx = Arc::clone(&self.ctx);
        let client = ctx.clients.enter(peer.map(|a| a.ip()));
        tokio::spawn(async move {
            let _active = (active, client);
            let shard = item.dataset.join(&item.shard);
            let aborted = tx.clone();
            tokio::select! {
                () = run_item(ctx, item, tx) => {}
                () = async {
                    // The guard `wait_for` returns is not `Send`: drop it here.
                    let _ = abort.wait_for(|a| *a).await;
                } => {
                    warn!(shard = %shard, "shutting down: item handed back unfinished");
                    let _ = aborted.send(Err(ItemError::ShutDown { shard })).await;
                }
            }
        });
        let stream = ReceiverStream::new(rx).map(move |r| {
            r.map(|c| chunk_to_pb(c, mode, &mut ring, sink.as_ref()))
                .map_err(|e| item_status(&e))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn info(&self, _request: Request<pb::InfoRequest>) -> Result<Response<pb::InfoResponse>, Status> {
        let mut info = pb::InfoResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            device: "cpu".to_owned(),
            threads: self.ctx.pool.threads() as u32,
            samples: self.ctx.counters.samples.load(Ordering::Relaxed),
            inflight_samples: self.ctx.inflight_samples(),
            cpu_samples: self.ctx.counters.cpu_samples.load(Ordering::Relaxed),
            cpu_jpeg_samples: self.ctx.counters.cpu_jpegs.load(Ordering::Relaxed),
            host: self.host.to_string(),
            ..Default::default()
        };
        if let Some(gpu) = &self.ctx.gpu {
            info.device = "cuda".to_owned();
            info.gpu = gpu.info().to_string();
            info.gpu_samples = gpu.counters.images.load(Ordering::Relaxed);
            info.gpu_to_cpu = gpu.counters.to_cpu.load(Ordering::Relaxed);
            let memory = gpu
                .memory()
                .map_err(|e| Status::internal(format!("cannot read gpu memory: {e}")))?;
            info.gpu_memory_bytes = memory.reserved;
            info.gpu_memory_peak_bytes = memory.reserved_high;
            info.gpu_memory_in_use_bytes = memory.used;
        }
        Ok(Response::new(info))
    }
}

/// Checks `authorization: Bearer <token>` on every worker request when the
/// worker has a token, comparing in constant time. Health checks stay open
/// (load balancers and Kubernetes probes carry no token).
#[derive(Clone)]
pub struct TokenCheck {
    expected: Option<Vec<u8>>,
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCheck")
            .field("required", &self.expected.is_some())
            .finish()
    }
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let presented = request
            .metadata()
            .get(transport::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(transport::bearer_token)
            .unwrap_or("");
        // Constant time in the content: a wrong byte anywhere costs the same.
        // (`ct_eq` returns early only on a length mismatch.)
        use subtle::ConstantTimeEq;
        if bool::from(presented.as_bytes().ct_eq(expected)) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("missing or invalid bearer token"))
        }
    }
}

/// How a worker serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Every worker request must carry this bearer token.
    pub token: Option<Secret>,
    /// Serve TLS (and require client certificates when it says so).
    pub tls: Option<ServerTls>,
    /// After `shutdown`, how long items in progress may run before they are
    /// ended and handed back to the client.
    pub grace: Duration,
    /// The datasets requests may name (`--allow-dataset`); others are
    /// PERMISSION_DENIED, unread.
    pub allow: AllowList,
}

/// Default grace period of a drain (`--grace-period`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            token: None,
            tls: None,
            grace: DEFAULT_GRACE,
            allow: AllowList::everything(),
        }
    }
}

/// Connections accepted on `listener`, with TCP_NODELAY set. (The
/// server's `tcp_nodelay` applies only to listeners it binds itself; with
/// Nagle's algorithm on, the small frames that end a work item — its last
/// chunk's tail, the trailers — waited for the client's delayed ACK, about
/// 40 ms an item, which `stoker doctor` showed as a rate limit.)
fn incoming_nodelay(
    listener: TcpListener,
) -> impl Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send + 'static {
    TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        if let Err(e) = conn.set_nodelay(true) {
            warn!(error = %e, "cannot set tcp_nodelay on a client connection");
        }
        Ok(conn)
    })
}

/// How long open connections get to close after the last item ended.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the worker on `listener` until `shutdown` resolves, then drains:
/// grpc.health.v1 turns NOT_SERVING, new items are refused with
/// UNAVAILABLE, items in progress get `options.grace` to finish, and
/// whatever is still running then ends with UNAVAILABLE so the client
/// reassigns its rest. Returns once the connections are closed.
///
/// HTTP/2 is tuned for bulk transfer ([`stoker_proto::transport`]), with
/// TCP_NODELAY.
pub async fn serve(
    listener: impl Into<Listener>,
    ctx: Arc<WorkerContext>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let listener = listener.into();
    let addr = listener
        .address()
        .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string());
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<WorkerServer<WorkerService>>().await;
    let token_required = options.token.is_some();
    let check = TokenCheck {
        expected: options.token.as_ref().map(|t| t.expose().as_bytes().to_vec()),
    };
    let allowed_datasets = options.allow.to_string();
    let worker = WorkerService::new(ctx, options.allow);
    let drain = Arc::clone(&worker.drain);
    // ProcessShard's pixels are chained into the response, not copied
    // (`chained`); the other calls are tonic's.
    let worker = Arc::new(worker);
    let service = tonic::service::interceptor::InterceptedService::new(
        Chained::new(
            Arc::clone(&worker),
            WorkerServer::from_arc(worker).max_decoding_message_size(MAX_REQUEST_BYTES),
        ),
        check,
    );
    let tls = options
        .tls
        .as_ref()
        .map(|t| if t.requires_client_cert() { "mutual" } else { "server" });
    info!(
        %addr,
        token_required,
        tls = tls.unwrap_or("off"),
        allowed_datasets,
        "worker serving"
    );
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let mut builder = tonic::transport::Server::builder();
    if let Some(t) = &options.tls {
        builder = builder.tls_config(t.config())?;
    }
    let router = builder
        .tcp_nodelay(true)
        .max_frame_size(Some(transport::HTTP2_MAX_FRAME_BYTES))
        .initial_stream_window_size(Some(transport::HTTP2_STREAM_WINDOW_BYTES))
        .initial_connection_window_size(Some(transport::HTTP2_CONNECTION_WINDOW_BYTES))
        .http2_keepalive_interval(Some(transport::HTTP2_KEEPALIVE))
        .http2_keepalive_timeout(Some(transport::HTTP2_KEEPALIVE))
        .add_service(health_service)
        .add_service(service);
    let stopped = async {
        let _ = stop_rx.await;
    };
    // The socket file (for `unix:`) lives as long as the server.
    let (server, _socket_file): (Pin<Box<dyn Future<Output = _> + Send>>, _) = match listener {
        Listener::Tcp(l) => (
            Box::pin(router.serve_with_incoming_shutdown(incoming_nodelay(l), stopped)),
            None,
        ),
        Listener::Unix(l, file) => (
            Box::pin(router.serve_with_incoming_shutdown(UnixListenerStream::new(l), stopped)),
            Some(file),
        ),
    };
    let mut server = server;
    tokio::select! {
        result = &mut server => return result,
        () = shutdown => {}
    }

    drain.begin();
    health.set_not_serving::<WorkerServer<WorkerService>>().await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    info!(
        active = drain.active(),
        grace_s = options.grace.as_secs_f64(),
        "draining"
    );
    if !drain.wait_idle(options.grace).await {
        warn!(
            active = drain.active(),
            "grace period over, handing back unfinished items"
        );
        drain.abort();
        drain.wait_idle(CLOSE_TIMEOUT).await;
    }
    let _ = stop_tx.send(());
    match tokio::time::timeout(CLOSE_TIMEOUT, &mut server).await {
        Ok(result) => result,
        Err(_) => {
            warn!("connections still open after shutdown, closing them");
            Ok(())
        }
    }
}
