//! The client's gRPC edge: connections, the calls the client makes, and
//! checked conversions between protobuf messages and the client's own
//! types. Only this module names `stoker_proto::pb` (or the health
//! service's messages); the rest of the crate speaks in [`Sample`],
//! [`Skipped`], [`ShardRef`] and the requests built here.

mod chunks;

use std::time::Duration;

use stoker_core::{
    FieldSpec, FormatChoice, PositionSet, RecordFields, Secret, ShardFormat, ShardRef, TransformSpec, ViewSpec,
};
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

use crate::ring::RingOffer;
use crate::sample::{Sample, Skipped};
use crate::tls::TlsOptions;
use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use stoker_proto::transport;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// HTTP/2 connections a client opens to each worker; its lanes share
/// them round-robin.
pub(crate) const CONNECTIONS_PER_WORKER: usize = 4;

/// An endpoint with the HTTP/2 settings bulk transfer needs
/// ([`stoker_proto::transport`]), TCP_NODELAY. The channel
/// connects lazily and reconnects on its own. With `tls`, a bare
/// `host:port` means `https://host:port`.
pub(crate) fn channel(addr: &str, connect_timeout: Duration, tls: Option<&TlsOptions>) -> Result<Channel, String> {
    let unix = addr.starts_with(transport::UNIX_SCHEME);
    let tls = tls.filter(|_| !unix);
    let uri = match (addr.contains("://") || unix, tls.is_some()) {
        (true, _) => addr.to_owned(),
        (false, true) => format!("https://{addr}"),
        (false, false) => format!("http://{addr}"),
    };
    let mut endpoint = Endpoint::from_shared(uri).map_err(|e| format!("invalid worker address {addr:?}: {e}"))?;
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls.config())
            .map_err(|e| format!("tls settings for worker {addr}: {e}"))?;
    }
    Ok(endpoint
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .max_frame_size(Some(transport::HTTP2_MAX_FRAME_BYTES))
        .initial_stream_window_size(Some(transport::HTTP2_STREAM_WINDOW_BYTES))
        .initial_connection_window_size(Some(transport::HTTP2_CONNECTION_WINDOW_BYTES))
        .http2_keep_alive_interval(transport::HTTP2_KEEPALIVE)
        .keep_alive_timeout(transport::HTTP2_KEEPALIVE)
        .keep_alive_while_idle(true)
        .connect_lazy())
}

/// Adds `authorization: Bearer <token>` to every request when configured.
#[derive(Clone)]
pub(crate) struct Auth {
    header: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            request.metadata_mut().insert(transport::AUTHORIZATION, h.clone());
        }
        Ok(request)
    }
}

/// A channel with the token added to every request.
type Authed = InterceptedService<Channel, Auth>;

/// A worker client with the configured token: tonic's generated client,
/// and the same channel for `ProcessShard`'s hand-framed stream.
#[derive(Clone)]
pub(crate) struct Client {
    rpc: WorkerClient<Authed>,
    raw: Authed,
}

/// The worker's grpc.health.v1 client (health checks need no token, but
/// carry it anyway: a proxy in front of the worker may want it).
#[derive(Clone)]
pub(crate) struct HealthClient(tonic_health::pb::health_client::HealthClient<InterceptedService<Channel, Auth>>);

/// The service name workers report health for.
pub(crate) use transport::WORKER_SERVICE;

pub(crate) fn health_client(channel: Channel, token: Option<&Secret>) -> Result<HealthClient, String> {
    Ok(HealthClient(
        tonic_health::pb::health_client::HealthClient::with_interceptor(channel, auth(token)?),
    ))
}

fn auth(token: Option<&Secret>) -> Result<Auth, String> {
    let header = token
        .map(|t| {
            let mut v = MetadataValue::try_from(transport::bearer(t.expose()))
                .map_err(|_| "token is not a valid header value".to_owned())?;
            v.set_sensitive(true);
            Ok::<_, String>(v)
        })
        .transpose()?;
    Ok(Auth { header })
}

pub(crate) fn client(channel: Channel, token: Option<&Secret>) -> Result<Client, String> {
    let auth = auth(token)?;
    Ok(Client {
        rpc: WorkerClient::with_interceptor(channel.clone(), auth.clone())
            .max_decoding_message_size(transport::MAX_RESPONSE_BYTES),
        raw: InterceptedService::new(channel, auth),
    })
}

/// A worker's `Info`, as far as the client acts on it.
#[derive(Debug)]
pub(crate) struct WorkerInfo {
    /// The samples it asks to have in flight; 0 from a worker too old to say.
    pub inflight_samples: u64,
    /// Its host, for the shared-memory ring; empty from older workers.
    pub host: String,
}

/// A dataset as a worker describes it.
#[derive(Debug)]
pub(crate) struct Dataset {
    /// Sorted by name.
    pub shards: Vec<ShardRef>,
    /// Whether sample counts came from the dataset's index file.
    pub indexed: bool,
    /// The format the worker listed the shards as.
    pub format: ShardFormat,
}

impl Client {
    /// Lists `dataset` through this worker, its shards in `format`.
    pub async fn describe_dataset(&mut self, dataset: &str, format: FormatChoice) -> Result<Dataset, tonic::Status> {
        let request = pb::DescribeDatasetRequest {
            dataset: dataset.to_owned(),
            format: pb::ShardFormat::from(format) as i32,
        };
        let described = self.rpc.describe_dataset(request).await?.into_inner();
        let format = match stoker_proto::format_from_pb(described.format) {
            Some(FormatChoice::Given(format)) => format,
            // A worker from before formats lists WebDataset only.
            Some(FormatChoice::Auto) => ShardFormat::WebDataset,
            None => {
                return Err(tonic::Status::unimplemented(format!(
                    "the worker listed {dataset} in a shard format this client does not know ({})",
                    described.format
                )));
            }
        };
        Ok(Dataset {
            shards: described.shards.into_iter().map(ShardRef::from).collect(),
            indexed: described.indexed,
            format,
        })
    }

    /// What the worker says of itself that the client acts on.
    pub async fn info(&mut self) -> Result<WorkerInfo, tonic::Status> {
        let info = self.rpc.info(pb::InfoRequest::default()).await?.into_inner();
        Ok(WorkerInfo {
            inflight_samples: info.inflight_samples,
            host: info.host,
        })
    }

    /// Starts one work item; its results stream back as [`Chunks`],
    /// read by [`stoker_proto::chained`]: pixels that arrive in one HTTP/2
    /// frame are slices of it, never copied into a decode buffer (tonic's
    /// generated call would copy every frame).
    pub async fn process_shard(&mut self, request: WorkRequest) -> Result<Chunks, tonic::Status> {
        chunks::start(&mut self.raw, request.0).await
    }
}

impl HealthClient {
    /// Whether the worker's grpc.health.v1 service says it serves work.
    pub async fn serving(&mut self) -> Result<bool, tonic::Status> {
        let request = HealthCheckRequest {
            service: WORKER_SERVICE.to_owned(),
        };
        let answer = self.0.check(request).await?;
        Ok(answer.get_ref().status == ServingStatus::Serving as i32)
    }
}

/// What every work item of an epoch asks alike (dataset, seed, epoch,
/// transform, chunk size), converted to the wire once per epoch.
#[derive(Debug)]
pub(crate) struct ItemTemplate {
    base: pb::WorkItem,
}

impl ItemTemplate {
    pub fn new(dataset: &str, seed: u64, epoch: u64, transform: &TransformSpec, chunk_bytes: u32) -> Self {
        Self {
            base: pb::WorkItem {
                dataset: dataset.to_owned(),
                seed,
                epoch,
                transform: Some(stoker_proto::spec_to_pb(transform)),
                chunk_bytes,
                ..pb::WorkItem::default()
            },
        }
    }

    /// The same requests for shards in `format`, read with `fields`.
    pub fn with_format(mut self, format: ShardFormat, fields: &RecordFields) -> Self {
        self.base.format = pb::ShardFormat::from(format) as i32;
        self.base.fields = Some(pb::RecordFields::from(fields));
        self
    }

    /// The same requests, asking for the samples' `extra` fields too.
    pub fn with_fields(mut self, extra: &[FieldSpec]) -> Self {
        self.base.extra = extra.iter().map(pb::FieldRequest::from).collect();
        self
    }

    /// The same requests, asking for more `views` of each image too.
    pub fn with_views(mut self, views: &[ViewSpec]) -> Self {
        self.base.views = views.iter().map(pb::ViewRequest::from).collect();
        self
    }

    /// The same requests in `mode` (`stoker doctor`'s stages).
    pub fn with_mode(mut self, mode: stoker_core::ItemMode) -> Self {
        self.base.mode = pb::ItemMode::from(mode) as i32;
        self
    }

    /// The request for the samples of `shard` from position `start` up to
    /// `end` (the shard's end with `None`), less the positions in `skip`.
    pub fn request(&self, shard: &str, skip: &PositionSet, start: u64, end: Option<u64>) -> WorkRequest {
        WorkRequest(pb::WorkItem {
            shard: shard.to_owned(),
            skip: skip
                .ranges()
                .iter()
                .map(|r| pb::PositionRange {
                    start: r.start,
                    end: r.end,
                })
                .collect(),
            start,
            end: end.unwrap_or(0),
            ..self.base.clone()
        })
    }
}

/// One work item, ready to send ([`ItemTemplate::request`]).
#[derive(Debug)]
pub(crate) struct WorkRequest(pb::WorkItem);

impl WorkRequest {
    /// The same request, offering the worker this client's ring.
    pub fn with_ring(mut self, offer: Option<&RingOffer>) -> Self {
        self.0.ring = offer.map(|o| pb::SharedRing {
            path: o.path.clone(),
            nonce: o.nonce.to_vec(),
            tag: o.tag.tag(),
        });
        self
    }
}

pub(crate) use chunks::Chunks;

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
    /// from it.
    pub fn take_samples<'a>(
        &mut self,
        size: u32,
        fields: &[FieldSpec],
        views: &[ViewSpec],
        ring: Option<&'a RingOffer>,
    ) -> impl ExactSizeIterator<Item = Result<Sample, String>> + use<'a> {
        let fields = fields.len();
        let view_sizes: Vec<u32> = views.iter().map(|v| v.transform.size).collect();
        std::mem::take(&mut self.samples)
            .into_iter()
            .map(move |s| sample_from_pb(s, size, fields, &view_sizes, ring))
    }

    /// Samples of the chunk whose pixels lie in the ring.
    pub fn ring_samples(&self) -> usize {
        self.samples.iter().filter(|s| s.ring_slot.is_some()).count()
    }
}

/// Checks one wire sample: shape and byte count must match the transform.
fn sample_from_pb(
    mut s: pb::Sample,
    size: u32,
    fields: usize,
    views: &[u32],
    ring: Option<&RingOffer>,
) -> Result<Sample, String> {
    if s.fields.len() != fields + views.len() {
        return Err(format!(
            "sample {} has {} fields, {fields} and {} views were asked for",
            s.key,
            s.fields.len(),
            views.len()
        ));
    }
    let mut values: Vec<Option<stoker_core::FieldValue>> =
        s.fields.into_iter().map(stoker_proto::value_from_pb).collect();
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
    if (s.height, s.width, s.channels) != (size, size, 3) {
        return Err(format!(
            "sample {} has shape {}x{}x{}, expected {size}x{size}x3",
            s.key, s.height, s.width, s.channels
        ));
    }
    let expected = size as usize * size as usize * 3;
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
    if s.pixels.len() != expected {
        return Err(format!(
            "sample {} has {} pixel bytes, expected {expected}",
            s.key,
            s.pixels.len()
        ));
    }
    Ok(Sample {
        key: s.key,
        label: s.label,
        pixels: s.pixels,
        position: s.position,
        item: 0,
        fields: values,
        views: view_pixels,
    })
}
