//! `ProcessShard` answered with the samples' pixels chained into the
//! response, not copied into an encode buffer (as tonic's generated route
//! would): [`Chained`] wraps the generated `WorkerServer` and takes that one
//! path; every other call goes through to it. Messages are framed by
//! [`stoker_proto::chained::encode_chunk`], plain gRPC on the wire.
//!
//! The request is decoded and the item started by the service's own
//! `process_shard`, so validation, the allow list, the drain and the
//! status codes are one code path; the interceptor in front (the token)
//! has already run. The stream's end or error is sent as trailers, as
//! tonic does.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt, stream};
use http_body::Frame;
use http_body_util::{BodyExt, Limited, StreamBody};
use stoker_proto::chained::{FrameError, MessageReader, PREFIX_BYTES, encode_chunk};
use stoker_proto::pb;
use stoker_proto::pb::worker_server::{Worker, WorkerServer};
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;

/// The path of the call this route answers itself.
const PROCESS_SHARD: &str = "/stoker.v1.Worker/ProcessShard";

/// The chunks a work item streams, as the service's `process_shard` gives
/// them.
type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::SampleChunk, Status>> + Send>>;

/// The worker's gRPC service with `ProcessShard`'s response chained.
#[derive(Debug)]
pub(crate) struct Chained<T> {
    service: Arc<T>,
    inner: WorkerServer<T>,
}

impl<T> Clone for Chained<T> {
    fn clone(&self) -> Self {
        Self {
            service: Arc::clone(&self.service),
            inner: self.inner.clone(),
        }
    }
}

impl<T: Worker> Chained<T> {
    /// `service`, whose other calls `inner` (made from the same `Arc`)
    /// answers.
    pub(crate) fn new(service: Arc<T>, inner: WorkerServer<T>) -> Self {
        Self { service, inner }
    }
}

impl<T> NamedService for Chained<T> {
    const NAME: &'static str = stoker_proto::transport::WORKER_SERVICE;
}

impl<T> tower_service::Service<http::Request<Body>> for Chained<T>
where
    T: Worker<ProcessShardStream = ChunkStream>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower_service::Service::<http::Request<Body>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != PROCESS_SHARD {
            return Box::pin(self.inner.call(request));
        }
        let service = Arc::clone(&self.service);
        Box::pin(async move {
            Ok(match start(&*service, request).await {
                Ok(chunks) => respond(chunks),
                Err(status) => status.into_http(),
            })
        })
    }
}

/// Reads the work item (bounded) and starts it through the service.
async fn start<T: Worker<ProcessShardStream = ChunkStream>>(
    service: &T,
    request: http::Request<Body>,
) -> Result<ChunkStream, Status> {
    let (parts, body) = request.into_parts();
    let limit = stoker_proto::transport::MAX_REQUEST_BYTES;
    let body = Limited::new(body, limit + PREFIX_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Status::out_of_range(format!("work item over the limit of {limit} bytes"))
            } else {
                Status::cancelled(format!("reading the work item: {e}"))
            }
        })?
        .to_bytes();
    let mut reader = MessageReader::new(limit);
    reader.push(body);
    let item = reader
        .next_message::<pb::WorkItem>()
        .map_err(|e| match e {
            FrameError::Compressed => Status::unimplemented("work item: compressed requests are not supported"),
            FrameError::TooLarge { .. } => Status::out_of_range(format!("work item: {e}")),
            _ => Status::invalid_argument(format!("work item: {e}")),
        })?
        .ok_or_else(|| Status::invalid_argument("work item: the request ended before a whole message"))?;
    let request = tonic::Request::from_http(http::Request::from_parts(parts, item));
    Ok(service.process_shard(request).await?.into_inner())
}

/// The chunks as gRPC frames, then trailers with the status.
fn respond(chunks: ChunkStream) -> http::Response<Body> {
    let frames = chunks
        .map(Some)
        .chain(stream::once(async { None }))
        .scan(false, |ended, next| {
            if *ended {
                return futures::future::ready(None);
            }
            let frames: Vec<Frame<Bytes>> = match next {
                Some(Ok(chunk)) => encode_chunk(chunk).into_iter().map(Frame::data).collect(),
                Some(Err(status)) => {
                    *ended = true;
                    vec![trailers(&status)]
                }
                None => {
                    *ended = true;
                    vec![trailers(&Status::ok(""))]
                }
            };
            futures::future::ready(Some(stream::iter(frames.into_iter().map(Ok::<_, Infallible>))))
        })
        .flatten();
    let mut response = http::Response::new(Body::new(StreamBody::new(frames)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// `status` as gRPC trailers.
fn trailers(status: &Status) -> Frame<Bytes> {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // A message that cannot be a header value: the code alone.
        let _ = Status::new(status.code(), "").add_header(&mut map);
    }
    Frame::trailers(map)
}
