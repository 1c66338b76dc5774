//! Workers found by DNS (`dns://NAME:PORT`): a DNS server on loopback whose
//! answer the test changes mid-epoch (tests/python/dns_server.py, dnslib),
//! workers on 127.0.0.2, .3, .4 at one port, and exactly-once checked on
//! `--keys-out`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{
    ChildGuard, StreamChild, Worker, assert_exactly_once, http_get, image_folder_keys, pack, python, python_script,
    stoker, synth_images,
};

const NAME: &str = "workers.stoker.test";

/// The test's DNS server and the answers it gives.
struct Dns {
    addr: String,
    records: PathBuf,
    _child: ChildGuard,
}

impl Dns {
    fn start(dir: &Path, ips: &[&str]) -> Self {
        let records = dir.join("records.json");
        let dns = |child| Self {
            addr: String::new(),
            records: records.clone(),
            _child: child,
        };
        let mut this = dns(ChildGuard(
            python()
                .arg(python_script("dns_server.py"))
                .arg(&records)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn the dns server"),
        ));
        this.answer(ips);
        let mut line = String::new();
        BufReader::new(this._child.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        this.addr = line
            .trim()
            .strip_prefix("dns server on ")
            .unwrap_or_else(|| panic!("unexpected dns server banner {line:?}"))
            .to_owned();
        this
    }

    /// From now on NAME resolves to `ips` (written whole, then renamed, so
    /// a query never reads half a file).
    fn answer(&self, ips: &[&str]) {
        let tmp = self.records.with_extension("tmp");
        let json = serde_json::json!({ NAME: ips });
        std::fs::write(&tmp, json.to_string()).unwrap();
        std::fs::rename(&tmp, &self.records).unwrap();
    }

    /// How many A queries for NAME it has answered with exactly `ips`.
    fn answered(&self, ips: &[&str]) -> usize {
        std::fs::read_to_string(self.records.with_extension("queries"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|q| q["name"] == NAME && q["ips"] == serde_json::json!(ips))
            .count()
    }
}

/// Polls `ready` until it holds; fails naming `what` after `limit`.
fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port free on 127.0.0.2, .3 and .4 alike.
fn shared_port() -> u16 {
    for _ in 0..50 {
        let port = std::net::TcpListener::bind("127.0.0.2:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if ["127.0.0.3", "127.0.0.4"]
            .iter()
            .all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok())
        {
            return port;
        }
    }
    panic!("no port free on 127.0.0.2-4");
}

fn worker_on(ip: &str, port: u16) -> Worker {
    let listen = format!("{ip}:{port}");
    Worker::start_with(1, &["--listen", &listen, "--metrics-listen", &format!("{ip}:0")], &[])
}

/// Items a worker has finished, from its metrics.
fn items_done(worker: &Worker) -> u64 {
    metric(worker, "stoker_worker_items_total")
}

/// Items a worker holds now, from its metrics.
fn items_in_flight(worker: &Worker) -> u64 {
    metric(worker, "stoker_worker_items_in_flight")
}

fn metric(worker: &Worker, name: &str) -> u64 {
    let text = http_get(worker.metrics_url.as_ref().unwrap());
    let line = text
        .lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
}

fn dataset(dir: &Path, images: usize) -> (PathBuf, Vec<(String, i64)>) {
    let images_dir = dir.join("images");
    let shards = dir.join("shards");
    synth_images(&images_dir, images, 4, 96, 72);
    pack(&images_dir, shards.to_str().unwrap(), "40K", &[]);
    (shards, image_folder_keys(&images_dir))
}

/// The stream stands in for a trainer taking 20 ms a batch
/// (`--step-seconds`): the epochs last seconds, so the client re-resolves
/// the name many times while they run, and the drain is seen with work
/// left.
#[test]
fn workers_that_appear_get_work_and_those_that_disappear_are_drained_mid_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, expected) = dataset(dir.path(), 900);
    let port = shared_port();
    let (w2, w3, w4) = (
        worker_on("127.0.0.2", port),
        worker_on("127.0.0.3", port),
        worker_on("127.0.0.4", port),
    );
    let dns = Dns::start(dir.path(), &["127.0.0.2"]);
    let entry = format!("dns://{NAME}:{port}");
    let args = [
        "--batch-size",
        "16",
        "--image-size",
        "48",
        "--epochs",
        "3",
        "--inflight",
        "1",
        "--dns-server",
        &dns.addr,
        "--resolve-interval",
        "0.2",
        "--step-seconds",
        "0.02",
    ];
    let mut stream = StreamChild::spawn_addrs(&[&entry], shards.to_str().unwrap(), &args);
    let n = expected.len();

    // Mid-epoch 0: two more workers answer for the name.
    stream.wait_for_samples(100, Duration::from_secs(60));
    dns.answer(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    // They get work within about one interval (0.2 s), with room for a
    // loaded machine.
    wait_until("workers found by dns got work", Duration::from_secs(5), || {
        items_done(&w3) > 0 && items_done(&w4) > 0
    });

    // Mid-epoch 1: 127.0.0.2 leaves the name. It finishes what it holds
    // and gets nothing more. Counted from when the client has resolved the
    // new answer twice (an item sent before the first has reached the
    // worker by the second, an interval later) and the worker holds no
    // item.
    stream.wait_for_samples(n + n / 3, Duration::from_secs(120));
    let left = ["127.0.0.3", "127.0.0.4"];
    dns.answer(&left);
    wait_until(
        "the client resolved the name without 127.0.0.2",
        Duration::from_secs(10),
        || dns.answered(&left) >= 2,
    );
    wait_until("127.0.0.2 finished what it held", Duration::from_secs(30), || {
        items_in_flight(&w2) == 0
    });
    let drained_at = items_done(&w2);
    let others_at = items_done(&w3) + items_done(&w4);
    let run = stream.finish();
    assert!(run.success(), "{}", run.stderr());
    assert_exactly_once(&run, &expected, 0..3);
    assert_eq!(
        items_done(&w2),
        drained_at,
        "a worker gone from the name was given new items"
    );
    // The epoch went on without it: the check above saw work left.
    assert!(
        items_done(&w3) + items_done(&w4) > others_at,
        "the stream ended before the drain could be seen"
    );
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    let by_addr: BTreeMap<String, u64> = workers
        .iter()
        .map(|w| (w["addr"].as_str().unwrap().to_owned(), w["samples"].as_u64().unwrap()))
        .collect();
    for w in [&w2, &w3, &w4] {
        assert!(
            by_addr.get(&w.addr).is_some_and(|&n| n > 0),
            "{} delivered nothing: {by_addr:?}",
            w.addr
        );
    }
}

#[test]
fn a_name_that_empties_fails_after_the_patience_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, _) = dataset(dir.path(), 600);
    let port = shared_port();
    let _w2 = worker_on("127.0.0.2", port);
    let dns = Dns::start(dir.path(), &["127.0.0.2"]);
    let entry = format!("dns://{NAME}:{port}");
    let args = [
        "--batch-size",
        "8",
        "--image-size",
        "32",
        "--epochs",
        "20",
        "--inflight",
        "1",
        "--dns-server",
        &dns.addr,
        "--resolve-interval",
        "0.2",
        "--worker-patience",
        "2",
    ];
    let mut stream = StreamChild::spawn_addrs(&[&entry], shards.to_str().unwrap(), &args);
    stream.wait_for_samples(50, Duration::from_secs(60));
    dns.answer(&[]);
    let started = Instant::now();
    let run = stream.finish();
    assert!(!run.success(), "the stream went on with no worker");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "failed before the patience ran out"
    );
    let stderr = run.stderr();
    assert!(stderr.contains(&format!("no longer an address of {entry}")), "{stderr}");
}

#[test]
fn a_name_without_addresses_at_start_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let dns = Dns::start(dir.path(), &[]);
    let entry = format!("dns://nothing.stoker.test:{}", 50051);
    let out = stoker()
        .args([
            "stream",
            "--workers",
            &entry,
            "--dataset",
            "/nowhere",
            "--batch-size",
            "4",
            "--image-size",
            "8",
        ])
        .args(["--dns-server", &dns.addr])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{entry} resolves to no address")), "{stderr}");
}

#[test]
fn listed_addresses_and_dns_names_mix() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, expected) = dataset(dir.path(), 200);
    let port = shared_port();
    let listed = Worker::start(1);
    let found = worker_on("127.0.0.3", port);
    let dns = Dns::start(dir.path(), &["127.0.0.3"]);
    let entry = format!("dns://{NAME}:{port}");
    let args = [
        "--batch-size",
        "16",
        "--image-size",
        "32",
        "--epochs",
        "2",
        "--inflight",
        "1",
        "--dns-server",
        &dns.addr,
    ];
    let run = StreamChild::spawn_addrs(&[&listed.addr, &entry], shards.to_str().unwrap(), &args).finish();
    assert!(run.success(), "{}", run.stderr());
    assert_exactly_once(&run, &expected, 0..2);
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    for w in [&listed, &found] {
        let delivered = workers.iter().find(|j| j["addr"] == w.addr.as_str());
        assert!(
            delivered.is_some_and(|j| j["samples"].as_u64().unwrap() > 0),
            "{} delivered nothing: {workers:?}",
            w.addr
        );
    }
}
