//! `ProcessShard` called over the channel directly: the request framed
//! here, the response's data frames kept as they arrive and decoded by
//! [`MessageReader`], so a sample's pixels are a slice of the frame they
//! came in. The call is plain gRPC: headers, one message, a stream of
//! messages, trailers with the status (or a trailers-only answer).

use http_body_util::{BodyExt, Full};
use stoker_proto::chained::{MessageReader, encode_message};
use stoker_proto::pb;
use stoker_proto::transport::MAX_RESPONSE_BYTES;
use tonic::body::Body;
use tonic::service::interceptor::ResponseBody;
use tonic::{Code, Status};
use tower_service::Service;

use super::{Authed, Chunk, Skipped};

const PROCESS_SHARD: &str = "/stoker.v1.Worker/ProcessShard";

/// The chunks a worker streams back for one work item.
pub(crate) struct Chunks {
    body: ResponseBody<Body>,
    /// A trailers-only answer's status, from the headers.
    header_status: Option<Status>,
    reader: MessageReader,
    /// The trailers (or the body's end) have been read.
    ended: bool,
}

impl std::fmt::Debug for Chunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunks")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// Sends `item` and reads the response's headers.
pub(super) async fn start(channel: &mut Authed, item: pb::WorkItem) -> Result<Chunks, Status> {
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(PROCESS_SHARD)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(Body::new(Full::new(encode_message(&item))))
        .map_err(|e| Status::internal(format!("building the work item request: {e}")))?;
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    let response = channel.call(request).await.map_err(|e| Status::from_error(e.into()))?;
    let (parts, body) = response.into_parts();
    if parts.status != http::StatusCode::OK {
        return Err(http_status(parts.status));
    }
    let grpc = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !grpc {
        return Err(Status::unknown(format!(
            "the answer is not gRPC (content-type {:?}): is this address a stoker worker?",
            parts.headers.get(http::header::CONTENT_TYPE)
        )));
    }
    // A trailers-only answer: the status is in the headers.
    let header_status = Status::from_header_map(&parts.headers);
    if let Some(status) = header_status.as_ref()
        && status.code() != Code::Ok
    {
        return Err(status.clone());
    }
    Ok(Chunks {
        body,
        header_status,
        reader: MessageReader::new(MAX_RESPONSE_BYTES),
        ended: false,
    })
}

/// gRPC's mapping of an HTTP status that is not 200 to a code.
fn http_status(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("the worker answered HTTP {status}, not gRPC"))
}

impl Chunks {
    /// The next chunk; `None` when the worker ended the stream.
    pub async fn next(&mut self) -> Result<Option<Chunk>, Status> {
        loop {
            let message = self
                .reader
                .next_message::<pb::SampleChunk>()
                .map_err(|e| Status::internal(format!("worker's stream: {e}")))?;
            if let Some(c) = message {
                return Ok(Some(chunk(c)));
            }
            if self.ended {
                return Ok(None);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.reader.push(data),
                    Err(frame) => {
                        self.ended = true;
                        let trailers = frame.into_trailers().unwrap_or_default();
                        self.end(Status::from_header_map(&trailers))?;
                    }
                },
                Some(Err(status)) => return Err(status),
                None => {
                    self.ended = true;
                    self.end(self.header_status.clone())?;
                }
            }
        }
    }

    /// The stream's end: its status, and no message cut short.
    fn end(&self, status: Option<Status>) -> Result<(), Status> {
        match status {
            Some(s) if s.code() != Code::Ok => Err(s),
            Some(_) => self
                .reader
                .finish()
                .map_err(|e| Status::internal(format!("worker's stream: {e}"))),
            None => Err(Status::internal("the worker's stream ended without a grpc status")),
        }
    }
}

fn chunk(c: pb::SampleChunk) -> Chunk {
    Chunk {
        samples: c.samples,
        skipped: c
            .skipped
            .into_iter()
            .map(|s| Skipped {
                key: s.key,
                reason: s.reason,
                position: s.position,
            })
            .collect(),
        done: c.done,
        shard_error: c.shard_error,
        read_samples: c.read_samples,
        read_bytes: c.read_bytes,
        ring_refused: c.ring_refused,
    }
}
