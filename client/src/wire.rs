//! The client's gRPC edge: connections, and checked conversions of what
//! workers send into domain samples.

use std::time::Duration;

use bytes::Bytes;
use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use tonic::transport::{Channel, Endpoint};

/// Largest message accepted from a worker (one chunk).
pub(crate) const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// A sample as received, checked against the expected shape.
#[derive(Debug)]
pub(crate) struct Sample {
    pub key: String,
    pub label: i64,
    pub pixels: Bytes,
}

/// An endpoint with the HTTP/2 settings bulk transfer needs. The channel
/// connects lazily and reconnects on its own.
pub(crate) fn channel(addr: &str, connect_timeout: Duration) -> Result<Channel, String> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    let endpoint = Endpoint::from_shared(uri).map_err(|e| format!("invalid worker address {addr:?}: {e}"))?;
    Ok(endpoint
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(32 << 20))
        .initial_connection_window_size(Some(64 << 20))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true)
        .connect_lazy())
}

pub(crate) fn client(channel: Channel) -> WorkerClient<Channel> {
    WorkerClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
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
    })
}
