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

/// Declares [`ArgKind`] from one table, a row per kind: its variant, its
/// name (the key of its one converter in the Python package,
/// `stoker/_kinds.py`), what it accepts in words (the docs' op table), the
/// Python type a constructor's argument of the kind takes (the stubs'
/// annotation), and the type of the attribute it becomes (the converter's
/// JSON form, as Python holds it). Nothing else spells a kind: the
/// catalogue ([`super::catalog`]) gives these to the Python package, whose
/// stub generator and converter check read them from there.
macro_rules! arg_kinds {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident { name: $name:literal, accepts: $accepts:literal, python: $python:literal, value: $value:literal $(,)? }
    ),* $(,)?) => {
        /// What an argument accepts; its JSON form is what the op's Rust
        /// struct deserialises.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ArgKind {
            $($(#[doc = $doc])* $kind,)*
        }

        impl ArgKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [ArgKind] = &[$(Self::$kind),*];

            /// The kind's name, as the Python package's converters are keyed.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$kind => $name,)*
                }
            }

            /// What the kind accepts, in words (the docs' op table).
            pub fn accepts(self) -> &'static str {
                match self {
                    $(Self::$kind => $accepts,)*
                }
            }

            /// The Python type an argument of the kind takes: its annotation
            /// in the package's stubs (`stoker/transforms.pyi`).
            pub fn python_type(self) -> &'static str {
                match self {
                    $(Self::$kind => $python,)*
                }
            }

            /// The Python type of the attribute the argument becomes (its
            /// JSON form, `RandomResizedCrop(224).scale`).
            pub fn python_value(self) -> &'static str {
                match self {
                    $(Self::$kind => $value,)*
                }
            }
        }
    };
}

// The Python types use the names `stubgen.py` imports into the stubs:
// typing's `Any`, `Literal`, `Mapping` and `Sequence`, `enum.Enum`, and
// `Transform`.
arg_kinds! {
    /// A container's children: a non-empty list of ops. Each may be a
    /// Stoker op, an op dict or a torchvision transform (any object, told
    /// apart at run time: torchvision is not imported).
    Transforms { name: "transforms", accepts: "list of transforms", python: "Sequence[object]", value: "list[Transform]" },
    /// A probability in [0, 1].
    Probability { name: "probability", accepts: "probability", python: "float", value: "float" },
    Number { name: "number", accepts: "number", python: "float", value: "float" },
    Int { name: "int", accepts: "int", python: "int", value: "int" },
    OptInt { name: "opt_int", accepts: "int or None", python: "int | None", value: "int | None" },
    Bool { name: "bool", accepts: "bool", python: "bool", value: "bool" },
    OptBool { name: "opt_bool", accepts: "bool or None", python: "bool | None", value: "bool | None" },
    /// A crop's size: an int or `[h, w]`.
    Size { name: "size", accepts: "int or [h, w]", python: "int | Sequence[int]", value: "int | list[int]" },
    /// Resize's size: an int (the shorter side), `[h, w]`, or None.
    ResizeSize {
        name: "resize_size",
        accepts: "int, [h, w] or None",
        python: "int | Sequence[int] | None",
        value: "int | list[int] | None",
    },
    /// A blur kernel: an int or `[kx, ky]`.
    Kernel { name: "kernel", accepts: "int or [kx, ky]", python: "int | Sequence[int]", value: "int | list[int]" },
    /// A number or `[min, max]`.
    Range {
        name: "range",
        accepts: "number or [min, max]",
        python: "float | Sequence[float]",
        value: "float | list[float]",
    },
    OptRange {
        name: "opt_range",
        accepts: "number, [min, max] or None",
        python: "float | Sequence[float] | None",
        value: "float | list[float] | None",
    },
    /// `[min, max]`.
    Pair { name: "pair", accepts: "[min, max]", python: "Sequence[float]", value: "list[float]" },
    OptPair { name: "opt_pair", accepts: "[a, b] or None", python: "Sequence[float] | None", value: "list[float] | None" },
    /// Two ints.
    IntPair { name: "int_pair", accepts: "[a, b] of ints", python: "Sequence[int]", value: "list[int]" },
    /// An int or a list of ints.
    Ints { name: "ints", accepts: "int or list of ints", python: "int | Sequence[int]", value: "int | list[int]" },
    /// None or a list of numbers.
    OptNumbers {
        name: "opt_numbers",
        accepts: "list of numbers or None",
        python: "Sequence[float] | None",
        value: "list[float] | None",
    },
    /// None, a number, `[min, max]` or `[x min, x max, y min, y max]`.
    Shear {
        name: "shear",
        accepts: "number, [min, max], [x min, x max, y min, y max] or None",
        python: "float | Sequence[float] | None",
        value: "float | list[float] | None",
    },
    /// None, a number, or one per channel; or torchvision's dict of them
    /// keyed by input type (`{tv_tensors.Image: 127, "others": 0}`).
    Fill {
        name: "fill",
        accepts: "number, [r, g, b] or None",
        python: "float | Sequence[float] | Mapping[type | str, float | Sequence[float] | None] | None",
        value: "float | list[float] | None",
    },
    /// An int, `[left/right, top/bottom]` or `[left, top, right, bottom]`.
    Padding {
        name: "padding",
        accepts: "int, [lr, tb] or [l, t, r, b]",
        python: "int | Sequence[int]",
        value: "int | list[int]",
    },
    OptPadding {
        name: "opt_padding",
        accepts: "int, [lr, tb], [l, t, r, b] or None",
        python: "int | Sequence[int] | None",
        value: "int | list[int] | None",
    },
    PaddingMode {
        name: "padding_mode",
        accepts: "constant, edge, reflect or symmetric",
        python: "Literal['constant', 'edge', 'reflect', 'symmetric']",
        value: "Literal['constant', 'edge', 'reflect', 'symmetric']",
    },
    /// torchvision's `InterpolationMode`, its value, or a PIL resampling
    /// code.
    Interpolation { name: "interpolation", accepts: "InterpolationMode", python: "Enum | str | int", value: "str" },
    /// timm's: random, bilinear or bicubic (or as [`Self::Interpolation`]).
    TimmInterpolation {
        name: "timm_interpolation",
        accepts: "random, bilinear or bicubic",
        python: "Enum | str | int",
        value: "str",
    },
    /// A dtype's name, a torch or numpy dtype, or torchvision's dict of
    /// them keyed by input type: any object, as torch's dtypes cannot be
    /// named without importing torch; the converter checks it.
    Dtype { name: "dtype", accepts: "dtype", python: "object", value: "str" },
    /// An `AutoAugmentPolicy` or its value.
    Policy { name: "policy", accepts: "AutoAugmentPolicy", python: "Enum | str", value: "str" },
    Str { name: "str", accepts: "string", python: "str", value: "str" },
    /// torchvision's `BoundingBoxFormat` or its name.
    BoxFormat {
        name: "box_format",
        accepts: "XYXY, XYWH or CXCYWH",
        python: "Enum | str",
        value: "Literal['XYXY', 'XYWH', 'CXCYWH']",
    },
    /// None or one weight per child.
    Weights {
        name: "weights",
        accepts: "list of weights or None",
        python: "Sequence[float] | None",
        value: "list[float] | None",
    },
    /// One number per channel.
    PerChannel { name: "per_channel", accepts: "[r, g, b]", python: "float | Sequence[float]", value: "list[float]" },
    /// A number, one per channel, or "random".
    EraseValue {
        name: "erase_value",
        accepts: "number, [r, g, b] or \"random\"",
        python: "float | Sequence[float] | Literal['random']",
        value: "float | list[float] | Literal['random']",
    },
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
    /// torchvision's `references/detection/transforms.py` `<name>`, which
    /// the torchvision package does not ship: the same name, arguments
    /// and defaults.
    TorchvisionReferences,
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
    /// On the boxes alone ([`crate::targets`]); may follow the output
    /// conversion.
    Boxes,
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
            Self::Boxes => "boxes",
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
