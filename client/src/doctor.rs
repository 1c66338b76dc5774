//! `stoker doctor`: the input pipeline measured one stage at a time, each
//! with the stages before it taken away, on a subset of the dataset, then
//! the slowest stage named and the fleet sized.
//!
//! 1. storage: the workers read and parse shards (`ItemMode::Read`), all
//!    at once, each with the items in flight it would hold in training;
//! 2. decode + transform: each worker alone reads, decodes and transforms
//!    (`ItemMode::Decode`) and sends counts, not pixels;
//! 3. transport: the workers send as many samples of the output size,
//!    zero pixels, nothing read or decoded (`ItemMode::Synthetic`), all at
//!    once, received and counted here;
//! 4. client: this loader's batch assembly (and upload, with a device),
//!    fed the same samples from memory.
//!
//! The seed of the method is the usual way to find an input bottleneck:
//! take the data away at each stage in turn and see which one holds the
//! rate down.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use stoker_core::{ItemMode, PositionSet};

use crate::assemble::{Assembler, LastBatch};
use crate::batch::upload;
use crate::conn::WorkerConn;
use crate::error::{ClientError, describe_status};
use crate::ledger::CreditLimit;
use crate::loader::Loader;
use crate::sample::Sample;
use crate::wire::ItemTemplate;

/// A stage of the input pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Storage,
    Decode,
    Transport,
    Client,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Storage => "storage",
            Self::Decode => "decode + transform",
            Self::Transport => "transport",
            Self::Client => "client",
        }
    }
}

/// What one stage moved, and in how long.
#[derive(Clone, Debug)]
pub struct StageRate {
    pub stage: Stage,
    /// The worker measured alone (decode), or `None` for all of them.
    pub worker: Option<String>,
    pub samples: u64,
    /// Encoded bytes read (storage); pixel bytes otherwise.
    pub bytes: u64,
    pub seconds: f64,
}

impl StageRate {
    pub fn images_per_sec(&self) -> f64 {
        self.samples as f64 / self.seconds.max(1e-9)
    }

    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9)
    }
}

/// The measurements and what they say.
#[derive(Clone, Debug)]
pub struct Diagnosis {
    /// Storage, decode per worker, decode of all workers together (the sum),
    /// transport, client: in that order.
    pub stages: Vec<StageRate>,
    pub bottleneck: Stage,
    /// The bottleneck in one sentence.
    pub summary: String,
    /// Images per second the fleet should reach: the one asked for, else
    /// what the client can ingest.
    pub target_rate: f64,
    pub workers: usize,
    /// Workers of the measured kind that reach `target_rate`, if the
    /// storage and the transport keep up (see `summary`).
    pub workers_for_target: u32,
    /// What `stoker pack` left out or flagged in the dataset.
    pub pack_report: Vec<String>,
}

/// Decoding this close to the read-only rate is waiting on storage.
const STORAGE_BOUND: f64 = 0.8;

/// The client stage's samples come from this many bytes of distinct data.
const INGEST_SOURCE_BYTES: usize = 64 << 20;

/// Passes over the subset a stage may make to run for its minimum time.
const MAX_PASSES: usize = 1000;

/// One item of the measured subset: a shard's samples `start..end`.
#[derive(Clone, Debug)]
struct Part {
    shard: String,
    start: u64,
    end: Option<u64>,
}

impl Loader {
    /// Measures each stage on about `samples` samples of the dataset (the
    /// first shards in name order), passing over them again until the
    /// stage has run for `min_seconds`, and names the bottleneck; the fleet
    /// is sized for `target_rate` images/s, or for what the client ingests
    /// from the network (the slower of the transport and its assembly).
    pub async fn doctor(
        &self,
        samples: u64,
        min_seconds: f64,
        target_rate: Option<f64>,
    ) -> Result<Diagnosis, ClientError> {
        let workers = self.workers.active();
        if workers.is_empty() {
            return Err(ClientError::Unreachable("no worker to measure".into()));
        }
        let config = self.config();
        // Its network and ingest stages send images of one size.
        if config.transform.size.side().is_none() {
            return Err(ClientError::Config(
                "the doctor measures images of one square size, and the transform keeps each image's own: \
                 end it at a fixed size (Resize([s, s]), CenterCrop(s)) to measure"
                    .into(),
            ));
        }
        let template = |mode| {
            Arc::new(
                ItemTemplate::new(&config.dataset, config.seed, 0, &config.transform, config.chunk_bytes)
                    .with_format(self.format(), &config.record)
                    .with_mode(mode),
            )
        };
        // The subset: whole shards, or with an index only the samples needed.
        let mut parts = Vec::new();
        let mut planned = 0u64;
        for shard in self.shards() {
            if planned >= samples {
                break;
            }
            let end = shard.samples.map(|n| n.min(samples - planned));
            planned += end.unwrap_or(samples / 4 + 1);
            parts.push(Part {
                shard: shard.name.clone(),
                start: 0,
                end,
            });
        }
        let mut stages = Vec::new();
        let parts = Arc::new(parts);

        // 1. Storage, with the counts that make the later stages' ranges.
        let (storage, counts) = run_stage(
            Stage::Storage,
            &workers,
            &parts,
            &template(ItemMode::Read),
            config,
            min_seconds,
        )
        .await?;
        // The later stages take about `samples` samples: whole shards were
        // read when the dataset has no index to say their sizes.
        let mut left = samples;
        let parts: Vec<Part> = parts
            .iter()
            .cloned()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map_while(|(p, n)| {
                let take = n.min(left);
                left -= take;
                (take > 0).then(|| Part {
                    end: Some(p.start + take),
                    ..p
                })
            })
            .collect();
        let parts = Arc::new(parts);
        stages.push(storage.clone());

        // 2. Decode + transform, each worker alone.
        let mut decode_total = StageRate {
            stage: Stage::Decode,
            worker: None,
            samples: 0,
            bytes: 0,
            seconds: 0.0,
        };
        let mut decode_rate = 0.0;
        for w in &workers {
            let (rate, _) = run_stage(
                Stage::Decode,
                std::slice::from_ref(w),
                &parts,
                &template(ItemMode::Decode),
                config,
                min_seconds,
            )
            .await?;
            decode_rate += rate.images_per_sec();
            decode_total.samples += rate.samples;
            decode_total.bytes += rate.bytes;
            stages.push(StageRate {
                worker: Some(w.addr.clone()),
                ..rate
            });
        }
        // Together: the sum of the rates, as one number of samples per second.
        decode_total.seconds = decode_total.samples as f64 / decode_rate.max(1e-9);
        stages.push(decode_total.clone());

        // 3. Transport.
        let (transport, _) = run_stage(
            Stage::Transport,
            &workers,
            &parts,
            &template(ItemMode::Synthetic),
            config,
            min_seconds,
        )
        .await?;
        stages.push(transport.clone());

        // 4. The client's assembly (and upload).
        let client = self
            .measure_ingest(transport.samples.max(2 * config.batch_size as u64), min_seconds)
            .await?;
        stages.push(client.clone());

        let (s, d, t, c) = (
            storage.images_per_sec(),
            decode_total.images_per_sec(),
            transport.images_per_sec(),
            client.images_per_sec(),
        );
        let n = workers.len();
        let (bottleneck, summary) = if t < d.min(c) {
            (
                Stage::Transport,
                format!(
                    "the transport is the bottleneck: the workers send {t:.0} images/s of zeros to this client, less than they decode ({d:.0}/s) and it assembles ({c:.0}/s)"
                ),
            )
        } else if c < d {
            (
                Stage::Client,
                format!(
                    "the client is the bottleneck: it assembles{} {c:.0} images/s, less than {n} worker(s) decode ({d:.0}/s)",
                    if self.uploads() { " and uploads" } else { "" }
                ),
            )
        } else if d >= STORAGE_BOUND * s {
            (
                Stage::Storage,
                format!(
                    "storage is the bottleneck: decoding barely slows the workers down from reading alone ({d:.0} vs {s:.0} images/s), so they wait on reads; more readers (workers) or faster storage help"
                ),
            )
        } else {
            (
                Stage::Decode,
                format!(
                    "decode + transform is the bottleneck: {n} worker(s) decode {d:.0} images/s, below storage ({s:.0}/s), the transport ({t:.0}/s) and the client ({c:.0}/s)"
                ),
            )
        };
        let target = target_rate.unwrap_or(c.min(t));
        // Each worker as fast as the measured ones are, on average, in
        // the pipeline up to the network.
        let per_worker = d.min(s) / n as f64;
        let workers_for_target = (target / per_worker.max(1e-9)).ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
        Ok(Diagnosis {
            stages,
            bottleneck,
            summary,
            target_rate: target,
            workers: n,
            workers_for_target,
            pack_report: self.pack_report().to_vec(),
        })
    }

    /// Stage 4: `samples` samples of the output size, from memory, through
    /// the assembler (and the upload, waited for), as the epoch's
    /// supervisor runs them.
    async fn measure_ingest(&self, samples: u64, min_seconds: f64) -> Result<StageRate, ClientError> {
        let config = self.config();
        let size = config.transform.size;
        let side = size.side().unwrap_or(0);
        // Distinct, non-zero samples, more than a cache holds, as received
        // ones are: zeros would be read from one shared page.
        let sample_bytes = (side as usize).pow(2) * 3;
        let distinct = (INGEST_SOURCE_BYTES / sample_bytes.max(1)).clamp(1, 4096);
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let sources: Vec<Bytes> = (0..distinct)
            .map(|_| {
                Bytes::from(
                    (0..sample_bytes)
                        .map(|_| {
                            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            (state >> 56) as u8
                        })
                        .collect::<Vec<u8>>(),
                )
            })
            .collect();
        let mut assembler = Assembler::new(
            0,
            size,
            config.batch_size,
            LastBatch::Partial,
            None,
            0,
            self.buffers.clone(),
        );
        let uploader = self.uploader.clone();
        let started = Instant::now();
        let mut bytes = 0u64;
        let mut land = |batch: crate::batch::Batch| -> Result<(), ClientError> {
            bytes += batch.pixels.len() as u64;
            let batch = upload(uploader.as_deref(), batch)?;
            if let Some(device) = &batch.device {
                // The clock stops only once the batch is in device memory.
                device
                    .synchronize()
                    .map_err(|e| ClientError::Device(format!("batch {}: {e}", batch.index)))?;
            }
            Ok(())
        };
        let mut sent = 0u64;
        while sent < samples || started.elapsed().as_secs_f64() < min_seconds {
            let position = sent;
            sent += 1;
            let sample = Sample {
                key: String::new(),
                label: 0,
                height: side,
                width: side,
                pixels: sources[position as usize % sources.len()].clone(),
                position,
                item: 0,
                fields: Vec::new(),
                views: Vec::new(),
                device: None,
            };
            if let Some(batch) = assembler.push(sample).await? {
                land(batch)?;
            }
        }
        while let Some(batch) = assembler.finish_next().await? {
            land(batch)?;
        }
        Ok(StageRate {
            stage: Stage::Client,
            worker: None,
            samples: sent,
            bytes,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Runs `parts` on `workers` at once, each worker with as many items in
/// flight as its credit allows; the rate, and each part's samples.
async fn run_stage(
    stage: Stage,
    workers: &[WorkerConn],
    parts: &Arc<Vec<Part>>,
    template: &Arc<ItemTemplate>,
    config: &crate::LoaderConfig,
    min_seconds: f64,
) -> Result<(StageRate, Vec<u64>), ClientError> {
    let started = Instant::now();
    // Parts still to take in this pass, and the passes made.
    let queue = Arc::new(Mutex::new(((0..parts.len()).collect::<VecDeque<_>>(), 1usize)));
    let counts = Arc::new(Mutex::new(vec![0u64; parts.len()]));
    let known: Vec<u64> = parts.iter().filter_map(|p| p.end.map(|e| e - p.start)).collect();
    let per_item = (!known.is_empty()).then(|| known.iter().sum::<u64>() / known.len() as u64);
    let mut tasks = Vec::new();
    for w in workers {
        let lanes = match (w.limit, per_item) {
            (CreditLimit::Items(n), _) => n,
            (CreditLimit::Samples(want), Some(per_item)) => (want.div_ceil(per_item.max(1)) as usize + 1).clamp(2, 64),
            (CreditLimit::Samples(_), None) => 4,
        };
        for lane in 0..lanes {
            let mut client = w.lane_clients[lane % w.lane_clients.len()].clone();
            let (queue, counts, addr) = (Arc::clone(&queue), Arc::clone(&counts), w.addr.clone());
            let (parts, template) = (Arc::clone(parts), Arc::clone(template));
            let size = config.transform.size;
            let timeout = config.progress_timeout;
            tasks.push(tokio::spawn(async move {
                let (mut samples, mut bytes) = (0u64, 0u64);
                loop {
                    let next = {
                        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
                        if q.0.is_empty() && started.elapsed().as_secs_f64() < min_seconds && q.1 < MAX_PASSES {
                            // Another pass, to run for the stage's minimum time.
                            q.0.extend(0..parts.len());
                            q.1 += 1;
                        }
                        q.0.pop_front()
                    };
                    let Some(i) = next else {
                        return Ok((samples, bytes));
                    };
                    let result = async {
                        let part = &parts[i];
                        let request = template.request(&part.shard, &PositionSet::new(), part.start, part.end);
                        let fail = |message: String| ClientError::Stage {
                            stage: stage.as_str(),
                            addr: addr.clone(),
                            message,
                        };
                        let mut chunks = tokio::time::timeout(timeout, client.process_shard(request))
                            .await
                            .map_err(|_| fail(format!("no answer within {}s", timeout.as_secs())))?
                            .map_err(|s| fail(describe_status(&s)))?;
                        let mut n = 0u64;
                        loop {
                            let chunk = tokio::time::timeout(timeout, chunks.next())
                                .await
                                .map_err(|_| fail(format!("nothing received for {}s", timeout.as_secs())))?
                                .map_err(|s| fail(describe_status(&s)))?;
                            let Some(mut chunk) = chunk else { break };
                            n += chunk.read_samples;
                            bytes += chunk.read_bytes;
                            for sample in chunk.take_samples(size, &[], &[], None, None) {
                                let sample = sample.map_err(&fail)?;
                                n += 1;
                                bytes += sample.pixels.len() as u64;
                            }
                            if !chunk.shard_error.is_empty() {
                                return Err(fail(chunk.shard_error));
                            }
                            if chunk.done {
                                break;
                            }
                        }
                        Ok::<_, ClientError>(n)
                    }
                    .await;
                    let n = match result {
                        Ok(n) => n,
                        Err(e) => {
                            // The stage has failed: the other lanes stop
                            // after the item they hold.
                            let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
                            q.0.clear();
                            q.1 = MAX_PASSES;
                            return Err(e);
                        }
                    };
                    samples += n;
                    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                    counts[i] = counts[i].max(n);
                }
            }));
        }
    }
    let (mut samples, mut bytes) = (0, 0);
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok((s, b))) => {
                samples += s;
                bytes += b;
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(ClientError::Batches(format!("a {} task failed: {e}", stage.as_str())));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let seconds = started.elapsed().as_secs_f64();
    let counts = std::mem::take(&mut *counts.lock().unwrap_or_else(|p| p.into_inner()));
    Ok((
        StageRate {
            stage,
            worker: None,
            samples,
            bytes,
            seconds,
        },
        counts,
    ))
}
