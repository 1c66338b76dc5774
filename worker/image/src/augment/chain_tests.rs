use stoker_core::{SampleRng, Step, TransformSpec, resolve_steps};

use super::super::{Augmenter, ramp};
use super::*;
use crate::decode::RgbImage;

/// The ops a random chain draws from: every nearest geometric op, with
/// fills, `expand`, each pad mode, crops past the image, and one
/// bilinear crop-resize that reads through the chain.
const OPS: &[&str] = &[
    r#"{"op": "RandomHorizontalFlip"}"#,
    r#"{"op": "RandomVerticalFlip"}"#,
    r#"{"op": "RandomHorizontalFlip", "p": 1.0}"#,
    r#"{"op": "RandomRotation", "degrees": 180, "expand": true, "fill": [250, 10, 90]}"#,
    r#"{"op": "RandomRotation", "degrees": 30, "fill": [1, 2, 3]}"#,
    r#"{"op": "RandomRotation", "degrees": [90, 90], "expand": true}"#,
    r#"{"op": "RandomAffine", "degrees": 40, "translate": [0.2, 0.3], "scale": [0.6, 1.4], "shear": 20, "fill": [7, 77, 177]}"#,
    r#"{"op": "RandomAffine", "degrees": 0, "scale": [0.4, 1.7], "fill": 9}"#,
    r#"{"op": "RandomAffine", "degrees": 0, "translate": [0.4, 0.4], "fill": [200, 0, 0]}"#,
    r#"{"op": "Pad", "padding": [3, 5, 2, 1], "fill": [5, 6, 7]}"#,
    r#"{"op": "Pad", "padding": [4, 2], "padding_mode": "edge"}"#,
    r#"{"op": "Pad", "padding": 3, "padding_mode": "reflect"}"#,
    r#"{"op": "Pad", "padding": [1, 6], "padding_mode": "symmetric"}"#,
    r#"{"op": "RandomCrop", "size": [19, 27], "padding": 4, "pad_if_needed": true, "fill": [9, 9, 9]}"#,
    r#"{"op": "RandomCrop", "size": 30, "pad_if_needed": true, "padding_mode": "reflect"}"#,
    r#"{"op": "Resize", "size": [21, 33], "interpolation": "nearest"}"#,
    r#"{"op": "Resize", "size": 50, "interpolation": "nearest-exact"}"#,
    r#"{"op": "RandomResizedCrop", "size": [26, 18], "interpolation": "nearest"}"#,
    r#"{"op": "CenterCrop", "size": [41, 29]}"#,
    r#"{"op": "RandomResizedCrop", "size": 24}"#,
];

/// A small deterministic generator for the test's choices.
struct Pick(u64);

impl Pick {
    fn next(&mut self, n: usize) -> usize {
        self.0 = stoker_core::rng::mix64(self.0.wrapping_add(0x9e37_79b9_7f4a_7c15));
        (self.0 % n as u64) as usize
    }
}

/// The steps of `ops` then a square `CenterCrop` (a spec ends at a square
/// size), and how many steps the crop added.
fn steps_of(ops: &[&str], w: u32, h: u32, position: u64) -> Option<Vec<Step>> {
    let json = format!(
        r#"{{"version": 1, "ops": [{}, {{"op": "CenterCrop", "size": 32}}]}}"#,
        ops.join(", ")
    );
    let spec = TransformSpec::from_json(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    resolve_steps(&spec, &SampleRng::for_sample(3, 1, "chain", position), w, h).ok()
}

/// The fused executor against step-by-step, over random chains of up to
/// 12 ops (so up to a few dozen steps) on images from 1x1 up: every byte
/// equal.
#[test]
fn fused_geometry_equals_step_by_step_on_random_chains() {
    let mut pick = Pick(17);
    let mut augmenter = Augmenter::new();
    let (mut chains, mut fused_steps) = (0, 0);
    for case in 0..600u64 {
        let (w, h) = match case % 5 {
            0 => (1, 1),
            1 => (2, 7),
            _ => (3 + pick.next(60) as u32, 3 + pick.next(45) as u32),
        };
        let img = ramp(w, h);
        let n = 1 + pick.next(12);
        let ops: Vec<&str> = (0..n).map(|_| OPS[pick.next(OPS.len())]).collect();
        let Some(steps) = steps_of(&ops, w, h, case) else {
            continue;
        };
        // With the final crop, and without it (a chain that ends the
        // steps, at any size).
        for steps in [&steps[..], &steps[..steps.len() - 1]] {
            let fused = augmenter.run(img.clone(), steps).unwrap();
            let stepwise = augmenter.run_stepwise(img.clone(), steps).unwrap();
            assert_eq!(
                (fused.width, fused.height),
                (stepwise.width, stepwise.height),
                "case {case}: {steps:?}"
            );
            if let Some(i) = fused.pixels.iter().zip(&stepwise.pixels).position(|(a, b)| a != b) {
                panic!(
                    "case {case} ({w}x{h}): byte {i} (pixel {}, {}) differs\nops {ops:?}\nsteps {steps:?}",
                    i / 3 % fused.width as usize,
                    i / 3 / fused.width as usize
                );
            }
        }
        let (chain, taken) = Chain::leading(&steps, w, h);
        if taken >= 2 {
            chains += 1;
            fused_steps += chain.links.len();
        }
    }
    // The test exercised long chains, not only single steps.
    assert!(
        chains > 300 && fused_steps > 1000,
        "{chains} chains, {fused_steps} links"
    );
}

#[test]
fn flips_fold_into_the_previous_link() {
    let steps = steps_of(
        &[
            r#"{"op": "RandomRotation", "degrees": 30, "expand": true}"#,
            r#"{"op": "RandomHorizontalFlip", "p": 1.0}"#,
            r#"{"op": "RandomVerticalFlip", "p": 1.0}"#,
            r#"{"op": "RandomRotation", "degrees": 30}"#,
            r#"{"op": "RandomHorizontalFlip", "p": 1.0}"#,
        ],
        40,
        30,
        1,
    )
    .unwrap();
    let (chain, taken) = Chain::leading(&steps, 40, 30);
    assert_eq!(taken, steps.len());
    // Two rotations; the flips and the final crop (inside) cost no link.
    assert_eq!(chain.links.len(), 2, "{chain:?}");
    let img = ramp(40, 30);
    assert_eq!(chain.render(&img), Augmenter::new().run_stepwise(img, &steps).unwrap());
}

/// Seed 000's load (flips of the source, a rotation, the crop) is one
/// link, at every draw of the flips; a crop past the output (the spec's
/// final 32x32 crop of a smaller image), or a flip of the source before a
/// table (a pad), still give the steps' bytes.
#[test]
fn source_flips_and_crops_fold_into_their_neighbours() {
    let (hflip, vflip) = (
        r#"{"op": "RandomHorizontalFlip", "p": 1.0}"#,
        r#"{"op": "RandomVerticalFlip", "p": 1.0}"#,
    );
    let rotate = r#"{"op": "RandomRotation", "degrees": 30}"#;
    let pad = r#"{"op": "Pad", "padding": [3, 1], "padding_mode": "reflect"}"#;
    let crop = r#"{"op": "RandomCrop", "size": [40, 50]}"#;
    let cases: [(Vec<&str>, (u32, u32), usize); 7] = [
        (vec![hflip, vflip, rotate], (60, 45), 1),
        (vec![hflip, rotate, crop], (60, 45), 1),
        (vec![vflip, rotate], (60, 45), 1),
        (vec![hflip, vflip, pad], (60, 45), 1),
        (vec![vflip], (60, 45), 1),
        (vec![rotate], (23, 17), 2),
        (vec![hflip, vflip, rotate], (23, 17), 2),
    ];
    for (position, (ops, (w, h), links)) in cases.iter().enumerate() {
        let img = ramp(*w, *h);
        let steps = steps_of(ops, *w, *h, position as u64).unwrap();
        let (chain, taken) = Chain::leading(&steps, *w, *h);
        assert_eq!((taken, chain.links.len()), (steps.len(), *links), "{ops:?}: {chain:?}");
        let stepwise = Augmenter::new().run_stepwise(img.clone(), &steps).unwrap();
        assert_eq!(chain.render(&img), stepwise, "{ops:?}");
    }
}

#[test]
fn a_chain_stops_at_what_it_cannot_take() {
    let bilinear = Step::Affine {
        matrix: [1.0, 0.2, 0.0, 0.0, 1.0, 0.0],
        out_w: 8,
        out_h: 8,
        warp: Warp::Bilinear,
        fill: [0; 3],
    };
    let steps = [Step::FlipHorizontal, bilinear, Step::FlipVertical];
    let (chain, taken) = Chain::leading(&steps, 8, 8);
    assert_eq!((taken, chain.links.len()), (1, 1));
    // Past Pillow's fixed-point range: its floating-point path, not chained.
    let far = Step::Affine {
        matrix: [1.0, 0.5, 40_000.0, 0.0, 1.0, 0.0],
        out_w: 8,
        out_h: 8,
        warp: Warp::Nearest,
        fill: [0; 3],
    };
    assert!(!Chain::new(8, 8).push(&far));
}

/// Hostile chains: a hundred rotations of a 1x1 image, a degenerate
/// (all-zero) matrix, a warp that maps everything outside, and one with
/// non-finite entries (not chained: Pillow's floating-point path runs it);
/// each the bytes of the steps one by one. A hundred rotations with
/// `expand` grow the image past any limit: refused from the header by the
/// footprint, before a pixel is decoded or a chain built.
#[test]
fn hostile_chains_equal_step_by_step() {
    let rotate = r#"{"op": "RandomRotation", "degrees": [37, 37], "fill": [1, 2, 3]}"#;
    let hundred = steps_of(&[rotate; 100], 1, 1, 0).unwrap();
    assert!(hundred.len() > 100);
    let expand = r#"{"op": "RandomRotation", "degrees": [37, 37], "expand": true}"#;
    let json = format!(
        r#"{{"version": 1, "ops": [{}, {{"op": "CenterCrop", "size": 32}}]}}"#,
        [expand; 100].join(", ")
    );
    let spec = TransformSpec::from_json(&json).unwrap();
    assert!(
        stoker_core::footprint(&spec, 1, 1, 1 << 30).is_err(),
        "a hundred expanding rotations fit"
    );
    let warp = |matrix: [f64; 6]| Step::Affine {
        matrix,
        out_w: 9,
        out_h: 7,
        warp: Warp::Nearest,
        fill: [7, 8, 9],
    };
    let cases: Vec<(RgbImage, Vec<Step>)> = vec![
        (ramp(1, 1), hundred),
        (ramp(5, 4), vec![warp([0.0; 6]), Step::FlipHorizontal]),
        (
            ramp(5, 4),
            vec![warp([1.0, 0.3, 1e4, 0.2, 1.0, -1e4]), Step::FlipVertical],
        ),
        (
            ramp(5, 4),
            vec![Step::FlipVertical, warp([f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0])],
        ),
    ];
    for (img, steps) in cases {
        let mut a = Augmenter::new();
        let fused = a.run(img.clone(), &steps).unwrap();
        assert_eq!(fused, a.run_stepwise(img, &steps).unwrap(), "{steps:?}");
    }
}
