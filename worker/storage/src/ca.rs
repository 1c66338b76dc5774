//! The CAs the S3 client trusts: the system's certificates, read by
//! rustls-native-certs (the distribution's bundle under /etc/ssl, or, when
//! `SSL_CERT_FILE` or `SSL_CERT_DIR` is set, only what they name: OpenSSL's
//! rule), plus the certificates of `AWS_CA_BUNDLE` when it is set (the AWS
//! SDKs' variable; here it adds to the system's CAs rather than replacing
//! them). Both files are read and checked when the client is made, and
//! once at the worker's start, so that a wrong path or file fails with its
//! name instead of as a failed handshake later.

use std::ffi::OsString;
use std::path::PathBuf;

use aws_smithy_http_client::proxy::ProxyConfig;
use aws_smithy_http_client::tls::rustls_provider::CryptoMode;
use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore};
use aws_smithy_http_client::{Builder, ConnectorBuilder};
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Extra CAs for S3, added to the system's: a PEM file of certificates.
pub const AWS_CA_BUNDLE: &str = "AWS_CA_BUNDLE";
/// The system's CAs replaced by a PEM file (rustls-native-certs reads it).
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";
/// The system's CAs replaced by folders of PEM files.
const SSL_CERT_DIR: &str = "SSL_CERT_DIR";

/// Why a CA file cannot be used. Messages name the file and its variable.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot read the ca bundle {path} ({var}): {source}")]
    Read {
        var: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the ca bundle {path} ({var}) holds no PEM certificate")]
    NoCertificate { var: &'static str, path: String },
    #[error("the ca bundle {path} ({var}) is not valid PEM: {reason}")]
    Pem {
        var: &'static str,
        path: String,
        reason: String,
    },
    #[error("certificate {index} of the ca bundle {path} ({var}) is unusable: {reason}")]
    Unusable {
        var: &'static str,
        path: String,
        /// From 1, in the file's order.
        index: usize,
        reason: String,
    },
    #[error("cannot use the ca bundle {path} ({var}): {reason}")]
    Client {
        var: &'static str,
        path: String,
        reason: String,
    },
}

/// A checked CA file: its path and its certificates.
struct Bundle {
    path: PathBuf,
    pem: Vec<u8>,
    certs: usize,
}

/// The CAs the S3 client trusts beyond the system's, as the environment
/// gives them.
pub struct S3Trust {
    /// `AWS_CA_BUNDLE`.
    extra: Option<Bundle>,
    /// `SSL_CERT_FILE`, checked here, read again by rustls-native-certs.
    cert_file: Option<Bundle>,
    /// The TLS context with `extra` added, when there is one.
    context: Option<TlsContext>,
}

impl std::fmt::Debug for S3Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe_files())
    }
}

impl S3Trust {
    /// Reads and checks `AWS_CA_BUNDLE` and `SSL_CERT_FILE` (unset or empty:
    /// not used).
    pub fn from_env() -> Result<Self, CaError> {
        Self::from_vars(std::env::var_os(AWS_CA_BUNDLE), std::env::var_os(SSL_CERT_FILE))
    }

    fn from_vars(aws_ca_bundle: Option<OsString>, ssl_cert_file: Option<OsString>) -> Result<Self, CaError> {
        let path = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
        let extra = path(aws_ca_bundle)
            .map(|p| Bundle::read(AWS_CA_BUNDLE, p))
            .transpose()?;
        let cert_file = path(ssl_cert_file)
            .map(|p| Bundle::read(SSL_CERT_FILE, p))
            .transpose()?;
        let context = extra
            .as_ref()
            .map(|b| {
                TlsContext::builder()
                    .with_trust_store(TrustStore::default().with_pem_certificate(b.pem.clone()))
                    .build()
                    .map_err(|e| CaError::Client {
                        var: AWS_CA_BUNDLE,
                        path: b.path.display().to_string(),
                        reason: stoker_core::error::error_chain(&e),
                    })
            })
            .transpose()?;
        Ok(Self {
            extra,
            cert_file,
            context,
        })
    }

    /// True when the environment names a CA file.
    pub fn is_custom(&self) -> bool {
        self.extra.is_some() || self.cert_file.is_some()
    }

    /// The files in use, e.g. "AWS_CA_BUNDLE /etc/stoker/ca.pem (1
    /// certificate)".
    fn describe_files(&self) -> String {
        let files: Vec<String> = [(SSL_CERT_FILE, &self.cert_file), (AWS_CA_BUNDLE, &self.extra)]
            .into_iter()
            .filter_map(|(var, b)| {
                let b = b.as_ref()?;
                Some(format!("{var} {} ({})", b.path.display(), certificates(b.certs)))
            })
            .collect();
        if files.is_empty() {
            "no ca file".to_owned()
        } else {
            files.join(", ")
        }
    }

    /// What the S3 client trusts, for errors and the log: the system's
    /// certificates, counted (none in an image without ca-certificates),
    /// or those of `SSL_CERT_FILE` / `SSL_CERT_DIR`, plus `AWS_CA_BUNDLE`'s.
    pub fn describe(&self) -> String {
        let native = rustls_native_certs::load_native_certs().certs.len();
        let system = match (
            &self.cert_file,
            std::env::var_os(SSL_CERT_DIR).filter(|v| !v.is_empty()),
        ) {
            (Some(file), _) => format!("{} of {SSL_CERT_FILE} {}", certificates(native), file.path.display()),
            (None, Some(dir)) => format!("{} of {SSL_CERT_DIR} {}", certificates(native), dir.to_string_lossy()),
            (None, None) if native == 0 => {
                "no system ca certificates (install the distribution's ca-certificates)".to_owned()
            }
            (None, None) => format!("{} of the system", certificates(native)),
        };
        match &self.extra {
            Some(b) => format!(
                "{system} and {} of {AWS_CA_BUNDLE} {}",
                certificates(b.certs),
                b.path.display()
            ),
            None => system,
        }
    }

    /// An HTTPS client for the SDK that trusts the system's CAs and
    /// `AWS_CA_BUNDLE`'s, configured as the SDK's default client is
    /// (rustls with aws-lc, the connector settings and sleep of the
    /// client using it, proxies from the environment); `None` without
    /// `AWS_CA_BUNDLE`: the SDK's default client does the same.
    pub(super) fn http_client(&self) -> Option<SharedHttpClient> {
        let context = self.context.clone()?;
        Some(Builder::new().build_with_connector_fn(move |settings, components| {
            let mut conn = ConnectorBuilder::default()
                .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
                .tls_context(context.clone());
            conn.set_connector_settings(settings.cloned());
            if let Some(components) = components {
                conn.set_sleep_impl(components.sleep_impl());
            }
            conn.set_proxy_config(Some(ProxyConfig::from_env()));
            conn.build()
        }))
    }
}

fn certificates(n: usize) -> String {
    if n == 1 {
        "1 certificate".to_owned()
    } else {
        format!("{n} certificates")
    }
}

impl Bundle {
    /// Reads `path` (named by `var`) and checks that it holds PEM
    /// certificates that rustls takes as trust anchors, as the SDK's TLS
    /// setup will (which panics on one it cannot parse).
    fn read(var: &'static str, path: PathBuf) -> Result<Self, CaError> {
        let name = || path.display().to_string();
        let pem = std::fs::read(&path).map_err(|source| CaError::Read {
            var,
            path: name(),
            source,
        })?;
        let certs = parse(&pem).map_err(|e| match e {
            Problem::Pem(reason) => CaError::Pem {
                var,
                path: name(),
                reason,
            },
            Problem::None => CaError::NoCertificate { var, path: name() },
            Problem::Unusable { index, reason } => CaError::Unusable {
                var,
                path: name(),
                index,
                reason,
            },
        })?;
        Ok(Self { path, pem, certs })
    }
}

enum Problem {
    Pem(String),
    None,
    Unusable { index: usize, reason: String },
}

/// The number of certificates in `pem`, each one added to a root store
/// as the SDK will add it.
fn parse(pem: &[u8]) -> Result<usize, Problem> {
    let ders = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Problem::Pem(e.to_string()))?;
    if ders.is_empty() {
        return Err(Problem::None);
    }
    let mut roots = rustls::RootCertStore::empty();
    for (i, der) in ders.iter().enumerate() {
        roots.add(der.clone()).map_err(|e| Problem::Unusable {
            index: i + 1,
            reason: e.to_string(),
        })?;
    }
    Ok(ders.len())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    fn ca_pem() -> String {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.self_signed(&KeyPair::generate().unwrap()).unwrap().pem()
    }

    fn var(path: &Path) -> Option<OsString> {
        Some(path.as_os_str().to_owned())
    }

    #[test]
    fn a_bundle_of_certificates_is_taken_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, format!("{}\n{}", ca_pem(), ca_pem())).unwrap();
        let trust = S3Trust::from_vars(var(&path), None).unwrap();
        assert!(trust.is_custom() && trust.http_client().is_some());
        assert!(
            trust
                .describe()
                .contains(&format!("2 certificates of AWS_CA_BUNDLE {}", path.display()))
        );
        let trust = S3Trust::from_vars(None, var(&path)).unwrap();
        assert!(
            trust.http_client().is_none(),
            "SSL_CERT_FILE is read by rustls-native-certs"
        );
        assert!(format!("{trust:?}").contains("SSL_CERT_FILE"));
        let none = S3Trust::from_vars(Some(OsString::new()), None).unwrap();
        assert!(!none.is_custom() && none.http_client().is_none());
    }

    #[test]
    fn a_bad_bundle_is_an_error_naming_the_file_and_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let bad_der = dir.path().join("bad-der.pem");
        std::fs::write(
            &bad_der,
            format!(
                "{}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                ca_pem()
            ),
        )
        .unwrap();
        let bad_base64 = dir.path().join("bad-base64.pem");
        std::fs::write(
            &bad_base64,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (path, want) in [
            (&missing, "cannot read"),
            (&not_pem, "holds no PEM certificate"),
            (&bad_der, "certificate 2 of"),
            (&bad_base64, "not valid PEM"),
        ] {
            let err = S3Trust::from_vars(var(path), None).unwrap_err().to_string();
            let name = path.display().to_string();
            assert!(
                err.contains(want) && err.contains(&name) && err.contains("AWS_CA_BUNDLE"),
                "{err}"
            );
            let err = S3Trust::from_vars(None, var(path)).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains(&name) && err.contains("SSL_CERT_FILE"),
                "{err}"
            );
        }
    }
}
