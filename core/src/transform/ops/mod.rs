//! The op registry: one module per op, each with its arguments (serde,
//! torchvision's names and defaults), validation, size rule, memory
//! footprint and random draws. The `registry!` list below generates the
//! [`Op`] enum, the names, the JSON conversion and the dispatch; executors
//! (the CPU augmenter, the GPU lanes) see only the [`Step`]s an op resolves
//! to.
//!
//! Adding an op: write its module (an args struct implementing [`OpImpl`]),
//! add one line to `registry!`, and, if it needs a new kind of pixel work,
//! a [`Step`] variant with its CPU implementation in `stoker-image`.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::schema::{Described, OpSchema, fill_defaults};
use crate::params::{Bounds, Cx, ResolveError, Walk};

mod affine;
mod blur;
mod color;
mod container;
mod crop;
mod erase;
mod flip;
mod output;
mod pad;
mod photometric;
mod policy;
mod resize;
mod rotate;
mod timm;

pub use affine::RandomAffine;
pub use blur::GaussianBlur;
pub use color::{
    ColorJitter, Grayscale, RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomGrayscale, RandomInvert,
    RandomPosterize, RandomSolarize,
};
pub use container::{Compose, RandomApply, RandomChoice, RandomOrder};
pub use crop::{CenterCrop, RandomCrop, RandomResizedCrop};
pub use erase::{EraseValue, RandomErasing};
pub use flip::{RandomHorizontalFlip, RandomVerticalFlip};
pub use output::{ConvertImageDtype, Normalize, PILToTensor, ToDtype, ToImage, ToTensor};
pub use pad::Pad;
pub use photometric::{RandomChannelPermutation, RandomPhotometricDistort};
pub use policy::{AutoAugment, RandAugment, TrivialAugmentWide};
pub use resize::{Resize, ResizeSize};
pub use rotate::RandomRotation;
pub use timm::TimmRandAugment;

/// What every op implements.
pub trait OpImpl {
    /// Checks the arguments. The reason names the argument and its value.
    fn validate(&self) -> Result<(), String>;

    /// The sizes the op can output for inputs within `b`.
    fn bounds(&self, b: Bounds) -> Bounds;

    /// Extra bytes the op holds while it runs, besides its input and output
    /// images (of sizes within `inp` and `out`): a resize's pass between
    /// its two directions and its weights, a blur's float copy.
    fn scratch(&self, _inp: Bounds, _out: Bounds) -> u64 {
        0
    }

    /// Walks the op for [`crate::footprint`]: its sizes, and the most it
    /// holds. Containers walk their children.
    fn walk(&self, name: &'static str, b: Bounds, walk: &mut Walk) -> Bounds {
        let out = self.bounds(b);
        walk.step(name, b, out, self.scratch(b, out));
        out
    }

    /// Draws this sample's parameters from `cx.rng` and appends the steps
    /// for an image of `cx.w` x `cx.h`.
    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError>;

    /// Whether the op marks the end of the pixel pipeline (ToImage, ToDtype,
    /// Normalize): only RandomErasing may follow one.
    fn is_output(&self) -> bool {
        false
    }
}

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
    ToImage,
    PILToTensor,
    ToTensor,
    ToDtype,
    ConvertImageDtype,
    Normalize,
}

impl Op {
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
