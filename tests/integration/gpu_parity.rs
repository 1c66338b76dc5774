//! GPU parity, repeated: a GPU worker must give every sample the CPU
//! worker's image (within the decoders' rounding) in every round, not just
//! most of them. A race shows up once in hundreds of decodes, so each test
//! here repeats its comparison many times, with many progressive JPEGs
//! (the ones nvJPEG's CUDA backend decodes one at a time), and names the
//! worst samples with their JPEG kind and the path each took.
//!
//! `STOKER_GPU_PARITY_ROUNDS` sets the rounds (scripts/gpu-check.sh sets
//! it), `STOKER_GPU_PARITY_IMAGES` the lanes test's images; without a
//! usable GPU each test prints `skipped: <reason>`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use stoker_image::decode::{ImageKind, decode};
use stoker_synth as synth;

use crate::gpu::{epoch_pixels, gpu_or_skip, mad, photos};
use crate::support::{Worker, pack};

const MAX_PIXELS: u64 = 100_000_000;
/// ImageNet-like sizes, as in the issue that found the race.
const SIZES: [(u32, u32); 5] = [(500, 375), (375, 500), (640, 480), (500, 333), (320, 240)];

fn rounds(default: usize) -> usize {
    std::env::var("STOKER_GPU_PARITY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How a test JPEG was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Baseline,
    Progressive,
    Grey,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Baseline => "baseline",
            Kind::Progressive => "progressive",
            Kind::Grey => "greyscale",
        }
    }
}

/// `n` JPEGs cut from the photos at the five sizes: every third one
/// progressive, every thirteenth greyscale, the rest baseline of quality
/// 75 to 95. Each with a name and its kind.
fn parity_jpegs(n: usize) -> Vec<(String, Kind, Vec<u8>)> {
    let photos = photos();
    let per_cut = n.div_ceil(photos.len() * SIZES.len()).max(1);
    let mut out = Vec::with_capacity(n);
    'cuts: for (s, &size) in SIZES.iter().enumerate() {
        for (p, (name, photo)) in photos.iter().enumerate() {
            let cuts = synth::imagenet_like_from_photo(photo, per_cut, size, 95, (s * 100 + p) as u64).unwrap();
            for (c, jpeg) in cuts.into_iter().enumerate() {
                if out.len() == n {
                    break 'cuts;
                }
                let i = out.len();
                let kind = if i % 13 == 12 {
                    Kind::Grey
                } else if i % 3 == 1 {
                    Kind::Progressive
                } else {
                    Kind::Baseline
                };
                let img = decode(ImageKind::Jpeg, &jpeg, MAX_PIXELS).unwrap();
                let (w, h) = (img.width as u16, img.height as u16);
                let quality = 75 + (i % 5) as u8 * 5;
                let mut bytes = Vec::new();
                let mut e = jpeg_encoder::Encoder::new(&mut bytes, quality);
                e.set_progressive(kind == Kind::Progressive);
                match kind {
                    Kind::Grey => {
                        let grey: Vec<u8> = img.pixels.chunks(3).map(|px| px[1]).collect();
                        e.encode(&grey, w, h, jpeg_encoder::ColorType::Luma).unwrap();
                    }
                    _ => e.encode(&img.pixels, w, h, jpeg_encoder::ColorType::Rgb).unwrap(),
                }
                out.push((format!("{name}-{}x{}-{c}", size.0, size.1), kind, bytes));
            }
        }
    }
    out
}

/// Lanes decoding at once, as a GPU worker's do.
const LANES: usize = 4;

/// nvJPEG's single-image decodes (the CUDA backend, which takes the
/// progressive JPEGs) give, byte for byte, what each gives decoded alone
/// on an idle GPU, while [`LANES`] threads decode mixed batches at once,
/// each on its own stream with its own decoder, as a worker's lanes do.
/// The other lanes keep the GPU busy, so a lane's stream runs behind its
/// thread: the case in which a jpeg state's next decode used to overwrite
/// the staging that its previous one had yet to copy to the device.
#[test]
fn gpu_single_decodes_on_busy_lanes_match_each_decoded_alone() {
    let Some(gpu) = gpu_or_skip("gpu_single_decodes_on_busy_lanes_match_each_decoded_alone") else {
        return;
    };
    // STOKER_GPU_PARITY_IMAGES: fewer under compute-sanitizer.
    let images = std::env::var("STOKER_GPU_PARITY_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(192);
    let jpegs = parity_jpegs(images);
    let colour: Vec<usize> = (0..jpegs.len()).filter(|&i| jpegs[i].1 != Kind::Grey).collect();
    // Each decoded alone, the GPU idle before and after it.
    let mut decoder = gpu.decoder(MAX_PIXELS).unwrap();
    let alone: HashMap<usize, Vec<u8>> = colour
        .iter()
        .map(|&i| {
            let img = decoder.decode_batch(&[&jpegs[i].2]).pop().unwrap().unwrap();
            (i, gpu.to_host(&img.buf).unwrap())
        })
        .collect();
    drop(decoder);
    let rounds = rounds(20);
    let lanes: Vec<(Vec<String>, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..LANES)
            .map(|lane| {
                let (gpu, jpegs, colour, alone) = (&gpu, &jpegs, &colour, &alone);
                scope.spawn(move || {
                    let gpu = gpu.with_new_stream().unwrap();
                    gpu.ctx.bind_to_thread().unwrap();
                    let mut decoder = gpu.decoder(MAX_PIXELS).unwrap();
                    let (mut wrong, mut singles) = (Vec::new(), 0usize);
                    for round in 0..rounds {
                        // Each lane and round its own order: a rotation,
                        // every other one reversed.
                        let mut order = colour.clone();
                        let turn = (round * 7 + lane * 29) % order.len();
                        order.rotate_left(turn);
                        if (round + lane) % 2 == 1 {
                            order.reverse();
                        }
                        let batch: Vec<&[u8]> = order.iter().map(|&i| &jpegs[i].2[..]).collect();
                        let decoded = decoder.decode_routed(&batch);
                        for (&i, (r, path)) in order.iter().zip(&decoded) {
                            let img = r.as_ref().unwrap_or_else(|e| panic!("{}: {e}", jpegs[i].0));
                            let host = gpu.to_host(&img.buf).unwrap();
                            if *path == stoker_worker::gpu::DecodePath::Single {
                                singles += 1;
                            }
                            if host != alone[&i] {
                                wrong.push(format!(
                                    "lane {lane}, round {round}: {} ({}, {}): mad {:.2} against its decode alone",
                                    jpegs[i].0,
                                    jpegs[i].1.name(),
                                    path.name(),
                                    mad(&host, &alone[&i])
                                ));
                            }
                        }
                    }
                    (wrong, singles)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let singles: usize = lanes.iter().map(|(_, s)| s).sum();
    let wrong: Vec<String> = lanes.into_iter().flat_map(|(w, _)| w).collect();
    println!(
        "gpu-decode-race: {LANES} lanes x {rounds} rounds of {} images, {singles} single decodes, {} images differ from their decode alone",
        colour.len(),
        wrong.len()
    );
    for w in wrong.iter().take(10) {
        println!("gpu-decode-race: {w}");
    }
    assert!(singles > 0, "no JPEG took the single-image path");
    assert!(wrong.is_empty(), "{} images differ:\n{}", wrong.len(), wrong.join("\n"));
}

/// A folder of [`parity_jpegs`] in two classes, and each key's kind.
fn parity_dataset(dir: &Path, n: usize) -> HashMap<String, Kind> {
    let mut kinds = HashMap::new();
    for (i, (name, kind, bytes)) in parity_jpegs(n).into_iter().enumerate() {
        let class = format!("class{}", i % 2);
        std::fs::create_dir_all(dir.join(&class)).unwrap();
        std::fs::write(dir.join(&class).join(format!("{name}.jpg")), bytes).unwrap();
        kinds.insert(format!("{class}/{name}"), kind);
    }
    kinds
}

/// The path a GPU worker's log (at trace level) says `key` took the last
/// time it was decoded: the lanes' batched or single decode, a CPU
/// thread's steal, or a hand-back to the CPU path.
fn path_of(log: &str, key: &str) -> String {
    let needle = format!("key={key} ");
    log.lines()
        .rev()
        .filter(|l| l.contains(&needle))
        .find_map(|l| {
            if l.contains("handed the sample to the cpu") {
                Some("handed-back".to_owned())
            } else {
                let path = l.split("path=").nth(1)?.split_whitespace().next()?;
                Some(path.trim_matches('"').to_owned())
            }
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Two GPU workers (the whole host: lanes and CPU threads stealing; and
/// `--gpu-only`) against a CPU worker, over many epochs of a dataset with
/// a third of its JPEGs progressive: every sample of every round within a
/// mean absolute difference of 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_workers_match_the_cpu_worker_in_every_round() {
    let Some(gpu) = gpu_or_skip("gpu_workers_match_the_cpu_worker_in_every_round") else {
        return;
    };
    drop(gpu);
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    let kinds = parity_dataset(&images, 608);
    pack(&images, shards.to_str().unwrap(), "4M", &[]);
    let dataset = shards.to_str().unwrap();
    let cpu = Worker::start_with(8, &["--device", "cpu"], &[]);
    let trace = [(
        "STOKER_LOG",
        "info,stoker_worker::gpu::lane=trace,stoker_worker::pipeline::route=trace",
    )];
    let logs = [dir.path().join("whole-host.log"), dir.path().join("gpu-only.log")];
    let modes: [(&str, &[&str]); 2] = [
        ("whole host", &["--device", "cuda"]),
        ("--gpu-only", &["--device", "cuda", "--gpu-only"]),
    ];
    let workers: Vec<Worker> = modes
        .iter()
        .zip(&logs)
        .map(|((_, args), log)| Worker::start_logging_to(8, args, &trace, log))
        .collect();
    let rounds = rounds(4);
    let mut failures = Vec::new();
    // Per mode: samples compared, and the worst of all rounds.
    let mut totals: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for round in 0..rounds {
        let epoch = round as u64 + 1;
        let (on_cpu, cpu_skipped) = epoch_pixels(&cpu.addr, dataset, epoch).await;
        assert!(cpu_skipped.is_empty(), "{cpu_skipped:?}");
        assert_eq!(on_cpu.len(), kinds.len());
        let mut line = format!("gpu-parity round {round}:");
        for (((mode, _), worker), log) in modes.iter().zip(&workers).zip(&logs) {
            let (on_gpu, skipped) = epoch_pixels(&worker.addr, dataset, epoch).await;
            assert!(skipped.is_empty(), "{mode}: {skipped:?}");
            assert_eq!(on_gpu.len(), on_cpu.len(), "{mode}");
            let mut by_mad: Vec<(f64, &String)> = on_cpu.iter().map(|(k, px)| (mad(&on_gpu[k], px), k)).collect();
            by_mad.sort_by(|a, b| b.0.total_cmp(&a.0));
            let (worst, key) = by_mad[0];
            let total = totals.entry(mode).or_default();
            total.0 += by_mad.len();
            total.1 = total.1.max(worst);
            write!(line, " {mode} worst mad {worst:.2} ({key}, {});", kinds[key].name()).unwrap();
            let text = std::fs::read_to_string(log).unwrap_or_default();
            for (m, key) in by_mad.iter().take_while(|(m, _)| *m > 2.0) {
                failures.push(format!(
                    "round {round}, {mode}: {key} ({}, path {}) mad {m:.2} against the cpu worker",
                    kinds[*key].name(),
                    path_of(&text, key)
                ));
            }
        }
        println!("{line}");
    }
    for (mode, (samples, worst)) in &totals {
        println!("gpu-vs-cpu worst mad over {rounds} rounds, {mode}: {worst:.2} ({samples} samples compared)");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
