//! TLS for the worker's gRPC server: a certificate and key, and optionally
//! a CA that client certificates must chain to (mutual TLS), read and
//! checked at start.

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The worker's TLS material, read and checked up front so that a wrong
/// path or file fails at start with its name, not at the first handshake.
#[derive(Clone)]
pub struct ServerTls {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("ServerTls")
            .field("client_auth", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// Why TLS files could not be used. Messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path} holds no PEM {expected}")]
    NotPem {
        what: &'static str,
        path: String,
        expected: &'static str,
    },
}

/// Reads a PEM file and checks it holds a block whose label ends in
/// `expected` ("CERTIFICATE", "PRIVATE KEY").
pub fn read_pem(what: &'static str, path: &Path, expected: &'static str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.display().to_string(),
        source,
    })?;
    if !stoker_core::pem::has_block(&bytes, expected) {
        return Err(TlsError::NotPem {
            what,
            path: path.display().to_string(),
            expected,
        });
    }
    Ok(bytes)
}

impl ServerTls {
    /// Reads the certificate chain and key, and the CA for client
    /// certificates when mutual TLS is wanted.
    pub fn from_files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Self, TlsError> {
        Ok(Self {
            cert_pem: read_pem("tls certificate", cert, "CERTIFICATE")?,
            key_pem: read_pem("tls key", key, "PRIVATE KEY")?,
            client_ca_pem: client_ca.map(|p| read_pem("client ca", p, "CERTIFICATE")).transpose()?,
        })
    }

    /// True when clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    pub(crate) fn config(&self) -> ServerTlsConfig {
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert_pem, &self.key_pem));
        if let Some(ca) = &self.client_ca_pem {
            config = config
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(false);
        }
        config
    }
}
