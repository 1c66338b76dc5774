//! Stoker's domain vocabulary, shared by the worker and the client.
//!
//! Nothing here knows about protobuf or the network: the `stoker-proto` crate
//! converts these types to and from the wire at the gRPC edge.
//!
//! - [`uri`]: where a dataset lives (`s3://`, `file://`, a plain path).
//! - [`transform`]: what a worker does to each image, and its validation.
//! - [`rng`]: per-sample randomness derived from (seed, epoch, shard,
//!   position) only.
//! - [`params`]: a transform spec resolved into concrete steps for one sample.
//! - [`format`]: shard formats, `--format auto`'s rule, record fields.
//! - [`targets`]: detection targets (boxes, labels, keypoints) and how
//!   they follow a sample's geometry, as torchvision v2 moves them.
//! - [`field`]: a sample's fields beyond image and label (captions,
//!   metadata, multi-labels, arrays): what a request asks, what arrives.
//! - [`mode`]: what a worker does with an item's samples ([`ItemMode`]).
//! - [`positions`]: sets of sample positions ([`PositionSet`]): a sample's
//!   identity is (shard, position).
//! - [`plan`]: which shards a rank reads in an epoch, and in what order.
//! - [`secret`]: bearer tokens that never reach a log.
//! - [`pem`]: a sanity check on certificate and key files.
//! - [`error`]: an error and its causes as one line ([`error_chain`]).
//! - [`jitter`]: randomness for spreading retries (never for augmentation).

// No `unsafe` here: FFI lives in the FFI crates (stoker-cuda,
// stoker-libjpeg, stoker-shm, the Python extension) behind safe types.
#![forbid(unsafe_code)]

pub mod docs;
pub mod error;
pub mod field;
pub mod format;
pub mod jitter;
pub mod mode;
mod npy;
pub mod params;
pub mod pem;
pub mod plan;
pub mod positions;
pub mod rng;
pub mod secret;
pub mod targets;
pub mod transform;
pub mod uri;

pub use error::error_chain;
pub use field::{
    FieldError, FieldKind, FieldSpec, FieldValue, Fields, NpyArray, ViewSpec, validate_fields, validate_targets,
    validate_views,
};
pub use format::{FormatChoice, RecordFields, ShardFormat};
pub use mode::ItemMode;
pub use params::{
    Enhance, EraseFill, Interpolation, PaddingMode, PixelScale, Rect, ResolveError, Step, TooLarge, Warp, erase_noise,
};
pub use plan::{EpochPlan, PlanItem, ShardRef, indexed_samples};
pub use positions::PositionSet;
pub use rng::{ItemSeed, SampleRng};
pub use secret::Secret;
pub use transform::{
    ImageSize, Op, OutputConversion, SPEC_VERSION, SpecError, TransformSpec, footprint, resolve_steps,
    resolve_with_targets,
};
pub use uri::DatasetUri;
