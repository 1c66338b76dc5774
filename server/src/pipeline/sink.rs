//! Where an item's chunks go: the channel to the gRPC stream, with the
//! worker's sample and byte counts and the send stage's latency. Below
//! every way an item runs (`item`, `measure`, `replay`), which all send
//! through it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;

use super::{Chunk, ItemError, WorkerContext};
use crate::metrics::Stage;

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
        .fetch_add(chunk.pixel_bytes as u64, Ordering::Relaxed);
    let sending = Instant::now();
    let sent = tx.send(Ok(chunk)).await.is_ok();
    ctx.metrics.observe(Stage::Send, sending.elapsed());
    sent
}
