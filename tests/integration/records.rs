//! A sample is a record: captions, metadata and multi-labels travel with
//! the image, from shards written by each ecosystem's own writer
//! (webdataset's `TarWriter`, the `tfrecord` package, MXNet), through real
//! workers reading a dataset folder (the S3 path is the same reader,
//! tested in `formats`), to `stoker stream --fields-out`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::support::{StreamRun, Worker, mxnet_python, python, python_script, run_ok, stream, synth_images};

const ARGS: &[&str] = &["--batch-size", "8", "--image-size", "32"];

/// Writes `kind` shards of `images` into `out` with
/// `tests/python/write_records.py`; returns its manifest.
fn write_records(kind: &str, images: &Path, out: &Path) -> Value {
    let manifest = out.with_extension("manifest.json");
    run_ok(
        python()
            .arg(python_script("write_records.py"))
            .arg(kind)
            .arg(images)
            .arg(out)
            .arg(&manifest),
    );
    serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap()
}

/// `stoker stream --fields-out` with `args`: the run and each delivered
/// sample's JSON line, by key (a key delivered twice fails).
fn stream_fields(workers: &[&Worker], dataset: &Path, args: &[&str]) -> (StreamRun, BTreeMap<String, Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fields.jsonl");
    let mut all: Vec<&str> = ARGS.to_vec();
    all.extend_from_slice(args);
    all.extend_from_slice(&["--fields-out", out.to_str().unwrap()]);
    let run = stream(workers, dataset.to_str().unwrap(), &all, &[]);
    assert!(run.success(), "{}", run.stderr());
    let mut lines = BTreeMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_str().unwrap().to_owned();
        assert!(lines.insert(key.clone(), v).is_none(), "{key} delivered twice");
    }
    (run, lines)
}

#[test]
fn laion_style_webdataset_delivers_captions_and_metadata_with_their_images() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 30, 3, 96, 72);
    let laion = dir.path().join("laion");
    let manifest = write_records("wds", &images, &laion);
    let w1 = Worker::start(2);
    let w2 = Worker::start(2);
    let fields = [
        "--field",
        "caption=txt",
        "--field",
        "meta=json",
        "--field",
        "labels=labels:int_list",
    ];
    let (run, got) = stream_fields(&[&w1, &w2], &laion, &fields);

    // Every complete sample exactly once, with its own caption, metadata
    // and multi-label as the writer recorded them.
    let complete = manifest["complete"].as_object().unwrap();
    assert_eq!(got.keys().collect::<Vec<_>>(), complete.keys().collect::<Vec<_>>());
    for (key, want) in complete {
        let line = &got[key];
        assert_eq!(line["caption"], want["caption"], "{key}");
        assert_eq!(line["meta"], want["meta"], "{key}");
        assert_eq!(line["labels"], want["labels"], "{key}");
        assert_eq!(line["label"], want["label"], "{key}");
        assert_eq!(line["epoch"], 0, "{key}");
    }
    // The incomplete ones are skipped with their reason, naming the field.
    let stderr = run.stderr();
    let incomplete = manifest["incomplete"].as_object().unwrap();
    assert_eq!(
        run.json.as_ref().unwrap()["skipped"],
        incomplete.len() as u64,
        "{stderr}"
    );
    for (key, kind) in incomplete {
        let reason = stderr
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no skip reason for {key}: {stderr}"));
        match kind.as_str().unwrap() {
            "missing_field" => assert!(reason.contains("missing field \"caption\""), "{reason}"),
            _ => assert!(
                (reason.contains("\"caption\"") && reason.contains("UTF-8"))
                    || (reason.contains("\"meta\"") && reason.contains("not JSON")),
                "{reason}"
            ),
        }
    }

    // An optional caption: the sample without one arrives, with null.
    let (_, got) = stream_fields(&[&w1], &laion, &["--field", "caption=txt?"]);
    assert_eq!(
        got.len(),
        complete.len() + 2,
        "all but the bad caption and (no field) the bad JSON"
    );
    let missing = incomplete.iter().find(|(_, k)| *k == "missing_field").unwrap().0;
    assert_eq!(got[missing]["caption"], Value::Null);
}

#[test]
fn field_requests_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 6, 2, 48, 40);
    let laion = dir.path().join("laion");
    write_records("wds", &images, &laion);
    let w = Worker::start(1);
    for (field, says) in [
        ("label=txt", "field name \"label\" is reserved"),
        ("x=pyd", "extension \"pyd\" has no decoder"),
        ("x=abc", "extension \"abc\" has no decoder"),
        ("x=txt:str8", "unknown field kind \"str8\""),
        ("x", "expected NAME=SOURCE[:KIND][?]"),
    ] {
        let mut args = ARGS.to_vec();
        args.extend_from_slice(&["--field", field]);
        let run = stream(&[&w], laion.to_str().unwrap(), &args, &[]);
        assert!(!run.success(), "{field}");
        assert!(run.stderr().contains(says), "{field}: {}", run.stderr());
        assert!(run.keys.is_empty(), "{field}: nothing delivered");
    }
}

#[test]
fn tfrecord_features_arrive_whole_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 20, 2, 64, 48);
    let tfr = dir.path().join("tfr");
    let manifest = write_records("tfrecord", &images, &tfr);
    let w = Worker::start(2);
    let fields = [
        "--field",
        "caption=caption:text",
        "--field",
        "labels=labels",
        "--field",
        "box=box",
    ];
    let (_, got) = stream_fields(&[&w], &tfr, &fields);
    let complete = manifest["complete"].as_object().unwrap();
    assert_eq!(got.len(), complete.len());
    for (key, want) in complete {
        let line = &got[key];
        assert_eq!(line["caption"], want["caption"], "{key}");
        assert_eq!(line["labels"], want["labels"], "{key}");
        // float32 as written, widened exactly.
        let boxes: Vec<f64> = line["box"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let want_box: Vec<f64> = want["box"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(boxes, want_box, "{key}");
    }
}

#[test]
fn parquet_columns_arrive_whole_as_hugging_face_wrote_them() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 16, 2, 64, 48);
    let pq = dir.path().join("pq");
    let manifest = write_records("parquet", &images, &pq);
    let w = Worker::start(2);
    let fields = [
        "--field",
        "caption=caption",
        "--field",
        "labels=labels",
        "--field",
        "box=box",
    ];
    let (run, got) = stream_fields(&[&w], &pq, &fields);
    let complete = manifest["complete"].as_object().unwrap();
    assert_eq!(got.len(), complete.len(), "{}", run.stderr());
    for (key, want) in complete {
        let line = &got[key];
        for name in ["caption", "labels", "box", "label"] {
            assert_eq!(line[name], want[name], "{key} {name}");
        }
    }
    // The row whose caption is null is skipped, naming the field.
    let (key, _) = manifest["incomplete"].as_object().unwrap().iter().next().unwrap();
    assert!(
        run.stderr().contains(&format!("{key}: missing field \"caption\"")),
        "{}",
        run.stderr()
    );
    // A column of the wrong kind for what is asked: each sample says so,
    // and an epoch of nothing but such skips fails, with the reasons.
    let mut all: Vec<&str> = ARGS.to_vec();
    all.extend_from_slice(&["--field", "caption=caption:int"]);
    let run = stream(&[&w], pq.to_str().unwrap(), &all, &[]);
    assert!(!run.success(), "{}", run.stderr());
    assert!(
        run.stderr().contains("no sample delivered") && run.stderr().contains("field \"caption\" (int from caption)"),
        "{}",
        run.stderr()
    );
}

#[test]
fn recordio_multi_labels_arrive_whole() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 12, 2, 48, 40);
    let out = dir.path().join("rec");
    // MXNet's own writer; record 2 of shard 0 has labels [label, 99.0].
    run_ok(
        mxnet_python()
            .arg(python_script("write_recordio.py"))
            .arg(&images)
            .arg(&out)
            .arg("1")
            .args(["--multi-label", "0:2"]),
    );
    let w = Worker::start(2);
    let (_, got) = stream_fields(&[&w], &out, &["--field", "labels=label"]);
    assert_eq!(got.len(), 12);
    let mut multi = 0;
    for line in got.values() {
        let labels = line["labels"].as_array().unwrap();
        let label = line["label"].as_i64().unwrap() as f64;
        assert_eq!(labels[0].as_f64().unwrap(), label, "{line}");
        if labels.len() == 2 {
            assert_eq!(labels[1].as_f64().unwrap(), 99.0, "{line}");
            multi += 1;
        }
    }
    assert_eq!(multi, 1, "the one multi-label record arrives whole");
}

#[test]
fn the_python_loader_delivers_fields_as_str_dict_and_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 18, 3, 64, 48);
    let shards = dir.path().join("shards");
    write_records("wds", &images, &shards);
    let manifest = shards.with_extension("manifest.json");
    let seg = dir.path().join("seg");
    run_ok(python().arg(python_script("write_masks.py")).arg(&seg).arg("24"));
    let w = Worker::start(2);
    let out = run_ok(
        python()
            .arg(python_script("fields_check.py"))
            .arg(&w.addr)
            .arg(&shards)
            .arg(&manifest)
            .arg(&seg),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ok: 15 samples with caption, meta and labels"),
        "{stdout}"
    );
}

/// A `--device cuda` worker's images come from the GPU lanes while their
/// fields are read with the sample: each arrives with its own caption,
/// metadata and multi-label, and the bad ones are skipped as on the CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_worker_delivers_fields_with_its_images() {
    let Some(gpu) = crate::gpu::gpu_or_skip("a_gpu_worker_delivers_fields_with_its_images") else {
        return;
    };
    drop(gpu);
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 120, 3, 320, 240);
    let laion = dir.path().join("laion");
    let manifest = write_records("wds", &images, &laion);
    let w = Worker::start_with(2, &["--device", "cuda", "--gpu-only", "--gpu-batch", "16"], &[]);
    let fields = [
        "--field",
        "caption=txt",
        "--field",
        "meta=json",
        "--field",
        "labels=labels:int_list",
    ];
    let (run, got) = tokio::task::block_in_place(|| stream_fields(&[&w], &laion, &fields));
    let complete = manifest["complete"].as_object().unwrap();
    assert_eq!(got.len(), complete.len(), "{}", run.stderr());
    for (key, want) in complete {
        for name in ["caption", "meta", "labels", "label"] {
            assert_eq!(got[key][name], want[name], "{key} {name}");
        }
    }
    assert_eq!(
        run.json.as_ref().unwrap()["skipped"],
        manifest["incomplete"].as_object().unwrap().len() as u64
    );
    let info = crate::gpu::worker_info(&w.addr).await;
    assert!(info.gpu_samples > 0, "the images went through the gpu lanes: {info:?}");
    println!(
        "gpu fields: {} samples with their fields, {} decoded on the gpu",
        got.len(),
        info.gpu_samples
    );
}

/// Every sample's image and mask, by key, from a `--device` worker at
/// `addr`, with `transform`; and the skip reasons.
pub(crate) async fn images_and_masks(
    addr: &str,
    dataset: &Path,
    transform: &str,
) -> (BTreeMap<String, (Vec<u8>, Vec<u8>)>, Vec<(String, String)>) {
    use stoker_client::{FieldKind, FieldSpec, FieldValue, Loader, LoaderConfig, TransformSpec};
    let spec = TransformSpec::from_json(transform).unwrap();
    let mut config = LoaderConfig::new(vec![addr.to_owned()], dataset.to_str().unwrap(), 8, spec);
    config.fields = vec![FieldSpec::new("mask", "seg.png", FieldKind::Mask)];
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut out = BTreeMap::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for i in 0..batch.real() {
            let Some(FieldValue::Array(mask)) = &batch.fields[i][0] else {
                panic!("{}: no mask: {:?}", batch.keys[i], batch.fields[i]);
            };
            let s = u64::from(batch.height);
            assert_eq!((mask.dtype.as_str(), mask.shape.as_slice()), ("|u1", &[1, s, s][..]));
            out.insert(batch.keys[i].clone(), (batch.image(i).to_vec(), mask.data.to_vec()));
        }
    }
    let mut skipped = stream.report().skip_reasons;
    skipped.sort();
    (out, skipped)
}

/// A mask follows its image's crop, flip and rotation, nearest-neighbour
/// and with none of its colour ops: on the image's red ellipse (blue
/// ground, black where the rotation leaves nothing) every mask pixel of
/// 255 lands on red, every 0 on blue or black. With nearest sampling on
/// the image too the correspondence is exact; with the default bilinear
/// image (and a colour jitter the mask ignores), to within a pixel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masks_follow_the_image_geometry_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("seg");
    run_ok(python().arg(python_script("write_masks.py")).arg(&seg).arg("24"));
    let w = Worker::start(2);
    let geometry =
        r#"{"op": "RandomHorizontalFlip"}, {"op": "RandomVerticalFlip"}, {"op": "RandomRotation", "degrees": 40}"#;
    let nearest = format!(
        r#"{{"version": 1, "ops": [{{"op": "RandomResizedCrop", "size": 48, "scale": [0.3, 1.0], "interpolation": "nearest"}}, {geometry}]}}"#
    );
    let (got, skipped) = images_and_masks(&w.addr, &seg, &nearest).await;
    let reasons: Vec<String> = skipped.iter().map(|(k, r)| format!("{k}: {r}")).collect();
    assert_eq!(got.len(), 21, "{reasons:?}");
    assert!(reasons[0].starts_with("s0001: missing field \"mask\""), "{reasons:?}");
    assert!(
        reasons[1].contains("s0002: mask \"mask\": mask is 80x60, its image 160x120"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("s0003: mask \"mask\": a palette PNG"),
        "{reasons:?}"
    );
    let (mut on, mut off) = (0, 0);
    for (key, (image, mask)) in &got {
        for (px, &m) in image.chunks_exact(3).zip(mask) {
            match m {
                255 => {
                    assert_eq!(px, [255, 0, 0], "{key}: a mask pixel off the ellipse");
                    on += 1;
                }
                0 => {
                    assert!(
                        px == [0, 0, 255] || px == [0, 0, 0],
                        "{key}: the ellipse outside the mask: {px:?}"
                    );
                    off += 1;
                }
                other => panic!("{key}: mask value {other}"),
            }
        }
    }
    assert!(on > 1000 && off > 1000, "both sides seen: {on} on, {off} off");

    let bilinear = format!(
        r#"{{"version": 1, "ops": [{{"op": "RandomResizedCrop", "size": 48, "scale": [0.3, 1.0]}}, {geometry}, {{"op": "ColorJitter", "brightness": 0.3}}]}}"#
    );
    let (got, _) = images_and_masks(&w.addr, &seg, &bilinear).await;
    assert_eq!(got.len(), 21);
    let near = |image: &[u8], x: usize, y: usize, want: &dyn Fn(&[u8]) -> bool| {
        (y.saturating_sub(1)..=(y + 1).min(47))
            .flat_map(|yy| (x.saturating_sub(1)..=(x + 1).min(47)).map(move |xx| (xx, yy)))
            .any(|(xx, yy)| want(&image[(yy * 48 + xx) * 3..][..3]))
    };
    for (key, (image, mask)) in &got {
        assert!(
            mask.iter().all(|&m| m == 0 || m == 255),
            "{key}: nearest keeps the mask's values"
        );
        for (i, &m) in mask.iter().enumerate() {
            let (x, y) = (i % 48, i / 48);
            if m == 255 {
                assert!(
                    near(image, x, y, &|p| p[0] > 128 && p[2] < 128),
                    "{key}: mask at ({x}, {y}) off the ellipse"
                );
            } else {
                assert!(
                    near(image, x, y, &|p| p[0] < 128),
                    "{key}: ellipse at ({x}, {y}) outside the mask"
                );
            }
        }
    }
}

/// The views of every delivered sample, by key: (name -> (size, pixels)).
pub(crate) type Views = BTreeMap<String, BTreeMap<String, (u32, Vec<u8>)>>;

pub(crate) async fn views_by_key(addr: &str, dataset: &Path, views: &[(&str, &str)]) -> Views {
    use stoker_client::{Loader, LoaderConfig, TransformSpec, ViewSpec};
    let mut config = LoaderConfig::new(
        vec![addr.to_owned()],
        dataset.to_str().unwrap(),
        8,
        TransformSpec::train(32),
    );
    config.seed = 11;
    config.views = views
        .iter()
        .map(|(name, json)| ViewSpec {
            name: (*name).to_owned(),
            transform: TransformSpec::from_json(json).unwrap(),
        })
        .collect();
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut out = Views::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        assert_eq!(batch.views.len(), views.len());
        for v in &batch.views {
            assert_eq!(v.pixels.len(), batch.len() * (v.size as usize).pow(2) * 3, "{}", v.name);
        }
        for i in 0..batch.real() {
            let per = batch
                .views
                .iter()
                .map(|v| (v.name.clone(), (v.size, v.image(i).to_vec())));
            assert!(
                out.insert(batch.keys[i].clone(), per.collect()).is_none(),
                "{} twice",
                batch.keys[i]
            );
        }
    }
    out
}

pub(crate) const GLOBAL: &str = r#"{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 48, "scale": [0.4, 1.0]}, {"op": "RandomHorizontalFlip"}, {"op": "ColorJitter", "brightness": 0.4, "saturation": 0.2}]}"#;
pub(crate) const LOCAL: &str = r#"{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 24, "scale": [0.05, 0.4]}, {"op": "RandomHorizontalFlip"}]}"#;

/// Several views of one decode (DINOv2's global and local crops, scaled
/// down): each its own size, independent draws (two views with the same
/// pipeline differ), the same pixels on a second run, and a view's draws
/// unchanged when later views are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_have_their_sizes_independent_draws_and_repeat_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 24, 2, 120, 90);
    let shards = dir.path().join("shards");
    crate::support::pack(&images, shards.to_str().unwrap(), "1M", &[]);
    let w = Worker::start(2);
    let views = [
        ("global_1", GLOBAL),
        ("local_0", LOCAL),
        ("local_1", LOCAL),
        ("local_2", LOCAL),
    ];
    let first = views_by_key(&w.addr, &shards, &views).await;
    assert_eq!(first.len(), 24);
    let mut same_locals = 0;
    for (key, v) in &first {
        assert_eq!(v["global_1"].0, 48, "{key}");
        for local in ["local_0", "local_1", "local_2"] {
            assert_eq!((v[local].0, v[local].1.len()), (24, 24 * 24 * 3), "{key}");
        }
        if v["local_0"].1 == v["local_1"].1 || v["local_1"].1 == v["local_2"].1 {
            same_locals += 1;
        }
    }
    assert!(
        same_locals <= 1,
        "views with one pipeline draw independently: {same_locals} of 24 alike"
    );
    let second = views_by_key(&w.addr, &shards, &views).await;
    assert!(
        first == second,
        "the same (seed, epoch, sample, view) gives the same pixels"
    );
    // Adding a view leaves the others' draws alone.
    let fewer = views_by_key(&w.addr, &shards, &views[..2]).await;
    for (key, v) in &fewer {
        assert_eq!(v["local_0"], first[key]["local_0"], "{key}");
    }
}

/// A worker killed mid-epoch: every sample once, with the views a clean
/// run gives it (identity by position: the retried item's views are drawn
/// from the same (seed, epoch, sample, view)).
///
/// The first worker decodes a sample every 50 ms (the decode failpoint's
/// `sleep`), so its items take seconds: the kill, once 8 samples have
/// arrived, always finds it mid-item. Without the delay it could finish
/// its shards into the shared ring before the kill and nothing would be
/// retried (CI saw that once).
#[cfg(feature = "failpoints")]
#[test]
fn views_survive_a_worker_kill_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    synth_images(&images, 160, 4, 200, 150);
    let shards = dir.path().join("shards");
    // Several shards, so that each worker has items of its own.
    crate::support::pack(&images, shards.to_str().unwrap(), "256K", &[]);
    let expected = crate::support::image_folder_keys(&images);
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (clean, killed) = (out("clean.jsonl"), out("killed.jsonl"));
    let args = |fields_out: &str| -> Vec<String> {
        [
            "--batch-size",
            "8",
            "--image-size",
            "32",
            "--prefetch",
            "1",
            "--seed",
            "5",
            "--view",
            "g=train:48",
            "--view",
            "l=train:24",
            "--fields-out",
            fields_out,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let small_chunks = ["--chunk-bytes", "16K"];
    let slow_decodes = [("FAILPOINTS", "stoker-decode-panic=sleep(50)")];
    let (w1, w2) = (
        Worker::start_with(1, &small_chunks, &slow_decodes),
        Worker::start_with(1, &small_chunks, &[]),
    );
    let clean_args = args(&clean);
    let run = stream(
        &[&w2],
        shards.to_str().unwrap(),
        &clean_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    assert!(run.success(), "{}", run.stderr());
    let killed_args = args(&killed);
    let mut child = crate::support::StreamChild::spawn(
        &[&w1, &w2],
        shards.to_str().unwrap(),
        &killed_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    child.wait_for_samples(8, std::time::Duration::from_secs(30));
    crate::support::signal(w1.child.0.id(), "-KILL");
    let run = child.finish();
    crate::support::assert_exactly_once(&run, &expected, 0..1);
    assert!(run.num("retries") >= 1, "the killed worker's items were reassigned");
    let read = |path: &str| -> BTreeMap<String, (Value, Value)> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| (v["key"].as_str().unwrap().to_owned(), (v["g"].clone(), v["l"].clone())))
            .collect()
    };
    let (clean, killed) = (read(&clean), read(&killed));
    assert_eq!(clean.len(), expected.len());
    assert!(clean == killed, "the views of a retried item are the clean run's");
}
