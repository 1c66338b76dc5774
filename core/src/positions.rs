//! Sets of sample positions in a shard: a sample's identity is (shard,
//! position), and what a client holds of an item, or asks a worker to skip,
//! is a set of positions.
//!
//! Kept as sorted, disjoint, non-adjacent ranges: samples mostly arrive in
//! order, so an item's set is one range, or a few while a GPU worker's
//! stragglers come in. Its size follows the gaps, not the samples: an epoch
//! of 10 M samples costs the client a range or two per item, not 10 M key
//! strings.

use std::ops::Range;

/// A set of positions (`u64`), as sorted, disjoint, non-adjacent ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PositionSet {
    ranges: Vec<Range<u64>>,
    len: u64,
}

impl PositionSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The set holding every position of `ranges` (in any order; they may
    /// overlap; empty ones are ignored).
    pub fn from_ranges(ranges: impl IntoIterator<Item = Range<u64>>) -> Self {
        let mut all: Vec<Range<u64>> = ranges.into_iter().filter(|r| r.start < r.end).collect();
        all.sort_unstable_by_key(|r| r.start);
        let mut set = Self::new();
        for r in all {
            match set.ranges.last_mut() {
                Some(last) if r.start <= last.end => {
                    if r.end > last.end {
                        set.len += r.end - last.end;
                        last.end = r.end;
                    }
                }
                _ => {
                    set.len += r.end - r.start;
                    set.ranges.push(r);
                }
            }
        }
        set
    }

    /// Adds `position`; false if it was there already. Positions are below
    /// `u64::MAX` (a range must end past its last one): `u64::MAX` is
    /// refused, as if present, and callers check positions against the
    /// item's range first.
    pub fn insert(&mut self, position: u64) -> bool {
        if position == u64::MAX {
            return false;
        }
        // The first range that starts after `position`.
        let after = self.ranges.partition_point(|r| r.start <= position);
        if after > 0 && position < self.ranges[after - 1].end {
            return false;
        }
        let joins_before = after > 0 && self.ranges[after - 1].end == position;
        let joins_after = after < self.ranges.len() && position.checked_add(1) == Some(self.ranges[after].start);
        match (joins_before, joins_after) {
            (true, true) => {
                let next = self.ranges.remove(after);
                self.ranges[after - 1].end = next.end;
            }
            (true, false) => self.ranges[after - 1].end = position + 1,
            (false, true) => self.ranges[after].start = position,
            (false, false) => self.ranges.insert(after, position..position + 1),
        }
        self.len += 1;
        true
    }

    /// Adds every position of `other`.
    pub fn union_with(&mut self, other: &PositionSet) {
        if !other.is_empty() {
            *self = Self::from_ranges(self.ranges.iter().chain(&other.ranges).cloned().collect::<Vec<_>>());
        }
    }

    pub fn contains(&self, position: u64) -> bool {
        let after = self.ranges.partition_point(|r| r.start <= position);
        after > 0 && position < self.ranges[after - 1].end
    }

    /// Positions in the set.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The set's ranges, sorted.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// The positions, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges.iter().flat_map(Clone::clone)
    }

    /// Heap bytes the set holds (for measuring the client's ledger).
    pub fn heap_bytes(&self) -> usize {
        self.ranges.capacity() * std::mem::size_of::<Range<u64>>()
    }
}

#[cfg(test)]
#[allow(
    clippy::single_range_in_vec_init,
    reason = "sets are compared with their ranges, one range or several"
)]
mod tests {
    use super::*;

    #[test]
    fn inserts_merge_into_ranges() {
        let mut s = PositionSet::new();
        for p in [5, 3, 4, 10, 0, 1, 2, 9] {
            assert!(s.insert(p), "{p}");
        }
        assert_eq!(s.ranges(), &[0..6, 9..11]);
        assert_eq!(s.len(), 8);
        assert!(!s.insert(4) && !s.insert(10) && !s.insert(0));
        assert_eq!(s.len(), 8);
        assert!(s.contains(9) && !s.contains(8) && !s.contains(11) && !s.contains(6));
        assert!(s.insert(6) && s.insert(8) && s.insert(7));
        assert_eq!(s.ranges(), &[0..11]);
        assert_eq!(s.iter().collect::<Vec<_>>(), (0..11).collect::<Vec<_>>());
    }

    #[test]
    fn from_ranges_merges_overlaps_and_neighbours() {
        let s = PositionSet::from_ranges([7..9, 0..2, 1..3, 3..4, 5..5, 8..12]);
        assert_eq!(s.ranges(), &[0..4, 7..12]);
        assert_eq!(s.len(), 9);
    }

    #[test]
    fn agrees_with_a_plain_set_on_random_inserts() {
        let mut rng = crate::SampleRng::from_seed(3);
        let mut s = PositionSet::new();
        let mut plain = std::collections::BTreeSet::new();
        for _ in 0..5000 {
            let p = rng.int_inclusive(0, 2000) as u64;
            assert_eq!(s.insert(p), plain.insert(p));
        }
        assert_eq!(s.len(), plain.len() as u64);
        assert!(s.iter().eq(plain.iter().copied()));
        assert_eq!(s, PositionSet::from_ranges(s.ranges().iter().cloned()));
        for w in s.ranges().windows(2) {
            assert!(w[0].end < w[1].start, "{w:?} not disjoint and apart");
        }
    }

    #[test]
    fn the_largest_position_fits_and_max_is_refused() {
        let mut s = PositionSet::new();
        assert!(s.insert(u64::MAX - 1));
        assert!(!s.insert(u64::MAX));
        assert!(s.contains(u64::MAX - 1) && !s.contains(u64::MAX));
        assert_eq!(s.ranges(), &[u64::MAX - 1..u64::MAX]);
    }
}
