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

use stoker_core::{DatasetUri, Step, TransformSpec, resolve_steps};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::augment::Augmenter;
use crate::decode::{DecodeError, RgbImage, check_jpeg, decode, sniff};
use crate::libjpeg;
use crate::pool::{CpuPool, PoolError};
use crate::storage::{Storage, StorageError};
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
}

impl Default for WorkerConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            threads,
            chunk_bytes: 2 << 20,
            max_member_bytes: 64 << 20,
            max_image_pixels: 100_000_000,
            decode_ahead: threads * 2 + 2,
        }
    }
}

/// Running totals of a worker, for logs and `Info`.
#[derive(Debug, Default)]
pub struct Counters {
    pub samples: AtomicU64,
    pub skipped: AtomicU64,
    pub bytes: AtomicU64,
    pub items: AtomicU64,
}

/// What every item needs: storage, the pool, the limits.
#[derive(Debug)]
pub struct WorkerContext {
    pub storage: Storage,
    pub pool: CpuPool,
    pub config: WorkerConfig,
    pub counters: Counters,
}

impl WorkerContext {
    pub fn new(config: WorkerConfig) -> std::io::Result<Self> {
        Ok(Self {
            storage: Storage::new(),
            pool: CpuPool::new(config.threads)?,
            config,
            counters: Counters::default(),
        })
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
}

/// One processed sample: uint8 HWC RGB pixels.
#[derive(Debug)]
pub struct Processed {
    pub key: String,
    pub label: i64,
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
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
}

impl Chunk {
    fn push(&mut self, p: Processed) {
        self.pixel_bytes += p.pixels.len();
        self.samples.push(p);
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
        label,
        width: out.width,
        height: out.height,
        pixels: out.pixels,
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

type Pending = std::pin::Pin<Box<dyn Future<Output = Result<Result<Processed, Skipped>, PoolError>> + Send>>;

/// Runs one item, sending chunks to `tx`. Returns when the item is done, it
/// failed (the error is also sent), or the client left.
pub async fn run_item(ctx: Arc<WorkerContext>, item: Item, tx: mpsc::Sender<Result<Chunk, ItemError>>) {
    let shard = item.dataset.join(&item.shard);
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

/// Ok(true): done; Ok(false): the receiver is gone.
async fn run_item_inner(
    ctx: &Arc<WorkerContext>,
    item: &Item,
    tx: &mpsc::Sender<Result<Chunk, ItemError>>,
) -> Result<bool, ItemError> {
    let shard_uri = item.dataset.join(&item.shard);
    let reader = ctx.storage.open(&item.dataset, &item.shard).await?;
    let mut samples = SampleReader::new(reader, ctx.config.max_member_bytes);
    let mut in_flight: VecDeque<Pending> = VecDeque::new();
    let mut chunk = Chunk::default();
    let mut shard_error = None;
    let mut exhausted = false;
    let ahead = ctx.config.decode_ahead.max(1);

    loop {
        // Keep the pool fed: read ahead until `ahead` samples are in flight.
        while !exhausted && in_flight.len() < ahead {
            match samples.next_sample().await {
                Ok(Some(raw)) => {
                    if item.skip.contains(&raw.key) {
                        continue;
                    }
                    let spec = Arc::clone(&item.spec);
                    let (seed, epoch, max_pixels) = (item.seed, item.epoch, ctx.config.max_image_pixels);
                    in_flight.push_back(Box::pin(
                        ctx.pool
                            .spawn(move || process_sample(raw, &spec, seed, epoch, max_pixels)),
                    ));
                }
                Ok(None) => exhausted = true,
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
                }
            }
        }
        let Some(next) = in_flight.pop_front() else { break };
        let result = next.await?;
        match result {
            Ok(p) => chunk.push(p),
            Err(s) => {
                warn!(shard = %shard_uri, key = %s.key, reason = %s.reason, "sample skipped");
                ctx.counters.skipped.fetch_add(1, Ordering::Relaxed);
                chunk.skipped.push(s);
            }
        }
        if chunk.pixel_bytes >= item.chunk_bytes {
            let full = std::mem::take(&mut chunk);
            if !send(ctx, tx, full).await {
                return Ok(false);
            }
        }
    }
    chunk.done = true;
    chunk.shard_error = shard_error;
    Ok(send(ctx, tx, chunk).await)
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
