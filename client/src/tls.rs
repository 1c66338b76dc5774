//! TLS towards workers: the CA to verify them against, and a client
//! certificate for workers that require one.

use std::path::Path;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// How the client verifies workers, and proves who it is.
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// PEM CA certificates that worker certificates must chain to; the
    /// system's roots when `None`.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate and key to present (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Name to expect in the worker certificate, when it differs from the
    /// host in the worker address.
    pub domain: Option<String>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("TlsOptions")
            .field("custom_ca", &self.ca_pem.is_some())
            .field("client_cert", &self.identity.is_some())
            .field("domain", &self.domain)
            .finish()
    }
}

fn read(what: &str, path: &Path, expected: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    if !stoker_core::pem::has_block(&bytes, expected) {
        return Err(format!("{what} {} holds no PEM {expected}", path.display()));
    }
    Ok(bytes)
}

impl TlsOptions {
    /// Reads the CA file, and the client certificate and key when given.
    /// Errors name the file.
    pub fn from_files(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<Self, String> {
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((
                read("tls certificate", c, "CERTIFICATE")?,
                read("tls key", k, "PRIVATE KEY")?,
            )),
            (None, None) => None,
            _ => return Err("a client certificate needs both a certificate and a key file".to_owned()),
        };
        Ok(Self {
            ca_pem: ca.map(|p| read("tls ca", p, "CERTIFICATE")).transpose()?,
            identity,
            domain: None,
        })
    }

    pub(crate) fn config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        config = match &self.ca_pem {
            Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(d) = &self.domain {
            config = config.domain_name(d.clone());
        }
        config
    }
}
