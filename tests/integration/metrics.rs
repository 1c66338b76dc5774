//! Prometheus metrics of a real worker and a real client, parsed by
//! Python's prometheus_client (an independent reader of the text format)
//! and checked against what was delivered: `--keys-out`, the `--json`
//! summary and the loader's report.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use stoker_client::{Loader, LoaderConfig, TransformSpec};

use crate::support::{
    StreamChild, Worker, http_get, image_folder_keys, pack, python, python_script, run_ok, stoker, stream, synth_images,
};

/// `name{labels}` -> value, as prometheus_client's parser reads `text`.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut child = python()
        .arg(python_script("parse_metrics.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn python");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn value(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    *m.get(series).unwrap_or_else(|| panic!("no {series} in {m:#?}"))
}

/// An ImageFolder of `n` procedural JPEGs plus one that does not decode,
/// packed into shards; the decodable keys.
fn dataset(dir: &std::path::Path, n: usize) -> (std::path::PathBuf, Vec<(String, i64)>) {
    let images = dir.join("images");
    let shards = dir.join("shards");
    synth_images(&images, n, 2, 96, 72);
    let expected = image_folder_keys(&images);
    let first_class = std::fs::read_dir(&images).unwrap().next().unwrap().unwrap().path();
    std::fs::write(first_class.join("zz-broken.jpg"), b"\xff\xd8\xffnot really a jpeg").unwrap();
    pack(&images, shards.to_str().unwrap(), "60K", &[]);
    (shards, expected)
}

#[test]
fn worker_metrics_agree_with_the_keys_delivered_and_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, expected) = dataset(dir.path(), 120);
    let worker = Worker::start_with(2, &["--metrics-listen", "127.0.0.1:0"], &[]);
    let url = worker.metrics_url.clone().expect("metrics url");
    let idle = parse(&http_get(&url));
    assert_eq!(value(&idle, "stoker_worker_samples_sent_total"), 0.0);
    assert_eq!(value(&idle, r#"stoker_worker_skipped_total{reason="decode"}"#), 0.0);
    assert!(value(&idle, r#"stoker_worker_memory_budget_bytes{state="limit"}"#) > 0.0);

    // Scraped while a stream runs: the text parses and counts go up.
    let args = [
        "--batch-size",
        "16",
        "--image-size",
        "64",
        "--epochs",
        "2",
        "--inflight",
        "2",
    ];
    let mut child = StreamChild::spawn(&[&worker], shards.to_str().unwrap(), &args);
    child.wait_for_samples(20, Duration::from_secs(60));
    let during = parse(&http_get(&url));
    assert!(value(&during, "stoker_worker_samples_sent_total") > 0.0, "{during:#?}");
    assert!(value(&during, "stoker_worker_clients") <= 1.0);
    let first = child.finish();
    assert!(first.success(), "{}", first.stderr());

    let before = parse(&http_get(&url));
    let run = stream(&[&worker], shards.to_str().unwrap(), &args, &[]);
    assert!(run.success(), "{}", run.stderr());
    let after = parse(&http_get(&url));
    let delta = |series: &str| value(&after, series) - value(&before, series);

    // Everything delivered, once per epoch, and counted once.
    assert_eq!(run.keys.len(), 2 * expected.len());
    assert_eq!(delta("stoker_worker_samples_sent_total"), run.keys.len() as f64);
    assert_eq!(
        delta(r#"stoker_worker_samples_total{path="cpu"}"#),
        run.keys.len() as f64
    );
    assert_eq!(value(&after, r#"stoker_worker_samples_total{path="gpu"}"#), 0.0);
    assert_eq!(delta("stoker_worker_bytes_sent_total"), run.num("bytes") as f64);
    assert_eq!(run.num("bytes"), run.keys.len() as u64 * 64 * 64 * 3);
    // The broken JPEG, skipped once per epoch, by kind.
    assert_eq!(run.num("skipped"), 2);
    assert_eq!(delta(r#"stoker_worker_skipped_total{reason="decode"}"#), 2.0);
    assert_eq!(delta(r#"stoker_worker_skipped_total{reason="not_image"}"#), 0.0);
    // Every sample read, decoded and transformed was timed; chunks were
    // sent. The broken JPEG's plan refuses it from its header (the skip
    // above), so it is read but never decoded.
    let samples_seen = run.keys.len() as f64 + 2.0;
    assert_eq!(
        delta(r#"stoker_worker_stage_seconds_count{stage="read"}"#),
        samples_seen
    );
    assert_eq!(
        delta(r#"stoker_worker_stage_seconds_count{stage="decode"}"#),
        run.keys.len() as f64
    );
    assert_eq!(
        delta(r#"stoker_worker_stage_seconds_count{stage="transform"}"#),
        run.keys.len() as f64
    );
    assert!(delta(r#"stoker_worker_stage_seconds_count{stage="send"}"#) > 0.0);
    assert!(value(&after, r#"stoker_worker_stage_seconds_sum{stage="decode"}"#) > 0.0);
    assert_eq!(
        value(&after, r#"stoker_worker_stage_seconds_count{stage="gpu_batch"}"#),
        0.0
    );
    // Nothing left in progress, nothing held.
    assert_eq!(value(&after, "stoker_worker_items_in_flight"), 0.0);
    assert_eq!(value(&after, "stoker_worker_clients"), 0.0);
    assert_eq!(value(&after, r#"stoker_worker_memory_budget_bytes{state="used"}"#), 0.0);
    assert_eq!(value(&after, "stoker_worker_storage_retries_total"), 0.0);
    assert!(delta("stoker_worker_items_total") > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_metrics_agree_with_the_batches_and_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, expected) = dataset(dir.path(), 100);
    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let mut config = LoaderConfig::new(
        vec![w1.addr.clone(), w2.addr.clone()],
        shards.to_str().unwrap(),
        10,
        TransformSpec::train(48),
    );
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let loader = Loader::connect(config).await.unwrap();
    let url = format!("http://{}/metrics", loader.metrics_addr().expect("metrics address"));
    let mut keys = 0usize;
    let mut batches = 0u64;
    let mut reports = Vec::new();
    for epoch in 0..2 {
        let mut stream = loader.epoch(epoch).unwrap();
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.unwrap();
            keys += batch.real();
            batches += 1;
        }
        reports.push(stream.report());
    }
    let text = tokio::task::spawn_blocking(move || http_get(&url)).await.unwrap();
    let m = parse(&text);
    assert_eq!(keys, 2 * expected.len());
    assert_eq!(value(&m, "stoker_client_samples_total"), keys as f64);
    assert_eq!(value(&m, "stoker_client_batches_total"), batches as f64);
    let bytes: u64 = reports.iter().map(|r| r.bytes).sum();
    assert_eq!(value(&m, "stoker_client_bytes_total"), bytes as f64);
    assert_eq!(value(&m, "stoker_client_skipped_total"), 2.0);
    assert_eq!(value(&m, "stoker_client_reassigned_items_total"), 0.0);
    for w in [&w1, &w2] {
        let delivered: u64 = reports
            .iter()
            .flat_map(|r| &r.workers)
            .filter(|r| r.addr == w.addr)
            .map(|r| r.samples)
            .sum();
        let series = format!("stoker_client_worker_samples_total{{worker=\"{}\"}}", w.addr);
        assert_eq!(value(&m, &series), delivered as f64);
    }
    let waited: f64 = reports.iter().map(|r| r.wait.as_secs_f64()).sum();
    assert!((value(&m, "stoker_client_wait_seconds_total") - waited).abs() < 1e-6);
    // This consumer does nothing with its batches, so it waits most of the
    // time, and more workers would serve it faster.
    let last = reports.last().unwrap();
    assert!(last.wait > last.elapsed / 2, "{last:?}");
    let recommended = value(&m, "stoker_client_recommended_workers");
    assert_eq!(Some(recommended as u32), last.recommended_workers);
    assert!(recommended > 2.0, "{recommended}");
}

#[test]
fn the_python_loader_serves_metrics_that_match_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let (shards, expected) = dataset(dir.path(), 60);
    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let out = run_ok(
        python()
            .arg(python_script("metrics_check.py"))
            .arg(format!("{},{}", w1.addr, w2.addr))
            .arg(&shards)
            .arg(expected.len().to_string()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(stdout.contains("python metrics ok: 60 samples"), "{stdout}");
}

#[test]
fn a_metrics_port_in_use_fails_the_start_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = stoker()
        .args(["worker", "--listen", "127.0.0.1:0", "--metrics-listen", &addr])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!("cannot listen for metrics on {addr}: ");
    assert!(stderr.contains(&expected), "{stderr}");
    let out = stoker()
        .args(["worker", "--listen", "127.0.0.1:0", "--metrics-listen", "nine"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("\"nine\""), "{stderr}");
}
