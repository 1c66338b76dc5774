//! `--replay` (benchmarks only): an item's results kept in memory and sent
//! again for every later request of the same shard range (`sink`'s
//! `replay_item` sends them).

use std::sync::Arc;

use super::types::Item;
use crate::outcome::Processed;

/// Results kept by a worker started with `--replay`: an item's samples are
/// processed once, then sent again from memory, so that a benchmark of the
/// client measures transport and upload alone. Every epoch then gets the
/// same crops, and the cache grows with the dataset: never for training.
#[derive(Debug, Default)]
pub struct ReplayCache {
    items: std::sync::Mutex<std::collections::HashMap<ReplayKey, Arc<Vec<Processed>>>>,
}

/// Shard, sample range and output size (the side, or `None` for each
/// image's own).
type ReplayKey = (String, u64, Option<u64>, Option<u32>);

impl ReplayCache {
    fn key(item: &Item) -> ReplayKey {
        (
            item.dataset.join(&item.shard),
            item.start,
            item.end,
            item.spec.size.side(),
        )
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
