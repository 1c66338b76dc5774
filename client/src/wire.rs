//! The client's gRPC edge: connections, the calls the client makes, and
//! checked conversions between protobuf messages and the client's own
//! types. Only this module names `stoker_proto::pb` (or the health
//! service's messages); the rest of the crate speaks in
//! [`Sample`](crate::sample::Sample), [`Skipped`](crate::sample::Skipped),
//! [`ShardRef`] and the requests built here. The token on every call is
//! `auth`'s; `ProcessShard`'s hand-framed stream and its checked chunks
//! are `chunks`'. Channels use `stoker_proto::transport`'s settings, with
//! [`CONNECTIONS_PER_WORKER`] connections per worker.

mod auth;
mod chunks;

use std::sync::Arc;
use std::time::Duration;

use stoker_core::{
    FieldSpec, FormatChoice, PositionSet, RecordFields, Secret, ShardFormat, ShardRef, TransformSpec, ViewSpec,
};
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

use crate::ring::RingOffer;
use crate::tls::TlsOptions;
use auth::{Auth, Authed, auth};
use stoker_cuda::handoff::{Sink, SinkOffer};
use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use stoker_proto::transport;
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
    /// What `stoker pack` left out or flagged, a line per kind.
    pub pack_report: Vec<String>,
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
            pack_report: described.pack_report,
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
    /// The loader's device sink, offered to every worker: only one in this
    /// process, whose lanes run on the sink's device, fills it.
    sink: Option<Arc<Sink>>,
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
            sink: None,
        }
    }

    /// The same requests, offering `sink` (the loader's, when it uploads
    /// to a device), a tag of its own for each attempt.
    pub fn with_device_sink(mut self, sink: Option<Arc<Sink>>) -> Self {
        self.sink = sink;
        self
    }

    /// A new attempt's offer of the loader's device sink, if it has one:
    /// what the attempt leaves there and nobody takes is freed when the
    /// offer is dropped.
    pub fn sink_offer(&self) -> Option<SinkOffer> {
        self.sink.as_ref().map(Sink::offer)
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
    /// The same request, offering the worker this client's device sink
    /// under the attempt's tag.
    pub fn with_device_sink(mut self, offer: Option<&SinkOffer>) -> Self {
        self.0.device_sink = offer.map(|o| pb::DeviceSink {
            id: o.sink_id(),
            tag: o.tag(),
        });
        self
    }

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
