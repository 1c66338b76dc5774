//! The readers and [`place`](super::place) on small datasets written here:
//! real JPEGs of known sizes, COCO JSON, YOLO labels.

use std::path::Path;

use stoker_core::targets::Targets;

use super::*;

/// A real JPEG of `w` x `h`.
fn jpeg(w: u32, h: u32) -> Vec<u8> {
    stoker_synth::encode_jpeg(&stoker_synth::procedural(w, h, 1), 90).unwrap()
}

/// Each image's placed targets (or problem), by key.
fn placed(opened: Listing<Vec<Annotated>>) -> Vec<(String, Result<Targets, Problem>)> {
    opened
        .images
        .into_iter()
        .map(|img| {
            let got = read_image(&img)
                .and_then(|data| place::place(&img, &opened.scheme, &data))
                .map(|p| {
                    let mut t = Targets::from_json(&p.targets, false).unwrap();
                    t.canvas = (0, 0);
                    t
                });
            (img.key, got)
        })
        .collect()
}

fn coco_dir(doc: &serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("img")).unwrap();
    for (name, w, h) in [("a.jpg", 64, 48), ("b.jpg", 32, 32), ("c.jpg", 40, 30)] {
        std::fs::write(dir.path().join("img").join(name), jpeg(w, h)).unwrap();
    }
    std::fs::write(dir.path().join("ann.json"), doc.to_string()).unwrap();
    dir
}

#[test]
fn coco_images_become_targets_with_category_ids_as_labels_and_bad_annotations_leave_their_image_out() {
    let doc = serde_json::json!({
        "images": [
            {"id": 3, "file_name": "c.jpg", "width": 40, "height": 30},
            {"id": 1, "file_name": "a.jpg", "width": 64, "height": 48},
            {"id": 2, "file_name": "b.jpg", "width": 32, "height": 32},
            {"id": 4, "file_name": "gone.jpg", "width": 10, "height": 10},
        ],
        "annotations": [
            {"id": 10, "image_id": 1, "category_id": 3, "bbox": [1.5, 2, 10, 20], "area": 150.0, "iscrowd": 0,
             "segmentation": [[1.5, 2, 11.5, 2, 11.5, 22]]},
            {"id": 11, "image_id": 1, "category_id": 1, "bbox": [54.5, 40, 10.3, 8], "area": 60.0, "iscrowd": 1,
             "segmentation": {"counts": [0, 5, 3067], "size": [48, 64]}},
            {"id": 12, "image_id": 2, "category_id": 7, "bbox": [0, 0, 5, 5], "area": 25, "iscrowd": 0},
            {"id": 13, "image_id": 9, "category_id": 1, "bbox": [0, 0, 5, 5], "area": 25, "iscrowd": 0},
            {"id": 14, "image_id": 3, "category_id": 1, "bbox": [30, 0, 12, 5], "area": 25, "iscrowd": 0},
        ],
        "categories": [{"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}],
    });
    let dir = coco_dir(&doc);
    let opened = coco::open(&dir.path().join("img"), &dir.path().join("ann.json")).unwrap();
    assert_eq!(opened.classes, ["", "cat", "", "dog"]);
    assert_eq!(
        opened.report.left_out.first,
        [format!(
            "{}, annotation 13 (image_id 9): annotation of no image in the file",
            dir.path().join("ann.json").display()
        )]
    );
    let got = placed(opened);
    let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c", "gone"], "sorted by image id");
    let a = got[0].1.as_ref().unwrap();
    assert_eq!(a.labels, [3, 1]);
    assert_eq!(a.boxes_out()[0], [1.5, 2.0, 10.0, 20.0]);
    // 54.5 + 10.3 is 0.8 px past the width: clamped.
    assert!((a.boxes_out()[1][2] - 9.5).abs() < 1e-9, "{:?}", a.boxes_out());
    assert_eq!(a.iscrowd, [false, true]);
    assert_eq!(a.area, [150.0, 60.0]);
    let b = got[1].1.as_ref().unwrap_err();
    assert!(b.what.ends_with("b.jpg, annotation 12 (category_id 7)"), "{b:?}");
    assert_eq!(b.reason, "category not in the file's categories");
    let c = got[2].1.as_ref().unwrap_err();
    assert!(
        c.what.ends_with("c.jpg (40x30), annotation 14 [30.0, 0.0, 12.0, 5.0]"),
        "{c:?}"
    );
    assert_eq!(c.reason, "box reaches outside the image by more than 1 px");
    let gone = got[3].1.as_ref().unwrap_err();
    assert_eq!(gone.reason, "image file missing");
}

#[test]
fn coco_segmentations_keypoints_and_python_nans_are_checked() {
    let ann = |id: u32, extra: serde_json::Value| {
        let mut a = serde_json::json!({"id": id, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5],
                                       "area": 25, "iscrowd": 0, "keypoints": [1, 1, 2, 3, 3, 2, 0, 0, 0]});
        a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        a
    };
    let names = ["nose", "left_eye", "right_eye"];
    for (extra, why) in [
        (
            serde_json::json!({"segmentation": [[1, 1, 2, 2]]}),
            "polygon 0 has 2 points, fewer than 3",
        ),
        (
            serde_json::json!({"segmentation": {"counts": [100], "size": [10, 10]}}),
            "rle size 10x10 is not its image's 64x48",
        ),
        (
            serde_json::json!({"segmentation": {"counts": [5, 7], "size": [48, 64]}}),
            "rle counts cover 12 pixels, its size 64x48 has 3072",
        ),
        (
            serde_json::json!({"segmentation": {"counts": "abc", "size": [48, 64]}}),
            "rle counts string ends inside a count",
        ),
        (
            serde_json::json!({"keypoints": [1, 1, 2, 3, 3, 2]}),
            "keypoints disagree",
        ),
        (
            serde_json::json!({"bbox": [1, 1, -5, 5]}),
            "box negative width or height",
        ),
        (serde_json::json!({"bbox": [1, 1, 5]}), "bbox is not 4 numbers"),
    ] {
        let doc = serde_json::json!({
            "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
            "annotations": [ann(5, serde_json::json!({})), ann(6, extra)],
            "categories": [{"id": 1, "name": "person", "keypoints": names}],
        });
        let dir = coco_dir(&doc);
        let opened = coco::open(&dir.path().join("img"), &dir.path().join("ann.json")).unwrap();
        assert_eq!(opened.scheme.flip_idx, [0, 2, 1]);
        let problem = placed(opened).remove(0).1.unwrap_err();
        assert!(problem.what.contains("annotation 6"), "{problem:?}");
        assert!(problem.reason.contains(why), "{problem:?} not {why}");
    }
    // Python's json writes NaN: read as a missing number, a bad box.
    let text = r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
        "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [NaN, 1, 5, -Infinity], "area": 1,
                         "iscrowd": 0, "segmentation": [[1, 1, 2, 2, 3, "NaN"]]}],
        "categories": [{"id": 1, "name": "x"}]}"#;
    assert!(coco::python_floats_as_null(text.as_bytes()).is_some());
    let dir = coco_dir(&serde_json::json!({}));
    std::fs::write(dir.path().join("ann.json"), text).unwrap();
    let opened = coco::open(&dir.path().join("img"), &dir.path().join("ann.json")).unwrap();
    let problem = placed(opened).remove(0).1.unwrap_err();
    assert!(problem.what.contains("annotation 7 (segmentation"), "{problem:?}");
    // A file that is no COCO file is an error naming it.
    std::fs::write(dir.path().join("ann.json"), b"{\"annotations\": []}").unwrap();
    let Err(e) = coco::open(&dir.path().join("img"), &dir.path().join("ann.json")) else {
        panic!("no images accepted");
    };
    assert!(e.to_string().contains("ann.json: not a coco annotations file"), "{e}");
}

fn yolo_dir(yaml: &str, labels: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images/train");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::create_dir_all(dir.path().join("labels/train")).unwrap();
    for (stem, w, h) in [("p", 100, 50), ("q", 40, 40), ("r", 64, 64)] {
        std::fs::write(images.join(format!("{stem}.jpg")), jpeg(w, h)).unwrap();
    }
    for (stem, text) in labels {
        std::fs::write(dir.path().join(format!("labels/train/{stem}.txt")), text).unwrap();
    }
    std::fs::write(dir.path().join("data.yaml"), yaml).unwrap();
    dir
}

#[test]
fn yolo_lines_become_pixel_boxes_and_bad_lines_name_their_file_and_line() {
    let yaml = "train: images/train\nnames:\n  0: cat\n  2: dog\nkpt_shape: [2, 3]\nflip_idx: [1, 0]\n";
    let dir = yolo_dir(
        yaml,
        &[
            (
                "p",
                "2 0.5 0.5 0.2 0.4 0.1 0.2 2 0.3 0.4 1\n\n0 0.1 0.1 0.2 0.2 0 0 0 0 0 0\n",
            ),
            ("q", "0 0.5 0.5 0.2 0.2 0 0 0 0 0 0\n1 0.5 0.5 0.2 0.2 0 0 0 0 0 0\n"),
        ],
    );
    let opened = yolo::open(dir.path(), "train").unwrap();
    assert_eq!(opened.classes, ["cat", "", "dog"]);
    let got = placed(opened);
    let p = got[0].1.as_ref().unwrap();
    assert_eq!(got[0].0, "images/train/p");
    assert_eq!(p.labels, [2, 0]);
    assert_eq!(p.boxes_out(), [[50.0, 25.0, 20.0, 20.0], [10.0, 5.0, 20.0, 10.0]]);
    assert_eq!(p.keypoints[..2], [[10.0, 10.0, 2.0], [30.0, 20.0, 1.0]]);
    assert_eq!(p.flip_idx, [1, 0]);
    let q = got[1].1.as_ref().unwrap_err();
    assert!(q.what.contains("labels/train/q.txt line 2"), "{q:?}");
    assert_eq!(q.reason, "class not in names (0..3)");
    // No label file: a background image.
    assert!(got[2].1.as_ref().unwrap().boxes.is_empty());

    let names = ["a".to_owned()];
    for (line, why) in [
        ("0 0.5 0.5 0.1", "line not of 5 fields"),
        ("0 0.5 x 0.1 0.1", "not a number"),
        ("0.5 0.5 0.5 0.1 0.1", "class not in names"),
    ] {
        assert!(yolo::instance(line, &names, 0, 0).unwrap_err().contains(why), "{line}");
    }
    assert_eq!(
        yolo::label_path(Path::new("/d/images/train/images/x.y.jpg")),
        Path::new("/d/images/train/labels/x.y.txt")
    );
}

#[tokio::test]
async fn a_packed_coco_dataset_holds_each_images_targets_json_and_no_labels() {
    let doc = serde_json::json!({
        "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48},
                   {"id": 2, "file_name": "b.jpg", "width": 32, "height": 32}],
        "annotations": [{"id": 10, "image_id": 1, "category_id": 1, "bbox": [1, 2, 10, 20], "area": 200,
                         "iscrowd": 0, "segmentation": [[1, 2, 11, 2, 11, 22]]}],
        "categories": [{"id": 1, "name": "cat"}],
    });
    let dir = coco_dir(&doc);
    let source = DetectionSource::Coco {
        images: dir.path().join("img"),
        annotations: dir.path().join("ann.json"),
    };
    let out = tempfile::tempdir().unwrap();
    let uri = DatasetUri::Local(out.path().into());
    let storage = Storage::new();
    let err = pack_detection(&storage, &source, &uri, ShardFormat::RecordIo, 1 << 20, |_, _| {})
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("recordio has no place"), "{err}");
    let summary = pack_detection(&storage, &source, &uri, ShardFormat::WebDataset, 1 << 20, |_, _| {})
        .await
        .unwrap();
    assert_eq!(summary.samples, 2);
    assert_eq!(summary.classes, ["", "cat"]);
    assert!(summary.report.is_empty(), "{:?}", summary.report);
    let r = storage.open(&uri, "shard-000000.tar").await.unwrap();
    let mut names = Vec::new();
    let mut reader = stoker_formats::tar::TarReader::new(r, 1 << 20);
    while let Some(m) = reader.next_member().await.unwrap() {
        names.push(m.name.clone());
        if m.name == "a.json" {
            let v: serde_json::Value = serde_json::from_slice(m.data.as_ref().unwrap()).unwrap();
            assert_eq!(v["boxes"], serde_json::json!([[1.0, 2.0, 10.0, 20.0]]));
            assert_eq!(v["format"], "XYWH");
            assert_eq!(v["labels"], serde_json::json!([1]));
            assert_eq!(
                v["segmentation"],
                serde_json::json!([[[1.0, 2.0, 11.0, 2.0, 11.0, 22.0]]])
            );
            assert_eq!(v["image_id"], 1);
        }
    }
    assert_eq!(names, ["a.jpg", "a.json", "b.jpg", "b.json"]);
    assert!(check_detection(&source).await.unwrap().is_empty());
}
