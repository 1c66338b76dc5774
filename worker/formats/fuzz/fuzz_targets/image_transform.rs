//! Arbitrary bytes as a sample's image: its plan (`SamplePlan`: header,
//! footprints, steps), decode (JPEG and PNG, each also tried as the other
//! kind, as a misnamed file is) and the transform presets, as the worker
//! plans and runs them on the CPU (`stoker-image`), views and masks too.
//!
//! A panic fails, and so does memory over the bound the worker counts on:
//! a counting global allocator aborts on an allocation that would hold more
//! live bytes than the bound derived from the image's header and the pixel
//! limit — the transform's [`footprint`] (which the worker refuses a sample
//! by and reserves its memory from), or a decoder's working memory per
//! pixel, plus a fixed margin for tables. A resize bomb that got past the
//! refusal, or a step or decoder that allocates more than it was measured
//! at, aborts here.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use libfuzzer_sys::fuzz_target;
use stoker_core::transform::{EXAMPLES, example_spec};
use stoker_core::{SampleRng, TransformSpec, ViewSpec, footprint};
use stoker_image::augment::Augmenter;
use stoker_image::decode::{ImageKind, decode, header_dimensions, sniff};
use stoker_image::{ImageError, SamplePlan, decode_and_transform, transform};

/// The pixel limit: small, so that the largest images stay fast to fuzz.
const MAX_PIXELS: u64 = 1 << 22;

/// What a decoder may hold per pixel of the image rounded up to whole 16x16
/// blocks (a JPEG's largest MCU), its RGB output included. zune-jpeg keeps
/// each component's plane (and a progressive image's coefficients, two
/// bytes each) besides the output; zune-png inflates up to 8 bytes a pixel
/// (16-bit RGBA) plus a filter byte a row, then strips it to 8 bits and
/// expands it to RGB.
const DECODER_BYTES_PER_PIXEL: u64 = 24;

/// Fixed allowance: Huffman and quantisation tables, the resizer's
/// coefficients, a `Vec`'s rounding.
const MARGIN: u64 = 1 << 20;

/// The output sizes the presets are run at.
const SIZES: [u32; 3] = [1, 17, 64];

/// Live bytes allocated through Rust, and the armed bound (`usize::MAX`:
/// none) over the live bytes at `BASE`.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static BASE: AtomicUsize = AtomicUsize::new(0);
static BOUND: AtomicUsize = AtomicUsize::new(usize::MAX);
static STAGE: AtomicUsize = AtomicUsize::new(0);
/// The most bytes over `BASE` live while the bound was armed.
static PEAK: AtomicUsize = AtomicUsize::new(0);
const STAGES: [&str; 3] = ["decode_and_transform", "decode", "transform"];

struct Counting;

impl Counting {
    /// Aborts (a crash for libFuzzer) when `grow` more bytes would take the
    /// live bytes over the armed bound.
    fn check(grow: usize) {
        let bound = BOUND.load(Relaxed);
        if bound == usize::MAX {
            return;
        }
        let live = LIVE.load(Relaxed).saturating_sub(BASE.load(Relaxed));
        PEAK.fetch_max(live + grow, Relaxed);
        if grow > bound || live + grow > bound {
            BOUND.store(usize::MAX, Relaxed);
            eprintln!(
                "{}: an allocation of {grow} bytes over {live} live would pass the bound of {bound} bytes",
                STAGES[STAGE.load(Relaxed)]
            );
            std::process::abort();
        }
    }
}

// SAFETY: every call goes to `System` with the caller's arguments; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size.saturating_sub(layout.size()));
        // SAFETY: as for `dealloc`, and the caller's `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Relaxed);
            LIVE.fetch_sub(layout.size(), Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` with at most `bound` more bytes live than now. With
/// `STOKER_FUZZ_PEAKS` set, prints each stage's peak and bound (to tune the
/// bound: `cargo fuzz run ... image_transform corpus/image_transform -- -runs=0`).
fn bounded<T>(stage: usize, bound: u64, f: impl FnOnce() -> T) -> T {
    STAGE.store(stage, Relaxed);
    PEAK.store(0, Relaxed);
    BASE.store(LIVE.load(Relaxed), Relaxed);
    BOUND.store(usize::try_from(bound).unwrap_or(usize::MAX - 1), Relaxed);
    let out = f();
    BOUND.store(usize::MAX, Relaxed);
    if std::env::var_os("STOKER_FUZZ_PEAKS").is_some() {
        eprintln!("{}: peak {} of {bound}", STAGES[stage], PEAK.load(Relaxed));
    }
    out
}

/// A decoder's bound for a `w` x `h` image.
fn decoder_bound(w: u32, h: u32) -> u64 {
    let block = |n: u32| u64::from(n).div_ceil(16) * 16;
    DECODER_BYTES_PER_PIXEL * block(w) * block(h) + MARGIN
}

/// The dimensions the header of `data` declares, read as whichever kind
/// parses (at most one: a JPEG starts with FF D8, a PNG with its signature).
fn declared(data: &[u8]) -> Option<(u32, u32)> {
    [ImageKind::Jpeg, ImageKind::Png]
        .into_iter()
        .find_map(|k| header_dimensions(k, data).ok())
        .filter(|&(w, h)| u64::from(w) * u64::from(h) <= MAX_PIXELS)
}

/// That an image of a spec that ends at a square is that square (one that
/// keeps each image's size has none to check here).
fn assert_square(spec: &TransformSpec, width: u32, height: u32) {
    if let Some(side) = spec.size.side() {
        assert_eq!((width, height), (side, side), "{spec}");
    }
}

fn specs() -> Vec<TransformSpec> {
    let mut specs: Vec<TransformSpec> = SIZES
        .into_iter()
        .flat_map(|s| [TransformSpec::train(s), TransformSpec::eval(s)])
        .collect();
    // Every op of the registry, through its example pipeline (core's
    // transform::EXAMPLES: a new op is fuzzed the day it lands).
    for (op, ops) in EXAMPLES {
        let spec = TransformSpec::from_json(&example_spec(ops, 32)).unwrap_or_else(|e| panic!("{op}: {e}"));
        specs.push(spec);
    }
    specs
}

fuzz_target!(|data: &[u8]| {
    let specs = specs();
    let rng = SampleRng::for_sample(0, 0, "fuzz", data.len() as u64);
    let dims = declared(data);

    // The whole path as the worker takes it, named either kind, with the
    // spec the input picks. Refused from the header, it allocates nothing
    // of the image's size.
    let spec = &specs[data.len() % specs.len()];
    let bound = match dims.map(|(w, h)| (w, h, footprint(spec, w, h, MAX_PIXELS))) {
        Some((w, h, Ok(peak))) => decoder_bound(w, h).max(peak + MARGIN),
        _ => MARGIN,
    };
    for kind in [ImageKind::Jpeg, ImageKind::Png] {
        let out = bounded(0, bound, || {
            decode_and_transform(&mut Augmenter::new(), kind, data, spec, &rng, MAX_PIXELS)
        });
        match out {
            Ok(img) => assert_square(spec, img.width, img.height),
            Err(ImageError::Augment(e)) => panic!("a step failed: {e}"),
            Err(_) => {}
        }
    }

    // The worker's CPU route with a view and a mask: the sample's plan
    // (header, footprints, the image's and the view's steps), its decode,
    // the image's steps, the view's over the same decode, and the bytes as
    // their own mask (an image of the planned size).
    let views = [ViewSpec {
        name: "view".into(),
        transform: specs[(data.len() / 7) % specs.len()].clone(),
    }];
    if let Ok(plan) = SamplePlan::new(ImageKind::Jpeg, data, spec, &views, &rng, MAX_PIXELS)
        && let Ok(img) = plan.decode(data, MAX_PIXELS)
    {
        let mut a = Augmenter::new();
        let view = plan
            .run_view(&mut a, 0, &img)
            .unwrap_or_else(|e| panic!("a view's step failed: {e}"));
        assert_square(&views[0].transform, view.width, view.height);
        let out = plan.run(&mut a, img).unwrap_or_else(|e| panic!("a step failed: {e}"));
        assert_eq!((out.width, out.height), plan.out_dims(), "the plan's size");
        assert_square(spec, out.width, out.height);
        if let Ok((mask, w, h)) = plan.run_mask(data, MAX_PIXELS) {
            assert_eq!(mask.len() as u64, u64::from(w) * u64::from(h));
        }
    }

    // Every spec on one decode (the kind that can decode these bytes).
    let kind = sniff(data).unwrap_or(ImageKind::Jpeg);
    let bound = dims.map_or(MARGIN, |(w, h)| decoder_bound(w, h));
    let Ok(img) = bounded(1, bound, || decode(kind, data, MAX_PIXELS)) else {
        return;
    };
    assert_eq!(
        dims,
        Some((img.width, img.height)),
        "decoded size differs from the header's"
    );
    for spec in &specs {
        let Ok(peak) = footprint(spec, img.width, img.height, MAX_PIXELS) else {
            continue;
        };
        if std::env::var_os("STOKER_FUZZ_PEAKS").is_some() {
            eprintln!("spec {:?}", spec.ops.iter().map(|op| op.name()).collect::<Vec<_>>());
        }
        // The copy stands for the decoded image the footprint counts.
        let out = bounded(2, peak + MARGIN, || {
            transform(&mut Augmenter::new(), img.clone(), spec, &rng, MAX_PIXELS)
        });
        match out {
            Ok(out) => assert_square(spec, out.width, out.height),
            // A draw torchvision refuses too (a crop larger than its input).
            Err(ImageError::Resolve(_)) => {}
            Err(e) => panic!("transform of a {}x{} image failed: {e}", img.width, img.height),
        }
    }
});
