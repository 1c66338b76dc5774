//! [`ImageError`]: why an image could not be decoded and transformed,
//! below both the crate's entry points (`lib.rs`) and the sample's plan
//! (`plan.rs`), which both return it.

use stoker_core::{ResolveError, TooLarge};

use crate::augment::AugmentError;
use crate::decode::DecodeError;

/// Why an image could not be decoded and transformed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Not an image, corrupt, truncated, or over the pixel limit.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A transform step would make an image over the pixel limit.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// The sample's draws cannot be carried out (a crop larger than the
    /// image without `pad_if_needed`, as torchvision refuses it).
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Augment(#[from] AugmentError),
}
