//! The error budget: how many skipped samples an epoch tolerates (a count
//! or a fraction, [`ErrorBudget`]), and the tally of skip reasons by kind
//! given when it is exceeded.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Skipped samples tolerated per epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ErrorBudget {
    /// At most this many.
    Count(u64),
    /// At most this fraction of the epoch's samples (0.0–1.0).
    Fraction(f64),
}

impl ErrorBudget {
    /// The most skips allowed in an epoch of `total` samples.
    pub fn limit(self, total: u64) -> u64 {
        match self {
            Self::Count(n) => n,
            // Rounded down: a 1% budget of 50 samples tolerates none.
            Self::Fraction(f) => (f * total as f64).floor() as u64,
        }
    }
}

impl fmt::Display for ErrorBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Fraction(x) => write!(f, "{}%", x * 100.0),
        }
    }
}

impl FromStr for ErrorBudget {
    type Err = String;

    /// `N` (a count), `0.01` (a fraction) or `1%`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad =
            || format!("invalid error budget {s:?}: expected a count (10), a fraction (0.01) or a percentage (1%)");
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| bad())?;
            return Self::fraction(p / 100.0).ok_or_else(bad);
        }
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Self::Count(n));
        }
        let f: f64 = s.parse().map_err(|_| bad())?;
        Self::fraction(f).ok_or_else(bad)
    }
}

impl ErrorBudget {
    fn fraction(f: f64) -> Option<Self> {
        (f.is_finite() && (0.0..=1.0).contains(&f)).then_some(Self::Fraction(f))
    }
}

/// Skip reasons grouped by kind, for the message that ends an epoch.
#[derive(Debug, Default)]
pub(crate) struct ReasonTally {
    /// Kind → (count, first key, first full reason).
    kinds: BTreeMap<String, (u64, String, String)>,
}

/// Most kinds kept (the log has every skip).
const MAX_KINDS: usize = 32;

impl ReasonTally {
    pub fn add(&mut self, key: &str, reason: &str) {
        let kind = kind_of(reason);
        if let Some(e) = self.kinds.get_mut(&kind) {
            e.0 += 1;
        } else if self.kinds.len() < MAX_KINDS {
            self.kinds.insert(kind, (1, key.to_owned(), reason.to_owned()));
        } else {
            self.kinds
                .entry("other reasons".to_owned())
                .or_insert_with(|| (0, key.to_owned(), reason.to_owned()))
                .0 += 1;
        }
    }

    /// "3 × jpeg decode failed (first: class_0/img_1: jpeg decode failed:
    /// ...); 1 × ...", most frequent first.
    pub fn summary(&self) -> String {
        let mut kinds: Vec<_> = self.kinds.values().collect();
        kinds.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        kinds
            .iter()
            .map(|(n, key, reason)| format!("{n} × {reason} (first: {key})"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The kind of a skip reason: its text before the first colon, with
/// numbers blanked, so "image of 60000x60000 exceeds..." and "image of
/// 70000x500 exceeds..." count as one.
fn kind_of(reason: &str) -> String {
    let head = reason.split(':').next().unwrap_or(reason);
    let mut out = String::with_capacity(head.len());
    let mut in_number = false;
    for c in head.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_fractions_and_percentages() {
        assert_eq!("10".parse::<ErrorBudget>().unwrap(), ErrorBudget::Count(10));
        assert_eq!("0.01".parse::<ErrorBudget>().unwrap(), ErrorBudget::Fraction(0.01));
        assert_eq!("2.5%".parse::<ErrorBudget>().unwrap(), ErrorBudget::Fraction(0.025));
        for bad in ["", "-1", "1.5", "150%", "ten", "nan"] {
            let err = bad.parse::<ErrorBudget>().unwrap_err();
            assert!(err.contains("invalid error budget"), "{bad}: {err}");
        }
        assert_eq!(ErrorBudget::Fraction(0.01).limit(50), 0);
        assert_eq!(ErrorBudget::Fraction(0.01).limit(1000), 10);
        assert_eq!(ErrorBudget::Count(3).limit(1000), 3);
    }

    #[test]
    fn the_summary_groups_reasons_by_kind_most_frequent_first() {
        let mut t = ReasonTally::default();
        t.add("a", "image of 60000x60000 exceeds the limit of 100000000 pixels");
        t.add("b", "jpeg decode failed: bad huffman table");
        t.add("c", "jpeg decode failed: premature end");
        t.add("d", "image of 70000x10 exceeds the limit of 100000000 pixels");
        t.add("e", "jpeg decode failed: no SOI");
        let s = t.summary();
        assert!(
            s.starts_with("3 × jpeg decode failed: bad huffman table (first: b); 2 × image of 60000x60000"),
            "{s}"
        );
        assert!(s.ends_with("(first: a)"), "{s}");
    }
}
