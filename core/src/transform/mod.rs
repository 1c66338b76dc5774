//! Transform specs: what a worker does to every image of a work item.
//!
//! A spec is a list of ops with torchvision's names, arguments, defaults and
//! meaning (as torchvision applies them to PIL images), one module per op
//! under [`ops`]. It travels as versioned JSON —
//! `{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 224}, ...]}`
//! — the form Python's `stoker.transforms` writes and `--transform` reads.
//! Output images are `size` x `size`, RGB, uint8, HWC; a trailing
//! `ToDtype` / `Normalize` is the client's conversion on the device.
//!
//! [`resolve_steps`] turns a spec and an image size into concrete `Step`s
//! for one sample; every random draw happens there, in the ops.
//! [`footprint`] gives the most a sample's transform holds at once, or the
//! step that would make an image over the pixel limit, from the image size
//! alone, by walking each op's size `Bounds`.

use std::fmt;

use serde::{Deserialize, Serialize};

pub mod args;
pub mod catalog;
mod examples;
pub mod ops;
pub mod schema;

pub use args::MAX_OUTPUT_SIZE;
pub use examples::{EXAMPLES, example_spec};
pub use ops::*;

use crate::params::{Bounds, Cx, PixelScale, ResolveError, Step, TooLarge, Walk};
use crate::rng::SampleRng;
use crate::targets::{TargetStep, Targets};

/// The spec version this build writes and reads. A version changes when
/// an existing pipeline's pixels would change; adding an op does not.
pub const SPEC_VERSION: u32 = 1;

/// The JSON form of a spec.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[serde(default = "one")]
    version: u32,
    ops: Vec<Op>,
}

fn one() -> u32 {
    1
}

/// The transform applied to every image of a work item.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformSpec {
    /// The size its images come out at, from the ops.
    pub size: ImageSize,
    pub ops: Vec<Op>,
}

/// The size a spec's images come out at, from where its ops end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSize {
    /// Every image `side` x `side`: the ops end at that fixed square size
    /// (a crop or a resize to it, then only ops that keep the size). A
    /// batch is one block of equal images.
    Square(u32),
    /// Each image the size its own draws make it: the ops end at no fixed
    /// square size, as torchvision's detection recipes do (a shortest-side
    /// resize, a zoom-out, an IoU crop, or no resize at all). A batch
    /// holds each image's size and is padded to its largest.
    Each,
}

impl ImageSize {
    /// The side of every image, when they are square and of one size.
    pub fn side(self) -> Option<u32> {
        match self {
            Self::Square(side) => Some(side),
            Self::Each => None,
        }
    }
}

impl fmt::Display for ImageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Square(side) => write!(f, "{side}x{side}"),
            Self::Each => f.write_str("each image's own size"),
        }
    }
}

/// Why a transform spec was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("image size must be between 1 and {MAX_OUTPUT_SIZE}, got {0}")]
    Size(u32),
    #[error("unknown transform {0:?} (expected train, eval, a JSON spec or a .json file)")]
    UnknownPreset(String),
    #[error("transform ops[{index}] ({op}): {reason}")]
    Op {
        index: usize,
        op: &'static str,
        reason: String,
    },
    #[error("transform spec is not valid JSON: {0}")]
    Json(String),
    /// Valid JSON of the wrong shape: an unknown op or argument, a value of
    /// the wrong type.
    #[error("transform spec: {0}")]
    Shape(String),
    #[error("transform ops{at} ({op}) with boxes or keypoints: {reason}")]
    Targets {
        at: String,
        op: &'static str,
        reason: String,
    },
    #[error(
        "transform ops{at} ({op}) chooses its crop by the sample's boxes, from one targets field; {fields} were asked for: ask for one (a field of kind targets)"
    )]
    NeedsBoxes {
        at: String,
        op: &'static str,
        fields: usize,
    },
    #[error("transform spec version {got} is not supported by this build (it reads version {SPEC_VERSION})")]
    Version { got: u32 },
    #[error("transform ends at {got}, but {want} was asked for")]
    SizeMismatch { got: ImageSize, want: ImageSize },
    #[error("transform has no ops")]
    Empty,
}

/// The client's conversion of the delivered uint8 pixels, from a trailing
/// `ToDtype` / `ToTensor` / `ConvertImageDtype` and `Normalize`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputConversion {
    /// The dtype (`float32`...), or `None` to keep uint8.
    pub dtype: Option<String>,
    /// `Normalize`'s per-channel mean and std.
    pub mean_std: Option<([f64; 3], [f64; 3])>,
}

impl TransformSpec {
    /// A spec of `ops`, validated; its size is where the ops end.
    pub fn new(ops: Vec<Op>) -> Result<Self, SpecError> {
        let ops = flatten(ops);
        let size = check(&ops)?;
        Ok(Self { size, ops })
    }

    /// The `train` preset: RandomResizedCrop(size) + RandomHorizontalFlip.
    pub fn train(size: u32) -> Self {
        Self {
            size: ImageSize::Square(size),
            ops: vec![
                RandomResizedCrop::new(size).into(),
                RandomHorizontalFlip::default().into(),
            ],
        }
    }

    /// The `eval` preset: Resize(size*256/224) + CenterCrop(size).
    pub fn eval(size: u32) -> Self {
        let shorter = ((u64::from(size) * 256) / 224).max(1) as u32;
        Self {
            size: ImageSize::Square(size),
            ops: vec![Resize::shorter(shorter).into(), CenterCrop::new(size).into()],
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

    /// What `--transform` and Python's `transform=` take: `train` or
    /// `eval` (at `size`, 224 when `None`), or a JSON spec (which, if
    /// `size` is given, must end at `size` x `size`).
    pub fn parse(arg: &str, size: Option<u32>) -> Result<Self, SpecError> {
        let arg = arg.trim();
        if !arg.starts_with('{') {
            return Self::preset(arg, size.unwrap_or(224));
        }
        let spec = Self::from_json(arg)?;
        match size.map(ImageSize::Square) {
            Some(want) if want != spec.size => Err(SpecError::SizeMismatch { got: spec.size, want }),
            _ => Ok(spec),
        }
    }

    /// That every op can move a sample's boxes and keypoints
    /// ([`crate::targets`]), checked before any work: the error names the
    /// first op that cannot, by its position (`ops[2]`, or `ops[0][1]`
    /// inside a container).
    pub fn check_targets(&self) -> Result<(), SpecError> {
        // The path is written only for a refusal: resolving checks this for
        // every sample.
        fn walk(ops: &[Op]) -> Result<(), (String, &'static str, String)> {
            for (i, op) in ops.iter().enumerate() {
                if let Some(why) = op.refuses_targets() {
                    return Err((format!("[{i}]"), op.name(), why));
                }
                walk(op.children()).map_err(|(at, op, why)| (format!("[{i}]{at}"), op, why))?;
            }
            Ok(())
        }
        walk(&self.ops).map_err(|(at, op, reason)| SpecError::Targets { at, op, reason })
    }

    /// The first op that chooses by the sample's boxes (`RandomIoUCrop`),
    /// as its position (`[2]`, `[1][0]` in a container) and name: a
    /// request with it needs a targets field.
    pub fn needs_boxes(&self) -> Option<(String, &'static str)> {
        fn walk(ops: &[Op]) -> Option<(String, &'static str)> {
            ops.iter().enumerate().find_map(|(i, op)| match op {
                Op::RandomIoUCrop(_) => Some((format!("[{i}]"), op.name())),
                _ => walk(op.children()).map(|(at, name)| (format!("[{i}]{at}"), name)),
            })
        }
        walk(&self.ops)
    }

    /// A spec from its JSON form, validated. Errors name the op by its
    /// position and the argument.
    pub fn from_json(json: &str) -> Result<Self, SpecError> {
        let de = &mut serde_json::Deserializer::from_str(json);
        let wire: Wire = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let shape = inner.classify() == serde_json::error::Category::Data;
            let text = if path.is_empty() || path == "." {
                inner.to_string()
            } else {
                format!("{path}: {inner}")
            };
            if shape {
                SpecError::Shape(text)
            } else {
                SpecError::Json(text)
            }
        })?;
        if wire.version != SPEC_VERSION {
            return Err(SpecError::Version { got: wire.version });
        }
        Self::new(wire.ops)
    }

    /// The JSON form (with the version).
    pub fn to_json(&self) -> String {
        let wire = Wire {
            version: SPEC_VERSION,
            ops: self.ops.clone(),
        };
        serde_json::to_string(&wire).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Checks every argument, where the output ops sit, and that the
    /// pipeline ends at `size`. Workers run this on every request before
    /// doing any work.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let ImageSize::Square(side) = self.size
            && (side == 0 || side > MAX_OUTPUT_SIZE)
        {
            return Err(SpecError::Size(side));
        }
        let size = check(&self.ops)?;
        if size != self.size {
            return Err(SpecError::SizeMismatch {
                got: size,
                want: self.size,
            });
        }
        Ok(())
    }

    /// The client's output conversion (from the trailing output ops).
    pub fn output(&self) -> OutputConversion {
        let mut out = OutputConversion::default();
        for op in &self.ops {
            match op {
                Op::ToTensor(_) => out.dtype = Some("float32".to_owned()),
                Op::ToDtype(d) if d.dtype != "uint8" => out.dtype = Some(d.dtype.clone()),
                Op::ConvertImageDtype(d) if d.dtype != "uint8" => out.dtype = Some(d.dtype.clone()),
                Op::Normalize(n) => out.mean_std = Some(n.channels()),
                _ => {}
            }
        }
        out
    }

    /// Bytes of one output image, when they are all one size.
    pub fn image_bytes(&self) -> Option<usize> {
        self.size.side().map(|s| s as usize * s as usize * 3)
    }
}

/// Top-level `Compose`s become their children: a torchvision pipeline is
/// often a Compose of Composes.
fn flatten(ops: Vec<Op>) -> Vec<Op> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Op::Compose(c) => out.extend(flatten(c.transforms)),
            other => out.push(other),
        }
    }
    out
}

/// Validates `ops` and returns the size they end at.
fn check(ops: &[Op]) -> Result<ImageSize, SpecError> {
    if ops.is_empty() {
        return Err(SpecError::Empty);
    }
    let err = |index, op: &Op, reason: String| SpecError::Op {
        index,
        op: op.name(),
        reason,
    };
    ops::validate_all(ops).map_err(|(index, op, reason)| SpecError::Op { index, op, reason })?;
    // Output ops come last (RandomErasing may follow them), in an order
    // torchvision accepts: Normalize needs floats.
    let mut stage = PixelScale::Uint8;
    let mut output_seen = false;
    let mut steps = Vec::new();
    let mut cx = Cx::new(crate::SampleRng::from_seed(0), 1, 1, &mut steps, false);
    for (i, op) in ops.iter().enumerate() {
        let is_output = op.imp().is_output();
        let boxes_only = op.schema().role == schema::Role::Boxes;
        if output_seen && !is_output && !boxes_only && !matches!(op, Op::RandomErasing(_)) {
            return Err(err(
                i,
                op,
                "comes after the output conversion (ToDtype, Normalize...); only RandomErasing and the box ops may"
                    .to_owned(),
            ));
        }
        if let Op::Normalize(_) = op
            && stage == PixelScale::Uint8
        {
            return Err(err(
                i,
                op,
                "needs float input: put ToDtype(torch.float32, scale=True) (or ToTensor) before it".to_owned(),
            ));
        }
        if is_output {
            output_seen = true;
            cx.scale = stage;
            op.resolve(&mut cx).map_err(|e| err(i, op, e.reason))?;
            stage = cx.scale;
        }
    }
    let mut b = Bounds::unknown();
    for op in ops {
        b = op.bounds(b);
    }
    // A fixed size that is not square is served as each image's own: a
    // batch of equal rectangles, padded to nothing.
    let Some((w, _)) = b.fixed().filter(|(w, h)| w == h) else {
        return Ok(ImageSize::Each);
    };
    let side = u32::try_from(w).map_err(|_| SpecError::Size(u32::MAX))?;
    if side == 0 || side > MAX_OUTPUT_SIZE {
        return Err(SpecError::Size(side));
    }
    Ok(ImageSize::Square(side))
}

impl fmt::Display for TransformSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.ops.iter().map(Op::name).collect();
        write!(f, "{} [{}]", self.size, names.join(", "))
    }
}

/// The most memory, in bytes, that running `spec` on a decoded `width` x
/// `height` RGB image holds at once (the decoded image included), or the
/// stage that would make an image over `max_pixels`.
///
/// It depends on the sizes alone, never on a random draw: each op bounds
/// the sizes it can output for the sizes it can get (a crop's box lies in
/// its input; a rotation with `expand` stays within the diagonal; a
/// `RandomApply` may or may not run). So the worker can refuse a sample, or
/// reserve its memory, from the image header, before anything is decoded.
/// A step holds its input, its output and the op's scratch.
pub fn footprint(spec: &TransformSpec, width: u32, height: u32, max_pixels: u64) -> Result<u64, TooLarge> {
    let mut b = Bounds::exact(u64::from(width), u64::from(height));
    let mut walk = Walk::new(width, height, max_pixels);
    for (index, op) in spec.ops.iter().enumerate() {
        walk.at(index);
        b = op.walk(b, &mut walk);
    }
    walk.finish()
}

/// Resolves `spec` for one sample whose decoded image is `width` x `height`,
/// drawing from the sample's generator `base` ([`crate::rng::ItemSeed::sample`]):
/// the `i`th op draws from `base.fork(i)`, a container's `j`th child from its
/// container's generator forked by `j`. So a sample's augmentation is a
/// function of (seed, epoch, shard, position, op position), and adding an
/// op to the registry changes no existing pipeline.
///
/// The spec must have passed [`TransformSpec::validate`].
pub fn resolve_steps(
    spec: &TransformSpec,
    base: &SampleRng,
    width: u32,
    height: u32,
) -> Result<Vec<Step>, ResolveError> {
    let mut steps = Vec::with_capacity(spec.ops.len());
    let mut cx = Cx::new(base.clone(), width, height, &mut steps, false);
    for (i, op) in spec.ops.iter().enumerate() {
        cx.rng = base.fork(i as u64);
        op.resolve(&mut cx)?;
    }
    Ok(steps)
}

/// [`resolve_steps`], with the steps the sample's boxes and keypoints
/// take through the same draws ([`crate::targets`]). `boxes` are the
/// sample's targets as read (placed here on the image), which ops that
/// choose by the boxes see (`RandomIoUCrop`); with `None`, or targets that
/// do not fit the image (the sample is skipped for them), those ops see
/// no boxes. The pixels' steps are the same as without targets for every
/// other op.
pub fn resolve_with_targets(
    spec: &TransformSpec,
    base: &SampleRng,
    width: u32,
    height: u32,
    boxes: Option<&Targets>,
) -> Result<(Vec<Step>, Vec<TargetStep>), ResolveError> {
    spec.check_targets().map_err(|e| ResolveError {
        op: "transform",
        reason: e.to_string(),
    })?;
    let mut steps = Vec::with_capacity(spec.ops.len());
    let mut cx = Cx::new(base.clone(), width, height, &mut steps, true);
    cx.initial = boxes.map(|t| (t, (width, height)));
    for (i, op) in spec.ops.iter().enumerate() {
        cx.rng = base.fork(i as u64);
        op.resolve(&mut cx)?;
    }
    if let Some(refused) = cx.refused.take() {
        return Err(refused);
    }
    let targets = cx.targets.take().unwrap_or_default();
    Ok((steps, targets))
}

/// A small builder: `TransformSpec::builder().then(RandomResizedCrop::new(224)).build()`.
#[derive(Clone, Debug, Default)]
pub struct Builder {
    ops: Vec<Op>,
}

impl Builder {
    /// Appends an op.
    pub fn then(mut self, op: impl Into<Op>) -> Self {
        self.ops.push(op.into());
        self
    }

    /// The validated spec.
    pub fn build(self) -> Result<TransformSpec, SpecError> {
        TransformSpec::new(self.ops)
    }
}

impl TransformSpec {
    pub fn builder() -> Builder {
        Builder::default()
    }
}

#[cfg(test)]
mod tests;
