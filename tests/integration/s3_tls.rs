//! S3 over HTTPS with a private CA: s3s-fs behind a TLS terminator written
//! here (tokio-rustls), its certificate from a CA the test makes. A worker
//! given the CA (`AWS_CA_BUNDLE`, which adds to the system's CAs, or
//! `SSL_CERT_FILE`, which replaces them) streams every sample once; a
//! worker without it fails with an error that names the certificate
//! problem and the endpoint; a bad CA file stops the worker at start,
//! naming the file. The same through the worker image, with the CA mounted
//! into the container; both images carry the distribution's CA bundle.
//! Without Docker or the base image the container test says why and skips.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::support::{
    DOCKER_BASE, DOCKER_TAG, S3Server, Worker, assert_exactly_once, build_images, docker, http_get, image_folder_keys,
    pack, stoker, stream, stream_addrs, synth_images,
};

/// A TLS front for a plain TCP server: each connection's handshake is
/// done here, then its bytes are copied both ways. Stops when dropped.
struct TlsFront {
    /// `https://IP:PORT`.
    endpoint: String,
    _runtime: tokio::runtime::Runtime,
}

impl TlsFront {
    /// Serves on `ip` (port chosen here) with `cert` and `key`, passing
    /// connections on to `upstream`.
    fn start(ip: &str, upstream: SocketAddr, cert: &rcgen::Certificate, key: &KeyPair) -> Self {
        let config =
            ServerConfig::builder_with_provider(Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
                )
                .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind((ip, 0))).unwrap();
        let port = listener.local_addr().unwrap().port();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends
                    // the handshake: nothing to pass on.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Self {
            endpoint: format!("https://{ip}:{port}"),
            _runtime: runtime,
        }
    }
}

/// A CA written to `ca.pem`, and a server certificate it issued for
/// `ips`.
struct Pki {
    dir: tempfile::TempDir,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Pki {
    fn new(ips: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "stoker s3 test ca");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(ips.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "s3");
        let cert = params.signed_by(&key, &ca).unwrap();
        Self { dir, cert, key }
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

fn upstream(s3: &S3Server) -> SocketAddr {
    s3.endpoint.strip_prefix("http://").unwrap().parse().unwrap()
}

/// The S3 environment with the endpoint replaced by `front`'s and `extra`
/// added.
fn env_for(s3: &S3Server, front: &TlsFront, extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = s3.env_with_endpoint(&front.endpoint);
    env.extend_from_slice(extra);
    env
}

fn start_worker(env: &[(&'static str, String)]) -> Worker {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Worker::start_with(1, &[], &pairs)
}

/// Asserts that a failed run's error names the untrusted certificate and
/// `endpoint`.
fn assert_untrusted(stderr: &str, endpoint: &str) {
    assert!(
        stderr.contains(endpoint) && stderr.contains("tls certificate") && stderr.contains("UnknownIssuer"),
        "the error does not name the certificate problem and {endpoint}:\n{stderr}"
    );
}

const ARGS: [&str; 4] = ["--batch-size", "8", "--image-size", "32"];

#[test]
fn https_s3_with_a_private_ca_streams_given_the_ca_and_names_the_endpoint_without_it() {
    let s3 = S3Server::start();
    s3.bucket("data");
    let pki = Pki::new(&["127.0.0.1"]);
    let front = TlsFront::start("127.0.0.1", upstream(&s3), &pki.cert, &pki.key);
    let ca = pki.ca().to_str().unwrap().to_owned();
    let with_bundle = env_for(&s3, &front, &[("AWS_CA_BUNDLE", ca.clone())]);

    // Uploads go through the same client: pack over HTTPS.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 24, 2, 64, 48);
    pack(&images, "s3://data/ds/", "20K", &with_bundle);
    let expected = image_folder_keys(&images);

    // AWS_CA_BUNDLE: the system's CAs and the test's.
    let w = start_worker(&with_bundle);
    let run = stream(&[&w], "s3://data/ds/", &ARGS, &[]);
    assert_exactly_once(&run, &expected, 0..1);

    // SSL_CERT_FILE, read by rustls-native-certs in place of the system's.
    let w = start_worker(&env_for(&s3, &front, &[("SSL_CERT_FILE", ca.clone())]));
    let run = stream(&[&w], "s3://data/ds/", &ARGS, &[]);
    assert_exactly_once(&run, &expected, 0..1);

    // Neither: the certificate is refused, and the error says so and
    // where. Another attempt would meet the same certificate: none is made.
    let pairs = env_for(&s3, &front, &[]);
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let w = Worker::start_with(1, &["--metrics-listen", "127.0.0.1:0"], &pairs);
    let run = stream(&[&w], "s3://data/ds/", &ARGS, &[]);
    assert!(!run.success(), "streamed from an endpoint whose CA is not trusted");
    assert_untrusted(&run.stderr(), &front.endpoint);
    assert!(run.stderr().contains("of the system"), "{}", run.stderr());
    let metrics = http_get(w.metrics_url.as_deref().unwrap());
    assert!(
        metrics.lines().any(|l| l == "stoker_worker_storage_retries_total 0"),
        "a refused certificate was retried:\n{metrics}"
    );
}

#[test]
fn a_bad_ca_file_stops_the_worker_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    for (var, path, want) in [
        ("AWS_CA_BUNDLE", &missing, "cannot read"),
        ("AWS_CA_BUNDLE", &not_pem, "holds no PEM certificate"),
        ("SSL_CERT_FILE", &missing, "cannot read"),
    ] {
        let out = stoker()
            .args(["worker", "--listen", "127.0.0.1:0"])
            .env(var, path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{var}={} did not stop the worker",
            path.display()
        );
        assert!(
            stderr.contains(path.to_str().unwrap()) && stderr.contains(var) && stderr.contains(want),
            "{stderr}"
        );
    }
}

/// Removes the container when the test ends, passed or not.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

impl Container {
    /// A healthy worker container (`docker run -d`) named after `what`,
    /// with `args` before the image.
    fn worker(what: &str, args: &[&str]) -> Self {
        let name = format!("stoker-test-s3tls-{what}-{}", std::process::id());
        let image = format!("stoker-worker:{DOCKER_TAG}");
        let mut all = vec!["run", "-d", "--name", &name, "--health-interval", "1s"];
        all.extend_from_slice(args);
        all.push(&image);
        docker(&all).unwrap();
        let container = Self(name);
        let deadline = Instant::now() + Duration::from_secs(60);
        while docker(&["inspect", "--format", "{{.State.Health.Status}}", &container.0]).unwrap() != "healthy" {
            assert!(
                Instant::now() < deadline,
                "container {} is not healthy after 60 s; logs:\n{}",
                container.0,
                container.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        container
    }

    fn addr(&self) -> String {
        let ip = docker(&["inspect", "--format", "{{.NetworkSettings.IPAddress}}", &self.0]).unwrap();
        format!("{ip}:50051")
    }

    fn logs(&self) -> String {
        let out = std::process::Command::new("docker")
            .args(["logs", &self.0])
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// The host's address on Docker's default bridge, where containers reach
/// it: the bridge's gateway, which Docker makes the subnet's first address
/// unless told otherwise (and then names it).
fn bridge_gateway() -> String {
    let ipam = docker(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}};{{.Subnet}}{{end}}",
    ])
    .unwrap();
    let (gateway, subnet) = ipam.split_once(';').unwrap();
    if !gateway.is_empty() {
        return gateway.to_owned();
    }
    let base: std::net::Ipv4Addr = subnet.split_once('/').unwrap().0.parse().unwrap();
    std::net::Ipv4Addr::from(u32::from(base) + 1).to_string()
}

fn skip(test: &str) -> bool {
    match docker(&["image", "inspect", DOCKER_BASE]) {
        Ok(_) => false,
        Err(reason) => {
            crate::support::Need::Docker.skip(
                &format!("s3_tls::{test}"),
                format!("no base image {DOCKER_BASE} ({reason}); scripts/test.sh makes it where Docker runs as root"),
            );
            true
        }
    }
}

/// `docker run --rm IMAGE test -s FILE` succeeds.
fn image_has_file(image: &str, file: &Path) -> Result<String, String> {
    docker(&[
        "run",
        "--rm",
        "--entrypoint",
        "test",
        image,
        "-s",
        file.to_str().unwrap(),
    ])
}

#[test]
fn the_worker_image_streams_from_https_s3_with_a_mounted_ca_and_names_the_endpoint_without_it() {
    let test = "the_worker_image_streams_from_https_s3_with_a_mounted_ca_and_names_the_endpoint_without_it";
    if skip(test) {
        return;
    }
    build_images();
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    for image in ["stoker-worker", "stoker-worker-gpu"] {
        let image = format!("{image}:{DOCKER_TAG}");
        if let Err(e) = image_has_file(&image, bundle) {
            panic!("{image} carries no CA bundle at {}: {e}", bundle.display());
        }
    }

    let s3 = S3Server::start();
    s3.bucket("data");
    let gateway = bridge_gateway();
    let pki = Pki::new(&["127.0.0.1", &gateway]);
    let front = TlsFront::start(&gateway, upstream(&s3), &pki.cert, &pki.key);
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 40, 2, 64, 48);
    let ca = pki.ca().to_str().unwrap().to_owned();
    pack(
        &images,
        "s3://data/ds/",
        "30K",
        &env_for(&s3, &front, &[("AWS_CA_BUNDLE", ca.clone())]),
    );
    let expected = image_folder_keys(&images);

    let env: Vec<String> = env_for(&s3, &front, &[])
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut args: Vec<&str> = env.iter().flat_map(|e| ["-e", e.as_str()]).collect();
    let without = Container::worker("without-ca", &args);
    let mount = format!("{ca}:/etc/stoker/s3-ca.pem:ro");
    args.extend(["-v", &mount, "-e", "AWS_CA_BUNDLE=/etc/stoker/s3-ca.pem"]);
    let with = Container::worker("with-ca", &args);

    let run = stream_addrs(
        &[with.addr()],
        "s3://data/ds/",
        &["--batch-size", "8", "--image-size", "32", "--epochs", "2"],
    );
    assert!(run.success(), "{}\nworker log:\n{}", run.stderr(), with.logs());
    assert_exactly_once(&run, &expected, 0..2);

    let run = stream_addrs(&[without.addr()], "s3://data/ds/", &ARGS);
    assert!(
        !run.success(),
        "streamed from an endpoint whose CA the image does not trust"
    );
    let stderr = run.stderr();
    assert_untrusted(&stderr, &front.endpoint);
    // The image's own CAs were there, and counted: only the test's CA was
    // missing.
    assert!(stderr.contains("of the system"), "{stderr}");
}
