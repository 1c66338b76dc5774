//! The op registry: one module per op, each with its arguments (serde,
//! torchvision's names and defaults), validation, size rule, memory
//! footprint and random draws. The `registry!` list (tree.rs) generates the
//! [`Op`] enum, the names, the JSON conversion and the dispatch; executors
//! (the CPU augmenter, the GPU lanes) see only the [`Step`]s an op resolves
//! to.
//!
//! Adding an op: write its module (an args struct implementing [`OpImpl`]
//! and [`Described`](crate::transform::schema::Described), its schema), add
//! one line to `registry!` in `tree.rs` and an example, and, if it needs a
//! new kind of pixel work, a [`Step`](crate::params::Step) variant with its
//! CPU implementation in `stoker-image`.

mod affine;
mod blur;
mod boxes;
mod color;
mod crop;
mod erase;
mod flip;
mod iou_crop;
mod op_impl;
mod output;
mod pad;
mod photometric;
mod policy;
mod resize;
mod rotate;
mod scale;
mod timm;
mod tree;
mod zoom;

pub use affine::RandomAffine;
pub use blur::GaussianBlur;
pub use boxes::{ClampBoundingBoxes, ConvertBoundingBoxFormat, SanitizeBoundingBoxes};
pub use color::{
    ColorJitter, Grayscale, RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomGrayscale, RandomInvert,
    RandomPosterize, RandomSolarize,
};
pub use crop::{CenterCrop, RandomCrop, RandomResizedCrop};
pub use erase::{EraseValue, RandomErasing};
pub use flip::{RandomHorizontalFlip, RandomVerticalFlip};
pub use iou_crop::{FixedSizeCrop, RandomIoUCrop};
pub use op_impl::OpImpl;
pub use output::{ConvertImageDtype, Normalize, PILToTensor, ToDtype, ToImage, ToPureTensor, ToTensor};
pub use pad::Pad;
pub use photometric::{RandomChannelPermutation, RandomPhotometricDistort};
pub use policy::{AutoAugment, RandAugment, TrivialAugmentWide};
pub use resize::{Resize, ResizeSize};
pub use rotate::RandomRotation;
pub use scale::{RandomShortestSize, ScaleJitter, Sizes};
pub use timm::TimmRandAugment;
pub(crate) use tree::validate_all;
pub use tree::{Compose, OP_NAMES, OP_SCHEMAS, Op, RandomApply, RandomChoice, RandomOrder};
pub use zoom::RandomZoomOut;
