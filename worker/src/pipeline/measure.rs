//! The item modes `stoker doctor` measures one stage with: `Read` (the
//! shard read and parsed, counts sent back) and `Synthetic` (zero pixels
//! of the output size, nothing read: the transport alone). `Decode` is an
//! ordinary item whose chunks the gRPC edge turns into counts.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::samples::ItemSamples;
use super::sink::send;
use super::{Chunk, Item, ItemError, Processed, WorkerContext};
use crate::memory::Reservation;

/// Samples counted per chunk of a `Read` item.
const READ_CHUNK_SAMPLES: u64 = 1024;

/// Reads the item's samples from storage, parses them and drops them,
/// sending counts: samples, and encoded image bytes. Returns false if the
/// client left.
pub(super) async fn read_item(
    ctx: &Arc<WorkerContext>,
    item: &Item,
    tx: &mpsc::Sender<Result<Chunk, ItemError>>,
) -> Result<bool, ItemError> {
    let shard = item.dataset.join(&item.shard);
    let mut samples = ItemSamples::open(item, &ctx.storage, ctx.config.max_member_bytes, &ctx.budget).await?;
    let mut chunk = Chunk::default();
    loop {
        let raw = match samples.next_sample().await {
            Ok(Some(raw)) => raw,
            Ok(None) => break,
            Err(e) if e.is_io() => return Err(ItemError::Read { shard, source: e }),
            Err(e) => {
                chunk.shard_error = Some(format!("{shard}: {e}"));
                break;
            }
        };
        if item.end.is_some_and(|end| raw.position >= end) {
            break;
        }
        if raw.position < item.start {
            continue;
        }
        chunk.read_samples += 1;
        chunk.read_bytes += raw.image.as_ref().map_or(0, |(_, data)| data.len() as u64);
        if chunk.read_samples >= READ_CHUNK_SAMPLES && !send(ctx, tx, std::mem::take(&mut chunk)).await {
            return Ok(false);
        }
    }
    chunk.done = true;
    Ok(send(ctx, tx, chunk).await)
}

/// Sends `end - start` samples of the item's output size with zero pixels
/// (all sharing one buffer), in chunks of the item's chunk size. Returns
/// false if the client left.
pub(super) async fn synthetic_item(
    ctx: &Arc<WorkerContext>,
    item: &Item,
    tx: &mpsc::Sender<Result<Chunk, ItemError>>,
) -> bool {
    // Each image's own size has no one size to send: the request's check
    // refuses synthetic items of such a spec.
    let size = item.spec.size.side().unwrap_or(0);
    let pixels = Bytes::from(vec![0u8; (size as usize).pow(2) * 3]);
    let mut chunk = Chunk::default();
    for position in item.start..item.end.unwrap_or(item.start) {
        let sample = Processed {
            key: format!("{}#{position}", item.shard),
            position,
            label: 0,
            width: size,
            height: size,
            pixels: pixels.clone(),
            fields: Vec::new(),
            device: None,
        };
        chunk.push(sample, Reservation::default());
        if chunk.payload_bytes >= item.chunk_bytes && !send(ctx, tx, std::mem::take(&mut chunk)).await {
            return false;
        }
    }
    chunk.done = true;
    send(ctx, tx, chunk).await
}
