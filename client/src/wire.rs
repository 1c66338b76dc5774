//! The client's gRPC edge: connections, and checked conversions of what
//! workers send into domain samples.

use std::time::Duration;

use bytes::Bytes;
use stoker_core::Secret;

use crate::tls::TlsOptions;
use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// HTTP/2 connections a client opens to each worker; its lanes share
/// them round-robin.
pub(crate) const CONNECTIONS_PER_WORKER: usize = 4;

/// Largest message accepted from a worker (one chunk).
pub(crate) const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// A sample as received, checked against the expected shape.
#[derive(Debug)]
pub(crate) struct Sample {
    pub key: String,
    pub label: i64,
    pub pixels: Bytes,
    /// Position in its shard.
    pub position: u64,
    /// The plan item it belongs to (set by the lane that received it).
    pub item: u32,
}

/// An endpoint with the HTTP/2 settings bulk transfer needs: large frames
/// and flow-control windows, TCP_NODELAY. The channel
/// connects lazily and reconnects on its own. With `tls`, a bare
/// `host:port` means `https://host:port`.
pub(crate) fn channel(addr: &str, connect_timeout: Duration, tls: Option<&TlsOptions>) -> Result<Channel, String> {
    let uri = match (addr.contains("://"), tls.is_some()) {
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
        // Workers may send frames of up to 16 MiB (the default is 16 KiB,
        // ten frames and their bookkeeping per 224x224 image).
        .max_frame_size(Some((16 << 20) - 1))
        .initial_stream_window_size(Some(32 << 20))
        .initial_connection_window_size(Some(64 << 20))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20))
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
            request.metadata_mut().insert("authorization", h.clone());
        }
        Ok(request)
    }
}

/// A worker client with the configured token.
pub(crate) type Client = WorkerClient<InterceptedService<Channel, Auth>>;

/// The worker's grpc.health.v1 client (health checks need no token, but
/// carry it anyway: a proxy in front of the worker may want it).
pub(crate) type HealthClient = tonic_health::pb::health_client::HealthClient<InterceptedService<Channel, Auth>>;

/// The service name workers report health for.
pub(crate) const WORKER_SERVICE: &str = "stoker.v1.Worker";

pub(crate) fn health_client(channel: Channel, token: Option<&Secret>) -> Result<HealthClient, String> {
    Ok(tonic_health::pb::health_client::HealthClient::with_interceptor(
        channel,
        auth(token)?,
    ))
}

fn auth(token: Option<&Secret>) -> Result<Auth, String> {
    let header = token
        .map(|t| {
            let mut v = MetadataValue::try_from(format!("Bearer {}", t.expose()))
                .map_err(|_| "token is not a valid header value".to_owned())?;
            v.set_sensitive(true);
            Ok::<_, String>(v)
        })
        .transpose()?;
    Ok(Auth { header })
}

pub(crate) fn client(channel: Channel, token: Option<&Secret>) -> Result<Client, String> {
    Ok(WorkerClient::with_interceptor(channel, auth(token)?).max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// Checks one wire sample: shape and byte count must match the transform.
pub(crate) fn sample_from_pb(s: pb::Sample, size: u32) -> Result<Sample, String> {
    if (s.height, s.width, s.channels) != (size, size, 3) {
        return Err(format!(
            "sample {} has shape {}x{}x{}, expected {size}x{size}x3",
            s.key, s.height, s.width, s.channels
        ));
    }
    let expected = size as usize * size as usize * 3;
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
    })
}
