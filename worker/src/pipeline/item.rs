//! One item's run: read the shard's samples ahead, within the memory
//! budget, start each on the CPU pool or in a GPU batch, and collect the
//! results in the order they were read into chunks for the client.
//!
//! [`run_item`] is driven by `ItemRun`, the per-item state: the reader,
//! the in-flight queue in read order, the pending GPU batch, the memory
//! reservations, and the chunk being filled. Each sample is planned as it
//! is read (`WorkerContext::plan`), and its plan sizes its reservation
//! (`memory_need`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use stoker_core::{FieldValue, Fields, ItemMode, TransformSpec, ViewSpec};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::cpu::Instances;
use super::fields::{mask_need, place_targets, read_fields, take_instances};
use super::measure::{read_item, synthetic_item};
use super::route::{InFlight, gpu_sample, on_cpu, on_gpu};
use super::samples::{ItemSamples, Read};
use super::sink::{replay_item, send};
use super::{Chunk, Item, ItemError, Processed, SkipKind, SkipTally, Skipped, WorkerContext};
use crate::gpu::GpuSample;
use crate::memory::Reservation;
use crate::metrics::Stage;
use stoker_formats::sample::RawSample;
use stoker_image::{RunsOn, SamplePlan};

/// A chunk is sent once it holds this many skips, so a shard of nothing
/// but bad samples streams its reasons instead of piling them up.
const MAX_SKIPS_PER_CHUNK: usize = 256;

/// Bytes a sample may hold while it is processed: its encoded bytes, the
/// most its decode and transform hold at once (its plan's
/// `working_bytes`, worked out from the image header) and the result, and
/// the same for each of its `views` (they run one after another over a
/// copy of the decoded image, counted as if at once). A sample that could
/// not be planned counts only its bytes: it is skipped before decoding.
/// On a GPU worker a JPEG the lanes take is decoded in device memory, so
/// it holds only its bytes and the result in host memory; a JPEG the GPU
/// hands back to the CPU, or that a CPU thread takes from the lanes'
/// backlog, is decoded there outside the budget (at most one per pool
/// thread at once).
fn memory_need(raw: &RawSample, plan: Result<&SamplePlan, &Skipped>, spec: &TransformSpec, views: &[ViewSpec]) -> u64 {
    // A spec that keeps each image's size has no output size of its own:
    // the plan's is the sample's, and an unplanned sample makes none.
    let output = |spec: &TransformSpec| spec.image_bytes().unwrap_or(0) as u64;
    let image = match plan {
        Ok(plan) => {
            let (w, h) = plan.out_dims();
            u64::from(w) * u64::from(h) * 3
        }
        Err(_) => output(spec),
    };
    let Ok((_, data)) = &raw.image else {
        return image;
    };
    let encoded = data.len() as u64;
    let views: u64 = views.iter().map(|v| output(&v.transform)).sum();
    match plan {
        Ok(plan) if plan.runs_on == RunsOn::Gpu => encoded + image,
        Ok(plan) => encoded + plan.working_bytes + image + views,
        Err(_) => encoded + image + views,
    }
}

/// The name of a field that asks for instance masks and holds targets
/// without them, if any.
fn undrawn<'a>(specs: &'a [stoker_core::FieldSpec], fields: &[Option<FieldValue>]) -> Option<&'a str> {
    specs.iter().zip(fields).find_map(|(spec, value)| match value {
        Some(FieldValue::Targets(t)) if spec.kind == stoker_core::FieldKind::TargetsWithMasks && t.masks.is_none() => {
            Some(spec.name.as_str())
        }
        _ => None,
    })
}

/// Runs one item, sending chunks to `tx`. Returns when the item is done, it
/// failed (the error is also sent), or the client left.
pub async fn run_item(ctx: Arc<WorkerContext>, item: Item, tx: mpsc::Sender<Result<Chunk, ItemError>>) {
    let shard = item.dataset.join(&item.shard);
    if ctx.config.replay
        && item.mode == ItemMode::Process
        && let Some(cached) = ctx.replay.get(&item)
    {
        if replay_item(&ctx, &item, &cached, &tx).await {
            ctx.counters.items.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    let run = match item.mode {
        ItemMode::Read => read_item(&ctx, &item, &tx).await,
        ItemMode::Synthetic => Ok(synthetic_item(&ctx, &item, &tx).await),
        // `Decode` runs as `Process`: the gRPC edge sends counts.
        ItemMode::Process | ItemMode::Decode => match ItemRun::open(&ctx, &item, &tx).await {
            Ok(run) => run.run().await,
            Err(err) => Err(err),
        },
    };
    match run {
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

/// A sample read from the shard, with where it goes, the budget it needs
/// ([`memory_need`]) and the part of it its bytes have held since they were
/// read (`held`, carried into the sample's reservation).
struct ReadSample {
    raw: RawSample,
    need: u64,
    plan: Result<Arc<SamplePlan>, Skipped>,
    held: Reservation,
}

/// One item's state while it runs: the shard's sample reader, the samples
/// in flight in the order they were read, the JPEGs gathering into a GPU
/// batch with the budget they hold, and the chunk being built. Methods
/// that send return `Ok(false)` when the client left.
struct ItemRun<'a> {
    ctx: &'a Arc<WorkerContext>,
    item: &'a Item,
    tx: &'a mpsc::Sender<Result<Chunk, ItemError>>,
    shard_uri: String,
    samples: ItemSamples,
    /// Results to collect, oldest first.
    in_flight: VecDeque<InFlight>,
    /// Samples in `in_flight`.
    in_flight_samples: usize,
    chunk: Chunk,
    /// Set when the shard is unreadable past some point: said in the last
    /// chunk.
    shard_error: Option<String>,
    /// No sample is left to read (the shard's end, the item's range's end,
    /// or a corrupt shard).
    exhausted: bool,
    /// A sample read but not yet started: the budget had no room for it.
    waiting: Option<ReadSample>,
    /// The reader is waiting for budget to read on (a member, a row group)
    /// while this item's own samples in flight will free some.
    reader_blocked: bool,
    /// JPEGs for the GPU, sent as one batch once there are `gpu_batch` of
    /// them or nothing else is left to wait for.
    gpu_batch: usize,
    gpu_pending: Vec<GpuSample>,
    /// The budget `gpu_pending` holds.
    gpu_held: Reservation,
    /// With `--replay`, the results of a whole, clean first pass are kept.
    record: Option<Vec<Processed>>,
    /// The item's skips, logged once when it ends.
    skips: SkipTally,
    /// The fields of the samples in flight, by position, attached to
    /// their results as they are collected (the CPU pool and the GPU
    /// lanes only see images).
    fields: HashMap<u64, Fields>,
    /// Samples kept in flight: the read-ahead, with room for one batch on
    /// the GPU while the next one is read.
    ahead: usize,
}

impl<'a> ItemRun<'a> {
    /// Opens the item's shard.
    async fn open(
        ctx: &'a Arc<WorkerContext>,
        item: &'a Item,
        tx: &'a mpsc::Sender<Result<Chunk, ItemError>>,
    ) -> Result<Self, ItemError> {
        let samples = ItemSamples::open(item, &ctx.storage, ctx.config.max_member_bytes, &ctx.budget).await?;
        let gpu_batch = ctx.gpu.as_ref().map_or(0, |g| g.config().max_batch);
        Ok(Self {
            ctx,
            item,
            tx,
            skips: SkipTally::new(&item.dataset.join(&item.shard)),
            shard_uri: item.dataset.join(&item.shard),
            samples,
            in_flight: VecDeque::new(),
            in_flight_samples: 0,
            chunk: Chunk::default(),
            shard_error: None,
            exhausted: false,
            waiting: None,
            reader_blocked: false,
            gpu_batch,
            gpu_pending: Vec::new(),
            gpu_held: Reservation::default(),
            record: (ctx.config.replay && item.mode == ItemMode::Process && item.skip.is_empty()).then(Vec::new),
            ahead: ctx.config.decode_ahead.max(1).max(2 * gpu_batch),
            fields: HashMap::new(),
        })
    }

    /// Ok(true): done; Ok(false): the receiver is gone.
    async fn run(mut self) -> Result<bool, ItemError> {
        loop {
            if !self.fill().await? {
                return Ok(false);
            }
            if self.partial_batch_due() {
                self.flush_gpu_batch();
            }
            let Some(next) = self.in_flight.pop_front() else {
                if self.waiting.is_some() {
                    continue;
                }
                break;
            };
            if !self.collect(next).await? {
                return Ok(false);
            }
        }
        self.finish().await
    }

    /// Keeps the pool and the GPU fed: reads ahead until `ahead` samples
    /// are in flight or the memory budget is spent.
    async fn fill(&mut self) -> Result<bool, ItemError> {
        self.reader_blocked = false;
        while self.in_flight_samples + self.gpu_pending.len() < self.ahead {
            let Some(next) = self.next_sample().await? else { break };
            if !self.ctx.budget.fits(next.need) {
                let s = Skipped {
                    kind: SkipKind::Memory,
                    reason: format!(
                        "needs about {} MiB to process, more than the worker's memory budget of {} MiB",
                        next.need >> 20,
                        self.ctx.budget.capacity() >> 20
                    ),
                    key: next.raw.key,
                    position: next.raw.position,
                };
                self.fields.remove(&s.position);
                self.skip(s);
                continue;
            }
            // The bytes read already hold their share: reserve the rest.
            let rest = next.need.saturating_sub(next.held.bytes());
            let held = match self.ctx.budget.try_reserve(rest) {
                Some(mut r) => {
                    r.absorb(next.held);
                    r
                }
                // Our own samples in flight will free room: finish them first.
                None if !self.in_flight.is_empty() || !self.gpu_pending.is_empty() => {
                    self.waiting = Some(next);
                    break;
                }
                None => {
                    // Hold nothing while waiting for others to finish, not
                    // even this sample's bytes: two items each holding a
                    // sample's bytes while waiting for the rest could wait
                    // for each other forever. (Those bytes are this item's
                    // only ones outside the budget while it waits.)
                    if !self.send_chunk().await {
                        return Ok(false);
                    }
                    drop(next.held);
                    debug!(shard = %self.shard_uri, need = next.need, "waiting for memory budget");
                    self.ctx.budget.reserve(next.need).await
                }
            };
            self.start(next.raw, next.plan, held);
        }
        Ok(true)
    }

    /// The sample that waited for the budget, else the next one of the
    /// item's range; `None` once there is none.
    async fn next_sample(&mut self) -> Result<Option<ReadSample>, ItemError> {
        if let Some(w) = self.waiting.take() {
            return Ok(Some(w));
        }
        while !self.exhausted {
            let reading = Instant::now();
            match self.samples.next_within(&self.ctx.budget).await {
                Ok(Read::Blocked(bytes)) => {
                    // Our own samples in flight will free room: collect
                    // them, then read on. Otherwise wait, holding nothing.
                    if !self.in_flight.is_empty() || !self.gpu_pending.is_empty() {
                        self.reader_blocked = true;
                        return Ok(None);
                    }
                    if !self.send_chunk().await {
                        // The client left: read no more; the last send fails too.
                        self.exhausted = true;
                        return Ok(None);
                    }
                    debug!(shard = %self.shard_uri, need = bytes, "reader waiting for memory budget");
                    let granted = self.ctx.budget.reserve(bytes).await;
                    self.samples.grant(granted);
                }
                Ok(Read::Sample(mut raw, held)) => {
                    self.ctx.metrics.observe(Stage::Read, reading.elapsed());
                    if self.item.end.is_some_and(|end| raw.position >= end) {
                        // Past the item's range: the rest of the shard
                        // belongs to another item.
                        self.exhausted = true;
                        break;
                    }
                    if raw.position < self.item.start || self.item.skip.contains(raw.position) {
                        continue;
                    }
                    if !self.item.fields.is_empty() && raw.image.is_ok() {
                        match read_fields(&self.item.fields, &mut raw) {
                            Ok(fields) => {
                                self.fields.insert(raw.position, fields);
                            }
                            Err(skipped) => {
                                self.skip(skipped);
                                continue;
                            }
                        }
                    }
                    let plan = self
                        .ctx
                        .plan(&raw, self.item, self.fields.get(&raw.position))
                        .and_then(|plan| {
                            if let Some(fields) = self.fields.get_mut(&raw.position) {
                                place_targets(&self.item.fields, fields, &plan, &raw)?;
                            }
                            Ok(plan)
                        });
                    let masks = match (plan.as_deref(), self.fields.get(&raw.position)) {
                        (Ok(plan), Some(fields)) => mask_need(fields, plan),
                        _ => 0,
                    };
                    let need = memory_need(&raw, plan.as_deref(), &self.item.spec, &self.item.views) + masks;
                    return Ok(Some(ReadSample { raw, need, plan, held }));
                }
                Ok(Read::End) => self.exhausted = true,
                Err(e) if e.is_io() => {
                    return Err(ItemError::Read {
                        shard: self.shard_uri.clone(),
                        source: e,
                    });
                }
                Err(e) => {
                    // The shard itself is bad from here on: deliver what
                    // came before, then say where and why it ended.
                    warn!(shard = %self.shard_uri, error = %e, "shard unreadable past this point");
                    self.shard_error = Some(format!("{}: {e}", self.shard_uri));
                    self.exhausted = true;
                }
            }
        }
        Ok(None)
    }

    /// Starts `raw`, which holds `held`: a GPU JPEG joins the pending
    /// batch (sent once full), anything else goes to the CPU pool.
    fn start(&mut self, raw: RawSample, plan: Result<Arc<SamplePlan>, Skipped>, held: Reservation) {
        let raw = match &plan {
            Ok(gpu) if gpu.runs_on == RunsOn::Gpu => match gpu_sample(raw, Arc::clone(gpu)) {
                Ok(sample) => {
                    self.gpu_pending.push(sample);
                    self.gpu_held.absorb(held);
                    if self.gpu_pending.len() >= self.gpu_batch {
                        self.flush_gpu_batch();
                    }
                    return;
                }
                Err(raw) => *raw,
            },
            _ => raw,
        };
        let instances = match self.fields.get_mut(&raw.position) {
            Some(fields) => take_instances(&self.item.fields, fields),
            None => Instances::new(),
        };
        let one = on_cpu(self.ctx, self.item, raw, (plan, instances), held);
        self.push_in_flight(one);
    }

    /// A partial GPU batch goes once nothing else is coming for now.
    fn partial_batch_due(&self) -> bool {
        !self.gpu_pending.is_empty()
            && (self.exhausted || self.waiting.is_some() || self.reader_blocked || self.in_flight.is_empty())
    }

    /// Sends the pending JPEGs to the GPU as one batch, with the budget
    /// they hold.
    fn flush_gpu_batch(&mut self) {
        let samples = std::mem::take(&mut self.gpu_pending);
        let held = std::mem::take(&mut self.gpu_held);
        let batch = on_gpu(self.ctx, self.item, samples, held);
        self.push_in_flight(batch);
    }

    fn push_in_flight(&mut self, next: InFlight) {
        self.in_flight_samples += next.samples;
        self.in_flight.push_back(next);
    }

    /// Waits for the oldest samples in flight and adds their results to
    /// the chunk, sending it each time it is full.
    async fn collect(&mut self, next: InFlight) -> Result<bool, ItemError> {
        self.in_flight_samples -= next.samples;
        let mut held = next.held;
        for outcome in next.results.await? {
            match outcome {
                Ok(mut p) => {
                    if let Some(mut fields) = self.fields.remove(&p.position) {
                        // The masks came back with the image, at their
                        // indices; the rest was read with the sample.
                        // Views follow, after the requested fields.
                        let mut from_pool = std::mem::take(&mut p.fields).into_iter();
                        for (slot, mask) in fields.iter_mut().zip(from_pool.by_ref()) {
                            if mask.is_some() {
                                *slot = mask;
                            }
                        }
                        fields.extend(from_pool);
                        p.fields = fields;
                    }
                    if let Some(name) = undrawn(&self.item.fields, &p.fields) {
                        // Routing sends every such sample to the pool, which
                        // draws them: a sample without is a bug, not data.
                        self.skip(Skipped {
                            reason: format!("field {name:?}: its instance masks were not drawn"),
                            kind: SkipKind::Internal,
                            key: p.key,
                            position: p.position,
                        });
                        continue;
                    }
                    let field_bytes: usize = p.fields.iter().flatten().map(FieldValue::byte_len).sum();
                    if let Some(r) = self.record.as_mut() {
                        r.push(p.clone());
                    }
                    // Only the result (and its fields) stays reserved, until
                    // its chunk is sent.
                    let pixels = p.pixels.len();
                    self.chunk.push(p, held.keep((pixels + field_bytes) as u64));
                }
                Err(s) => {
                    self.fields.remove(&s.position);
                    self.skip(s)
                }
            }
            if (self.chunk.payload_bytes >= self.item.chunk_bytes || self.chunk.skipped.len() >= MAX_SKIPS_PER_CHUNK)
                && !self.send_chunk().await
            {
                return Ok(false);
            }
        }
        drop(held);
        Ok(true)
    }

    /// Sends the chunk built so far, if it holds anything.
    async fn send_chunk(&mut self) -> bool {
        self.chunk.is_empty() || send(self.ctx, self.tx, std::mem::take(&mut self.chunk)).await
    }

    /// Keeps a clean first pass for `--replay`, then sends the last chunk.
    async fn finish(mut self) -> Result<bool, ItemError> {
        if let Some(r) = self.record.take()
            && self.shard_error.is_none()
        {
            self.ctx.replay.put(self.item, r);
        }
        self.chunk.done = true;
        self.chunk.shard_error = self.shard_error.take();
        Ok(send(self.ctx, self.tx, self.chunk).await)
    }

    fn skip(&mut self, s: Skipped) {
        self.skips.add(&s);
        self.ctx.counters.skipped.fetch_add(1, Ordering::Relaxed);
        self.ctx.metrics.skipped(s.kind);
        self.chunk.skipped.push(s);
    }
}
