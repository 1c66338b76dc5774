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
    // Two rotations and the final crop; the flips cost no link.
    assert_eq!(chain.links.len(), 3, "{chain:?}");
    let img = ramp(40, 30);
    assert_eq!(chain.render(&img), Augmenter::new().run_stepwise(img, &steps).unwrap());
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

/// The part of `img` in `at`.
fn cut(img: &RgbImage, at: Rect) -> RgbImage {
    let mut out = RgbImage::new(at.width, at.height);
    let (w, row) = (img.width as usize, at.width as usize * 3);
    for (y, dst) in out.pixels.chunks_exact_mut(row).enumerate() {
        let s = ((at.top as usize + y) * w + at.left as usize) * 3;
        dst.copy_from_slice(&img.pixels[s..s + row]);
    }
    out
}

/// A box's source box, over random chains and boxes (past the chain's
/// output too): every pixel the box reads is in it, rendering the box
/// from only that part of the source gives the same bytes, and for a
/// single link with no fill in the box it is the reads' own bounding box.
#[test]
fn a_box_reads_only_its_source_box() {
    let mut pick = Pick(29);
    let (mut smaller, mut tight) = (0, 0);
    for case in 0..500u64 {
        let (w, h) = (2 + pick.next(60) as u32, 2 + pick.next(45) as u32);
        let img = ramp(w, h);
        // Every other case is one op without the final crop: mostly a
        // single link.
        let n = if case % 2 == 0 { 1 } else { 1 + pick.next(6) };
        let ops: Vec<&str> = (0..n).map(|_| OPS[pick.next(OPS.len() - 1)]).collect();
        let Some(mut steps) = steps_of(&ops, w, h, case) else {
            continue;
        };
        if case % 2 == 0 {
            steps.pop();
        }
        let (chain, _) = Chain::leading(&steps, w, h);
        let (ow, oh) = (chain.out_w as i64, chain.out_h as i64);
        let left = pick.next(ow as usize + 4) as i64 - 2;
        let top = pick.next(oh as usize + 4) as i64 - 2;
        let rect = Rect::new(
            left,
            top,
            1 + pick.next(ow as usize) as u32,
            1 + pick.next(oh as usize) as u32,
        );
        // Where the box's pixels read the source.
        let (mut read, mut filled) = ((i64::MAX, i64::MAX, i64::MIN, i64::MIN), false);
        for y in rect.top.max(0)..(rect.top + i64::from(rect.height)).min(oh) {
            for x in rect.left.max(0)..rect.right().min(ow) {
                match chain.locate(x as u32, y as u32) {
                    Ok((sx, sy)) => {
                        let (sx, sy) = (sx as i64, sy as i64);
                        read = (read.0.min(sx), read.1.min(sy), read.2.max(sx), read.3.max(sy));
                    }
                    Err(_) => filled = true,
                }
            }
        }
        let at = chain.source_box(rect);
        let Some(at) = at else {
            assert!(read.0 > read.2, "case {case}: pixels are read but no box: {steps:?}");
            continue;
        };
        assert!(
            at.left <= read.0 && at.top <= read.1 && at.right() > read.2 && at.top + i64::from(at.height) > read.3,
            "case {case}: {at:?} does not hold the reads {read:?}: {steps:?}"
        );
        assert!(at.right() <= i64::from(w) && at.top + i64::from(at.height) <= i64::from(h));
        assert_eq!(
            chain.render_box_from(&cut(&img, at), at, rect),
            Some(chain.render_box(&img, rect)),
            "case {case}: {steps:?} box {rect:?} from {at:?}"
        );
        if i64::from(at.width) * i64::from(at.height) < i64::from(w) * i64::from(h) {
            smaller += 1;
        }
        // Where no pixel falls outside (into a fill), it is exact.
        if chain.links.len() == 1 && !filled {
            tight += 1;
            assert_eq!(
                (at.left, at.top, at.right() - 1, at.top + i64::from(at.height) - 1),
                read,
                "case {case}: one link's box is not the reads' box: {steps:?}"
            );
        }
    }
    assert!(
        smaller > 250 && tight > 80,
        "{smaller} smaller boxes, {tight} single links"
    );
}

/// A region that does not hold what the box reads is refused, not read
/// past.
#[test]
fn a_region_short_of_the_source_box_is_refused() {
    let steps = steps_of(&[r#"{"op": "RandomRotation", "degrees": [20, 20]}"#], 40, 30, 1).unwrap();
    let (chain, _) = Chain::leading(&steps, 40, 30);
    let rect = Rect::new(4, 4, 20, 20);
    let at = chain.source_box(rect).unwrap();
    let img = ramp(40, 30);
    let short = Rect::new(at.left + 1, at.top, at.width - 1, at.height);
    assert_eq!(chain.render_box_from(&cut(&img, short), short, rect), None);
    // Nor a region whose size is not the box's.
    assert_eq!(chain.render_box_from(&cut(&img, at), short, rect), None);
}
