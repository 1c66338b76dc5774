//! Every op's schema, declared once beside its arguments struct (as DALI's
//! operator schema): its summary, its counterpart in torchvision (or timm),
//! and each argument's name, kind, default and meaning, in torchvision's
//! positional order.
//!
//! Everything else reads it: the JSON parser fills a missing argument with
//! its schema default ([`super::Op`]'s `Deserialize`), Rust constructors
//! build from it ([`construct`]), and the registry's catalogue
//! ([`super::catalog`]) gives it to the Python package (its classes and
//! stubs), `stoker transforms` and docs/transforms.md's op table.

use serde_json::Value;

/// What an argument accepts. Each kind has one converter in the Python
/// package (`stoker.transforms`), found by [`ArgKind::name`]; its JSON form
/// is what the op's Rust struct deserialises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A container's children: a non-empty list of ops.
    Transforms,
    /// A probability in [0, 1].
    Probability,
    Number,
    Int,
    OptInt,
    Bool,
    OptBool,
    /// A crop's size: an int or `[h, w]`.
    Size,
    /// Resize's size: an int (the shorter side), `[h, w]`, or None.
    ResizeSize,
    /// A blur kernel: an int or `[kx, ky]`.
    Kernel,
    /// A number or `[min, max]`.
    Range,
    OptRange,
    /// `[min, max]`.
    Pair,
    OptPair,
    /// None, a number, `[min, max]` or `[x min, x max, y min, y max]`.
    Shear,
    /// None, a number, or one per channel.
    Fill,
    /// An int, `[left/right, top/bottom]` or `[left, top, right, bottom]`.
    Padding,
    OptPadding,
    PaddingMode,
    /// torchvision's `InterpolationMode` by its value.
    Interpolation,
    /// timm's: random, bilinear or bicubic.
    TimmInterpolation,
    /// A dtype's name.
    Dtype,
    /// An `AutoAugmentPolicy`'s value.
    Policy,
    Str,
    /// None or one weight per child.
    Weights,
    /// One number per channel.
    PerChannel,
    /// A number, one per channel, or "random".
    EraseValue,
}

impl ArgKind {
    /// The kind's name, as the Python package's converters are keyed.
    pub fn name(self) -> &'static str {
        match self {
            Self::Transforms => "transforms",
            Self::Probability => "probability",
            Self::Number => "number",
            Self::Int => "int",
            Self::OptInt => "opt_int",
            Self::Bool => "bool",
            Self::OptBool => "opt_bool",
            Self::Size => "size",
            Self::ResizeSize => "resize_size",
            Self::Kernel => "kernel",
            Self::Range => "range",
            Self::OptRange => "opt_range",
            Self::Pair => "pair",
            Self::OptPair => "opt_pair",
            Self::Shear => "shear",
            Self::Fill => "fill",
            Self::Padding => "padding",
            Self::OptPadding => "opt_padding",
            Self::PaddingMode => "padding_mode",
            Self::Interpolation => "interpolation",
            Self::TimmInterpolation => "timm_interpolation",
            Self::Dtype => "dtype",
            Self::Policy => "policy",
            Self::Str => "str",
            Self::Weights => "weights",
            Self::PerChannel => "per_channel",
            Self::EraseValue => "erase_value",
        }
    }

    /// What the kind accepts, in words (the docs' op table).
    pub fn accepts(self) -> &'static str {
        match self {
            Self::Transforms => "list of transforms",
            Self::Probability => "probability",
            Self::Number => "number",
            Self::Int => "int",
            Self::OptInt => "int or None",
            Self::Bool => "bool",
            Self::OptBool => "bool or None",
            Self::Size => "int or [h, w]",
            Self::ResizeSize => "int, [h, w] or None",
            Self::Kernel => "int or [kx, ky]",
            Self::Range => "number or [min, max]",
            Self::OptRange => "number, [min, max] or None",
            Self::Pair => "[min, max]",
            Self::OptPair => "[a, b] or None",
            Self::Shear => "number, [min, max], [x min, x max, y min, y max] or None",
            Self::Fill => "number, [r, g, b] or None",
            Self::Padding => "int, [lr, tb] or [l, t, r, b]",
            Self::OptPadding => "int, [lr, tb], [l, t, r, b] or None",
            Self::PaddingMode => "constant, edge, reflect or symmetric",
            Self::Interpolation => "InterpolationMode",
            Self::TimmInterpolation => "random, bilinear or bicubic",
            Self::Dtype => "dtype",
            Self::Policy => "AutoAugmentPolicy",
            Self::Str => "string",
            Self::Weights => "list of weights or None",
            Self::PerChannel => "[r, g, b]",
            Self::EraseValue => "number, [r, g, b] or \"random\"",
        }
    }
}

/// One argument of an op.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    pub name: &'static str,
    pub kind: ArgKind,
    /// The default as JSON text; None for a required argument.
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

/// A required argument.
pub const fn required(name: &'static str, kind: ArgKind, doc: &'static str) -> Arg {
    Arg {
        name,
        kind,
        default: None,
        doc,
    }
}

/// An argument with its default, as JSON text.
pub const fn optional(name: &'static str, kind: ArgKind, default: &'static str, doc: &'static str) -> Arg {
    Arg {
        name,
        kind,
        default: Some(default),
        doc,
    }
}

/// Where an op's meaning comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `torchvision.transforms.v2.<name>`, with the same name, arguments,
    /// order and defaults.
    Torchvision,
    /// timm's `rand_augment_transform(config_str, hparams)`.
    Timm,
}

/// What a pipeline does with the op; groups the docs' table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Container,
    Geometry,
    Colour,
    Policy,
    /// Only RandomErasing: after the output conversion.
    Erase,
    /// The output conversion: the client's, on the delivered batch.
    Output,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Geometry => "geometry",
            Self::Colour => "colour",
            Self::Policy => "policy",
            Self::Erase => "erase",
            Self::Output => "output",
        }
    }
}

/// One op's schema.
#[derive(Clone, Copy, Debug)]
pub struct OpSchema {
    /// One sentence: what the op does to an image.
    pub doc: &'static str,
    pub origin: Origin,
    pub role: Role,
    /// In torchvision's positional order.
    pub args: &'static [Arg],
}

/// Implemented by every op's arguments struct, in the op's module.
pub trait Described {
    const SCHEMA: OpSchema;
}

impl OpSchema {
    /// The argument named `name`.
    pub fn arg(&self, name: &str) -> Option<&Arg> {
        self.args.iter().find(|a| a.name == name)
    }
}

impl Arg {
    /// The default as a JSON value (None when required). Every default
    /// parses: `every_schema_default_parses_and_round_trips` checks it.
    pub fn default_value(&self) -> Option<Value> {
        self.default.and_then(|text| serde_json::from_str(text).ok())
    }
}

/// Fills every argument `args` lacks with its schema default.
pub(crate) fn fill_defaults(schema: &OpSchema, args: &mut serde_json::Map<String, Value>) {
    for arg in schema.args {
        if !args.contains_key(arg.name)
            && let Some(value) = arg.default_value()
        {
            args.insert(arg.name.to_owned(), value);
        }
    }
}

/// The op `T` with `args` (a JSON object) and every other argument at its
/// schema default: what Rust's constructors build, so that none restates a
/// default. Only for arguments written in code; a schema default that does
/// not deserialise is a bug that `every_schema_default_deserialises`
/// catches.
pub(crate) fn construct<T: Described + serde::de::DeserializeOwned>(args: Value) -> T {
    let mut map = match args {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    fill_defaults(&T::SCHEMA, &mut map);
    match serde_json::from_value(Value::Object(map)) {
        Ok(op) => op,
        Err(e) => panic!("an op's schema defaults do not deserialise: {e}"),
    }
}
