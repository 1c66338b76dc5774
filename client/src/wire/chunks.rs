//! `ProcessShard` called over the channel directly: the request framed
//! here, the response's data frames kept as they arrive and decoded by
//! [`MessageReader`], so a sample's pixels are a slice of the frame they
//! came in. The call is plain gRPC: headers, one message, a stream of
//! messages, trailers with the status (or a trailers-only answer); an HTTP
//! status other than 200 is mapped to a code as gRPC does. Each
//! message becomes a [`Chunk`], whose samples are checked as they are
//! taken.

use http_body_util::{BodyExt, Full};
use stoker_proto::chained::{MessageReader, encode_message};
use stoker_proto::pb;
use stoker_proto::transport::MAX_RESPONSE_BYTES;
use tonic::body::Body;
use tonic::service::interceptor::ResponseBody;
use tonic::{Code, Status};
use tower_service::Service;

use super::auth::Authed;
use crate::ring::RingOffer;
use crate::sample::{Sample, Skipped};
use stoker_core::{FieldSpec, ImageSize, ViewSpec};
use stoker_cuda::handoff::SinkOffer;

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

/// One chunk of a work item's results.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Checked when taken ([`Chunk::take_samples`]).
    samples: Vec<pb::Sample>,
    pub skipped: Vec<Skipped>,
    /// The item's last chunk.
    pub done: bool,
    /// Set on the last chunk when the shard's data ended early or was
    /// corrupt (names the shard and the offset); empty otherwise.
    pub shard_error: String,
    /// Items of the doctor's `Read` and `Decode` modes: samples handled and
    /// bytes read or produced, counted instead of sent.
    pub read_samples: u64,
    pub read_bytes: u64,
    /// Why the worker could not use the ring the item offered; empty
    /// otherwise.
    pub ring_refused: String,
}

impl Chunk {
    /// Takes the chunk's samples, each checked against the transform's
    /// output `size`, the `fields` and the `views` asked for, in the order
    /// they came; pixels a worker wrote into the item's `ring` are taken
    /// from it, those it left on the device from the loader's `sink`.
    pub fn take_samples<'a>(
        &mut self,
        size: ImageSize,
        fields: &[FieldSpec],
        views: &[ViewSpec],
        ring: Option<&'a RingOffer>,
        sink: Option<&'a SinkOffer>,
    ) -> impl ExactSizeIterator<Item = Result<Sample, String>> + use<'a> {
        let fields = fields.len();
        // A view ends at a fixed square (`validate_views`).
        let view_sizes: Vec<u32> = views.iter().map(|v| v.transform.size.side().unwrap_or(0)).collect();
        std::mem::take(&mut self.samples)
            .into_iter()
            .map(move |s| sample_from_pb(s, size, fields, &view_sizes, ring, sink))
    }

    /// Samples of the chunk whose pixels lie in the ring.
    pub fn ring_samples(&self) -> usize {
        self.samples.iter().filter(|s| s.ring_slot.is_some()).count()
    }

    /// Samples of the chunk whose pixels were left on the device.
    pub fn device_samples(&self) -> usize {
        self.samples.iter().filter(|s| s.device_ticket.is_some()).count()
    }
}

/// Checks one wire sample: shape and byte count must match the transform
/// (for a transform that keeps each image's size, the sample's own shape
/// and its bytes).
fn sample_from_pb(
    mut s: pb::Sample,
    size: ImageSize,
    fields: usize,
    views: &[u32],
    ring: Option<&RingOffer>,
    sink: Option<&SinkOffer>,
) -> Result<Sample, String> {
    if s.fields.len() != fields + views.len() {
        return Err(format!(
            "sample {} has {} fields, {fields} and {} views were asked for",
            s.key,
            s.fields.len(),
            views.len()
        ));
    }
    let mut values: Vec<Option<stoker_core::FieldValue>> = s
        .fields
        .into_iter()
        .map(stoker_proto::value_from_pb)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("sample {}: {e}", s.key))?;
    let mut view_pixels = Vec::with_capacity(views.len());
    for (j, (value, &side)) in values.drain(fields..).zip(views).enumerate() {
        let expected = side as usize * side as usize * 3;
        match value {
            Some(stoker_core::FieldValue::Image(pixels)) if pixels.len() == expected => view_pixels.push(pixels),
            other => {
                let got = other.as_ref().map_or(0, stoker_core::FieldValue::byte_len);
                return Err(format!(
                    "sample {} view {j}: expected {expected} pixel bytes ({side}x{side}x3), got {got}",
                    s.key
                ));
            }
        }
    }
    let shape_ok = match size {
        ImageSize::Square(side) => (s.height, s.width) == (side, side),
        ImageSize::Each => s.height > 0 && s.width > 0,
    };
    if !shape_ok || s.channels != 3 {
        return Err(format!(
            "sample {} has shape {}x{}x{}, expected {size}, 3 channels",
            s.key, s.height, s.width, s.channels
        ));
    }
    let expected = usize::try_from(u64::from(s.height) * u64::from(s.width) * 3)
        .map_err(|_| format!("sample {} has shape {}x{}x3, too large here", s.key, s.height, s.width))?;
    let mut device = None;
    if let Some(ticket) = s.device_ticket {
        let sink = sink.ok_or_else(|| {
            format!(
                "sample {} names device ticket {ticket}, but no device sink was offered",
                s.key
            )
        })?;
        if !s.pixels.is_empty() || s.ring_slot.is_some() {
            return Err(format!(
                "sample {} names device ticket {ticket} and carries pixels or a ring slot too",
                s.key
            ));
        }
        let pixels = sink.take(ticket).ok_or_else(|| {
            format!(
                "sample {} names device ticket {ticket}, which holds nothing this item left",
                s.key
            )
        })?;
        if pixels.len() != expected {
            return Err(format!(
                "sample {} left {} pixel bytes on the device, expected {expected}",
                s.key,
                pixels.len()
            ));
        }
        device = Some(pixels);
    }
    if let Some(slot) = s.ring_slot {
        let ring = ring.ok_or_else(|| format!("sample {} names ring slot {slot}, but no ring was offered", s.key))?;
        if !s.pixels.is_empty() {
            return Err(format!(
                "sample {} names ring slot {slot} and carries pixels too",
                s.key
            ));
        }
        s.pixels = ring
            .take(slot, expected)
            .map_err(|e| format!("sample {}: {e}", s.key))?;
    }
    if device.is_none() && s.pixels.len() != expected {
        return Err(format!(
            "sample {} has {} pixel bytes, expected {expected}",
            s.key,
            s.pixels.len()
        ));
    }
    Ok(Sample {
        key: s.key,
        label: s.label,
        height: s.height,
        width: s.width,
        pixels: s.pixels,
        position: s.position,
        item: 0,
        fields: values,
        views: view_pixels,
        device,
    })
}
