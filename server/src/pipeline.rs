//! One work item, end to end: stream the shard, group samples, decode and
//! augment them on the CPU pool, and hand chunks of results to the sender.
//!
//! Backpressure runs the whole way: at most `decode_ahead` samples are in
//! flight on the pool, and the next chunk is only built once the previous
//! one was accepted by the bounded channel to the gRPC stream. A failed send
//! means the client left; the item stops there.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use stoker_core::{DatasetUri, Step, TransformSpec, resolve_steps};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::augment::Augmenter;
use crate::decode::{DecodeError, RgbImage, check_jpeg, decode, header_dimensions, sniff};
use crate::gpu::runner::RunnerGone;
use crate::gpu::{GpuResult, GpuRunner, GpuSample};
use crate::libjpeg;
use crate::memory::{MemoryBudget, Reservation};
use crate::pool::{CpuPool, PoolError};
use crate::storage::{Storage, StorageConfig, StorageError};
use crate::wds::ImageKind;
use crate::wds::{RawSample, SampleReader, TarError};

/// Limits and sizes of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// CPU pool threads.
    pub threads: usize,
    /// Target size of one streamed chunk, in bytes.
    pub chunk_bytes: usize,
    /// Tar members larger than this are skipped without being loaded.
    pub max_member_bytes: u64,
    /// Images with more pixels than this are skipped before decoding.
    pub max_image_pixels: u64,
    /// Samples of one item in flight on the CPU pool.
    pub decode_ahead: usize,
    /// S3 retries, timeouts and resumes.
    pub storage: StorageConfig,
    /// The worker process stays under this many bytes: sample data is
    /// budgeted to fit with [`crate::memory::RESERVE`] to spare.
    pub memory_limit: u64,
    /// Benchmarks only: keep each item's results and replay them for every
    /// later request of the same shard range, whatever the seed and epoch
    /// (see [`ReplayCache`]).
    pub replay: bool,
    /// On a GPU worker, let idle CPU threads take JPEGs while the GPU lanes
    /// have a backlog (see [`share_backlog`]). Off keeps the host's cores
    /// for other work, such as a trainer on the same host.
    pub cpu_jpegs: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            threads,
            chunk_bytes: 2 << 20,
            max_member_bytes: 64 << 20,
            max_image_pixels: 100_000_000,
            decode_ahead: decode_ahead(threads),
            storage: StorageConfig::default(),
            memory_limit: 4 << 30,
            replay: false,
            cpu_jpegs: true,
        }
    }
}

/// What a `--replay` worker asks clients to keep in flight.
const REPLAY_INFLIGHT_SAMPLES: u64 = 1024;

/// Samples one item keeps in flight on a pool of `threads` threads: two
/// per thread and two more, so threads never wait for the reader.
pub fn decode_ahead(threads: usize) -> usize {
    threads * 2 + 2
}

impl WorkerConfig {
    /// `threads` CPU pool threads, with the read-ahead that suits them.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self.decode_ahead = decode_ahead(threads);
        self
    }
}

/// Running totals of a worker, for logs and `Info`.
#[derive(Debug, Default)]
pub struct Counters {
    pub samples: AtomicU64,
    pub skipped: AtomicU64,
    pub bytes: AtomicU64,
    pub items: AtomicU64,
    /// Samples decoded and transformed on the CPU pool (the GPU runner
    /// counts its own).
    pub cpu_samples: AtomicU64,
    /// On a GPU worker: JPEGs the CPU pool took from the GPU lanes' backlog
    /// (see [`share_backlog`]).
    pub cpu_jpegs: AtomicU64,
}

/// What every item needs: storage, the pool, the GPU if any, the limits.
#[derive(Debug)]
pub struct WorkerContext {
    pub storage: Storage,
    pub budget: MemoryBudget,
    pub pool: CpuPool,
    /// Set on a GPU worker: JPEGs whose steps the GPU runs go there, the
    /// rest (and what the GPU hands back) to `pool`.
    pub gpu: Option<GpuRunner>,
    pub config: WorkerConfig,
    pub counters: Counters,
    pub replay: ReplayCache,
}

/// Results kept by a worker started with `--replay`: an item's samples are
/// processed once, then sent again from memory, so that a benchmark of the
/// client measures transport and upload alone. Every epoch then gets the
/// same crops, and the cache grows with the dataset: never for training.
#[derive(Debug, Default)]
pub struct ReplayCache {
    items: std::sync::Mutex<std::collections::HashMap<ReplayKey, Arc<Vec<Processed>>>>,
}

/// Shard, sample range and output size.
type ReplayKey = (String, u64, Option<u64>, u32);

impl ReplayCache {
    fn key(item: &Item) -> ReplayKey {
        (item.dataset.join(&item.shard), item.start, item.end, item.spec.size)
    }

    fn get(&self, item: &Item) -> Option<Arc<Vec<Processed>>> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.get(&Self::key(item)).cloned()
    }

    fn put(&self, item: &Item, samples: Vec<Processed>) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.insert(Self::key(item), Arc::new(samples));
    }
}

impl WorkerContext {
    /// A CPU worker's context.
    pub fn new(config: WorkerConfig) -> std::io::Result<Self> {
        let pool = CpuPool::new(config.threads)?;
        Ok(Self::assemble(config, pool, None))
    }

    /// A GPU worker's context: `gpu` takes the JPEGs it can finish. Its
    /// CPU pool runs in the background ([`CpuPool::background`]): what it
    /// decodes is extra, never at the GPU's expense.
    pub fn with_gpu(config: WorkerConfig, gpu: GpuRunner) -> std::io::Result<Self> {
        let pool = CpuPool::background(config.threads)?;
        Ok(Self::assemble(config, pool, Some(gpu)))
    }

    fn assemble(config: WorkerConfig, pool: CpuPool, gpu: Option<GpuRunner>) -> Self {
        Self {
            storage: Storage::with_config(config.storage.clone()),
            budget: MemoryBudget::for_limit(config.memory_limit),
            pool,
            gpu,
            config,
            counters: Counters::default(),
            replay: ReplayCache::default(),
        }
    }

    /// Samples this worker needs in flight, over all the items it serves,
    /// to keep every executor busy: each item's read-ahead on the CPU
    /// pool, and on a GPU worker three batches per lane (one running, one
    /// waiting, one on its way to the client). Clients size their credit
    /// from it (`Info`).
    pub fn inflight_samples(&self) -> u64 {
        if self.config.replay {
            // Results come from memory: only the transport needs feeding,
            // as much as a GPU worker's default lanes ask.
            return REPLAY_INFLIGHT_SAMPLES;
        }
        let cpu = self.config.decode_ahead.max(1) as u64;
        let gpu = self
            .gpu
            .as_ref()
            .map_or(0, |g| 3 * (g.config().lanes * g.config().max_batch) as u64);
        2 * cpu + gpu
    }

    /// Where `raw` is decoded: on a GPU worker a JPEG goes to the GPU
    /// lanes (whose backlog idle CPU threads share: [`share_backlog`]),
    /// anything else to the CPU pool.
    fn route(&self, raw: &RawSample) -> Route {
        match &self.gpu {
            Some(_) if gpu_jpeg(raw) => Route::Gpu,
            _ => Route::Cpu,
        }
    }
}

/// Where a sample is decoded and transformed (see [`WorkerContext::route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// The GPU lanes, in a batch.
    Gpu,
    /// The CPU pool: not a JPEG the GPU takes, or a CPU worker.
    Cpu,
}

/// Lets idle CPU threads share the GPU lanes' backlog: while more than a
/// full batch per lane waits and a pool thread is idle, a thread takes
/// the newest waiting JPEG ([`GpuRunner::steal`]), decodes it on the CPU,
/// hands the result back to its batch, and goes for the next. The split
/// follows the load, with nothing to tune: the CPU takes JPEGs only while
/// the GPU is the bottleneck and only as fast as it frees threads, so
/// neither side waits on the other (unlike a fixed share, such as DALI's
/// `hw_decoder_load`). Runs at the pool's background priority on a GPU
/// worker; `--gpu-only` turns it off.
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
    let result = match process_sample(
        raw,
        &stolen.spec,
        stolen.seed,
        stolen.epoch,
        ctx.config.max_image_pixels,
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

/// A work item in domain terms.
#[derive(Debug)]
pub struct Item {
    pub dataset: DatasetUri,
    pub shard: String,
    pub seed: u64,
    pub epoch: u64,
    pub spec: Arc<TransformSpec>,
    pub skip: HashSet<String>,
    pub chunk_bytes: usize,
    /// The samples to process, by position in the shard: from `start`, up
    /// to (not including) `end`, or to the shard's end.
    pub start: u64,
    pub end: Option<u64>,
}

/// One processed sample: uint8 HWC RGB pixels (a GPU batch's samples share
/// one allocation).
#[derive(Clone, Debug)]
pub struct Processed {
    pub key: String,
    /// Position in its shard (see `RawSample::position`).
    pub position: u64,
    pub label: i64,
    pub width: u32,
    pub height: u32,
    pub pixels: Bytes,
}

/// A sample the worker could not use, and why.
#[derive(Debug)]
pub struct Skipped {
    pub key: String,
    pub reason: String,
}

/// A batch of results on its way to the client.
#[derive(Debug, Default)]
pub struct Chunk {
    pub samples: Vec<Processed>,
    /// Pixel bytes in `samples`, kept as they are pushed.
    pub pixel_bytes: usize,
    pub skipped: Vec<Skipped>,
    pub done: bool,
    /// Set on the last chunk when the shard's data ended early or was
    /// corrupt: the samples after that point could not be read.
    pub shard_error: Option<String>,
    /// The memory budget held by `samples`, released when the chunk is
    /// dropped (once it is encoded for the network).
    pub reservation: Reservation,
}

impl Chunk {
    fn push(&mut self, p: Processed, held: Reservation) {
        self.pixel_bytes += p.pixels.len();
        self.samples.push(p);
        self.reservation.absorb(held);
    }

    fn is_empty(&self) -> bool {
        self.samples.is_empty() && self.skipped.is_empty()
    }
}

/// Why an item failed as a whole (as opposed to a sample being skipped).
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The shard's bytes stopped arriving; another attempt may succeed.
    #[error("shard {shard}: {source}")]
    Read {
        shard: String,
        #[source]
        source: TarError,
    },
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The GPU lanes stopped (shutting down, or a lane panicked).
    #[error(transparent)]
    Gpu(#[from] RunnerGone),
    /// The worker is shutting down and its grace period ran out.
    #[error("worker shut down before finishing {shard}; its rest goes to another worker")]
    ShutDown { shard: String },
}

thread_local! {
    static AUGMENTER: std::cell::RefCell<Augmenter> = std::cell::RefCell::new(Augmenter::new());
}

/// Decodes and augments one sample (runs on the CPU pool). Failures become
/// a [`Skipped`] with the reason.
pub fn process_sample(
    raw: RawSample,
    spec: &TransformSpec,
    seed: u64,
    epoch: u64,
    max_pixels: u64,
) -> Result<Processed, Skipped> {
    let skip = |key: &str, reason: String| Skipped {
        key: key.to_owned(),
        reason,
    };
    let (kind, data) = match raw.image {
        Ok(img) => img,
        Err(reason) => return Err(skip(&raw.key, reason)),
    };
    let label = raw.label.map_err(|reason| skip(&raw.key, reason))?;
    let (img, steps) =
        decode_for(kind, &data, spec, seed, epoch, &raw.key, max_pixels).map_err(|e| skip(&raw.key, e.to_string()))?;
    let out = AUGMENTER
        .with(|a| a.borrow_mut().run(img, &steps))
        .map_err(|e| skip(&raw.key, e.to_string()))?;
    if (out.width, out.height) != (spec.size, spec.size) {
        return Err(skip(
            &raw.key,
            format!(
                "transform produced {}x{}, expected {s}x{s}",
                out.width,
                out.height,
                s = spec.size
            ),
        ));
    }
    Ok(Processed {
        key: raw.key,
        position: raw.position,
        label,
        width: out.width,
        height: out.height,
        pixels: Bytes::from(out.pixels),
    })
}

/// Decodes `data` and resolves the sample's steps. When the first step
/// crops a box out of a JPEG and the build has libjpeg-turbo, only that box
/// is decoded (the step then applies to the box); otherwise the whole image
/// is decoded with zune-jpeg / zune-png.
fn decode_for(
    kind: ImageKind,
    data: &[u8],
    spec: &TransformSpec,
    seed: u64,
    epoch: u64,
    key: &str,
    max_pixels: u64,
) -> Result<(RgbImage, Vec<Step>), DecodeError> {
    if libjpeg::enabled() && kind == ImageKind::Jpeg && sniff(data) == Some(ImageKind::Jpeg) {
        let (w, h) = check_jpeg(data, max_pixels)?;
        let mut steps = resolve_steps(spec, seed, epoch, key, w, h);
        if let Some(Step::CropResize {
            left,
            top,
            width,
            height,
            ..
        }) = steps.first_mut()
            && *left >= 0
            && *top >= 0
            && *left + i64::from(*width) <= i64::from(w)
            && *top + i64::from(*height) <= i64::from(h)
        {
            match libjpeg::decode_region(data, *left as u32, *top as u32, *width, *height) {
                Ok(img) => {
                    (*left, *top) = (0, 0);
                    return Ok((img, steps));
                }
                // CMYK and other inputs libjpeg will not turn into RGB.
                Err(reason) => debug!(key, reason, "region decode failed, decoding whole image"),
            }
        }
    }
    let img = decode(kind, data, max_pixels)?;
    let steps = resolve_steps(spec, seed, epoch, key, img.width, img.height);
    Ok((img, steps))
}

/// A chunk is sent once it holds this many skips, so a shard of nothing
/// but bad samples streams its reasons instead of piling them up.
const MAX_SKIPS_PER_CHUNK: usize = 256;

type Outcome = Result<Processed, Skipped>;

/// Samples on their way through the CPU pool or the GPU, in the order they
/// were read.
struct InFlight {
    results: std::pin::Pin<Box<dyn Future<Output = Result<Vec<Outcome>, ItemError>> + Send>>,
    samples: usize,
    held: Reservation,
}

/// Whether `raw` is a JPEG the GPU lanes take: named and sniffed as one,
/// with a label. Anything else goes to the CPU path, which decodes it or
/// skips it with its reason.
fn gpu_jpeg(raw: &RawSample) -> bool {
    matches!((&raw.image, &raw.label), (Ok((ImageKind::Jpeg, data)), Ok(_)) if sniff(data) == Some(ImageKind::Jpeg))
}

/// `raw` as the GPU lanes take it; `None` unless [`gpu_jpeg`].
fn gpu_sample(raw: RawSample) -> Result<GpuSample, RawSample> {
    match (&raw.image, &raw.label) {
        (Ok((ImageKind::Jpeg, data)), Ok(label)) if gpu_jpeg(&raw) => Ok(GpuSample {
            label: *label,
            data: data.clone(),
            key: raw.key,
            position: raw.position,
        }),
        _ => Err(raw),
    }
}

/// Queues one sample on the CPU pool now; the future yields its outcome.
fn on_pool(
    ctx: &Arc<WorkerContext>,
    raw: RawSample,
    spec: &Arc<TransformSpec>,
    seed: u64,
    epoch: u64,
) -> impl Future<Output = Result<Outcome, PoolError>> + Send + 'static {
    let (spec, counters) = (Arc::clone(spec), Arc::clone(ctx));
    let max_pixels = ctx.config.max_image_pixels;
    ctx.pool.spawn(move || {
        let outcome = process_sample(raw, &spec, seed, epoch, max_pixels);
        if outcome.is_ok() {
            counters.counters.cpu_samples.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    })
}

/// Runs `samples` on the GPU; those it hands back go to the CPU pool.
///
/// The batch is queued for the lanes at once, by a task of its own, not
/// when the item gets round to awaiting it: an item keeps several batches
/// in flight. Each sample comes back exactly once, finished by the GPU or
/// by the CPU pool after a hand-back (in any order: the client sorts by
/// position where it needs the order).
fn on_gpu(ctx: &Arc<WorkerContext>, item: &Item, samples: Vec<GpuSample>) -> InFlight {
    let n = samples.len();
    let ctx = Arc::clone(ctx);
    let spec = Arc::clone(&item.spec);
    let (seed, epoch) = (item.seed, item.epoch);
    let task = tokio::spawn(async move {
        let gpu = ctx.gpu.as_ref().ok_or(RunnerGone)?;
        // A lane panicked or the runner stopped: the item fails and the
        // client reassigns it.
        let results = gpu.run(samples, Arc::clone(&spec), seed, epoch);
        share_backlog(&ctx);
        let results = results.await?;
        let mut out = Vec::with_capacity(n);
        let mut back = Vec::new();
        for r in results {
            match r {
                GpuResult::Done(p) => out.push(Ok(p)),
                GpuResult::Skipped(s) => out.push(Err(s)),
                GpuResult::Cpu { sample, reason } => {
                    debug!(key = %sample.key, reason, "gpu handed the sample to the cpu");
                    back.push(on_pool(&ctx, sample.into_raw(), &spec, seed, epoch));
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
        held: Reservation::default(),
    }
}

/// Bytes a sample may hold while it is processed: its encoded bytes, the
/// decoded image (twice, for decoder planes and scratch) and the result.
/// Images whose header cannot be read, or that are over the pixel limit,
/// count only their bytes: they fail before decoding. On a GPU worker a
/// JPEG is decoded in device memory, so it holds only its bytes and the
/// result in host memory; a JPEG the GPU hands back to the CPU, or that a
/// CPU thread takes from the lanes' backlog, is decoded there outside the
/// budget (at most one per pool thread at once).
fn memory_need(raw: &RawSample, output_bytes: u64, max_pixels: u64, gpu: bool) -> u64 {
    if gpu && let Ok((ImageKind::Jpeg, data)) = &raw.image {
        return data.len() as u64 + output_bytes;
    }
    let (len, decoded) = match &raw.image {
        Ok((kind, data)) => (
            data.len() as u64,
            match header_dimensions(*kind, data) {
                Ok((w, h)) if u64::from(w) * u64::from(h) <= max_pixels => u64::from(w) * u64::from(h) * 3 * 2,
                _ => 0,
            },
        ),
        Err(_) => (0, 0),
    };
    len + decoded + output_bytes
}
/// Runs one item, sending chunks to `tx`. Returns when the item is done, it
/// failed (the error is also sent), or the client left.
pub async fn run_item(ctx: Arc<WorkerContext>, item: Item, tx: mpsc::Sender<Result<Chunk, ItemError>>) {
    let shard = item.dataset.join(&item.shard);
    if ctx.config.replay
        && let Some(cached) = ctx.replay.get(&item)
    {
        if replay_item(&ctx, &item, &cached, &tx).await {
            ctx.counters.items.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    match run_item_inner(&ctx, &item, &tx).await {
        Ok(true) => {
            ctx.counters.items.fetch_add(1, Ordering::Relaxed);
            debug!(shard = %shard, "item done");
        }
        Ok(false) => info!(shard = %shard, "client left, item abandoned"),
        Err(err) => {
            warn!(shard = %shard, error = %err, "item failed");
            let _ = tx.send(Err(err)).await;
        }
    }
}

/// Sends an item's cached results (`--replay`); false if the receiver left.
async fn replay_item(
    ctx: &WorkerContext,
    item: &Item,
    cached: &[Processed],
    tx: &mpsc::Sender<Result<Chunk, ItemError>>,
) -> bool {
    let mut chunk = Chunk::default();
    for p in cached.iter().filter(|p| !item.skip.contains(&p.key)) {
        chunk.push(p.clone(), Reservation::default());
        if chunk.pixel_bytes >= item.chunk_bytes && !send(ctx, tx, std::mem::take(&mut chunk)).await {
            return false;
        }
    }
    chunk.done = true;
    send(ctx, tx, chunk).await
}

/// Ok(true): done; Ok(false): the receiver is gone.
async fn run_item_inner(
    ctx: &Arc<WorkerContext>,
    item: &Item,
    tx: &mpsc::Sender<Result<Chunk, ItemError>>,
) -> Result<bool, ItemError> {
    let shard_uri = item.dataset.join(&item.shard);
    let reader = ctx.storage.open(&item.dataset, &item.shard).await?;
    let mut samples = SampleReader::new(reader, ctx.config.max_member_bytes);
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut in_flight_samples = 0;
    let mut chunk = Chunk::default();
    let mut shard_error = None;
    let mut exhausted = false;
    // A sample read but not yet started: the budget had no room for it.
    let mut waiting: Option<(RawSample, u64, Route)> = None;
    let output_bytes = u64::from(item.spec.size).pow(2) * 3;
    // JPEGs for the GPU, sent as one batch once there are `gpu_batch` of
    // them or nothing else is left to wait for.
    let gpu = ctx.gpu.as_ref();
    let gpu_batch = gpu.map_or(0, |g| g.config().max_batch);
    let mut gpu_pending: Vec<GpuSample> = Vec::new();
    let mut gpu_held = Reservation::default();
    // With `--replay`, the results of a whole, clean first pass are kept.
    let mut record = (ctx.config.replay && item.skip.is_empty()).then(Vec::new);
    // Room for one batch on the GPU while the next one is read.
    let ahead = ctx.config.decode_ahead.max(1).max(2 * gpu_batch);

    loop {
        // Keep the pool and the GPU fed: read ahead until `ahead` samples
        // are in flight or the memory budget is spent.
        while in_flight_samples + gpu_pending.len() < ahead {
            let (raw, need, route) = match waiting.take() {
                Some(w) => w,
                None if exhausted => break,
                None => match samples.next_sample().await {
                    Ok(Some(raw)) => {
                        if item.end.is_some_and(|end| raw.position >= end) {
                            // Past the item's range: the rest of the shard
                            // belongs to another item.
                            exhausted = true;
                            break;
                        }
                        if raw.position < item.start || item.skip.contains(&raw.key) {
                            continue;
                        }
                        let route = ctx.route(&raw);
                        let need = memory_need(&raw, output_bytes, ctx.config.max_image_pixels, route == Route::Gpu);
                        (raw, need, route)
                    }
                    Ok(None) => {
                        exhausted = true;
                        break;
                    }
                    Err(e) if e.is_io() => {
                        return Err(ItemError::Read {
                            shard: shard_uri,
                            source: e,
                        });
                    }
                    Err(e) => {
                        // The shard itself is bad from here on: deliver what
                        // came before, then say where and why it ended.
                        warn!(shard = %shard_uri, error = %e, "shard unreadable past this point");
                        shard_error = Some(format!("{shard_uri}: {e}"));
                        exhausted = true;
                        break;
                    }
                },
            };
            if !ctx.budget.fits(need) {
                let s = Skipped {
                    reason: format!(
                        "needs about {} MiB to process, more than the worker's memory budget of {} MiB",
                        need >> 20,
                        ctx.budget.capacity() >> 20
                    ),
                    key: raw.key,
                };
                skipped(ctx, &shard_uri, &mut chunk, s);
                continue;
            }
            let held = match ctx.budget.try_reserve(need) {
                Some(r) => r,
                // Our own samples in flight will free room: finish them first.
                None if !in_flight.is_empty() || !gpu_pending.is_empty() => {
                    waiting = Some((raw, need, route));
                    break;
                }
                None => {
                    // Hold nothing while waiting for others to finish.
                    if !chunk.is_empty() && !send(ctx, tx, std::mem::take(&mut chunk)).await {
                        return Ok(false);
                    }
                    debug!(shard = %shard_uri, need, "waiting for memory budget");
                    ctx.budget.reserve(need).await
                }
            };
            let raw = match route {
                Route::Gpu => match gpu_sample(raw) {
                    Ok(sample) => {
                        gpu_pending.push(sample);
                        gpu_held.absorb(held);
                        if gpu_pending.len() >= gpu_batch {
                            let mut batch = on_gpu(ctx, item, std::mem::take(&mut gpu_pending));
                            batch.held = std::mem::take(&mut gpu_held);
                            in_flight_samples += batch.samples;
                            in_flight.push_back(batch);
                        }
                        continue;
                    }
                    Err(raw) => raw,
                },
                Route::Cpu => raw,
            };
            let one = on_pool(ctx, raw, &item.spec, item.seed, item.epoch);
            in_flight_samples += 1;
            in_flight.push_back(InFlight {
                results: Box::pin(async move { Ok(vec![one.await?]) }),
                samples: 1,
                held,
            });
        }
        // A partial GPU batch goes once nothing else is coming for now.
        if !gpu_pending.is_empty() && (exhausted || waiting.is_some() || in_flight.is_empty()) {
            let mut batch = on_gpu(ctx, item, std::mem::take(&mut gpu_pending));
            batch.held = std::mem::take(&mut gpu_held);
            in_flight_samples += batch.samples;
            in_flight.push_back(batch);
        }
        let Some(next) = in_flight.pop_front() else {
            if waiting.is_some() {
                continue;
            }
            break;
        };
        in_flight_samples -= next.samples;
        let mut held = next.held;
        for outcome in next.results.await? {
            match outcome {
                Ok(p) => {
                    if let Some(r) = record.as_mut() {
                        r.push(p.clone());
                    }
                    // Only the result stays reserved, until its chunk is sent.
                    chunk.push(p, held.keep(output_bytes));
                }
                Err(s) => skipped(ctx, &shard_uri, &mut chunk, s),
            }
            if chunk.pixel_bytes >= item.chunk_bytes || chunk.skipped.len() >= MAX_SKIPS_PER_CHUNK {
                let full = std::mem::take(&mut chunk);
                if !send(ctx, tx, full).await {
                    return Ok(false);
                }
            }
        }
        drop(held);
    }
    if let Some(r) = record
        && shard_error.is_none()
    {
        ctx.replay.put(item, r);
    }
    chunk.done = true;
    chunk.shard_error = shard_error;
    Ok(send(ctx, tx, chunk).await)
}

fn skipped(ctx: &WorkerContext, shard: &str, chunk: &mut Chunk, s: Skipped) {
    warn!(shard = %shard, key = %s.key, reason = %s.reason, "sample skipped");
    ctx.counters.skipped.fetch_add(1, Ordering::Relaxed);
    chunk.skipped.push(s);
}

async fn send(ctx: &WorkerContext, tx: &mpsc::Sender<Result<Chunk, ItemError>>, chunk: Chunk) -> bool {
    if chunk.is_empty() && !chunk.done {
        return true;
    }
    ctx.counters
        .samples
        .fetch_add(chunk.samples.len() as u64, Ordering::Relaxed);
    ctx.counters
        .bytes
        .fetch_add(chunk.pixel_bytes as u64, Ordering::Relaxed);
    tx.send(Ok(chunk)).await.is_ok()
}

#[cfg(test)]
mod tests {
    //! The GPU worker's routing without a GPU: emulated lanes (see
    //! `GpuRunner::emulated`) finish some samples and hand others back, and
    //! the CPU pool takes JPEGs while they have a backlog. Whatever mix of
    //! paths an item's samples take, each comes back exactly once, with
    //! the CPU worker's pixels and skip reasons.

    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::gpu::{GpuRunnerConfig, GpuSample};
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
        std::fs::write(class.join("050png.jpg"), include_bytes!("../formats/testdata/tiny.png")).unwrap();
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
        crate::pack::pack(&Storage::new(), &dir.join("images"), &uri, 64 << 20, |_, _| {})
            .await
            .unwrap();
        uri
    }

    /// Every delivered sample by key (failing on a second delivery), and
    /// the skip reasons by key, of one item.
    async fn run(ctx: Arc<WorkerContext>, uri: DatasetUri, start: u64, end: Option<u64>) -> Delivered {
        let item = Item {
            dataset: uri,
            shard: "shard-000000.tar".to_owned(),
            seed: 3,
            epoch: 1,
            spec: Arc::new(TransformSpec::train(32)),
            skip: HashSet::new(),
            chunk_bytes: 4096,
            start,
            end,
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
        GpuRunner::emulated(lanes, move |sample: GpuSample, spec, seed, epoch| {
            std::thread::sleep(delay);
            let n: u64 = sample.key.bytes().map(u64::from).sum();
            if n.is_multiple_of(3)
                && let Ok(p) = process_sample(sample.clone_raw(), spec, seed, epoch, 100_000_000)
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
        // The 62 JPEGs by name and content (the grey and the truncated one
        // too) went to the lanes; the PNG never did.
        assert_eq!(
            lanes.images.load(Ordering::Relaxed) + lanes.to_cpu.load(Ordering::Relaxed),
            62
        );
    }
}
