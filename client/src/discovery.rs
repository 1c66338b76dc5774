//! Where the workers are: addresses given as they are, and `dns://NAME:PORT`
//! names resolved to every address they have (a Kubernetes headless Service,
//! a `docker compose --scale` service), again every resolve interval.
//!
//! [`WorkerSource`] is an address or `dns://NAME:PORT`; an address without
//! a port, or with an unknown scheme, is refused, naming the forms
//! expected. [`Discovery`] resolves with hickory, without a cache, from
//! `/etc/resolv.conf` or a given server.
//!
//! This module only answers "which addresses now"; the loader adds the
//! workers that appear and drains the ones that disappear
//! (`Loader::connect` and its discovery task).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

use crate::error::ClientError;

/// The scheme of a worker entry found by DNS.
pub const DNS_SCHEME: &str = "dns://";

/// One entry of the worker list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WorkerSource {
    /// An address used as given (`HOST:PORT`, `http://`, `https://`).
    Static(String),
    /// Every address `name` resolves to, at `port`.
    Dns { name: String, port: u16 },
}

impl WorkerSource {
    pub fn parse(entry: &str) -> Result<Self, ClientError> {
        let Some(rest) = entry.strip_prefix(DNS_SCHEME) else {
            check_static(entry)?;
            return Ok(Self::Static(entry.to_owned()));
        };
        let bad = |why: &str| ClientError::Config(format!("worker {entry:?}: {why}; expected dns://NAME:PORT"));
        let (name, port) = rest.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
        if name.is_empty() || name.contains('/') {
            return Err(bad("no name"));
        }
        Ok(Self::Dns {
            name: name.to_owned(),
            port,
        })
    }
}

/// A listed address: `unix:PATH`, `http(s)://HOST:PORT`, or `HOST:PORT`;
/// a missing or non-numeric port is refused here, naming the form
/// expected, rather than failing later as a bare "connection refused".
fn check_static(entry: &str) -> Result<(), ClientError> {
    const FORMS: &str = "expected HOST:PORT (e.g. 127.0.0.1:50051), unix:PATH, dns://NAME:PORT or \"local\"";
    let bad = |why: &str| Err(ClientError::Config(format!("worker {entry:?}: {why}; {FORMS}")));
    if let Some(path) = entry.strip_prefix(stoker_proto::transport::UNIX_SCHEME) {
        return if path.is_empty() { bad("no socket path") } else { Ok(()) };
    }
    let hostport = match entry.split_once("://") {
        Some(("http" | "https", rest)) => rest.trim_end_matches('/'),
        Some((scheme, _)) => return bad(&format!("unknown scheme {scheme}://")),
        None => entry,
    };
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return bad("no port");
    };
    if host.is_empty() || host.ends_with(':') {
        return bad("no host");
    }
    if port.parse::<u16>().is_err() {
        return bad(&format!("the port {port:?} is not a number"));
    }
    Ok(())
}

impl std::fmt::Display for WorkerSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Static(addr) => f.write_str(addr),
            Self::Dns { name, port } => write!(f, "{DNS_SCHEME}{name}:{port}"),
        }
    }
}

/// `HOST:PORT` of a resolved address (IPv6 in brackets), as workers are
/// named everywhere else.
pub(crate) fn worker_addr(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

/// Resolves `dns://` entries: the system's resolver configuration
/// (`/etc/resolv.conf`: its servers, search domains and ndots), or one
/// given server. Answers are never cached, so each round sees the current
/// set.
pub(crate) struct Discovery {
    resolver: TokioResolver,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

/// Why a name's addresses are unknown this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The name has these addresses (none: NXDOMAIN or no A/AAAA records).
    Found(BTreeSet<String>),
    /// The DNS server did not answer usefully (timeout, refused, SERVFAIL):
    /// the last known addresses stand.
    Failed(String),
}

impl Discovery {
    /// A resolver asking `server`, or the system's configuration when
    /// `None`.
    pub fn new(server: Option<SocketAddr>, timeout: Duration) -> Result<Self, ClientError> {
        let provider = TokioRuntimeProvider::default();
        let mut builder = match server {
            Some(addr) => {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                let ns = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
                TokioResolver::builder_with_config(ResolverConfig::from_name_servers(vec![ns]), provider)
            }
            None => TokioResolver::builder(provider)
                .map_err(|e| ClientError::Config(format!("cannot read the system's dns configuration: {e}")))?,
        };
        let options = builder.options_mut();
        options.cache_size = 0;
        options.timeout = timeout;
        options.attempts = 2;
        let resolver = builder
            .build()
            .map_err(|e| ClientError::Config(format!("cannot start the dns resolver: {e}")))?;
        Ok(Self { resolver })
    }

    /// The addresses of `name`, at `port`.
    pub async fn lookup(&self, name: &str, port: u16) -> Lookup {
        match self.resolver.lookup_ip(name).await {
            Ok(ips) => Lookup::Found(ips.iter().map(|ip| worker_addr(ip, port)).collect()),
            Err(e) if e.is_nx_domain() || e.is_no_records_found() => Lookup::Found(BTreeSet::new()),
            Err(e) => Lookup::Failed(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_addresses_or_dns_names() {
        assert_eq!(
            WorkerSource::parse("10.0.0.1:50051").unwrap(),
            WorkerSource::Static("10.0.0.1:50051".into())
        );
        assert_eq!(
            WorkerSource::parse("dns://worker.stoker.svc:50051").unwrap(),
            WorkerSource::Dns {
                name: "worker.stoker.svc".into(),
                port: 50051
            }
        );
        assert_eq!(
            WorkerSource::parse("dns://worker:50051").unwrap().to_string(),
            "dns://worker:50051"
        );
        for bad in ["dns://worker", "dns://:50051", "dns://worker:port", "dns://a/b:1"] {
            let err = WorkerSource::parse(bad).unwrap_err().to_string();
            assert!(err.contains(bad) && err.contains("dns://NAME:PORT"), "{err}");
        }
        for good in [
            "[::1]:50051",
            "http://w:1",
            "https://w.example:443/",
            "unix:/run/s.sock",
            "localhost:9",
        ] {
            assert_eq!(WorkerSource::parse(good).unwrap(), WorkerSource::Static(good.into()));
        }
        for (bad, why) in [
            ("127.0.0.1", "no port"),
            ("http://w", "no port"),
            ("w:http", "is not a number"),
            (":50051", "no host"),
            ("unix:", "no socket path"),
            ("grpc://w:1", "unknown scheme"),
        ] {
            let err = WorkerSource::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why) && err.contains("expected HOST:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn v6_addresses_are_bracketed() {
        assert_eq!(worker_addr("::1".parse().unwrap(), 7), "[::1]:7");
        assert_eq!(worker_addr("10.1.2.3".parse().unwrap(), 7), "10.1.2.3:7");
    }
}
