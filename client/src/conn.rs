//! One worker's connections: the gRPC clients its lanes, probes and
//! `Info` requests use, and the credit it asks for.
//!
//! Both [`dispatch`](crate::dispatch) (an epoch's lanes) and
//! [`workers`](crate::workers) (the loader's set of workers) use a
//! [`WorkerConn`]; it depends on neither, so `workers` → `dispatch` →
//! `conn` runs one way.

use std::sync::Arc;

use crate::config::{DEFAULT_INFLIGHT_ITEMS, LoaderConfig};
use crate::error::ClientError;
use crate::ledger::CreditLimit;
use crate::ring::{RingRoute, SharedRing};
use crate::tls::TlsOptions;
use crate::wire::{self, Client};

/// One worker's connections.
#[derive(Clone)]
pub(crate) struct WorkerConn {
    pub addr: String,
    pub client: wire::Client,
    /// More connections to the same worker, for the lanes: one HTTP/2
    /// connection is served by one task at each end, which caps it below
    /// what a GPU worker sends (about 2.6 GB/s on loopback, measured).
    pub lane_clients: Vec<wire::Client>,
    pub health: wire::HealthClient,
    /// What the worker may have in flight, from the configuration or its
    /// `Info` once it answered.
    pub limit: CreditLimit,
    /// The `dns://` entry it was found by; `None` for a listed address.
    pub source: Option<String>,
    /// Among the addresses its entry has now.
    pub active: bool,
    /// Whether it writes samples into the loader's shared ring.
    pub ring: Arc<RingRoute>,
}

impl WorkerConn {
    /// Connections to `addr` (made lazily, on first use).
    pub fn open(
        addr: &str,
        config: &LoaderConfig,
        source: Option<String>,
        ring: Option<&Arc<SharedRing>>,
    ) -> Result<Self, ClientError> {
        // `https://` addresses get TLS with the system roots unless the
        // configuration says how to verify them.
        let default_tls = TlsOptions::default();
        let tls = config
            .tls
            .as_ref()
            .or_else(|| addr.starts_with("https://").then_some(&default_tls));
        let channel = wire::channel(addr, config.connect_timeout, tls).map_err(ClientError::Config)?;
        let mut lane_clients = vec![wire::client(channel.clone(), config.token.as_ref()).map_err(ClientError::Config)?];
        for _ in 1..wire::CONNECTIONS_PER_WORKER {
            let more = wire::channel(addr, config.connect_timeout, tls).map_err(ClientError::Config)?;
            lane_clients.push(wire::client(more, config.token.as_ref()).map_err(ClientError::Config)?);
        }
        Ok(Self {
            addr: addr.to_owned(),
            lane_clients,
            client: wire::client(channel.clone(), config.token.as_ref()).map_err(ClientError::Config)?,
            health: wire::health_client(channel, config.token.as_ref()).map_err(ClientError::Config)?,
            limit: CreditLimit::Items(config.inflight_per_worker.unwrap_or(DEFAULT_INFLIGHT_ITEMS)),
            source,
            active: true,
            ring: RingRoute::new(addr, ring.cloned()),
        })
    }

    /// Asks the worker its `Info`: what it needs in flight (unless the
    /// configuration fixes it) and its host (whether it gets the shared
    /// ring). A worker that does not answer keeps the default credit and
    /// the network, and is asked again when its lanes first reach it.
    pub async fn ask_info(&mut self, config: &LoaderConfig) {
        if let Some(limit) = ask_info(&mut self.client, config, &self.ring).await {
            tracing::debug!(worker = %self.addr, ?limit, "worker credit");
            self.limit = limit;
        }
    }
}

/// Asks a worker its `Info`, decides its ring `route` from it, and returns
/// the credit it asks for (samples in flight); `None` when it does not
/// answer in time, is too old to say, or the configuration fixes it.
pub(crate) async fn ask_info(client: &mut Client, config: &LoaderConfig, route: &RingRoute) -> Option<CreditLimit> {
    let info = tokio::time::timeout(config.connect_timeout, client.info())
        .await
        .ok()?
        .ok()?;
    route.decide(&info.host);
    (config.inflight_per_worker.is_none() && info.inflight_samples > 0)
        .then_some(CreditLimit::Samples(info.inflight_samples))
}
