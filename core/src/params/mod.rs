//! A transform spec resolved into concrete steps for one sample.
//!
//! All randomness is drawn here, on the host, from the sample's
//! [`SampleRng`](crate::rng::SampleRng). Executors (the CPU path, and later
//! CUDA kernels) only carry out [`Step`]s, so every executor makes the same
//! choices for a sample. The ops themselves live in `transform::ops`, one
//! module each; this module holds what they resolve to and the walk that
//! bounds their memory, one job a file:
//!
//! - `step`: the step language ([`Step`], [`Rect`], [`PaddingMode`],
//!   [`Interpolation`], [`Warp`], [`Enhance`], [`EraseFill`],
//!   [`erase_noise`]);
//! - `bounds`: the size bounds ([`Bounds`], [`Walk`], [`TooLarge`],
//!   [`RESIZE_BYTES_PER_LINE`]);
//! - `resolve`: the context of resolving one sample ([`Cx`], [`PixelScale`],
//!   [`ResolveError`]).
//!
//! Every item is re-exported here, so `params::X` names it wherever it
//! lives. This module sits below `transform`, which it does not import.

mod bounds;
mod resolve;
mod step;

pub use bounds::{Bounds, RESIZE_BYTES_PER_LINE, TooLarge, Walk};
pub use resolve::{Cx, PixelScale, ResolveError};
pub(crate) use step::round_half_even;
pub use step::{Enhance, EraseFill, Interpolation, PaddingMode, Rect, Step, Warp, erase_noise};

#[cfg(test)]
mod tests;
