//! `--replay` (benchmarks only): an item's results kept in memory and sent
//! again for every later request of the same shard range.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::sink::send;
use super::{Chunk, Item, ItemError, Processed, WorkerContext};
use crate::memory::Reservation;

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

    pub(super) fn get(&self, item: &Item) -> Option<Arc<Vec<Processed>>> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.get(&Self::key(item)).cloned()
    }

    pub(super) fn put(&self, item: &Item, samples: Vec<Processed>) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.insert(Self::key(item), Arc::new(samples));
    }
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
        if chunk.pixel_bytes >= item.chunk_bytes && !send(ctx, tx, std::mem::take(&mut chunk)).await {
            return false;
        }
    }
    chunk.done = true;
    send(ctx, tx, chunk).await
}
