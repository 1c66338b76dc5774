//! Where an item's chunks go: the channel to the gRPC stream, with the
//! worker's sample and byte counts and the send stage's latency, and the
//! `--replay` cache's results sent again ([`replay_item`]). Below every
//! way an item runs (`item`, `measure`, a replayed item), which all send
//! through it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;

use super::context::WorkerContext;
use super::types::{Chunk, Item, ItemError};
use crate::memory::Reservation;
use crate::metrics::Stage;
use crate::outcome::Processed;

/// Sends `chunk` unless it is empty and not the last; false if the client
/// left.
pub(super) async fn send(ctx: &WorkerContext, tx: &mpsc::Sender<Result<Chunk, ItemError>>, chunk: Chunk) -> bool {
    if chunk.is_empty() && !chunk.done {
        return true;
    }
    ctx.counters
        .samples
        .fetch_add(chunk.samples.len() as u64, Ordering::Relaxed);
    ctx.counters
        .bytes
        .fetch_add(chunk.payload_bytes as u64, Ordering::Relaxed);
    let sending = Instant::now();
    let sent = tx.send(Ok(chunk)).await.is_ok();
    ctx.metrics.observe(Stage::Send, sending.elapsed());
    sent
}

/// Sends an item's cached results (`--replay`); false if the receiver left.
pub(super) async fn replay_item(
    ctx: &WorkerContext,
    item: &Item,
    cached: &[Processed],
    tx: &mpsc::Sender<Result<Chunk, ItemError>>,
) -> bool {
    let mut chunk = Chunk::default();
    for p in cached.iter().filter(|p| !item.skip.contains(p.position)) {
        chunk.push(p.clone(), Reservation::default());
        if chunk.payload_bytes >= item.chunk_bytes && !send(ctx, tx, std::mem::take(&mut chunk)).await {
            return false;
        }
    }
    chunk.done = true;
    send(ctx, tx, chunk).await
}
