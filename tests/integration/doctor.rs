//! `stoker doctor` against real workers: it must name the stage that is
//! really slow. Slow storage is an S3 server behind a proxy that paces its
//! responses; a slow worker is one CPU thread decoding large photos-sized
//! JPEGs from a local folder; a corrupt shard fails the storage stage,
//! named with the shard.

use crate::faultproxy::FaultProxy;
use crate::support::{S3Server, Worker, pack, stoker, synth_images};

/// `stoker doctor --json` on `workers`; the parsed object.
fn doctor(workers: &[&Worker], dataset: &str, args: &[&str]) -> serde_json::Value {
    let addrs: Vec<&str> = workers.iter().map(|w| w.addr.as_str()).collect();
    let out = stoker()
        .args(["doctor", "--workers", &addrs.join(","), "--dataset", dataset, "--json"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "doctor failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    println!("{json:#}");
    json
}

fn rate(json: &serde_json::Value, stage: &str) -> f64 {
    json["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == stage && s["worker"].is_null())
        .unwrap_or_else(|| panic!("no {stage} stage in {json}"))["images_per_sec"]
        .as_f64()
        .unwrap()
}

#[test]
fn slow_storage_is_named_as_the_bottleneck() {
    let s3 = S3Server::start();
    s3.bucket("data");
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 240, 4, 160, 120);
    pack(&images, "s3://data/slow/", "150K", &s3.env());
    // Responses paced at 192 KB/s per connection: a few dozen small JPEGs
    // a second per read, far below what two threads decode.
    let proxy = FaultProxy::throttled(&s3.endpoint, 192 << 10);
    let env = s3.env_with_endpoint(&proxy.endpoint());
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let worker = Worker::start_with(2, &[], &pairs);
    let json = doctor(
        &[&worker],
        "s3://data/slow/",
        &[
            "--batch-size",
            "16",
            "--image-size",
            "32",
            "--samples",
            "160",
            "--seconds",
            "0",
        ],
    );
    assert_eq!(json["bottleneck"], "storage", "{json:#}");
    assert!(
        json["summary"]
            .as_str()
            .unwrap()
            .starts_with("storage is the bottleneck")
    );
    // Reading alone is as slow as reading and decoding: that is the sign.
    assert!(
        rate(&json, "decode + transform") >= 0.8 * rate(&json, "storage"),
        "{json:#}"
    );
    assert!(rate(&json, "transport") > 5.0 * rate(&json, "storage"), "{json:#}");
    assert!(json["workers_for_target"].as_u64().unwrap() > 1, "{json:#}");
}

#[test]
fn a_slow_worker_is_named_as_the_bottleneck() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 96, 2, 640, 480);
    pack(&images, shards.to_str().unwrap(), "2M", &[]);
    let worker = Worker::start(1);
    let json = doctor(
        &[&worker],
        shards.to_str().unwrap(),
        &[
            "--batch-size",
            "16",
            "--image-size",
            "224",
            "--samples",
            "96",
            "--seconds",
            "0.5",
            "--target-rate",
            "5000",
        ],
    );
    assert_eq!(json["bottleneck"], "decode + transform", "{json:#}");
    let decode = rate(&json, "decode + transform");
    assert!(decode < 0.8 * rate(&json, "storage"), "{json:#}");
    assert!(
        decode < rate(&json, "transport") && decode < rate(&json, "client"),
        "{json:#}"
    );
    // One worker's rate, and the count that reaches 5,000 images/s at it.
    let stages = json["stages"].as_array().unwrap();
    let alone = stages.iter().find(|s| s["worker"] == worker.addr.as_str()).unwrap();
    assert_eq!(
        alone["samples"].as_u64().unwrap() % 96,
        0,
        "every pass covers the subset: {alone}"
    );
    let expected = (5000.0 / decode.min(rate(&json, "storage"))).ceil() as u64;
    assert_eq!(json["workers_for_target"].as_u64().unwrap(), expected, "{json:#}");
}

#[test]
fn a_corrupt_shard_fails_the_storage_stage_naming_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 40, 2, 96, 72);
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    // A tar header of garbage in the middle of the first shard.
    let first = shards.join("shard-000000.tar");
    let mut bytes = std::fs::read(&first).unwrap();
    let middle = (bytes.len() / 2) / 512 * 512;
    bytes[middle..middle + 512].fill(0x41);
    std::fs::write(&first, bytes).unwrap();
    let worker = Worker::start(1);
    let out = stoker()
        .args([
            "doctor",
            "--workers",
            &worker.addr,
            "--dataset",
            shards.to_str().unwrap(),
        ])
        .args(["--batch-size", "8", "--image-size", "32", "--seconds", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the storage stage failed on worker {}", worker.addr))
            && stderr.contains("shard-000000.tar"),
        "{stderr}"
    );
}

#[test]
fn the_python_doctor_times_the_training_step_and_keeps_the_loaders_place() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 60, 2, 96, 72);
    pack(&images, shards.to_str().unwrap(), "40K", &[]);
    let (w1, w2) = (Worker::start(1), Worker::start(1));
    let out = crate::support::run_ok(
        crate::support::python()
            .arg(crate::support::python_script("doctor_check.py"))
            .arg(format!("{},{}", w1.addr, w2.addr))
            .arg(&shards)
            .arg("60"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(stdout.contains("python doctor ok:"), "{stdout}");
}

#[test]
fn without_an_index_the_later_stages_take_the_samples_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 90, 2, 96, 72);
    pack(&images, shards.to_str().unwrap(), "60K", &[]);
    std::fs::remove_file(shards.join("stoker-index.json")).unwrap();
    let worker = Worker::start(1);
    let json = doctor(
        &[&worker],
        shards.to_str().unwrap(),
        &[
            "--batch-size",
            "8",
            "--image-size",
            "32",
            "--samples",
            "25",
            "--seconds",
            "0",
        ],
    );
    let stages = json["stages"].as_array().unwrap();
    let samples = |stage: &str| {
        stages.iter().find(|s| s["stage"] == stage).unwrap()["samples"]
            .as_u64()
            .unwrap()
    };
    // Storage read whole shards (their sizes were unknown); the rest took 25.
    assert!(samples("storage") >= 25, "{json:#}");
    assert_eq!(samples("decode + transform"), 25, "{json:#}");
    assert_eq!(samples("transport"), 25, "{json:#}");
}
