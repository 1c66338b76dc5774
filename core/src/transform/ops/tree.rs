//! The op tree: the [`Op`] enum and its registry (the `registry!` list
//! generates the enum, the names, the schemas' list, the JSON conversion
//! and the dispatch), and the containers — Compose, RandomApply,
//! RandomChoice, RandomOrder — whose children are ops. Each child draws
//! from its container's generator forked by the child's index.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::op_impl::OpImpl;
use super::{
    AutoAugment, CenterCrop, ColorJitter, ConvertImageDtype, GaussianBlur, Grayscale, Normalize, PILToTensor, Pad,
    RandAugment, RandomAdjustSharpness, RandomAffine, RandomAutocontrast, RandomChannelPermutation, RandomCrop,
    RandomEqualize, RandomErasing, RandomGrayscale, RandomHorizontalFlip, RandomInvert, RandomPhotometricDistort,
    RandomPosterize, RandomResizedCrop, RandomRotation, RandomSolarize, RandomVerticalFlip, Resize, TimmRandAugment,
    ToDtype, ToImage, ToTensor, TrivialAugmentWide,
};
use super::{
    ClampBoundingBoxes, ConvertBoundingBoxFormat, FixedSizeCrop, RandomIoUCrop, RandomShortestSize, RandomZoomOut,
    SanitizeBoundingBoxes, ScaleJitter, ToPureTensor,
};
use crate::params::{Bounds, Cx, ResolveError, Walk};
use crate::rng::SampleRng;
use crate::transform::args::check_p;
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, fill_defaults, optional, required};

macro_rules! registry {
    ($($name:ident),* $(,)?) => {
        /// One transform, with torchvision's name, arguments and meaning.
        #[derive(Clone, Debug, PartialEq)]
        #[allow(clippy::large_enum_variant, reason = "specs are small and built once per epoch")]
        pub enum Op {
            $($name($name),)*
        }

        /// Every op's name, as JSON and Python spell it.
        pub const OP_NAMES: &[&str] = &[$(stringify!($name)),*];

        /// Every op's name and schema, in the registry's order.
        pub const OP_SCHEMAS: &[(&str, &OpSchema)] = &[$((stringify!($name), &<$name as Described>::SCHEMA)),*];

        impl Op {
            /// The op's torchvision class name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$name(_) => stringify!($name),)*
                }
            }

            pub(crate) fn imp(&self) -> &dyn OpImpl {
                match self {
                    $(Self::$name(o) => o,)*
                }
            }

            /// The op's schema.
            pub fn schema(&self) -> &'static OpSchema {
                match self {
                    $(Self::$name(_) => &<$name as Described>::SCHEMA,)*
                }
            }

            /// The op `name` from its arguments, each one missing taking its
            /// schema default.
            fn from_args(
                name: &str,
                mut args: serde_json::Map<String, serde_json::Value>,
            ) -> Option<Result<Self, serde_json::Error>> {
                match name {
                    $(stringify!($name) => {
                        fill_defaults(&<$name as Described>::SCHEMA, &mut args);
                        Some(serde_json::from_value(serde_json::Value::Object(args)).map(Self::$name))
                    })*
                    _ => None,
                }
            }

            fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
                match self {
                    $(Self::$name(o) => serde_json::to_value(o),)*
                }
            }
        }

        $(
            impl From<$name> for Op {
                fn from(op: $name) -> Self {
                    Self::$name(op)
                }
            }
        )*
    };
}

registry! {
    Compose,
    RandomApply,
    RandomChoice,
    RandomOrder,
    RandomResizedCrop,
    Resize,
    CenterCrop,
    RandomCrop,
    Pad,
    RandomZoomOut,
    RandomIoUCrop,
    ScaleJitter,
    RandomShortestSize,
    FixedSizeCrop,
    RandomHorizontalFlip,
    RandomVerticalFlip,
    RandomRotation,
    RandomAffine,
    ColorJitter,
    Grayscale,
    RandomGrayscale,
    RandomSolarize,
    RandomPosterize,
    RandomEqualize,
    RandomAutocontrast,
    RandomAdjustSharpness,
    RandomInvert,
    RandomPhotometricDistort,
    RandomChannelPermutation,
    GaussianBlur,
    AutoAugment,
    RandAugment,
    TrivialAugmentWide,
    TimmRandAugment,
    RandomErasing,
    ClampBoundingBoxes,
    SanitizeBoundingBoxes,
    ConvertBoundingBoxFormat,
    ToImage,
    ToPureTensor,
    PILToTensor,
    ToTensor,
    ToDtype,
    ConvertImageDtype,
    Normalize,
}

impl Op {
    /// A container's transforms; none for any other op.
    pub fn children(&self) -> &[Op] {
        match self {
            Op::Compose(c) => &c.transforms,
            Op::RandomApply(c) => &c.transforms,
            Op::RandomChoice(c) => &c.transforms,
            Op::RandomOrder(c) => &c.transforms,
            _ => &[],
        }
    }

    /// Why this op (not its children) cannot move boxes and keypoints,
    /// where torchvision refuses them too: the policies, and padding that
    /// is not constant.
    pub fn refuses_targets(&self) -> Option<String> {
        use crate::params::PaddingMode;
        let padding = |mode: PaddingMode| {
            format!(
                "padding mode {mode:?} does not move boxes or keypoints (torchvision pads them only with constant padding)"
            )
        };
        match self {
            _ if self.schema().role == Role::Policy => Some(
                "an augmentation policy does not move boxes or keypoints (torchvision refuses them too): \
                 use the geometric and colour ops"
                    .to_owned(),
            ),
            Op::Pad(p) if p.padding_mode != PaddingMode::Constant => Some(padding(p.padding_mode)),
            Op::RandomCrop(c)
                if c.padding_mode != PaddingMode::Constant && (c.padding.is_some() || c.pad_if_needed) =>
            {
                Some(padding(c.padding_mode))
            }
            _ => None,
        }
    }

    /// Checks this op's arguments, and its children's.
    pub fn validate(&self) -> Result<(), String> {
        self.imp().validate()
    }

    pub(crate) fn bounds(&self, b: Bounds) -> Bounds {
        self.imp().bounds(b)
    }

    pub(crate) fn walk(&self, b: Bounds, walk: &mut Walk) -> Bounds {
        self.imp().walk(self.name(), b, walk)
    }

    pub(crate) fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        cx.op = self.name();
        self.imp().resolve(cx)
    }
}

impl Serialize for Op {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut value = self.to_value().map_err(S::Error::custom)?;
        let map = value
            .as_object_mut()
            .ok_or_else(|| S::Error::custom("op arguments are not an object"))?;
        let mut out = serde_json::Map::with_capacity(map.len() + 1);
        out.insert("op".to_owned(), serde_json::Value::String(self.name().to_owned()));
        out.append(map);
        out.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut map = serde_json::Map::deserialize(d)?;
        let name = match map.remove("op") {
            Some(serde_json::Value::String(name)) => name,
            Some(other) => return Err(D::Error::custom(format!("\"op\" must be a string, got {other}"))),
            None => return Err(D::Error::custom("missing \"op\" (the transform's name)")),
        };
        match Op::from_args(&name, map) {
            Some(Ok(op)) => Ok(op),
            Some(Err(e)) => Err(D::Error::custom(format!("{name}: {e}"))),
            None => Err(D::Error::custom(format!(
                "unknown op {name:?}; supported: {}",
                OP_NAMES.join(", ")
            ))),
        }
    }
}

/// Validates every op of a list, naming the first bad one.
pub(crate) fn validate_all(ops: &[Op]) -> Result<(), (usize, &'static str, String)> {
    for (i, op) in ops.iter().enumerate() {
        op.validate().map_err(|reason| (i, op.name(), reason))?;
    }
    Ok(())
}

/// Resolves `op`, the `index`th child of a container whose generator was
/// `base` when it started, with a generator of its own.
fn child(cx: &mut Cx<'_>, base: &SampleRng, index: usize, op: &Op) -> Result<(), ResolveError> {
    let parent = cx.op;
    let saved = std::mem::replace(&mut cx.rng, base.fork(index as u64));
    let result = op.resolve(cx);
    cx.rng = saved;
    cx.op = parent;
    result
}

/// Checks children, naming the first bad one by position.
fn validate_children(ops: &[Op]) -> Result<(), String> {
    if ops.is_empty() {
        return Err("transforms must not be empty".to_owned());
    }
    for (i, op) in ops.iter().enumerate() {
        if op.imp().is_output() {
            return Err(format!(
                "transforms[{i}] ({}) converts the output and must come last in the top-level pipeline",
                op.name()
            ));
        }
        op.validate()
            .map_err(|e| format!("transforms[{i}] ({}): {e}", op.name()))?;
    }
    Ok(())
}

fn seq_bounds(ops: &[Op], mut b: Bounds) -> Bounds {
    for op in ops {
        b = op.bounds(b);
    }
    b
}

fn seq_walk(ops: &[Op], mut b: Bounds, walk: &mut Walk) -> Bounds {
    for op in ops {
        b = op.walk(b, walk);
    }
    b
}

fn seq_resolve(ops: &[Op], cx: &mut Cx<'_>) -> Result<(), ResolveError> {
    let base = cx.rng.clone();
    for (i, op) in ops.iter().enumerate() {
        child(cx, &base, i, op)?;
    }
    Ok(())
}

/// Its transforms in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compose {
    pub transforms: Vec<Op>,
}

impl Described for Compose {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Its transforms, in order.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[required("transforms", ArgKind::Transforms, "the transforms to apply")],
    };
}

impl OpImpl for Compose {
    fn validate(&self) -> Result<(), String> {
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        seq_bounds(&self.transforms, b)
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        seq_walk(&self.transforms, b, walk)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        seq_resolve(&self.transforms, cx)
    }
}

/// Its transforms, in order, with probability `p`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomApply {
    pub transforms: Vec<Op>,
    pub p: f64,
}

impl Described for RandomApply {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Its transforms, in order, with probability p.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[
            required("transforms", ArgKind::Transforms, "the transforms to apply together"),
            optional("p", ArgKind::Probability, "0.5", "probability of applying them"),
        ],
    };
}

impl OpImpl for RandomApply {
    fn validate(&self) -> Result<(), String> {
        check_p(self.p)?;
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b.union(seq_bounds(&self.transforms, b))
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        b.union(seq_walk(&self.transforms, b, walk))
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let base = cx.rng.clone();
        if cx.rng.bernoulli(self.p) {
            for (i, op) in self.transforms.iter().enumerate() {
                child(cx, &base, i, op)?;
            }
        }
        Ok(())
    }
}

/// One of its transforms, chosen with weights `p` (uniform by default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomChoice {
    pub transforms: Vec<Op>,
    pub p: Option<Vec<f64>>,
}

impl Described for RandomChoice {
    const SCHEMA: OpSchema = OpSchema {
        doc: "One of its transforms, picked with weights p (equal when None). Of MixUp / CutMix, a batch transform.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[
            required("transforms", ArgKind::Transforms, "the transforms to choose from"),
            optional(
                "p",
                ArgKind::Weights,
                "null",
                "one weight per transform (need not sum to 1)",
            ),
        ],
    };
}

impl OpImpl for RandomChoice {
    fn validate(&self) -> Result<(), String> {
        if let Some(p) = &self.p {
            if p.len() != self.transforms.len() {
                return Err(format!(
                    "p has {} weights for {} transforms",
                    p.len(),
                    self.transforms.len()
                ));
            }
            if !p.iter().all(|w| w.is_finite() && *w >= 0.0) || p.iter().sum::<f64>() <= 0.0 {
                return Err(format!("p {p:?} must be non-negative weights with a positive sum"));
            }
        }
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        let mut out: Option<Bounds> = None;
        for op in &self.transforms {
            let o = op.bounds(b);
            out = Some(out.map_or(o, |u| u.union(o)));
        }
        out.unwrap_or(b)
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        let mut out: Option<Bounds> = None;
        for op in &self.transforms {
            let o = op.walk(b, walk);
            out = Some(out.map_or(o, |u| u.union(o)));
        }
        out.unwrap_or(b)
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let base = cx.rng.clone();
        let n = self.transforms.len();
        let weights = self.p.clone().unwrap_or_else(|| vec![1.0; n]);
        let total: f64 = weights.iter().sum();
        let mut u = cx.rng.next_f64() * total;
        let mut chosen = n - 1;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                chosen = i;
                break;
            }
            u -= w;
        }
        child(cx, &base, chosen, &self.transforms[chosen])
    }
}

/// All of its transforms, in a random order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomOrder {
    pub transforms: Vec<Op>,
}

impl Described for RandomOrder {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Its transforms, in a random order.",
        origin: Origin::Torchvision,
        role: Role::Container,
        args: &[required("transforms", ArgKind::Transforms, "the transforms to apply")],
    };
}

impl RandomOrder {
    /// Any order: each round may run any child.
    fn rounds(&self, mut b: Bounds, mut each: impl FnMut(&Op, Bounds) -> Bounds) -> Bounds {
        for _ in 0..self.transforms.len() {
            let mut next = b;
            for op in &self.transforms {
                next = next.union(each(op, b));
            }
            b = next;
        }
        b
    }
}

impl OpImpl for RandomOrder {
    fn validate(&self) -> Result<(), String> {
        validate_children(&self.transforms)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        if self.transforms.iter().all(|op| op.bounds(b) == b) {
            return b;
        }
        self.rounds(b, |op, b| op.bounds(b))
    }

    fn walk(&self, _name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        self.rounds(b, |op, b| op.walk(b, walk))
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let base = cx.rng.clone();
        let mut order: Vec<usize> = (0..self.transforms.len()).collect();
        for i in (1..order.len()).rev() {
            let j = cx.rng.int_inclusive(0, i as i64) as usize;
            order.swap(i, j);
        }
        for i in order {
            child(cx, &base, i, &self.transforms[i])?;
        }
        Ok(())
    }
}
