//! The batched colour kernels (`Gpu::color_round`) against the CPU
//! augmenter, op by op: the photos (or procedural images, with odd and tiny
//! sizes for the borders), decoded on the CPU and uploaded as they are, so
//! only the kernels are compared; every image of a batch with its own
//! parameters, in one call. Each op must give the CPU's bytes exactly, but
//! erasing with noise: the noise is Box-Muller in double, and CUDA's `log`
//! and `cos` may differ from the C library's in the last ulp, which can
//! move a value across a rounding boundary (at most 1 grey level, and
//! rarely: the double is rounded to float first). Without a usable GPU
//! each test prints `skipped: <reason>` and returns.

use std::path::PathBuf;

use stoker_core::{Enhance, EraseFill, Rect, Step};
use stoker_image::augment::Augmenter;
use stoker_image::decode::{ImageKind, RgbImage, decode};
use stoker_synth as synth;
use stoker_worker::gpu::{DeviceImage, Gpu, GpuError};

use crate::gpu::gpu_or_skip;

/// A few photos of `STOKER_PHOTOS` or `../shared/photos`, decoded, and
/// small procedural images of odd sizes (1x1, 2x5, 3x3, 17x9), so borders
/// and images under Pillow's 3x3 filter are covered.
fn images() -> Vec<(String, RgbImage)> {
    let dir = std::env::var_os("STOKER_PHOTOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::support::repo_root().join("../shared/photos"));
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "jpg" || e == "jpeg"));
    paths.sort();
    let mut out: Vec<(String, RgbImage)> = paths
        .iter()
        .take(5)
        .map(|p| {
            let data = std::fs::read(p).unwrap();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, decode(ImageKind::Jpeg, &data, 100_000_000).unwrap())
        })
        .collect();
    if out.is_empty() {
        println!("no photos in {}; using procedural images", dir.display());
        for i in 0..4u32 {
            out.push((
                format!("procedural{i}"),
                synth::procedural(301 + 40 * i, 203 + 25 * i, u64::from(i)),
            ));
        }
    }
    for (i, (w, h)) in [(1, 1), (2, 5), (3, 3), (17, 9)].into_iter().enumerate() {
        out.push((format!("tiny{w}x{h}"), synth::procedural(w, h, 100 + i as u64)));
    }
    out
}

fn upload(gpu: &Gpu, img: &RgbImage) -> DeviceImage {
    DeviceImage {
        width: img.width,
        height: img.height,
        pitch: img.width * 3,
        buf: gpu.stream.clone_htod(&img.pixels).unwrap(),
    }
}

/// Runs `steps[i]` (a list: several steps of one image run in order, in
/// one call) on image `i` of `images` on the GPU in one `color_round`, and
/// on the CPU; asserts the worst and mean absolute differences are within
/// `worst` and `mean`, and prints the op's row.
fn compare(gpu: &Gpu, op: &str, images: &[(String, RgbImage)], steps: &[Vec<Step>], worst: u8, mean: f64) {
    let mut slots: Vec<Result<DeviceImage, GpuError>> = images.iter().map(|(_, img)| Ok(upload(gpu, img))).collect();
    let pairs: Vec<(usize, &Step)> = (0..steps.iter().map(Vec::len).max().unwrap_or(0))
        .flat_map(|k| {
            steps
                .iter()
                .enumerate()
                .filter_map(move |(i, s)| s.get(k).map(|s| (i, s)))
        })
        .collect();
    gpu.color_round(&mut slots, &pairs)
        .unwrap_or_else(|e| panic!("{op}: color_round: {e}"));
    let (mut most, mut total, mut values) = (0u8, 0u64, 0u64);
    for (((name, img), slot), steps) in images.iter().zip(slots).zip(steps) {
        let out = slot.unwrap_or_else(|e| panic!("{op} on {name}: {e}"));
        let got = gpu.to_host(&out.buf).unwrap();
        let want = Augmenter::new().run(img.clone(), steps).unwrap();
        assert_eq!((out.width, out.height), (want.width, want.height), "{op} on {name}");
        assert_eq!(got.len(), want.pixels.len(), "{op} on {name}");
        let mut image_most = 0u8;
        for (a, b) in got.iter().zip(&want.pixels) {
            let d = a.abs_diff(*b);
            image_most = image_most.max(d);
            total += u64::from(d);
        }
        values += got.len() as u64;
        assert!(
            image_most <= worst,
            "{op} on {name} ({}x{}, {steps:?}): worst difference {image_most} > {worst}",
            img.width,
            img.height
        );
        most = most.max(image_most);
    }
    let m = total as f64 / values.max(1) as f64;
    println!("gpu-color   {op:<22} {m:>10.6}  {most:>5}");
    assert!(m <= mean, "{op}: mean absolute difference {m} > {mean}");
}

/// Per-image parameters: `f(i)` for image `i`.
fn each(n: usize, f: impl Fn(usize) -> Step) -> Vec<Vec<Step>> {
    (0..n).map(|i| vec![f(i)]).collect()
}

fn table(f: impl Fn(u8) -> u8) -> Step {
    Step::Lut {
        table: Box::new(std::array::from_fn(|i| f(i as u8))),
    }
}

#[test]
fn gpu_colour_steps_match_the_cpu_op_by_op() {
    let Some(gpu) = gpu_or_skip("gpu_colour_steps_match_the_cpu_op_by_op") else {
        return;
    };
    let images = images();
    let n = images.len();
    println!("gpu-color   op                           mean  worst");
    let enhance = |what: Enhance, factors: &'static [f32]| {
        each(n, move |i| Step::Enhance {
            what,
            factor: factors[i % factors.len()],
        })
    };
    let luts = each(n, |i| match i % 3 {
        // solarize at a threshold of its own, posterize, invert
        0 => table(move |v| if v >= 64 + 16 * i as u8 { 255 - v } else { v }),
        1 => table(move |v| v & !((1u8 << (1 + i % 7)) - 1)),
        _ => table(|v| 255 - v),
    });
    compare(&gpu, "lut", &images, &luts, 0, 0.0);
    let orders = [[2, 0, 1], [1, 2, 0], [0, 2, 1], [2, 1, 0], [1, 0, 2], [0, 1, 2]];
    compare(
        &gpu,
        "permute",
        &images,
        &each(n, |i| Step::Permute { order: orders[i % 6] }),
        0,
        0.0,
    );
    let hues = [-0.5, -0.31, -0.07, 0.0, 0.013, 0.2, 0.45, 0.5];
    compare(
        &gpu,
        "hue",
        &images,
        &each(n, |i| Step::Hue {
            factor: hues[i % hues.len()],
        }),
        0,
        0.0,
    );
    compare(&gpu, "equalize", &images, &each(n, |_| Step::Equalize), 0, 0.0);
    compare(&gpu, "autocontrast", &images, &each(n, |_| Step::Autocontrast), 0, 0.0);
    let factors: &'static [f32] = &[0.0, 0.37, 0.9, 1.0, 1.28, 1.6, 2.0, 3.7];
    compare(
        &gpu,
        "sharpness",
        &images,
        &enhance(Enhance::Sharpness, factors),
        0,
        0.0,
    );
    compare(
        &gpu,
        "brightness",
        &images,
        &enhance(Enhance::Brightness, factors),
        0,
        0.0,
    );
    compare(&gpu, "contrast", &images, &enhance(Enhance::Contrast, factors), 0, 0.0);
    compare(
        &gpu,
        "saturation",
        &images,
        &enhance(Enhance::Saturation, factors),
        0,
        0.0,
    );

    // Boxes of their own inside each image (1x1 images: the whole of it).
    let rect = |i: usize| {
        let (w, h) = (images[i].1.width, images[i].1.height);
        let (bw, bh) = ((w / 3).max(1), (h / 2).max(1));
        Rect::new(
            i64::from((w - bw) * (i as u32 % 3) / 2),
            i64::from((h - bh) / 2),
            bw,
            bh,
        )
    };
    compare(
        &gpu,
        "erase-colour",
        &images,
        &each(n, |i| Step::Erase {
            rect: rect(i),
            fill: EraseFill::Color([(i * 40) as u8, 255 - i as u8, 7]),
        }),
        0,
        0.0,
    );
    // torchvision's value="random": pixels (scale 255) or normalised
    // (ImageNet's mean and std).
    compare(
        &gpu,
        "erase-noise",
        &images,
        &each(n, |i| Step::Erase {
            rect: rect(i),
            fill: EraseFill::Noise {
                seed: 0x9e37_79b9_7f4a_7c15 ^ i as u64,
                scale: if i % 2 == 0 {
                    [255.0; 3]
                } else {
                    [0.229 * 255.0, 0.224 * 255.0, 0.225 * 255.0]
                },
                offset: if i % 2 == 0 {
                    [0.0; 3]
                } else {
                    [0.485 * 255.0, 0.456 * 255.0, 0.406 * 255.0]
                },
            },
        }),
        1,
        1e-4,
    );

    // A mixed round: every image its own kind, some with several steps in
    // order (one wave per repetition), all in one call.
    let mixed: Vec<Vec<Step>> = (0..n)
        .map(|i| match i % 6 {
            0 => vec![Step::Equalize, Step::Hue { factor: 0.1 }],
            1 => vec![
                Step::Enhance {
                    what: Enhance::Contrast,
                    factor: 1.4,
                },
                Step::Enhance {
                    what: Enhance::Sharpness,
                    factor: 1.9,
                },
                Step::Autocontrast,
            ],
            2 => vec![table(|v| 255 - v), Step::Permute { order: [2, 0, 1] }],
            3 => vec![Step::Enhance {
                what: Enhance::Saturation,
                factor: 0.0,
            }],
            4 => vec![
                Step::Erase {
                    rect: rect(i),
                    fill: EraseFill::Color([1, 2, 3]),
                },
                Step::Enhance {
                    what: Enhance::Brightness,
                    factor: 1.3,
                },
            ],
            _ => vec![],
        })
        .collect();
    compare(&gpu, "mixed", &images, &mixed, 0, 0.0);
}

/// An image whose step cannot run gets its own error; the others go on,
/// and an image already failed is skipped.
#[test]
fn gpu_colour_round_fails_only_the_image_it_cannot_run() {
    let Some(gpu) = gpu_or_skip("gpu_colour_round_fails_only_the_image_it_cannot_run") else {
        return;
    };
    let img = synth::procedural(40, 30, 5);
    let mut slots: Vec<Result<DeviceImage, GpuError>> = vec![
        Ok(upload(&gpu, &img)),
        Ok(upload(&gpu, &img)),
        Err(GpuError::Invalid("decode failed".into())),
    ];
    let outside = Step::Erase {
        rect: Rect::new(30, 0, 20, 5),
        fill: EraseFill::Color([0; 3]),
    };
    let invert = table(|v| 255 - v);
    gpu.color_round(&mut slots, &[(0, &outside), (1, &invert), (2, &invert)])
        .unwrap();
    let e = slots[0].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("erase") && e.contains("image 0") && e.contains("not inside"),
        "{e}"
    );
    let inverted = gpu.to_host(&slots[1].as_ref().unwrap().buf).unwrap();
    assert!(inverted.iter().zip(&img.pixels).all(|(a, b)| *a == 255 - b));
    assert_eq!(slots[2].as_ref().unwrap_err().to_string(), "decode failed");
    let blur = Step::Blur {
        kernel: (3, 3),
        sigma: 1.0,
    };
    let e = gpu.color_round(&mut slots, &[(1, &blur)]).unwrap_err().to_string();
    assert!(e.contains("blur") && e.contains("not a colour step"), "{e}");
    let e = gpu.color_round(&mut slots, &[(7, &invert)]).unwrap_err().to_string();
    assert!(e.contains("image 7"), "{e}");
}
