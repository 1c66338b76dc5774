//! Chains of nearest geometric steps on the GPU against the CPU's, on the
//! same decoded pixels (uploaded, so no decoder difference enters):
//! byte for byte, through both kernels that walk chains (rendering a
//! batch's chains, and the crop-resize reading its box through one);
//! Seed 000's heavy load fused into one launch. Without a usable GPU each
//! test prints `skipped: <reason>` and returns.

use stoker_core::{SampleRng, Step, TransformSpec, resolve_steps};
use stoker_image::augment::{Augmenter, Chain};
use stoker_image::decode::{ImageKind, RgbImage, decode};
use stoker_worker::gpu::{DeviceImage, Gpu, fused};

use crate::gpu::gpu_or_skip;

fn upload(gpu: &Gpu, img: &RgbImage) -> DeviceImage {
    DeviceImage {
        width: img.width,
        height: img.height,
        pitch: img.width * 3,
        buf: gpu.stream.clone_htod(&img.pixels).unwrap(),
    }
}

/// Decoded test images: a photo-like JPEG at a few sizes, down to 1x1.
fn images() -> Vec<RgbImage> {
    [(500, 375), (375, 500), (97, 61), (1, 1), (2, 9)]
        .into_iter()
        .enumerate()
        .map(|(i, (w, h))| {
            let img = stoker_synth::procedural(w, h, i as u64);
            let jpeg = stoker_synth::encode_jpeg(&img, 90).unwrap();
            decode(ImageKind::Jpeg, &jpeg, 1 << 30).unwrap()
        })
        .collect()
}

/// Seed 000's load: `n` x (flips, rotation), then RandomResizedCrop and
/// a flip.
fn heavy(n: usize, size: u32) -> TransformSpec {
    let one =
        r#"{"op": "RandomHorizontalFlip"}, {"op": "RandomVerticalFlip"}, {"op": "RandomRotation", "degrees": 30}"#;
    let ops = vec![one; n].join(", ");
    TransformSpec::from_json(&format!(
        r#"{{"version": 1, "ops": [{ops}, {{"op": "RandomResizedCrop", "size": {size}}}, {{"op": "RandomHorizontalFlip"}}]}}"#
    ))
    .unwrap()
}

/// Nearest chains of every kind of link (fixed-point warps with fills and
/// `expand`, scale tables, pads of each mode, nearest resizes, crops past
/// the edges), rendered for a batch in one launch: the same bytes as the
/// CPU's step-by-step executor.
#[test]
fn gpu_chains_render_the_cpu_bytes_exactly() {
    let Some(gpu) = gpu_or_skip("gpu_chains_render_the_cpu_bytes_exactly") else {
        return;
    };
    let specs = [
        r#"{"op": "RandomRotation", "degrees": 180, "expand": true, "fill": [250, 10, 90]}, {"op": "RandomHorizontalFlip"}, {"op": "Pad", "padding": [3, 5, 2, 1], "padding_mode": "reflect"}, {"op": "RandomAffine", "degrees": 40, "translate": [0.2, 0.3], "scale": [0.6, 1.4], "shear": 20, "fill": [7, 77, 177]}"#,
        r#"{"op": "Pad", "padding": [4, 2], "padding_mode": "edge"}, {"op": "RandomVerticalFlip"}, {"op": "RandomAffine", "degrees": 0, "scale": [0.4, 1.7], "fill": 9}, {"op": "Pad", "padding": [1, 6], "padding_mode": "symmetric"}"#,
        r#"{"op": "RandomCrop", "size": 300, "pad_if_needed": true, "fill": [1, 2, 3]}, {"op": "Resize", "size": [150, 90], "interpolation": "nearest"}, {"op": "RandomRotation", "degrees": 45, "expand": true}"#,
        r#"{"op": "RandomResizedCrop", "size": [120, 80], "interpolation": "nearest"}, {"op": "CenterCrop", "size": 100}, {"op": "RandomHorizontalFlip", "p": 1.0}"#,
    ];
    let images = images();
    let (mut compared, mut links) = (0, 0);
    for (s, ops) in specs.iter().enumerate() {
        // A spec ends at a square size: a crop, which chains too.
        let json = format!(r#"{{"version": 1, "ops": [{ops}, {{"op": "CenterCrop", "size": 64}}]}}"#);
        let spec = TransformSpec::from_json(&json).unwrap();
        for epoch in 0..4u64 {
            let mut chains = Vec::new();
            let mut cpu = Vec::new();
            for (i, img) in images.iter().enumerate() {
                let rng = SampleRng::for_sample(5, epoch, "chain", (s * 100 + i) as u64);
                let steps = resolve_steps(&spec, &rng, img.width, img.height).unwrap();
                let (chain, taken) = Chain::leading(&steps, img.width, img.height);
                assert_eq!(taken, steps.len(), "spec {s}: every step chains: {steps:?}");
                links += chain.links.len();
                cpu.push(Augmenter::new().run_stepwise(img.clone(), &steps).unwrap());
                chains.push(chain);
            }
            let device: Vec<DeviceImage> = images.iter().map(|img| upload(&gpu, img)).collect();
            let jobs: Vec<(&DeviceImage, &Chain)> = device.iter().zip(&chains).collect();
            let outs = gpu.render_chains(&jobs).unwrap();
            for ((out, want), chain) in outs.iter().zip(&cpu).zip(&chains) {
                assert_eq!((out.width, out.height), (want.width, want.height));
                let got = gpu.stream.clone_dtoh(&out.buf).unwrap();
                assert!(
                    got == want.pixels,
                    "spec {s} epoch {epoch}: gpu differs from the cpu for {chain:?}"
                );
                compared += 1;
            }
        }
    }
    println!("gpu-chains  {compared} images, {links} links: exact");
}

/// Seed 000's heavy load, N = 1 and 12, as the lanes run it: the whole
/// step list fused: the crop boxes rendered through their chains, then one
/// crop-resize launch.
/// Equal to the GPU's own step-by-step result (chains rendered, then the
/// crop-resize) byte for byte, and within the crop-resize's bound of the
/// CPU.
#[test]
fn gpu_heavy_loads_fuse_into_one_pass() {
    let Some(gpu) = gpu_or_skip("gpu_heavy_loads_fuse_into_one_pass") else {
        return;
    };
    let size = 224;
    let images: Vec<RgbImage> = images().into_iter().filter(|i| i.width > 50).collect();
    for n in [1, 12] {
        let spec = heavy(n, size);
        let (mut worst, mut worst_mad, mut total, mut count) = (0u8, 0f64, 0f64, 0);
        for epoch in 0..3u64 {
            let mut plans = Vec::new();
            let mut stepwise = Vec::new();
            for (i, img) in images.iter().enumerate() {
                let rng = SampleRng::for_sample(9, epoch, "heavy", i as u64);
                let steps = resolve_steps(&spec, &rng, img.width, img.height).unwrap();
                let plan = fused(&steps, img.width, img.height, size).expect("heavy steps fuse");
                // A link per rotation, and one for flips of the decoded
                // image (later flips fold into the rotation before them).
                assert!(plan.0.links.len() <= n + 1, "{} links: {steps:?}", plan.0.links.len());
                plans.push(plan);
                stepwise.push(steps);
            }
            let device: Vec<DeviceImage> = images.iter().map(|img| upload(&gpu, img)).collect();
            let refs: Vec<&DeviceImage> = device.iter().collect();
            let crops: Vec<_> = plans.iter().map(|(_, c)| *c).collect();
            let chains: Vec<&Chain> = plans.iter().map(|(c, _)| c).collect();
            let bytes = size as usize * size as usize * 3;
            let mut out = gpu.stream.alloc_zeros::<u8>(bytes * images.len()).unwrap();
            gpu.resized_crop_flip_into(&refs, &crops, &chains, (size, size), &mut out)
                .unwrap();
            let fused_px = gpu.stream.clone_dtoh(&out).unwrap();
            let again: Vec<DeviceImage> = images.iter().map(|img| upload(&gpu, img)).collect();
            let steps: Vec<&[Step]> = stepwise.iter().map(Vec::as_slice).collect();
            let gpu_stepwise = gpu.run_steps_batch(again, &steps);
            for (i, (img, one)) in images.iter().zip(gpu_stepwise).enumerate() {
                let one = gpu.stream.clone_dtoh(&one.unwrap().buf).unwrap();
                let mine = &fused_px[i * bytes..(i + 1) * bytes];
                assert!(
                    one == mine,
                    "heavy-{n} image {i}: the fused pass differs from the gpu's steps"
                );
                let cpu = Augmenter::new().run(img.clone(), &stepwise[i]).unwrap();
                let diffs: Vec<u8> = mine.iter().zip(&cpu.pixels).map(|(a, b)| a.abs_diff(*b)).collect();
                worst = worst.max(diffs.iter().copied().max().unwrap_or(0));
                let mad = diffs.iter().map(|&d| f64::from(d)).sum::<f64>() / diffs.len() as f64;
                worst_mad = worst_mad.max(mad);
                total += mad;
                count += 1;
            }
        }
        let mean = total / f64::from(count);
        println!(
            "gpu-chains  heavy-{n}: {count} images, fused = gpu steps exactly; vs cpu mean {mean:.3}, \
             worst image {worst_mad:.3}, worst pixel {worst}"
        );
        // The bilinear crop-resize's bound (the chain itself is exact):
        // the kernel's float weights against fast_image_resize's fixed
        // point, a level or so; both filter windows stop at the crop box,
        // so no pixel past it (a fill next to the image) leaks in.
        assert!(
            mean <= 0.5 && worst_mad <= 2.0 && worst <= 2,
            "heavy-{n}: mean {mean:.3}, worst image {worst_mad:.3}, worst pixel {worst} against the cpu"
        );
    }
}

/// Bilinear and bicubic warps (rotations with and without `expand`,
/// RandomAffine with shear, fills), a batch per launch: the CPU's bytes,
/// whose f64 arithmetic the kernel repeats without fused multiply-adds.
#[test]
fn gpu_filtered_warps_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_filtered_warps_match_the_cpu") else {
        return;
    };
    let images = images();
    for filter in ["bilinear", "bicubic"] {
        let ops = format!(
            r#"{{"op": "RandomRotation", "degrees": 180, "expand": true, "interpolation": "{filter}", "fill": [9, 99, 199]}},
               {{"op": "RandomAffine", "degrees": 20, "translate": [0.1, 0.2], "scale": [0.7, 1.3], "shear": 15, "interpolation": "{filter}"}},
               {{"op": "CenterCrop", "size": 64}}"#
        );
        let spec = TransformSpec::from_json(&format!(r#"{{"version": 1, "ops": [{ops}]}}"#)).unwrap();
        let (mut worst, mut total, mut bytes) = (0u8, 0u64, 0usize);
        for epoch in 0..3u64 {
            let steps: Vec<Vec<Step>> = images
                .iter()
                .enumerate()
                .map(|(i, img)| {
                    let rng = SampleRng::for_sample(11, epoch, filter, i as u64);
                    resolve_steps(&spec, &rng, img.width, img.height).unwrap()
                })
                .collect();
            let refs: Vec<&[Step]> = steps.iter().map(Vec::as_slice).collect();
            let device: Vec<DeviceImage> = images.iter().map(|img| upload(&gpu, img)).collect();
            for ((img, s), got) in images.iter().zip(&steps).zip(gpu.run_steps_batch(device, &refs)) {
                let got = gpu.stream.clone_dtoh(&got.unwrap().buf).unwrap();
                let want = Augmenter::new().run_stepwise(img.clone(), s).unwrap();
                assert_eq!(got.len(), want.pixels.len());
                for (a, b) in got.iter().zip(&want.pixels) {
                    worst = worst.max(a.abs_diff(*b));
                    total += u64::from(a.abs_diff(*b));
                }
                bytes += got.len();
            }
        }
        let mean = total as f64 / bytes as f64;
        println!("gpu-chains  {filter} warps: {bytes} bytes, mean {mean:.5}, worst {worst}");
        assert_eq!(worst, 0, "{filter} warps differ from the cpu");
    }
}

/// Resizes with Pillow's other filters (bicubic, lanczos, box, hamming),
/// down and up, of random crops (after a rotation and a pad, whose chain
/// the crop joins) and of whole images: a pass per axis per launch for the
/// batch, the CPU's bytes (the same weights, integer sums).
#[test]
fn gpu_resizes_with_pillows_filters_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_resizes_with_pillows_filters_match_the_cpu") else {
        return;
    };
    let images = images();
    for filter in ["bicubic", "lanczos", "box", "hamming"] {
        let (mut worst, mut bytes) = (0u8, 0usize);
        for (size, ops) in [
            (
                48,
                format!(
                    r#"{{"op": "RandomResizedCrop", "size": 48, "scale": [0.05, 1.0], "interpolation": "{filter}"}}"#
                ),
            ),
            (
                120,
                format!(
                    r#"{{"op": "RandomRotation", "degrees": 30, "fill": 5}}, {{"op": "Pad", "padding": 7, "padding_mode": "reflect"}},
                       {{"op": "RandomResizedCrop", "size": [120, 90], "scale": [0.02, 0.2], "interpolation": "{filter}"}},
                       {{"op": "Resize", "size": 120, "interpolation": "{filter}"}}, {{"op": "CenterCrop", "size": 120}}"#
                ),
            ),
            (
                33,
                format!(r#"{{"op": "Resize", "size": [33, 33], "interpolation": "{filter}"}}"#),
            ),
        ] {
            let spec = TransformSpec::from_json(&format!(r#"{{"version": 1, "ops": [{ops}]}}"#)).unwrap();
            for epoch in 0..2u64 {
                let steps: Vec<Vec<Step>> = images
                    .iter()
                    .enumerate()
                    .map(|(i, img)| {
                        let rng = SampleRng::for_sample(5, epoch, filter, i as u64);
                        resolve_steps(&spec, &rng, img.width, img.height).unwrap()
                    })
                    .collect();
                assert!(steps.iter().flatten().all(stoker_worker::gpu::gpu_runs), "{steps:?}");
                let refs: Vec<&[Step]> = steps.iter().map(Vec::as_slice).collect();
                let device: Vec<DeviceImage> = images.iter().map(|img| upload(&gpu, img)).collect();
                for ((img, s), got) in images.iter().zip(&steps).zip(gpu.run_steps_batch(device, &refs)) {
                    let got = got.unwrap();
                    assert_eq!((got.width, got.height), (size, size), "{filter} {s:?}");
                    let got = gpu.stream.clone_dtoh(&got.buf).unwrap();
                    let want = Augmenter::new().run_stepwise(img.clone(), s).unwrap();
                    assert_eq!(got.len(), want.pixels.len());
                    worst = got
                        .iter()
                        .zip(&want.pixels)
                        .fold(worst, |w, (a, b)| w.max(a.abs_diff(*b)));
                    bytes += got.len();
                }
            }
        }
        println!("gpu-chains  {filter} resizes: {bytes} bytes, worst {worst}");
        assert_eq!(worst, 0, "{filter} resizes differ from the cpu");
    }
}
