//! Argument types the ops share, in torchvision's shapes: a size is an int
//! or `[h, w]`, a range a number or `[min, max]`, a fill a number or one per
//! channel. Each keeps the shape it was given, so a spec serialises back to
//! what the user wrote. [`MAX_OUTPUT_SIZE`] bounds every output side.

use serde::{Deserialize, Serialize};

pub use crate::params::{Interpolation, PaddingMode, Warp};

/// Largest output side a worker accepts. Anything bigger is almost certainly
/// a mistake and would let one request allocate gigabytes per batch.
pub const MAX_OUTPUT_SIZE: u32 = 4096;

/// A number, or a `[min, max]` pair: what torchvision accepts for degrees,
/// jitter strengths, sigma and the like. Each op says what a lone number
/// means (`degrees=30` is `[-30, 30]`, `brightness=0.4` is `[0.6, 1.4]`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Range {
    One(f64),
    Pair([f64; 2]),
}

impl Range {
    /// `[min, max]`, a lone number `x` becoming `[-x, x]`.
    pub fn symmetric(self) -> (f64, f64) {
        match self {
            Self::One(x) => (-x, x),
            Self::Pair([a, b]) => (a, b),
        }
    }

    /// `[min, max]`, a lone number `x` becoming `[x, x]`.
    pub fn point(self) -> (f64, f64) {
        match self {
            Self::One(x) => (x, x),
            Self::Pair([a, b]) => (a, b),
        }
    }

    /// ColorJitter's reading: a lone `x` is `[max(0, 1 - x), 1 + x]`.
    pub fn around_one(self) -> (f64, f64) {
        match self {
            Self::One(x) => ((1.0 - x).max(0.0), 1.0 + x),
            Self::Pair([a, b]) => (a, b),
        }
    }
}

/// Checks that `(lo, hi)` is finite, ordered and within `[min, max]`.
pub fn check_range(what: &str, (lo, hi): (f64, f64), min: f64, max: f64) -> Result<(), String> {
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(format!("{what} ({lo}, {hi}) must be finite"));
    }
    if lo > hi {
        return Err(format!("{what} ({lo}, {hi}) must have min <= max"));
    }
    if lo < min || hi > max {
        return Err(format!("{what} ({lo}, {hi}) must lie in [{min}, {max}]"));
    }
    Ok(())
}

/// A probability in [0, 1].
pub fn check_p(p: f64) -> Result<(), String> {
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("p {p} must lie in [0, 1]"));
    }
    Ok(())
}

/// A crop's output size: an int (square), `[s]` or `[h, w]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CropSize {
    Square(u32),
    Sides(Vec<u32>),
}

impl CropSize {
    /// (width, height).
    pub fn wh(&self) -> (u32, u32) {
        match self {
            Self::Square(s) => (*s, *s),
            Self::Sides(v) => match v[..] {
                [s] => (s, s),
                [h, w] => (w, h),
                _ => (0, 0),
            },
        }
    }

    pub fn check(&self, what: &str) -> Result<(), String> {
        if let Self::Sides(v) = self
            && !(1..=2).contains(&v.len())
        {
            return Err(format!("{what} must be an int or [h, w], got {} values", v.len()));
        }
        let (w, h) = self.wh();
        for s in [w, h] {
            if s == 0 || s > MAX_OUTPUT_SIZE {
                return Err(format!("{what} {s} must lie in [1, {MAX_OUTPUT_SIZE}]"));
            }
        }
        Ok(())
    }
}

/// A fill colour: a number for every channel, or one per channel. Values
/// are truncated to integers, as torchvision does for PIL images.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Fill {
    All(f64),
    Channels(Vec<f64>),
}

impl Default for Fill {
    fn default() -> Self {
        Self::All(0.0)
    }
}

impl Fill {
    pub fn check(&self) -> Result<(), String> {
        let values = match self {
            Self::All(v) => vec![*v],
            Self::Channels(v) if v.len() == 1 || v.len() == 3 => v.clone(),
            Self::Channels(v) => return Err(format!("fill must have 1 or 3 values, got {}", v.len())),
        };
        if let Some(v) = values.iter().find(|v| !(v.is_finite() && (0.0..256.0).contains(*v))) {
            return Err(format!("fill {v} must lie in [0, 255]"));
        }
        Ok(())
    }

    pub fn rgb(&self) -> [u8; 3] {
        let t = |v: f64| v as u8;
        match self {
            Self::All(v) => [t(*v); 3],
            Self::Channels(v) if v.len() == 3 => [t(v[0]), t(v[1]), t(v[2])],
            Self::Channels(v) => [t(v.first().copied().unwrap_or(0.0)); 3],
        }
    }
}

/// torchvision's `fill` that may be `None` (meaning 0).
pub fn fill_rgb(fill: &Option<Fill>) -> [u8; 3] {
    fill.as_ref().map_or([0; 3], Fill::rgb)
}

pub fn check_fill(fill: &Option<Fill>) -> Result<(), String> {
    fill.as_ref().map_or(Ok(()), Fill::check)
}

/// Padding: an int for every side, `[left/right, top/bottom]` or
/// `[left, top, right, bottom]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Padding {
    All(u32),
    Sides(Vec<u32>),
}

impl Padding {
    /// (left, top, right, bottom).
    pub fn ltrb(&self) -> [u32; 4] {
        match self {
            Self::All(p) => [*p; 4],
            Self::Sides(v) => match v[..] {
                [p] => [p; 4],
                [x, y] => [x, y, x, y],
                [l, t, r, b] => [l, t, r, b],
                _ => [0; 4],
            },
        }
    }

    pub fn check(&self) -> Result<(), String> {
        if let Self::Sides(v) = self
            && ![1, 2, 4].contains(&v.len())
        {
            return Err(format!("padding must have 1, 2 or 4 values, got {}", v.len()));
        }
        if let Some(p) = self.ltrb().into_iter().find(|&p| p > MAX_OUTPUT_SIZE) {
            return Err(format!("padding {p} must be at most {MAX_OUTPUT_SIZE}"));
        }
        Ok(())
    }
}
