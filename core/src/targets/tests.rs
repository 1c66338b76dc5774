//! Targets through each step, against coordinates worked out by hand
//! from torchvision's kernels. tests/python/targets_oracle.py checks them
//! against torchvision itself.

use super::*;
use crate::params::{Interpolation, PaddingMode, Rect, Step};
use crate::transform::{RandomRotation, TransformSpec, resolve_with_targets};
use crate::{SampleRng, resolve_steps};

fn targets(canvas: (u32, u32), boxes: &[[f64; 4]]) -> Targets {
    Targets::new(canvas, BoxFormat::Xyxy, boxes, vec![1; boxes.len()]).unwrap()
}

fn follow(t: &mut Targets, step: Step) {
    let mut out = Vec::new();
    TargetStep::steps_of(&step, t.canvas.0, t.canvas.1, &mut out).unwrap();
    t.follow(&out);
}

fn close(a: [f64; 4], b: [f64; 4]) -> bool {
    a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

#[test]
fn formats_convert_both_ways() {
    let xyxy = [10.0, 20.0, 50.0, 80.0];
    assert_eq!(BoxFormat::Xywh.from_xyxy(xyxy), [10.0, 20.0, 40.0, 60.0]);
    assert_eq!(BoxFormat::Cxcywh.from_xyxy(xyxy), [30.0, 50.0, 40.0, 60.0]);
    for f in BoxFormat::ALL {
        assert_eq!(f.to_xyxy(f.from_xyxy(xyxy)), xyxy, "{f}");
        assert_eq!(BoxFormat::parse(&f.name().to_lowercase()), Ok(f));
    }
    assert!(BoxFormat::parse("xyxyxyxy").unwrap_err().to_string().contains("XYWH"));
}

#[test]
fn bad_boxes_are_refused_naming_the_box() {
    let bad = |b: [f64; 4], why: &str| {
        let e = Targets::new((100, 50), BoxFormat::Xyxy, &[[0.0, 0.0, 1.0, 1.0], b], vec![0, 1]).unwrap_err();
        assert!(
            e.to_string().starts_with("box 1 ") && e.to_string().contains(why),
            "{e}"
        );
    };
    bad([f64::NAN, 0.0, 1.0, 1.0], "finite");
    bad([5.0, 0.0, 4.0, 1.0], "negative");
    bad([0.0, 0.0, 101.0, 1.0], "outside");
    bad([-1.0, 0.0, 10.0, 1.0], "outside");
    let e = Targets::new((10, 10), BoxFormat::Xyxy, &[[0.0; 4]], vec![]).unwrap_err();
    assert_eq!(e.to_string(), "labels has 0 values for 1 boxes");
    // XYWH is read as XYWH: a width that reaches past the image.
    assert!(Targets::new((10, 10), BoxFormat::Xywh, &[[5.0, 5.0, 6.0, 1.0]], vec![0]).is_err());
    let t = targets((10, 10), &[[0.0; 4]]);
    assert!(matches!(
        t.clone().with_keypoints(2, vec![[0.0; 3]; 2], vec![1, 1]),
        Err(TargetError::FlipIndex(_))
    ));
    assert!(matches!(
        t.with_keypoints(2, vec![[0.0; 3]; 3], vec![]),
        Err(TargetError::Length { .. })
    ));
}

#[test]
fn flips_mirror_boxes_about_the_width_and_keypoints_about_width_less_one() {
    let mut t = targets((100, 50), &[[10.0, 5.0, 30.0, 20.0]])
        .with_keypoints(2, vec![[10.0, 5.0, 2.0], [30.0, 20.0, 1.0]], vec![1, 0])
        .unwrap();
    follow(&mut t, Step::FlipHorizontal);
    assert_eq!(t.boxes, [[70.0, 5.0, 90.0, 20.0]]);
    // Mirrored (99 - x), then left and right swap places.
    assert_eq!(t.keypoints, [[69.0, 20.0, 1.0], [89.0, 5.0, 2.0]]);
    follow(&mut t, Step::FlipVertical);
    assert_eq!(t.boxes, [[70.0, 30.0, 90.0, 45.0]]);
    assert_eq!(t.keypoints, [[69.0, 29.0, 1.0], [89.0, 44.0, 2.0]]);
}

#[test]
fn a_resized_crop_translates_clamps_then_scales() {
    let mut t = targets((100, 100), &[[10.0, 10.0, 60.0, 40.0], [0.0, 0.0, 5.0, 5.0]])
        .with_keypoints(1, vec![[20.0, 20.0, 2.0], [2.0, 2.0, 2.0]], vec![])
        .unwrap();
    follow(
        &mut t,
        Step::CropResize {
            crop: Rect::new(20, 0, 50, 50),
            out_w: 100,
            out_h: 25,
            filter: Interpolation::Bilinear,
        },
    );
    assert_eq!(t.canvas, (100, 25));
    // x: 10-20 → -10 → clamp 0, 60-20 = 40; scaled by 2; y by 0.5.
    assert_eq!(t.boxes[0], [0.0, 5.0, 80.0, 20.0]);
    // Wholly outside: a zero-width box, left for Sanitize to drop.
    assert_eq!(t.boxes[1], [0.0, 0.0, 0.0, 2.5]);
    // Keypoints are not clamped.
    assert_eq!(t.keypoints[1], [-36.0, 1.0, 2.0]);
    follow(&mut t, Step::FlipHorizontal);
    let mut s = Vec::new();
    TargetStep::steps_of(
        &Step::CropResize {
            crop: Rect::whole(100, 25),
            out_w: 100,
            out_h: 25,
            filter: Interpolation::Bilinear,
        },
        100,
        25,
        &mut s,
    )
    .unwrap();
    assert!(s.is_empty(), "{s:?}");
    t.follow(&[TargetStep::Sanitize {
        min_size: 1.0,
        min_area: 1.0,
    }]);
    assert_eq!((t.boxes.len(), t.labels.len(), t.keypoints.len()), (1, 1, 1));
}

#[test]
fn a_pad_translates_and_only_constant_padding_moves_targets() {
    let mut t = targets((10, 10), &[[1.0, 2.0, 3.0, 4.0]]);
    follow(
        &mut t,
        Step::Pad {
            ltrb: [5, 6, 7, 8],
            mode: PaddingMode::Constant,
            fill: [0; 3],
        },
    );
    assert_eq!((t.canvas, t.boxes[0]), ((22, 24), [6.0, 8.0, 8.0, 10.0]));
    let reflect = Step::Pad {
        ltrb: [1; 4],
        mode: PaddingMode::Reflect,
        fill: [0; 3],
    };
    let e = TargetStep::steps_of(&reflect, 10, 10, &mut Vec::new()).unwrap_err();
    assert!(e.0.contains("Reflect") && e.0.contains("constant"), "{e}");
}

#[test]
fn a_quarter_turn_maps_corners_and_expand_places_boxes_by_the_rotated_corner() {
    // 90 degrees counter-clockwise about the centre of a 100 x 50 image.
    let rotation = |expand: bool| {
        let mut op = RandomRotation::new(0.0);
        op.degrees = crate::transform::args::Range::Pair([90.0, 90.0]);
        op.expand = expand;
        // Resolved as it stands (a whole spec ends at a fixed size).
        TransformSpec {
            size: crate::ImageSize::Square(50),
            ops: vec![op.into()],
        }
    };
    let spec90 = rotation(false);
    let rng = SampleRng::from_seed(1);
    let (steps, target_steps) = resolve_with_targets(&spec90, &rng, 100, 50, None).unwrap();
    assert_eq!(steps, resolve_steps(&spec90, &rng, 100, 50).unwrap());
    let mut t = targets((100, 50), &[[40.0, 20.0, 60.0, 30.0]]);
    t.follow(&target_steps);
    // Centre (50, 25): (x, y) → (50 + (y - 25), 25 - (x - 50)).
    assert!(close(t.boxes[0], [45.0, 15.0, 55.0, 35.0]), "{:?}", t.boxes);
    let (steps, target_steps) = resolve_with_targets(&rotation(true), &rng, 100, 50, None).unwrap();
    assert!(
        matches!(
            steps[0],
            Step::Affine {
                out_w: 50,
                out_h: 100,
                ..
            }
        ),
        "{steps:?}"
    );
    let mut t = targets((100, 50), &[[40.0, 20.0, 60.0, 30.0]]);
    t.follow(&target_steps);
    // The rotated image's corners span x 25..75, y -25..75: less (25, -25).
    assert_eq!(t.canvas, (50, 100));
    assert!(close(t.boxes[0], [20.0, 40.0, 30.0, 60.0]), "{:?}", t.boxes);
}

#[test]
fn colour_steps_leave_targets_alone_and_formats_convert_on_delivery() {
    let mut out = Vec::new();
    TargetStep::steps_of(&Step::Equalize, 10, 10, &mut out).unwrap();
    assert!(out.is_empty());
    let mut t = targets((10, 10), &[[1.0, 2.0, 5.0, 8.0]]);
    t.follow(&[TargetStep::Format(BoxFormat::Cxcywh)]);
    assert_eq!(t.boxes_out(), [[3.0, 5.0, 4.0, 6.0]]);
}

#[test]
fn policies_and_non_constant_padding_are_refused_before_any_work_naming_the_op() {
    let spec = |ops: &str| {
        TransformSpec::from_json(&format!(r#"{{"ops": [{ops}, {{"op": "CenterCrop", "size": 32}}]}}"#)).unwrap()
    };
    let e = spec(
        r#"{"op": "RandomHorizontalFlip"}, {"op": "RandomApply", "p": 0.5, "transforms": [{"op": "AutoAugment"}]}"#,
    )
    .check_targets()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("transform ops[1][0] (AutoAugment) with boxes") && e.contains("policy"),
        "{e}"
    );
    let e = spec(r#"{"op": "Pad", "padding": 2, "padding_mode": "edge"}"#)
        .check_targets()
        .unwrap_err();
    assert!(
        e.to_string().contains("ops[0] (Pad)") && e.to_string().contains("Edge"),
        "{e}"
    );
    // RandomCrop pads only with padding or pad_if_needed.
    assert!(
        spec(r#"{"op": "RandomCrop", "size": 8, "padding_mode": "reflect"}"#)
            .check_targets()
            .is_ok()
    );
    assert!(
        spec(r#"{"op": "RandomCrop", "size": 8, "padding": 1, "padding_mode": "reflect"}"#)
            .check_targets()
            .is_err()
    );
    let s = spec(r#"{"op": "TrivialAugmentWide"}"#);
    let r = resolve_with_targets(&s, &SampleRng::from_seed(3), 40, 40, None).unwrap_err();
    assert!(r.to_string().contains("TrivialAugmentWide"), "{r}");
    // Without targets the same spec resolves.
    assert!(resolve_steps(&s, &SampleRng::from_seed(3), 40, 40).is_ok());
}

#[test]
fn the_box_ops_clamp_sanitize_and_convert_after_the_output_conversion() {
    let spec = TransformSpec::from_json(
        r#"{"ops": [{"op": "RandomAffine", "degrees": [40, 40]}, {"op": "CenterCrop", "size": 32},
            {"op": "ToDtype", "dtype": "float32", "scale": true}, {"op": "ClampBoundingBoxes"},
            {"op": "SanitizeBoundingBoxes", "min_size": 2}, {"op": "ConvertBoundingBoxFormat", "format": "xywh"}]}"#,
    )
    .unwrap();
    let (_, steps) = resolve_with_targets(&spec, &SampleRng::from_seed(5), 32, 32, None).unwrap();
    let tail: Vec<_> = steps.iter().rev().take(3).rev().cloned().collect();
    assert_eq!(
        tail,
        [
            TargetStep::Clamp,
            TargetStep::Sanitize {
                min_size: 2.0,
                min_area: 1.0
            },
            TargetStep::Format(BoxFormat::Xywh)
        ]
    );
    let mut t = targets((32, 32), &[[0.0, 0.0, 1.0, 1.0], [4.0, 4.0, 20.0, 20.0]]);
    t.follow(&steps);
    // The corner box rotates out of the image: clamped to nothing, dropped.
    assert_eq!((t.boxes.len(), t.labels.len(), t.format), (1, 1, BoxFormat::Xywh));
    for bad in [
        r#"{"op": "SanitizeBoundingBoxes", "min_size": 0.5}"#,
        r#"{"op": "SanitizeBoundingBoxes", "labels_getter": "mine"}"#,
        r#"{"op": "ClampBoundingBoxes", "clamping_mode": "loose"}"#,
        r#"{"op": "ConvertBoundingBoxFormat", "format": "XYWHR"}"#,
    ] {
        let e = TransformSpec::from_json(&format!(r#"{{"ops": [{bad}, {{"op": "CenterCrop", "size": 8}}]}}"#));
        assert!(e.is_err(), "{bad}");
    }
}

#[test]
fn targets_json_is_read_then_placed_on_its_image() {
    let doc = br#"{"boxes": [[10, 20, 30, 40], [0, 0, 5, 5]], "format": "XYWH", "labels": [3, 7],
        "iscrowd": [0, 1], "keypoints": [[[1, 2, 2]], [[3, 4, 1]]], "source": "ignored"}"#;
    let mut t = Targets::from_json(doc, false).unwrap();
    assert_eq!(t.boxes, [[10.0, 20.0, 40.0, 60.0], [0.0, 0.0, 5.0, 5.0]]);
    assert_eq!(
        (t.labels.clone(), t.iscrowd.clone(), t.per_instance),
        (vec![3, 7], vec![false, true], 1)
    );
    let e = t.clone().place((39, 100)).unwrap_err().to_string();
    assert_eq!(e, "box 0 [10.0, 20.0, 30.0, 40.0]: reaches outside the image");
    t.place((40, 60)).unwrap();
    assert_eq!(t.boxes_out()[0], [10.0, 20.0, 30.0, 40.0]);
    let bad = |doc: &str, want: &str| {
        let e = Targets::from_json(doc.as_bytes(), false).unwrap_err();
        assert!(e.contains(want), "{doc}: {e}");
    };
    bad(r#"{"labels": [1]}"#, "missing field `boxes`");
    bad(r#"{"boxes": [[0, 0, 1]]}"#, "not targets JSON");
    bad(
        r#"{"boxes": [[0, 0, 1, 1]], "labels": [1, 2]}"#,
        "labels has 2 values for 1 boxes",
    );
    bad(
        r#"{"boxes": [[0, 0, -1, 1]], "format": "XYWH"}"#,
        "box 0 [0.0, 0.0, -1.0, 1.0]: negative width",
    );
    bad(r#"{"boxes": [[0, 0, 1, 1]], "format": "polar"}"#, "unknown box format");
    bad(
        r#"{"boxes": [[0, 0, 1, 1], [0, 0, 1, 1]], "keypoints": [[[0, 0, 2]], []]}"#,
        "instance 1 has 0 points",
    );
    // No boxes is a valid image with nothing in it.
    assert!(Targets::from_json(br#"{"boxes": []}"#, false).unwrap().boxes.is_empty());
}

#[test]
fn a_zoom_out_pads_and_its_boxes_move_with_the_image() {
    let spec = TransformSpec::from_json(
        r#"{"ops": [{"op": "RandomZoomOut", "side_range": [2.0, 2.0], "p": 1.0}, {"op": "Resize", "size": [32, 32]}]}"#,
    )
    .unwrap();
    let (steps, target_steps) = resolve_with_targets(&spec, &SampleRng::from_seed(9), 100, 50, None).unwrap();
    let Step::Pad {
        ltrb: [l, top, r, b], ..
    } = steps[0]
    else {
        panic!("{steps:?}")
    };
    assert_eq!((l + r, top + b), (100, 50), "{steps:?}");
    let mut t = targets((100, 50), &[[10.0, 10.0, 20.0, 30.0]]);
    t.follow(&target_steps[..1]);
    assert_eq!(t.canvas, (200, 100));
    let (dx, dy) = (f64::from(l), f64::from(top));
    assert_eq!(t.boxes[0], [10.0 + dx, 10.0 + dy, 20.0 + dx, 30.0 + dy]);
}

fn spec(json: &str) -> TransformSpec {
    TransformSpec::from_json(json).unwrap()
}

#[test]
fn an_iou_crop_holds_a_box_centre_and_zeroes_the_boxes_it_leaves_out() {
    let s = spec(r#"{"ops": [{"op": "RandomIoUCrop", "sampler_options": [0.3]}, {"op": "Resize", "size": [32, 32]}]}"#);
    let t = targets((200, 100), &[[10.0, 10.0, 60.0, 60.0], [150.0, 40.0, 190.0, 90.0]]);
    let mut crops = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let rng = SampleRng::from_seed(seed);
        let (steps, target_steps) = resolve_with_targets(&s, &rng, 200, 100, Some(&t)).unwrap();
        // Deterministic from the sample's generator.
        assert_eq!(resolve_with_targets(&s, &rng, 200, 100, Some(&t)).unwrap().0, steps);
        let Step::CropResize { crop, .. } = steps[0] else {
            panic!("{steps:?}")
        };
        let (l, top, w, h) = (
            crop.left as f64,
            crop.top as f64,
            f64::from(crop.width),
            f64::from(crop.height),
        );
        assert!(w >= 60.0 && h >= 30.0 && (0.5..=2.0).contains(&(w / h)), "{crop:?}");
        assert!(l >= 0.0 && top >= 0.0 && l + w <= 200.0 && top + h <= 100.0, "{crop:?}");
        let inside: Vec<bool> = t
            .boxes
            .iter()
            .map(|b| {
                let (cx, cy) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
                l < cx && cx < l + w && top < cy && cy < top + h
            })
            .collect();
        assert!(inside.iter().any(|&i| i), "{crop:?}");
        let mut moved = t.clone();
        moved.follow(&target_steps[..2]);
        for (i, b) in moved.boxes.iter().enumerate() {
            assert_eq!(*b == [0.0; 4], !inside[i], "box {i} {b:?} after {crop:?}");
        }
        crops.insert((crop.left, crop.top, crop.width, crop.height));
    }
    assert!(crops.len() > 100, "{}", crops.len());
    // No boxes: no crop holds a centre, so only a threshold of 1.0 ends it.
    let empty = targets((200, 100), &[]);
    let with_one = spec(
        r#"{"ops": [{"op": "RandomIoUCrop", "sampler_options": [0.0, 1.0]}, {"op": "Resize", "size": [32, 32]}]}"#,
    );
    let (steps, _) = resolve_with_targets(&with_one, &SampleRng::from_seed(1), 200, 100, Some(&empty)).unwrap();
    assert!(
        matches!(steps[..], [Step::CropResize { crop, .. }] if crop == Rect::whole(200, 100)),
        "{steps:?}"
    );
    // Options without 1.0 and no boxes: torchvision loops forever; here the
    // draws end and the image stays as it is.
    let (steps, _) = resolve_with_targets(&s, &SampleRng::from_seed(1), 200, 100, Some(&empty)).unwrap();
    assert!(
        matches!(steps[..], [Step::CropResize { crop, .. }] if crop == Rect::whole(200, 100)),
        "{steps:?}"
    );
}

#[test]
fn an_iou_crop_is_refused_without_one_targets_field() {
    use crate::{FieldKind, FieldSpec, validate_targets};
    let s = spec(r#"{"ops": [{"op": "RandomIoUCrop"}, {"op": "Resize", "size": [32, 32]}]}"#);
    let e = validate_targets(&[], &s).unwrap_err().to_string();
    assert!(
        e.contains("ops[0] (RandomIoUCrop)") && e.contains("0 were asked for"),
        "{e}"
    );
    let field = |name: &str| FieldSpec::new(name, "json", FieldKind::Targets);
    assert!(validate_targets(&[field("a")], &s).is_ok());
    let e = validate_targets(&[field("a"), field("b")], &s).unwrap_err().to_string();
    assert!(e.contains("2 were asked for"), "{e}");
}

#[test]
fn a_fixed_size_crop_crops_what_is_larger_and_pads_what_is_smaller() {
    let s = spec(r#"{"ops": [{"op": "FixedSizeCrop", "size": 50, "fill": 7}]}"#);
    // Wider and taller: one draw places the crop on both sides.
    let t = targets((100, 80), &[[0.0, 0.0, 5.0, 5.0], [50.0, 30.0, 70.0, 50.0]]);
    for seed in 0..50 {
        let (steps, target_steps) = resolve_with_targets(&s, &SampleRng::from_seed(seed), 100, 80, Some(&t)).unwrap();
        let Step::CropResize { crop, out_w, out_h, .. } = steps[0] else {
            panic!("{steps:?}")
        };
        assert_eq!((crop.width, crop.height, out_w, out_h), (50, 50, 50, 50));
        // One r for both offsets: left = int(50 r), top = int(30 r).
        assert!((crop.top as f64 - 0.6 * crop.left as f64).abs() <= 1.0, "{crop:?}");
        let mut moved = t.clone();
        moved.follow(&target_steps);
        assert_eq!(moved.canvas, (50, 50));
        // The corner box survives only while the crop starts at its corner.
        let corner_kept = crop.left < 5 && crop.top < 5;
        assert_eq!(
            moved.boxes.len(),
            1 + usize::from(corner_kept),
            "{crop:?} {:?}",
            moved.boxes
        );
        assert_eq!(moved.labels.len(), moved.boxes.len());
    }
    // Smaller: padded on the right and bottom; boxes stay.
    let t = targets((30, 20), &[[1.0, 2.0, 3.0, 4.0]]);
    let (steps, target_steps) = resolve_with_targets(&s, &SampleRng::from_seed(0), 30, 20, Some(&t)).unwrap();
    assert_eq!(
        steps,
        vec![Step::Pad {
            ltrb: [0, 0, 20, 30],
            mode: PaddingMode::Constant,
            fill: [7; 3]
        }]
    );
    let mut moved = t.clone();
    moved.follow(&target_steps);
    assert_eq!((moved.canvas, moved.boxes[0]), ((50, 50), [1.0, 2.0, 3.0, 4.0]));
}

#[test]
fn scale_jitter_and_shortest_size_resize_as_torchvision_computes_the_size() {
    let size = |json: &str, w: u32, h: u32, seed: u64| {
        let steps = resolve_steps(&spec(json), &SampleRng::from_seed(seed), w, h).unwrap();
        match steps.first() {
            Some(Step::CropResize { crop, out_w, out_h, .. }) if *crop == Rect::whole(w, h) => (*out_w, *out_h),
            _ => (w, h),
        }
    };
    // scale_range [1, 1]: min(1024 / 640, 1024 / 480) = 1.6 exactly.
    let jitter = r#"{"ops": [{"op": "ScaleJitter", "target_size": [1024, 1024], "scale_range": [1.0, 1.0]}, {"op": "FixedSizeCrop", "size": 1024}]}"#;
    assert_eq!(size(jitter, 640, 480, 0), (1024, 768));
    let jitter = r#"{"ops": [{"op": "ScaleJitter", "target_size": [100, 100]}, {"op": "FixedSizeCrop", "size": 64}]}"#;
    for seed in 0..50 {
        let (w, h) = size(jitter, 400, 300, seed);
        // r = min(100 / 300, 100 / 400) * s = s / 4, s in [0.1, 2].
        assert!((10..=200).contains(&w), "{w}x{h}");
        assert!((f64::from(h) - 0.75 * f64::from(w)).abs() <= 1.0, "{w}x{h}");
    }
    // 480 / 480 = 1: 640 stays; 800 / 480 and max 1000 / 640 = 1.5625 wins.
    let shortest = |sizes: &str| {
        format!(
            r#"{{"ops": [{{"op": "RandomShortestSize", "min_size": {sizes}, "max_size": 1000}}, {{"op": "FixedSizeCrop", "size": 64}}]}}"#
        )
    };
    assert_eq!(size(&shortest("480"), 640, 480, 0), (640, 480));
    assert_eq!(size(&shortest("[800]"), 640, 480, 0), (1000, 750));
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..60 {
        seen.insert(size(&shortest("[300, 400, 500]"), 640, 480, seed).1);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![300, 400, 500]);
}

#[test]
fn the_dataset_json_reads_back_as_the_same_targets() {
    let mut t = Targets::new(
        (100, 80),
        BoxFormat::Xywh,
        &[[10.0, 20.0, 30.0, 40.0], [0.0, 0.0, 5.0, 5.0]],
        vec![3, 7],
    )
    .unwrap()
    .with_keypoints(
        2,
        vec![[12.0, 22.0, 2.0], [30.0, 40.0, 1.0], [1.0, 2.0, 2.0], [3.0, 4.0, 0.0]],
        vec![1, 0],
    )
    .unwrap();
    t.iscrowd = vec![false, true];
    t.area = vec![1200.0, 25.0];
    let json = serde_json::Value::Object(t.to_dataset_json()).to_string();
    let mut back = Targets::from_json(json.as_bytes(), false).unwrap();
    back.place((100, 80)).unwrap();
    assert_eq!(back, t, "{json}");
    // Without the optional lists, none is written.
    let plain = Targets::new((10, 10), BoxFormat::Xyxy, &[], vec![]).unwrap();
    let doc = plain.to_dataset_json();
    assert_eq!(doc.keys().collect::<Vec<_>>(), ["boxes", "format", "labels"]);
    // An image without instances in a keypoint dataset: nothing to pair.
    let none = plain.with_keypoints(2, vec![], vec![1, 0]).unwrap();
    let json = serde_json::Value::Object(none.to_dataset_json()).to_string();
    assert!(
        Targets::from_json(json.as_bytes(), false).unwrap().boxes.is_empty(),
        "{json}"
    );
}
