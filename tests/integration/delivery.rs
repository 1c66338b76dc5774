//! Exactly-once delivery and deterministic content across workers.

use std::collections::HashMap;

use stoker_client::{Loader, LoaderConfig, TransformSpec};

use crate::support::{
    SLOW_SAMPLES, StreamChild, Worker, assert_exactly_once, image_folder_keys, pack, signal, stream, synth_images,
};

#[test]
fn two_workers_two_epochs_deliver_every_sample_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 150, 5, 160, 120);
    pack(&images, shards.to_str().unwrap(), "120K", &[]);
    let expected = image_folder_keys(&images);
    assert_eq!(expected.len(), 150);

    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let run = stream(
        &[&w1, &w2],
        shards.to_str().unwrap(),
        &[
            "--batch-size",
            "16",
            "--image-size",
            "64",
            "--epochs",
            "2",
            "--seed",
            "7",
        ],
        &[],
    );
    assert_exactly_once(&run, &expected, 0..2);
    // 150 samples per epoch in batches of 16: 9 full and one of 6, twice.
    assert_eq!(run.num("batches"), 20);
    assert_eq!(run.num("skipped"), 0);
    let json = run.json.as_ref().unwrap();
    assert!(json["bytes_per_sec"].as_f64().unwrap() > 0.0);
    assert!(json["images_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(json["epochs"], 2);
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    assert_eq!(workers.len(), 2);
    for w in &workers {
        assert!(w["samples"].as_u64().unwrap() > 0, "a worker got no work: {workers:?}");
    }
}

#[test]
fn ranks_split_an_epoch_without_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 60, 3, 96, 64);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let expected = image_folder_keys(&images);
    let w = Worker::start(2);
    let mut all = Vec::new();
    for rank in 0..3 {
        let run = stream(
            &[&w],
            shards.to_str().unwrap(),
            &[
                "--batch-size",
                "8",
                "--image-size",
                "32",
                "--rank",
                &rank.to_string(),
                "--world-size",
                "3",
            ],
            &[],
        );
        assert!(run.success(), "{}", run.stderr());
        assert!(!run.keys.is_empty(), "rank {rank} got nothing");
        all.extend(run.keys.into_iter().map(|(_, k, l)| (k, l)));
    }
    all.sort();
    assert_eq!(all, expected);
}

/// 40 small JPEGs in 2 classes, packed in 60K shards: (their folder, the
/// shards' path).
fn forty_samples() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 40, 2, 120, 90);
    pack(&images, shards.to_str().unwrap(), "60K", &[]);
    let shards = shards.to_str().unwrap().to_owned();
    (dir, shards)
}

/// A loader of `dataset` on the worker at `addr`: batches of 8, seed 11,
/// the train transform at 48 px.
async fn pixels_loader(addr: &str, dataset: &str) -> Loader {
    let mut config = LoaderConfig::new(vec![addr.to_owned()], dataset, 8, TransformSpec::train(48));
    config.seed = 11;
    Loader::connect(config).await.unwrap()
}

async fn pixels_by_key(addr: &str, dataset: &str, epoch: u64) -> HashMap<String, Vec<u8>> {
    let loader = pixels_loader(addr, dataset).await;
    let mut stream = loader.epoch(epoch).unwrap();
    let mut out = HashMap::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for (i, key) in batch.keys.iter().enumerate() {
            out.insert(key.clone(), batch.image(i).to_vec());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_gets_the_same_pixels_on_any_worker() {
    let (_dir, dataset) = forty_samples();
    let dataset = dataset.as_str();
    // Different thread counts, so work is interleaved differently.
    let (w1, w2) = (Worker::start(1), Worker::start(3));
    let a = pixels_by_key(&w1.addr, dataset, 3).await;
    let b = pixels_by_key(&w2.addr, dataset, 3).await;
    assert_eq!(a.len(), 40);
    assert_eq!(a.keys().collect::<std::collections::BTreeSet<_>>(), b.keys().collect());
    for (key, pixels) in &a {
        assert!(pixels == &b[key], "sample {key} differs between workers");
    }
    // And the augmentation really is random per epoch: most crops change.
    let c = pixels_by_key(&w1.addr, dataset, 4).await;
    let changed = a.iter().filter(|(k, p)| *p != &c[*k]).count();
    assert!(changed > 30, "only {changed} of 40 samples changed between epochs");
}

/// The next epoch starts ahead, once the current one's items are all in
/// (`Loader::start_ahead` after each batch), and `Loader::epoch` takes it:
/// every sample once, with the pixels a loader that starts the epoch when
/// asked delivers. Asking for another epoch stops the one started ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_epoch_starts_ahead_and_delivers_what_it_would_have() {
    let (_dir, dataset) = forty_samples();
    let dataset = dataset.as_str();
    let w = Worker::start(2);
    let loader = pixels_loader(&w.addr, dataset).await;
    async fn drain(loader: &Loader, epoch: u64) -> HashMap<String, Vec<u8>> {
        let mut stream = loader.epoch(epoch).unwrap();
        assert_eq!(loader.epoch_ahead(), None, "epoch {epoch} taken");
        let mut out = HashMap::new();
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.unwrap();
            loader.start_ahead(&stream);
            for (i, key) in batch.keys.iter().enumerate() {
                assert!(
                    out.insert(key.clone(), batch.image(i).to_vec()).is_none(),
                    "{key} twice in epoch {epoch}"
                );
            }
        }
        out
    }
    let first = drain(&loader, 3).await;
    assert_eq!(first.len(), 40);
    // Every item of epoch 3 was in by its last batch: epoch 4 is under way.
    assert_eq!(loader.epoch_ahead(), Some(4));
    let ahead = drain(&loader, 4).await;
    let asked = pixels_by_key(&w.addr, dataset, 4).await;
    assert_eq!(ahead.len(), 40);
    for (key, pixels) in &asked {
        assert!(ahead.get(key) == Some(pixels), "{key}: the epoch started ahead differs");
    }
    // Epoch 5 was started ahead in turn; asking for 9 stops it.
    assert_eq!(loader.epoch_ahead(), Some(5));
    assert_eq!(drain(&loader, 9).await.len(), 40);
    assert_eq!(loader.epoch_ahead(), Some(10));
}

/// Streams an epoch through two worker processes with `stoker stream
/// --keys-out`, calling `disrupt` on the first worker once the training
/// side has received its first batch, and checks that every sample arrived
/// exactly once. Returns how many work items were reassigned.
///
/// The workers run on this host, so their samples come through the
/// client's shared-memory ring: checked too.
///
/// The first worker takes 20 ms a sample ([`SLOW_SAMPLES`]), so when the
/// first batch arrives it is early in its items, however fast the host:
/// the disruption always catches it mid-item. (Without it, a CI run had
/// both workers through every item before the SIGSTOP, and nothing was
/// reassigned.)
fn epoch_survives(disrupt: impl FnOnce(&Worker), progress_timeout: &str) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 240, 4, 320, 240);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let shard_count = std::fs::read_dir(&shards)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "tar"))
        .count();
    assert!((3..=8).contains(&shard_count), "{shard_count} shards");
    let expected = image_folder_keys(&images);
    let small_chunks = ["--chunk-bytes", "16K"];
    let (w1, w2) = (
        Worker::start_with(1, &small_chunks, &SLOW_SAMPLES),
        Worker::start_with(1, &small_chunks, &[]),
    );
    let mut run = StreamChild::spawn(
        &[&w1, &w2],
        shards.to_str().unwrap(),
        &[
            "--batch-size",
            "8",
            "--image-size",
            "64",
            "--prefetch",
            "1",
            "--progress-timeout",
            progress_timeout,
        ],
    );
    run.wait_for_samples(8, std::time::Duration::from_secs(30));
    disrupt(&w1);
    let run = run.finish();
    assert_exactly_once(&run, &expected, 0..1);
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    let ring: u64 = workers.iter().map(|w| w["ring_samples"].as_u64().unwrap()).sum();
    assert!(ring > 0, "no sample came through the shared ring: {workers:?}");
    run.num("retries")
}

#[test]
fn a_worker_killed_mid_epoch_loses_nothing() {
    let retries = epoch_survives(|w| signal(w.child.0.id(), "-KILL"), "30");
    assert!(retries >= 1, "the killed worker's items were never reassigned");
}

#[test]
fn a_stalled_worker_is_given_up_on_after_the_progress_timeout() {
    let retries = epoch_survives(|w| signal(w.child.0.id(), "-STOP"), "2");
    assert!(retries >= 1, "the stalled worker's items were never reassigned");
}

#[test]
fn a_relative_dataset_path_is_read_where_the_client_runs() {
    // The worker runs in the test's directory; the client in `dir`, where
    // `shards` lies: the path is the client's.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 20, 2, 64, 48);
    pack(&images, dir.path().join("shards").to_str().unwrap(), "40K", &[]);
    let worker = Worker::start(1);
    let keys = dir.path().join("keys.tsv");
    let output = crate::support::stoker()
        .current_dir(dir.path())
        .args(["stream", "--workers", &worker.addr, "--dataset", "shards", "--json"])
        .args([
            "--batch-size",
            "4",
            "--image-size",
            "32",
            "--keys-out",
            keys.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let run = crate::support::StreamRun::from_output(output, &std::fs::read_to_string(&keys).unwrap_or_default());
    assert_exactly_once(&run, &image_folder_keys(&images), 0..1);
    // No training step stood in for: no worker count to keep up with one.
    assert!(!run.stderr().contains("workers to keep up"), "{}", run.stderr());
}

#[test]
fn the_workers_to_keep_up_come_with_a_training_step_only() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 48, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let worker = Worker::start(1);
    let args = ["--batch-size", "8", "--image-size", "32", "--step-seconds", "0.05"];
    let run = stream(&[&worker], shards.to_str().unwrap(), &args, &[]);
    assert_exactly_once(&run, &image_folder_keys(&images), 0..1);
    assert!(run.stderr().contains("workers to keep up: "), "{}", run.stderr());
}

#[test]
fn an_epoch_that_delivers_nothing_fails_and_says_why() {
    // Every sample lacks the required field: all skipped, none delivered.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 12, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let worker = Worker::start(1);
    let args = ["--batch-size", "4", "--image-size", "32", "--field", "x=npy"];
    let run = stream(&[&worker], shards.to_str().unwrap(), &args, &[]);
    assert!(!run.success(), "an epoch of nothing passed: {}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains("epoch 0 failed: no sample delivered: all 12 read were skipped")
            && stderr.contains("12 × missing field \"x\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_accepts_and_never_answers_fails_the_start_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 8, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let worker = Worker::start(1);
    // Stopped: the kernel still accepts its connections, nothing answers.
    signal(worker.child.0.id(), "-STOP");
    let mut config = LoaderConfig::new(
        vec![worker.addr.clone()],
        shards.to_str().unwrap(),
        4,
        TransformSpec::train(32),
    );
    config.connect_timeout = std::time::Duration::from_secs(1);
    let started = std::time::Instant::now();
    let err = Loader::connect(config).await.unwrap_err().to_string();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        err.contains(&worker.addr) && err.contains("no answer within 1.0s"),
        "{err}"
    );
    signal(worker.child.0.id(), "-CONT");
}
