//! `--allow-dataset`: a worker serves only datasets under its prefixes.
//! Another bucket, a sibling prefix, a `..` (plain or percent-encoded) out
//! of an allowed prefix and a symlink out of an allowed folder are each
//! refused with PERMISSION_DENIED naming the dataset, on `DescribeDataset`
//! and on work items of every mode, and nothing is read: the S3 server
//! sees no request and the worker's read-bytes counter stays 0. An allowed
//! dataset streams as usual through the same worker.

use std::path::Path;

use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;

use crate::faultproxy::FaultProxy;
use crate::support::{S3Server, Worker, assert_exactly_once, http_get, image_folder_keys, pack, stream, synth_images};

const ARGS: &[&str] = &["--batch-size", "8", "--image-size", "32", "--transform", "eval"];

/// The first shard `stoker pack` writes.
const SHARD: &str = "shard-000000.tar";

/// The worker's `stoker_worker_storage_read_bytes_total`.
fn read_bytes(worker: &Worker) -> f64 {
    let url = worker
        .metrics_url
        .as_deref()
        .expect("worker started with --metrics-listen");
    let text = http_get(url);
    text.lines()
        .find_map(|l| l.strip_prefix("stoker_worker_storage_read_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no read-bytes counter in:\n{text}"))
}

/// How the worker names `dataset`: a local folder as a path.
fn named(dataset: &str) -> &str {
    dataset.strip_prefix("file://").unwrap_or(dataset)
}

/// How the worker names a shard of `dataset` (`DatasetUri::join`).
fn shard_of(dataset: &str, shard: &str) -> String {
    let dataset = named(dataset);
    if dataset.ends_with('/') {
        format!("{dataset}{shard}")
    } else {
        format!("{dataset}/{shard}")
    }
}

fn assert_denied(status: &tonic::Status, named: &str) {
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{named}: {status:?}");
    assert!(
        status.message().contains(named) && status.message().contains("--allow-dataset"),
        "{named} not named: {status:?}"
    );
}

/// Asks the worker at `addr` to describe each of `datasets`, and to
/// stream each of `items` (dataset, shard) in every item mode (training
/// and `stoker doctor`'s): every answer must be PERMISSION_DENIED naming
/// the dataset (or the shard).
fn assert_refused(addr: &str, datasets: &[&str], items: &[(&str, &str)]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = WorkerClient::connect(format!("http://{addr}")).await.unwrap();
        for dataset in datasets {
            let request = pb::DescribeDatasetRequest {
                dataset: (*dataset).to_owned(),
                format: pb::ShardFormat::Auto as i32,
            };
            let status = client.describe_dataset(request).await.expect_err(dataset);
            assert_denied(&status, named(dataset));
        }
        let spec = stoker_proto::spec_to_pb(&stoker_core::TransformSpec::eval(32));
        for (dataset, shard) in items {
            for mode in [
                pb::ItemMode::Process,
                pb::ItemMode::Read,
                pb::ItemMode::Decode,
                pb::ItemMode::Synthetic,
            ] {
                let item = pb::WorkItem {
                    dataset: (*dataset).to_owned(),
                    shard: (*shard).to_owned(),
                    transform: Some(spec.clone()),
                    start: 0,
                    end: 4,
                    mode: mode as i32,
                    ..pb::WorkItem::default()
                };
                let status = client
                    .process_shard(item)
                    .await
                    .expect_err(&format!("{dataset} {shard} {mode:?}"));
                assert_denied(&status, &shard_of(dataset, shard));
            }
        }
    });
}

/// A one-line `stoker stream` error naming the refusal and the dataset.
fn assert_stream_refused(worker: &Worker, dataset: &str) {
    let run = stream(&[worker], dataset, ARGS, &[]);
    let stderr = run.stderr();
    assert!(!run.success(), "{dataset} streamed: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{stderr}");
    for needle in ["permission denied", dataset, &worker.addr] {
        assert!(lines[0].contains(needle), "{needle:?} not in {:?}", lines[0]);
    }
}

fn images(dir: &Path) -> (std::path::PathBuf, Vec<(String, i64)>) {
    let images = dir.join("images");
    synth_images(&images, 24, 2, 96, 72);
    let keys = image_folder_keys(&images);
    (images, keys)
}

#[test]
fn s3_datasets_outside_the_allowed_prefix_are_refused_unread() {
    let s3 = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (images, expected) = images(dir.path());
    let data = s3.bucket("data");
    let other = s3.bucket("other");
    for target in [data.join("train"), data.join("train-other"), other.join("train")] {
        pack(&images, target.to_str().unwrap(), "60K", &[]);
    }
    // Every request the worker makes passes the proxy.
    let proxy = FaultProxy::passthrough(&s3.endpoint);
    let env = s3.env_with_endpoint(&proxy.endpoint());
    let mut pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pairs.push(("STOKER_LOG", "info"));
    let log = dir.path().join("worker.log");
    let worker = Worker::start_logging_to(
        1,
        &["--allow-dataset", "s3://data/train", "--metrics-listen", "127.0.0.1:0"],
        &pairs,
        &log,
    );

    let foreign = [
        "s3://other/train/",
        "s3://data/train-other/",
        "s3://data/",
        "s3://data/train/../train-other/",
        "s3://data/train/%2e%2e/train-other/",
        "s3://data/train/%2E%2E%2Ftrain-other/",
    ];
    let items: Vec<(&str, &str)> = foreign
        .iter()
        .map(|d| (*d, SHARD))
        .chain([
            ("s3://data/train/", "../train-other/shard-000000.tar"),
            ("s3://data/train/", "%2e%2e/train-other/shard-000000.tar"),
        ])
        .collect();
    assert_refused(&worker.addr, &foreign, &items);
    for dataset in ["s3://other/train/", "s3://data/train/%2e%2e/train-other/"] {
        assert_stream_refused(&worker, dataset);
    }
    assert_eq!(
        proxy.requests().len(),
        0,
        "refused datasets reached S3: {:?}",
        proxy.requests()
    );
    assert_eq!(read_bytes(&worker), 0.0);

    // The allowed prefix streams through the same worker and proxy.
    let run = stream(&[&worker], "s3://data/train/", ARGS, &[]);
    assert_exactly_once(&run, &expected, 0..1);
    assert!(
        proxy.requests().iter().any(|r| r.is_get_of("/data/train/shard-")),
        "{:?}",
        proxy.requests()
    );
    assert!(read_bytes(&worker) > 0.0);

    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("worker serving") && l.contains("s3://data/train/")),
        "the allow-list is not logged at start:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("refused") && l.contains("s3://other/train/")),
        "refusals are not logged:\n{log}"
    );
}

#[test]
fn local_folders_outside_the_allowed_folder_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let (images, expected) = images(dir.path());
    let root = dir.path().join("root");
    for d in ["allowed/ds", "allowed-other/ds", "outside/ds"] {
        pack(&images, root.join(d).to_str().unwrap(), "60K", &[]);
    }
    // A folder link and a shard link from the allowed folder out of it.
    std::os::unix::fs::symlink(root.join("outside/ds"), root.join("allowed/link")).unwrap();
    std::fs::create_dir_all(root.join("allowed/mixed")).unwrap();
    std::os::unix::fs::symlink(
        root.join("outside/ds").join(SHARD),
        root.join("allowed/mixed").join(SHARD),
    )
    .unwrap();
    let allowed = root.join("allowed");
    // The environment form, comma-separated.
    let allow = format!("s3://unused/,{}", allowed.display());
    let worker = Worker::start_with(
        1,
        &["--metrics-listen", "127.0.0.1:0"],
        &[("STOKER_ALLOW_DATASET", allow.as_str())],
    );

    let p = |rel: &str| format!("{}/{rel}", root.display());
    let foreign = [
        p("outside/ds"),
        p("allowed-other/ds"),
        p("allowed/../outside/ds"),
        p("allowed/%2e%2e/outside/ds"),
        p("allowed/link"),
        format!("file://{}", p("allowed/link/")),
    ];
    let foreign: Vec<&str> = foreign.iter().map(String::as_str).collect();
    let mixed = p("allowed/mixed");
    let items: Vec<(&str, &str)> = foreign
        .iter()
        .map(|d| (*d, SHARD))
        .chain([(mixed.as_str(), SHARD)])
        .collect();
    assert_refused(&worker.addr, &foreign, &items);
    assert_stream_refused(&worker, &p("allowed/link"));
    assert_eq!(read_bytes(&worker), 0.0);

    let run = stream(&[&worker], &p("allowed/ds"), ARGS, &[]);
    assert_exactly_once(&run, &expected, 0..1);
    assert!(read_bytes(&worker) > 0.0);
}
