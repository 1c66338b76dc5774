//! TLS and mutual TLS between `stoker stream` and `stoker worker`, with a
//! CA and certificates generated here.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::support::{Worker, assert_exactly_once, image_folder_keys, pack, stream, synth_images};

/// PEM files of one CA, a worker certificate for 127.0.0.1 / localhost and
/// a client certificate, plus an unrelated CA.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_owned()
    }
}

fn write(dir: &Path, name: &str, pem: &str) {
    std::fs::write(dir.join(name), pem).unwrap();
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca("stoker test ca");
    write(dir.path(), "ca.pem", &ca.pem());
    for (name, sans) in [
        ("worker", vec!["localhost".to_owned(), "127.0.0.1".to_owned()]),
        ("client", vec!["trainer.example".to_owned()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &ca).unwrap();
        write(dir.path(), &format!("{name}.pem"), &cert.pem());
        write(dir.path(), &format!("{name}-key.pem"), &key.serialize_pem());
    }
    write(dir.path(), "other-ca.pem", &ca_pem_only("unrelated ca"));
    Pki { dir }
}

fn ca_pem_only(name: &str) -> String {
    ca(name).pem()
}

fn small_dataset(dir: &Path) -> (String, Vec<(String, i64)>) {
    let images = dir.join("images");
    let shards = dir.join("shards");
    synth_images(&images, 24, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "20K", &[]);
    (shards.to_str().unwrap().to_owned(), image_folder_keys(&images))
}

const ARGS: [&str; 4] = ["--batch-size", "5", "--image-size", "32"];

#[test]
fn a_tls_worker_serves_clients_that_trust_its_ca_and_no_others() {
    let pki = pki();
    let data = tempfile::tempdir().unwrap();
    let (dataset, expected) = small_dataset(data.path());
    let w = Worker::start_with(
        1,
        &[
            "--tls-cert",
            &pki.arg("worker.pem"),
            "--tls-key",
            &pki.arg("worker-key.pem"),
        ],
        &[],
    );

    let (ca, other_ca) = (pki.arg("ca.pem"), pki.arg("other-ca.pem"));
    let args: Vec<&str> = ARGS.iter().copied().chain(["--tls-ca", &ca]).collect();
    let run = stream(&[&w], &dataset, &args, &[]);
    assert_exactly_once(&run, &expected, 0..1);

    // Plain HTTP/2 against a TLS worker.
    let run = stream(&[&w], &dataset, &ARGS, &[]);
    assert!(!run.success());
    assert!(run.stderr().contains(&w.addr), "{}", run.stderr());

    // A CA that did not sign the worker's certificate.
    let args: Vec<&str> = ARGS.iter().copied().chain(["--tls-ca", &other_ca]).collect();
    let run = stream(&[&w], &dataset, &args, &[]);
    assert!(!run.success());
    let stderr = run.stderr().to_lowercase();
    assert!(stderr.contains(&w.addr) && stderr.contains("certificate"), "{stderr}");

    // The certificate is for 127.0.0.1 and localhost, not another name.
    let args: Vec<&str> = ARGS
        .iter()
        .copied()
        .chain(["--tls-ca", &ca, "--tls-domain", "elsewhere.example"])
        .collect();
    let run = stream(&[&w], &dataset, &args, &[]);
    assert!(!run.success(), "a certificate for another name was accepted");
}

#[test]
fn a_mutual_tls_worker_requires_a_client_certificate_from_its_ca() {
    let pki = pki();
    let data = tempfile::tempdir().unwrap();
    let (dataset, expected) = small_dataset(data.path());
    let w = Worker::start_with(
        1,
        &[
            "--tls-cert",
            &pki.arg("worker.pem"),
            "--tls-key",
            &pki.arg("worker-key.pem"),
            "--tls-client-ca",
            &pki.arg("ca.pem"),
        ],
        &[],
    );
    let ca = ["--tls-ca", &pki.arg("ca.pem")].map(str::to_owned);

    // Without a client certificate: refused.
    let args: Vec<&str> = ARGS.iter().copied().chain(ca.iter().map(String::as_str)).collect();
    let run = stream(&[&w], &dataset, &args, &[]);
    assert!(!run.success(), "served a client without a certificate");
    assert!(run.stderr().contains(&w.addr), "{}", run.stderr());

    // With one signed by the CA: served.
    let cert = pki.arg("client.pem");
    let key = pki.arg("client-key.pem");
    let args: Vec<&str> = ARGS
        .iter()
        .copied()
        .chain(ca.iter().map(String::as_str))
        .chain(["--tls-cert", &cert, "--tls-key", &key])
        .collect();
    let run = stream(&[&w], &dataset, &args, &[]);
    assert_exactly_once(&run, &expected, 0..1);
}

#[test]
fn bad_tls_files_fail_at_start_naming_the_file() {
    let pki = pki();
    let not_pem = pki.path("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let out = crate::support::stoker()
        .args(["worker", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&not_pem)
        .arg("--tls-key")
        .arg(pki.path("worker-key.pem"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(not_pem.to_str().unwrap()) && stderr.contains("no PEM"),
        "{stderr}"
    );

    let missing = pki.path("missing.pem");
    let out = crate::support::stoker()
        .args(["stream", "--workers", "127.0.0.1:1", "--dataset", "/tmp"])
        .args(["--batch-size", "4", "--image-size", "32", "--tls-ca"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
}
