//! Detection targets: a sample's boxes, labels and keypoints, and how
//! they follow the sample's geometry.
//!
//! [`Targets`] holds one image's instances, as torchvision's detection
//! models take them (`boxes`, `labels`, optional `iscrowd` and `area`,
//! `keypoints`), on a canvas of the image's size. Boxes are kept as XYXY
//! in `f64`; [`BoxFormat`] is the format they arrive in and leave in
//! (torchvision's `BoundingBoxFormat`: XYXY, XYWH, CXCYWH).
//!
//! The geometry is decided with the pixels' and from the same draws: while
//! a sample's ops resolve into [`crate::Step`]s, each geometric step also
//! records a [`TargetStep`] ([`TargetStep::of`]), which says how
//! torchvision v2 moves boxes and keypoints through that op
//! (`torchvision/transforms/v2/functional/_geometry.py`): a crop
//! translates and clamps, a resize scales, a pad translates, a flip
//! mirrors (a box about the canvas width, a keypoint about width - 1, as
//! torchvision does), an affine warp maps the four corners and takes
//! their extent, then clamps. Where torchvision's rule for boxes is not
//! the pixels' (a rotation with `expand` places the boxes by the rotated
//! corners' minimum, where PIL centres the image) the op records its
//! own. [`Targets::follow`] applies them on the host, so CPU and GPU
//! workers deliver the same coordinates.
//!
//! Per-instance masks start as [`Outline`]s (COCO's polygons or RLE),
//! which follow the instances (a sanitize drops an instance's outline
//! with its box); the worker then draws each on the image's canvas and
//! runs it through the image's geometric steps, as a segmentation mask.

mod follow;
mod instances;
mod masks;

pub use follow::{TargetStep, Unsupported, invert_affine};
pub use instances::{BoxFormat, MAX_INSTANCES, MAX_KEYPOINTS, TargetError, Targets};
pub use masks::{MAX_POLYGON_POINTS, Outline};

#[cfg(test)]
mod tests;
