//! Shard formats other than WebDataset, read from files their own
//! ecosystem's writer made: TFRecord shards written by the `tfrecord`
//! package (PyPI; its own CRC32C), in the layout of TensorFlow's ImageNet
//! shards, through real workers.

use std::collections::HashMap;
use std::path::Path;

use stoker_client::{Loader, LoaderConfig, TransformSpec};
use stoker_core::{FormatChoice, ShardFormat};

use crate::support::{
    S3Server, Worker, assert_exactly_once, image_folder_keys, pack, python, python_script, run_ok, stream, synth_images,
};

/// Writes `shards` TFRecord shards of the ImageFolder `images` into `out`
/// with `tests/python/write_tfrecord.py`: each shard's name and record
/// offsets.
fn write_tfrecord(images: &Path, out: &Path, shards: usize, suffix: &str, extra: &[&str]) -> Vec<(String, Vec<u64>)> {
    let output = run_ok(
        python()
            .arg(python_script("write_tfrecord.py"))
            .arg(images)
            .arg(out)
            .arg(shards.to_string())
            .arg(suffix)
            .args(extra),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    json["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["offsets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o.as_u64().unwrap())
                    .collect(),
            )
        })
        .collect()
}

const ARGS: &[&str] = &["--batch-size", "8", "--image-size", "32"];

#[test]
fn tfrecord_shards_over_s3_arrive_exactly_once_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 90, 3, 96, 72);
    let expected = image_folder_keys(&images);
    let s3 = S3Server::start();
    // TensorFlow's names, without an extension.
    let shards = write_tfrecord(&images, &s3.bucket("data").join("imagenet"), 4, "", &[]);
    assert_eq!(shards[0].0, "train-00000-of-00004");
    let w1 = s3.start_worker(2);
    let w2 = s3.start_worker(2);
    let dataset = "s3://data/imagenet/";

    // Extension-less files are not guessed at.
    let run = stream(&[&w1, &w2], dataset, ARGS, &s3.env());
    assert!(!run.success());
    assert!(
        run.stderr().contains("no shards found under s3://data/imagenet/")
            && run.stderr().contains("need --format tfrecord"),
        "{}",
        run.stderr()
    );

    // TensorFlow's ImageNet labels are 1-based: --label-offset -1.
    let args: Vec<&str> = ARGS
        .iter()
        .copied()
        .chain(["--format", "tfrecord", "--label-offset", "-1", "--epochs", "2"])
        .collect();
    let run = stream(&[&w1, &w2], dataset, &args, &s3.env());
    assert_exactly_once(&run, &expected, 0..2);
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    assert!(
        workers.iter().all(|w| w["samples"].as_u64().unwrap() > 0),
        "both workers take TFRecord items: {workers:?}"
    );
}

#[test]
fn corrupt_tfrecords_are_skipped_with_their_reason_and_the_rest_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 24, 2, 64, 48);
    let all = image_folder_keys(&images);
    let shards_dir = dir.path().join("shards");
    // Shard 0: record 2's data checksum broken. Shard 1: record 1 holds
    // text, and the file is cut in its last record.
    let shards = write_tfrecord(
        &images,
        &shards_dir,
        2,
        ".tfrecord",
        &["--corrupt", "0:2", "--not-image", "1:1", "--truncate", "1"],
    );
    let w = Worker::start(2);
    let args: Vec<&str> = ARGS.iter().copied().chain(["--label-offset", "-1"]).collect();
    let run = stream(&[&w], shards_dir.to_str().unwrap(), &args, &[]);
    assert!(run.success(), "{}", run.stderr());
    let stderr = run.stderr();

    // The corrupt record: named by shard and position, with its offset.
    let corrupt_key = format!("{}:2", shards[0].0);
    let corrupt_reason = format!(
        "corrupt record at byte {}: the data's checksum does not match",
        shards[0].1[2]
    );
    assert!(
        stderr.contains(&corrupt_key) && stderr.contains(&corrupt_reason),
        "{corrupt_key}: {corrupt_reason} not in:\n{stderr}"
    );
    // The text: its own key, and why.
    let per_shard = all.len().div_ceil(2);
    let not_image = &all[per_shard + 1].0;
    assert!(
        stderr.contains(&format!("{not_image}: image/encoded is not a JPEG or PNG image")),
        "{stderr}"
    );
    // The cut: the shard is named, and says where it ended.
    let json = run.json.as_ref().unwrap();
    let errors = json["shard_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.contains(&shards[1].0) && error.contains("tfrecord truncated at byte"),
        "{error}"
    );
    assert_eq!(run.num("skipped"), 2);

    // Everything else, once: all but the corrupt record's sample (position
    // 2 of shard 0), the text and the cut last record.
    let mut want: Vec<(String, i64)> = all.clone();
    let last = all.len() - 1;
    for i in [last, per_shard + 1, 2] {
        want.remove(i);
    }
    let mut got: Vec<(String, i64)> = run.keys.iter().map(|(_, k, l)| (k.clone(), *l)).collect();
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn a_prefix_mixing_formats_is_an_error_naming_a_file_of_each() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 8, 1, 32, 24);
    let shards = dir.path().join("shards");
    pack(&images, shards.to_str().unwrap(), "1M", &[]);
    write_tfrecord(&images, &shards, 1, ".tfrecord", &[]);
    // The index names the tar shards only: without it, the listing decides.
    std::fs::remove_file(shards.join("stoker-index.json")).unwrap();
    let w = Worker::start(1);
    let run = stream(&[&w], shards.to_str().unwrap(), ARGS, &[]);
    assert!(!run.success());
    let stderr = run.stderr();
    assert!(
        stderr.contains("mixes shard formats")
            && stderr.contains("shard-000000.tar is wds")
            && stderr.contains("train-00000-of-00001.tfrecord is tfrecord"),
        "{stderr}"
    );
    // Naming the format reads that one.
    let args: Vec<&str> = ARGS.iter().copied().chain(["--format", "wds"]).collect();
    let run = stream(&[&w], shards.to_str().unwrap(), &args, &[]);
    assert!(run.success(), "{}", run.stderr());
    assert_eq!(run.num("samples"), 8);
}

#[test]
fn the_python_loader_reads_tfrecord_with_its_format_keywords() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 3, 64, 48);
    let shards = dir.path().join("shards");
    write_tfrecord(&images, &shards, 2, "", &[]);
    let expected = dir.path().join("expected.tsv");
    let lines: String = image_folder_keys(&images)
        .iter()
        .map(|(k, l)| format!("{k}\t{l}\n"))
        .collect();
    std::fs::write(&expected, lines).unwrap();
    let w = Worker::start(2);
    let out = run_ok(
        python()
            .arg(python_script("format_check.py"))
            .arg(&w.addr)
            .arg(&shards)
            .arg(&expected),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: 30 samples"));
}

/// Every sample's pixels by key, one `train` epoch of `dataset`.
async fn pixels(worker: &Worker, dataset: &Path, format: FormatChoice) -> HashMap<String, Vec<u8>> {
    let mut config = LoaderConfig::new(
        vec![worker.addr.clone()],
        dataset.to_str().unwrap(),
        5,
        TransformSpec::train(48),
    );
    config.seed = 11;
    config.format = format;
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(3).unwrap();
    let mut out = HashMap::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for i in 0..batch.real() {
            out.insert(batch.keys[i].clone(), batch.image(i).to_vec());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tfrecord_pixels_equal_webdataset_pixels_for_the_same_images() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 20, 2, 160, 120);
    let wds = dir.path().join("wds");
    pack(&images, wds.to_str().unwrap(), "200K", &[]);
    let tfrecord = dir.path().join("tfrecord");
    write_tfrecord(&images, &tfrecord, 3, ".tfrecord", &[]);
    let w = Worker::start(2);
    let from_wds = pixels(&w, &wds, FormatChoice::Auto).await;
    let from_tfrecord = pixels(&w, &tfrecord, FormatChoice::Given(ShardFormat::TfRecord)).await;
    assert_eq!(from_wds.len(), 20);
    assert_eq!(from_tfrecord.len(), 20);
    for (key, want) in &from_wds {
        // The same bytes, key and (seed, epoch): the same augmentation.
        assert!(from_tfrecord.get(key) == Some(want), "{key}: pixels differ");
    }
}
