//! Workers coming and going mid-epoch: one that starts late gets work, one
//! that is told to stop drains (finishing or handing back what it holds),
//! and when every worker is gone the client waits, then says so.

use std::time::{Duration, Instant};

use stoker_client::{Batch, ClientError, EpochStream, Loader, LoaderConfig, TransformSpec};
use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::support::{Worker, free_port, image_folder_keys, pack, signal, stoker, synth_images};

/// A packed dataset and its expected (key, label) pairs.
struct Dataset {
    _dir: tempfile::TempDir,
    path: String,
    expected: Vec<(String, i64)>,
}

fn dataset(images: usize, width: u32, height: u32, shard_size: &str) -> Dataset {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&folder, images, 4, width, height);
    pack(&folder, shards.to_str().unwrap(), shard_size, &[]);
    Dataset {
        expected: image_folder_keys(&folder),
        path: shards.to_str().unwrap().to_owned(),
        _dir: dir,
    }
}

fn config(workers: Vec<String>, data: &Dataset) -> LoaderConfig {
    let mut c = LoaderConfig::new(workers, data.path.clone(), 8, TransformSpec::train(64));
    // Small queues, so the workers stay mid-stream while the test acts.
    c.prefetch = 1;
    c
}

fn keys_of(batch: &Batch) -> impl Iterator<Item = (String, i64)> + '_ {
    batch.keys.iter().cloned().zip(batch.labels.iter().copied())
}

/// Drains the epoch, sleeping `pace` per batch; returns the error that
/// ended it, if any.
async fn drain(stream: &mut EpochStream, got: &mut Vec<(String, i64)>, pace: Duration) -> Option<ClientError> {
    while let Some(batch) = stream.next_batch().await {
        match batch {
            Ok(b) => got.extend(keys_of(&b)),
            Err(e) => return Some(e),
        }
        tokio::time::sleep(pace).await;
    }
    None
}

fn assert_once(mut got: Vec<(String, i64)>, expected: &[(String, i64)]) {
    got.sort();
    let n = got.len();
    got.dedup();
    assert_eq!(n, got.len(), "{} samples delivered twice", n - got.len());
    assert_eq!(got, expected, "samples lost");
}

/// Waits for the worker process to exit; its exit code.
fn wait_exit(worker: &mut Worker, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = worker.child.0.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "worker still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_mid_epoch_gets_work() {
    let data = dataset(240, 160, 120, "100K");
    let w1 = Worker::start(1);
    // The second worker's address is known, but nothing listens there yet.
    let late = format!("127.0.0.1:{}", free_port());
    let loader = Loader::connect(config(vec![w1.addr.clone(), late.clone()], &data))
        .await
        .unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.extend(keys_of(&stream.next_batch().await.unwrap().unwrap()));
    }
    let w2 = Worker::start_with(1, &["--listen", &late], &[]);
    assert_eq!(w2.addr, late);
    let err = drain(&mut stream, &mut got, Duration::from_millis(250)).await;
    assert!(err.is_none(), "{err:?}");
    assert_once(got, &data.expected);
    let report = stream.report();
    assert!(
        report.workers[1].samples > 0,
        "the late worker got no work: {:?}",
        report.workers
    );
    // Items refused while it was down are not failures of the items.
    assert_eq!(report.retries, 0);
}

async fn health(addr: &str) -> Option<i32> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect()
        .await
        .ok()?;
    let mut h = HealthClient::new(channel);
    let r = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: "stoker.v1.Worker".into(),
        })
        .await
        .ok()?;
    Some(r.into_inner().status)
}

/// Streams an epoch over two workers built for slow items (large images,
/// one thread each), sends SIGTERM to the first after the first batch and
/// checks what the drain promises. Returns the epoch's retries.
async fn drain_case(grace: &str) -> u64 {
    let data = dataset(96, 1600, 1200, "4M");
    let mut w1 = Worker::start_with(1, &["--grace-period", grace], &[]);
    let w2 = Worker::start(1);
    let loader = Loader::connect(config(vec![w1.addr.clone(), w2.addr.clone()], &data))
        .await
        .unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut got: Vec<(String, i64)> = keys_of(&stream.next_batch().await.unwrap().unwrap()).collect();
    assert_eq!(health(&w1.addr).await, Some(ServingStatus::Serving as i32));
    signal(w1.child.0.id(), "-TERM");

    // While it drains (or as soon as it stopped), it serves no new work.
    let mut client = WorkerClient::connect(format!("http://{}", w1.addr)).await.ok();
    if let Some(c) = client.as_mut() {
        // The signal takes a moment to arrive.
        let deadline = Instant::now() + Duration::from_secs(3);
        while health(&w1.addr).await == Some(ServingStatus::Serving as i32) {
            assert!(Instant::now() < deadline, "still SERVING 3s after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let item = pb::WorkItem {
            dataset: data.path.clone(),
            shard: "shard-000000.tar".into(),
            transform: Some(stoker_proto::spec_to_pb(&TransformSpec::train(64))),
            ..Default::default()
        };
        if let Err(status) = c.process_shard(item).await {
            // UNAVAILABLE while it drains; CANCELLED, or an HTTP/2 GOAWAY
            // (NO_ERROR) that tonic reports as INTERNAL, when the drain
            // already ended and the worker closed the connection under the
            // request. Never an accepted item.
            let closed = status.code() == tonic::Code::Internal && format!("{status:?}").contains("GoAway");
            assert!(
                matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Cancelled) || closed,
                "new work during the drain: {status:?}"
            );
        } else {
            panic!("a draining worker accepted new work");
        }
    }

    let err = drain(&mut stream, &mut got, Duration::from_millis(20)).await;
    assert!(err.is_none(), "{err:?}");
    assert_once(got, &data.expected);
    assert_eq!(
        wait_exit(&mut w1, Duration::from_secs(40)),
        Some(0),
        "worker did not exit 0"
    );
    stream.report().retries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_worker_finish_what_it_holds_and_exit_0() {
    // A long grace period: its items finish, none is reassigned.
    let retries = drain_case("60").await;
    assert_eq!(retries, 0, "items were reassigned although the grace period sufficed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_past_the_grace_period_hands_unfinished_work_back() {
    // No grace: the items in progress end at once and move to the other
    // worker, which delivers only what had not arrived.
    let retries = drain_case("0").await;
    assert!(retries >= 1, "nothing was handed back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_worker_is_gone_the_client_waits_then_fails_naming_them() {
    let data = dataset(240, 160, 120, "100K");

    // The only worker dies and comes back on the same address within the
    // patience: the epoch completes, exactly once.
    let w = Worker::start(1);
    let addr = w.addr.clone();
    let mut c = config(vec![addr.clone()], &data);
    c.worker_patience = Duration::from_secs(20);
    let loader = Loader::connect(c).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut got: Vec<(String, i64)> = keys_of(&stream.next_batch().await.unwrap().unwrap()).collect();
    signal(w.child.0.id(), "-KILL");
    drop(w);
    // Back only once the client has come back for it: its reconnect lands
    // on a stand-in listener of the test's on that address first.
    let stand_in = bind_again(&addr).await;
    match tokio::time::timeout(Duration::from_secs(20), stand_in.accept()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("the stand-in listener on {addr} failed to accept: {e}"),
        Err(_) => panic!("the client did not come back for {addr} within 20 s"),
    }
    drop(stand_in);
    let _back = Worker::start_again(1, &["--listen", &addr]);
    let err = drain(&mut stream, &mut got, Duration::ZERO).await;
    assert!(err.is_none(), "{err:?}");
    assert_once(got, &data.expected);

    // It does not come back: the epoch fails after the patience, naming
    // the worker and why.
    let w = Worker::start(1);
    let addr = w.addr.clone();
    let mut c = config(vec![addr.clone()], &data);
    c.worker_patience = Duration::from_secs(2);
    let loader = Loader::connect(c).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    stream.next_batch().await.unwrap().unwrap();
    signal(w.child.0.id(), "-KILL");
    let killed = Instant::now();
    let err = drain(&mut stream, &mut Vec::new(), Duration::ZERO).await;
    let waited = killed.elapsed();
    let err = err.expect("the epoch ended without an error").to_string();
    assert!(
        err.contains("all workers unavailable for 2s") && err.contains(&addr),
        "{err}"
    );
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(15),
        "failed after {waited:?}"
    );
}

#[test]
fn stoker_health_says_whether_a_worker_serves() {
    let worker = Worker::start(1);
    let out = stoker().args(["health", &worker.addr]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}: serving", worker.addr)
    );
    // Nothing listening: a failure naming the address, within the timeout.
    let gone = format!("127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = stoker().args(["health", &gone, "--timeout", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(5));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&gone), "{stderr}");
}

/// A listener on `addr`, which a process just killed listened on (the
/// address can take a moment to be free again).
async fn bind_again(addr: &str) -> tokio::net::TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) => assert!(Instant::now() < deadline, "cannot listen on {addr} again: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
