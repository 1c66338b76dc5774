//! Prometheus metrics endpoints, one home for what the worker and the
//! client share: the `--metrics-listen` address rule, the HTTP endpoint
//! that serves a [`Registry`] at `/metrics` in the Prometheus text format,
//! and the latency buckets. A `--metrics-listen` port alone means
//! loopback ([`listen_addr`]); [`bind`] binds at start, so a port in use
//! is an error then; [`serve`] answers over axum.
//!
//! Each side owns its own registry and metric names (`stoker_worker_*` in
//! the worker, `stoker_client_*` in the client); nothing here is global, so
//! several workers or loaders can live in one process.

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
pub use prometheus_client;
use prometheus_client::encoding::prometheus_text;
pub use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// The path metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// Histogram buckets, in seconds, for the latency of a pipeline stage: from
/// 100 µs (decoding a small image) to 30 s (a slow S3 read).
pub const STAGE_SECONDS_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

/// Why the metrics endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics address {addr:?} is not HOST:PORT or PORT")]
    BadAddress { addr: String },
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Where `--metrics-listen VALUE` listens: `HOST:PORT`, or `PORT` alone
/// (and `:PORT`) for loopback, so that metrics are only exposed beyond the
/// host when a host is given.
pub fn listen_addr(value: &str) -> Result<SocketAddr, MetricsError> {
    let bad = || MetricsError::BadAddress { addr: value.to_owned() };
    let port_only = value.strip_prefix(':').unwrap_or(value);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    value.to_socket_addrs().map_err(|_| bad())?.next().ok_or_else(bad)
}

/// Binds the metrics listener now, so that a port in use is an error at
/// start rather than a warning later.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, MetricsError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// Serves `registry` at [`METRICS_PATH`] on `listener` until `shutdown`
/// resolves. Every other path is 404.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new().route(METRICS_PATH, get(scrape)).with_state(registry);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Spawns [`serve`] on the current runtime for as long as the process (or
/// the runtime) lives; a failure is logged.
pub fn spawn(listener: TcpListener, registry: Arc<Registry>) {
    let addr = listener.local_addr().ok();
    tokio::spawn(async move {
        if let Err(e) = serve(listener, registry, std::future::pending()).await {
            tracing::warn!(addr = ?addr, error = %e, "metrics endpoint stopped");
        }
    });
}

async fn scrape(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let mut body = String::with_capacity(8 << 10);
    match prometheus_text::encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}

/// The text a registry scrapes to, for reports and tests.
pub fn render(registry: &Registry) -> String {
    let mut body = String::new();
    // Writing to a String cannot fail; a metric's own encoder could, and
    // then the text ends where it failed.
    let _ = prometheus_text::encode(&mut body, registry);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_listens_on_loopback_and_a_host_is_kept() {
        assert_eq!(listen_addr("9100").unwrap(), "127.0.0.1:9100".parse().unwrap());
        assert_eq!(listen_addr(":9100").unwrap(), "127.0.0.1:9100".parse().unwrap());
        assert_eq!(listen_addr("0.0.0.0:9100").unwrap(), "0.0.0.0:9100".parse().unwrap());
        assert_eq!(listen_addr("[::1]:9100").unwrap(), "[::1]:9100".parse().unwrap());
        let err = listen_addr("nine").unwrap_err().to_string();
        assert!(err.contains("\"nine\""), "{err}");
    }

    #[tokio::test]
    async fn a_port_in_use_names_the_address() {
        let first = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = first.local_addr().unwrap();
        let err = bind(addr).await.unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot listen for metrics on {addr}: ")),
            "{err}"
        );
    }
}
