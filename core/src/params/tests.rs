use super::*;
use crate::rng::SampleRng;
use crate::transform::{EXAMPLES, example_spec};
use crate::transform::{TransformSpec, footprint, resolve_steps};

/// The generator of sample `position` of shard "s", seed 1, epoch 2.
fn rng(position: u64) -> SampleRng {
    SampleRng::for_sample(1, 2, "s", position)
}

fn spec(json: &str) -> TransformSpec {
    TransformSpec::from_json(json).unwrap()
}

#[test]
fn a_box_is_inside_only_when_every_edge_is() {
    assert!(Rect::whole(10, 8).inside(10, 8));
    assert!(Rect::new(2, 3, 8, 5).inside(10, 8));
    assert!(!Rect::new(2, 3, 9, 5).inside(10, 8), "past the right edge");
    assert!(!Rect::new(0, 4, 10, 5).inside(10, 8), "past the bottom edge");
    assert!(!Rect::new(-1, 0, 4, 4).inside(10, 8), "left of the image");
    assert!(!Rect::new(0, -1, 4, 4).inside(10, 8), "above the image");
}

#[test]
fn python_rounding() {
    assert_eq!(round_half_even(0.5), 0);
    assert_eq!(round_half_even(1.5), 2);
    assert_eq!(round_half_even(2.5), 2);
    assert_eq!(round_half_even(-0.5), 0);
    assert_eq!(round_half_even(2.6), 3);
}

#[test]
fn train_crop_stays_inside_and_is_deterministic() {
    let spec = TransformSpec::train(224);
    for i in 0..2000 {
        let a = resolve_steps(&spec, &rng(i), 500, 375).unwrap();
        assert_eq!(
            a,
            resolve_steps(&spec, &SampleRng::for_sample(1, 2, "s", i), 500, 375).unwrap()
        );
        match a[0] {
            Step::CropResize {
                crop,
                out_w,
                out_h,
                filter,
            } => {
                assert!(crop.inside(500, 375), "{crop:?}");
                assert_eq!((out_w, out_h, filter), (224, 224, Interpolation::Bilinear));
            }
            ref other => panic!("unexpected first step {other:?}"),
        }
    }
}

#[test]
fn flips_about_half_the_time() {
    let spec = TransformSpec::train(32);
    let flips = (0..4000)
        .filter(|&i| {
            resolve_steps(&spec, &rng(i), 64, 64)
                .unwrap()
                .contains(&Step::FlipHorizontal)
        })
        .count();
    assert!((1800..2200).contains(&flips), "{flips} flips of 4000");
}

#[test]
fn eval_matches_torchvision_geometry() {
    // 500x375 -> shorter side 256 -> 341x256 -> centre 224.
    let steps = resolve_steps(&TransformSpec::eval(224), &rng(0), 500, 375).unwrap();
    let bilinear = Interpolation::Bilinear;
    assert_eq!(
        steps,
        vec![
            Step::CropResize {
                crop: Rect::new(0, 0, 500, 375),
                out_w: 341,
                out_h: 256,
                filter: bilinear
            },
            Step::CropResize {
                crop: Rect::new(58, 16, 224, 224),
                out_w: 224,
                out_h: 224,
                filter: bilinear
            },
        ]
    );
}

#[test]
fn center_crop_pads_as_torchvision() {
    // A 3-row image cropped to 6: padded (6 - 3) // 2 = 1 row on top.
    let steps = resolve_steps(&spec(r#"{"ops": [{"op": "CenterCrop", "size": 6}]}"#), &rng(0), 6, 3).unwrap();
    assert!(
        matches!(
            steps[0],
            Step::CropResize {
                crop: Rect { left: 0, top: -1, .. },
                ..
            }
        ),
        "{steps:?}"
    );
}

#[test]
fn footprint_refuses_a_resize_bomb_from_its_size_alone() {
    let eval = TransformSpec::eval(224);
    // 65000x1: the shorter side to 256 makes the long side 16.6 M.
    for (w, h) in [(65000, 1), (1, 65000)] {
        let err = footprint(&eval, w, h, 100_000_000).unwrap_err();
        assert_eq!((err.index, err.op), (0, "Resize"));
        assert_eq!(err.pixels, 65000 * 256 * 256);
        assert!(err.to_string().contains("16640000"), "{err}");
    }
    // An expanding rotation of a large image is bounded by its diagonal.
    let rot =
        spec(r#"{"ops": [{"op": "RandomRotation", "degrees": 30, "expand": true}, {"op": "CenterCrop", "size": 64}]}"#);
    let err = footprint(&rot, 20000, 20000, 500_000_000).unwrap_err();
    assert_eq!((err.index, err.op), (0, "RandomRotation"));
    assert!(footprint(&rot, 2000, 2000, 500_000_000).is_ok());
}

#[test]
fn footprint_counts_a_strip_resize_weights_per_line() {
    // 11000x1 to a shorter side of 19: 209000 output columns, each with
    // its own weights (the fuzzer's image_transform found the resizer
    // holding 32 bytes a column when weights were counted per
    // square-root side).
    let eval = TransformSpec::eval(17);
    let peak = footprint(&eval, 11000, 1, 1 << 22).unwrap();
    let (out_w, out_h) = (11000 * 19, 19);
    let pixels = out_w * out_h;
    assert!(
        peak >= 2 * 3 * pixels + RESIZE_BYTES_PER_LINE * (out_w + out_h),
        "{peak}"
    );
}

#[test]
fn footprint_of_absurd_header_dimensions_is_refused_not_overflowed() {
    // A PNG header can declare 2^32-1 on each side (found by
    // image_transform): the walk saturates instead of overflowing, and
    // the peak is at least the decoded image (the decoder refuses it by
    // the pixel limit first).
    match footprint(&TransformSpec::eval(17), u32::MAX, u32::MAX, 1 << 22) {
        Ok(peak) => assert_eq!(peak, u64::MAX),
        Err(err) => assert_eq!(err.op, "Resize", "{err}"),
    }
    // And no op's bounds or scratch overflows on them (a padded
    // RandomCrop's did, found by image_transform too).
    for (op, ops) in crate::transform::EXAMPLES {
        let spec = TransformSpec::from_json(&crate::transform::example_spec(ops, 32)).unwrap();
        for (w, h) in [(u32::MAX, u32::MAX), (u32::MAX, 1), (1, u32::MAX)] {
            if let Ok(peak) = footprint(&spec, w, h, 1 << 22) {
                assert!(peak >= u64::from(w) * u64::from(h), "{op}: {peak}");
            }
        }
    }
}

#[test]
fn random_crop_with_padding_reaches_past_the_edge() {
    let spec = spec(r#"{"ops": [{"op": "RandomCrop", "size": 32, "padding": 4}]}"#);
    let mut lefts = std::collections::BTreeSet::new();
    for i in 0..500 {
        // No step: the box is the image itself.
        let (left, top) = match resolve_steps(&spec, &rng(i), 32, 32).unwrap().first() {
            Some(Step::CropResize { crop, .. }) => (crop.left, crop.top),
            _ => (0, 0),
        };
        assert!((-4..=4).contains(&left) && (-4..=4).contains(&top));
        lefts.insert(left);
    }
    assert_eq!(lefts.len(), 9);
    // Smaller than the crop, without pad_if_needed: refused, as torchvision.
    let err = resolve_steps(&spec, &rng(0), 20, 20).unwrap_err();
    assert!(
        err.to_string().contains("RandomCrop") && err.to_string().contains("pad_if_needed"),
        "{err}"
    );
}

/// Every example of the registry: deterministic, the output size the
/// spec says, and within its footprint at every step, over sizes from
/// one pixel to extreme aspect ratios.
#[test]
fn every_example_resolves_within_its_footprint() {
    for (op, ops) in EXAMPLES {
        let spec = spec(&example_spec(ops, 48));
        for (w, h) in [(1, 1), (2, 3), (7, 300), (300, 7), (97, 61), (500, 375)] {
            let peak = footprint(&spec, w, h, 100_000_000).unwrap();
            for i in 0..40 {
                let Ok(steps) = resolve_steps(&spec, &rng(i), w, h) else {
                    continue;
                };
                assert_eq!(Ok(&steps), resolve_steps(&spec, &rng(i), w, h).as_ref(), "{op}");
                let (mut cw, mut ch) = (w, h);
                for s in &steps {
                    let (nw, nh) = s.output_size(cw, ch);
                    let bytes = 3 * (u64::from(cw) * u64::from(ch) + u64::from(nw) * u64::from(nh));
                    assert!(bytes <= peak, "{op} {w}x{h}: {s:?} holds {bytes} > {peak}");
                    (cw, ch) = (nw, nh);
                }
                assert_eq!((cw, ch), (48, 48), "{op} {w}x{h}: {steps:?}");
            }
        }
    }
}
