//! What both ends of a `stoker.v1` connection must agree on beyond the
//! messages: HTTP/2 tuning for bulk transfer, the bearer-token header, the
//! service name health is reported for, and the message size limits.

use std::time::Duration;

/// The service name workers report on grpc.health.v1 and clients ask about.
pub const WORKER_SERVICE: &str = "stoker.v1.Worker";

/// Largest HTTP/2 frame either end accepts: 16 MiB (the maximum the protocol
/// allows) instead of the 16 KiB default, which cut a 224×224 image into ten
/// frames with their bookkeeping.
pub const HTTP2_MAX_FRAME_BYTES: u32 = (16 << 20) - 1;
/// Initial flow-control window of one stream: room for a few chunks in
/// flight on each work item.
pub const HTTP2_STREAM_WINDOW_BYTES: u32 = 32 << 20;
/// Initial flow-control window of a connection, shared by its streams.
pub const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 64 << 20;
/// HTTP/2 PING interval, and how long a PING may go unanswered before the
/// connection is considered dead.
pub const HTTP2_KEEPALIVE: Duration = Duration::from_secs(20);

/// Largest request a worker accepts (a work item with a long skip list).
pub const MAX_REQUEST_BYTES: usize = 64 << 20;
/// Largest chunk size a client may ask a worker for.
pub const MAX_CHUNK_BYTES: u32 = 64 << 20;
/// Largest message a client accepts from a worker: a chunk of the largest
/// size asked for may overshoot it by one sample, which may be large.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// The scheme of a worker address that is a Unix domain socket:
/// `unix:/run/user/1000/stoker/worker-0.sock`.
pub const UNIX_SCHEME: &str = "unix:";

/// The metadata key that carries the token.
pub const AUTHORIZATION: &str = "authorization";

/// The `authorization` header value for `token`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The token in an `authorization` header value, if it is a bearer token.
pub fn bearer_token(header: &str) -> Option<&str> {
    header.strip_prefix("Bearer ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_header_round_trips() {
        assert_eq!(bearer_token(&bearer("s3cret")), Some("s3cret"));
        assert_eq!(bearer_token("Basic abc"), None);
    }
}
