//! The gRPC edge of the worker: requests become domain items, chunks become
//! protobuf messages, errors become status codes. Nothing past this module
//! sees a protobuf type.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use stoker_core::{DatasetUri, Secret};
use stoker_proto::pb::worker_server::{Worker, WorkerServer};
use stoker_proto::{pb, spec_from_pb};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};
use tracing::info;

use crate::pipeline::{Chunk, Item, ItemError, WorkerContext, run_item};
use crate::storage::StorageError;

/// Largest request accepted (a work item with a long skip list).
const MAX_REQUEST_BYTES: usize = 64 << 20;
/// Largest chunk the worker will accept as a target size.
const MAX_CHUNK_BYTES: u32 = 64 << 20;

/// The `stoker.v1.Worker` service.
#[derive(Debug, Clone)]
pub struct WorkerService {
    ctx: Arc<WorkerContext>,
}

impl WorkerService {
    pub fn new(ctx: Arc<WorkerContext>) -> Self {
        Self { ctx }
    }
}

fn storage_status(err: &StorageError) -> Status {
    let msg = err.to_string();
    match err {
        StorageError::NotFound(_) | StorageError::Empty(_) => Status::not_found(msg),
        StorageError::Denied { .. } => Status::permission_denied(msg),
        StorageError::BadIndex { .. } => Status::failed_precondition(msg),
        StorageError::Transient { .. } | StorageError::Io { .. } => Status::unavailable(msg),
    }
}

fn item_status(err: &ItemError) -> Status {
    match err {
        ItemError::Storage(e) => storage_status(e),
        ItemError::Read { .. } | ItemError::Pool(_) => Status::unavailable(err.to_string()),
    }
}

fn chunk_to_pb(chunk: Chunk) -> pb::SampleChunk {
    pb::SampleChunk {
        samples: chunk
            .samples
            .into_iter()
            .map(|s| pb::Sample {
                key: s.key,
                label: s.label,
                height: s.height,
                width: s.width,
                channels: 3,
                pixels: Bytes::from(s.pixels),
            })
            .collect(),
        skipped: chunk
            .skipped
            .into_iter()
            .map(|s| pb::SkippedSample {
                key: s.key,
                reason: s.reason,
            })
            .collect(),
        done: chunk.done,
        shard_error: chunk.shard_error.unwrap_or_default(),
    }
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
        let uri = parse_dataset(&request.get_ref().dataset)?;
        let (shards, indexed) = self
            .ctx
            .storage
            .list_shards(&uri)
            .await
            .map_err(|e| storage_status(&e))?;
        info!(dataset = %uri, shards = shards.len(), indexed, "described dataset");
        Ok(Response::new(pb::DescribeDatasetResponse {
            shards: shards.iter().map(pb::ShardInfo::from).collect(),
            indexed,
        }))
    }

    type ProcessShardStream = ChunkStream;

    async fn process_shard(
        &self,
        request: Request<pb::WorkItem>,
    ) -> Result<Response<Self::ProcessShardStream>, Status> {
        let peer = request.remote_addr();
        let req = request.into_inner();
        let dataset = parse_dataset(&req.dataset)?;
        let spec = spec_from_pb(req.transform.as_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if req.shard.is_empty() {
            return Err(Status::invalid_argument("work item names no shard"));
        }
        if req.chunk_bytes > MAX_CHUNK_BYTES {
            return Err(Status::invalid_argument(format!(
                "chunk_bytes {} exceeds the limit of {MAX_CHUNK_BYTES}",
                req.chunk_bytes
            )));
        }
        let chunk_bytes = match req.chunk_bytes {
            0 => self.ctx.config.chunk_bytes,
            n => n as usize,
        };
        let item = Item {
            dataset,
            shard: req.shard,
            seed: req.seed,
            epoch: req.epoch,
            spec: Arc::new(spec),
            skip: req.skip_keys.into_iter().collect::<HashSet<_>>(),
            chunk_bytes,
        };
        info!(
            shard = %item.dataset.join(&item.shard),
            epoch = item.epoch,
            skip = item.skip.len(),
            peer = ?peer,
            "work item started"
        );
        let (tx, rx) = mpsc::channel::<Result<Chunk, ItemError>>(2);
        tokio::spawn(run_item(Arc::clone(&self.ctx), item, tx));
        let stream = ReceiverStream::new(rx).map(|r| r.map(chunk_to_pb).map_err(|e| item_status(&e)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn info(&self, _request: Request<pb::InfoRequest>) -> Result<Response<pb::InfoResponse>, Status> {
        Ok(Response::new(pb::InfoResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            device: "cpu".to_owned(),
            threads: self.ctx.pool.threads() as u32,
        }))
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
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
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

/// Serves the worker on `listener` until `shutdown` resolves. With a
/// `token`, every worker request must carry it.
///
/// HTTP/2 is tuned for bulk transfer: 16 MiB frames, tens of MiB of stream
/// and connection window, TCP_NODELAY. grpc.health.v1 reports SERVING.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<WorkerContext>,
    token: Option<Secret>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<WorkerServer<WorkerService>>().await;
    let token_required = token.is_some();
    let check = TokenCheck {
        expected: token.map(|t| t.expose().as_bytes().to_vec()),
    };
    let service = tonic::service::interceptor::InterceptedService::new(
        WorkerServer::new(WorkerService::new(ctx)).max_decoding_message_size(MAX_REQUEST_BYTES),
        check,
    );
    info!(addr = ?addr, token_required, "worker serving");
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_frame_size(Some((16 << 20) - 1))
        .initial_stream_window_size(Some(32 << 20))
        .initial_connection_window_size(Some(64 << 20))
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(health_service)
        .add_service(service)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}
