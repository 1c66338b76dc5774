//! Deterministic per-sample randomness.
//!
//! A sample's augmentation parameters derive from (seed, epoch, sample
//! identity) and nothing else, so any worker, CPU or GPU, on any machine,
//! produces the same crop and flips for it. A sample's identity is its
//! shard and its position in the shard, never its key: keys repeat in real
//! datasets (merged WebDataset shards, Hugging Face `path` columns), and two
//! samples with one key are two samples, with augmentations of their own.
//! The hash and generator below are part of that contract: changing them
//! changes every augmentation, so they are written out here rather than
//! taken from a crate whose output may change.
//!
//! [`ItemSeed`] comes from (seed, epoch, shard), and
//! [`ItemSeed::sample`] gives a sample's generator from its position. Each
//! op draws from its own fork ([`SampleRng::fork`]), each view from
//! [`SampleRng::view`]; all drawing happens in `resolve_steps`.

/// 64-bit FNV-1a over bytes: stable, and fast enough for keys.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64's finalizer: a bijective 64-bit mix.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small, fast generator (SplitMix64) with the draws transforms need.
#[derive(Clone, Debug)]
pub struct SampleRng {
    state: u64,
}

/// The randomness of one shard's samples in one epoch: (seed, epoch,
/// shard), to which each sample adds its position ([`ItemSeed::sample`]).
/// The shard is its name within the dataset, so a dataset gets the same
/// augmentations wherever it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemSeed(u64);

impl ItemSeed {
    pub fn new(seed: u64, epoch: u64, shard: &str) -> Self {
        Self(mix64(seed ^ mix64(epoch ^ mix64(fnv1a(shard.as_bytes())))))
    }

    /// The generator of the sample at `position` in the shard.
    pub fn sample(self, position: u64) -> SampleRng {
        SampleRng::from_seed(mix64(self.0 ^ mix64(position)))
    }
}

impl SampleRng {
    /// The generator for one sample of one epoch: the sample at `position`
    /// in `shard`.
    pub fn for_sample(seed: u64, epoch: u64, shard: &str, position: u64) -> Self {
        ItemSeed::new(seed, epoch, shard).sample(position)
    }

    pub fn from_seed(state: u64) -> Self {
        Self { state }
    }

    /// An independent generator for the `index`th transform of a pipeline, so
    /// that adding an op never shifts the draws of the others.
    pub fn fork(&self, index: u64) -> Self {
        Self::from_seed(mix64(self.state ^ mix64(index.wrapping_add(0x5851_f42d_4c95_7f2d))))
    }

    /// The generator of the sample's `index`th view: independent of the
    /// main image's and of the other views' (their forks are far from any
    /// op index), and a function of (seed, epoch, sample, view) only.
    pub fn view(&self, index: usize) -> Self {
        const VIEWS: u64 = 0x7669_6577_0000_0000; // "view"
        self.fork(VIEWS | index as u64)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in [lo, hi] (inclusive, as Python's `randint`).
    pub fn int_inclusive(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as i64
    }

    /// True with probability `p`.
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inputs_same_stream() {
        let mut a = SampleRng::for_sample(7, 3, "train-0001.tar", 12);
        let mut b = ItemSeed::new(7, 3, "train-0001.tar").sample(12);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn each_input_matters() {
        let base = SampleRng::for_sample(7, 3, "s", 0).next_u64();
        assert_ne!(base, SampleRng::for_sample(8, 3, "s", 0).next_u64());
        assert_ne!(base, SampleRng::for_sample(7, 4, "s", 0).next_u64());
        assert_ne!(base, SampleRng::for_sample(7, 3, "s2", 0).next_u64());
        assert_ne!(base, SampleRng::for_sample(7, 3, "s", 1).next_u64());
    }

    #[test]
    fn known_value_is_stable() {
        // The contract: these numbers never change, or every augmentation does.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        // Computed independently (a Python transcription of fnv1a, mix64 and
        // SplitMix64), so a change to any of them fails here.
        assert_eq!(SampleRng::for_sample(0, 0, "a", 0).next_u64(), 0xa7cd_d6b5_450b_9bac);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut r = SampleRng::from_seed(1);
        for _ in 0..10_000 {
            let x = r.int_inclusive(-3, 5);
            assert!((-3..=5).contains(&x));
            let f = r.uniform(0.08, 1.0);
            assert!((0.08..1.0).contains(&f));
        }
        assert_eq!(r.int_inclusive(4, 4), 4);
    }
}
