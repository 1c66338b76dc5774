//! A worker's grpc.health.v1 status, as container HEALTHCHECKs, load
//! balancers and Kubernetes probes ask it (`stoker health`).

use std::time::Duration;

use crate::error::{ClientError, describe_status};
use crate::tls::TlsOptions;
use crate::wire;

/// Whether the worker at `addr` serves work: `Ok(true)` when it answers
/// SERVING, `Ok(false)` when it answers otherwise (shutting down), an error
/// naming the address when it does not answer within `timeout`. Health
/// checks need no token; `https://` addresses are verified against the
/// system's roots.
pub async fn worker_health(addr: &str, timeout: Duration) -> Result<bool, ClientError> {
    let default_tls = TlsOptions::default();
    let tls = addr.starts_with("https://").then_some(&default_tls);
    let channel = wire::channel(addr, timeout, tls).map_err(ClientError::Config)?;
    let mut health = wire::health_client(channel, None).map_err(ClientError::Config)?;
    match tokio::time::timeout(timeout, health.serving()).await {
        Err(_) => Err(ClientError::Unreachable(format!(
            "{addr}: no health answer within {}s",
            timeout.as_secs_f64()
        ))),
        Ok(Err(status)) => Err(ClientError::Unreachable(format!(
            "{addr}: {}",
            describe_status(&status)
        ))),
        Ok(Ok(serving)) => Ok(serving),
    }
}
