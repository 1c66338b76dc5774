//! Where a rank is in an epoch, as far as the training loop has seen: the
//! state a checkpoint saves so that a job resumes mid-epoch with exactly
//! the batches it had not yet received.
//!
//! Only batches handed to the consumer count. Batches assembled ahead
//! (prefetch) are not delivered, so a resumed epoch produces them again.
//!
//! [`EpochState`] holds the epoch, the next batch's index, the items
//! delivered whole, the positions received of items delivered in part,
//! and a fingerprint of the settings. `Progress` builds it, updated by the
//! `EpochStream` as it hands batches over.

use std::collections::{BTreeMap, BTreeSet};

use stoker_core::PositionSet;

use crate::assemble::{Batch, LastBatch};

/// A resumable position in an epoch.
///
/// `done_items` are plan items every sample of which was delivered;
/// `partial` lists, for items delivered in part, the positions (in the
/// item's shard) delivered: a sample's identity, where keys may repeat. With
/// deterministic order the resumed epoch yields batch `batches` onwards
/// exactly as the interrupted one would have; in arrival order it yields
/// every sample not yet delivered, once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochState {
    pub epoch: u64,
    /// Batches delivered: the index of the next batch.
    pub batches: u64,
    pub done_items: Vec<u32>,
    pub partial: Vec<(u32, PositionSet)>,
    /// What the positions refer to, checked on resume: the plan must be
    /// the same.
    pub fingerprint: Fingerprint,
}

/// The settings a saved position depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub seed: u64,
    pub rank: u32,
    pub world_size: u32,
    pub batch_size: u64,
    /// Side of the output images.
    pub image_size: u64,
    /// The last-batch policy: it decides the epoch's batch count.
    pub last_batch: LastBatch,
    /// Items in the epoch's plan, and the dataset's shard count.
    pub items: u64,
    pub shards: u64,
    pub deterministic: bool,
}

impl Fingerprint {
    /// Names the first setting that differs, as `what: saved vs now`.
    pub fn mismatch(&self, now: &Fingerprint) -> Option<String> {
        let fields: [(&str, u64, u64); 7] = [
            ("seed", self.seed, now.seed),
            ("rank", self.rank.into(), now.rank.into()),
            ("world size", self.world_size.into(), now.world_size.into()),
            ("batch size", self.batch_size, now.batch_size),
            ("plan items", self.items, now.items),
            ("dataset shards", self.shards, now.shards),
            ("deterministic", self.deterministic.into(), now.deterministic.into()),
        ];
        fields
            .iter()
            .find(|(_, a, b)| a != b)
            .map(|(what, a, b)| format!("{what}: saved {a}, now {b}"))
            .or_else(|| {
                (self.image_size != now.image_size)
                    .then(|| format!("image size: saved {}, now {}", self.image_size, now.image_size))
            })
            .or_else(|| {
                (self.last_batch != now.last_batch)
                    .then(|| format!("last batch: saved {}, now {}", self.last_batch, now.last_batch))
            })
    }
}

/// Tracks what the consumer has received.
#[derive(Debug)]
pub(crate) struct Progress {
    epoch: u64,
    batches: u64,
    done: BTreeSet<u32>,
    partial: BTreeMap<u32, PositionSet>,
    fingerprint: Fingerprint,
}

impl Progress {
    pub fn new(epoch: u64, fingerprint: Fingerprint, resumed: Option<&EpochState>) -> Self {
        let mut p = Self {
            epoch,
            batches: 0,
            done: BTreeSet::new(),
            partial: BTreeMap::new(),
            fingerprint,
        };
        if let Some(s) = resumed {
            p.batches = s.batches;
            p.done.extend(s.done_items.iter().copied());
            p.partial.extend(s.partial.iter().cloned());
        }
        p
    }

    /// Records a batch handed to the consumer.
    pub fn delivered<D>(&mut self, batch: &Batch<D>) {
        self.batches = batch.index + 1;
        for (item, position) in batch.items.iter().zip(&batch.positions) {
            self.partial.entry(*item).or_default().insert(*position);
        }
        for item in &batch.completes {
            self.partial.remove(item);
            self.done.insert(*item);
        }
    }

    pub fn state(&self) -> EpochState {
        EpochState {
            epoch: self.epoch,
            batches: self.batches,
            done_items: self.done.iter().copied().collect(),
            partial: self.partial.iter().map(|(i, k)| (*i, k.clone())).collect(),
            fingerprint: self.fingerprint.clone(),
        }
    }
}
