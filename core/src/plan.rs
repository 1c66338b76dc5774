//! Epoch plans: which shards a rank reads in an epoch, and in what order.
//!
//! The client computes the plan from (seed, epoch, rank, world size) and the
//! dataset's sorted shard list. No coordinator is involved: every rank
//! computes the same permutation and takes its own share of it.

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

/// The shards one rank reads in one epoch, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochPlan {
    pub epoch: u64,
    pub shards: Vec<ShardRef>,
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
    /// derived from (seed, epoch), then gives rank `r` every shard at
    /// position `p` with `p % world == r`.
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
        let shards = order
            .into_iter()
            .skip(rank as usize)
            .step_by(world as usize)
            .map(|i| shards[i].clone())
            .collect();
        Ok(Self { epoch, shards })
    }

    /// Samples in this plan, when every shard's count is known.
    pub fn samples(&self) -> Option<u64> {
        self.shards.iter().map(|s| s.samples).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(n: usize) -> Vec<ShardRef> {
        (0..n)
            .map(|i| ShardRef {
                name: format!("shard-{i:06}.tar"),
                size_bytes: 1,
                samples: Some(10),
            })
            .collect()
    }

    #[test]
    fn ranks_partition_the_epoch() {
        let all = shards(37);
        let mut seen = Vec::new();
        for rank in 0..4 {
            let plan = EpochPlan::new(&all, 5, 1, rank, 4).unwrap();
            seen.extend(plan.shards.into_iter().map(|s| s.name));
        }
        seen.sort();
        let mut expected: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
        expected.sort();
        assert_eq!(seen, expected);
    }

    #[test]
    fn epochs_differ_and_repeat() {
        let all = shards(20);
        let a = EpochPlan::new(&all, 5, 1, 0, 1).unwrap();
        assert_eq!(a, EpochPlan::new(&all, 5, 1, 0, 1).unwrap());
        assert_ne!(a.shards, EpochPlan::new(&all, 5, 2, 0, 1).unwrap().shards);
        assert_eq!(a.samples(), Some(200));
    }

    #[test]
    fn refuses_bad_rank() {
        assert_eq!(
            EpochPlan::new(&shards(2), 0, 0, 2, 2),
            Err(PlanError::Rank { rank: 2, world: 2 })
        );
        assert_eq!(EpochPlan::new(&shards(2), 0, 0, 0, 0), Err(PlanError::EmptyWorld));
    }
}
