//! Transform specs: what a worker does to every image of a work item.
//!
//! The ops and their defaults follow torchvision, because that is what users
//! compare against. Output images are always `size` x `size`, RGB, uint8, HWC.

use std::fmt;

/// Largest output side a worker accepts. Anything bigger is almost certainly
/// a mistake and would let one request allocate gigabytes per batch.
pub const MAX_OUTPUT_SIZE: u32 = 4096;

/// One transform, with torchvision's meaning.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Random crop of `scale` of the area and `ratio` aspect ratio, resized
    /// to `size` x `size` (bilinear, antialiased).
    RandomResizedCrop {
        size: u32,
        scale: (f32, f32),
        ratio: (f32, f32),
    },
    /// Resize the shorter side to `shorter`, keeping the aspect ratio.
    Resize { shorter: u32 },
    /// Crop the centre `size` x `size`, padding with zeros if smaller.
    CenterCrop { size: u32 },
    /// Pad every side by `padding` zeros, then crop `size` x `size` at random.
    RandomCrop { size: u32, padding: u32 },
    /// Mirror left-right with probability `p`.
    HorizontalFlip { p: f32 },
    /// Mirror top-bottom with probability `p`.
    VerticalFlip { p: f32 },
    /// Rotate by an angle uniform in [-degrees, degrees] about the centre
    /// (nearest neighbour, zero fill, same size).
    RandomRotation { degrees: f32 },
    /// Scale brightness, contrast and saturation by factors uniform in
    /// [max(0, 1 - x), 1 + x], in a random order.
    ColorJitter {
        brightness: f32,
        contrast: f32,
        saturation: f32,
    },
    /// Gaussian blur, odd `kernel_size`, sigma uniform in `sigma`.
    GaussianBlur { kernel_size: u32, sigma: (f32, f32) },
}

impl Op {
    /// torchvision's `RandomResizedCrop(size)` defaults.
    pub fn random_resized_crop(size: u32) -> Self {
        Self::RandomResizedCrop {
            size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::RandomResizedCrop { .. } => "random_resized_crop",
            Self::Resize { .. } => "resize",
            Self::CenterCrop { .. } => "center_crop",
            Self::RandomCrop { .. } => "random_crop",
            Self::HorizontalFlip { .. } => "horizontal_flip",
            Self::VerticalFlip { .. } => "vertical_flip",
            Self::RandomRotation { .. } => "random_rotation",
            Self::ColorJitter { .. } => "color_jitter",
            Self::GaussianBlur { .. } => "gaussian_blur",
        }
    }

    /// The side length this op fixes its output to, if it fixes one.
    fn fixed_size(&self) -> Option<u32> {
        match self {
            Self::RandomResizedCrop { size, .. } | Self::CenterCrop { size } | Self::RandomCrop { size, .. } => {
                Some(*size)
            }
            _ => None,
        }
    }
}

/// The transform applied to every image of a work item.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformSpec {
    /// Output images are `size` x `size`.
    pub size: u32,
    pub ops: Vec<Op>,
}

/// Why a transform spec was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("image size must be between 1 and {MAX_OUTPUT_SIZE}, got {0}")]
    Size(u32),
    #[error("unknown transform {0:?} (expected train or eval)")]
    UnknownPreset(String),
    #[error("transform {op}: {reason}")]
    Op { op: &'static str, reason: String },
    #[error(
        "transform does not produce {size}x{size} images: end with random_resized_crop, center_crop or random_crop of size {size}"
    )]
    OutputSize { size: u32 },
}

fn op_err(op: &Op, reason: impl Into<String>) -> SpecError {
    SpecError::Op {
        op: op.name(),
        reason: reason.into(),
    }
}

impl TransformSpec {
    /// The `train` preset: RandomResizedCrop(size) + horizontal flip.
    pub fn train(size: u32) -> Self {
        Self {
            size,
            ops: vec![Op::random_resized_crop(size), Op::HorizontalFlip { p: 0.5 }],
        }
    }

    /// The `eval` preset: resize the shorter side to size*256/224, then
    /// center-crop `size`.
    pub fn eval(size: u32) -> Self {
        let shorter = ((u64::from(size) * 256) / 224).max(1) as u32;
        Self {
            size,
            ops: vec![Op::Resize { shorter }, Op::CenterCrop { size }],
        }
    }

    /// A named preset (`train` or `eval`), validated.
    pub fn preset(name: &str, size: u32) -> Result<Self, SpecError> {
        let spec = match name {
            "train" => Self::train(size),
            "eval" => Self::eval(size),
            other => return Err(SpecError::UnknownPreset(other.to_owned())),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Checks every parameter, and that the pipeline ends with a crop that
    /// fixes the output to `size` x `size` followed only by ops that keep
    /// the size. Workers run this on every request before doing any work.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.size == 0 || self.size > MAX_OUTPUT_SIZE {
            return Err(SpecError::Size(self.size));
        }
        let mut current: Option<u32> = None;
        for op in &self.ops {
            let side_ok = |s: u32| s > 0 && s <= MAX_OUTPUT_SIZE;
            match op {
                Op::RandomResizedCrop { size, scale, ratio } => {
                    if !side_ok(*size) {
                        return Err(op_err(op, format!("size {size} out of range")));
                    }
                    let (s0, s1) = *scale;
                    if !(s0 > 0.0 && s0 <= s1 && s1 <= 1.0) {
                        return Err(op_err(
                            op,
                            format!("scale ({s0}, {s1}) must satisfy 0 < min <= max <= 1"),
                        ));
                    }
                    let (r0, r1) = *ratio;
                    if !(r0 > 0.0 && r0 <= r1 && r1.is_finite()) {
                        return Err(op_err(op, format!("ratio ({r0}, {r1}) must satisfy 0 < min <= max")));
                    }
                }
                Op::Resize { shorter } => {
                    if !side_ok(*shorter) {
                        return Err(op_err(op, format!("shorter side {shorter} out of range")));
                    }
                }
                Op::CenterCrop { size } | Op::RandomCrop { size, .. } => {
                    if !side_ok(*size) {
                        return Err(op_err(op, format!("size {size} out of range")));
                    }
                    if let Op::RandomCrop { padding, .. } = op
                        && *padding > MAX_OUTPUT_SIZE
                    {
                        return Err(op_err(op, format!("padding {padding} out of range")));
                    }
                }
                Op::HorizontalFlip { p } | Op::VerticalFlip { p } => {
                    if !(0.0..=1.0).contains(p) {
                        return Err(op_err(op, format!("probability {p} not in [0, 1]")));
                    }
                }
                Op::RandomRotation { degrees } => {
                    if !(degrees.is_finite() && *degrees >= 0.0 && *degrees <= 360.0) {
                        return Err(op_err(op, format!("degrees {degrees} not in [0, 360]")));
                    }
                }
                Op::ColorJitter {
                    brightness,
                    contrast,
                    saturation,
                } => {
                    for (what, v) in [
                        ("brightness", brightness),
                        ("contrast", contrast),
                        ("saturation", saturation),
                    ] {
                        if !(v.is_finite() && *v >= 0.0 && *v <= 10.0) {
                            return Err(op_err(op, format!("{what} {v} not in [0, 10]")));
                        }
                    }
                }
                Op::GaussianBlur { kernel_size, sigma } => {
                    if kernel_size % 2 == 0 || *kernel_size > 101 {
                        return Err(op_err(
                            op,
                            format!("kernel size {kernel_size} must be odd and at most 101"),
                        ));
                    }
                    let (a, b) = *sigma;
                    if !(a > 0.0 && a <= b && b <= 100.0) {
                        return Err(op_err(
                            op,
                            format!("sigma ({a}, {b}) must satisfy 0 < min <= max <= 100"),
                        ));
                    }
                }
            }
            if let Some(s) = op.fixed_size() {
                current = Some(s);
            } else if matches!(op, Op::Resize { .. }) {
                current = None;
            }
        }
        if current != Some(self.size) {
            return Err(SpecError::OutputSize { size: self.size });
        }
        Ok(())
    }

    /// Bytes of one output image.
    pub fn image_bytes(&self) -> usize {
        self.size as usize * self.size as usize * 3
    }
}

impl fmt::Display for TransformSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.ops.iter().map(Op::name).collect();
        write!(f, "{}x{} [{}]", self.size, self.size, names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate() {
        assert!(TransformSpec::preset("train", 224).is_ok());
        let eval = TransformSpec::preset("eval", 224).unwrap();
        assert_eq!(eval.ops[0], Op::Resize { shorter: 256 });
    }

    #[test]
    fn refuses_absurd_values() {
        assert_eq!(TransformSpec::preset("train", 0), Err(SpecError::Size(0)));
        assert_eq!(TransformSpec::preset("train", 100_000), Err(SpecError::Size(100_000)));
        assert!(matches!(
            TransformSpec::preset("fancy", 224),
            Err(SpecError::UnknownPreset(_))
        ));
    }

    #[test]
    fn refuses_pipelines_without_a_fixed_output() {
        let spec = TransformSpec {
            size: 224,
            ops: vec![Op::Resize { shorter: 256 }],
        };
        assert_eq!(spec.validate(), Err(SpecError::OutputSize { size: 224 }));
        let spec = TransformSpec {
            size: 224,
            ops: vec![Op::CenterCrop { size: 224 }, Op::Resize { shorter: 300 }],
        };
        assert!(spec.validate().is_err());
    }

    #[test]
    fn refuses_bad_parameters() {
        let spec = TransformSpec {
            size: 32,
            ops: vec![
                Op::RandomCrop { size: 32, padding: 4 },
                Op::GaussianBlur {
                    kernel_size: 4,
                    sigma: (0.1, 2.0),
                },
            ],
        };
        assert!(matches!(
            spec.validate(),
            Err(SpecError::Op {
                op: "gaussian_blur",
                ..
            })
        ));
    }
}
