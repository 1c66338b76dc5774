//! Data-parallel ranks, deterministic order and resuming mid-epoch, through
//! the Rust client against real worker processes.
//!
//! - Every rank yields the same number of batches, under each last-batch
//!   policy, and the ranks together deliver each sample once.
//! - With deterministic order, batch k is the same whatever the workers.
//! - A saved position resumes an epoch with exactly the batches that had
//!   not been delivered.

use std::collections::HashSet;
use std::path::Path;

use stoker_client::{Batch, LastBatch, Loader, LoaderConfig, TransformSpec};

use crate::support::{Worker, image_folder_keys, pack, synth_images};

const SIZE: u32 = 24;

/// 61 samples (a prime: no even split) in shards of uneven size.
fn dataset(dir: &Path) -> (String, Vec<String>) {
    let images = dir.join("images");
    let shards = dir.join("shards");
    synth_images(&images, 61, 3, 64, 48);
    pack(&images, shards.to_str().unwrap(), "30K", &[]);
    let keys = image_folder_keys(&images).into_iter().map(|(k, _)| k).collect();
    (shards.to_str().unwrap().to_owned(), keys)
}

fn config(workers: &[&Worker], dataset: &str, batch: usize) -> LoaderConfig {
    let addrs = workers.iter().map(|w| w.addr.clone()).collect();
    let mut c = LoaderConfig::new(addrs, dataset, batch, TransformSpec::train(SIZE));
    c.seed = 5;
    c
}

async fn collect(loader: &Loader, epoch: u64) -> Vec<Batch> {
    let mut stream = loader.epoch(epoch).unwrap();
    let mut out = Vec::new();
    while let Some(b) = stream.next_batch().await {
        out.push(b.unwrap());
    }
    out
}

fn real_keys(batches: &[Batch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| b.keys[..b.real()].iter().cloned())
        .collect()
}

/// A shard's sample keys in tar order, as `tar -tf` lists its members
/// (`<key>.jpg`, `<key>.cls`, ...).
fn tar_keys(shard: &Path) -> Vec<String> {
    let out = std::process::Command::new("tar")
        .arg("-tf")
        .arg(shard)
        .output()
        .unwrap();
    assert!(out.status.success(), "tar -tf {}", shard.display());
    let mut keys: Vec<String> = Vec::new();
    for member in String::from_utf8(out.stdout).unwrap().lines() {
        let (dir, file) = member.rsplit_once('/').unwrap_or(("", member));
        let stem = file.split('.').next().unwrap();
        let key = if dir.is_empty() {
            stem.to_owned()
        } else {
            format!("{dir}/{stem}")
        };
        if keys.last() != Some(&key) {
            keys.push(key);
        }
    }
    keys
}

fn batch_keys(batches: &[Batch]) -> Vec<(u64, Vec<String>)> {
    batches.iter().map(|b| (b.index, b.keys.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rank_yields_the_same_number_of_batches_and_together_they_cover_the_epoch_once() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, expected) = dataset(dir.path());
    let worker = Worker::start(2);
    let (world, batch) = (3u32, 4usize);
    for policy in [LastBatch::Drop, LastBatch::Partial, LastBatch::Pad] {
        let mut counts = Vec::new();
        let mut keys = Vec::new();
        for rank in 0..world {
            let mut c = config(&[&worker], &dataset, batch);
            (c.rank, c.world_size, c.last_batch) = (rank, world, policy);
            let loader = Loader::connect(c).await.unwrap();
            let batches = collect(&loader, 1).await;
            assert_eq!(
                Some(batches.len() as u64),
                loader.batches_per_epoch(),
                "{policy} rank {rank}"
            );
            let indices: Vec<u64> = batches.iter().map(|b| b.index).collect();
            assert_eq!(indices, (0..batches.len() as u64).collect::<Vec<_>>());
            for (i, b) in batches.iter().enumerate() {
                let last = i + 1 == batches.len();
                if policy != LastBatch::Partial || !last {
                    assert_eq!(b.len(), batch, "{policy} rank {rank} batch {i}");
                }
                if policy != LastBatch::Pad {
                    assert!(b.padded == 0 || last, "{policy}: padding before the last batch");
                }
            }
            counts.push(batches.len());
            keys.extend(real_keys(&batches));
        }
        // 61 samples over 3 ranks: shares of 20, 20 and 21.
        let want = match policy {
            LastBatch::Drop => 5,
            LastBatch::Partial | LastBatch::Pad => 6,
        };
        assert_eq!(counts, [want; 3], "{policy}");
        let unique: HashSet<&String> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len(), "{policy}: a sample was delivered twice");
        match policy {
            LastBatch::Drop => assert_eq!(keys.len(), 3 * 5 * batch),
            _ => assert_eq!(unique, expected.iter().collect(), "{policy}: samples missing"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deterministic_batches_do_not_depend_on_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, expected) = dataset(dir.path());
    let (w1, w2, w3) = (Worker::start(1), Worker::start(2), Worker::start(3));

    let mut one = config(&[&w1], &dataset, 8);
    (one.deterministic, one.inflight_per_worker) = (true, Some(1));
    let mut three = config(&[&w1, &w2, &w3], &dataset, 8);
    (three.deterministic, three.inflight_per_worker, three.chunk_bytes) = (true, Some(3), 4096);
    let one = Loader::connect(one).await.unwrap();
    let a = collect(&one, 2).await;
    let b = collect(&Loader::connect(three).await.unwrap(), 2).await;
    assert_eq!(batch_keys(&a), batch_keys(&b));

    // Both are the plan's order, computed independently: the epoch's items
    // in plan order, each shard's samples as GNU tar lists them.
    let mut planned = Vec::new();
    for item in one.plan(2).unwrap().items {
        let keys = tar_keys(&Path::new(&dataset).join(&item.shard.name));
        let end = item.end.map_or(keys.len(), |e| e as usize);
        planned.extend_from_slice(&keys[item.start as usize..end]);
    }
    let chunks: Vec<Vec<String>> = planned.chunks(8).map(<[String]>::to_vec).collect();
    assert_eq!(a.iter().map(|b| b.keys.clone()).collect::<Vec<_>>(), chunks);
    for (x, y) in a.iter().zip(&b) {
        assert!(x.pixels[..] == y.pixels[..], "batch {} has other pixels", x.index);
    }
    let mut all = real_keys(&a);
    all.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(all, want);

    // Another epoch gives other batches.
    let c = collect(&Loader::connect(config(&[&w1], &dataset, 8)).await.unwrap(), 3).await;
    assert_ne!(batch_keys(&a), batch_keys(&c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_epoch_yields_exactly_the_batches_not_yet_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, expected) = dataset(dir.path());
    let (w1, w2) = (Worker::start(1), Worker::start(2));
    for deterministic in [true, false] {
        let make = || {
            let mut c = config(&[&w1, &w2], &dataset, 5);
            (c.deterministic, c.rank, c.world_size, c.prefetch) = (deterministic, 1, 2, 3);
            c
        };
        let whole = collect(&Loader::connect(make()).await.unwrap(), 4).await;

        // Three batches, then the job stops (with more assembled ahead).
        let loader = Loader::connect(make()).await.unwrap();
        let mut stream = loader.epoch(4).unwrap();
        let mut first = Vec::new();
        for _ in 0..3 {
            first.push(stream.next_batch().await.unwrap().unwrap());
        }
        let state = stream.state();
        assert_eq!((state.epoch, state.batches), (4, 3));
        drop(stream);
        drop(loader);

        // A new process would connect afresh.
        let loader = Loader::connect(make()).await.unwrap();
        let mut stream = loader.resume(&state).unwrap();
        let mut rest = Vec::new();
        while let Some(b) = stream.next_batch().await {
            rest.push(b.unwrap());
        }
        assert_eq!(first.len() + rest.len(), whole.len(), "deterministic={deterministic}");
        assert_eq!(rest.first().map(|b| b.index), Some(3));
        if deterministic {
            assert_eq!(batch_keys(&rest), batch_keys(&whole[3..]));
        }
        let mut got = real_keys(&first);
        got.extend(real_keys(&rest));
        let mut want = real_keys(&whole);
        got.sort();
        want.sort();
        assert_eq!(
            got, want,
            "deterministic={deterministic}: resumed epoch lost or repeated samples"
        );
        assert!(want.iter().all(|k| expected.contains(k)));
    }

    // A state saved with other settings is refused, naming the setting.
    let loader = Loader::connect(config(&[&w1], &dataset, 5)).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    stream.next_batch().await.unwrap().unwrap();
    let state = stream.state();
    drop(stream);
    let mut other = config(&[&w1], &dataset, 6);
    other.seed = 5;
    let err = Loader::connect(other).await.unwrap().resume(&state).unwrap_err();
    assert!(err.to_string().contains("batch size: saved 5, now 6"), "{err}");
}

/// Takes `n` batches of `epoch`, then returns the saved state.
async fn stop_after(loader: &Loader, epoch: u64, n: usize) -> (Vec<Batch>, stoker_client::EpochState) {
    let mut stream = loader.epoch(epoch).unwrap();
    let mut first = Vec::new();
    for _ in 0..n {
        first.push(stream.next_batch().await.unwrap().unwrap());
    }
    (first, stream.state())
}

async fn resume_all(loader: &Loader, state: &stoker_client::EpochState) -> Vec<Batch> {
    let mut stream = loader.resume(state).unwrap();
    let mut out = Vec::new();
    while let Some(b) = stream.next_batch().await {
        out.push(b.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_past_the_dispatch_window_or_into_pure_padding_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, _) = dataset(dir.path());
    let worker = Worker::start(2);

    // One lane: deterministic order lets it run 2 items ahead. Resume
    // after most of the items were delivered whole.
    let make = || {
        let mut c = config(&[&worker], &dataset, 5);
        (c.deterministic, c.inflight_per_worker) = (true, Some(1));
        c
    };
    let loader = Loader::connect(make()).await.unwrap();
    let whole = collect(&loader, 0).await;
    let (_, state) = stop_after(&loader, 0, whole.len() - 2).await;
    assert!(state.done_items.len() > 2, "{:?}", state.done_items);
    let rest = tokio::time::timeout(std::time::Duration::from_secs(30), resume_all(&loader, &state))
        .await
        .expect("a resumed epoch past the window stalled");
    assert_eq!(batch_keys(&rest), batch_keys(&whole[whole.len() - 2..]));

    // Rank 0 of 2 holds 30 of 61 samples: 6 full batches of 5, then one
    // batch of padding to match rank 1's 7. Resumed after the 6th, only
    // that padding is left, with nothing of this run to repeat.
    let mut c = config(&[&worker], &dataset, 5);
    (c.world_size, c.last_batch) = (2, LastBatch::Partial);
    let loader = Loader::connect(c).await.unwrap();
    let (first, state) = stop_after(&loader, 1, 6).await;
    assert!(first.iter().all(|b| b.real() == 5));
    let rest = resume_all(&loader, &state).await;
    assert_eq!(rest.len(), 1);
    assert_eq!((rest[0].index, rest[0].real(), rest[0].len()), (6, 0, 5));
}
