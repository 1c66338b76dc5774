//! Randomness for spreading retries, where reproducibility is not wanted:
//! many clients or lanes backing off from the same failure should not
//! retry in step. Augmentation never uses this (see [`crate::rng`]).

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// A number in `[0, 1)` that differs between calls, threads and processes:
/// std's randomly keyed hasher over the clock (no extra dependency).
pub fn unit() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(now.as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `d` scaled by a random factor in `[0.5, 1.5)`.
pub fn around(d: Duration) -> Duration {
    d.mul_f64(0.5 + unit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_vary() {
        let draws: Vec<f64> = (0..100).map(|_| unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
        let d = around(Duration::from_secs(2));
        assert!(d >= Duration::from_secs(1) && d < Duration::from_secs(3), "{d:?}");
    }
}
