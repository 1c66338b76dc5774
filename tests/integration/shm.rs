//! The shared-memory path from workers on the client's host (stoker-shm):
//! the same samples, exactly once, with the same pixels as over the
//! network; a fallback to the network when a worker cannot map the ring;
//! and no mapping left in a worker once its client is gone.
//!
//! Every other test that runs a client beside a worker process on this
//! machine goes through the ring too (it is on by default); a forged slot
//! is in `protocol`, a killed worker in `delivery`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use stoker_client::{Loader, LoaderConfig, TransformSpec};

use crate::support::{StreamChild, Worker, image_folder_keys, pack, synth_images};

/// Pixels by (epoch, key) for `epochs` epochs, and the samples that came
/// through the ring, with the ring `shared_memory` bytes (0: none).
async fn epochs_of_pixels(addr: &str, dataset: &str, shared_memory: usize) -> (BTreeMap<(u64, String), Vec<u8>>, u64) {
    epochs_of(addr, dataset, shared_memory, TransformSpec::train(40)).await
}

/// [`epochs_of_pixels`] with `spec`: each image's size (`HxW:`) and own
/// pixels (its rows of its batch's block).
async fn epochs_of(
    addr: &str,
    dataset: &str,
    shared_memory: usize,
    spec: TransformSpec,
) -> (BTreeMap<(u64, String), Vec<u8>>, u64) {
    let mut config = LoaderConfig::new(vec![addr.to_owned()], dataset, 8, spec);
    config.seed = 5;
    config.shared_memory = shared_memory;
    let loader = Loader::connect(config).await.unwrap();
    let mut out = BTreeMap::new();
    let mut ring = 0;
    for epoch in 0..2 {
        let mut stream = loader.epoch(epoch).unwrap();
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.unwrap();
            for (i, key) in batch.keys.iter().enumerate() {
                let (h, w) = batch.image_sizes[i];
                let row = batch.width as usize * 3;
                let mut own = format!("{h}x{w}:").into_bytes();
                for r in batch.image(i).chunks(row).take(h as usize) {
                    own.extend_from_slice(&r[..w as usize * 3]);
                }
                let first = out.insert((epoch, key.clone()), own);
                assert!(first.is_none(), "epoch {epoch}: {key} arrived twice");
            }
        }
        let report = stream.report();
        assert_eq!(report.samples, 60, "epoch {epoch}");
        ring += report.workers.iter().map(|w| w.ring_samples).sum::<u64>();
    }
    (out, ring)
}

/// Sixty 96x72 images of three classes, packed in 80 KB shards: the
/// folder that holds them (removed when dropped), the images, the shards.
fn sixty_images() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (images, shards) = (dir.path().join("images"), dir.path().join("shards"));
    synth_images(&images, 60, 3, 96, 72);
    pack(&images, shards.to_str().unwrap(), "80K", &[]);
    (dir, images, shards)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_epochs_through_shared_memory_are_exact_and_equal_the_networks_pixels() {
    let (_dir, images, shards) = sixty_images();
    let dataset = shards.to_str().unwrap();
    let worker = Worker::start(2);

    let (ring, through_ring) = epochs_of_pixels(&worker.addr, dataset, 64 << 20).await;
    let (network, through_network) = epochs_of_pixels(&worker.addr, dataset, 0).await;
    assert_eq!(through_ring, 120, "every sample of both epochs came through the ring");
    assert_eq!(through_network, 0);
    let keys: BTreeSet<String> = image_folder_keys(&images).into_iter().map(|(k, _)| k).collect();
    for epoch in 0..2 {
        let got: BTreeSet<String> = ring
            .keys()
            .filter(|(e, _)| *e == epoch)
            .map(|(_, k)| k.clone())
            .collect();
        assert_eq!(got, keys, "epoch {epoch}");
    }
    assert_eq!(ring.len(), network.len());
    for (id, pixels) in &ring {
        assert!(
            pixels == &network[id],
            "{id:?}: the ring's pixels differ from the network's"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_smaller_than_the_work_in_flight_sends_the_rest_inline() {
    let (_dir, _, shards) = sixty_images();
    let worker = Worker::start(2);
    // Two slots of 40x40x3: most samples find the ring full and come inline.
    let (pixels, through_ring) = epochs_of_pixels(&worker.addr, shards.to_str().unwrap(), 2 * 4800).await;
    assert_eq!(pixels.len(), 120);
    assert!(
        (1..120).contains(&through_ring),
        "{through_ring} of 120 through a ring of 2 slots"
    );
}

/// A transform that keeps each image's size: slots of a sixty-fourth of
/// the ring; the images that fit come through it with the network's
/// pixels, those larger than a slot over the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_of_their_own_sizes_come_through_the_ring_where_they_fit() {
    let (_dir, _, shards) = sixty_images();
    let worker = Worker::start(2);
    // 96x72 zoomed out 1 to 2 times: 20 to 83 KB an image.
    let spec = || {
        TransformSpec::from_json(r#"{"ops": [{"op": "RandomZoomOut", "p": 1.0, "side_range": [1.0, 2.0]}]}"#).unwrap()
    };
    let dataset = shards.to_str().unwrap();
    let (network, none) = epochs_of(&worker.addr, dataset, 0, spec()).await;
    let (ring, all) = epochs_of(&worker.addr, dataset, 64 << 20, spec()).await;
    let (small, some) = epochs_of(&worker.addr, dataset, 64 * 40_000, spec()).await;
    assert_eq!((none, all), (0, 120), "1 MiB slots hold every image");
    assert!((1..120).contains(&some), "{some} of 120 through 40 KB slots");
    let sizes: BTreeSet<&[u8]> = network
        .values()
        .filter_map(|p| p.split(|&b| b == b':').next())
        .collect();
    assert!(sizes.len() > 10, "{sizes:?}");
    assert!(
        ring == network && small == network,
        "the ring's pixels differ from the network's"
    );
}

/// The worker's mappings of client rings, from its /proc/PID/maps.
fn ring_mappings(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("stoker-ring"))
        .count()
}

#[test]
fn a_worker_unmaps_the_ring_of_a_client_that_was_killed() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 200, 4, 320, 240);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let worker = Worker::start_with(1, &["--chunk-bytes", "16K"], &[]);
    let pid = worker.child.0.id();
    let mut run = StreamChild::spawn(
        &[&worker],
        shards.to_str().unwrap(),
        &[
            "--batch-size",
            "8",
            "--image-size",
            "64",
            "--prefetch",
            "1",
            "--epochs",
            "3",
        ],
    );
    run.wait_for_samples(8, Duration::from_secs(30));
    assert!(
        ring_mappings(pid) > 0,
        "the worker maps its client's ring while serving it"
    );
    drop(run); // kills the client mid-epoch
    let deadline = Instant::now() + Duration::from_secs(20);
    while ring_mappings(pid) > 0 {
        assert!(
            Instant::now() < deadline,
            "the worker still maps the dead client's ring after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(feature = "failpoints")]
#[test]
fn a_worker_that_cannot_map_the_ring_serves_over_the_network() {
    use crate::support::{assert_exactly_once, stream};
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 50, 2, 96, 72);
    pack(&images, shards.to_str().unwrap(), "60K", &[]);
    let refusing = Worker::start_with_env(1, &[("FAILPOINTS", "stoker-ring-refused=return")]);
    let run = stream(
        &[&refusing],
        shards.to_str().unwrap(),
        &["--batch-size", "8", "--image-size", "32", "--epochs", "2"],
        &[],
    );
    assert_exactly_once(&run, &image_folder_keys(&images), 0..2);
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    assert_eq!(workers[0]["ring_samples"], 0, "{workers:?}");
    let stderr = run.stderr();
    assert_eq!(
        stderr.matches("cannot use the shared-memory ring").count(),
        1,
        "said once, with the reason: {stderr}"
    );
    assert!(stderr.contains("failpoint stoker-ring-refused"), "{stderr}");
}
