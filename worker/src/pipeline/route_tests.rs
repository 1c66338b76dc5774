//! The GPU worker's routing without a GPU: emulated lanes (see
//! `GpuRunner::emulated`) finish some samples and hand others back, and
//! the CPU pool takes JPEGs while they have a backlog. Whatever mix of
//! paths an item's samples take, each comes back exactly once, with
//! the CPU worker's pixels and skip reasons.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use stoker_core::{DatasetUri, TransformSpec};
use tokio::sync::mpsc;

use super::super::test_shards::{FIRST_TAR, image_folder_shard, tar_dataset};
use super::super::{Item, SkipKind, WorkerConfig, WorkerContext, run_item};
use crate::gpu::{GpuResult, GpuRunner, GpuRunnerConfig, GpuSample, Recipe};
use stoker_synth as synth;

/// An ImageFolder of 60 JPEGs plus a PNG named .jpg, a grey JPEG and a
/// truncated JPEG, packed into one shard.
async fn dataset(dir: &std::path::Path) -> DatasetUri {
    let mut images: Vec<(String, Vec<u8>)> = (0..60u64)
        .map(|i| {
            let img = synth::procedural(96 + (i as u32 % 5) * 16, 80, i);
            (format!("{i:03}"), synth::encode_jpeg(&img, 90).unwrap())
        })
        .collect();
    images.push((
        "050png".to_owned(),
        include_bytes!("../../formats/testdata/tiny.png").to_vec(),
    ));
    let img = synth::procedural(64, 48, 99);
    let grey: Vec<u8> = img.pixels.chunks(3).map(|p| p[1]).collect();
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, 90)
        .encode(&grey, 64, 48, jpeg_encoder::ColorType::Luma)
        .unwrap();
    images.push(("020grey".to_owned(), out));
    let good = synth::encode_jpeg(&img, 90).unwrap();
    images.push(("040truncated".to_owned(), good[..good.len() / 2].to_vec()));
    image_folder_shard(dir, images)
}

/// Every delivered sample by key (failing on a second delivery), and
/// the skip reasons by key, of one item.
async fn run(ctx: Arc<WorkerContext>, uri: DatasetUri, start: u64, end: Option<u64>) -> Delivered {
    run_spec(ctx, uri, start, end, TransformSpec::train(32)).await
}

async fn run_spec(
    ctx: Arc<WorkerContext>,
    uri: DatasetUri,
    start: u64,
    end: Option<u64>,
    spec: TransformSpec,
) -> Delivered {
    let mut item = item(uri, spec);
    (item.start, item.end) = (start, end);
    run_to_end(ctx, item).await
}

/// Every delivered sample of `item` by key (failing on a second delivery),
/// with its fields, and the skip reasons by key.
async fn run_to_end(ctx: Arc<WorkerContext>, item: Item) -> Delivered {
    let (start, end) = (item.start, item.end);
    let (tx, mut rx) = mpsc::channel(2);
    let task = tokio::spawn(run_item(ctx, item, tx));
    let mut out = Delivered::default();
    let mut done = false;
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk.unwrap();
        assert!(!done, "a chunk after the last one");
        done = chunk.done;
        for p in chunk.samples {
            assert!(
                (start..end.unwrap_or(u64::MAX)).contains(&p.position),
                "{} at {}",
                p.key,
                p.position
            );
            let again = out.samples.insert(p.key.clone(), (p.position, p.pixels.to_vec()));
            assert!(again.is_none(), "{} delivered twice", p.key);
            out.fields.insert(p.key.clone(), p.fields);
        }
        for s in chunk.skipped {
            assert!(
                out.skipped.insert(s.key.clone(), s.reason).is_none(),
                "{} skipped twice",
                s.key
            );
        }
    }
    task.await.unwrap();
    assert!(done, "the item ended without its last chunk");
    for key in out.skipped.keys() {
        assert!(!out.samples.contains_key(key), "{key} both delivered and skipped");
    }
    out
}

#[derive(Default)]
struct Delivered {
    samples: HashMap<String, (u64, Vec<u8>)>,
    fields: HashMap<String, Vec<Option<stoker_core::FieldValue>>>,
    skipped: HashMap<String, String>,
}

fn config(threads: usize) -> WorkerConfig {
    WorkerConfig::default().with_threads(threads)
}

/// `sample` finished as a lane finishes it: the image, its masks and its
/// views, as the CPU path makes them.
fn as_a_lane(sample: &GpuSample, r: &Recipe) -> Result<crate::outcome::Processed, crate::outcome::Skipped> {
    let metrics = Default::default();
    super::super::cpu::process_sample_with(
        sample.clone_raw(),
        &sample.plan,
        100_000_000,
        &metrics,
        &r.fields,
        &r.views,
        Vec::new(),
    )
}

/// Emulated lanes: every third sample is finished as the GPU would
/// finish it (the CPU path's result), the others are handed back; each
/// answer takes `delay`, so that a backlog builds up. The CPU pool may
/// take JPEGs from it exactly when `steal` says.
fn handing_back(delay: Duration, steal: bool) -> GpuRunner {
    let lanes = GpuRunnerConfig {
        lanes: 1,
        max_batch: 4,
        ..GpuRunnerConfig::default()
    };
    GpuRunner::emulated(lanes, steal, move |sample: GpuSample, r: &Recipe| {
        std::thread::sleep(delay);
        let n: u64 = sample.key.bytes().map(u64::from).sum();
        if n.is_multiple_of(3)
            && let Ok(p) = as_a_lane(&sample, r)
        {
            return GpuResult::Done(p);
        }
        GpuResult::Cpu {
            sample,
            reason: "emulated hand-back".to_owned(),
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mix_of_gpu_hand_back_and_cpu_paths_delivers_each_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dataset(dir.path()).await;
    let cpu = Arc::new(WorkerContext::new(config(2)).unwrap());
    let reference = run(Arc::clone(&cpu), uri.clone(), 0, None).await;
    assert_eq!(reference.samples.len(), 62, "60 jpegs, the png and the grey one");
    assert_eq!(reference.skipped.len(), 1, "{:?}", reference.skipped.keys());

    // Three items at once (three clients asking for the shard), as a
    // worker serves them: the lanes' backlog comes from several items.
    let gpu = Arc::new(WorkerContext::with_gpu(config(2), handing_back(Duration::from_millis(3), true)).unwrap());
    let runs = (0..3).map(|_| tokio::spawn(run(Arc::clone(&gpu), uri.clone(), 0, None)));
    for got in futures::future::join_all(runs).await {
        let got = got.unwrap();
        assert_eq!(
            got.skipped, reference.skipped,
            "the cpu worker's skips, with its reasons"
        );
        assert_eq!(got.samples.len(), reference.samples.len());
        for (key, (position, pixels)) in &reference.samples {
            assert_eq!(got.samples.get(key), Some(&(*position, pixels.clone())), "{key}");
        }
    }
    let lanes = &gpu.gpu.as_ref().unwrap().counters;
    let (on_gpu, handed_back) = (
        lanes.images.load(Ordering::Relaxed),
        lanes.to_cpu.load(Ordering::Relaxed),
    );
    let cpu_jpegs = gpu.counters.cpu_jpegs.load(Ordering::Relaxed);
    println!("emulated lanes: {on_gpu} finished, {handed_back} handed back; {cpu_jpegs} jpegs taken by the cpu pool");
    assert!(on_gpu > 0 && handed_back > 0, "both lane answers were exercised");
    assert!(cpu_jpegs > 0, "the pool took jpegs while the lanes had a backlog");
    assert_eq!(
        on_gpu + gpu.counters.cpu_samples.load(Ordering::Relaxed),
        3 * 62,
        "every delivered sample was finished on exactly one path"
    );

    // A sample range of the shard, on the same mix: exactly its samples.
    let part = run(gpu, uri, 10, Some(45)).await;
    let mut expected: Vec<&String> = reference
        .samples
        .iter()
        .filter(|(_, (p, _))| (10..45).contains(p))
        .map(|(k, _)| k)
        .chain(reference.skipped.keys())
        .collect();
    expected.sort();
    let mut keys: Vec<&String> = part.samples.keys().chain(part.skipped.keys()).collect();
    keys.sort();
    assert_eq!(keys, expected);
}

/// One plan per sample: routing makes it, and the lane that takes the
/// sample, the CPU thread that steals it from the lanes' backlog and the
/// CPU pool that runs its hand-back all receive that same plan (none
/// makes its own), whichever path the sample takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lanes_and_the_cpu_receive_the_plan_made_at_routing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dataset(dir.path()).await;
    let lanes = GpuRunnerConfig {
        lanes: 1,
        max_batch: 4,
        ..GpuRunnerConfig::default()
    };
    let lane_saw = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&lane_saw);
    // Every other sample handed back; slow enough for a backlog to steal.
    let runner = GpuRunner::emulated(lanes, true, move |sample: GpuSample, r: &Recipe| {
        std::thread::sleep(Duration::from_millis(2));
        seen.lock()
            .unwrap()
            .push((sample.key.clone(), Arc::as_ptr(&sample.plan) as usize));
        match sample.position % 2 {
            0 => GpuResult::Done(as_a_lane(&sample, r).unwrap()),
            _ => GpuResult::Cpu {
                sample,
                reason: "emulated hand-back".to_owned(),
            },
        }
    });
    let ctx = Arc::new(WorkerContext::with_gpu(config(2), runner).unwrap());
    let got = run(Arc::clone(&ctx), uri, 0, None).await;
    assert_eq!(got.samples.len() + got.skipped.len(), 63);

    let log = ctx.plan_log.entries();
    let mut routed = HashMap::new();
    for (_, key, plan) in log.iter().filter(|(at, ..)| *at == "route") {
        assert!(routed.insert(key.clone(), *plan).is_none(), "{key} planned twice");
    }
    // The truncated JPEG cannot be planned: its skip is the plan's.
    assert_eq!(routed.len(), 62, "every sample but the truncated one planned once");
    let lane_saw = lane_saw.lock().unwrap().clone();
    let cpu_saw: Vec<_> = log.iter().filter(|(at, ..)| *at == "cpu").collect();
    for (key, plan) in &lane_saw {
        assert_eq!(
            routed.get(key),
            Some(plan),
            "the lane received {key}'s plan from routing"
        );
    }
    for (_, key, plan) in &cpu_saw {
        assert_eq!(
            routed.get(key),
            Some(plan),
            "the cpu received {key}'s plan from routing"
        );
    }
    let handed_back = cpu_saw
        .iter()
        .filter(|(_, key, _)| lane_saw.iter().any(|(k, _)| k == key));
    assert!(handed_back.count() > 0, "hand-backs ran on the cpu with their plans");
    assert!(lane_saw.len() > 10, "the lanes took {} samples", lane_saw.len());
    // Each sample ran on one path at least, with the one plan.
    for key in got.samples.keys() {
        assert!(
            lane_saw.iter().any(|(k, _)| k == key) || cpu_saw.iter().any(|(_, k, _)| k == key),
            "{key} delivered without an executor receiving its plan"
        );
    }
}

/// The same slow lanes, whose backlog the steal policy keeps for them
/// (as it does where the lanes would finish each sample sooner than a
/// thread: `StealPolicy`'s rules are tested on a synthetic clock): the
/// pool takes no JPEG from it, only the samples the lanes hand back,
/// and every sample still arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_takes_no_jpeg_the_policy_keeps_for_the_lanes() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dataset(dir.path()).await;
    let cpu = Arc::new(WorkerContext::new(config(2)).unwrap());
    let reference = run(Arc::clone(&cpu), uri.clone(), 0, None).await;
    let gpu = Arc::new(WorkerContext::with_gpu(config(2), handing_back(Duration::from_millis(3), false)).unwrap());
    let runs = (0..3).map(|_| tokio::spawn(run(Arc::clone(&gpu), uri.clone(), 0, None)));
    for got in futures::future::join_all(runs).await {
        let got = got.unwrap();
        assert_eq!(got.samples, reference.samples);
        assert_eq!(got.skipped, reference.skipped);
    }
    let lanes = &gpu.gpu.as_ref().unwrap().counters;
    let stolen = gpu.counters.cpu_jpegs.load(Ordering::Relaxed);
    assert_eq!(stolen, 0, "the pool took {stolen} jpegs the policy kept for the lanes");
    assert_eq!(
        lanes.images.load(Ordering::Relaxed) + lanes.to_cpu.load(Ordering::Relaxed),
        3 * 61,
        "the lanes answered every jpeg of the three items"
    );
}

/// A shard of 12 JPEGs, one of which panics when decoded (its key
/// ends in `TEST_PANIC_SUFFIX`); returns the shard and that key.
async fn dataset_with_a_panic(dir: &std::path::Path) -> (DatasetUri, String) {
    let mut images: Vec<(String, Vec<u8>)> = (0..11u64)
        .map(|i| {
            (
                format!("{i:03}"),
                synth::encode_jpeg(&synth::procedural(96, 80, i), 90).unwrap(),
            )
        })
        .collect();
    let img = synth::procedural(96, 80, 42);
    let name = format!("005{}", super::super::cpu::TEST_PANIC_SUFFIX);
    images.push((name.clone(), synth::encode_jpeg(&img, 90).unwrap()));
    (image_folder_shard(dir, images), format!("a/{name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_decode_skips_that_sample_as_internal_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (uri, bad) = dataset_with_a_panic(dir.path()).await;
    // One pool thread: had the panic killed it (or the process),
    // nothing after it would run.
    let cpu = Arc::new(WorkerContext::new(config(1)).unwrap());
    for round in 1..=2u64 {
        let got = run(Arc::clone(&cpu), uri.clone(), 0, None).await;
        assert_eq!(got.samples.len(), 11, "round {round}: every other sample arrives");
        let reason = got
            .skipped
            .get(&bad)
            .unwrap_or_else(|| panic!("{bad} not skipped: {:?}", got.skipped));
        assert_eq!(
            reason,
            &format!("internal error: decode of {bad} panicked: test: injected panic decoding {bad}")
        );
        assert_eq!(got.skipped.len(), 1);
        assert_eq!(cpu.metrics.skips(SkipKind::Internal), round);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_lanes_host_work_hands_the_sample_to_the_cpu_and_the_lane_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (uri, bad) = dataset_with_a_panic(dir.path()).await;
    let reference = run(Arc::new(WorkerContext::new(config(1)).unwrap()), uri.clone(), 0, None).await;
    // One lane, whose host work panics on a sample the CPU decodes
    // well ("a/003") and finishes the others as the GPU would: the
    // panicking decode's sample too, whose CPU decode then panics.
    let lanes = GpuRunnerConfig {
        lanes: 1,
        max_batch: 4,
        ..GpuRunnerConfig::default()
    };
    let runner = GpuRunner::emulated(lanes, false, |sample: GpuSample, r: &Recipe| {
        if sample.key == "a/003" {
            panic!("lane bug on {}", sample.key);
        }
        match as_a_lane(&sample, r) {
            Ok(p) => GpuResult::Done(p),
            Err(s) => GpuResult::Cpu {
                sample,
                reason: s.reason,
            },
        }
    });
    let mut gpu_only = config(1);
    gpu_only.cpu_jpegs = false;
    let ctx = Arc::new(WorkerContext::with_gpu(gpu_only, runner).unwrap());
    for _ in 0..2 {
        let got = run(Arc::clone(&ctx), uri.clone(), 0, None).await;
        assert_eq!(got.skipped, reference.skipped, "the cpu worker's skip, with its reason");
        assert!(got.skipped[&bad].starts_with("internal error: decode of"));
        assert_eq!(got.samples, reference.samples, "a/003 too, from the cpu");
    }
    let lanes = &ctx.gpu.as_ref().unwrap().counters;
    // Per round: a/003 and the panicking decode handed back, the rest
    // finished by the (one, still running) lane.
    assert_eq!(lanes.to_cpu.load(Ordering::Relaxed), 4);
    assert_eq!(lanes.images.load(Ordering::Relaxed), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_sharing_a_small_budget_read_and_wait_without_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let images = (0..40u64)
        .map(|i| {
            (
                format!("{i:03}"),
                synth::encode_jpeg(&synth::procedural(320, 240, i), 95).unwrap(),
            )
        })
        .collect();
    let uri = image_folder_shard(dir.path(), images);
    // Room for about three samples at once (each holds its bytes and
    // twice its 230 KB decoded image), shared by four items: members
    // wait to be read, samples wait for the rest of their estimate.
    let mut small = config(2);
    small.memory_limit = crate::memory::RESERVE + (1600 << 10);
    let ctx = Arc::new(WorkerContext::new(small).unwrap());
    let runs = (0..4).map(|_| tokio::spawn(run(Arc::clone(&ctx), uri.clone(), 0, None)));
    let all = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(runs))
        .await
        .expect("items waiting for the budget never finished");
    for got in all {
        let got = got.unwrap();
        assert_eq!(got.samples.len(), 40, "skipped: {:?}", got.skipped);
    }
    assert_eq!(ctx.budget.used(), 0, "every reservation came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cpu_jpegs_only_what_the_gpu_hands_back_runs_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dataset(dir.path()).await;
    let mut gpu_only = config(2);
    gpu_only.cpu_jpegs = false;
    let ctx = Arc::new(WorkerContext::with_gpu(gpu_only, handing_back(Duration::from_millis(3), true)).unwrap());
    let got = run(Arc::clone(&ctx), uri, 0, None).await;
    assert_eq!(got.samples.len(), 62);
    assert_eq!(ctx.counters.cpu_jpegs.load(Ordering::Relaxed), 0);
    let lanes = &ctx.gpu.as_ref().unwrap().counters;
    // The 61 JPEGs by name, content and header (the grey one too) went
    // to the lanes; the PNG and the truncated JPEG (refused from its
    // header, which the route reads) never did.
    assert_eq!(
        lanes.images.load(Ordering::Relaxed) + lanes.to_cpu.load(Ordering::Relaxed),
        61
    );
}

/// The route is decided once, before queueing: a sample with a step
/// the lanes have no kernel for goes to the CPU pool and never reaches
/// the lanes (which would hand it back after reading its header).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_with_a_cpu_step_never_reaches_the_lanes() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dataset(dir.path()).await;
    let blur = r#"{"ops": [{"op": "GaussianBlur", "kernel_size": [3, 5]}, {"op": "Resize", "size": 32}, {"op": "CenterCrop", "size": 32}]}"#;
    let spec = TransformSpec::from_json(blur).unwrap();
    let reference = run_spec(
        Arc::new(WorkerContext::new(config(2)).unwrap()),
        uri.clone(),
        0,
        None,
        spec.clone(),
    )
    .await;
    let ctx = Arc::new(WorkerContext::with_gpu(config(2), handing_back(Duration::from_millis(1), true)).unwrap());
    let got = run_spec(Arc::clone(&ctx), uri, 0, None, spec).await;
    assert_eq!(got.samples, reference.samples);
    assert_eq!(got.samples.len(), 62);
    let lanes = &ctx.gpu.as_ref().unwrap().counters;
    assert_eq!(
        (
            lanes.images.load(Ordering::Relaxed),
            lanes.to_cpu.load(Ordering::Relaxed)
        ),
        (0, 0),
        "the lanes received samples they could not run"
    );
}

/// A WebDataset shard of 16x8 JPEGs, each with a mask (`.seg.png`, 16x8)
/// and a caption, but sample 4, whose image is 20x10 (its mask the wrong
/// size).
fn masked_dataset(dir: &std::path::Path) -> DatasetUri {
    let mask: &[u8] = include_bytes!("../../formats/testdata/tiny.png");
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..24u64 {
        let (w, h) = if i == 4 { (20, 10) } else { (16, 8) };
        let jpeg = synth::encode_jpeg(&synth::procedural(w, h, i), 90).unwrap();
        let caption = format!("sample {i}");
        for (ext, body) in [
            ("jpg", jpeg),
            ("seg.png", mask.to_vec()),
            ("txt", caption.into_bytes()),
            ("cls", b"1".to_vec()),
        ] {
            members.push((format!("s{i:03}.{ext}"), body));
        }
    }
    let members: Vec<(&str, &[u8])> = members.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    tar_dataset(dir, &members)
}

/// An item of [`masked_dataset`]: a rotation and a crop, the mask and the
/// caption, and a view.
fn masked_item(uri: DatasetUri) -> Item {
    use stoker_core::{FieldKind, FieldSpec, ViewSpec};
    let spec = |json: &str| TransformSpec::from_json(json).unwrap();
    Item {
        fields: Arc::new([
            FieldSpec::new("seg", "seg.png", FieldKind::Mask),
            FieldSpec::new("caption", "txt", FieldKind::Text),
        ]),
        views: Arc::new([ViewSpec {
            name: "small".to_owned(),
            transform: spec(r#"{"ops": [{"op": "RandomResizedCrop", "size": 4}]}"#),
        }]),
        ..item(
            uri,
            spec(r#"{"ops": [{"op": "RandomRotation", "degrees": 30}, {"op": "RandomResizedCrop", "size": 8}]}"#),
        )
    }
}

/// The whole shard `shard-000000.tar` of `uri` with `spec`, and no fields
/// or views.
fn item(uri: DatasetUri, spec: TransformSpec) -> Item {
    Item {
        dataset: uri,
        shard: FIRST_TAR.to_owned(),
        seed: 3,
        epoch: 1,
        spec: Arc::new(spec),
        skip: Default::default(),
        chunk_bytes: 4096,
        start: 0,
        end: None,
        mode: stoker_core::ItemMode::Process,
        format: stoker_core::ShardFormat::WebDataset,
        record: stoker_core::RecordFields::default(),
        fields: Arc::new([]),
        views: Arc::new([]),
        on_device: false,
    }
}

/// Samples with masks and views go to the lanes of a `--gpu-only` worker
/// like any other (the route decides on their steps too), and whatever
/// path they take, each comes back once with the CPU worker's image, mask,
/// caption and views: a handed-back sample carries its masks to the CPU
/// pool. A whole-host GPU worker runs samples with masks on its pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masks_and_views_reach_the_lanes_and_come_back_as_on_the_cpu() {
    use stoker_core::FieldValue;
    let dir = tempfile::tempdir().unwrap();
    let uri = masked_dataset(dir.path());
    let cpu = Arc::new(WorkerContext::new(config(2)).unwrap());
    let want = run_to_end(cpu, masked_item(uri.clone())).await;
    assert_eq!((want.samples.len(), want.skipped.len()), (23, 1));
    assert!(
        want.skipped["s004"].contains("mask \"seg\": mask is 16x8, its image 20x10"),
        "{:?}",
        want.skipped
    );
    let fields = &want.fields["s001"];
    assert!(
        matches!(&fields[..], [Some(FieldValue::Array(m)), Some(FieldValue::Text(t)), Some(FieldValue::Image(v))]
            if m.shape == [1, 8, 8] && t == "sample 1" && v.len() == 4 * 4 * 3),
        "{fields:?}"
    );
    // Masks ride the lanes on a `--gpu-only` worker.
    let mut gpu_only = config(2);
    gpu_only.cpu_jpegs = false;
    let gpu = Arc::new(WorkerContext::with_gpu(gpu_only, handing_back(Duration::from_millis(1), true)).unwrap());
    let got = run_to_end(Arc::clone(&gpu), masked_item(uri.clone())).await;
    assert_eq!(got.samples, want.samples);
    assert_eq!(got.fields, want.fields);
    assert_eq!(got.skipped, want.skipped);
    let lanes = &gpu.gpu.as_ref().unwrap().counters;
    let (done, back) = (
        lanes.images.load(Ordering::Relaxed),
        lanes.to_cpu.load(Ordering::Relaxed),
    );
    assert_eq!(
        done + back,
        24,
        "every sample went to the lanes: {done} done, {back} handed back"
    );
    assert!(done > 0 && back > 0, "{done} done, {back} handed back");
    // On a whole-host GPU worker the CPU pool takes samples with masks;
    // the lanes never see them.
    let host = Arc::new(WorkerContext::with_gpu(config(2), handing_back(Duration::from_millis(1), true)).unwrap());
    let got = run_to_end(Arc::clone(&host), masked_item(uri)).await;
    assert_eq!((got.samples, got.fields), (want.samples, want.fields));
    let lanes = &host.gpu.as_ref().unwrap().counters;
    assert_eq!(
        lanes.images.load(Ordering::Relaxed) + lanes.to_cpu.load(Ordering::Relaxed),
        0
    );
}
