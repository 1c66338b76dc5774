//! Where a sample is decoded and transformed: the CPU pool, or on a GPU
//! worker the GPU lanes in batches (what they hand back goes to the pool),
//! with idle CPU threads sharing the lanes' backlog.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use stoker_core::{FieldKind, FieldSpec, ItemSeed, TransformSpec, ViewSpec, resolve_steps};
use tracing::debug;

use super::cpu::process_sample_with;
use super::{Item, ItemError, Processed, Skipped, WorkerContext};
use crate::gpu::RunnerGone;
use crate::gpu::{GpuResult, GpuRunner, GpuSample, Recipe, gpu_runs, mask_chain};
use crate::memory::Reservation;
use crate::metrics::Stage;
use crate::pool::PoolError;
use stoker_formats::image::ImageKind;
use stoker_formats::sample::RawSample;
use stoker_image::decode::{check_jpeg, sniff};

impl WorkerContext {
    /// Where `raw` of `item` is decoded: on a GPU worker a JPEG whose
    /// steps the lanes all run (its views' and masks' too) goes to the GPU
    /// lanes (whose backlog idle CPU threads share: [`share_backlog`]),
    /// anything else to the CPU pool.
    pub(super) fn route(&self, raw: &RawSample, item: &Item) -> Route {
        match &self.gpu {
            Some(_) if gpu_jpeg(raw) && self.lanes_run(raw, item) => Route::Gpu,
            _ => Route::Cpu,
        }
    }

    /// Whether the lanes run every step of `raw`'s transform, of each of
    /// its views, and of its masks (the image's geometric steps as one
    /// chain), decided once, from its header and its draws, before it is
    /// queued: the lanes never receive a sample they would hand back for a
    /// step without a kernel (nor one whose header or draws the CPU path
    /// refuses: it skips it with the reason), and nothing is decoded twice.
    fn lanes_run(&self, raw: &RawSample, item: &Item) -> bool {
        let Ok((_, data)) = &raw.image else { return false };
        let Ok((w, h)) = check_jpeg(data, self.config.max_image_pixels) else {
            return false;
        };
        let draws = item.item_seed().sample(raw.position);
        let Ok(steps) = resolve_steps(&item.spec, &draws, w, h) else {
            return false;
        };
        let masks = item.extra.iter().any(|f| f.kind == FieldKind::Mask);
        steps.iter().all(gpu_runs)
            && (!masks || mask_chain(&steps, w, h).is_some())
            && item.views.iter().enumerate().all(|(j, v)| {
                resolve_steps(&v.transform, &draws.view(j), w, h).is_ok_and(|steps| steps.iter().all(gpu_runs))
            })
    }
}

/// Where a sample is decoded and transformed (see [`WorkerContext::route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// The GPU lanes, in a batch.
    Gpu,
    /// The CPU pool: not a JPEG the GPU takes, or a CPU worker.
    Cpu,
}

/// Lets idle CPU threads share the GPU lanes' backlog: while more than a
/// full batch per lane waits, a pool thread is idle and the runner's steal
/// policy allows it (`GpuRunner::backlogged`: only when stealing measured
/// faster than the lanes alone, and never a sample the lanes would reach
/// before the thread finished it), a thread takes the newest waiting JPEG
/// ([`GpuRunner::steal`]), decodes it on the CPU, hands the result back to
/// its batch, and goes for the next. No ratio to tune (unlike a fixed
/// share, such as DALI's `hw_decoder_load`). Runs at the pool's background
/// priority on a GPU worker; `--gpu-only` turns it off.
fn share_backlog(ctx: &Arc<WorkerContext>) {
    let Some(gpu) = ctx.gpu.as_ref() else { return };
    if !ctx.config.cpu_jpegs {
        return;
    }
    while ctx.pool.has_idle_thread() && gpu.backlogged() {
        let worker = Arc::clone(ctx);
        ctx.pool.execute(move || steal_one(&worker));
    }
}

/// One stolen JPEG on this pool thread, then the next one queued behind
/// whatever else the pool has to do.
fn steal_one(ctx: &Arc<WorkerContext>) {
    let Some(stolen) = ctx.gpu.as_ref().and_then(GpuRunner::steal) else {
        return;
    };
    let raw = stolen.sample.clone_raw();
    let recipe = &stolen.recipe;
    let result = match process_sample_with(
        raw,
        &recipe.spec,
        recipe.seed,
        ctx.config.max_image_pixels,
        &ctx.metrics,
        &recipe.extra,
        &recipe.views,
    ) {
        Ok(p) => {
            ctx.counters.cpu_samples.fetch_add(1, Ordering::Relaxed);
            GpuResult::Done(p)
        }
        Err(s) => GpuResult::Skipped(s),
    };
    ctx.counters.cpu_jpegs.fetch_add(1, Ordering::Relaxed);
    stolen.finish(result);
    let worker = Arc::clone(ctx);
    if ctx.gpu.as_ref().is_some_and(GpuRunner::backlogged) {
        ctx.pool.execute(move || steal_one(&worker));
    }
}

type Outcome = Result<Processed, Skipped>;

/// Samples on their way through the CPU pool or the GPU, in the order they
/// were read.
pub(super) struct InFlight {
    pub(super) results: std::pin::Pin<Box<dyn Future<Output = Result<Vec<Outcome>, ItemError>> + Send>>,
    pub(super) samples: usize,
    pub(super) held: Reservation,
}

/// Whether `raw` is a JPEG the GPU lanes take: named and sniffed as one,
/// with a label. Anything else goes to the CPU path, which decodes it or
/// skips it with its reason.
fn gpu_jpeg(raw: &RawSample) -> bool {
    matches!((&raw.image, &raw.label), (Ok((ImageKind::Jpeg, data)), Ok(_)) if sniff(data) == Some(ImageKind::Jpeg))
}

/// `raw` as the GPU lanes take it; `None` unless [`gpu_jpeg`].
pub(super) fn gpu_sample(raw: RawSample) -> Result<GpuSample, Box<RawSample>> {
    match (&raw.image, &raw.label) {
        (Ok((ImageKind::Jpeg, data)), Ok(label)) if gpu_jpeg(&raw) => Ok(GpuSample {
            label: *label,
            data: data.clone(),
            key: raw.key,
            position: raw.position,
            masks: raw.fields,
        }),
        _ => Err(Box::new(raw)),
    }
}

/// Queues one sample on the CPU pool now; the future yields its outcome.
fn on_pool(
    ctx: &Arc<WorkerContext>,
    raw: RawSample,
    spec: &Arc<TransformSpec>,
    seed: ItemSeed,
    (extra, views): (&Arc<[FieldSpec]>, &Arc<[ViewSpec]>),
) -> impl Future<Output = Result<Outcome, PoolError>> + Send + 'static {
    let (spec, worker) = (Arc::clone(spec), Arc::clone(ctx));
    let (extra, views) = (Arc::clone(extra), Arc::clone(views));
    let max_pixels = ctx.config.max_image_pixels;
    // `process_sample` catches a panic in decode or transform itself; one
    // anywhere else in the job is caught by the pool, and is this sample's
    // internal skip too.
    let (key, position) = (raw.key.clone(), raw.position);
    let job = ctx.pool.spawn(move || {
        let outcome = process_sample_with(raw, &spec, seed, max_pixels, &worker.metrics, &extra, &views);
        if outcome.is_ok() {
            worker.counters.cpu_samples.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    });
    async move {
        match job.await {
            Err(PoolError::Panicked(message)) => Ok(Err(Skipped::panicked(&key, position, "cpu job", &message))),
            other => other,
        }
    }
}

/// Queues one sample on the CPU pool now, holding `held` until its result
/// is collected.
pub(super) fn on_cpu(ctx: &Arc<WorkerContext>, item: &Item, raw: RawSample, held: Reservation) -> InFlight {
    let one = on_pool(ctx, raw, &item.spec, item.item_seed(), (&item.extra, &item.views));
    InFlight {
        results: Box::pin(async move { Ok(vec![one.await?]) }),
        samples: 1,
        held,
    }
}

/// Runs `samples` on the GPU; those it hands back go to the CPU pool.
/// The batch holds `held` until its results are collected.
///
/// The batch is queued for the lanes at once, by a task of its own, not
/// when the item gets round to awaiting it: an item keeps several batches
/// in flight. Each sample comes back exactly once, finished by the GPU or
/// by the CPU pool after a hand-back (in any order: the client sorts by
/// position where it needs the order).
pub(super) fn on_gpu(ctx: &Arc<WorkerContext>, item: &Item, samples: Vec<GpuSample>, held: Reservation) -> InFlight {
    let n = samples.len();
    let ctx = Arc::clone(ctx);
    let recipe = Recipe {
        spec: Arc::clone(&item.spec),
        seed: item.item_seed(),
        extra: Arc::clone(&item.extra),
        views: Arc::clone(&item.views),
    };
    let task = tokio::spawn(async move {
        let gpu = ctx.gpu.as_ref().ok_or(RunnerGone)?;
        // A lane panicked or the runner stopped: the item fails and the
        // client reassigns it.
        let queued = std::time::Instant::now();
        let results = gpu.run(samples, recipe.clone());
        share_backlog(&ctx);
        let results = results.await?;
        ctx.metrics.observe(Stage::GpuBatch, queued.elapsed());
        let mut out = Vec::with_capacity(n);
        let mut back = Vec::new();
        for r in results {
            match r {
                GpuResult::Done(p) => out.push(Ok(p)),
                GpuResult::Skipped(s) => out.push(Err(s)),
                GpuResult::Cpu { sample, reason } => {
                    debug!(key = %sample.key, reason, "gpu handed the sample to the cpu");
                    let fields = (&recipe.extra, &recipe.views);
                    back.push(on_pool(&ctx, sample.into_raw(), &recipe.spec, recipe.seed, fields));
                }
            }
        }
        for outcome in back {
            out.push(outcome.await?);
        }
        Ok::<_, ItemError>(out)
    });
    InFlight {
        results: Box::pin(async move { task.await.map_err(|_| ItemError::Gpu(RunnerGone))? }),
        samples: n,
        held,
    }
}

#[cfg(test)]
mod tests {
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

    use super::super::{Item, SkipKind, WorkerConfig, WorkerContext, process_sample, run_item};
    use crate::gpu::{GpuResult, GpuRunner, GpuRunnerConfig, GpuSample, Recipe};
    use crate::storage::Storage;
    use crate::synth;

    /// An ImageFolder of 60 JPEGs plus a PNG named .jpg, a grey JPEG and a
    /// truncated JPEG, packed into one shard.
    async fn dataset(dir: &std::path::Path) -> DatasetUri {
        let class = dir.join("images/a");
        std::fs::create_dir_all(&class).unwrap();
        for i in 0..60u64 {
            let img = synth::procedural(96 + (i as u32 % 5) * 16, 80, i);
            std::fs::write(class.join(format!("{i:03}.jpg")), synth::encode_jpeg(&img, 90).unwrap()).unwrap();
        }
        std::fs::write(
            class.join("050png.jpg"),
            include_bytes!("../../formats/testdata/tiny.png"),
        )
        .unwrap();
        let img = synth::procedural(64, 48, 99);
        let grey: Vec<u8> = img.pixels.chunks(3).map(|p| p[1]).collect();
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, 90)
            .encode(&grey, 64, 48, jpeg_encoder::ColorType::Luma)
            .unwrap();
        std::fs::write(class.join("020grey.jpg"), out).unwrap();
        let good = synth::encode_jpeg(&img, 90).unwrap();
        std::fs::write(class.join("040truncated.jpg"), &good[..good.len() / 2]).unwrap();
        let uri = DatasetUri::Local(dir.join("shards"));
        crate::pack::pack(
            &Storage::new(),
            &dir.join("images"),
            &uri,
            stoker_core::ShardFormat::WebDataset,
            64 << 20,
            |_, _| {},
        )
        .await
        .unwrap();
        uri
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
        let item = Item {
            dataset: uri,
            shard: "shard-000000.tar".to_owned(),
            seed: 3,
            epoch: 1,
            spec: Arc::new(spec),
            skip: Default::default(),
            chunk_bytes: 4096,
            start,
            end,
            mode: stoker_core::ItemMode::Process,
            format: stoker_core::ShardFormat::WebDataset,
            fields: stoker_core::RecordFields::default(),
            extra: Arc::new([]),
            views: Arc::new([]),
        };
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
        skipped: HashMap<String, String>,
    }

    fn config(threads: usize) -> WorkerConfig {
        WorkerConfig::default().with_threads(threads)
    }

    /// Emulated lanes: every third sample is finished as the GPU would
    /// finish it (the CPU path's result), the others are handed back; each
    /// answer takes `delay`, so that a backlog builds up.
    fn handing_back(delay: Duration) -> GpuRunner {
        let lanes = GpuRunnerConfig {
            lanes: 1,
            max_batch: 4,
            ..GpuRunnerConfig::default()
        };
        GpuRunner::emulated(lanes, move |sample: GpuSample, r: &Recipe| {
            std::thread::sleep(delay);
            let n: u64 = sample.key.bytes().map(u64::from).sum();
            if n.is_multiple_of(3)
                && let Ok(p) = process_sample(sample.clone_raw(), &r.spec, r.seed, 100_000_000, &Default::default())
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
        let gpu = Arc::new(WorkerContext::with_gpu(config(2), handing_back(Duration::from_millis(2))).unwrap());
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
        println!(
            "emulated lanes: {on_gpu} finished, {handed_back} handed back; {cpu_jpegs} jpegs taken by the cpu pool"
        );
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

    /// Lanes much faster than a CPU thread (0.1 ms a sample, answering
    /// with the CPU path's result computed beforehand): the pool takes no
    /// JPEG from their backlog, since it would finish each later than the
    /// lanes reach it (`StealPolicy`'s tail rule). Under the old rule (any
    /// backlog past a batch per lane) idle threads stole here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_takes_nothing_the_lanes_would_finish_sooner() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dataset(dir.path()).await;
        let cpu = Arc::new(WorkerContext::new(config(2)).unwrap());
        let reference = Arc::new(run(Arc::clone(&cpu), uri.clone(), 0, None).await);
        let known = Arc::clone(&reference);
        let lanes = GpuRunnerConfig {
            lanes: 1,
            max_batch: 4,
            ..GpuRunnerConfig::default()
        };
        let fast = GpuRunner::emulated(lanes, move |sample: GpuSample, _: &Recipe| {
            std::thread::sleep(Duration::from_micros(100));
            match known.samples.get(&sample.key) {
                Some((position, pixels)) => GpuResult::Done(crate::outcome::Processed {
                    key: sample.key.clone(),
                    position: *position,
                    label: sample.label,
                    width: 32,
                    height: 32,
                    pixels: pixels.clone().into(),
                    fields: Vec::new(),
                }),
                None => GpuResult::Cpu {
                    sample,
                    reason: "emulated hand-back".to_owned(),
                },
            }
        });
        let gpu = Arc::new(WorkerContext::with_gpu(config(2), fast).unwrap());
        let runs = (0..3).map(|_| tokio::spawn(run(Arc::clone(&gpu), uri.clone(), 0, None)));
        for got in futures::future::join_all(runs).await {
            let got = got.unwrap();
            assert_eq!(got.samples, reference.samples);
            assert_eq!(got.skipped, reference.skipped);
        }
        let stolen = gpu.counters.cpu_jpegs.load(Ordering::Relaxed);
        assert_eq!(
            stolen, 0,
            "the pool took {stolen} jpegs the lanes would have finished sooner"
        );
    }

    /// A shard of 12 JPEGs, one of which panics when decoded (its key
    /// ends in `TEST_PANIC_SUFFIX`); returns the shard and that key.
    async fn dataset_with_a_panic(dir: &std::path::Path) -> (DatasetUri, String) {
        let class = dir.join("images/a");
        std::fs::create_dir_all(&class).unwrap();
        for i in 0..11u64 {
            let img = synth::procedural(96, 80, i);
            std::fs::write(class.join(format!("{i:03}.jpg")), synth::encode_jpeg(&img, 90).unwrap()).unwrap();
        }
        let img = synth::procedural(96, 80, 42);
        let name = format!("005{}", super::super::cpu::TEST_PANIC_SUFFIX);
        std::fs::write(class.join(format!("{name}.jpg")), synth::encode_jpeg(&img, 90).unwrap()).unwrap();
        let uri = DatasetUri::Local(dir.join("shards"));
        crate::pack::pack(
            &Storage::new(),
            &dir.join("images"),
            &uri,
            stoker_core::ShardFormat::WebDataset,
            64 << 20,
            |_, _| {},
        )
        .await
        .unwrap();
        (uri, format!("a/{name}"))
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
        let runner = GpuRunner::emulated(lanes, |sample: GpuSample, r: &Recipe| {
            if sample.key == "a/003" {
                panic!("lane bug on {}", sample.key);
            }
            match process_sample(sample.clone_raw(), &r.spec, r.seed, 100_000_000, &Default::default()) {
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
        let class = dir.path().join("images/a");
        std::fs::create_dir_all(&class).unwrap();
        for i in 0..40u64 {
            let img = synth::procedural(320, 240, i);
            std::fs::write(class.join(format!("{i:03}.jpg")), synth::encode_jpeg(&img, 95).unwrap()).unwrap();
        }
        let uri = DatasetUri::Local(dir.path().join("shards"));
        crate::pack::pack(
            &Storage::new(),
            &dir.path().join("images"),
            &uri,
            stoker_core::ShardFormat::WebDataset,
            64 << 20,
            |_, _| {},
        )
        .await
        .unwrap();
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
        let ctx = Arc::new(WorkerContext::with_gpu(gpu_only, handing_back(Duration::from_millis(3))).unwrap());
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
        let ctx = Arc::new(WorkerContext::with_gpu(config(2), handing_back(Duration::from_millis(1))).unwrap());
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
}
