//! Shard formats other than WebDataset, read from files their own
//! ecosystem's writer made, through real workers:
//!
//! - TFRecord shards written by the `tfrecord` package (PyPI; its own
//!   CRC32C), in the layout of TensorFlow's ImageNet shards, with and
//!   without DALI-style `.idx` files (the package's `tfrecord2idx`);
//! - MXNet RecordIO shards and their `.idx`, written by MXNet 1.9.1's
//!   `MXIndexedRecordIO`.
//!
//! For each: exactly once over two workers and two epochs with the labels
//! right, equal batches for three ranks, bad records skipped with their
//! reason, pixels equal to the same images read from WebDataset, and for
//! the indexed ones a 1/8 share that reads only its bytes from S3.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use stoker_client::{Batch, Loader, LoaderConfig, TransformSpec};
use stoker_core::{FormatChoice, ShardFormat};

use crate::support::{
    S3Server, StreamRun, Worker, assert_exactly_once, http_get, image_folder_keys, mxnet_python, pack, python,
    python_script, run_ok, stream, synth_images,
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

/// Every worker of `run` delivered some of its `format` samples.
fn assert_every_worker_served(run: &StreamRun, format: &str) {
    let workers = run.json.as_ref().unwrap()["workers"].as_array().unwrap().clone();
    assert!(
        workers.iter().all(|w| w["samples"].as_u64().unwrap() > 0),
        "every worker takes {format} items: {workers:?}"
    );
}

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
    assert_every_worker_served(&run, "TFRecord");
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
            .arg(&expected)
            .args(["tfrecord", "-1"]),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: 30 samples from tfrecord"));
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
    // `eval` draws nothing: the same image bytes give the same pixels,
    // whatever the shard layout. (Random ops draw from the sample's shard
    // and position, which differ between these two layouts.)
    let from_wds = pixels(&w, &wds, FormatChoice::Auto, TransformSpec::eval(48)).await;
    let tfrecord_format = FormatChoice::Given(ShardFormat::TfRecord);
    let from_tfrecord = pixels(&w, &tfrecord, tfrecord_format, TransformSpec::eval(48)).await;
    assert_eq!(from_wds.len(), 20);
    assert_eq!(from_tfrecord.len(), 20);
    for (key, want) in &from_wds {
        assert!(from_tfrecord.get(key) == Some(want), "{key}: pixels differ");
    }
}

/// A RecordIO shard as MXNet's writer left it: its name and size, and per
/// record in file order the image's key and the record's offset.
struct RecShard {
    name: String,
    size: u64,
    keys: Vec<String>,
    offsets: Vec<u64>,
}

/// Writes `shards` RecordIO shards (`train-<i>.rec` + `.idx`) of the
/// ImageFolder `images` into `out` with MXNet (`tests/python/write_recordio.py`).
fn write_recordio(images: &Path, out: &Path, shards: usize, extra: &[&str]) -> Vec<RecShard> {
    let output = run_ok(
        mxnet_python()
            .arg(python_script("write_recordio.py"))
            .arg(images)
            .arg(out)
            .arg(shards.to_string())
            .args(extra),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    json["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let records = s["records"].as_array().unwrap();
            RecShard {
                name: s["name"].as_str().unwrap().to_owned(),
                size: s["size"].as_u64().unwrap(),
                keys: records.iter().map(|r| r["key"].as_str().unwrap().to_owned()).collect(),
                offsets: records.iter().map(|r| r["offset"].as_u64().unwrap()).collect(),
            }
        })
        .collect()
}

/// RecordIO samples as the worker keys them (`<shard>:<index>`), with the
/// labels of their images in the ImageFolder `images`.
fn recordio_keys(shards: &[RecShard], images: &Path) -> Vec<(String, i64)> {
    let labels: HashMap<String, i64> = image_folder_keys(images).into_iter().collect();
    shards
        .iter()
        .flat_map(|s| {
            s.keys
                .iter()
                .enumerate()
                .map(|(i, k)| (format!("{}:{i}", s.name), labels[k]))
        })
        .collect()
}

#[test]
fn recordio_shards_over_s3_arrive_exactly_once_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 90, 3, 96, 72);
    let s3 = S3Server::start();
    // A multi-label record (its first label is the class) and a record the
    // writer split where its data held the magic number.
    let shards = write_recordio(
        &images,
        &s3.bucket("data").join("rec"),
        3,
        &["--multi-label", "0:1", "--magic", "1:0"],
    );
    let expected = recordio_keys(&shards, &images);
    let (w1, w2) = (s3.start_worker(2), s3.start_worker(2));
    let args: Vec<&str> = ARGS.iter().copied().chain(["--epochs", "2"]).collect();
    // `auto` knows *.rec, and leaves the .idx files alone.
    let run = stream(&[&w1, &w2], "s3://data/rec/", &args, &s3.env());
    assert_exactly_once(&run, &expected, 0..2);
    assert_eq!(run.num("skipped"), 0, "{}", run.stderr());
    assert_every_worker_served(&run, "RecordIO");
}

#[test]
fn bad_recordio_records_are_skipped_with_their_reason_without_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 24, 2, 64, 48);
    let shards_dir = dir.path().join("shards");
    // Shard 0: record 2 holds text. Shard 1: record 1 is five bytes, and
    // the file is cut in its last record. No .idx: shards are read whole.
    let shards = write_recordio(
        &images,
        &shards_dir,
        2,
        &["--not-image", "0:2", "--short", "1:1", "--truncate", "1", "--no-index"],
    );
    let w = Worker::start(2);
    let run = stream(&[&w], shards_dir.to_str().unwrap(), ARGS, &[]);
    assert!(run.success(), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains("train-0.rec:2: record image is not a JPEG or PNG image"),
        "{stderr}"
    );
    let short = format!(
        "train-1.rec:1: corrupt record at byte {}: record of 5 bytes is shorter than its 24-byte header",
        shards[1].offsets[1]
    );
    assert!(stderr.contains(&short), "{short} not in:\n{stderr}");
    let json = run.json.as_ref().unwrap();
    let errors = json["shard_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.contains("train-1.rec") && error.contains("recordio truncated at byte"),
        "{error}"
    );
    assert_eq!(run.num("skipped"), 2);
    let mut want = recordio_keys(&shards, &images);
    let last = want.len() - 1;
    for i in [last, 12 + 1, 2] {
        want.remove(i);
    }
    let mut got: Vec<(String, i64)> = run.keys.iter().map(|(_, k, l)| (k.clone(), *l)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordio_pixels_equal_webdataset_pixels_for_the_same_images() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 20, 2, 160, 120);
    let wds = dir.path().join("wds");
    pack(&images, wds.to_str().unwrap(), "200K", &[]);
    let rec = dir.path().join("rec");
    let shards = write_recordio(&images, &rec, 3, &["--magic", "0:0"]);
    let w = Worker::start(2);
    // An eval transform: the same bytes give the same pixels whatever the
    // key (RecordIO's keys are positions, WebDataset's are names).
    let from_wds = pixels(&w, &wds, FormatChoice::Auto, TransformSpec::eval(48)).await;
    let from_rec = pixels(&w, &rec, FormatChoice::Auto, TransformSpec::eval(48)).await;
    assert_eq!(from_wds.len(), 20);
    assert_eq!(from_rec.len(), 20);
    for shard in &shards {
        for (i, key) in shard.keys.iter().enumerate() {
            let rec_key = format!("{}:{i}", shard.name);
            assert!(
                from_rec.get(&rec_key) == from_wds.get(key),
                "{rec_key} ({key}): pixels differ"
            );
        }
    }
}

/// Every sample's pixels by key, one epoch of `dataset` under `spec`.
async fn pixels(
    worker: &Worker,
    dataset: &Path,
    format: FormatChoice,
    spec: TransformSpec,
) -> HashMap<String, Vec<u8>> {
    let mut config = LoaderConfig::new(vec![worker.addr.clone()], dataset.to_str().unwrap(), 5, spec);
    (config.format, config.seed) = (format, 11);
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

/// Each of `world` ranks' batches of one epoch.
async fn rank_batches(worker: &Worker, dataset: &str, format: FormatChoice, world: u32) -> Vec<Vec<Batch>> {
    let mut out = Vec::new();
    for rank in 0..world {
        let mut c = LoaderConfig::new(vec![worker.addr.clone()], dataset, 4, TransformSpec::train(24));
        (c.rank, c.world_size, c.format, c.seed) = (rank, world, format, 9);
        let loader = Loader::connect(c).await.unwrap();
        let mut stream = loader.epoch(1).unwrap();
        let mut batches = Vec::new();
        while let Some(b) = stream.next_batch().await {
            batches.push(b.unwrap());
        }
        assert_eq!(Some(batches.len() as u64), loader.batches_per_epoch(), "rank {rank}");
        out.push(batches);
    }
    out
}

/// Three ranks over `dataset` yield the same number of full batches and
/// together every sample of `expected` once (the format's record indexes
/// gave the counts that split the shards into sample ranges).
async fn assert_equal_rank_batches(worker: &Worker, dataset: &str, format: FormatChoice, expected: &[String]) {
    let ranks = rank_batches(worker, dataset, format, 3).await;
    let counts: Vec<usize> = ranks.iter().map(Vec::len).collect();
    assert!(counts.iter().all(|&c| c == counts[0] && c > 0), "{counts:?}");
    let keys: Vec<&String> = ranks.iter().flatten().flat_map(|b| b.keys[..b.real()].iter()).collect();
    let unique: HashSet<&String> = keys.iter().copied().collect();
    assert_eq!(unique.len(), keys.len(), "a sample was delivered twice");
    assert_eq!(unique, expected.iter().collect(), "samples missing");
}

/// `stoker_worker_storage_read_bytes_total` of a worker now.
fn read_bytes(worker: &Worker) -> u64 {
    let text = http_get(worker.metrics_url.as_ref().expect("metrics url"));
    text.lines()
        .find_map(|l| l.strip_prefix("stoker_worker_storage_read_bytes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no read bytes in:\n{text}")) as u64
}

/// Bytes the worker read from S3 for one epoch of `rank` of `world` over
/// `dataset` (its listing and indexes included).
async fn bytes_for_share(worker: &Worker, dataset: &str, format: FormatChoice, rank: u32, world: u32) -> u64 {
    let before = read_bytes(worker);
    let mut c = LoaderConfig::new(vec![worker.addr.clone()], dataset, 2, TransformSpec::eval(16));
    (c.rank, c.world_size, c.format) = (rank, world, format);
    let loader = Loader::connect(c).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    while let Some(b) = stream.next_batch().await {
        b.unwrap();
    }
    read_bytes(worker) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordio_ranks_get_equal_batches_and_a_share_reads_only_its_bytes_from_s3() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 61, 3, 96, 72);
    let s3 = S3Server::start();
    let shards = write_recordio(&images, &s3.bucket("data").join("rec"), 3, &[]);
    let w = s3.start_worker_with(2, &["--metrics-listen", "127.0.0.1:0"]);
    let expected: Vec<String> = recordio_keys(&shards, &images).into_iter().map(|(k, _)| k).collect();
    assert_equal_rank_batches(&w, "s3://data/rec/", FormatChoice::Auto, &expected).await;

    // One shard of the 61 images: a 1/8 share is its first 7 records.
    let one = write_recordio(&images, &s3.bucket("data").join("one"), 1, &[]);
    let shard = &one[0];
    let idx = std::fs::metadata(s3.bucket("data").join("one/train-0.idx"))
        .unwrap()
        .len();
    let whole = bytes_for_share(&w, "s3://data/one/", FormatChoice::Auto, 0, 1).await;
    let share = bytes_for_share(&w, "s3://data/one/", FormatChoice::Auto, 0, 8).await;
    let records = shard.offsets.len() as u64;
    let range = shard.offsets[(records / 8) as usize];
    eprintln!(
        "recordio: a 1/8 share read {share} bytes, the whole shard {whole} ({} records, {} bytes, index {idx} bytes)",
        records, shard.size
    );
    // The whole shard: its bytes and its index, read for the listing.
    assert_eq!(whole, shard.size + idx);
    // The share: its records' bytes, and the index (listing, then item).
    assert_eq!(share, range + 2 * idx);
}

/// Writes `<shard>.idx` beside a TFRecord shard in DALI's layout, with the
/// tfrecord package's `tfrecord2idx`.
fn tfrecord2idx(shard: &Path) {
    let shard = shard.to_str().unwrap();
    run_ok(python().arg("-c").arg(format!(
        "from tfrecord.tools.tfrecord2idx import create_index; create_index({shard:?}, {:?})",
        format!("{shard}.idx")
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_tfrecord_ranks_get_equal_batches_and_a_share_reads_only_its_bytes_from_s3() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 61, 3, 96, 72);
    let s3 = S3Server::start();
    let root = s3.bucket("data").join("tfr");
    let shards = write_tfrecord(&images, &root, 3, "", &[]);
    for (name, _) in &shards {
        tfrecord2idx(&root.join(name));
    }
    let w = s3.start_worker_with(2, &["--metrics-listen", "127.0.0.1:0"]);
    let tfrecord = FormatChoice::Given(ShardFormat::TfRecord);
    let expected: Vec<String> = image_folder_keys(&images).into_iter().map(|(k, _)| k).collect();
    assert_equal_rank_batches(&w, "s3://data/tfr/", tfrecord, &expected).await;

    let one_root = s3.bucket("data").join("one");
    let one = write_tfrecord(&images, &one_root, 1, "", &[]);
    let (name, offsets) = &one[0];
    tfrecord2idx(&one_root.join(name));
    let size = std::fs::metadata(one_root.join(name)).unwrap().len();
    let idx = std::fs::metadata(one_root.join(format!("{name}.idx"))).unwrap().len();
    let whole = bytes_for_share(&w, "s3://data/one/", tfrecord, 0, 1).await;
    let share = bytes_for_share(&w, "s3://data/one/", tfrecord, 0, 8).await;
    let range = offsets[offsets.len() / 8];
    eprintln!("tfrecord: a 1/8 share read {share} bytes, the whole shard {whole} ({size} bytes, index {idx} bytes)");
    assert_eq!(whole, size + idx);
    assert_eq!(share, range + 2 * idx);
}

/// A Parquet shard as the writer left it: its name and size, each row's
/// key (the image's path), and each row group's rows and bytes.
pub(crate) struct PqShard {
    name: String,
    size: u64,
    keys: Vec<String>,
    pub(crate) group_rows: Vec<u64>,
    pub(crate) group_bytes: Vec<u64>,
}

/// Writes `shards` Parquet shards (`train-<i>.parquet`) of the ImageFolder
/// `images` into `out` with Hugging Face `datasets` (`Image()`,
/// `ClassLabel`, `to_parquet`), `rows_per_group` rows per row group.
pub(crate) fn write_parquet(
    images: &Path,
    out: &Path,
    shards: usize,
    rows_per_group: usize,
    extra: &[&str],
) -> Vec<PqShard> {
    let output = run_ok(
        python()
            .arg(python_script("write_parquet.py"))
            .arg(images)
            .arg(out)
            .arg(shards.to_string())
            .arg(rows_per_group.to_string())
            .args(extra),
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let numbers =
        |v: &serde_json::Value| -> Vec<u64> { v.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect() };
    json["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| PqShard {
            name: s["name"].as_str().unwrap().to_owned(),
            size: s["size"].as_u64().unwrap(),
            keys: s["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_owned())
                .collect(),
            group_rows: numbers(&s["row_groups"]),
            group_bytes: numbers(&s["group_bytes"]),
        })
        .collect()
}

#[test]
fn parquet_shards_over_s3_arrive_exactly_once_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 90, 3, 96, 72);
    let expected = image_folder_keys(&images);
    let s3 = S3Server::start();
    let shards = write_parquet(&images, &s3.bucket("data").join("hf"), 3, 10, &[]);
    assert_eq!(shards[0].group_rows, [10, 10, 10]);
    let (w1, w2) = (s3.start_worker(2), s3.start_worker(2));
    let args: Vec<&str> = ARGS.iter().copied().chain(["--epochs", "2"]).collect();
    // Hugging Face's layout needs no flag: the image column's path is the
    // key, the ClassLabel the label.
    let run = stream(&[&w1, &w2], "s3://data/hf/", &args, &s3.env());
    assert_exactly_once(&run, &expected, 0..2);
    assert_eq!(run.num("skipped"), 0, "{}", run.stderr());
    assert_every_worker_served(&run, "Parquet");
}

#[test]
fn bad_parquet_rows_and_files_are_reported_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 24, 2, 64, 48);
    let all = image_folder_keys(&images);
    let hf = dir.path().join("hf");
    // Shard 0: row 2 holds text. Shard 1: row 1's image is null.
    write_parquet(&images, &hf, 2, 5, &["--not-image", "0:2", "--null-image", "1:1"]);
    // And a file that only says it is Parquet.
    std::fs::write(hf.join("train-9.parquet"), b"PAR1 but nothing of the rest").unwrap();
    let w = Worker::start(2);
    let run = stream(&[&w], hf.to_str().unwrap(), ARGS, &[]);
    assert!(run.success(), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains(&format!("{}: image is not a JPEG or PNG image", all[2].0)),
        "{stderr}"
    );
    assert!(stderr.contains("train-1.parquet:1: no image feature"), "{stderr}");
    let json = run.json.as_ref().unwrap();
    let errors = json["shard_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.contains("train-9.parquet") && error.contains("not a readable Parquet file"),
        "{error}"
    );
    assert_eq!(run.num("skipped"), 2);
    let mut want = all.clone();
    want.remove(12 + 1);
    want.remove(2);
    let mut got: Vec<(String, i64)> = run.keys.iter().map(|(_, k, l)| (k.clone(), *l)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // Plain binary columns under other names: unreadable with the
    // defaults, read once named.
    let plain = dir.path().join("plain");
    let shards = write_parquet(&images, &plain, 2, 5, &["--binary"]);
    let run = stream(&[&w], plain.to_str().unwrap(), ARGS, &[]);
    let errors = run.json.as_ref().unwrap()["shard_errors"].as_array().unwrap().clone();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0]
            .as_str()
            .unwrap()
            .contains("no image column image (columns: jpeg, class); name it with --image-key"),
        "{errors:?}"
    );
    let args: Vec<&str> = ARGS
        .iter()
        .copied()
        .chain(["--image-key", "jpeg", "--label-key", "class"])
        .collect();
    let run = stream(&[&w], plain.to_str().unwrap(), &args, &[]);
    let labels: HashMap<String, i64> = all.iter().cloned().collect();
    let expected: Vec<(String, i64)> = shards
        .iter()
        .flat_map(|s| {
            s.keys
                .iter()
                .enumerate()
                .map(|(i, k)| (format!("{}:{i}", s.name), labels[k]))
        })
        .collect();
    assert_exactly_once(&run, &expected, 0..1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_pixels_equal_webdataset_pixels_for_the_same_images() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 20, 2, 160, 120);
    let wds = dir.path().join("wds");
    pack(&images, wds.to_str().unwrap(), "200K", &[]);
    let hf = dir.path().join("hf");
    write_parquet(&images, &hf, 3, 3, &[]);
    let w = Worker::start(2);
    // The same image bytes under the same keys (the images' paths): the
    // same pixels, through `eval`, which draws nothing.
    let from_wds = pixels(&w, &wds, FormatChoice::Auto, TransformSpec::eval(48)).await;
    let from_parquet = pixels(&w, &hf, FormatChoice::Auto, TransformSpec::eval(48)).await;
    assert_eq!(from_wds.len(), 20);
    assert_eq!(from_parquet.len(), 20);
    for (key, want) in &from_wds {
        assert!(from_parquet.get(key) == Some(want), "{key}: pixels differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_ranks_get_equal_batches_and_a_share_reads_only_its_row_groups_from_s3() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 61, 3, 320, 240);
    let s3 = S3Server::start();
    write_parquet(&images, &s3.bucket("data").join("hf"), 3, 4, &[]);
    let w = s3.start_worker_with(2, &["--metrics-listen", "127.0.0.1:0"]);
    let expected: Vec<String> = image_folder_keys(&images).into_iter().map(|(k, _)| k).collect();
    assert_equal_rank_batches(&w, "s3://data/hf/", FormatChoice::Auto, &expected).await;

    // One shard of the 61 images in row groups of 4: a 1/8 share (rows
    // 0..7) is in row groups 0 and 1.
    let one = write_parquet(&images, &s3.bucket("data").join("one"), 1, 4, &[]);
    let shard = &one[0];
    let whole = bytes_for_share(&w, "s3://data/one/", FormatChoice::Auto, 0, 1).await;
    let share = bytes_for_share(&w, "s3://data/one/", FormatChoice::Auto, 0, 8).await;
    let footer = shard.size.min(stoker_worker::parquet::FOOTER_PREFETCH as u64);
    let data: u64 = shard.group_bytes.iter().sum();
    eprintln!(
        "parquet: a 1/8 share read {share} bytes, the whole shard {whole} ({} bytes, {} row groups, footer read {footer} bytes)",
        shard.size,
        shard.group_rows.len()
    );
    // Footers (listing, then item) and the row groups' column chunks.
    assert_eq!(whole, 2 * footer + data);
    assert_eq!(share, 2 * footer + shard.group_bytes[0] + shard.group_bytes[1]);
}

#[test]
fn the_python_loader_reads_parquet_with_its_format_keyword() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 3, 64, 48);
    let shards = dir.path().join("shards");
    write_parquet(&images, &shards, 2, 8, &[]);
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
            .arg(&expected)
            .args(["parquet", "0"]),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: 30 samples from parquet"));
}

/// `stoker pack --format FORMAT` of `images` into `out`.
fn pack_as(images: &Path, out: &Path, format: &str) {
    run_ok(crate::support::stoker().args([
        "pack",
        "--input",
        images.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--shard-size",
        "40K",
        "--format",
        format,
    ]));
}

/// The samples of a packed dataset as its format's own reader sees them
/// (`tests/python/read_packed.py`).
fn read_packed(format: &str, dir: &Path) -> Vec<(String, i64)> {
    let mut cmd = if format == "recordio" { mxnet_python() } else { python() };
    let out = run_ok(cmd.arg(python_script("read_packed.py")).arg(format).arg(dir));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn pack_writes_every_format_with_its_index_and_each_ecosystem_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 3, 96, 72);
    let expected = image_folder_keys(&images);
    let w = Worker::start(2);
    for format in ["tfrecord", "recordio", "parquet"] {
        let out = dir.path().join(format);
        pack_as(&images, &out, format);
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("stoker-index.json")).unwrap()).unwrap();
        let shards = index["shards"].as_array().unwrap();
        assert!(shards.len() > 1, "{format}: {} shards", shards.len());
        // RecordIO's records have no names: their keys are positions.
        let want: Vec<(String, i64)> = if format == "recordio" {
            let mut keys = Vec::new();
            for s in shards {
                for i in 0..s["samples"].as_u64().unwrap() {
                    keys.push((format!("{}:{i}", s["name"].as_str().unwrap()), expected[keys.len()].1));
                }
            }
            keys
        } else {
            expected.clone()
        };
        // The format's own reader, with its index (in its own order: the
        // tfrecord package's indexed loader starts mid-file).
        let mut read = read_packed(format, &out);
        read.sort();
        let mut sorted = want.clone();
        sorted.sort();
        assert_eq!(read, sorted, "{format} read by its own reader");
        // And a worker, with the format told by the extension.
        let run = stream(&[&w], out.to_str().unwrap(), ARGS, &[]);
        assert_exactly_once(&run, &want, 0..1);
    }
    // Without the dataset's index, the shards' own indexes give the
    // counts: equal batches per rank still hold.
    for format in ["tfrecord", "recordio"] {
        std::fs::remove_file(dir.path().join(format).join("stoker-index.json")).unwrap();
        let args: Vec<&str> = ARGS
            .iter()
            .copied()
            .chain(["--world-size", "3", "--rank", "1"])
            .collect();
        let run = stream(&[&w], dir.path().join(format).to_str().unwrap(), &args, &[]);
        assert!(run.success(), "{}", run.stderr());
        assert_eq!(run.num("samples"), 10, "{format}: rank 1 of 3 gets a third of 30");
    }
}

/// Gzips the file at `path` into `<path>.gz` (Python's gzip: the stream
/// TensorFlow's `compression_type="GZIP"` writes) and removes it.
fn gzip_file(path: &Path) {
    let path = path.to_str().unwrap();
    run_ok(python().arg("-c").arg(format!(
        "import gzip, os, shutil\nwith open({path:?}, 'rb') as i, gzip.open({path:?} + '.gz', 'wb') as o: shutil.copyfileobj(i, o)\nos.remove({path:?})"
    )));
}

#[test]
fn gzipped_tfrecord_and_tar_shards_are_read_and_a_cut_one_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 3, 64, 48);
    let expected = image_folder_keys(&images);
    let s3 = S3Server::start();
    let root = s3.bucket("data").join("gz");
    let shards = write_tfrecord(&images, &root, 3, ".tfrecord", &[]);
    for (name, _) in &shards {
        gzip_file(&root.join(name));
    }
    let w = s3.start_worker(2);
    // `auto` knows .tfrecord.gz; every sample once, over S3 (the writer's
    // labels are TensorFlow's, 1-based).
    let tf_args: Vec<&str> = ARGS.iter().copied().chain(["--label-offset", "-1"]).collect();
    let run = stream(&[&w], "s3://data/gz/", &tf_args, &s3.env());
    assert_exactly_once(&run, &expected, 0..1);

    // WebDataset's .tar.gz too.
    let wds = dir.path().join("wds");
    pack(&images, wds.to_str().unwrap(), "40K", &[]);
    std::fs::remove_file(wds.join("stoker-index.json")).unwrap();
    for entry in std::fs::read_dir(&wds).unwrap() {
        gzip_file(&entry.unwrap().path());
    }
    let w = Worker::start(2);
    let run = stream(&[&w], wds.to_str().unwrap(), ARGS, &[]);
    assert_exactly_once(&run, &expected, 0..1);

    // A gzip stream cut short: the shard's error says so, the rest arrives.
    let cut = root.join(format!("{}.gz", shards[2].0));
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let w = s3.start_worker(2);
    let run = stream(&[&w], "s3://data/gz/", &tf_args, &s3.env());
    assert!(run.success(), "{}", run.stderr());
    let errors = run.json.as_ref().unwrap()["shard_errors"].as_array().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.contains(&shards[2].0) && error.contains("not a valid gzip stream"),
        "{error}"
    );
    assert!(run.num("samples") >= 20, "the two whole shards arrive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pack_converts_datasets_between_formats_keeping_keys_labels_and_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 3, 96, 72);
    let expected = image_folder_keys(&images);
    let w = Worker::start(2);

    // TFRecord from the tfrecord package (1-based labels; one record holds
    // text) to WebDataset: the text is left out, and said so.
    let tfr = dir.path().join("tfr");
    write_tfrecord(&images, &tfr, 2, ".tfrecord", &["--not-image", "0:1"]);
    let wds = dir.path().join("wds");
    let out = run_ok(crate::support::stoker().args([
        "pack",
        "--input",
        tfr.to_str().unwrap(),
        "--output",
        wds.to_str().unwrap(),
        "--format",
        "wds",
        "--shard-size",
        "40K",
        "--label-offset",
        "-1",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("left out 1 sample(s)")
            && stderr.contains(&format!("{}: image/encoded is not a JPEG or PNG image", expected[1].0)),
        "{stderr}"
    );
    let mut want = expected.clone();
    want.remove(1);
    let run = stream(&[&w], wds.to_str().unwrap(), ARGS, &[]);
    assert_exactly_once(&run, &want, 0..1);
    // The same bytes under the same keys: the same pixels (through `eval`:
    // random ops draw from the shard and position, and conversion may lay
    // the samples out in other shards).
    let spec = || TransformSpec::eval(48);
    let from_tfr = pixels(&w, &tfr, FormatChoice::Given(ShardFormat::TfRecord), spec()).await;
    let from_wds = pixels(&w, &wds, FormatChoice::Auto, spec()).await;
    assert_eq!(from_wds.len(), 29);
    for (key, pixels) in &from_wds {
        assert!(from_tfr.get(key) == Some(pixels), "{key}: pixels differ");
    }

    // ImageFolder -> WebDataset -> Parquet -> RecordIO, each read back by
    // its own ecosystem; class names travel in the dataset index.
    let packed = dir.path().join("packed");
    pack(&images, packed.to_str().unwrap(), "40K", &[]);
    let mut from = packed;
    for format in ["parquet", "recordio"] {
        let to = dir.path().join(format!("converted-{format}"));
        run_ok(crate::support::stoker().args([
            "pack",
            "--input",
            from.to_str().unwrap(),
            "--output",
            to.to_str().unwrap(),
            "--format",
            format,
            "--shard-size",
            "40K",
        ]));
        let mut read = read_packed(format, &to);
        read.sort();
        let labels: Vec<i64> = read.iter().map(|(_, l)| *l).collect();
        if format == "parquet" {
            // Hugging Face sees an Image and a ClassLabel, keys as paths.
            assert_eq!(read, expected, "{format}");
        } else {
            let mut want: Vec<i64> = expected.iter().map(|(_, l)| *l).collect();
            want.sort();
            let mut got = labels.clone();
            got.sort();
            assert_eq!(got, want, "{format}: labels");
        }
        from = to;
    }
}
