//! Detection targets through a real worker: boxes read from a WebDataset
//! sample's `.json`, moved with their image's geometry, delivered beside
//! it. tests/python/targets_oracle.py checks the coordinates against
//! torchvision's kernels, rotations included; here they are checked
//! against the pixels themselves, through crops, resizes, flips and pads
//! (after a rotation a box is its rotated corners' extent, larger than
//! the pixels in view wherever the canvas cuts it), and a GPU worker's
//! against a CPU worker's.

use std::collections::BTreeMap;
use std::path::Path;

use stoker_client::{FieldKind, FieldSpec, FieldValue, Loader, LoaderConfig, TransformSpec};
use stoker_core::ImageSize;
use stoker_core::targets::Targets;

use crate::support::{StreamChild, Worker, python, python_script, run_ok, signal, stream, torch_python};

/// Distinct colours, one per box: label `i` is painted `COLOURS[i]`.
const COLOURS: [[u8; 3]; 3] = [[230, 20, 20], [20, 220, 30], [240, 230, 20]];
const GROUND: [u8; 3] = [20, 30, 200];

/// A WebDataset shard of `n` JPEGs, each with up to three rectangles of
/// its own colours and a `.json` of their boxes (XYWH, labels 0..3); the
/// last sample's box reaches past its image.
fn write_shard(dir: &Path, n: usize) {
    write_shard_at(dir, 0, n);
}

/// Shard `shard` of `n` such samples (keys `s<shard><i>`); only shard 0's
/// last sample has the bad box.
fn write_shard_at(dir: &Path, shard: u64, n: usize) {
    let mut tar = Vec::new();
    let mut state = 7u64 + shard;
    let mut next = |m: u32| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % u64::from(m)) as u32
    };
    for i in 0..n {
        let (w, h) = (120 + next(80), 90 + next(60));
        let mut px = vec![0u8; (w * h * 3) as usize];
        for p in px.chunks_exact_mut(3) {
            p.copy_from_slice(&GROUND);
        }
        let mut boxes = Vec::new();
        for (label, colour) in COLOURS.iter().enumerate().take(1 + i % 3) {
            // Side by side in thirds of the width, so they never overlap.
            let third = w / 3;
            let bw = 8 + next(third - 12);
            let bh = 8 + next(h - 12);
            let x = third * label as u32 + next(third - bw);
            let y = next(h - bh);
            for yy in y..y + bh {
                for xx in x..x + bw {
                    let at = ((yy * w + xx) * 3) as usize;
                    px[at..at + 3].copy_from_slice(colour);
                }
            }
            boxes.push([x, y, bw, bh]);
        }
        if shard == 0 && i == n - 1 {
            boxes.push([w - 4, 0, 10, 10]);
        }
        let mut jpeg = Vec::new();
        jpeg_encoder::Encoder::new(&mut jpeg, 100)
            .encode(&px, w as u16, h as u16, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        let labels: Vec<usize> = (0..boxes.len()).map(|l| l.min(2)).collect();
        // Each rectangle as COCO's polygon, for masks: its pixels exactly.
        let outlines: Vec<[[u32; 8]; 1]> = boxes
            .iter()
            .map(|&[x, y, bw, bh]| [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]])
            .collect();
        let doc = serde_json::json!({"boxes": boxes, "format": "XYWH", "labels": labels, "segmentation": outlines});
        let key = if shard == 0 {
            format!("s{i:04}")
        } else {
            format!("s{shard}-{i:04}")
        };
        stoker_formats::tar::append_member(&mut tar, &format!("{key}.jpg"), &jpeg);
        stoker_formats::tar::append_member(&mut tar, &format!("{key}.json"), doc.to_string().as_bytes());
    }
    tar.extend_from_slice(&[0; 1024]);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("shard-{shard:06}.tar")), tar).unwrap();
}

/// The extent of the pixels of `colour` (within a JPEG's error) in an
/// `s` x `s` RGB image, and how many there are.
fn extent(img: &[u8], s: usize, colour: [u8; 3]) -> (usize, [f64; 4]) {
    extent_in(img, (s, s), s, colour)
}

/// [`extent`] of an image of `(w, h)` at the top left of a block `stride`
/// pixels wide.
fn extent_in(img: &[u8], (w, h): (usize, usize), stride: usize, colour: [u8; 3]) -> (usize, [f64; 4]) {
    let (mut count, mut b) = (0, [f64::MAX, f64::MAX, f64::MIN, f64::MIN]);
    for y in 0..h {
        for x in 0..w {
            let p = &img[(y * stride + x) * 3..][..3];
            if p.iter().zip(colour).all(|(&a, c)| a.abs_diff(c) < 60) {
                count += 1;
                b = [
                    b[0].min(x as f64),
                    b[1].min(y as f64),
                    b[2].max(x as f64 + 1.0),
                    b[3].max(y as f64 + 1.0),
                ];
            }
        }
    }
    (count, b)
}

/// Every delivered sample's targets (the `targets` field read from
/// `source`) by key, from the worker at `addr` with `spec`, and the skip
/// reasons.
pub(crate) async fn targets_by_key(
    addr: &str,
    dataset: &str,
    source: &str,
    spec: TransformSpec,
) -> (BTreeMap<String, Targets>, Vec<String>) {
    targets_by_key_as(addr, dataset, (source, FieldKind::Targets), spec).await
}

/// [`targets_by_key`] with the field read as `kind`.
async fn targets_by_key_as(
    addr: &str,
    dataset: &str,
    (source, kind): (&str, FieldKind),
    spec: TransformSpec,
) -> (BTreeMap<String, Targets>, Vec<String>) {
    let mut config = LoaderConfig::new(vec![addr.to_owned()], dataset, 8, spec);
    config.fields = vec![FieldSpec::new("targets", source, kind)];
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut out = BTreeMap::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for i in 0..batch.real() {
            let Some(FieldValue::Targets(t)) = &batch.fields[i][0] else {
                panic!("{}: no targets: {:?}", batch.keys[i], batch.fields[i]);
            };
            out.insert(batch.keys[i].clone(), (**t).clone());
        }
    }
    let reasons = stream
        .report()
        .skip_reasons
        .iter()
        .map(|(k, r)| format!("{k}: {r}"))
        .collect();
    (out, reasons)
}

const GEOMETRY: &str = r#"{"op": "RandomHorizontalFlip"}, {"op": "RandomVerticalFlip"},
    {"op": "RandomRotation", "degrees": 25}, {"op": "CenterCrop", "size": 64},
    {"op": "SanitizeBoundingBoxes"}, {"op": "ConvertBoundingBoxFormat", "format": "XYXY"}"#;

/// A GPU worker's lanes run the pixels; the boxes are moved on the host
/// from the same plan: they equal a CPU worker's, bit for bit, and the
/// same bad sample is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_worker_delivers_the_boxes_a_cpu_worker_delivers() {
    let Some(gpu) = crate::gpu::gpu_or_skip("a_gpu_worker_delivers_the_boxes_a_cpu_worker_delivers") else {
        return;
    };
    drop(gpu);
    let dir = tempfile::tempdir().unwrap();
    write_shard(dir.path(), 48);
    let spec = || {
        TransformSpec::from_json(&format!(
            r#"{{"ops": [{{"op": "RandomResizedCrop", "size": 64, "scale": [0.4, 1.0]}}, {GEOMETRY}]}}"#
        ))
        .unwrap()
    };
    let cpu = Worker::start(2);
    let gpu = Worker::start_with(2, &["--device", "cuda", "--gpu-only"], &[]);
    let dataset = dir.path().to_str().unwrap();
    let (on_cpu, cpu_skips) = targets_by_key(&cpu.addr, dataset, "json", spec()).await;
    let (on_gpu, gpu_skips) = targets_by_key(&gpu.addr, dataset, "json", spec()).await;
    assert_eq!(on_cpu.len(), 47, "{cpu_skips:?}");
    assert_eq!(on_gpu, on_cpu);
    assert_eq!(gpu_skips, cpu_skips);
    let info = crate::gpu::worker_info(&gpu.addr).await;
    assert!(info.gpu_samples > 0, "the images went through the gpu lanes: {info:?}");
    let boxes: usize = on_gpu.values().map(|t| t.boxes.len()).sum();
    println!(
        "gpu detection: {} samples, {boxes} boxes equal to the cpu worker's",
        on_gpu.len()
    );

    // Each image's own size: the lanes write one square size, so the GPU
    // worker's CPU threads run these samples, with the CPU worker's boxes.
    let own = || {
        TransformSpec::from_json(
            r#"{"ops": [{"op": "RandomHorizontalFlip"}, {"op": "RandomZoomOut", "p": 1.0, "side_range": [1.0, 2.0]},
            {"op": "SanitizeBoundingBoxes"}, {"op": "ConvertBoundingBoxFormat", "format": "XYXY"}]}"#,
        )
        .unwrap()
    };
    let (on_cpu, _) = targets_by_key(&cpu.addr, dataset, "json", own()).await;
    let (on_gpu, gpu_skips) = targets_by_key(&gpu.addr, dataset, "json", own()).await;
    assert_eq!(on_cpu.len(), 47, "{gpu_skips:?}");
    assert_eq!(on_gpu, on_cpu);
    let after = crate::gpu::worker_info(&gpu.addr).await;
    assert_eq!(after.gpu_samples, info.gpu_samples, "{after:?}");
    assert_eq!(after.cpu_samples - info.cpu_samples, 47, "{after:?}");
    println!("gpu detection, each image's own size: 47 samples on the gpu worker's cpu threads, boxes equal");

    // Instance masks: drawn on the GPU worker's CPU threads, equal to the
    // CPU worker's.
    let kind = FieldKind::TargetsWithMasks;
    let (on_cpu, _) = targets_by_key_as(&cpu.addr, dataset, ("json", kind), spec()).await;
    let (on_gpu, gpu_skips) = targets_by_key_as(&gpu.addr, dataset, ("json", kind), spec()).await;
    assert_eq!(on_cpu.len(), 47, "{gpu_skips:?}");
    assert!(on_gpu.values().all(|t| t.masks.is_some()));
    assert_eq!(on_gpu, on_cpu);
    let masked = crate::gpu::worker_info(&gpu.addr).await;
    assert_eq!(masked.gpu_samples, after.gpu_samples, "{masked:?}");
    println!("gpu detection, instance masks: 47 samples on the gpu worker's cpu threads, masks equal");
}

/// A pipeline that ends at no fixed size (flips, a pad, no resize) keeps
/// each image's own size: each arrives at the top left of its batch's
/// block, zeros around it, its size in `image_sizes` and its targets'
/// canvas, its boxes on its pixels; grouped by aspect, every batch but the
/// last two holds one aspect, and every sample arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_of_their_own_sizes_arrive_packed_with_their_boxes_and_grouped_by_aspect() {
    let dir = tempfile::tempdir().unwrap();
    let n = 24;
    write_shard(dir.path(), n);
    let w = Worker::start(2);
    let spec = TransformSpec::from_json(
        r#"{"ops": [{"op": "RandomHorizontalFlip"}, {"op": "RandomVerticalFlip"},
            {"op": "RandomApply", "transforms": [{"op": "Pad", "padding": [3, 40, 2, 4]}]},
            {"op": "SanitizeBoundingBoxes"}, {"op": "ConvertBoundingBoxFormat", "format": "XYXY"}]}"#,
    )
    .unwrap();
    assert_eq!(spec.size, ImageSize::Each);
    let mut config = LoaderConfig::new(vec![w.addr.clone()], dir.path().to_str().unwrap(), 4, spec);
    config.fields = vec![FieldSpec::new("targets", "json", FieldKind::Targets)];
    config.aspect_ratio_grouping = true;
    config.deterministic = true;
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let (mut keys, mut aspects, mut boxes) = (Vec::new(), Vec::new(), 0);
    let mut sizes = std::collections::BTreeSet::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        let (bh, bw) = (batch.height as usize, batch.width as usize);
        assert_eq!(batch.pixels.len(), batch.len() * bh * bw * 3);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..batch.real() {
            let Some(FieldValue::Targets(t)) = &batch.fields[i][0] else {
                panic!("{}: no targets: {:?}", batch.keys[i], batch.fields[i]);
            };
            let (h, w) = batch.image_sizes[i];
            assert_eq!(t.canvas, (w, h), "{}: canvas is (width, height)", batch.keys[i]);
            assert!(
                h as usize <= bh && w as usize <= bw,
                "{}: {h}x{w} in {bh}x{bw}",
                batch.keys[i]
            );
            sizes.insert((h, w));
            seen.insert(w > h);
            let img = batch.image(i);
            // Zeros to the right of the image and below it.
            for y in 0..bh {
                let from = if y < h as usize { w as usize } else { 0 };
                assert!(
                    img[(y * bw + from) * 3..(y + 1) * bw * 3].iter().all(|&p| p == 0),
                    "{} row {y}",
                    batch.keys[i]
                );
            }
            for (label, b) in t.labels.iter().zip(t.boxes_out()) {
                let (count, seen) = extent_in(img, (w as usize, h as usize), bw, COLOURS[*label as usize]);
                let off = b.iter().zip(seen).map(|(a, c)| (a - c).abs()).fold(0.0, f64::max);
                assert!(
                    count > 0 && off <= 2.0,
                    "{} label {label}: box {b:?}, pixels at {seen:?}",
                    batch.keys[i]
                );
                boxes += 1;
            }
            keys.push(batch.keys[i].clone());
        }
        aspects.push(seen.len());
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n - 1, "each sample once; the bad box skipped");
    assert!(sizes.len() > 4, "{sizes:?}");
    let mixed: Vec<usize> = (0..aspects.len()).filter(|&i| aspects[i] > 1).collect();
    assert!(mixed.iter().all(|&i| i + 2 >= aspects.len()), "{aspects:?}");
    println!(
        "each image's own size: {} samples of {} sizes, {boxes} boxes on their pixels, {} batches",
        keys.len(),
        sizes.len(),
        aspects.len()
    );
}

/// Boxes and instance masks through crops, flips and pads on a CPU worker:
/// each box is its rectangle's pixels' extent, each mask its pixels; a
/// box outside its image is skipped, and a policy refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boxes_follow_their_images_geometry_through_a_worker_and_bad_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let n = 24;
    write_shard(dir.path(), n);
    let w = Worker::start(2);
    let s = 64usize;
    let spec = TransformSpec::from_json(&format!(
        r#"{{"ops": [{{"op": "RandomResizedCrop", "size": {s}, "scale": [0.4, 1.0], "interpolation": "nearest"}},
            {{"op": "RandomHorizontalFlip"}}, {{"op": "RandomVerticalFlip"}},
            {{"op": "Pad", "padding": [3, 5, 2, 4]}}, {{"op": "CenterCrop", "size": {s}}},
            {{"op": "SanitizeBoundingBoxes"}}, {{"op": "ConvertBoundingBoxFormat", "format": "XYXY"}}]}}"#
    ))
    .unwrap();
    let mut config = LoaderConfig::new(vec![w.addr.clone()], dir.path().to_str().unwrap(), 8, spec);
    config.fields = vec![FieldSpec::new("targets", "json", FieldKind::TargetsWithMasks)];
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let (mut samples, mut boxes, mut masks) = (0, 0, 0);
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        for i in 0..batch.real() {
            let Some(FieldValue::Targets(t)) = &batch.fields[i][0] else {
                panic!("{}: no targets: {:?}", batch.keys[i], batch.fields[i]);
            };
            assert_eq!(t.canvas, (s as u32, s as u32), "{}", batch.keys[i]);
            let img = batch.image(i);
            // Each instance's mask is its rectangle's pixels, moved by the
            // same nearest crops, flips and pads: where they differ (a
            // JPEG's blurred colour edge), it is on the mask's edge.
            let planes = t.masks.as_ref().expect("masks were asked for");
            assert_eq!(planes.len(), t.boxes.len() * s * s, "{}", batch.keys[i]);
            for (plane, &label) in planes.chunks(s * s).zip(&t.labels) {
                let colour = COLOURS[label as usize];
                let at = |x: usize, y: usize| plane[y * s + x];
                for (j, p) in img.chunks_exact(3).enumerate() {
                    let (x, y) = (j % s, j / s);
                    let coloured = p.iter().zip(colour).all(|(&a, c)| a.abs_diff(c) < 60);
                    if (at(x, y) == 1) == coloured {
                        continue;
                    }
                    let edge = (x.saturating_sub(1)..(x + 2).min(s))
                        .any(|u| (y.saturating_sub(1)..(y + 2).min(s)).any(|v| at(u, v) != at(x, y)));
                    assert!(
                        edge,
                        "{} label {label}: mask and pixels differ inside at ({x}, {y})",
                        batch.keys[i]
                    );
                }
                masks += 1;
            }
            let delivered: Vec<(i64, [f64; 4])> = t.labels.iter().copied().zip(t.boxes_out()).collect();
            for (label, colour) in COLOURS.iter().enumerate() {
                let (count, seen) = extent(img, s, *colour);
                let got = delivered.iter().find(|(l, _)| *l == label as i64);
                match got {
                    // A sliver of a box may fall between the pixels
                    // nearest sampling takes.
                    Some((_, b)) if count == 0 => {
                        let area = (b[2] - b[0]) * (b[3] - b[1]);
                        assert!(
                            area <= 6.0,
                            "{} label {label}: box {b:?} kept, no pixels",
                            batch.keys[i]
                        );
                    }
                    // Crops, nearest resizes, flips and pads: the box is its
                    // pixels' extent, within a pixel and a JPEG's edge.
                    Some((_, b)) => {
                        let off = b.iter().zip(seen).map(|(a, c)| (a - c).abs()).fold(0.0, f64::max);
                        assert!(
                            off <= 2.0,
                            "{} label {label}: box {b:?}, pixels at {seen:?}",
                            batch.keys[i]
                        );
                        boxes += 1;
                    }
                    // Dropped by Sanitize (under a pixel a side), or never
                    // in the image: at most a sliver of its colour.
                    None => {
                        let sliver = seen[2] - seen[0] <= 2.0 || seen[3] - seen[1] <= 2.0;
                        assert!(
                            count == 0 || sliver,
                            "{} label {label}: pixels at {seen:?}, no box",
                            batch.keys[i]
                        );
                    }
                }
            }
            samples += 1;
        }
    }
    let report = stream.report();
    assert_eq!(samples, n - 1, "{:?}", report.skip_reasons);
    let reasons: Vec<String> = report.skip_reasons.iter().map(|(k, r)| format!("{k}: {r}")).collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with(&format!("s{:04}: field \"targets\"", n - 1))
            && reasons[0].contains("reaches outside the image"),
        "{reasons:?}"
    );
    assert!(boxes >= n && masks >= boxes, "{boxes} boxes, {masks} masks checked");
    println!("detection: {samples} samples, {boxes} boxes and {masks} masks on their pixels, the bad box skipped");

    // A policy cannot move boxes: refused before any work, naming it.
    let policy =
        TransformSpec::from_json(r#"{"ops": [{"op": "AutoAugment"}, {"op": "CenterCrop", "size": 32}]}"#).unwrap();
    let mut config = LoaderConfig::new(vec![w.addr.clone()], dir.path().to_str().unwrap(), 8, policy);
    config.fields = vec![FieldSpec::new("targets", "json", FieldKind::Targets)];
    let Err(e) = Loader::connect(config).await else {
        panic!("a policy with targets was accepted");
    };
    let e = e.to_string();
    assert!(e.contains("ops[0] (AutoAugment)") && e.contains("boxes"), "{e}");
}

/// The Python loader delivers a `targets` field as torchvision's list of
/// dicts of arrays, each image's boxes as its JSON's through the
/// transform (tests/python/targets_check.py).
#[test]
fn the_python_loader_delivers_targets_as_torchvision_dicts() {
    let dir = tempfile::tempdir().unwrap();
    write_shard(dir.path(), 13);
    let w = Worker::start(2);
    let out = run_ok(
        python()
            .arg(python_script("targets_check.py"))
            .arg(&w.addr)
            .arg(dir.path()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(stdout.contains("targets check: 12 images' targets"), "{stdout}");
}

/// Each batch form of the targets (lists, padded, flat) through torch's
/// `DataLoader(loader, batch_size=None)`; the lists into
/// `fasterrcnn_mobilenet_v3_large_320_fpn`'s training forward and
/// backward pass on CPU (tests/python/detection_model.py, the torch venv).
#[test]
fn detection_batches_in_each_form_feed_a_torchvision_detector() {
    let dir = tempfile::tempdir().unwrap();
    write_shard(dir.path(), 13);
    let w = Worker::start(2);
    let out = run_ok(
        torch_python()
            .arg(python_script("detection_model.py"))
            .arg(&w.addr)
            .arg(dir.path()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("detection model: 12 images")
            && stdout.contains("padded and flat forms agree")
            && stdout.contains("lists into the model, padded blocks agree"),
        "{stdout}"
    );
}

/// Instance masks (kind `targets_with_masks`) from a COCO file through
/// `stoker pack` and a worker, against pycocotools (each outline drawn as
/// it draws it) and torchvision (each mask through the same geometry, the
/// same instances kept); in each batch form, and into Mask R-CNN's
/// training forward pass (tests/python/instance_masks.py, the torch venv).
#[test]
fn instance_masks_are_drawn_as_pycocotools_and_move_as_torchvision() {
    let dir = tempfile::tempdir().unwrap();
    let w = Worker::start(2);
    let out = run_ok(
        torch_python()
            .arg(python_script("instance_masks.py"))
            .arg(&w.addr)
            .arg(dir.path())
            .arg(crate::support::stoker_bin()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("instance masks: 600 outlines drawn as pycocotools draws them")
            && stdout.contains("each mask torchvision's on PIL pixel for pixel")
            && stdout.contains("Mask R-CNN's loss_mask"),
        "{stdout}"
    );
}

/// Each delivered sample's targets by key from `stoker stream
/// --fields-out`, failing on a key delivered twice.
fn targets_out(path: &Path) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_str().unwrap().to_owned();
        assert!(
            out.insert(key.clone(), v["targets"].clone()).is_none(),
            "{key} delivered twice"
        );
    }
    out
}

/// Exactly once with detection samples through a worker's SIGKILL: every
/// sample arrives once, and with the boxes an undisturbed CPU worker
/// delivers (a sample's draws are its own, whichever worker plans it).
#[test]
fn detection_samples_arrive_exactly_once_with_their_boxes_through_a_worker_kill() {
    let n = kill_a_worker_mid_epoch(&[]);
    println!("detection through a kill: {n}");
}

/// [`detection_samples_arrive_exactly_once_with_their_boxes_through_a_worker_kill`]
/// with GPU workers (`--gpu-only`): the boxes equal the CPU worker's.
#[test]
fn a_gpu_worker_killed_mid_epoch_loses_no_detection_sample_and_delivers_the_cpu_s_boxes() {
    let Some(gpu) = crate::gpu::gpu_or_skip("a_gpu_worker_killed_mid_epoch_loses_no_detection_sample") else {
        return;
    };
    drop(gpu);
    let n = kill_a_worker_mid_epoch(&["--device", "cuda", "--gpu-only"]);
    println!("gpu detection through a kill: {n}");
}

/// Streams four shards of detection samples through a CPU worker, then
/// through two workers started with `worker_args`, SIGKILLing one
/// mid-epoch; checks every sample arrives once with the first run's
/// boxes. Returns what was checked, in words.
fn kill_a_worker_mid_epoch(worker_args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    for shard in 0..4 {
        write_shard_at(dir.path(), shard, 100);
    }
    let dataset = dir.path().to_str().unwrap();
    // The killed run's workers take 20 ms a sample (the failpoint
    // `stoker-sample-pause`): an item of 100 samples is still in flight
    // when the first batches arrive, however fast the machine.
    let transform = r#"{"ops": [{"op": "RandomIoUCrop"}, {"op": "Resize", "size": [160, 160]},
        {"op": "RandomHorizontalFlip"}, {"op": "RandomRotation", "degrees": 25}, {"op": "CenterCrop", "size": 160},
        {"op": "SanitizeBoundingBoxes"}, {"op": "ConvertBoundingBoxFormat", "format": "XYXY"}]}"#;
    let out = |name: &str| dir.path().join(name);
    let args = |path: &Path| -> Vec<String> {
        let mut a: Vec<String> = ["--batch-size", "4", "--prefetch", "1"].map(str::to_owned).to_vec();
        a.extend(["--transform".into(), transform.to_owned()]);
        a.extend(["--field".into(), "targets=json:targets".into()]);
        a.extend(["--fields-out".into(), path.display().to_string()]);
        a.extend(["--progress-timeout".into(), "30".into()]);
        a
    };
    let reference = Worker::start(1);
    let plain = args(&out("reference.jsonl"));
    let plain: Vec<&str> = plain.iter().map(String::as_str).collect();
    let run = stream(&[&reference], dataset, &plain, &[]);
    assert!(run.success(), "{}", run.stderr());
    let want = targets_out(&out("reference.jsonl"));
    assert_eq!(want.len(), 399, "one sample has a box outside its image");
    drop(reference);

    let mut started = vec!["--chunk-bytes", "16K"];
    started.extend_from_slice(worker_args);
    let (w1, w2) = (
        Worker::start_with(1, &started, &crate::support::SLOW_SAMPLES),
        Worker::start_with(1, &started, &crate::support::SLOW_SAMPLES),
    );
    let killed = args(&out("killed.jsonl"));
    let killed: Vec<&str> = killed.iter().map(String::as_str).collect();
    let mut child = StreamChild::spawn(&[&w1, &w2], dataset, &killed);
    child.wait_for_samples(8, std::time::Duration::from_secs(60));
    signal(w1.child.0.id(), "-KILL");
    let run = child.finish();
    assert!(run.success(), "{}", run.stderr());
    assert!(
        run.num("retries") >= 1,
        "the killed worker's items were never reassigned"
    );
    let got = targets_out(&out("killed.jsonl"));
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (key, t) in &want {
        assert_eq!(&got[key], t, "{key}");
    }
    let boxes: usize = want.values().map(|t| t["boxes"].as_array().unwrap().len()).sum();
    format!(
        "{} samples once each, {boxes} boxes as an undisturbed cpu worker's",
        got.len()
    )
}
