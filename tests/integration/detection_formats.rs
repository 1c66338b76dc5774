//! `stoker pack` of the detection datasets users have: COCO JSON
//! (instances, person keypoints), Ultralytics YOLO and Hugging Face
//! Parquet (cppe-5's and detection-datasets/coco's features), written by
//! tests/python/write_detection.py (Python's json, PIL, Hugging Face
//! `datasets`), packed into WebDataset, TFRecord and Parquet, then
//! streamed through a real worker with a `targets` field: every image's
//! boxes, labels, iscrowd and keypoints arrive as the script converted
//! its annotations to pixels, through a `Resize` that batches them. Bad
//! annotations of each format are reported naming the image, the
//! annotation and the values, and `--strict` writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use stoker_client::TransformSpec;
use stoker_core::targets::Targets;

use crate::detection::targets_by_key;
use crate::support::{Worker, python, python_script, run_ok, stoker};

/// The side the images are resized to, to batch them.
const SIDE: u32 = 32;

/// The fixtures: the datasets, what each image's targets must be, and the
/// bad datasets' problems.
struct Fixtures {
    dir: tempfile::TempDir,
    expected: Value,
    bad: Value,
}

impl Fixtures {
    fn write() -> Self {
        let dir = tempfile::tempdir().unwrap();
        run_ok(python().arg(python_script("write_detection.py")).arg(dir.path()));
        let read = |name: &str| serde_json::from_slice(&std::fs::read(dir.path().join(name)).unwrap()).unwrap();
        Self {
            expected: read("expected.json"),
            bad: read("bad.json"),
            dir,
        }
    }

    fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).to_str().unwrap().to_owned()
    }
}

/// `stoker pack` with `args`: its output, successful or not.
fn pack(args: &[&str]) -> std::process::Output {
    let mut cmd = stoker();
    cmd.arg("pack").args(args).args(["--shard-size", "8K"]);
    cmd.output().unwrap()
}

fn pack_ok(args: &[&str]) -> String {
    let out = pack(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "stoker pack {args:?} failed:\n{stderr}");
    stderr
}

/// Where each output format holds the targets: the `targets` field's
/// source.
fn targets_source(format: &str) -> &'static str {
    match format {
        "wds" => "json",
        "tfrecord" => "image/object/targets",
        _ => "targets",
    }
}

/// Every delivered sample's targets by key, streamed from `dataset` (in
/// `format`) through the worker at `addr`, resized to SIDE x SIDE.
async fn streamed(addr: &str, dataset: &str, format: &str) -> BTreeMap<String, Targets> {
    let spec = format!(r#"{{"ops": [{{"op": "Resize", "size": [{SIDE}, {SIDE}]}}]}}"#);
    let spec = TransformSpec::from_json(&spec).unwrap();
    let (got, skipped) = targets_by_key(addr, dataset, targets_source(format), spec).await;
    assert!(skipped.is_empty(), "{dataset}: {skipped:?}");
    got
}

/// `stoker pack` of `input` (its flags) into `out` as `format`, then its
/// samples streamed through the worker at `addr`: pack's report and the
/// targets by key.
async fn pack_and_stream(addr: &str, input: &[&str], out: &str, format: &str) -> (String, BTreeMap<String, Targets>) {
    let mut args = input.to_vec();
    args.extend(["--output", out, "--format", format]);
    let stderr = pack_ok(&args);
    (stderr, streamed(addr, out, format).await)
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-3, "{what}: got {got}, want {want}");
}

/// Checks `got` against the script's `expected` images, scaled by the
/// resize: boxes in their format, labels, iscrowd, keypoints.
fn check(expected: &Value, got: &BTreeMap<String, Targets>, what: &str) {
    let want = expected.as_object().unwrap();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: the keys"
    );
    for (key, w) in want {
        let t = &got[key];
        let at = format!("{what} {key}");
        let (iw, ih) = (w["size"][0].as_f64().unwrap(), w["size"][1].as_f64().unwrap());
        let (sx, sy) = (f64::from(SIDE) / iw, f64::from(SIDE) / ih);
        assert_eq!(t.canvas, (SIDE, SIDE), "{at}");
        assert_eq!(t.format.name(), w["format"], "{at}");
        let boxes = w["boxes"].as_array().unwrap();
        assert_eq!(t.boxes.len(), boxes.len(), "{at}: {t:?}");
        for (b, e) in t.boxes_out().iter().zip(boxes) {
            for (i, scale) in [sx, sy, sx, sy].into_iter().enumerate() {
                close(b[i], e[i].as_f64().unwrap() * scale, &format!("{at} box {b:?} vs {e}"));
            }
        }
        let labels: Vec<i64> = serde_json::from_value(w["labels"].clone()).unwrap();
        assert_eq!(t.labels, labels, "{at}");
        if let Some(crowd) = w.get("iscrowd") {
            let crowd: Vec<bool> = crowd.as_array().unwrap().iter().map(|c| c != 0).collect();
            assert_eq!(t.iscrowd, crowd, "{at}");
        }
        if let Some(area) = w.get("area") {
            for (a, e) in t.area.iter().zip(area.as_array().unwrap()) {
                close(*a, e.as_f64().unwrap(), &format!("{at} area"));
            }
        }
        if let Some(points) = w.get("keypoints") {
            let points: Vec<Vec<[f64; 3]>> = serde_json::from_value(points.clone()).unwrap();
            assert_eq!(t.per_instance, points[0].len(), "{at}");
            for (p, e) in t.keypoints.iter().zip(points.concat()) {
                close(p[0], e[0] * sx, &format!("{at} keypoint x"));
                close(p[1], e[1] * sy, &format!("{at} keypoint y"));
                assert_eq!(p[2], e[2], "{at} visibility");
            }
        }
    }
}

/// The dataset index's class names.
fn classes(dataset: &str) -> Vec<String> {
    let index: Value =
        serde_json::from_slice(&std::fs::read(Path::new(dataset).join("stoker-index.json")).unwrap()).unwrap();
    serde_json::from_value(index["classes"].clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coco_instances_and_keypoints_pack_into_every_format_and_arrive_as_annotated() {
    let fx = Fixtures::write();
    let w = Worker::start(2);
    let images = fx.path("coco/images");
    let instances = fx.path("coco/instances.json");
    for format in ["wds", "tfrecord", "parquet"] {
        let out = fx.path(&format!("out/coco-{format}"));
        let input = ["--input", &images, "--annotations", &instances];
        let (stderr, got) = pack_and_stream(&w.addr, &input, &out, format).await;
        assert!(
            stderr.contains("clamped 1 box(es)") && stderr.contains("a.jpg (64x48), annotation 3"),
            "{stderr}"
        );
        assert_eq!(classes(&out), ["", "person", "", "car", "", "", "", "dog"]);
        check(&fx.expected["coco"], &got, &format!("coco as {format}"));
    }
    let keypoints = fx.path("coco/person_keypoints.json");
    let input = ["--input", &images, "--annotations", &keypoints];
    let (_, got) = pack_and_stream(&w.addr, &input, &fx.path("out/coco-keypoints"), "wds").await;
    check(&fx.expected["coco_keypoints"], &got, "coco keypoints");
    // COCO's left/right pairs, as Ultralytics' flip_idx for COCO pose.
    let flip = &got.values().next().unwrap().flip_idx;
    assert_eq!(flip, &[0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]);
    // RecordIO has no place for targets: refused before writing.
    let rec = fx.path("out/rec");
    let refused = pack(&[&input[..], &["--output", &rec, "--format", "recordio"]].concat());
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("recordio has no place for detection targets"));
    assert!(!Path::new(&rec).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yolo_and_hugging_face_datasets_arrive_as_their_annotations_in_pixels() {
    let fx = Fixtures::write();
    let w = Worker::start(2);
    // YOLO, from the dataset's folder: train by default, val by --split.
    let yolo = fx.path("yolo");
    let out = fx.path("out/yolo");
    let input = ["--input", &yolo, "--annotations-format", "yolo"];
    let (_, got) = pack_and_stream(&w.addr, &input, &out, "parquet").await;
    assert_eq!(classes(&out), ["cat", "dog", "bird"]);
    check(&fx.expected["yolo"], &got, "yolo");
    let yaml = fx.path("yolo/data.yaml");
    let input = ["--input", &yaml, "--annotations-format", "yolo", "--split", "val"];
    let (_, got) = pack_and_stream(&w.addr, &input, &fx.path("out/yolo-val"), "wds").await;
    assert_eq!(got.keys().collect::<Vec<_>>(), ["images/val/v"]);

    // cppe-5's features: XYWH, the default.
    let cppe5 = fx.path("hf/cppe5");
    let out = fx.path("out/cppe5");
    let input = ["--input", &cppe5, "--annotations-format", "hf"];
    let (_, got) = pack_and_stream(&w.addr, &input, &out, "tfrecord").await;
    assert_eq!(classes(&out), ["Coverall", "Face_Shield", "Gloves", "Goggles", "Mask"]);
    check(&fx.expected["hf/cppe5"], &got, "cppe-5");
    // detection-datasets/coco's: XYXY, said with --box-format.
    let file = fx.path("hf/coco/train-00000-of-00001.parquet");
    let out = fx.path("out/hf-coco");
    let input = ["--input", &file, "--annotations-format", "hf", "--box-format", "xyxy"];
    let (_, got) = pack_and_stream(&w.addr, &input, &out, "wds").await;
    assert_eq!(classes(&out).len(), 80);
    check(&fx.expected["hf/coco"], &got, "detection-datasets/coco");
}

#[test]
fn bad_annotations_of_every_format_are_reported_naming_image_and_annotation_and_strict_writes_nothing() {
    let fx = Fixtures::write();
    let cases: [(&str, Vec<String>); 3] = [
        (
            "coco",
            vec![
                "--input".into(),
                fx.path("coco_bad/images"),
                "--annotations".into(),
                fx.path("coco_bad/instances.json"),
            ],
        ),
        (
            "yolo_bad",
            vec![
                "--input".into(),
                fx.path("yolo_bad"),
                "--annotations-format".into(),
                "yolo".into(),
            ],
        ),
        (
            "hf_bad",
            vec![
                "--input".into(),
                fx.path("hf_bad"),
                "--annotations-format".into(),
                "hf".into(),
            ],
        ),
    ];
    for (name, input) in cases {
        let bad = &fx.bad[name];
        let out = fx.path(&format!("out/{name}"));
        let mut args: Vec<&str> = input.iter().map(String::as_str).collect();
        args.extend(["--output", out.as_str()]);
        let stderr = pack_ok(&args);
        let problems = bad["problems"].as_array().unwrap();
        assert!(
            stderr.contains(&format!("left out {} image(s) or annotation(s)", problems.len())),
            "{name}: {stderr}"
        );
        for problem in problems {
            let parts: Vec<&str> = problem
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap())
                .collect();
            assert!(
                stderr.lines().any(|l| parts.iter().all(|p| l.contains(p))),
                "{name}: no line names all of {parts:?}:\n{stderr}"
            );
        }
        for clamped in bad["clamped"].as_array().unwrap() {
            assert!(stderr.contains(clamped.as_str().unwrap()), "{name}: {stderr}");
        }
        assert!(
            stderr.contains(&format!("packed {} images", bad["packed"])),
            "{name}: {stderr}"
        );
        // The index keeps the report, for workers and `stoker doctor`.
        let index: Value =
            serde_json::from_slice(&std::fs::read(Path::new(&out).join("stoker-index.json")).unwrap()).unwrap();
        assert_eq!(index["pack_report"]["left_out"]["count"], problems.len(), "{name}");

        // --strict: refused, naming them, and nothing written.
        let strict_out = fx.path(&format!("out/{name}-strict"));
        let mut args: Vec<&str> = input.iter().map(String::as_str).collect();
        args.extend(["--output", strict_out.as_str(), "--strict"]);
        let refused = pack(&args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{name}: --strict packed");
        assert!(
            stderr.contains("--strict") && stderr.contains("nothing was written"),
            "{name}: {stderr}"
        );
        let first = problems[0].as_array().unwrap()[0].as_str().unwrap();
        assert!(stderr.contains(first), "{name}: {stderr}");
        assert!(!Path::new(&strict_out).exists(), "{name}: --strict wrote {strict_out}");
    }
}
