//! The output conversion: ToImage, ToPureTensor, PILToTensor, ToTensor, ToDtype,
//! ConvertImageDtype, Normalize. Workers deliver uint8 pixels; these ops
//! tell the client how to convert them on the device (the loader's dtype,
//! mean and std), and tell RandomErasing what its value means.

use serde::{Deserialize, Serialize};

use super::op_impl::OpImpl;
use crate::params::{Bounds, Cx, PixelScale, ResolveError};
use crate::transform::schema::{ArgKind, Described, OpSchema, Origin, Role, optional, required};

/// The dtypes the client converts to.
pub const DTYPES: &[&str] = &["uint8", "float32", "float16", "bfloat16", "float64"];

fn check_dtype(dtype: &str) -> Result<(), String> {
    if DTYPES.contains(&dtype) {
        Ok(())
    } else {
        Err(format!("dtype {dtype:?} is not one of {}", DTYPES.join(", ")))
    }
}

macro_rules! marker {
    ($(#[$doc:meta])* $name:ident, |$cx:ident| $stage:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {}

        impl OpImpl for $name {
            fn validate(&self) -> Result<(), String> {
                Ok(())
            }

            fn bounds(&self, b: Bounds) -> Bounds {
                b
            }

            fn resolve(&self, $cx: &mut Cx<'_>) -> Result<(), ResolveError> {
                $cx.scale = $stage;
                Ok(())
            }

            fn is_output(&self) -> bool {
                true
            }
        }
    };
}

marker!(
    /// A tensor of the uint8 image (no change to pixels).
    ToImage,
    |cx| cx.scale
);

impl Described for ToImage {
    const SCHEMA: OpSchema = OpSchema {
        doc: "The image as a uint8 tensor (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[],
    };
}
marker!(
    /// Plain tensors out of tv_tensors: what Stoker delivers anyway.
    ToPureTensor,
    |cx| cx.scale
);

impl Described for ToPureTensor {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Plain tensors, not tv_tensors: what Stoker delivers (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[],
    };
}
marker!(
    /// A uint8 tensor of the image (no change to pixels).
    PILToTensor,
    |cx| cx.scale
);

impl Described for PILToTensor {
    const SCHEMA: OpSchema = OpSchema {
        doc: "The image as a uint8 tensor (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[],
    };
}
marker!(
    /// torchvision v1's `ToTensor`: float32 scaled to [0, 1].
    ToTensor,
    |cx| PixelScale::Float
);

impl Described for ToTensor {
    const SCHEMA: OpSchema = OpSchema {
        doc: "float32 in [0, 1] (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[],
    };
}

/// torchvision's `ToDtype`: to a float dtype only with `scale=True`
/// (values in [0, 1]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToDtype {
    pub dtype: String,
    pub scale: bool,
}

impl Described for ToDtype {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Converted to dtype; float dtypes need scale=True, to [0, 1] (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[
            required("dtype", ArgKind::Dtype, "uint8, float32, float16, bfloat16 or float64"),
            optional("scale", ArgKind::Bool, "false", "scale integers to [0, 1]"),
        ],
    };
}

impl OpImpl for ToDtype {
    fn validate(&self) -> Result<(), String> {
        check_dtype(&self.dtype)?;
        if self.dtype != "uint8" && !self.scale {
            return Err(format!(
                "dtype {} with scale=False keeps values in 0..255; Stoker converts to floats in [0, 1]: pass scale=True",
                self.dtype
            ));
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        if self.dtype != "uint8" {
            cx.scale = PixelScale::Float;
        }
        Ok(())
    }

    fn is_output(&self) -> bool {
        true
    }
}

/// torchvision v1's `ConvertImageDtype` (floats scaled to [0, 1]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertImageDtype {
    pub dtype: String,
}

impl Described for ConvertImageDtype {
    const SCHEMA: OpSchema = OpSchema {
        doc: "Converted to dtype, floats scaled to [0, 1] (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[optional(
            "dtype",
            ArgKind::Dtype,
            "\"float32\"",
            "uint8, float32, float16, bfloat16 or float64",
        )],
    };
}

impl OpImpl for ConvertImageDtype {
    fn validate(&self) -> Result<(), String> {
        check_dtype(&self.dtype)
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        if self.dtype != "uint8" {
            cx.scale = PixelScale::Float;
        }
        Ok(())
    }

    fn is_output(&self) -> bool {
        true
    }
}

/// `(x - mean) / std` per channel, on floats in [0, 1].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalize {
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
    pub inplace: bool,
}

impl Described for Normalize {
    const SCHEMA: OpSchema = OpSchema {
        doc: "(x - mean) / std per channel, on floats (output conversion).",
        origin: Origin::Torchvision,
        role: Role::Output,
        args: &[
            required("mean", ArgKind::PerChannel, "per-channel mean"),
            required("std", ArgKind::PerChannel, "per-channel standard deviation"),
            optional(
                "inplace",
                ArgKind::Bool,
                "false",
                "accepted for torchvision's signature; no effect",
            ),
        ],
    };
}

impl Normalize {
    /// Per channel (a single value applies to all three).
    pub fn channels(&self) -> ([f64; 3], [f64; 3]) {
        let three = |v: &[f64]| match v {
            [x] => [*x; 3],
            [a, b, c] => [*a, *b, *c],
            _ => [0.0; 3],
        };
        (three(&self.mean), three(&self.std))
    }
}

impl OpImpl for Normalize {
    fn validate(&self) -> Result<(), String> {
        for (what, v) in [("mean", &self.mean), ("std", &self.std)] {
            if v.len() != 1 && v.len() != 3 {
                return Err(format!("{what} must have 1 or 3 values, got {}", v.len()));
            }
            if !v.iter().all(|x| x.is_finite()) {
                return Err(format!("{what} {v:?} must be finite"));
            }
        }
        if self.std.iter().any(|s| *s <= 0.0) {
            return Err(format!("std {:?} must be positive", self.std));
        }
        Ok(())
    }

    fn bounds(&self, b: Bounds) -> Bounds {
        b
    }

    fn resolve(&self, cx: &mut Cx<'_>) -> Result<(), ResolveError> {
        let (mean, std) = self.channels();
        cx.scale = PixelScale::Normalized { mean, std };
        Ok(())
    }

    fn is_output(&self) -> bool {
        true
    }
}
