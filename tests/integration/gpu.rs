//! The GPU path: nvJPEG batched decode and the fused RandomResizedCrop +
//! flip kernel against the CPU worker's pixels, bad JPEGs routed back to
//! the CPU, throughput, and `stoker worker --device`. Without a usable GPU
//! each GPU test prints `skipped: <reason>` and returns; the `--device
//! cuda` failure is checked there instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use stoker_core::{ItemSeed, SampleRng, TransformSpec, resolve_steps};
use stoker_image::augment::Augmenter;
use stoker_image::decode::{ImageKind, RgbImage, decode};
use stoker_synth as synth;
use stoker_worker::gpu::{self, Backend, Gpu, GpuCrop, SmShare};

use stoker_client::{Loader, LoaderConfig};

use crate::support::{Worker, assert_exactly_once, image_folder_keys, pack, stoker, stream};

const MAX_PIXELS: u64 = 100_000_000;
const SEED: u64 = 7;
const SIZE: u32 = 224;

/// The GPU, or `None` after printing why the test is skipped.
pub(crate) fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match Gpu::open(0) {
        Ok(gpu) => {
            println!("{test}: {}", gpu.info);
            Some(gpu)
        }
        Err(reason) => {
            crate::support::Need::Gpu.skip(test, reason);
            None
        }
    }
}

/// The photos of `STOKER_PHOTOS`, or `../shared/photos` beside the
/// checkout; procedural JPEGs when neither exists. (name, jpeg bytes).
pub(crate) fn photos() -> Vec<(String, Vec<u8>)> {
    let dir = std::env::var_os("STOKER_PHOTOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::support::repo_root().join("../shared/photos"));
    let mut found = photo_files(&dir);
    if found.is_empty() {
        println!("no photos in {}; using procedural jpegs", dir.display());
        found = (0..10u64)
            .map(|i| {
                let img = synth::procedural(400 + 40 * i as u32, 300 + 25 * i as u32, i);
                (format!("procedural{i}"), synth::encode_jpeg(&img, 90).unwrap())
            })
            .collect();
    }
    found
}

fn photo_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jpg" || e == "jpeg"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

pub(crate) fn mad(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let sum: u64 = a.iter().zip(b).map(|(&x, &y)| u64::from(x.abs_diff(y))).sum();
    sum as f64 / a.len() as f64
}

/// The generator of the photo `key` in `epoch` (the photo stands for its
/// own shard, at position 0), for tests that drive the kernels directly.
fn rng(key: &str, epoch: u64) -> SampleRng {
    SampleRng::for_sample(SEED, epoch, key, 0)
}

/// The CPU worker's output for one sample: decode, resolve, augment.
fn cpu_train(data: &[u8], key: &str, epoch: u64) -> RgbImage {
    let img = decode(ImageKind::Jpeg, data, MAX_PIXELS).unwrap();
    let steps = resolve_steps(&TransformSpec::train(SIZE), &rng(key, epoch), img.width, img.height).unwrap();
    Augmenter::new().run(img, &steps).unwrap()
}

#[test]
fn gpu_decode_and_train_crop_match_the_cpu_worker() {
    let Some(gpu) = gpu_or_skip("gpu_decode_and_train_crop_match_the_cpu_worker") else {
        return;
    };
    let photos = photos();
    let mut decoder = gpu.decoder(MAX_PIXELS).unwrap();
    let jpegs: Vec<&[u8]> = photos.iter().map(|(_, d)| d.as_slice()).collect();
    let decoded: Vec<_> = decoder
        .decode_batch(&jpegs)
        .into_iter()
        .zip(&photos)
        .map(|(r, (name, _))| r.unwrap_or_else(|e| panic!("gpu decode of {name}: {e}")))
        .collect();
    println!(
        "decoded {} photos in one batch ({} backend)",
        decoded.len(),
        decoder.backend().name()
    );

    // The CUDA backend (GPUs without the hardware engine) decodes the same
    // pixels within a grey level or so.
    let mut cuda_decoder = gpu::GpuDecoder::with_backend(&gpu, Backend::Default, MAX_PIXELS).unwrap();
    for ((name, _), (r, hw)) in photos
        .iter()
        .zip(cuda_decoder.decode_batch(&jpegs).into_iter().zip(&decoded))
    {
        let img = r.unwrap_or_else(|e| panic!("cuda-backend decode of {name}: {e}"));
        let m = mad(&gpu.to_host(&img.buf).unwrap(), &gpu.to_host(&hw.buf).unwrap());
        println!(
            "gpu-backends {name:<20} cuda vs {} decode mad {m:.3}",
            decoder.backend().name()
        );
        assert!(
            m < 2.0,
            "{name}: cuda and {} backends differ by {m:.3}",
            decoder.backend().name()
        );
    }

    // Two epochs per photo: different crops, and flips both ways.
    let spec = TransformSpec::train(SIZE);
    let mut images = Vec::new();
    let mut crops = Vec::new();
    let mut cases = Vec::new();
    for epoch in 0..2u64 {
        for ((name, _), img) in photos.iter().zip(&decoded) {
            let steps = resolve_steps(&spec, &rng(name, epoch), img.width, img.height).unwrap();
            let crop = GpuCrop::from_steps(&steps, img.width, img.height, SIZE).expect("train steps fit the kernel");
            images.push(img);
            crops.push(crop);
            cases.push((name.clone(), epoch));
        }
    }
    let out = gpu.resized_crop_flip(&images, &crops, SIZE).unwrap();
    let host = gpu.to_host(&out).unwrap();
    let per_image = (SIZE * SIZE * 3) as usize;

    let mut worst: f64 = 0.0;
    println!("gpu-vs-cpu  image                 size        epoch  crop(l,t,w,h)         flip  decode-mad  rrc-mad");
    for (i, ((name, epoch), crop)) in cases.iter().zip(&crops).enumerate() {
        let data = &photos.iter().find(|(n, _)| n == name).unwrap().1;
        let cpu = cpu_train(data, name, *epoch);
        let gpu_px = &host[i * per_image..(i + 1) * per_image];
        let rrc = mad(gpu_px, &cpu.pixels);
        let img = images[i];
        let decode_mad = if *epoch == 0 {
            let full = gpu.to_host(&img.buf).unwrap();
            let cpu_full = decode(ImageKind::Jpeg, data, MAX_PIXELS).unwrap();
            format!("{:.3}", mad(&full, &cpu_full.pixels))
        } else {
            "-".into()
        };
        println!(
            "gpu-vs-cpu  {name:<20}  {:>4}x{:<5}  {epoch:>5}  ({:>4},{:>4},{:>4},{:>4})  {:>4}  {decode_mad:>10}  {rrc:.3}",
            img.width, img.height, crop.rect.left, crop.rect.top, crop.rect.width, crop.rect.height, crop.flip
        );
        worst = worst.max(rrc);
        assert!(
            rrc < 2.0,
            "{name} epoch {epoch}: gpu vs cpu mean absolute difference {rrc:.3} >= 2"
        );
    }
    println!("gpu-vs-cpu worst rrc mad {worst:.3} over {} crops", cases.len());
}

#[test]
fn gpu_decode_routes_jpegs_it_cannot_take_back_to_the_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_decode_routes_jpegs_it_cannot_take_back_to_the_cpu") else {
        return;
    };
    let good = synth::encode_jpeg(&synth::procedural(320, 240, 1), 90).unwrap();
    let truncated = good[..good.len() / 2].to_vec();
    let mut garbage = good.clone();
    for b in garbage.iter_mut().skip(600).take(4000) {
        *b = 0xff;
    }
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let grey = {
        let mut out = Vec::new();
        let pixels = vec![128u8; 64 * 48];
        jpeg_encoder::Encoder::new(&mut out, 90)
            .encode(&pixels, 64, 48, jpeg_encoder::ColorType::Luma)
            .unwrap();
        out
    };
    let cmyk = {
        let mut out = Vec::new();
        let pixels = vec![40u8; 64 * 48 * 4];
        jpeg_encoder::Encoder::new(&mut out, 90)
            .encode(&pixels, 64, 48, jpeg_encoder::ColorType::Cmyk)
            .unwrap();
        out
    };
    let huge = {
        // A valid header claiming 30000x30000: over a 100M-pixel limit.
        let mut j = good.clone();
        let sof = j.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
        j[sof + 5..sof + 7].copy_from_slice(&30000u16.to_be_bytes());
        j[sof + 7..sof + 9].copy_from_slice(&30000u16.to_be_bytes());
        j
    };
    let cases: Vec<(&str, &[u8], bool)> = vec![
        ("good", &good, true),
        ("truncated", &truncated, false),
        ("png", &png, false),
        ("grey", &grey, false),
        ("cmyk", &cmyk, false),
        ("huge", &huge, false),
        ("empty", &[], false),
        ("good-again", &good, true),
    ];
    let mut decoder = gpu.decoder(MAX_PIXELS).unwrap();
    let inputs: Vec<&[u8]> = cases.iter().map(|c| c.1).collect();
    let results = decoder.decode_batch(&inputs);
    let cpu_reference = decode(ImageKind::Jpeg, &good, MAX_PIXELS).unwrap();
    for ((name, data, ok), r) in cases.iter().zip(&results) {
        match r {
            Ok(img) => {
                assert!(ok, "{name} decoded on the gpu");
                let px = gpu.to_host(&img.buf).unwrap();
                let m = mad(&px, &cpu_reference.pixels);
                println!("gpu-route {name}: decoded on the gpu, mad vs cpu {m:.3}");
                assert!(m < 2.0);
            }
            Err(e) => {
                assert!(!ok, "{name} failed on the gpu: {e}");
                assert!(e.route_to_cpu());
                let cpu = decode(ImageKind::Jpeg, data, MAX_PIXELS);
                println!(
                    "gpu-route {name}: {e}; cpu path: {}",
                    cpu.as_ref().map_or_else(
                        |e| format!("skips it: {e}"),
                        |i| format!("decodes {}x{}", i.width, i.height)
                    )
                );
            }
        }
    }
    // The batch of good images around the bad ones still decoded, and a
    // corrupt image in a hardware batch did not take the others down.
    assert!(results[0].is_ok() && results[7].is_ok());
    let with_garbage = decoder.decode_batch(&[&good, &garbage, &good]);
    assert!(with_garbage[0].is_ok() && with_garbage[2].is_ok());
    println!(
        "gpu-route corrupt-scan: {}",
        with_garbage[1].as_ref().map_or_else(
            |e| e.to_string(),
            |_| "decoded (entropy-coded garbage is still a jpeg)".into()
        )
    );
}

#[test]
fn gpu_throughput_decode_and_train_pipeline() {
    let Some(gpu) = gpu_or_skip("gpu_throughput_decode_and_train_pipeline") else {
        return;
    };
    // ImageNet-like JPEGs (500x375) cut from the photos.
    let photos = photos();
    let per_photo = 256usize.div_ceil(photos.len());
    let mut jpegs = Vec::new();
    for (i, (_, data)) in photos.iter().enumerate() {
        jpegs.extend(synth::imagenet_like_from_photo(data, per_photo, (500, 375), 90, i as u64).unwrap());
    }
    jpegs.truncate(256);
    let mean_kb = jpegs.iter().map(Vec::len).sum::<usize>() as f64 / jpegs.len() as f64 / 1000.0;
    if let Some(dir) = std::env::var_os("STOKER_GPU_BENCH_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, j) in jpegs.iter().enumerate() {
            std::fs::write(Path::new(&dir).join(format!("{i:04}.jpg")), j).unwrap();
        }
    }
    let keys: Vec<String> = (0..jpegs.len()).map(|i| format!("bench/{i:04}")).collect();
    let spec = TransformSpec::train(SIZE);
    let mut decoder = gpu.decoder(MAX_PIXELS).unwrap();
    let backend = decoder.backend().name();
    let (free_before, total) = gpu.ctx.mem_get_info().unwrap();
    for batch in [64usize, 128, 256] {
        let chunks: Vec<Vec<&[u8]>> = jpegs
            .chunks(batch)
            .map(|c| c.iter().map(Vec::as_slice).collect())
            .collect();
        let key_chunks: Vec<&[String]> = keys.chunks(batch).collect();
        // decode only
        let decode_only = |decoder: &mut gpu::GpuDecoder| {
            for c in &chunks {
                let r = decoder.decode_batch(c);
                assert!(r.iter().all(Result::is_ok));
                decoder.stream().synchronize().unwrap();
            }
        };
        decode_only(&mut decoder);
        let (mut n, t0) = (0usize, Instant::now());
        while t0.elapsed().as_secs_f64() < 1.5 {
            decode_only(&mut decoder);
            n += jpegs.len();
        }
        let decode_rate = n as f64 / t0.elapsed().as_secs_f64();

        // decode + RandomResizedCrop(224) + flip + copy to pinned host
        // memory, with the time of each phase (each waits for the stream).
        let mut pinned = gpu.pinned(batch * (SIZE * SIZE * 3) as usize).unwrap();
        let mut full = |decoder: &mut gpu::GpuDecoder, epoch: u64, phases: &mut [f64; 3]| -> usize {
            let mut bytes = 0;
            for (c, k) in chunks.iter().zip(&key_chunks) {
                let t = Instant::now();
                let imgs: Vec<_> = decoder.decode_batch(c).into_iter().map(Result::unwrap).collect();
                decoder.stream().synchronize().unwrap();
                phases[0] += t.elapsed().as_secs_f64();
                let t = Instant::now();
                let crops: Vec<GpuCrop> = imgs
                    .iter()
                    .zip(k.iter())
                    .map(|(img, key)| {
                        let steps = resolve_steps(&spec, &rng(key, epoch), img.width, img.height).unwrap();
                        GpuCrop::from_steps(&steps, img.width, img.height, SIZE).unwrap()
                    })
                    .collect();
                let refs: Vec<_> = imgs.iter().collect();
                let out = gpu.resized_crop_flip(&refs, &crops, SIZE).unwrap();
                gpu.stream.synchronize().unwrap();
                phases[1] += t.elapsed().as_secs_f64();
                let t = Instant::now();
                gpu.copy_to_pinned(&out, &mut pinned).unwrap();
                let host = pinned.as_slice();
                assert!(host[..out.len()].iter().any(|&b| b != 0));
                bytes += out.len();
                phases[2] += t.elapsed().as_secs_f64();
            }
            bytes
        };
        let mut phases = [0.0; 3];
        full(&mut decoder, 0, &mut phases);
        let mut phases = [0.0; 3];
        let (mut n, mut epoch, t0) = (0usize, 1u64, Instant::now());
        while t0.elapsed().as_secs_f64() < 1.5 {
            let bytes = full(&mut decoder, epoch, &mut phases);
            assert_eq!(bytes, jpegs.len() * (SIZE * SIZE * 3) as usize);
            n += jpegs.len();
            epoch += 1;
        }
        let full_rate = n as f64 / t0.elapsed().as_secs_f64();
        let us = |s: f64| s * 1e6 / n as f64;
        println!(
            "gpu-bench batch={batch:<4} jpegs={} ({mean_kb:.0} KB avg, 500x375) backend={backend} decode-only={decode_rate:.0} img/s train-pipeline={full_rate:.0} img/s (per image: decode {:.1} us, crop kernel {:.1} us, d2h {:.1} us)",
            jpegs.len(),
            us(phases[0]),
            us(phases[1]),
            us(phases[2])
        );
    }
    {
        let mut cuda = gpu::GpuDecoder::with_backend(&gpu, Backend::Default, MAX_PIXELS).unwrap();
        let chunks: Vec<Vec<&[u8]>> = jpegs
            .chunks(128)
            .map(|c| c.iter().map(Vec::as_slice).collect())
            .collect();
        let run = |cuda: &mut gpu::GpuDecoder| {
            for c in &chunks {
                assert!(cuda.decode_batch(c).iter().all(Result::is_ok));
                cuda.stream().synchronize().unwrap();
            }
        };
        run(&mut cuda);
        let (mut n, t0) = (0usize, Instant::now());
        while t0.elapsed().as_secs_f64() < 1.5 {
            run(&mut cuda);
            n += jpegs.len();
        }
        println!(
            "gpu-bench-cuda batch=128 backend=cuda decode-only={:.0} img/s",
            n as f64 / t0.elapsed().as_secs_f64()
        );
    }
    let (free_after, _) = gpu.ctx.mem_get_info().unwrap();
    println!(
        "gpu-bench device memory: {:.1} GiB total, free {:.2} GiB before, {:.2} GiB after",
        total as f64 / f64::from(1u32 << 30),
        free_before as f64 / f64::from(1u32 << 30),
        free_after as f64 / f64::from(1u32 << 30)
    );
}

/// Every transform of the core set through the GPU runner (nvJPEG, then
/// the fused kernel or a kernel per step) against the CPU path's augmenter
/// on nvJPEG's pixels, on the photos, over two epochs: within a mean
/// absolute difference of 2 per image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_runner_matches_the_cpu_on_every_transform() {
    let Some(gpu) = gpu_or_skip("gpu_runner_matches_the_cpu_on_every_transform") else {
        return;
    };
    let config = gpu::GpuRunnerConfig {
        lanes: 2,
        max_batch: 8,
        ..Default::default()
    };
    // Epoch 0 on every SM, epoch 1 on lanes confined to 8 of them (a green
    // context, as `--gpu-sms 8` makes): the same pixels either way.
    let mut confined = gpu.with_new_stream().unwrap();
    let share = confined.confine(SmShare::Count(8)).unwrap();
    assert!(
        matches!(&share, gpu::Confinement::Partition(p) if p.sms == 8),
        "{share}"
    );
    println!("gpu-steps   epoch 0 on every sm, epoch 1 on {share}");
    let runners = [
        gpu::GpuRunner::start(&gpu, config).unwrap(),
        gpu::GpuRunner::start(&confined, config).unwrap(),
    ];
    let photos = photos();
    // The CPU's reference runs on nvJPEG's pixels, as the lanes do: the
    // two decoders differ by a grey level here and there
    // (`gpu_decode_and_train_crop_match_the_cpu_worker`), which histogram
    // and threshold ops would turn into whole steps of their tables.
    let mut decoder = gpu.decoder(MAX_PIXELS).unwrap();
    let jpegs: Vec<&[u8]> = photos.iter().map(|(_, d)| d.as_slice()).collect();
    let nvjpeg: HashMap<String, RgbImage> = decoder
        .decode_batch(&jpegs)
        .into_iter()
        .zip(&photos)
        .map(|(r, (key, _))| {
            let img = r.unwrap_or_else(|e| panic!("gpu decode of {key}: {e}"));
            let host = gpu.to_host(&img.buf).unwrap();
            let row = img.width as usize * 3;
            let pixels = host
                .chunks(img.pitch as usize)
                .take(img.height as usize)
                .flat_map(|r| &r[..row])
                .copied()
                .collect();
            let rgb = RgbImage {
                width: img.width,
                height: img.height,
                pixels,
            };
            (key.clone(), rgb)
        })
        .collect();
    drop(decoder);
    // The parity harness: every op of the registry with an example
    // (random ranges, so each sample draws its own parameters), on every
    // photo and on odd and tiny images. Ops with a GPU kernel must match
    // the CPU; the others must be handed to the CPU before decoding.
    let mut specs: Vec<(String, TransformSpec)> = vec![
        ("train".into(), TransformSpec::train(SIZE)),
        ("eval".into(), TransformSpec::eval(SIZE)),
        (
            "random-crop-padded".into(),
            TransformSpec::from_json(
                r#"{"ops": [{"op": "Resize", "size": 240}, {"op": "RandomCrop", "size": 224, "padding": 24}]}"#,
            )
            .unwrap(),
        ),
        (
            "center-crop-past-the-edges".into(),
            TransformSpec::from_json(r#"{"ops": [{"op": "Resize", "size": 300}, {"op": "CenterCrop", "size": 400}]}"#)
                .unwrap(),
        ),
    ];
    for (op, example) in stoker_core::transform::EXAMPLES {
        specs.push((
            op.to_string(),
            TransformSpec::from_json(&stoker_core::transform::example_spec(example, SIZE)).unwrap(),
        ));
    }
    println!("gpu-steps   transform                     images  mean-mad  worst-mad");
    for (name, spec) in specs {
        spec.validate().unwrap();
        let spec = Arc::new(spec);
        let (mut worst, mut total, mut n, mut on_cpu) = (0.0f64, 0.0, 0, 0);
        for epoch in 0..2 {
            let samples = photos
                .iter()
                .enumerate()
                .map(|(position, (key, data))| {
                    let seed = ItemSeed::new(SEED, epoch, "photos");
                    let data = bytes::Bytes::from(data.clone());
                    gpu::GpuSample::planned(key.clone(), position as u64, data, &spec, seed, 1 << 28)
                        .unwrap_or_else(|e| panic!("{name} {key}: {e}"))
                })
                .collect();
            let results = runners[epoch as usize]
                .run(samples, gpu::Recipe::new(Arc::clone(&spec)))
                .await
                .unwrap();
            assert_eq!(results.len(), photos.len());
            for r in results {
                let p = match r {
                    gpu::GpuResult::Done(p) => p,
                    gpu::GpuResult::Cpu { sample, reason } if reason.ends_with("runs on the cpu") => {
                        // A step without a kernel: the whole sample goes to
                        // the CPU before it is decoded.
                        assert!(reason.starts_with("step "), "{name} {}: {reason}", sample.key);
                        on_cpu += 1;
                        continue;
                    }
                    other => panic!("{name}: not done on the gpu: {other:?}"),
                };
                let img = nvjpeg[&p.key].clone();
                let steps = resolve_steps(
                    &spec,
                    &ItemSeed::new(SEED, epoch, "photos").sample(p.position),
                    img.width,
                    img.height,
                )
                .unwrap();
                assert!(steps.iter().all(gpu::gpu_runs), "{name}: {steps:?}");
                let cpu = Augmenter::new().run(img, &steps).unwrap();
                assert_eq!((p.width, p.height), (cpu.width, cpu.height), "{name} {}", p.key);
                let m = mad(&p.pixels, &cpu.pixels);
                worst = worst.max(m);
                total += m;
                n += 1;
            }
        }
        println!(
            "gpu-steps   {name:<28} {n:>7}  {:>8.3}  {worst:>9.3}  (to the cpu: {on_cpu})",
            total / f64::from(n.max(1))
        );
        // Every step's kernel gives the CPU's bytes on the same pixels
        // (gpu_steps, gpu_chain) but the bilinear crop-resize, whose bound
        // this is.
        assert!(worst <= 2.0, "{name}: worst mad {worst:.3} vs the cpu");
    }
}

/// `--device cuda` fails at once, naming what is missing, where no GPU can
/// be used; where one can, the worker starts and says it serves on it.
#[test]
fn worker_device_cuda_fails_without_a_gpu() {
    match gpu::probe() {
        Err(reason) => {
            let out = stoker()
                .args(["worker", "--listen", "127.0.0.1:0", "--device", "cuda"])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "worker started without a gpu: {stderr}");
            assert!(stderr.contains("--device cuda: no usable gpu"), "{stderr}");
            assert!(stderr.contains(&reason.to_string()), "{reason} not in {stderr}");
            println!("--device cuda without a gpu: {}", stderr.trim());
        }
        Ok(info) => {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("worker.log");
            let w = Worker::start_logging_to(1, &["--device", "cuda"], &[("STOKER_LOG", "info")], &log);
            drop(w);
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(text.contains("serving on gpu"), "{text}");
            println!("--device cuda with {info}: {}", text.trim());
        }
    }
}

/// An ImageFolder of ImageNet-like JPEGs cut from the photos, plus JPEGs
/// the GPU cannot take (progressive goes to nvJPEG's CUDA backend; grey,
/// CMYK and a PNG named .jpg go back to the CPU path; a truncated JPEG is
/// skipped by both). Returns the key of the truncated one.
pub(crate) fn gpu_dataset(dir: &Path, per_class: usize) -> String {
    let photos = photos();
    for (i, (_, data)) in photos.iter().enumerate() {
        let class = dir.join(format!("class{}", i % 2));
        std::fs::create_dir_all(&class).unwrap();
        let n = per_class.div_ceil(photos.len() / 2);
        for (j, jpeg) in synth::imagenet_like_from_photo(data, n, (500, 375), 90, i as u64)
            .unwrap()
            .into_iter()
            .enumerate()
        {
            std::fs::write(class.join(format!("p{i}-{j}.jpg")), jpeg).unwrap();
        }
    }
    let odd = dir.join("odd");
    std::fs::create_dir_all(&odd).unwrap();
    let img = synth::procedural(320, 240, 5);
    let encode = |pixels: &[u8], color, progressive| {
        let mut out = Vec::new();
        let mut e = jpeg_encoder::Encoder::new(&mut out, 90);
        e.set_progressive(progressive);
        e.encode(pixels, 320, 240, color).unwrap();
        out
    };
    let grey: Vec<u8> = img.pixels.chunks(3).map(|p| p[1]).collect();
    let cmyk: Vec<u8> = img.pixels.chunks(3).flat_map(|p| [p[0], p[1], p[2], 30]).collect();
    let progressive = encode(&img.pixels, jpeg_encoder::ColorType::Rgb, true);
    std::fs::write(odd.join("progressive.jpg"), &progressive).unwrap();
    std::fs::write(
        odd.join("grey.jpg"),
        encode(&grey, jpeg_encoder::ColorType::Luma, false),
    )
    .unwrap();
    std::fs::write(
        odd.join("cmyk.jpg"),
        encode(&cmyk, jpeg_encoder::ColorType::Cmyk, false),
    )
    .unwrap();
    std::fs::write(
        odd.join("png.jpg"),
        include_bytes!("../../worker/formats/testdata/tiny.png"),
    )
    .unwrap();
    let good = synth::encode_jpeg(&img, 90).unwrap();
    std::fs::write(odd.join("truncated.jpg"), &good[..good.len() / 2]).unwrap();
    "odd/truncated".to_owned()
}

pub(crate) async fn worker_info(addr: &str) -> stoker_proto::pb::InfoResponse {
    let mut client = stoker_proto::pb::worker_client::WorkerClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .info(stoker_proto::pb::InfoRequest::default())
        .await
        .unwrap()
        .into_inner()
}

/// Every sample of an epoch with its pixels, and the skipped samples with
/// their reasons.
pub(crate) async fn epoch_pixels(
    addr: &str,
    dataset: &str,
    epoch: u64,
) -> (HashMap<String, Vec<u8>>, Vec<(String, String)>) {
    let mut config = LoaderConfig::new(vec![addr.to_owned()], dataset, 16, TransformSpec::train(SIZE));
    config.seed = SEED;
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(epoch).unwrap();
    let mut out = HashMap::new();
    let (mut batches, mut padded) = (0u64, 0usize);
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        batches += 1;
        padded += batch.padded;
        // Padding (the index counts a sample the worker skipped, so the
        // last batch is filled up) repeats a delivered sample and is marked:
        // only the first `real()` samples are deliveries.
        for (i, key) in batch.keys[..batch.real()].iter().enumerate() {
            assert!(
                out.insert(key.clone(), batch.image(i).to_vec()).is_none(),
                "{key} twice"
            );
        }
    }
    assert_eq!(
        Some(batches),
        loader.batches_per_epoch(),
        "every rank takes the planned steps"
    );
    assert_eq!(
        out.len() + padded,
        batches as usize * 16,
        "every slot is a delivery or marked padding"
    );
    let mut skipped = stream.report().skip_reasons;
    skipped.sort();
    (out, skipped)
}

/// The GPU test's dataset through a CPU worker, in CI: each sample once,
/// the truncated JPEG skipped, and the epoch's last batch, which the index
/// counts but the skip leaves empty, all marked padding. (Counting that
/// padding as deliveries was the "odd/png twice" of the GPU test: 304
/// samples of 305 fill 19 batches of 16, and the 20th the index promises
/// repeats the last sample delivered, whichever path it took.) The GPU
/// worker's hand-back path is covered without a GPU by the pipeline's unit
/// tests (emulated lanes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpu_test_dataset_is_served_once_by_a_cpu_worker() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    let truncated = gpu_dataset(&images, 150);
    pack(&images, shards.to_str().unwrap(), "4M", &[]);
    let expected = image_folder_keys(&images).len() - 1;
    let cpu = Worker::start_with(4, &["--device", "cpu"], &[]);
    let (samples, skipped) = epoch_pixels(&cpu.addr, shards.to_str().unwrap(), 1).await;
    assert_eq!(samples.len(), expected);
    assert!(samples.contains_key("odd/png") && samples.contains_key("odd/grey"));
    let skipped: Vec<&str> = skipped.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(skipped, [truncated.as_str()]);
}

/// A `--device cuda` worker, its lanes on 16 SMs, serves what a
/// `--device cpu` worker serves:
/// the same samples, the same skips, pixels within a mean absolute
/// difference of 2; every sample once per epoch over `stoker stream`; and
/// its device memory does not grow from epoch to epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_worker_serves_what_a_cpu_worker_serves() {
    let Some(gpu) = gpu_or_skip("a_gpu_worker_serves_what_a_cpu_worker_serves") else {
        return;
    };
    drop(gpu);
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    let truncated = gpu_dataset(&images, 150);
    pack(&images, shards.to_str().unwrap(), "4M", &[]);
    let dataset = shards.to_str().unwrap();
    let expected: Vec<(String, i64)> = image_folder_keys(&images)
        .into_iter()
        .filter(|(k, _)| *k != truncated)
        .collect();

    let cpu = Worker::start_with(4, &["--device", "cpu"], &[]);
    // Its lanes confined to 16 SMs (a green context): the same samples
    // and pixels as on every SM.
    let gpu_args = [
        "--device",
        "cuda",
        "--gpu-sms",
        "16",
        "--gpu-lanes",
        "2",
        "--gpu-batch",
        "64",
        "--gpu-batch-memory",
        "256M",
    ];
    let gpu = Worker::start_with(4, &gpu_args, &[]);
    let info = worker_info(&gpu.addr).await;
    assert_eq!(info.device, "cuda", "{info:?}");

    let (on_cpu, cpu_skipped) = epoch_pixels(&cpu.addr, dataset, 1).await;
    let (on_gpu, gpu_skipped) = epoch_pixels(&gpu.addr, dataset, 1).await;
    let skipped_keys: Vec<&str> = cpu_skipped.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(skipped_keys, [truncated.as_str()], "{cpu_skipped:?}");
    assert_eq!(
        gpu_skipped, cpu_skipped,
        "the gpu worker skips with the cpu worker's reasons"
    );
    let mut keys: Vec<&String> = on_gpu.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        on_cpu
            .keys()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert_eq!(keys.len(), expected.len());
    let (mut worst, mut total) = (("", 0.0f64), 0.0);
    for key in &keys {
        let m = mad(&on_gpu[*key], &on_cpu[*key]);
        total += m;
        if m > worst.1 {
            worst = (key.as_str(), m);
        }
    }
    let mean = total / keys.len() as f64;
    let info = worker_info(&gpu.addr).await;
    println!(
        "gpu-worker epoch: {} samples, {} on the gpu, {} handed to the cpu; pixels vs cpu worker: mean mad {mean:.3}, worst {:.3} ({})",
        keys.len(),
        info.gpu_samples,
        info.gpu_to_cpu,
        worst.1,
        worst.0
    );
    assert!(
        worst.1 <= 2.0,
        "{} differs from the cpu worker by mad {:.3}",
        worst.0,
        worst.1
    );
    // Progressive goes to nvJPEG's CUDA backend; grey and CMYK go back to
    // the CPU path, unless a CPU thread took them from the lanes' backlog
    // first, as it may take any JPEG; the PNG never goes to the GPU, nor
    // does the truncated JPEG (the route reads its header, as the CPU
    // path would, before queueing it). Each of the other 303 JPEGs went
    // through exactly one of those, and each delivered sample was finished
    // on the GPU or on the CPU, once.
    assert_eq!(
        (info.gpu_samples + info.cpu_jpeg_samples + info.gpu_to_cpu) as usize,
        keys.len() - 1,
        "{info:?}"
    );
    assert!(info.gpu_to_cpu <= 3, "{info:?}");
    assert_eq!((info.gpu_samples + info.cpu_samples) as usize, keys.len(), "{info:?}");

    // Exactly once over `stoker stream`, and a flat device footprint.
    let run = stream(
        &[&gpu],
        dataset,
        &["--batch-size", "32", "--image-size", "224", "--epochs", "2"],
        &[],
    );
    assert_exactly_once(&run, &expected, 0..2);
    let after_two = worker_info(&gpu.addr).await;
    let run = stream(
        &[&gpu],
        dataset,
        &[
            "--batch-size",
            "32",
            "--image-size",
            "224",
            "--epochs",
            "6",
            "--start-epoch",
            "2",
        ],
        &[],
    );
    assert_exactly_once(&run, &expected, 2..8);
    let after_eight = worker_info(&gpu.addr).await;
    let mib = |b: u64| b as f64 / 1048576.0;
    println!(
        "gpu-worker device pool: after 2 epochs {:.1} MiB held (peak {:.1}, in use {:.1}); after 8 epochs {:.1} MiB held (peak {:.1}, in use {:.1})",
        mib(after_two.gpu_memory_bytes),
        mib(after_two.gpu_memory_peak_bytes),
        mib(after_two.gpu_memory_in_use_bytes),
        mib(after_eight.gpu_memory_bytes),
        mib(after_eight.gpu_memory_peak_bytes),
        mib(after_eight.gpu_memory_in_use_bytes)
    );
    // Bounded by the configuration (2 lanes x 256 MiB), and nothing left
    // allocated between epochs, after 2 epochs or 8: no growth.
    assert!(after_eight.gpu_memory_peak_bytes <= 2 * (256 << 20), "{after_eight:?}");
    assert_eq!(after_two.gpu_memory_in_use_bytes, 0, "{after_two:?}");
    assert_eq!(after_eight.gpu_memory_in_use_bytes, 0, "{after_eight:?}");
}

#[test]
fn worker_device_auto_and_cpu_serve() {
    for device in ["auto", "cpu"] {
        let w = Worker::start_with(1, &["--device", device], &[]);
        assert!(w.addr.starts_with("127.0.0.1:"), "{}", w.addr);
    }
    let out = stoker().args(["worker", "--device", "tpu"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tpu"));
}
