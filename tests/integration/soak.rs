//! Soak: epoch after epoch through `stoker stream` while workers are
//! killed (SIGKILL), stopped (SIGTERM) and restarted at random. Counts
//! samples delivered, restarts survived, duplicates and losses.
//!
//! Runs for `STOKER_SOAK_SECS` seconds (default 100, for CI); set it higher
//! by hand, e.g.
//! `STOKER_SOAK_SECS=900 cargo nextest run --release soak --no-capture`.
//! `STOKER_SOAK_SEED` replays a run's schedule of faults.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Worker, free_port, image_folder_keys, pack, synth_images};

/// xorshift64*: a reproducible schedule from one printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

const WORKERS: usize = 3;

fn start(addr: &str) -> Worker {
    Worker::start_again(1, &["--listen", addr, "--grace-period", "1"])
}

#[derive(Default)]
struct Faults {
    kills: AtomicU64,
    terms: AtomicU64,
}

/// Starts a worker on each address and says so on `started`, then kills
/// or stops one worker at a time, at random, and restarts it on the same
/// address, until `stop`.
fn chaos(
    addrs: Vec<String>,
    seed: u64,
    stop: Arc<AtomicBool>,
    faults: Arc<Faults>,
    started: std::sync::mpsc::Sender<()>,
) {
    let mut rng = Rng(seed);
    let mut workers: Vec<Worker> = addrs.iter().map(|a| start(a)).collect();
    let _ = started.send(());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(rng.millis(300, 1500));
        let i = (rng.next() % WORKERS as u64) as usize;
        let pid = workers[i].child.0.id().to_string();
        if rng.next().is_multiple_of(3) {
            // Graceful: it drains (grace 1 s), then exits on its own.
            let _ = std::process::Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while workers[i].child.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            faults.terms.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = workers[i].child.0.kill();
            let _ = workers[i].child.0.wait();
            faults.kills.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(rng.millis(100, 1000));
        workers[i] = start(&addrs[i]);
    }
}

#[test]
fn soak_random_worker_kills_and_restarts_lose_and_duplicate_nothing() {
    let secs: u64 = std::env::var("STOKER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("STOKER_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("soak: {secs}s, STOKER_SOAK_SEED={seed}");

    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 600, 6, 320, 240);
    pack(&images, shards.to_str().unwrap(), "400K", &[]);
    let expected = image_folder_keys(&images);

    let addrs: Vec<String> = (0..WORKERS).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let faults = Arc::new(Faults::default());
    let (started, workers_up) = std::sync::mpsc::channel();
    let chaos = {
        let (addrs, stop, faults) = (addrs.clone(), Arc::clone(&stop), Arc::clone(&faults));
        std::thread::spawn(move || chaos(addrs, seed, stop, faults, started))
    };
    // Every worker listens before the first epoch (each start waits for
    // its "listening" line).
    workers_up
        .recv_timeout(Duration::from_secs(60))
        .expect("the soak's workers did not all start");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let (mut epochs, mut delivered, mut duplicates, mut lost, mut retries) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    while Instant::now() < deadline {
        let run = crate::support::stream_addrs(
            &addrs,
            shards.to_str().unwrap(),
            &[
                "--epochs",
                "3",
                "--start-epoch",
                &epochs.to_string(),
                "--batch-size",
                "32",
                "--image-size",
                "64",
                "--progress-timeout",
                "5",
                "--worker-patience",
                "60",
            ],
        );
        if !run.success() {
            failures.push(run.stderr());
            break;
        }
        for epoch in epochs..epochs + 3 {
            let mut counts: HashMap<&str, u64> = HashMap::new();
            for (_, key, _) in run.keys.iter().filter(|(e, _, _)| *e == epoch) {
                *counts.entry(key.as_str()).or_default() += 1;
            }
            delivered += counts.values().sum::<u64>();
            duplicates += counts.values().map(|n| n - 1).sum::<u64>();
            lost += expected
                .iter()
                .filter(|(k, _)| !counts.contains_key(k.as_str()))
                .count() as u64;
        }
        retries += run.num("retries");
        epochs += 3;
    }
    stop.store(true, Ordering::Relaxed);
    chaos.join().unwrap();
    let (kills, terms) = (
        faults.kills.load(Ordering::Relaxed),
        faults.terms.load(Ordering::Relaxed),
    );
    println!(
        "soak: {epochs} epochs of {} samples in {:.0}s: {delivered} samples delivered, {} worker restarts survived \
         ({kills} SIGKILL, {terms} SIGTERM), {retries} items reassigned, {duplicates} duplicates, {lost} lost",
        expected.len(),
        started.elapsed().as_secs_f64(),
        kills + terms,
    );
    assert!(failures.is_empty(), "a run failed: {}", failures[0]);
    assert_eq!(duplicates, 0, "duplicates delivered");
    assert_eq!(lost, 0, "samples lost");
    assert!(
        epochs >= 3 && kills + terms > 0,
        "the soak did not run: {epochs} epochs, {kills} kills"
    );
}
