//! Epoch plans: which shards a rank reads in an epoch, and in what order.
//!
//! The client computes the plan from (seed, epoch, rank, world size) and the
//! dataset's sorted shard list. No coordinator is involved: every rank
//! computes the same permutation and takes its own share of it.
//!
//! [`EpochPlan`] holds the rank's [`PlanItem`]s. With an index, the
//! shuffled shards are laid end to end and cut into equal runs of samples
//! per rank, so a shard on a boundary becomes two sample ranges
//! (`WorkItem.start/end`); without one, whole shards are dealt
//! round-robin.

use crate::rng::{SampleRng, fnv1a, mix64};

/// One shard of a dataset, as listed by a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRef {
    /// Name relative to the dataset root, e.g. `shard-000003.tar`.
    pub name: String,
    pub size_bytes: u64,
    /// Sample count, when the dataset has an index.
    pub samples: Option<u64>,
}

/// One work item of a plan: a shard, or a range of its samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanItem {
    pub shard: ShardRef,
    /// The first sample, by position in the shard (0 for the whole shard).
    pub start: u64,
    /// One past the last sample; `None` for "to the end of the shard".
    pub end: Option<u64>,
}

impl PlanItem {
    fn whole(shard: ShardRef) -> Self {
        Self {
            shard,
            start: 0,
            end: None,
        }
    }

    /// Samples in this item, when the shard's count is known.
    pub fn samples(&self) -> Option<u64> {
        let total = self.shard.samples?;
        Some(self.end.unwrap_or(total).min(total).saturating_sub(self.start))
    }
}

/// What one rank reads in one epoch, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochPlan {
    pub epoch: u64,
    pub items: Vec<PlanItem>,
}

/// Samples in the whole dataset (every rank's share together), when every
/// shard's count is known. The counts come from the dataset's index: a sum
/// past u64 is treated as no index rather than trusted.
pub fn indexed_samples(shards: &[ShardRef]) -> Option<u64> {
    shards
        .iter()
        .try_fold(0u64, |total, s| s.samples.and_then(|n| total.checked_add(n)))
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("world size must be at least 1")]
    EmptyWorld,
    #[error("rank {rank} is not below world size {world}")]
    Rank { rank: u32, world: u32 },
}

impl EpochPlan {
    /// Shuffles `shards` (which must be sorted by name) with a permutation
    /// derived from (seed, epoch), then splits the epoch between ranks.
    ///
    /// When every shard's sample count is known (the dataset has an index),
    /// the shuffled shards are laid end to end and each rank takes an equal
    /// run of samples: rank `r` of `w` gets positions `r*n/w` up to
    /// `(r+1)*n/w` of the `n` samples, so shares differ by at most one
    /// sample and a shard on a boundary is split into sample ranges.
    /// Otherwise rank `r` takes every shard at position `p` with
    /// `p % w == r`.
    pub fn new(shards: &[ShardRef], seed: u64, epoch: u64, rank: u32, world: u32) -> Result<Self, PlanError> {
        if world == 0 {
            return Err(PlanError::EmptyWorld);
        }
        if rank >= world {
            return Err(PlanError::Rank { rank, world });
        }
        let mut order: Vec<usize> = (0..shards.len()).collect();
        let mut rng = SampleRng::from_seed(mix64(seed ^ mix64(epoch ^ fnv1a(b"stoker.shards"))));
        for i in (1..order.len()).rev() {
            let j = rng.int_inclusive(0, i as i64) as usize;
            order.swap(i, j);
        }
        let Some(total) = indexed_samples(shards) else {
            let items = order
                .into_iter()
                .skip(rank as usize)
                .step_by(world as usize)
                .map(|i| PlanItem::whole(shards[i].clone()))
                .collect();
            return Ok(Self { epoch, items });
        };
        let share = |r: u64| (u128::from(total) * u128::from(r) / u128::from(world)) as u64;
        let (lo, hi) = (share(u64::from(rank)), share(u64::from(rank) + 1));
        let mut items = Vec::new();
        let mut offset = 0u64;
        for i in order {
            let shard = &shards[i];
            let n = shard.samples.unwrap_or(0);
            let (first, last) = (offset, offset + n);
            offset = last;
            if n == 0 || lo == hi || last <= lo || first >= hi {
                continue;
            }
            let start = lo.saturating_sub(first);
            let end = (hi < last).then(|| hi - first);
            items.push(PlanItem {
                shard: shard.clone(),
                start,
                end,
            });
        }
        Ok(Self { epoch, items })
    }

    /// Samples in this rank's share, when every shard's count is known.
    pub fn samples(&self) -> Option<u64> {
        self.items.iter().map(PlanItem::samples).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(n: usize, samples: Option<u64>) -> Vec<ShardRef> {
        (0..n)
            .map(|i| ShardRef {
                name: format!("shard-{i:06}.tar"),
                size_bytes: 1,
                samples,
            })
            .collect()
    }

    /// Every (shard, position) a set of ranks reads, expanding ranges.
    fn positions(all: &[ShardRef], world: u32, epoch: u64) -> (Vec<(String, u64)>, Vec<u64>) {
        let mut seen = Vec::new();
        let mut per_rank = Vec::new();
        for rank in 0..world {
            let plan = EpochPlan::new(all, 5, epoch, rank, world).unwrap();
            per_rank.push(plan.samples().unwrap());
            for item in plan.items {
                let end = item.end.unwrap_or(item.shard.samples.unwrap());
                seen.extend((item.start..end).map(|p| (item.shard.name.clone(), p)));
            }
        }
        seen.sort();
        (seen, per_rank)
    }

    #[test]
    fn ranks_partition_the_shards_without_an_index() {
        let all = shards(37, None);
        let mut seen = Vec::new();
        for rank in 0..4 {
            let plan = EpochPlan::new(&all, 5, 1, rank, 4).unwrap();
            assert!(plan.items.iter().all(|i| i.start == 0 && i.end.is_none()));
            seen.extend(plan.items.into_iter().map(|i| i.shard.name));
        }
        seen.sort();
        let expected: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn with_an_index_ranks_get_equal_shares_covering_every_sample_once() {
        // 7 shards of 10 samples between 3 ranks: 70 = 23 + 23 + 24.
        let all = shards(7, Some(10));
        for epoch in 0..5 {
            let (seen, per_rank) = positions(&all, 3, epoch);
            let mut expected: Vec<(String, u64)> =
                all.iter().flat_map(|s| (0..10).map(|p| (s.name.clone(), p))).collect();
            expected.sort();
            assert_eq!(seen, expected, "epoch {epoch}");
            assert_eq!(per_rank, [23, 23, 24]);
        }
        // More ranks than samples: some ranks get nothing, not empty ranges.
        let (seen, per_rank) = positions(&shards(1, Some(3)), 5, 0);
        assert_eq!((seen.len(), per_rank), (3, vec![0, 1, 0, 1, 1]));
        // More ranks than shards: every rank still gets its share.
        let (seen, per_rank) = positions(&shards(2, Some(5)), 4, 0);
        assert_eq!(seen.len(), 10);
        assert_eq!(per_rank, [2, 3, 2, 3]);
    }

    #[test]
    fn a_split_shard_is_read_as_ranges() {
        let all = shards(2, Some(10));
        let plan = EpochPlan::new(&all, 0, 0, 0, 4).unwrap();
        assert_eq!(plan.items.len(), 1);
        assert_eq!((plan.items[0].start, plan.items[0].end), (0, Some(5)));
        let plan = EpochPlan::new(&all, 0, 0, 1, 4).unwrap();
        assert_eq!((plan.items[0].start, plan.items[0].end), (5, None));
        assert_eq!(indexed_samples(&all), Some(20));
        let huge = [
            ShardRef {
                samples: Some(u64::MAX),
                ..all[0].clone()
            },
            all[1].clone(),
        ];
        assert_eq!(indexed_samples(&huge), None, "an overflowing index is no index");
    }

    #[test]
    fn epochs_differ_and_repeat() {
        let all = shards(20, None);
        let a = EpochPlan::new(&all, 5, 1, 0, 1).unwrap();
        assert_eq!(a, EpochPlan::new(&all, 5, 1, 0, 1).unwrap());
        assert_ne!(a.items, EpochPlan::new(&all, 5, 2, 0, 1).unwrap().items);
        let indexed = EpochPlan::new(&shards(20, Some(10)), 5, 1, 0, 1).unwrap();
        assert_eq!(indexed.samples(), Some(200));
    }

    #[test]
    fn refuses_bad_rank() {
        let all = shards(2, None);
        assert_eq!(
            EpochPlan::new(&all, 0, 0, 2, 2),
            Err(PlanError::Rank { rank: 2, world: 2 })
        );
        assert_eq!(EpochPlan::new(&all, 0, 0, 0, 0), Err(PlanError::EmptyWorld));
    }
}
